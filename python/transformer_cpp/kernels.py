"""The decoding kernels and the bfloat16 matrix-product kernel of the C++ core, one at a time.

``Transformer.greedy_decode`` and ``beam_search`` multiply the few rows of each decoding step by
weights packed once into 32-wide panels (see ``cpp/include/transformer/decode_kernels.hpp``).
This module exposes those kernels on their own so that the tests can compare them with NumPy,
and so that a curious reader can call them. Nothing here is needed to use the package.

``Transformer(..., precision="bf16")`` runs the products of its dense layers with bfloat16 inputs
and float32 sums (see ``cpp/include/transformer/bf16_gemm.hpp``); :func:`bf16_matmul` is that
kernel on its own, with its readable reference.

In float32 the dense layers' products run on an AVX-512 kernel when the CPU has AVX-512F (see
``cpp/include/transformer/f32_gemm.hpp``; Eigen's GEMM otherwise); :func:`f32_matmul` is that
kernel on its own, with its readable reference.
"""

from __future__ import annotations

import numpy as np

from . import _core

__all__ = ["have_decode_kernels", "decode_linear", "first_argmax", "fingerprint", "have_bf16",
           "bf16_unsupported_reason", "bf16_matmul", "round_to_bf16", "have_f32_kernel", "f32_matmul"]

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


_BF16_KERNELS = ("avx512_bf16", "reference")


def have_bf16() -> bool:
    """Whether ``precision="bf16"`` can run here: a CPU (and OS) with AVX512_BF16 and AVX512F/BW/VL,
    a build that has the kernel, and no ``TRANSFORMER_CPP_DISABLE_BF16`` in the environment (set
    it to a non-empty value other than ``"0"`` to turn the kernel off, e.g. to test the error)."""
    return bool(_core._bf16_supported())


def bf16_unsupported_reason() -> str:
    """Why :func:`have_bf16` is false, in a sentence (``""`` when it is true)."""
    return str(_core._bf16_unsupported_reason())


def bf16_matmul(a: np.ndarray, b: np.ndarray, trans_a: bool = False, trans_b: bool = False,
                c: np.ndarray | None = None, kernel: str = "avx512_bf16") -> np.ndarray:
    """``op(a) @ op(b)`` (``+ c``) with every input rounded to bfloat16 and the products summed in
    float32: the matrix product of ``precision="bf16"``.

    Args:
        a, b: 2-D float arrays (converted to float32); ``op(x)`` is ``x.T`` when ``trans_x``.
        c: optional (M, N) float32 array added to the product (the gradient accumulation).
        kernel: ``"avx512_bf16"`` (the kernel; ValueError on a CPU without AVX512_BF16) or
            ``"reference"`` (the same rounding, products summed in float64: the readable loop the
            tests compare the kernel with).

    Returns:
        float32 array (M, N).
    """
    if kernel not in _BF16_KERNELS:
        raise ValueError(f"bf16_matmul: kernel must be one of {', '.join(map(repr, _BF16_KERNELS))}, got {kernel!r}")
    return _core._bf16_matmul(a, b, bool(trans_a), bool(trans_b), c, kernel)


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """``x`` (as float32) rounded to the nearest bfloat16, ties to even, returned as float32 (the
    rounding the kernel applies to its inputs; subnormals become zero, as the instruction does)."""
    return _core._round_to_bf16(x)


_F32_KERNELS = ("avx512", "reference")


def have_f32_kernel() -> bool:
    """Whether the float32 dense-layer products run on the AVX-512 kernel here: a CPU (and OS)
    with AVX-512F, a build that has the kernel, and no ``TRANSFORMER_CPP_DISABLE_F32_KERNEL`` in the
    environment (a non-empty value other than ``"0"`` turns it off: Eigen's GEMM is used then)."""
    return bool(_core._f32_kernel_supported())


def f32_matmul(a: np.ndarray, b: np.ndarray, trans_a: bool = False, trans_b: bool = False,
               c: np.ndarray | None = None, bias: np.ndarray | None = None, kernel: str = "avx512") -> np.ndarray:
    """``op(a) @ op(b)`` (``+ c``) (``+ bias`` on every row) in float32: the matrix product of the
    float32 dense layers.

    Args:
        a, b: 2-D float arrays (converted to float32); ``op(x)`` is ``x.T`` when ``trans_x``.
        c: optional (M, N) float32 array added to the product (the gradient accumulation).
        bias: optional (N,) float32 array added to every row (the layer's bias).
        kernel: ``"avx512"`` (the kernel; ValueError where :func:`have_f32_kernel` is false) or
            ``"reference"`` (products summed in float64: the readable loop the tests compare the
            kernel with).

    Returns:
        float32 array (M, N).
    """
    if kernel not in _F32_KERNELS:
        raise ValueError(f"f32_matmul: kernel must be one of {', '.join(map(repr, _F32_KERNELS))}, got {kernel!r}")
    return _core._f32_matmul(a, b, bool(trans_a), bool(trans_b), c, bias, kernel)
