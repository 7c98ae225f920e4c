"""transformer-cpp: the Transformer of "Attention Is All You Need" with a multithreaded C++ core.

The C++ extension (``transformer_cpp._core``) is private; everything public is re-exported here.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _version

from .layers import Dropout, Linear
from ._runtime import build_info, get_num_threads, positional_encoding, set_num_threads

try:
    __version__ = _version("transformer-cpp")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = [
    "__version__",
    "Dropout",
    "Linear",
    "build_info",
    "get_num_threads",
    "positional_encoding",
    "set_num_threads",
]
