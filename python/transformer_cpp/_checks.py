"""Argument checks shared by the Python wrappers: each names the argument and what it allows, so
that a bad value is a one-line ``ValueError`` or ``TypeError`` instead of being taken for
something else (a string flag read as ``True``) or failing deep inside NumPy."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["flag", "path", "seed"]


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


EMPTY_PATH = "expected a path, got an empty string (an unset variable?); use '.' for the current directory"


def path(what: str, value: Any) -> Path:
    """``value`` (a ``str``, ``bytes`` or path object) as a ``Path`` with ``~`` expanded, else
    ``TypeError``, or ``ValueError("<what>: expected a path, got an empty string ...")``:
    ``Path("")`` is the current directory, so an unset shell variable (``--out "$RUN"``) would
    write checkpoints, figures or an average into whatever directory the command runs in. The
    command line's path options say the same (``argument --out: expected a path, ...``)."""
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{what}: expected a path (str or os.PathLike), got {type(value).__name__} {value!r:.60}")
    if isinstance(value, str) and not value:  # (a PathLike cannot be empty: Path("") is ".")
        raise ValueError(f"{what}: {EMPTY_PATH}")
    return Path(value).expanduser()
