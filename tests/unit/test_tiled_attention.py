"""Tiled (memory-linear) softmax attention: the kernel against the plain one and a NumPy reference
(causal, key padding, fully blocked rows, lengths that are not a multiple of the block, cross
attention), its float64 gradients by central differences, float32 against float64, the result
independent of the thread count, MultiHeadAttention's attention_impl, the SoftmaxSelfAttention
adapter, PyTorch's scaled_dot_product_attention, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp import MultiHeadAttention, SoftmaxSelfAttention, TiledAttention
from transformer_cpp.functional import look_ahead_mask

from helpers.gradcheck import rel_error
from helpers.layer_checks import check_against_numeric, parameter_items, randomise_parameters

EXACT = 1e-12  # float64: tiled against plain


# --- a readable reference ----------------------------------------------------------------------


def blocked_keys(b, tq, tk, causal, key_padding):
    """(B, 1, Tq, Tk) True where query i may not see key j."""
    blocked = np.zeros((b, 1, tq, tk), dtype=bool)
    if causal:
        blocked |= np.arange(tk)[None, :] > np.arange(tq)[:, None]
    if key_padding is not None:
        blocked |= np.asarray(key_padding, dtype=bool)[:, None, None, :]
    return blocked


def reference(q, k, v, dout, causal=False, key_padding=None):
    """softmax(Q K^T / sqrt(d) + mask) V and its backward, written out; fully blocked rows give 0."""
    b, _, tq, d = q.shape
    tk = k.shape[2]
    blocked = blocked_keys(b, tq, tk, causal, key_padding)
    s = np.where(blocked, -np.inf, q @ k.swapaxes(-1, -2) / np.sqrt(d))
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isinf(m), 0.0, m)
    p = np.where(blocked, 0.0, np.exp(s - m))
    total = p.sum(axis=-1, keepdims=True)
    p = p / np.where(total == 0, 1.0, total)
    out = p @ v
    with np.errstate(divide="ignore"):
        lse = np.where(total[..., 0] == 0, np.inf, m[..., 0] + np.log(total[..., 0]))
    dp = dout @ v.swapaxes(-1, -2)
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True)) / np.sqrt(d)
    return out, lse, ds @ k, ds.swapaxes(-1, -2) @ q, p.swapaxes(-1, -2) @ dout


def inputs(b, h, tq, tk, d, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal(shape).astype(dtype)
        for shape in ((b, h, tq, d), (b, h, tk, d), (b, h, tk, d), (b, h, tq, d))
    ]


def run(tiled, q, k, v, dout, causal=False, key_padding=None):
    layer = TiledAttention(tiled=tiled, dtype=q.dtype)
    out = layer.forward(q, k, v, causal=causal, key_padding=key_padding)
    return (out, *layer.backward(dout)), layer


# --- the kernel --------------------------------------------------------------------------------

CASES = [
    # b, h, tq, tk, d, causal, padded
    (1, 1, 64, 64, 8, True, False),  # one block
    (2, 3, 130, 130, 16, True, False),  # not a multiple of the block (64), causal
    (1, 2, 300, 300, 8, True, True),  # keys in three blocks, causal and padding
    (2, 2, 130, 130, 16, False, False),
    (2, 2, 100, 150, 8, False, True),  # cross attention with key padding
    (2, 2, 150, 70, 8, False, True),  # more queries than keys
    (2, 2, 129, 129, 8, True, True),  # causal and padding
    (1, 2, 200, 200, 64, True, False),  # d_head 64, several blocks
]


def key_padding(b, tk, last):
    """A (b, tk) key-padding mask: the last ``last`` keys of the first sequence are padding."""
    kp = np.zeros((b, tk), dtype=bool)
    kp[0, tk - last :] = True
    return kp


@pytest.mark.parametrize("b,h,tq,tk,d,causal,padded", CASES)
def test_tiled_equals_plain_and_reference(b, h, tq, tk, d, causal, padded):
    q, k, v, dout = inputs(b, h, tq, tk, d, seed=tq + tk)
    kp = key_padding(b, tk, 17) if padded else None
    if padded:
        kp[-1, 5:9] = True
    tiled, layer = run(True, q, k, v, dout, causal, kp)
    plain, _ = run(False, q, k, v, dout, causal, kp)
    ref = reference(q, k, v, dout, causal, kp)
    for name, a, p, r in zip(("out", "dq", "dk", "dv"), tiled, plain, (ref[0],) + ref[2:]):
        assert np.all(np.isfinite(a)), name
        np.testing.assert_allclose(a, p, rtol=0, atol=EXACT, err_msg=name)
        np.testing.assert_allclose(a, r, rtol=0, atol=EXACT, err_msg=name)
    np.testing.assert_allclose(layer.log_sum_exp(), ref[1], rtol=0, atol=EXACT)


def test_fully_blocked_rows_give_zeros_not_nan():
    b, h, t, d = 2, 2, 70, 8
    q, k, v, dout = inputs(b, h, t, t, d, seed=3)
    kp = np.zeros((b, t), dtype=bool)
    kp[1, :] = True  # every key of the second sequence blocked
    kp[0, :3] = True  # causal + these: queries 0..2 of the first sequence see nothing
    (out, dq, dk, dv), layer = run(True, q, k, v, dout, True, kp)
    plain, _ = run(False, q, k, v, dout, True, kp)
    for a, p in zip((out, dq, dk, dv), plain):
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, p, rtol=0, atol=EXACT)
    assert np.all(out[1] == 0) and np.all(dq[1] == 0) and np.all(dk[1] == 0) and np.all(dv[1] == 0)
    assert np.all(out[0, :, :3] == 0) and np.all(dq[0, :, :3] == 0)
    assert np.all(dk[0, :, :3] == 0) and np.all(dv[0, :, :3] == 0)  # blocked keys get no gradient
    lse = layer.log_sum_exp()
    assert np.all(np.isposinf(lse[1])) and np.all(np.isposinf(lse[0, :, :3])) and np.all(np.isfinite(lse[0, :, 3:]))


def test_large_scores_do_not_overflow():
    """Scores of several hundred: the running maximum keeps every exp() <= 1."""
    q, k, v, dout = inputs(1, 1, 140, 140, 16, seed=5)
    q *= 60.0
    tiled, _ = run(True, q, k, v, dout, True)
    plain, _ = run(False, q, k, v, dout, True)
    for a, p in zip(tiled, plain):
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, p, rtol=0, atol=1e-9 * max(1.0, np.abs(p).max()))


@pytest.mark.parametrize("causal", [True, False])
def test_gradient_check(causal):
    q, k, v, w = inputs(1, 1, 130, 130, 2, seed=11)  # three blocks of queries, two of keys
    kp = np.zeros((1, 130), dtype=bool)
    kp[0, 120:] = True
    layer = TiledAttention(dtype="float64")

    def loss() -> float:
        return float(np.sum(layer.forward(q, k, v, causal=causal, key_padding=kp) * w))

    loss()
    dq, dk, dv = layer.backward(w)
    errors = check_against_numeric(loss, {"q": (q, dq), "k": (k, dk), "v": (v, dv)})
    assert set(errors) == {"q", "k", "v"}


# float32 runs the block products on the AVX2 loop of kernels/block_product where the CPU has it
# (float64 always on Eigen's): widths that fill whole 16-column strips and widths that leave a
# narrower, masked last strip (d 8, 24; 150 and 70 keys), causal, padded and cross attention.
F32_CASES = [
    (1, 2, 150, 150, 32, True, False),
    (2, 2, 300, 300, 64, True, True),
    (1, 2, 130, 130, 8, False, False),
    (2, 1, 100, 150, 24, False, True),
    (1, 2, 150, 70, 16, False, True),
]


@pytest.mark.parametrize("b,h,tq,tk,d,causal,padded", F32_CASES)
def test_float32_against_float64(b, h, tq, tk, d, causal, padded):
    q, k, v, dout = inputs(b, h, tq, tk, d, seed=tq + d)
    kp = key_padding(b, tk, 9) if padded else None
    f64, _ = run(True, q, k, v, dout, causal, kp)
    f32, _ = run(True, *(a.astype(np.float32) for a in (q, k, v, dout)), causal=causal, key_padding=kp)
    for name, a, b64 in zip(("out", "dq", "dk", "dv"), f32, f64):
        assert a.dtype == np.float32
        assert rel_error(a, b64) < 1e-5, name


def test_result_does_not_depend_on_the_thread_count():
    """One head: one thread runs the fused backward, two split it by key and query blocks."""
    q, k, v, dout = inputs(1, 1, 300, 300, 16, seed=9)
    before = tc.get_num_threads()
    try:
        tc.set_num_threads(1)
        one, _ = run(True, q, k, v, dout, True)
        tc.set_num_threads(2)
        two, _ = run(True, q, k, v, dout, True)
    finally:
        tc.set_num_threads(before)
    for a, b in zip(one, two):
        assert np.array_equal(a, b)


@pytest.mark.torch
def test_torch_sdpa_parity():
    torch = pytest.importorskip("torch")  # installed by the test extras; not in .ci/sanitize's venv

    q, k, v, dout = inputs(2, 3, 130, 130, 16, seed=13)
    tq, tk, tv = (torch.from_numpy(a).requires_grad_(True) for a in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    out.backward(torch.from_numpy(dout))
    ours, _ = run(True, q, k, v, dout, True)
    for a, t in zip(ours, (out, tq.grad, tk.grad, tv.grad)):
        np.testing.assert_allclose(a, t.detach().numpy(), rtol=0, atol=1e-10)


# --- MultiHeadAttention's attention_impl and the adapter ------------------------------------


def _mha_pair(seed=0):
    plain = MultiHeadAttention(16, 4, seed=seed, dtype="float64")
    tiled = MultiHeadAttention(16, 4, seed=seed, attention_impl="tiled", dtype="float64")
    return plain, tiled


def test_multi_head_attention_tiled_equals_plain():
    rng = np.random.default_rng(1)
    b, t, s = 2, 150, 190
    x = rng.standard_normal((b, t, 16))
    mem = rng.standard_normal((b, s, 16))
    self_mask = look_ahead_mask(t)
    cross_mask = np.zeros((b, 1, s), dtype=bool)
    cross_mask[1, 0, 170:] = True
    dout = rng.standard_normal((b, t, 16))
    for memory, mask in ((None, self_mask), (mem, cross_mask)):
        plain, tiled = _mha_pair()
        y_plain = plain.forward(x, memory, mask)
        y_tiled = tiled.forward(x, memory, mask)
        np.testing.assert_allclose(y_tiled, y_plain, rtol=0, atol=EXACT)
        assert tiled.last_forward_tiled and not plain.last_forward_tiled
        g_plain, g_tiled = plain.backward(dout), tiled.backward(dout)
        if memory is None:  # dx alone; cross-attention returns (dx, dmemory)
            g_plain, g_tiled = (g_plain,), (g_tiled,)
        for a, p in zip(g_tiled, g_plain):
            np.testing.assert_allclose(a, p, rtol=0, atol=EXACT)
        for (name, pt), pp in zip(tiled.parameters().items(), plain.parameters().values()):
            np.testing.assert_allclose(pt.grad, pp.grad, rtol=0, atol=EXACT, err_msg=name)
        with pytest.raises(RuntimeError, match="tiled"):
            tiled.attention_weights()


def test_multi_head_attention_auto_and_bad_impl():
    mha = MultiHeadAttention(8, 2, attention_impl="auto", dtype="float64")
    assert mha.attention_impl == "auto"
    mha.forward(np.zeros((1, 5, 8)))
    assert not mha.last_forward_tiled  # short: plain, weights available
    assert mha.attention_weights().shape == (1, 2, 5, 5)
    with pytest.raises(ValueError, match="attention_impl must be 'plain', 'tiled' or 'auto'"):
        mha.attention_impl = "flash"
    with pytest.raises(ValueError, match="attention_impl"):
        MultiHeadAttention(8, 2, attention_impl="fast")
    with pytest.raises(TypeError, match="attention_impl"):
        SoftmaxSelfAttention(8, 2, attention_impl=3)


@pytest.mark.parametrize("impl", ["plain", "tiled"])
def test_softmax_self_attention_gradient_check(impl):
    layer = SoftmaxSelfAttention(4, 2, seed=3, attention_impl=impl, dtype="float64")
    randomise_parameters(layer, seed=5)
    x = np.random.default_rng(4).standard_normal((1, 70, 4))
    w = np.random.default_rng(8).standard_normal((1, 70, 4))

    def loss() -> float:
        return float(np.sum(layer.forward(x, causal=True) * w))

    layer.zero_grad()
    layer.forward(x, causal=True)
    dx = layer.backward(w)
    analytic = {name: p.grad.copy() for name, p in layer.parameters().items()}
    items = parameter_items(layer, analytic)
    items["x"] = (x, dx)
    errors = check_against_numeric(loss, items)
    assert "x" in errors and "query.weight" in errors and "output.bias" in errors


def test_softmax_self_attention_equals_masked_multi_head_attention():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 80, 16))
    dout = rng.standard_normal((2, 80, 16))
    mha = MultiHeadAttention(16, 4, seed=2, dtype="float64")
    want = mha.forward(x, mask=look_ahead_mask(80))
    dx_want = mha.backward(dout)
    for impl in ("plain", "tiled", "auto"):
        sa = SoftmaxSelfAttention(16, 4, seed=2, attention_impl=impl, dtype="float64")
        assert list(sa.parameters()) == list(mha.parameters())
        np.testing.assert_allclose(sa.forward(x, causal=True), want, rtol=0, atol=EXACT)
        assert sa.last_forward_tiled == (impl == "tiled")
        np.testing.assert_allclose(sa.backward(dout), dx_want, rtol=0, atol=EXACT)
    sa = SoftmaxSelfAttention(16, 4, seed=2, dtype="float64")
    np.testing.assert_allclose(sa.forward(x, causal=False), mha.forward(x), rtol=0, atol=EXACT)


# --- bad input ---------------------------------------------------------------------------------


def test_bad_input():
    layer = TiledAttention(dtype="float64")
    q, k, v, _ = inputs(1, 2, 5, 6, 4)
    with pytest.raises(RuntimeError, match="forward"):
        layer.backward(q)
    with pytest.raises(ValueError, match="TiledAttention.forward: expected"):
        layer.forward(q, k, v[:, :, :5])
    with pytest.raises(ValueError, match="q"):
        layer.forward(q[0], k, v)
    with pytest.raises(ValueError, match="key_padding must have shape"):
        layer.forward(q, k, v, key_padding=np.zeros((1, 5)))
    with pytest.raises(TypeError, match="q"):
        layer.forward(q.astype(np.int64), k, v)
    bad = q.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="q"):
        layer.forward(bad, k, v)
    out = layer.forward(q, k, v)
    with pytest.raises(ValueError, match="dout must have the output's shape"):
        layer.backward(np.zeros((1, 2, 6, 4)))
    assert out.shape == (1, 2, 5, 4)
    with pytest.raises(ValueError, match="d_model 6 is not divisible by n_heads 4"):
        SoftmaxSelfAttention(6, 4)
