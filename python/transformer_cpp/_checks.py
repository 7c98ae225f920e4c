"""Argument checks shared by the Python wrappers and the command line: each names the argument and
what it allows, so that a bad value is a one-line ``TypeError`` (a value of the wrong type) or
``ValueError`` (out of range) instead of being taken for something else (a string flag read as
``True``) or failing deep inside NumPy.

Numbers, flags and names are checked by one validator, :class:`Limit` (the core's, which checks the
model's and the optimiser's configurations with the same code): one message format,
``"<owner>: <name> must be <what is allowed>, got <value>"``. :func:`integer`, :func:`flag`,
:func:`choice` and :func:`seed` are its common uses."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from . import _core

__all__ = ["ADDITIVE_BLOCKED", "ANY", "Limit", "blocked", "choice", "flag", "integer", "number", "path", "seed"]

#: The allowed values of a setting: ``Limit(integer, low, high=inf, low_open=False,
#: high_open=False, unit="")``, ``Limit.flag()``, ``Limit.one_of(names)``; ``check(owner, name,
#: value)`` returns the value (an ``int``, ``float``, ``bool`` or ``str``) or raises.
Limit = _core.Limit


#: ``integer(..., low=ANY)``: no lower bound (any integer of 64 bits)
ANY = -(2**63)


def integer(owner: str, name: str, value: Any, low: int = 0, high: Optional[int] = None) -> int:
    """``value`` as an ``int`` if it is an integer in ``[low, high]`` (no upper bound with ``None``,
    none at all with ``low=ANY``); ``TypeError`` for anything but an integer (bools and floats
    included: ``2.0`` is almost always a mistake), ``ValueError`` outside the range."""
    limit = Limit(True, low) if high is None else Limit(True, low, high)
    return int(limit.check(owner, name, value))


def number(
    owner: str,
    name: str,
    value: Any,
    low: float,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a ``float`` if it is a finite number in the range (``TypeError``, ``ValueError``
    otherwise)."""
    return float(Limit(False, low, high, low_open, high_open).check(owner, name, value))


def flag(owner: str, name: str, value: Any) -> bool:
    """``value`` as a ``bool`` if it is one (``True``, ``False`` or a NumPy bool); ``TypeError``
    otherwise: ``"no"`` or ``"False"`` would otherwise count as true."""
    return bool(Limit.flag().check(owner, name, value))


def choice(owner: str, name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of the names ``choices`` (``TypeError`` for a non-str, ``ValueError``
    for another name)."""
    return str(Limit.one_of(list(choices)).check(owner, name, value))


def seed(owner: str, name: str, value: Any) -> int:
    """``value`` as an ``int`` if it is an integer >= 0 (what NumPy's generators take); ``TypeError``
    or ``ValueError`` naming the argument otherwise (NumPy would say only "expected non-negative
    integer", or take ``2.7`` as ``2``)."""
    return integer(owner, name, value, 0)


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


#: An additive mask blocks with -inf or a large negative number (the tutorials' -1e9); this one or lower.
ADDITIVE_BLOCKED = -1e4


def blocked(owner: str, name: str, value: Any) -> np.ndarray:
    """An attention mask as a boolean array of its shape, True = blocked: ``value`` is boolean, or
    numbers that are 0 (attend) and 1 (blocked), or an additive mask of 0 and -inf (or a number
    <= -1e4 such as -1e9). ``TypeError`` for another dtype; ``ValueError`` naming the first other
    value (NaN, 0.5, 2, +inf): such a mask means something else to whoever made it."""
    m = np.asarray(value)
    if m.dtype == np.bool_:
        return np.asarray(m)
    if m.dtype.kind not in "iuf":
        raise TypeError(
            f"{owner}: {name} must be a boolean or numeric array (True or 1 = blocked), got dtype {m.dtype}"
        )
    out = m != 0
    allowed = ~out | (m == 1) | (m <= ADDITIVE_BLOCKED)  # NaN fails every comparison
    if not allowed.all():
        bad = m[~allowed].flat[0]
        raise ValueError(
            f"{owner}: {name} must be boolean (True = blocked), or hold only 0 and 1 (1 = blocked), or be an "
            f"additive mask of 0 and -inf (or <= {ADDITIVE_BLOCKED:g}); got the value {bad.item()!r}"
        )
    return np.asarray(out, dtype=np.bool_)
