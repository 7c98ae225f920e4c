"""The float32 matrix-product kernels of the dense layers (AVX-512, AVX2 + FMA) against their
readable reference.

Tolerance, and why: the reference sums the K products (and C, and the bias) in float64 and rounds
once; the kernel sums them in float32 with fused multiply-adds, each step rounding once (at most
2**-24 of the running sum, itself at most sum_k |a_k b_k| + |C| + |bias|). So, element by element,
|kernel - reference| <= (K + 3) * 2**-24 * (|A| |B| + |C| + |bias|).

Each kernel the CPU can run is tested on its own (an AVX-512 CPU runs both; ``TRANSFORMER_CPP_ISA``
lowers the level). The model-level checks (float64 finite differences, PyTorch parity in float32)
run through the active kernel wherever there is one, since every float32 dense layer uses it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp import kernels

from helpers.kernels import splits_512bit_fma

needs_kernel = pytest.mark.skipif(not kernels.have_f32_kernel(), reason="no float32 kernel runs here")
# each kernel this CPU can run (at its instruction-set level)
KERNELS = [
    pytest.param(k, marks=pytest.mark.skipif(not kernels.have_f32_kernel(k), reason=f"the {k} kernel cannot run here"))
    for k in ("avx512", "avx2")
]

U32 = 2.0**-24  # float32 unit roundoff


def operands(rng, M, N, K, trans_a, trans_b, with_c, with_bias):
    a = rng.standard_normal((K, M) if trans_a else (M, K)).astype(np.float32)
    b = rng.standard_normal((N, K) if trans_b else (K, N)).astype(np.float32)
    c = rng.standard_normal((M, N)).astype(np.float32) if with_c else None
    bias = rng.standard_normal(N).astype(np.float32) if with_bias else None
    return a, b, c, bias


def bound(a, b, c, bias, trans_a, trans_b):
    """(K + 3) u (|op(a)| |op(b)| + |c| + |bias|), element by element."""
    A = np.abs(a.T if trans_a else a).astype(np.float64)
    B = np.abs(b.T if trans_b else b).astype(np.float64)
    mag = A @ B
    if c is not None:
        mag += np.abs(c)
    if bias is not None:
        mag += np.abs(bias)
    return (A.shape[1] + 3) * U32 * mag


def test_reference_is_the_float64_product():
    rng = np.random.default_rng(0)
    for trans_a in (False, True):
        for trans_b in (False, True):
            a, b, c, bias = operands(rng, 7, 9, 11, trans_a, trans_b, True, True)
            got = kernels.f32_matmul(a, b, trans_a, trans_b, c, bias, kernel="reference")
            exact = (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b).astype(np.float64) + c + bias
            np.testing.assert_allclose(got, exact.astype(np.float32), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize(
    "M,N,K",
    [
        (1, 1, 1),
        (13, 33, 7),
        (12, 32, 256),
        (6, 16, 9),
        (11, 31, 257),
        (50, 70, 300),
        (257, 129, 513),
        (100, 4000, 128),
        (600, 40, 600),
        (37, 45, 1100),
    ],
)
def test_kernel_matches_reference(M, N, K, trans_a, trans_b, kernel):
    """Odd shapes: partial tiles in rows and columns (AVX-512 tiles are 12 x 32, AVX2 ones 6 x
    16), K across several blocks of nearly equal size (at most 256 values of k at AVX-512 and 512
    at AVX2: 513 is three blocks of 171 or two of 257 and 256, 600 three of 200 or two of 300,
    1,100 five or three, the last one shorter)."""
    rng = np.random.default_rng(M * 1000 + N + K)
    for with_c, with_bias in ((False, False), (True, False), (False, True), (True, True)):
        a, b, c, bias = operands(rng, M, N, K, trans_a, trans_b, with_c, with_bias)
        got = kernels.f32_matmul(a, b, trans_a, trans_b, c, bias, kernel=kernel)
        ref = kernels.f32_matmul(a, b, trans_a, trans_b, c, bias, kernel="reference")
        assert got.shape == (M, N)
        err = np.abs(got.astype(np.float64) - ref)
        assert np.all(err <= bound(a, b, c, bias, trans_a, trans_b)), float(err.max())


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_shapes_of_a_training_step(kernel):
    """The quick preset's products: forward y = x W^T + b, dx = dy W, dW += dy^T x."""
    rng = np.random.default_rng(1)
    rows = 700
    for d_in, d_out in ((128, 384), (128, 512), (512, 128), (128, 4000)):
        x = rng.standard_normal((rows, d_in)).astype(np.float32)
        w = (rng.standard_normal((d_out, d_in)) * 0.1).astype(np.float32)
        bias = rng.standard_normal(d_out).astype(np.float32)
        dy = rng.standard_normal((rows, d_out)).astype(np.float32)
        dw = rng.standard_normal((d_out, d_in)).astype(np.float32)
        for args in (
            (x, w, False, True, None, bias),
            (dy, w, False, False, None, None),
            (dy, x, True, False, dw, None),
        ):
            got = kernels.f32_matmul(*args, kernel=kernel)
            ref = kernels.f32_matmul(*args, kernel="reference")
            a, b, ta, tb, c, bb = args
            assert np.all(np.abs(got.astype(np.float64) - ref) <= bound(a, b, c, bb, ta, tb))


def at_one_and_two_threads(*args, kernel):
    """f32_matmul(*args) at 1 thread, then at 2: (one, two)."""
    before = tc.get_num_threads()
    try:
        tc.set_num_threads(1)
        one = kernels.f32_matmul(*args, kernel=kernel)
        tc.set_num_threads(2)
        two = kernels.f32_matmul(*args, kernel=kernel)
    finally:
        tc.set_num_threads(before)
    return one, two


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_does_not_depend_on_the_thread_count(kernel):
    rng = np.random.default_rng(2)
    a, b, c, bias = operands(rng, 300, 200, 600, True, False, True, True)
    one, two = at_one_and_two_threads(a, b, True, False, c, bias, kernel=kernel)
    np.testing.assert_array_equal(one, two)


def test_kernel_arguments():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="kernel must be"):
        kernels.f32_matmul(a, a.T, kernel="blas")
    with pytest.raises(ValueError, match=r"op\(a\) is \(3, 4\) but op\(b\) is \(3, 4\)"):
        kernels.f32_matmul(a, a, kernel="reference")
    with pytest.raises(ValueError, match="c must have"):
        kernels.f32_matmul(a, a.T, c=np.ones((2, 2), np.float32), kernel="reference")
    with pytest.raises(ValueError, match="bias"):
        kernels.f32_matmul(a, a.T, bias=np.ones(2, np.float32), kernel="reference")
    with pytest.raises(ValueError, match="kernel must be None, 'avx512' or 'avx2'"):
        kernels.have_f32_kernel("sse")
    for k in ("avx512", "avx2"):
        if not kernels.have_f32_kernel(k):
            with pytest.raises(ValueError, match=f"the float32 {k} kernel cannot run here"):
                kernels.f32_matmul(a, a.T, kernel=k)


def test_the_active_kernel_is_the_widest_that_runs():
    """build_info names the kernel of the dense layers: AVX-512 where it runs and the CPU runs
    512-bit multiply-adds whole, else AVX2, else Eigen (or Eigen when the environment turns the
    kernels off)."""
    active = tc.build_info()["kernels"]["f32_gemm"]
    if os.environ.get("TRANSFORMER_CPP_DISABLE_F32_KERNEL", "0") not in ("", "0"):
        assert active == "eigen"
    elif kernels.have_f32_kernel("avx512") and not splits_512bit_fma():
        assert active == "avx512"
    elif kernels.have_f32_kernel("avx2"):
        assert active == "avx2"
    else:
        assert active == "eigen"
    assert kernels.have_f32_kernel() == (active != "eigen")


@needs_kernel
def test_model_with_and_without_the_kernel():
    """The same training steps with the kernel and with Eigen's GEMM (the kernel turned off by
    the environment, in a child process) give the same losses up to float32 rounding."""
    code = (
        "import numpy as np, transformer_cpp as tc\n"
        "rng = np.random.default_rng(3)\n"
        "m = tc.Transformer(60, 70, d_model=64, n_layers=2, n_heads=4, d_ff=128, dropout=0.0, seed=1,"
        " share_embeddings=True)\n"
        "m.configure_optimizer(warmup=10, label_smoothing=0.1)\n"
        "src = rng.integers(3, 60, (8, 12)); src[:, 9:] = 0\n"
        "tgt = rng.integers(3, 70, (8, 11)); tgt[:, 8:] = 0\n"
        "print(' '.join(repr(m.train_step(src, tgt[:, :-1], tgt[:, 1:])[0]) for _ in range(5)))\n"
    )
    runs = []
    for disable in ("0", "1"):
        env = dict(os.environ, TRANSFORMER_CPP_DISABLE_F32_KERNEL=disable)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        runs.append(np.array([float(v) for v in out.stdout.split()]))
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-5, atol=0)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    "M,N,trans_a,trans_b",
    [(50, 8300, False, True), (50, 8300, True, False), (2900, 45, True, False), (2900, 45, False, False)],
)
def test_products_packed_in_stripes(kernel, M, N, trans_a, trans_b):
    """Wide: a product whose B panels of one k block exceed tuning::kF32ColumnOrderBytes (8 MiB;
    8,300 columns x 256 k x 4 bytes = 8.5 MB at AVX-512, whose k blocks of 1,024 values are four of
    256, and twice that at AVX2, two of 512) takes its blocks of
    C column by column and packs B in stripes of at most tuning::kF32StripeBytes (2 MiB: 5
    stripes at AVX-512, 9 at AVX2, the last one partial). Tall: a product taken row of blocks by row of blocks whose
    packed A panels exceed a stripe (2,900 rows x 256 k x 4 bytes = 3 MB) packs A a stripe of rows
    at a time (the AVX2 kernel reads A in place here, row-major or transposed: nothing packed
    there; test_transposed_a_read_in_place). Each element
    matches the reference, with several k blocks, accumulate and bias, and does not depend on the
    thread count."""
    rng = np.random.default_rng(M + N)
    a, b, c, bias = operands(rng, M, N, 1024, trans_a, trans_b, True, True)
    ref = kernels.f32_matmul(a, b, trans_a, trans_b, c, bias, kernel="reference")
    one, two = at_one_and_two_threads(a, b, trans_a, trans_b, c, bias, kernel=kernel)
    assert np.all(np.abs(two.astype(np.float64) - ref) <= bound(a, b, c, bias, trans_a, trans_b))
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("M,N", [(13, 128), (13, 129), (12, 64), (700, 128), (700, 129)])
def test_transposed_a_read_in_place(kernel, M, N):
    """A weight gradient's product dW += dy^T x (trans_a) with at most
    tuning::kF32ColumnsInPlaceMaxN = 128 columns: the AVX2 kernel reads dy's rows in place (six
    adjacent values per k; a last tile of fewer rows reads none past them), with 129 columns it
    packs them. Either way, at 1,300 k values (six k blocks at AVX-512, three at AVX2, the last one
    shorter), with accumulate and
    bias: each element matches the reference and does not depend on the thread count."""
    rng = np.random.default_rng(M * N)
    a, b, c, bias = operands(rng, M, N, 1300, True, False, True, True)
    ref = kernels.f32_matmul(a, b, True, False, c, bias, kernel="reference")
    one, two = at_one_and_two_threads(a, b, True, False, c, bias, kernel=kernel)
    assert np.all(np.abs(two.astype(np.float64) - ref) <= bound(a, b, c, bias, True, False))
    np.testing.assert_array_equal(one, two)
