"""The signatures pybind11 writes at the top of each bound function's docstring, read back.

pybind11 gives a bound function no ``__text_signature__``; its docstring starts instead with one
line such as ``forward(self: transformer_cpp._core.Dropout_float32, x: object, training: bool =
False) -> numpy.typing.NDArray[numpy.float32]`` and continues with the binding's own text. The
layers (:mod:`transformer_cpp.layers`) build an :class:`inspect.Signature` from it, and
``tools/gen_stubs.py`` writes ``_core.pyi`` from it.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from typing import Any, List, Optional

__all__ = ["BoundSignature", "Param", "parse", "split_top_level"]

MODULE = "transformer_cpp._core"


@dataclass(frozen=True)
class Param:
    name: str  # "x", "*args", "**kwargs"
    annotation: str  # as pybind11 wrote it ("" when it wrote none)
    default: Optional[str]  # the default's repr, or None for a required argument


@dataclass(frozen=True)
class BoundSignature:
    params: List[Param]  # after self
    returns: str
    doc: str  # the docstring after the signature line
    has_self: bool

    def to_inspect(self) -> inspect.Signature:
        """The signature with the default values (``...`` where the repr is not a literal) and
        the annotations as pybind11 wrote them for either scalar type (``numpy.floating`` for
        ``numpy.float32``, ``Name`` for ``Name_float32``), none where it wrote ``object``."""
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        params = [inspect.Parameter("self", kind)] if self.has_self else []
        for p in self.params:
            if p.name.startswith("**"):
                params.append(inspect.Parameter(p.name[2:], inspect.Parameter.VAR_KEYWORD))
            elif p.name.startswith("*"):
                params.append(inspect.Parameter(p.name[1:], inspect.Parameter.VAR_POSITIONAL))
            else:
                default = inspect.Parameter.empty if p.default is None else literal(p.default)
                params.append(inspect.Parameter(p.name, kind, default=default, annotation=_short(p.annotation)))
        return inspect.Signature(params, return_annotation=_short(self.returns))


def _short(annotation: str) -> Any:
    text = re.sub(r"_float(32|64)\b", "", annotation.replace(MODULE + ".", ""))
    text = re.sub(r"\bnumpy\.float(32|64)\b", "numpy.floating", text)
    # "object": the binding takes any value and checks it itself, which says nothing to a reader
    return inspect.Signature.empty if text in ("", "object") else text


def literal(text: str) -> Any:
    """A default's repr as a value: the literal it spells, or ``...`` (an object without one)."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return ...


def split_top_level(text: str) -> List[str]:
    """Split at commas outside brackets and quotes."""
    parts, depth, quote, current = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += ch
    if current.strip():
        parts.append(current)
    return parts


def parse(name: str, doc: Optional[str], method: bool) -> BoundSignature:
    """The signature on the first line of a bound function's ``doc`` (``name`` is its name, ""
    for a property's getter or setter) and the docstring after it. ``ValueError`` when the first
    line is not such a signature (an overloaded function has several)."""
    doc = doc or ""
    first, _, rest = doc.partition("\n")
    if not first.startswith(name + "(") or ") -> " not in first:
        raise ValueError(f"{name}: no pybind11 signature in its docstring: {first!r}")
    inner, returns = first[len(name) + 1 :].rsplit(") -> ", 1)
    params: List[Param] = []
    for part in split_top_level(inner):
        head, eq, default = part.partition("=")
        arg, _, annotation = head.partition(":")
        params.append(Param(arg.strip(), annotation.strip(), default.strip() if eq else None))
    has_self = method and bool(params) and params[0].name in ("self", "arg0")
    return BoundSignature(params[1:] if has_self else params, returns.strip(), rest.strip(), has_self)
