"""The decoding kernels of the C++ core, one at a time.

``Transformer.greedy_decode`` and ``beam_search`` multiply the few rows of each decoding step by
weights packed once into 32-wide panels (see ``cpp/include/transformer/decode_kernels.hpp``).
This module exposes those kernels on their own so that the tests can compare them with NumPy,
and so that a curious reader can call them. Nothing here is needed to use the package.
"""

from __future__ import annotations

import numpy as np

from . import _core

__all__ = ["have_decode_kernels", "decode_linear", "first_argmax", "fingerprint"]

_KERNELS = ("packed", "packed_reference", "few_rows")


def have_decode_kernels() -> bool:
    """Whether this build has the float32 AVX-512 kernels (a ``-march=native`` build on a CPU
    with AVX-512F). Without them decoding uses Eigen's GEMM for every product."""
    return bool(_core._have_decode_kernels())


def decode_linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, kernel: str = "packed") -> np.ndarray:
    """``x @ weight.T + bias`` in float32 by one decoding kernel.

    Args:
        x: (R, K) input rows.
        weight: (N, K), ``(out_features, in_features)`` as in :class:`transformer_cpp.Linear`.
        bias: (N,).
        kernel: ``"packed"`` (pack the weight into panels, then the register-blocked kernel; the
            plain loop when the build has no AVX-512 kernels), ``"packed_reference"`` (the
            plain loop over the packed layout) or ``"few_rows"`` (the unpacked AVX-512 kernel,
            which needs ``K % 16 == 0``).

    Returns:
        float32 array (R, N).
    """
    if kernel not in _KERNELS:
        raise ValueError(f"decode_linear: kernel must be one of {', '.join(map(repr, _KERNELS))}, got {kernel!r}")
    return _core._decode_linear(x, weight, bias, kernel)


def first_argmax(values: np.ndarray) -> int:
    """Index of the first largest element of a 1-D float32 array (the decoder's greedy choice);
    NaNs are never chosen while a number exists."""
    return int(_core._first_argmax(values))


def fingerprint(data: np.ndarray, seed: int = 0) -> int:
    """The 64-bit fingerprint of a C-contiguous array's bytes that decides whether the packed
    decoder weights still match the model's (any single changed element changes it)."""
    if not isinstance(data, np.ndarray):
        raise TypeError(f"fingerprint: data must be a NumPy array, got {type(data).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2 ** 64:
        raise ValueError(f"fingerprint: seed must be an integer in [0, 2**64), got {seed!r}")
    return int(_core._fingerprint(data, int(seed)))
