"""Thin, typed wrappers over the runtime part of the C++ core (threads, build facts)."""

from __future__ import annotations

import numbers
from typing import Dict

import numpy as np

from . import _core

__all__ = ["positional_encoding", "set_num_threads", "get_num_threads", "build_info"]

_LAYOUTS = ("interleaved", "concatenated")


def _positive_int(value: object, name: str, who: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{who}: {name} must be a positive integer, got {value!r}")
    if int(value) <= 0:
        raise ValueError(f"{who}: {name} must be a positive integer, got {int(value)}")
    return int(value)


def positional_encoding(
    length: int, depth: int, layout: str = "interleaved", dtype: str = "float32"
) -> np.ndarray:
    """The sinusoidal positional encoding of "Attention Is All You Need", computed in C++.

    Args:
        length: number of positions (rows), > 0.
        depth: model width (columns), > 0; even for ``layout="concatenated"``.
        layout: ``"interleaved"`` (the paper, PyTorch): ``PE[pos, 2i] = sin(pos / 10000**(2i/depth))``
            and ``PE[pos, 2i+1] = cos(...)`` of the same angle; or ``"concatenated"`` (the
            TensorFlow tutorial): all sines first, then all cosines, with angle
            ``pos / 10000**(i/(depth/2))`` for ``i < depth/2``.
        dtype: ``"float32"`` (default) or ``"float64"``.

    Returns:
        A NumPy array of shape ``(length, depth)``.

    Raises:
        ValueError: for non-positive sizes, an odd depth with the concatenated layout, or an
            unknown layout or dtype.
    """
    who = "positional_encoding"
    length = _positive_int(length, "length", who)
    depth = _positive_int(depth, "depth", who)
    if layout not in _LAYOUTS:
        raise ValueError(f"{who}: unknown layout {layout!r}; expected one of {', '.join(map(repr, _LAYOUTS))}")
    dtype = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    return _core.positional_encoding(length, depth, layout, dtype)


def set_num_threads(n: int) -> None:
    """Set how many threads the C++ core uses (OpenMP loops and Eigen's parallel GEMM)."""
    _core.set_num_threads(_positive_int(n, "n", "set_num_threads"))


def get_num_threads() -> int:
    """The number of threads the C++ core will use."""
    return int(_core.get_num_threads())


def build_info() -> Dict[str, str]:
    """What the extension was built with: compiler, flags, OpenMP, Eigen version, SIMD level."""
    return dict(_core.build_info())
