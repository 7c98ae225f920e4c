"""bfloat16 mixed precision: the matrix-product kernels (AVX512_BF16, and the AMX tiles where the CPU
has them) against their reference and against float32, and ``Transformer(..., precision="bf16")``
against the same model in float32.

Tolerances, and why:

* kernel vs reference (same bfloat16 inputs, products summed in float64 then rounded): each kernel
  sums K exact products in float32 (in its own order), each addition rounding once (at most 2**-24 of the running
  sum, itself at most sum_k |a_k b_k|); so |kernel - reference| <= (K + 2) * 2**-24 * (|A| |B| + |C|)
  element by element (the + 2: the reference's own final rounding and the added C).
* kernel vs plain float32: each input rounded to bfloat16 is within 2**-8 of itself (8 significant
  bits), so each product is within (2 * 2**-8 + 2**-16) of itself, and the sum within that times
  sum_k |a_k b_k|, plus the float32 summation above.
* whole model: every dense layer rounds its inputs to bfloat16 (2**-8 relative) and the errors of
  about ten chained products add up; on identical weights the logits stay within 3% of their
  largest magnitude and the loss within 1% (measured: about 0.8% and 0.05%).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp import kernels

from helpers.cli import SMALL_SAMPLED, run_cli
from helpers.kernels import BF16_KERNELS, HAVE_BF16, needs_bf16
from helpers.toy_task import write_tatoeba_file

U32 = 2.0**-24  # float32 unit roundoff
U16 = 2.0**-8  # bfloat16 unit roundoff (8 significant bits)


# ------------------------------------------------------------------------------------------------
# rounding to bfloat16


def numpy_round_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even on the bits, written independently of the C++ one."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    exponent = u & 0x7F800000
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    nan = (exponent == 0x7F800000) & ((u & 0x007FFFFF) != 0)
    out = np.where(exponent == 0, u & 0x80000000, rounded)  # subnormals flush to signed zero
    out = np.where(exponent == 0x7F800000, u, out)  # inf stays inf
    out = np.where(nan, (u | 0x00400000) & 0xFFFF0000, out)
    return out.astype(np.uint32).view(np.float32)


def special_values() -> np.ndarray:
    one = np.float32(1.0)
    ulp = np.float32(2.0**-7)  # bfloat16 spacing at 1
    vals = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        one + ulp / 2,
        one + 3 * ulp / 2,
        one + ulp / 2 + 2.0**-20,
        one + ulp / 2 - 2.0**-20,
        3.14159265,
        -2.71828,
        1e-30,
        1e-38,
        1e-40,
        -1e-45,
        3.3e38,
        3.4028235e38,
        -3.4028235e38,
        np.inf,
        -np.inf,
        65504.0,
        1.0 / 3.0,
    ]
    return np.array(vals, dtype=np.float32)


def test_round_to_bf16_matches_the_bit_rule():
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            special_values(),
            rng.standard_normal(5000).astype(np.float32),
            (rng.standard_normal(2000) * 1e30).astype(np.float32),
            rng.integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        ]
    )
    ours = kernels.round_to_bf16(x)
    ref = numpy_round_to_bf16(x)
    both_nan = np.isnan(ours) & np.isnan(ref)
    assert np.array_equal(ours.view(np.uint32)[~both_nan], ref.view(np.uint32)[~both_nan])
    assert np.array_equal(np.isnan(ours), np.isnan(x))
    # ties go to the even neighbour; just above the tie rounds up; the largest float overflows
    ulp = 2.0**-7
    r = kernels.round_to_bf16(
        np.array([1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 2 + 2.0**-20, 3.4028235e38], dtype=np.float32)
    )
    assert r[0] == 1.0 and r[1] == 1 + 2 * ulp and r[2] == 1 + ulp and np.isinf(r[3])
    # at most half a bfloat16 ulp away (8 significant bits) for normal numbers
    normal = rng.standard_normal(1000).astype(np.float32)
    assert np.all(np.abs(kernels.round_to_bf16(normal) - normal) <= U16 * np.abs(normal))


@needs_bf16
@pytest.mark.parametrize("kernel", BF16_KERNELS)
def test_the_instruction_rounds_like_the_reference(kernel):
    """A product with 1.0 gives the packed (converted) input exactly: the hardware conversion is
    round_to_bf16, subnormals included."""
    rng = np.random.default_rng(1)
    x = np.concatenate(
        [
            special_values()[np.isfinite(special_values())],
            rng.standard_normal(3000).astype(np.float32),
            (rng.standard_normal(500) * 1e-39).astype(np.float32),
        ]
    )
    got = kernels.bf16_matmul(x[:, None], np.ones((1, 1), np.float32), kernel=kernel)[:, 0]
    assert np.array_equal(got.view(np.uint32) & 0x7FFFFFFF, kernels.round_to_bf16(x).view(np.uint32) & 0x7FFFFFFF)


# ------------------------------------------------------------------------------------------------
# the kernel


def operands(rng, M, N, K, trans_a, trans_b, scale=1.0):
    a = (rng.standard_normal((K, M) if trans_a else (M, K)) * scale).astype(np.float32)
    b = (rng.standard_normal((N, K) if trans_b else (K, N)) * scale).astype(np.float32)
    return a, b


def op(x, trans):
    return x.T if trans else x


def float64_product(a, b, trans_a, trans_b, rounded):
    f = kernels.round_to_bf16 if rounded else (lambda v: v)
    return op(f(a), trans_a).astype(np.float64) @ op(f(b), trans_b).astype(np.float64)


ODD = [1, 7, 33, 129]


@pytest.mark.parametrize("trans_a, trans_b", [(False, True), (False, False), (True, False), (True, True)])
@pytest.mark.parametrize("M", ODD + [12, 13])
def test_reference_is_the_rounded_product(M, trans_a, trans_b):
    """The C++ reference equals bfloat16-rounded inputs multiplied in float64 (NumPy)."""
    rng = np.random.default_rng(M)
    for N, K in [(1, 1), (7, 33), (33, 7), (129, 129)]:
        a, b = operands(rng, M, N, K, trans_a, trans_b)
        ref = kernels.bf16_matmul(a, b, trans_a, trans_b, kernel="reference")
        want = float64_product(a, b, trans_a, trans_b, rounded=True)
        assert np.allclose(ref, want, rtol=2 * U32, atol=1e-30)


@needs_bf16
@pytest.mark.parametrize("kernel", BF16_KERNELS)
@pytest.mark.parametrize("trans_a, trans_b", [(False, True), (False, False), (True, False), (True, True)])
@pytest.mark.parametrize("M", ODD + [12, 13, 24, 32, 64])
@pytest.mark.parametrize("N", ODD + [32, 31, 64])
def test_kernel_matches_reference_on_odd_shapes(M, N, trans_a, trans_b, kernel):
    """Shapes around every tile and panel edge (12 and 32 rows, 16 and 32 columns, 16 k pairs) and
    k blocks (512 values for either kernel: K 1101 takes three, the last one of 77, an odd count
    padded to whole pairs)."""
    rng = np.random.default_rng(1000 * M + N)
    for K in [1, 2, 7, 31, 32, 33, 129, 300, 1101]:
        a, b = operands(rng, M, N, K, trans_a, trans_b)
        accumulate = (M + N + K) % 2 == 1
        c = rng.standard_normal((M, N)).astype(np.float32) if accumulate else None
        got = kernels.bf16_matmul(a, b, trans_a, trans_b, c=c, kernel=kernel)
        ref = kernels.bf16_matmul(a, b, trans_a, trans_b, c=c, kernel="reference")
        size = np.abs(op(kernels.round_to_bf16(a), trans_a)).astype(np.float64) @ np.abs(
            op(kernels.round_to_bf16(b), trans_b)
        ).astype(np.float64)
        if c is not None:
            size += np.abs(c)
        tol = (K + 2) * U32 * size + 1e-30
        assert got.shape == (M, N)
        assert np.all(np.abs(got.astype(np.float64) - ref) <= tol), (M, N, K, trans_a, trans_b)


@needs_bf16
@pytest.mark.parametrize("kernel", BF16_KERNELS)
@pytest.mark.parametrize("trans_a, trans_b", [(False, True), (False, False), (True, False)])
@pytest.mark.parametrize(
    "M, N, K", [(1, 1, 1), (7, 33, 129), (129, 7, 33), (150, 400, 128), (64, 128, 1000), (300, 64, 513)]
)
def test_kernel_is_float32_within_bf16_rounding(M, N, K, trans_a, trans_b, kernel):
    """Against plain float32 (no rounding of the inputs): within what rounding to 8 significant
    bits allows, and (for random data) well inside it; and not float32 itself (it does round)."""
    rng = np.random.default_rng(M + N + K)
    a, b = operands(rng, M, N, K, trans_a, trans_b, scale=3.0)
    got = kernels.bf16_matmul(a, b, trans_a, trans_b, kernel=kernel).astype(np.float64)
    exact = float64_product(a, b, trans_a, trans_b, rounded=False)
    size = np.abs(op(a, trans_a)).astype(np.float64) @ np.abs(op(b, trans_b)).astype(np.float64)
    tol = (2 * U16 + U16**2 + (K + 2) * U32) * size
    err = np.abs(got - exact)
    assert np.all(err <= tol)
    if K >= 33:
        # random signs: the rounding errors partly cancel, so the typical error is far below the bound
        assert np.median(err / size) < 0.1 * 2 * U16
        f32 = (op(a, trans_a) @ op(b, trans_b)).astype(np.float64)
        assert np.abs(f32 - exact).max() < err.max()


@needs_bf16
@pytest.mark.parametrize("kernel", BF16_KERNELS)
def test_kernel_shapes_of_a_training_step(kernel):
    """The three products of a Linear layer at the quick preset's sizes (rows ~1500, d 128,
    d_ff 512, vocabulary 4000), each against float64 within the bfloat16 bound."""
    rng = np.random.default_rng(7)
    rows, d, V = 1500, 128, 4000
    x = rng.standard_normal((rows, d)).astype(np.float32)
    W = (rng.standard_normal((V, d)) * 0.1).astype(np.float32)
    dy = (rng.standard_normal((rows, V)) * 1e-3).astype(np.float32)
    for a, b, ta, tb, K in [(x, W, False, True, d), (dy, W, False, False, V), (dy, x, True, False, rows)]:
        got = kernels.bf16_matmul(a, b, ta, tb, kernel=kernel).astype(np.float64)
        exact = float64_product(a, b, ta, tb, rounded=False)
        size = np.abs(op(a, ta)).astype(np.float64) @ np.abs(op(b, tb)).astype(np.float64)
        assert np.all(np.abs(got - exact) <= (2 * U16 + U16**2 + (K + 2) * U32) * size)
        # and relative to the result's scale the typical error is that of bfloat16 inputs
        assert np.abs(got - exact).mean() < 0.01 * np.abs(exact).mean()


@needs_bf16
@pytest.mark.parametrize("kernel", BF16_KERNELS)
def test_kernel_does_not_depend_on_the_thread_count(kernel):
    rng = np.random.default_rng(3)
    a, b = operands(rng, 333, 257, 700, False, True)
    before = tc.get_num_threads()
    try:
        results = []
        for n in (1, 2, 3):
            tc.set_num_threads(n)
            results.append(kernels.bf16_matmul(a, b, False, True, kernel=kernel))
    finally:
        tc.set_num_threads(before)
    assert all(np.array_equal(results[0], r) for r in results[1:])


def test_kernel_arguments():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="kernel must be"):
        kernels.bf16_matmul(a, a, kernel="fast")
    with pytest.raises(ValueError, match=r"op\(a\) is \(3, 4\) but op\(b\) is \(3, 4\)"):
        kernels.bf16_matmul(a, a, kernel="reference")
    with pytest.raises(ValueError, match="c must have"):
        kernels.bf16_matmul(a, a, trans_b=True, c=np.ones((2, 2), np.float32), kernel="reference")


# ------------------------------------------------------------------------------------------------
# the model


CONFIG = dict(
    src_vocab_size=40, tgt_vocab_size=48, d_model=32, n_layers=2, n_heads=4, d_ff=64, dropout=0.0, max_length=16
)


def twin_models(**overrides):
    """A float32 model and a bf16 one with the very same weights."""
    cfg = dict(CONFIG, **overrides)
    m32 = tc.Transformer(**cfg, seed=5)
    m16 = tc.Transformer(**cfg, seed=5, precision="bf16")
    for p32, p16 in zip(m32.parameters().values(), m16.parameters().values()):
        assert np.array_equal(p32.value, p16.value)
    return m32, m16


def batch(rng, B=6, S=9, T=8, src_vocab=40, tgt_vocab=48):
    src = rng.integers(3, src_vocab, (B, S))
    tgt = rng.integers(3, tgt_vocab, (B, T + 1))
    for b in range(B):  # some padding
        src[b, S - b // 2 :] = 0
        tgt[b, T + 1 - b // 3 :] = 0
    return src, tgt[:, :-1].copy(), tgt[:, 1:].copy()


def use_bf16_kernel(monkeypatch, kernel):
    """Make the layers' bf16 products run on `kernel` (the AMX tiles are the default where the CPU
    has them; TRANSFORMER_CPP_DISABLE_AMX, read at every product, turns them off)."""
    if kernel == "amx":
        monkeypatch.delenv("TRANSFORMER_CPP_DISABLE_AMX", raising=False)
    else:
        monkeypatch.setenv("TRANSFORMER_CPP_DISABLE_AMX", "1")
    assert kernels.bf16_kernel() == kernel


@needs_bf16
@pytest.mark.parametrize("kernel", BF16_KERNELS)
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("pre_norm", [False, True])
def test_bf16_model_agrees_with_float32(tied, pre_norm, kernel, monkeypatch):
    use_bf16_kernel(monkeypatch, kernel)
    m32, m16 = twin_models(share_embeddings=tied, pre_norm=pre_norm)
    assert m16.config["precision"] == "bf16" and m32.config["precision"] == "float32"
    rng = np.random.default_rng(11)
    src, tgt_in, tgt_out = batch(rng)
    l32, l16 = m32.forward(src, tgt_in), m16.forward(src, tgt_in)
    assert np.abs(l16 - l32).max() <= 0.03 * np.abs(l32).max()
    assert not np.array_equal(l16, l32)  # the products did run in bf16
    (loss32, _), (loss16, _) = m32.evaluate(src, tgt_in, tgt_out), m16.evaluate(src, tgt_in, tgt_out)
    assert abs(loss16 - loss32) <= 0.01 * loss32
    # the gradients of one backward: same direction, same size within a few percent
    dlogits = rng.standard_normal(l32.shape).astype(np.float32) * 1e-2
    for m in (m32, m16):
        m.zero_grad()
        m.forward(src, tgt_in)  # (evaluate computes only the rows of the loss: no backward after it)
        m.backward(dlogits)
    largest = max(np.linalg.norm(p.grad) for p in m32.parameters().values())
    for (name, p32), p16 in zip(m32.parameters().items(), m16.parameters().values()):
        g32, g16 = p32.grad.ravel().astype(np.float64), p16.grad.ravel().astype(np.float64)
        if np.linalg.norm(g32) < 1e-4 * largest:
            # a gradient that is 0 in exact arithmetic (the key bias: softmax ignores a constant
            # added to all of a query's scores) is rounding noise in both
            assert np.linalg.norm(g16) < 1e-3 * largest, name
            continue
        cosine = g32 @ g16 / (np.linalg.norm(g32) * np.linalg.norm(g16))
        assert cosine > 0.99, (name, cosine)
        assert abs(np.linalg.norm(g16) / np.linalg.norm(g32) - 1) < 0.05, name


def copy_task(rng, n, vocab=20, max_len=7):
    """Tiny data of our own: the target is the source reversed, with start (1) and end (2)."""
    lengths = rng.integers(2, max_len + 1, n)
    src = np.zeros((n, max_len), np.int64)
    tgt = np.zeros((n, max_len + 2), np.int64)
    for i, L in enumerate(lengths):
        s = rng.integers(3, vocab, L)
        src[i, :L] = s
        tgt[i, 0], tgt[i, 1 : L + 1], tgt[i, L + 1] = 1, s[::-1], 2
    return src, tgt


@needs_bf16
@pytest.mark.parametrize("kernel", BF16_KERNELS)
def test_bf16_training_lowers_the_loss_like_float32(kernel, monkeypatch):
    """320 steps on the copy-reversal task, same initial weights and batches: bf16 learns, and the
    mean loss over the whole run (the area under the curve) is within 15% of float32's.

    The last epoch alone is too chaotic to compare: bf16 trails float32 by an epoch or so all along,
    and where each curve is in its last 16 steps depends on float32 summation order (measured: last
    epoch 0.331 / 0.334 (bf16 / float32) with Eigen's GEMM, 0.474 / 0.276 with the AVX-512 float32 kernel and the
    fused output loss; whole-run means 1.22 / 1.13 and 1.23 / 1.12, bf16 / float32)."""
    use_bf16_kernel(monkeypatch, kernel)
    cfg = dict(
        src_vocab_size=20,
        tgt_vocab_size=20,
        d_model=32,
        n_layers=1,
        n_heads=2,
        d_ff=64,
        dropout=0.0,
        max_length=12,
        seed=3,
    )
    rng = np.random.default_rng(0)
    src, tgt = copy_task(rng, 512)
    curves = {}
    for precision in ("float32", "bf16"):
        model = tc.Transformer(**cfg, precision=precision)
        model.configure_optimizer(warmup=50, lr_scale=1.0)
        losses = []
        for epoch in range(20):
            for i in range(0, len(src), 32):
                loss, _ = model.train_step(src[i : i + 32], tgt[i : i + 32, :-1], tgt[i : i + 32, 1:])
                losses.append(loss)
        curves[precision] = np.array(losses)
    f32, b16 = curves["float32"], curves["bf16"]
    assert b16[:4].mean() == pytest.approx(f32[:4].mean(), rel=0.01)
    assert b16[-16:].mean() < 0.2 * b16[:4].mean()  # it learns
    assert abs(b16.mean() - f32.mean()) <= 0.15 * f32.mean(), (b16.mean(), f32.mean())


@needs_bf16
def test_bf16_model_decodes_in_float32():
    """Decoding runs the float32 kernels on the (float32) master weights: a bf16 model and its
    float32 twin give the same tokens."""
    m32, m16 = twin_models(share_embeddings=True)
    src, _, _ = batch(np.random.default_rng(2))
    assert np.array_equal(m32.greedy_decode(src, 1, 2, 10), m16.greedy_decode(src, 1, 2, 10))
    b32, b16 = m32.beam_search(src, 1, 2, 10, beam_size=3), m16.beam_search(src, 1, 2, 10, beam_size=3)
    assert all(np.array_equal(x[0][0], y[0][0]) for x, y in zip(b32, b16))


def test_amx_switch_and_kernel_names(monkeypatch):
    """TRANSFORMER_CPP_DISABLE_AMX hands every bf16 product to the AVX512_BF16 kernel and says so;
    kernel="amx" is refused by name where the CPU or OS lacks the tiles."""
    monkeypatch.delenv("TRANSFORMER_CPP_DISABLE_AMX", raising=False)
    could = kernels.have_amx(ignore_environment=True)
    assert kernels.have_amx() == (could and HAVE_BF16)
    if HAVE_BF16:
        assert kernels.bf16_kernel() == ("amx" if could else "avx512_bf16")
    assert tc.build_info()["kernels"]["bf16_gemm"] == (kernels.bf16_kernel() if HAVE_BF16 else "unavailable")
    monkeypatch.setenv("TRANSFORMER_CPP_DISABLE_AMX", "1")
    assert not kernels.have_amx()
    assert kernels.have_amx(ignore_environment=True) == could
    reason = kernels.amx_unsupported_reason()
    assert ("TRANSFORMER_CPP_DISABLE_AMX" in reason) if could and HAVE_BF16 else reason
    if HAVE_BF16:
        assert kernels.bf16_kernel() == "avx512_bf16"
        assert tc.build_info()["kernels"]["bf16_gemm"] == "avx512_bf16"
    if not could:
        with pytest.raises(ValueError, match="_bf16_matmul: .*(AMX|bfloat16|AVX512_BF16)"):
            kernels.bf16_matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), kernel="amx")
    monkeypatch.setenv("TRANSFORMER_CPP_DISABLE_AMX", "0")  # "0" means not disabled
    assert kernels.have_amx() == (could and HAVE_BF16)


def test_precision_is_checked():
    with pytest.raises(ValueError, match="precision must be 'float32' or 'bf16', got 'fp16'"):
        tc.Transformer(**CONFIG, precision="fp16")
    with pytest.raises(TypeError, match="precision must be 'float32' or 'bf16', got 16"):
        tc.Transformer(**CONFIG, precision=16)
    with pytest.raises(ValueError, match="precision 'bf16' needs dtype float32"):
        tc.Transformer(**CONFIG, dtype="float64", precision="bf16")
    assert tc.Transformer(**CONFIG).config["precision"] == "float32"


def test_unsupported_cpu_is_a_clear_error(monkeypatch):
    """TRANSFORMER_CPP_DISABLE_BF16 makes the dispatch answer as on a CPU without AVX512_BF16."""
    monkeypatch.delenv("TRANSFORMER_CPP_DISABLE_BF16", raising=False)
    without_switch = kernels.bf16_unsupported_reason()
    # the CPU (and the build) lack the instructions: the switch changes nothing, the reason stays
    cpu_lacks = "does not support AVX512_BF16" in without_switch or "no bfloat16 kernel" in without_switch
    monkeypatch.setenv("TRANSFORMER_CPP_DISABLE_BF16", "1")
    assert not kernels.have_bf16()
    # the reason names what the CPU lacks first, then the switch (even below the avx512 level of
    # TRANSFORMER_CPP_ISA, where the switch is checked before the level)
    expected = without_switch if cpu_lacks else "the environment variable TRANSFORMER_CPP_DISABLE_BF16"
    assert expected in kernels.bf16_unsupported_reason()
    with pytest.raises(ValueError, match=r"Transformer: precision 'bf16' is not available: .*use precision 'float32'"):
        tc.Transformer(**CONFIG, precision="bf16")
    tc.Transformer(**CONFIG)  # float32 is unaffected
    monkeypatch.setenv("TRANSFORMER_CPP_DISABLE_BF16", "0")  # "0" means not disabled
    assert kernels.have_bf16() == HAVE_BF16


@needs_bf16
def test_precision_survives_save_load_and_resume(tmp_path):
    from transformer_cpp import TrainConfig, Trainer
    from transformer_cpp.checkpoint import load_checkpoint
    from helpers.toy_task import reversal_pairs, reversal_tokenizer

    tok = reversal_tokenizer()
    src, tgt = reversal_pairs(200, seed=1)
    pairs = tc.encode_pairs(src, tgt, tok, tok, 8)
    model = tc.Transformer(
        tok.vocab_size,
        tok.vocab_size,
        d_model=32,
        n_layers=1,
        n_heads=2,
        d_ff=64,
        dropout=0.0,
        max_length=8,
        precision="bf16",
    )
    trainer = Trainer(
        model,
        pairs,
        None,
        TrainConfig(batch_size=32, warmup=20, epochs=1, progress=False),
        src_tokenizer=tok,
        tgt_tokenizer=tok,
        checkpoint_dir=tmp_path / "run",
    )
    trainer.fit()
    cfg = json.loads((tmp_path / "run" / "epoch-0001" / "config.json").read_text())
    assert cfg["model"]["precision"] == "bf16"
    ckpt = load_checkpoint(tmp_path / "run", optimizer=True)
    assert ckpt.model.config["precision"] == "bf16"
    resumed = Trainer.from_checkpoint(ckpt, pairs, None, checkpoint_dir=tmp_path / "run", epochs=2)
    resumed.fit()
    assert resumed.model.config["precision"] == "bf16" and resumed.epoch == 2
    translator = tc.Translator.from_checkpoint(tmp_path / "run")
    assert translator.model.config["precision"] == "bf16"
    assert isinstance(translator.translate("a b c"), str)


# ------------------------------------------------------------------------------------------------
# the command line


@needs_bf16
def test_cli_train_precision_bf16(tmp_path):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=250)
    run_dir = tmp_path / "run"
    result = run_cli(
        "train", *SMALL_SAMPLED, "--data", str(data), "--epochs", "1", "--precision", "bf16", "--out", str(run_dir)
    )
    assert result.returncode == 0, result.stderr
    assert "precision='bf16'" in result.stderr
    cfg = json.loads((run_dir / "epoch-0001" / "config.json").read_text())
    assert cfg["model"]["precision"] == "bf16"
    result = run_cli("train", "--out", str(run_dir), "--resume", "--epochs", "2", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert json.loads((run_dir / "epoch-0002" / "config.json").read_text())["model"]["precision"] == "bf16"
    result = run_cli("train", "--out", str(run_dir), "--resume", "--epochs", "3", "--precision", "float32")
    assert result.returncode != 0 and "--precision float32 (the run has bf16)" in result.stderr
    result = run_cli("translate", "--model", str(run_dir), "The cat and the dog.")
    assert result.returncode == 0 and result.stdout.strip(), result.stderr
    # where bf16 cannot run: training it is a one-line error, translating its checkpoint works
    off = {"TRANSFORMER_CPP_DISABLE_BF16": "1"}
    result = run_cli(
        "train",
        *SMALL_SAMPLED,
        "--data",
        str(data),
        "--epochs",
        "1",
        "--precision",
        "bf16",
        "--out",
        str(tmp_path / "run2"),
        env=off,
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "precision 'bf16' is not available" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = run_cli("translate", "--model", str(run_dir), "The cat and the dog.", env=off)
    assert result.returncode == 0 and result.stdout.strip(), result.stderr
    assert "loaded with precision 'float32'" in result.stderr


GUARD_SCRIPT = r"""
import ctypes, mmap, sys
import numpy as np
from transformer_cpp import kernels

PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
keep = []


def at_page_end(values):
    '''A float32 copy of `values` whose last element is the last one before an unreadable page.'''
    nbytes = values.size * 4
    pages = (nbytes + PAGE - 1) // PAGE + 1
    mm = mmap.mmap(-1, pages * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    assert libc.mprotect(base + (pages - 1) * PAGE, PAGE, 0) == 0, ctypes.get_errno()
    a = np.frombuffer(mm, dtype=np.float32, count=values.size, offset=(pages - 1) * PAGE - nbytes)
    a[...] = values.ravel()
    keep.append(mm)
    return a.reshape(values.shape)


rng = np.random.default_rng(0)
for M, N, K in [(1, 1, 1), (7, 5, 3), (13, 33, 31), (25, 40, 47), (12, 32, 64), (3, 17, 513)]:
    for ta in (False, True):
        for tb in (False, True):
            a = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
            b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float32)
            got = kernels.bf16_matmul(at_page_end(a), at_page_end(b), ta, tb)
            ref = kernels.bf16_matmul(a, b, ta, tb, kernel="reference")
            assert np.allclose(got, ref, rtol=1e-5, atol=1e-5), (M, N, K, ta, tb)
print("ok")
"""


@needs_bf16
def test_kernel_reads_nothing_past_its_inputs():
    """Inputs that end right before an unreadable page: packing reads the last rows with masked
    loads, never a byte past the end (a read there would kill the child with SIGSEGV)."""
    result = subprocess.run([sys.executable, "-c", GUARD_SCRIPT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", (result.returncode, result.stderr[-2000:])
