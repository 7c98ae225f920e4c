"""Argument checks shared by the Python wrappers: each names the argument and what it allows, so
that a bad value is a one-line ``ValueError`` or ``TypeError`` instead of being taken for
something else (a string flag read as ``True``) or failing deep inside NumPy."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["flag", "seed"]


def flag(owner: str, name: str, value: Any) -> bool:
    """``value`` as a ``bool`` if it is one (``True``, ``False`` or a NumPy bool); ``TypeError``
    otherwise: ``"no"`` or ``"False"`` would otherwise count as true."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{owner}: {name} must be True or False, got {type(value).__name__} {value!r:.60}")
    return bool(value)


def seed(owner: str, name: str, value: Any) -> int:
    """``value`` as an ``int`` if it is an integer >= 0 (what NumPy's generators take); ``TypeError``
    or ``ValueError`` naming the argument otherwise (NumPy would say only "expected non-negative
    integer", or take ``2.7`` as ``2``)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{owner}: {name} must be an integer >= 0, got {type(value).__name__} {value!r:.60}")
    if int(value) < 0:
        raise ValueError(f"{owner}: {name} must be an integer >= 0, got {int(value)}")
    return int(value)
