"""The decoding kernels and the bfloat16 matrix-product kernel of the C++ core, one at a time.

``Transformer.greedy_decode`` and ``beam_search`` multiply the few rows of each decoding step by
weights packed once into 32-wide panels (see ``cpp/include/transformer/kernels/decode_kernels.hpp``).
This module exposes those kernels on their own so that the tests can compare them with NumPy,
and so that a curious reader can call them. Nothing here is needed to use the package.

``Transformer(..., precision="bf16")`` runs the products of its dense layers with bfloat16 inputs
and float32 sums (see ``cpp/include/transformer/kernels/bf16_gemm.hpp``); :func:`bf16_matmul` is that
kernel on its own, with its readable reference.

In float32 the dense layers' products run on an AVX-512 kernel when the CPU has AVX-512F (and
runs 512-bit multiply-adds whole: AMD Zen 4, which splits them in two, gets the AVX2 one), an
AVX2 + FMA kernel when it has those (see ``cpp/include/transformer/kernels/f32_gemm.hpp``), and
Eigen's GEMM otherwise; :func:`f32_matmul` is each kernel on its own, with its readable reference.

Which kernels run is decided at run time by the CPU's instruction-set level (``avx512``, ``avx2``
or ``generic``), which the ``TRANSFORMER_CPP_ISA`` environment variable can lower (see
``cpp/include/transformer/kernels/isa.hpp``); ``transformer_cpp.build_info()`` names the level and
the kernel of each product.

``Transformer.greedy_decode(..., compute_type="int8" | "bf16")`` multiplies by a low-precision
copy of the weights (see ``cpp/include/transformer/kernels/quantized_linear.hpp``); :func:`quantized_linear`
is that kernel on its own, with its reference and the dequantised weight it multiplies with.
"""

from __future__ import annotations

import numpy as np

from . import _core

__all__ = [
    "have_decode_kernels",
    "decode_linear",
    "first_argmax",
    "sampling_distribution",
    "fingerprint",
    "have_bf16",
    "bf16_unsupported_reason",
    "bf16_matmul",
    "bf16_kernel",
    "have_amx",
    "amx_unsupported_reason",
    "round_to_bf16",
    "COMPUTE_TYPES",
    "have_compute_type",
    "compute_type_unsupported_reason",
    "quantized_linear",
    "have_f32_kernel",
    "f32_matmul",
]

_KERNELS = ("packed", "packed_reference", "few_rows")


def have_decode_kernels() -> bool:
    """Whether the float32 decoding kernels (AVX2 + FMA or AVX-512) run here: an x86-64 build at
    instruction-set level ``avx2`` or ``avx512``. Without them decoding uses the dense layers'
    GEMM for every product."""
    return bool(_core._have_decode_kernels())


def decode_linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, kernel: str = "packed") -> np.ndarray:
    """``x @ weight.T + bias`` in float32 by one decoding kernel.

    Args:
        x: (R, K) input rows.
        weight: (N, K), ``(out_features, in_features)`` as in :class:`transformer_cpp.Linear`.
        bias: (N,).
        kernel: ``"packed"`` (pack the weight into panels, then the register-blocked kernel; the
            plain loop at the generic level), ``"packed_reference"`` (the plain loop over the
            packed layout) or ``"few_rows"`` (the unpacked AVX2 or AVX-512 kernel,
            which needs ``K % 16 == 0``).

    Returns:
        float32 array (R, N).
    """
    if kernel not in _KERNELS:
        raise ValueError(f"decode_linear: kernel must be one of {', '.join(map(repr, _KERNELS))}, got {kernel!r}")
    return _core._decode_linear(x, weight, bias, kernel)


def sampling_distribution(logits: np.ndarray, top_k: int, top_p: float = 1.0, temperature: float = 1.0) -> np.ndarray:
    """The float64 (V,) distribution the C++ sampler draws from for one row of logits: divided by
    ``temperature``, then the ``top_k`` most likely ids (ties: the lower id), then the fewest of
    those whose probability reaches ``top_p``, renormalised; the padding id 0 is never drawn."""
    return np.asarray(_core.sampling_distribution(logits, int(top_k), float(top_p), float(temperature)))


def first_argmax(values: np.ndarray) -> int:
    """Index of the first largest element of a 1-D float32 array (the decoder's greedy choice);
    NaNs are never chosen while a number exists."""
    return int(_core._first_argmax(values))


def fingerprint(data: np.ndarray, seed: int = 0) -> int:
    """The 64-bit fingerprint of a C-contiguous array's bytes that decides whether the packed
    decoder weights still match the model's (any single changed element changes it)."""
    if not isinstance(data, np.ndarray):
        raise TypeError(f"fingerprint: data must be a NumPy array, got {type(data).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**64:
        raise ValueError(f"fingerprint: seed must be an integer in [0, 2**64), got {seed!r}")
    return int(_core._fingerprint(data, int(seed)))


_BF16_KERNELS = ("auto", "avx512_bf16", "amx", "reference")


def have_bf16() -> bool:
    """Whether ``precision="bf16"`` can run here: a CPU (and OS) with AVX512_BF16 and AVX512F/BW/VL,
    a build that has the kernel, and no ``TRANSFORMER_CPP_DISABLE_BF16`` in the environment (set
    it to a non-empty value other than ``"0"`` to turn the kernel off, e.g. to test the error)."""
    return bool(_core._bf16_supported())


def bf16_unsupported_reason() -> str:
    """Why :func:`have_bf16` is false, in a sentence (``""`` when it is true)."""
    return str(_core._bf16_unsupported_reason())


def bf16_kernel() -> str:
    """The instructions of the ``precision="bf16"`` products here: ``"amx"`` (the tile registers of
    Intel Xeon since Sapphire Rapids, when the OS grants them; ``TRANSFORMER_CPP_DISABLE_AMX`` turns
    them off) or ``"avx512_bf16"``. Meaningful when :func:`have_bf16` is true."""
    return str(_core._bf16_kernel())


def have_amx(ignore_environment: bool = False) -> bool:
    """Whether the AMX tiles compute the bf16 products here (or, with ``ignore_environment``,
    could: CPU, OS and build, whatever ``TRANSFORMER_CPP_DISABLE_AMX`` says)."""
    return bool(_core._bf16_amx_cpu_supported() if ignore_environment else _core._bf16_amx_supported())


def amx_unsupported_reason() -> str:
    """Why :func:`have_amx` is false, in a sentence (``""`` when it is true)."""
    return str(_core._bf16_amx_unsupported_reason())


def bf16_matmul(
    a: np.ndarray,
    b: np.ndarray,
    trans_a: bool = False,
    trans_b: bool = False,
    c: np.ndarray | None = None,
    kernel: str = "auto",
) -> np.ndarray:
    """``op(a) @ op(b)`` (``+ c``) with every input rounded to bfloat16 and the products summed in
    float32: the matrix product of ``precision="bf16"``.

    Args:
        a, b: 2-D float arrays (converted to float32); ``op(x)`` is ``x.T`` when ``trans_x``.
        c: optional (M, N) float32 array added to the product (the gradient accumulation).
        kernel: ``"auto"`` (what the layers use: :func:`bf16_kernel`), ``"avx512_bf16"`` (the
            ``vdpbf16ps`` kernel; ValueError on a CPU without AVX512_BF16), ``"amx"`` (the AMX
            tiles; ValueError on a CPU or OS without them) or ``"reference"`` (the same rounding,
            products summed in float64: the readable loop the tests compare the kernels with).

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


#: The decoders' compute types (``Transformer.greedy_decode``, ``beam_search``, ``Translator``).
COMPUTE_TYPES = ("float32", "int8", "bf16")
_QUANTIZED_KERNELS = ("kernel", "reference", "weight")


def _compute_type(name: str, who: str) -> str:
    if not isinstance(name, str) or name not in COMPUTE_TYPES:
        raise ValueError(f"{who}: compute_type must be one of {', '.join(map(repr, COMPUTE_TYPES))}, got {name!r}")
    return name


def have_compute_type(name: str) -> bool:
    """Whether decoding with compute type ``name`` can run here: ``"float32"`` always; ``"int8"``
    needs AVX2 + FMA (AVX-VNNI or AVX512_VNNI where the CPU has them; ``TRANSFORMER_CPP_DISABLE_INT8``
    turns it off),
    ``"bf16"`` AVX512_BF16 (``TRANSFORMER_CPP_DISABLE_BF16``)."""
    return bool(_core._compute_type_supported(_compute_type(name, "have_compute_type")))


def compute_type_unsupported_reason(name: str) -> str:
    """Why :func:`have_compute_type` is false, in a sentence (``""`` when it is true)."""
    return str(_core._compute_type_unsupported_reason(_compute_type(name, "compute_type_unsupported_reason")))


def quantized_linear(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, compute_type: str = "int8", kernel: str = "kernel"
) -> np.ndarray:
    """``x @ weight.T + bias`` as the decoder computes it with ``compute_type`` ``"int8"`` or ``"bf16"``.

    int8: each row of ``weight`` gets the scale ``max|row| / 127`` and is rounded to integers in
    [-127, 127]; each row of ``x`` likewise (``round(x * (127 / max|x row|))``, ties to even) when
    the product runs; the integer products are summed exactly in int32 and the result is
    ``sum * weight_scale * x_scale + bias``. bf16: ``x`` and ``weight`` rounded to bfloat16, the
    products summed in float32.

    Args:
        x: (R, K); weight: (N, K); bias: (N,) (converted to float32).
        kernel: ``"kernel"`` (int8: AVX512_VNNI, AVX-VNNI or AVX2; bf16: AVX512_BF16; ValueError
            where none runs),
            ``"reference"`` (the same rounding, products summed exactly in int64 or float64) or
            ``"weight"`` (the (N, K) dequantised weight the kernel multiplies with; ``x`` unused).

    Returns:
        float32 array (R, N) (``"weight"``: (N, K)).
    """
    _compute_type(compute_type, "quantized_linear")
    if compute_type == "float32":
        raise ValueError("quantized_linear: compute_type must be 'int8' or 'bf16' (float32 is decode_linear)")
    if kernel not in _QUANTIZED_KERNELS:
        raise ValueError(
            f"quantized_linear: kernel must be one of {', '.join(map(repr, _QUANTIZED_KERNELS))}, got {kernel!r}"
        )
    return _core._quantized_linear(x, weight, bias, compute_type, kernel)


_F32_KERNELS = ("auto", "avx512", "avx2", "reference")


def have_f32_kernel(kernel: str | None = None) -> bool:
    """Whether the float32 dense-layer products run on one of the package's kernels here (AVX-512
    or AVX2 + FMA; Eigen's GEMM otherwise), or, with ``kernel`` (``"avx512"`` or ``"avx2"``),
    whether that kernel can run: the CPU (and OS) has its instructions, the build has it and the
    instruction-set level (``TRANSFORMER_CPP_ISA``) allows it. Without ``kernel``,
    ``TRANSFORMER_CPP_DISABLE_F32_KERNEL`` (a non-empty value other than ``"0"``) turns the kernels
    off, and the dense layers use Eigen's GEMM."""
    if kernel is None:
        return bool(_core._f32_kernel_supported())
    if kernel not in ("avx512", "avx2"):
        raise ValueError(f"have_f32_kernel: kernel must be None, 'avx512' or 'avx2', got {kernel!r}")
    return bool(_core._f32_kernel_runs(kernel))


def f32_matmul(
    a: np.ndarray,
    b: np.ndarray,
    trans_a: bool = False,
    trans_b: bool = False,
    c: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    kernel: str = "auto",
) -> np.ndarray:
    """``op(a) @ op(b)`` (``+ c``) (``+ bias`` on every row) in float32: the matrix product of the
    float32 dense layers.

    Args:
        a, b: 2-D float arrays (converted to float32); ``op(x)`` is ``x.T`` when ``trans_x``.
        c: optional (M, N) float32 array added to the product (the gradient accumulation).
        bias: optional (N,) float32 array added to every row (the layer's bias).
        kernel: ``"auto"`` (the kernel the dense layers use), ``"avx512"`` or ``"avx2"`` (that
            kernel; ValueError where it cannot run, see :func:`have_f32_kernel`) or ``"reference"``
            (products summed in float64: the readable loop the tests compare the kernels with).

    Returns:
        float32 array (M, N).
    """
    if kernel not in _F32_KERNELS:
        raise ValueError(f"f32_matmul: kernel must be one of {', '.join(map(repr, _F32_KERNELS))}, got {kernel!r}")
    return _core._f32_matmul(a, b, bool(trans_a), bool(trans_b), c, bias, kernel)
