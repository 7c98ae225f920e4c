"""Whole-number attributes that an object keeps on another object it holds: a model's counters on
its C++ core, a tokenizer's special ids in its :class:`~typing.NamedTuple` of them."""

from __future__ import annotations

from typing import Any, Optional, overload

__all__ = ["Delegated", "SettableDelegated"]


class Delegated:
    """A read-only int attribute that lives on the object's ``holder`` attribute under the same
    name: reading it gives ``int(getattr(obj.<holder>, name))``."""

    def __init__(self, holder: str, doc: str) -> None:
        self.holder = holder
        self.name = ""
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: Optional[type] = None) -> "Delegated": ...
    @overload
    def __get__(self, obj: object, owner: Optional[type] = None) -> int: ...
    def __get__(self, obj: object, owner: Optional[type] = None) -> Any:
        return self if obj is None else int(getattr(getattr(obj, self.holder), self.name))

    def __set__(self, obj: object, value: int) -> None:
        raise AttributeError(f"{type(obj).__name__}.{self.name} is read-only")


class SettableDelegated(Delegated):
    """A :class:`Delegated` attribute that can be set: setting it sets the holder's."""

    def __set__(self, obj: object, value: int) -> None:
        setattr(getattr(obj, self.holder), self.name, value)
