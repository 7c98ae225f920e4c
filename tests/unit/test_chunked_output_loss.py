"""The training step's output layer and loss in chunks of rows (``output_chunk_rows``: the
(rows, vocabulary) logits are never stored whole) against the unfused reference (``-1``: the whole
logits matrix, then the fused loss and the backward products over it), on both models.

Tolerances: per row, the logits, the loss and its gradient are the same computation in both paths
(the products give each row the same values whatever the other rows), so the loss agrees to float
rounding of its running sum. The output weight's and the output bias's gradients are sums over
rows, which the chunked path adds chunk by chunk: the order of the sum changes, and with it the
rounding, by at most about rows x eps relative to the largest gradient (eps = 6e-8 in float32,
1.1e-16 in float64; the batches here have under 50 rows). The gradients of the other layers follow
from dy, the same per row, and from the tied embedding's gradient. So: float64 within 1e-13 of the
largest gradient, float32 within 5e-6; bf16 products round both operands of the weight gradient's
product to bfloat16 in either path, and the kernel accumulates pairs of rows at once, so a chunk
of an odd number of rows pairs them differently: within 5e-4 of the largest gradient (bfloat16's
own rounding is 4e-3).
"""

import re

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp import kernels
from helpers.kernels import needs_bf16

UNFUSED = -1
TOL = {"float64": 1e-13, "float32": 5e-6, "bf16": 5e-4}
#: The size of the translation and language models compared here.
ARCH = dict(d_model=32, n_layers=2, n_heads=4, d_ff=64, dropout=0.0)


def pairs_batch(rng, batch=6, src_len=7, tgt_len=8, src_vocab=40, tgt_vocab=50):
    """Random pairs with padded tails of different lengths in the sources and the targets."""
    src = rng.integers(3, src_vocab, (batch, src_len))
    tgt = rng.integers(3, tgt_vocab, (batch, tgt_len + 1))
    for i in range(batch):
        src[i, src_len - i % 3 :] = 0
        tgt[i, tgt_len + 1 - 2 * (i % 3) :] = 0
    return src, tgt[:, :-1], tgt[:, 1:]


def translator(dtype="float32", share=False, precision="float32", vocab=50, **extra):
    m = tc.Transformer(
        40 if not extra.get("share_source_embedding") else vocab,
        vocab,
        dtype=dtype,
        **ARCH,
        max_length=16,
        seed=1,
        share_embeddings=share,
        precision=precision,
        **extra,
    )
    m.configure_optimizer(label_smoothing=0.1, fixed_lr=1e-3)
    return m


def translator_gradients(m, rows, batch):
    m._core.output_chunk_rows = rows
    loss, acc = m.compute_gradients(*batch, grad_scale=1.0)
    return loss, acc, m.gradient_buffer().copy()


def assert_close(grad, ref, tol, what):
    scale = np.abs(ref).max()
    assert scale > 0, what
    err = np.abs(grad - ref).max() / scale
    assert err <= tol, f"{what}: largest difference {err:.3g} of the largest gradient, allowed {tol:g}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("share", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("rows", [1, 5, 16, 0])
def test_transformer_chunks_match_the_unfused_reference(dtype, share, rows):
    rng = np.random.default_rng(3)
    batch = pairs_batch(rng)
    m = translator(dtype, share)
    ref_loss, ref_acc, ref = translator_gradients(m, UNFUSED, batch)
    loss, acc, grad = translator_gradients(m, rows, batch)
    assert acc == ref_acc
    assert loss == pytest.approx(ref_loss, rel=1e-6 if dtype == "float32" else 1e-14)
    assert_close(grad, ref, TOL[dtype], f"{dtype} {'tied' if share else 'untied'}, {rows} rows")
    # a chunk of one row changes the order of the output layer's gradient sums: not bit-equal
    if rows == 1:
        assert not np.array_equal(grad, ref)


def test_transformer_chunked_step_with_a_shared_source_embedding_and_no_padding():
    rng = np.random.default_rng(4)
    src, tgt_in, tgt_out = pairs_batch(rng, src_vocab=50)
    tgt_out = np.where(tgt_out == 0, 5, tgt_out)  # every position scored
    m = translator("float64", True, share_source_embedding=True)
    ref_loss, _, ref = translator_gradients(m, UNFUSED, (src, tgt_in, tgt_out))
    loss, _, grad = translator_gradients(m, 7, (src, tgt_in, tgt_out))
    assert loss == pytest.approx(ref_loss, rel=1e-14)
    assert_close(grad, ref, TOL["float64"], "shared source embedding")


@needs_bf16
@pytest.mark.parametrize("share", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("rows", [1, 5, 0])
def test_transformer_bf16_chunks_match_the_bf16_reference(share, rows):
    rng = np.random.default_rng(5)
    batch = pairs_batch(rng)
    m = translator("float32", share, precision="bf16")
    ref_loss, ref_acc, ref = translator_gradients(m, UNFUSED, batch)
    loss, acc, grad = translator_gradients(m, rows, batch)
    assert acc == ref_acc
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    assert_close(grad, ref, TOL["bf16"], f"bf16, {rows} rows")


def test_transformer_train_steps_agree_and_the_default_is_chunked():
    rng = np.random.default_rng(6)
    batch = pairs_batch(rng)
    a, b = translator("float64"), translator("float64")
    assert a._core.output_chunk_rows == 0  # chunks sized from the vocabulary
    b._core.output_chunk_rows = UNFUSED
    for _ in range(3):
        la, aa = a.train_step(*batch)
        lb, ab = b.train_step(*batch)
        assert la == pytest.approx(lb, rel=1e-13) and aa == ab
    for name, p in a.parameters().items():
        np.testing.assert_allclose(p.value, b.parameters()[name].value, rtol=0, atol=1e-12, err_msg=name)


def test_chunked_gradients_do_not_depend_on_the_thread_count():
    # a vocabulary wide enough that each chunk's loss pass and products run on two threads
    rng = np.random.default_rng(7)
    batch = pairs_batch(rng, batch=8, tgt_vocab=2000)
    before = tc.get_num_threads()
    out = []
    try:
        for n in (1, 2):
            tc.set_num_threads(n)
            out.append(translator_gradients(translator(vocab=2000), 16, batch))
    finally:
        tc.set_num_threads(before)
    assert out[0][1] == out[1][1]
    if kernels.have_f32_kernel():
        # the f32 kernels hand whole blocks of C to threads and sum each block in one order
        assert out[0][0] == pytest.approx(out[1][0], rel=1e-12)
        np.testing.assert_array_equal(out[0][2], out[1][2])
    else:
        # Eigen's GEMM (the generic and neon levels) chooses its depth blocking from the thread
        # count, so its float32 sums round differently: the bound of the chunked-vs-unfused checks
        assert out[0][0] == pytest.approx(out[1][0], rel=TOL["float32"])
        scale = float(np.abs(out[0][2]).max())
        assert float(np.abs(out[0][2] - out[1][2]).max()) <= TOL["float32"] * scale


def overflow_some_rows(m):
    """Finite output weights whose logit 7 overflows float32 in the rows whose decoder output has a
    component 18 beyond 1.7 (row 11 first in the batch of seed 9); returns the good weights. One
    nonzero weight makes the logit one product, h[18] x 2e38, so whether it overflows does not depend
    on the order of a sum (a dense row of 1e38s overflows in partial sums that differ by kernel)."""
    w = m.parameters()["output.weight"]
    good = w.value.copy()
    w.value[7] = 0
    w.value[7, 18] = np.float32(2e38)
    return good


@pytest.mark.parametrize("rows", [1, 0, UNFUSED])
def test_a_nonfinite_loss_changes_nothing_and_the_next_step_is_clean(rows):
    """A step whose loss is not finite applies no update; the gradients the chunks before the bad
    row had summed are discarded, so the next good step equals that of a model that never failed."""
    batch = pairs_batch(np.random.default_rng(9))
    m, fresh = translator(), translator()
    for x in (m, fresh):
        x._core.output_chunk_rows = rows
    good = overflow_some_rows(m)
    before = {n: p.value.copy() for n, p in m.parameters().items()}
    with pytest.raises(FloatingPointError, match=r"Transformer\.train_step: non-finite loss .*no update was applied"):
        m.train_step(*batch)
    assert m.step == 0
    for n, p in m.parameters().items():
        np.testing.assert_array_equal(p.value, before[n], err_msg=n)
    m.parameters()["output.weight"].value[...] = good
    m.train_step(*batch)
    fresh.train_step(*batch)
    for n, p in m.parameters().items():
        np.testing.assert_array_equal(p.value, fresh.parameters()[n].value, err_msg=n)


def test_the_failing_row_is_the_same_in_both_paths():
    batch = pairs_batch(np.random.default_rng(9))
    messages = []
    for rows in (UNFUSED, 1, 4, 0):
        m = translator()
        m._core.output_chunk_rows = rows
        overflow_some_rows(m)
        with pytest.raises(FloatingPointError) as e:
            m.compute_gradients(*batch, grad_scale=1.0)
        messages.append(str(e.value).split("[", 1)[1])
    first = int(re.search(r"first at row (\d+)", messages[0]).group(1))
    assert first > 4  # chunks of 1 and 4 rows had summed gradients before the bad one
    assert messages[1:] == [messages[0]] * 3


@pytest.mark.parametrize("model", ["Transformer", "LanguageModel"])
def test_a_bad_chunk_setting_is_one_clear_error(model):
    m = translator() if model == "Transformer" else tc.LanguageModel(30, d_model=16, n_layers=1, n_heads=2, d_ff=32)
    with pytest.raises(ValueError, match=rf"^{model}: output_chunk_rows must be an integer >= -1, got -2$"):
        m._core.output_chunk_rows = -2
    with pytest.raises(TypeError, match=rf"^{model}: output_chunk_rows must be an integer"):
        m._core.output_chunk_rows = 1.5
    m._core.output_chunk_rows = 12
    assert m._core.output_chunk_rows == 12


def lm_gradients(lm, rows, tokens):
    lm._core.output_chunk_rows = rows
    loss = lm.compute_gradients(tokens, training=False)
    return loss, np.concatenate([p.grad.ravel().astype(np.float64) for p in lm.parameters().values()])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("share", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("rows", [1, 4, 0])
def test_language_model_chunks_match_the_unfused_reference(dtype, share, rows):
    rng = np.random.default_rng(10)
    tokens = rng.integers(1, 30, (3, 11))
    tokens[1, 7:] = 0  # padding labels: not scored
    lm = tc.LanguageModel(
        30,
        dtype=dtype,
        **ARCH,
        max_len=16,
        seed=2,
        share_embeddings=share,
    )
    ref_loss, ref = lm_gradients(lm, UNFUSED, tokens)
    loss, grad = lm_gradients(lm, rows, tokens)
    assert loss == pytest.approx(ref_loss, rel=1e-6 if dtype == "float32" else 1e-14)
    assert_close(grad, ref, TOL[dtype], f"language model {dtype}, {rows} rows")
    # the step and the evaluation loss after it
    lm.configure_optimizer(fixed_lr=1e-3)
    lm.train_step(tokens)
    assert np.isfinite(lm.evaluate_loss(tokens)[0])
