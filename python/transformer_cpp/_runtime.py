"""Thin, typed wrappers over the runtime part of the C++ core (threads, build facts)."""

from __future__ import annotations

import numbers
import os
import warnings
from typing import Dict

import numpy as np


def _affordable_threads() -> int:
    """The most OpenMP threads whose stacks fit in half of the address space an rlimit (ulimit -v)
    leaves, at most 1024: the core's ``affordable_threads`` (runtime.cpp), computed here because
    it is needed before the core (and OpenMP with it) is loaded."""
    import resource

    most = 1024
    limits = [resource.getrlimit(r)[0] for r in (resource.RLIMIT_AS, getattr(resource, "RLIMIT_DATA", None)) if r is not None]
    limits = [x for x in limits if x != resource.RLIM_INFINITY]
    if not limits:
        return most
    try:
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        used = 0
    stack = resource.getrlimit(resource.RLIMIT_STACK)[0]
    stack = 2 << 20 if stack == resource.RLIM_INFINITY else stack
    text = os.environ.get("OMP_STACKSIZE", "").strip()
    if text:
        number = text.rstrip("bBkKmMgG ")
        try:
            unit = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1 << 10)
            stack = int(float(number) * unit)
        except ValueError:
            pass
    room = max(0, min(limits) - used)
    return min(most, int(room / 2 / (stack + 65536)) + 1)


def _tame_thread_environment() -> None:
    """Lower OMP_NUM_THREADS before OpenMP reads it (when the core is loaded) if it asks for more
    threads than the core allows or the address space holds: OpenMP would kill the process at
    the first parallel loop (every thread started later begins with that count)."""
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    try:
        asked = int(text.split(",")[0]) if text else len(os.sched_getaffinity(0))
    except (ValueError, AttributeError, OSError):
        return  # OpenMP ignores (with a warning) what it cannot parse
    most = _affordable_threads()
    if asked > most:
        os.environ["OMP_NUM_THREADS"] = str(most)
        warnings.warn(f"transformer_cpp: OMP_NUM_THREADS asks for {asked} threads, more than the core allows (1024) "
                      f"or the address space holds (ulimit -v); using {most}", RuntimeWarning, stacklevel=3)


_tame_thread_environment()

from . import _core  # noqa: E402  (after the environment is tamed: OpenMP reads it when this loads)

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
