"""Transformer-XL's relative multi-head attention with a segment memory: the relative shift against
a naive gather of R_{i-j}; each of the paper's four score terms against NumPy written term by term;
a PyTorch re-statement with the padded shift of the paper's code; gradients of x and every
parameter against central differences (float64), with and without memory; the memory as a
stop-gradient input; evaluation with state reuse against the training forward; bad input."""

import numpy as np
import pytest

import transformer_cpp as tc
from helpers.layer_checks import check_accumulated, check_against_numeric, grads_of, parameter_items
from helpers.layer_checks import randomise_parameters
from transformer_cpp.functional import rel_shift

D, H = 8, 2
DK = D // H
TOL64 = 1e-10


# --- a readable reference -----------------------------------------------------------------------


def sinusoids(distances, d):
    """R_r = [sin(r w_0) ... sin(r w_{d/2-1}) | cos(r w_0) ... cos(r w_{d/2-1})], w_i = 10000^(-2i/d)."""
    w = 1.0 / 10000.0 ** (np.arange(0, d, 2) / d)
    angle = np.outer(np.asarray(distances, dtype=np.float64), w)
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)


def score_terms(params, x, memory, n_heads=H, clamp_len=None):
    """The four terms of the paper's score (Sec. 3.3) for every query i and key j of the
    concatenation [memory ; x], by head: (B, H, T, L) each, before the 1/sqrt(d_k).

    (a) q_i . k_j              content
    (b) q_i . W_{k,R} R_{i-j}  content-dependent position
    (c) u . k_j                global content bias
    (d) v . W_{k,R} R_{i-j}    global position bias

    where i - j is the distance between the query's position M + i and the key's position j."""
    b, t, d = x.shape
    m = memory.shape[1]
    dk = d // n_heads
    h = np.concatenate([memory, x], axis=1)

    def lin(a, name):
        return a @ params[f"{name}.weight"].T + params[f"{name}.bias"]

    def heads(a):
        return a.reshape(a.shape[0], a.shape[1], n_heads, dk).transpose(0, 2, 1, 3)

    q, k = heads(lin(x, "query")), heads(lin(h, "key"))
    u, v = params["u"], params["v"]
    # R_{i-j} W_{k,R}^T gathered for every (i, j): distance M + i - j (later keys get distance 0;
    # the causal mask removes them)
    dist = np.maximum(m + np.arange(t)[:, None] - np.arange(m + t)[None, :], 0)
    if clamp_len is not None:
        dist = np.minimum(dist, clamp_len)
    r = sinusoids(dist.reshape(-1), d) @ params["position.weight"].T
    r = r.reshape(t, m + t, n_heads, dk)  # (T, L, H, dk)
    a_term = np.einsum("bhid,bhjd->bhij", q, k)
    b_term = np.einsum("bhid,ijhd->bhij", q, r)
    c_term = np.broadcast_to(np.einsum("hd,bhjd->bhj", u, k)[:, :, None, :], a_term.shape)
    d_term = np.broadcast_to(np.einsum("hd,ijhd->hij", v, r)[None], a_term.shape)
    return {"a": a_term, "b": b_term, "c": c_term, "d": d_term}


def reference(params, x, memory, n_heads=H, terms="abcd", clamp_len=None):
    """The layer's output and weights from the score terms named in `terms`: scaled, causal over
    [memory ; x], softmax, values, output projection."""
    b, t, d = x.shape
    m = memory.shape[1]
    dk = d // n_heads
    parts = score_terms(params, x, memory, n_heads, clamp_len)
    scores = sum(parts[name] for name in terms) / np.sqrt(dk)
    later = np.arange(m + t)[None, :] > m + np.arange(t)[:, None]  # key j after query i
    scores = np.where(later, -np.inf, scores)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    h = np.concatenate([memory, x], axis=1)
    val = (h @ params["value.weight"].T + params["value.bias"]).reshape(b, m + t, n_heads, dk).transpose(0, 2, 1, 3)
    ctx = (w @ val).transpose(0, 2, 1, 3).reshape(b, t, d)
    return ctx @ params["output.weight"].T + params["output.bias"], w


def values(layer):
    return {n: p.value.copy() for n, p in layer.parameters().items()}


def layer64(seed=1, clamp_len=None):
    layer = tc.RelativeMultiHeadAttention(D, H, seed=seed, clamp_len=clamp_len, dtype="float64")
    randomise_parameters(layer, seed + 10)
    return layer


# --- the relative shift -------------------------------------------------------------------------


@pytest.mark.parametrize("t,m", [(1, 0), (4, 0), (3, 2), (5, 7), (1, 6)])
def test_rel_shift_is_a_gather_of_R_i_minus_j(t, m):
    """Scores against every distance once, column p for distance L-1-p, shifted: entry (i, j) is
    the score against R_{M+i-j}; later keys (j > M + i) are 0."""
    rng = np.random.default_rng(t * 10 + m)
    L = m + t
    q = rng.standard_normal((2, t, 6))
    R = rng.standard_normal((L, 6))  # R[r]: the row of distance r
    raw = q @ R[::-1].T  # (2, T, L), column p: distance L-1-p
    for dtype in ("float64", "float32"):
        out = rel_shift(raw.astype(dtype))
        assert out.dtype == np.dtype(dtype) and out.shape == raw.shape
        for i in range(t):
            for j in range(L):
                expect = q[:, i] @ R[m + i - j] if j <= m + i else np.zeros(2)
                np.testing.assert_allclose(out[:, i, j], expect, rtol=0, atol=1e-12 if dtype == "float64" else 1e-5)
    # the distances themselves, exactly
    dist = np.broadcast_to(np.arange(L - 1, -1, -1, dtype=np.float64), (t, L))
    want = np.where(np.arange(L)[None] <= m + np.arange(t)[:, None], m + np.arange(t)[:, None] - np.arange(L)[None], 0)
    np.testing.assert_array_equal(rel_shift(dist), want)


def test_rel_shift_refuses_more_queries_than_keys():
    with pytest.raises(ValueError, match="rel_shift: x must have shape"):
        rel_shift(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="rel_shift"):
        rel_shift(np.zeros(3))


# --- forward against the paper's formula ----------------------------------------------------------


@pytest.mark.parametrize("terms", ["a", "b", "c", "d", "abcd"])
def test_each_score_term_matches_the_paper(terms):
    """Each term on its own (the others switched off through the parameters that carry them), and
    all four together, against NumPy written term by term, in float64."""
    rng = np.random.default_rng(3)
    layer = layer64()
    p = layer.parameters()
    zero = {
        "a": ["position.weight", "u"],  # q . k
        "b": ["key.weight", "key.bias", "v"],  # q . W_R R
        "c": ["query.weight", "query.bias", "position.weight"],  # u . k
        "d": ["query.weight", "query.bias", "key.weight", "key.bias"],  # v . W_R R
        "abcd": [],
    }[terms]
    for name in zero:
        p[name].value[...] = 0.0
    x = rng.standard_normal((2, 4, D))
    memory = rng.standard_normal((2, 3, D))
    y = layer.forward(x, memory)
    w = layer.attention_weights()
    ref_y, ref_w = reference(values(layer), x, memory, terms=terms)
    assert y.shape == (2, 4, D) and w.shape == (2, H, 4, 7)
    np.testing.assert_allclose(w, ref_w, rtol=0, atol=TOL64)
    np.testing.assert_allclose(y, ref_y, rtol=0, atol=TOL64 * np.abs(ref_y).max())
    # the term does something: the weights are not uniform over the visible keys
    assert np.ptp(w[0, 0, -1]) > 1e-3


@pytest.mark.parametrize("m", [0, 1, 5])
def test_memory_lengths_and_clamp(m):
    rng = np.random.default_rng(4 + m)
    x = rng.standard_normal((2, 3, D))
    memory = rng.standard_normal((2, m, D))
    for clamp in (None, 2):
        layer = layer64(clamp_len=clamp)
        assert layer.clamp_len == clamp
        y = layer.forward(x, memory)
        np.testing.assert_allclose(y, reference(values(layer), x, memory, clamp_len=clamp)[0], rtol=0, atol=TOL64)
    # M = 0: memory=None and an empty memory are the same
    if m == 0:
        np.testing.assert_array_equal(layer.forward(x), layer.forward(x, memory))
    # query i sees exactly M + i + 1 keys
    w = layer.attention_weights()
    assert np.all((w > 0) == (np.arange(m + 3)[None] <= m + np.arange(3)[:, None]))


@pytest.mark.torch
def test_pytorch_restatement_with_the_padded_shift():
    """Written from the paper's formulation: AC = (q + u) k^T, BD = (q + v) (W_R R)^T with R for
    distances L-1 ... 0, shifted by padding one zero column, viewing (L+1, T), dropping the first
    row; causal mask, softmax. Forward and, through autograd, every gradient agree in float64."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    layer = layer64(seed=2)
    x = rng.standard_normal((2, 4, D))
    memory = rng.standard_normal((2, 3, D))
    dout = rng.standard_normal((2, 4, D))
    P = {n: torch.tensor(v, requires_grad=True) for n, v in values(layer).items()}
    X = torch.tensor(x, requires_grad=True)
    mem = torch.tensor(memory)  # stop-gradient

    def shift(bd):  # (B, H, T, L)
        b, h, t, L = bd.shape
        padded = torch.cat([bd.new_zeros(b, h, t, 1), bd], dim=-1)
        return padded.view(b, h, L + 1, t)[:, :, 1:].reshape(b, h, t, L)

    b, t, _ = x.shape
    m = memory.shape[1]
    L = m + t
    cat = torch.cat([mem, X], dim=1)
    q = (X @ P["query.weight"].T + P["query.bias"]).view(b, t, H, DK).transpose(1, 2)
    k = (cat @ P["key.weight"].T + P["key.bias"]).view(b, L, H, DK).transpose(1, 2)
    v = (cat @ P["value.weight"].T + P["value.bias"]).view(b, L, H, DK).transpose(1, 2)
    r = torch.tensor(sinusoids(np.arange(L - 1, -1, -1), D)) @ P["position.weight"].T
    r = r.view(L, H, DK).transpose(0, 1)  # (H, L, dk)
    ac = (q + P["u"][None, :, None]) @ k.transpose(-1, -2)
    bd = shift((q + P["v"][None, :, None]) @ r.transpose(-1, -2)[None])
    mask = torch.triu(torch.ones(t, L, dtype=torch.bool), diagonal=1 + m)
    att = torch.softmax(((ac + bd) / DK**0.5).masked_fill(mask, float("-inf")), dim=-1)
    y = (att @ v).transpose(1, 2).reshape(b, t, D) @ P["output.weight"].T + P["output.bias"]
    (y * torch.tensor(dout)).sum().backward()

    out = layer.forward(x, memory)
    np.testing.assert_allclose(out, y.detach().numpy(), rtol=0, atol=TOL64)
    layer.zero_grad()
    dx = layer.backward(dout)
    np.testing.assert_allclose(dx, X.grad.numpy(), rtol=0, atol=TOL64)
    for name, param in layer.parameters().items():
        np.testing.assert_allclose(param.grad, P[name].grad.numpy(), rtol=0, atol=TOL64, err_msg=name)


# --- gradients ----------------------------------------------------------------------------------


@pytest.mark.parametrize("m", [0, 3])
def test_gradients_of_x_and_every_parameter(m):
    rng = np.random.default_rng(6 + m)
    layer = layer64(seed=3)
    x = rng.standard_normal((2, 3, D))
    memory = rng.standard_normal((2, m, D)) if m else None
    w = rng.standard_normal((2, 3, D))

    def loss():
        return float(np.sum(layer.forward(x, memory) * w))

    layer.zero_grad()
    layer.forward(x, memory)
    dx = layer.backward(w)
    assert isinstance(dx, np.ndarray) and dx.shape == x.shape
    grads = {n: p.grad.copy() for n, p in layer.parameters().items()}
    assert set(grads) == {
        "query.weight",
        "query.bias",
        "key.weight",
        "key.bias",
        "value.weight",
        "value.bias",
        "position.weight",
        "output.weight",
        "output.bias",
        "u",
        "v",
    }
    check_against_numeric(loss, {"x": (x, dx), **parameter_items(layer, grads)})


def test_memory_is_a_stop_gradient_input():
    """Changing the memory changes the output, but backward returns only dx, and the same dx as
    when the memory is a constant: nothing flows into it."""
    rng = np.random.default_rng(8)
    layer = layer64(seed=4)
    x = rng.standard_normal((2, 3, D))
    mem1, mem2 = rng.standard_normal((2, 2, 4, D))
    dout = rng.standard_normal((2, 3, D))
    y1 = layer.forward(x, mem1)
    assert not np.allclose(y1, layer.forward(x, mem2))
    layer.forward(x, mem1)
    grad = layer.backward(dout)
    assert isinstance(grad, np.ndarray) and grad.shape == x.shape  # no memory gradient returned

    # dx is the derivative with respect to x alone (memory held fixed): central differences of x
    def loss():
        return float(np.sum(layer.forward(x, mem1) * dout))

    layer.zero_grad()
    layer.forward(x, mem1)
    dx = layer.backward(dout)
    check_against_numeric(loss, {"x": (x, dx)})


def test_gradients_accumulate_until_zero_grad():
    rng = np.random.default_rng(9)
    layer = layer64(seed=5)
    x, memory = rng.standard_normal((2, 3, D)), rng.standard_normal((2, 2, D))
    dout = rng.standard_normal((2, 3, D))
    layer.zero_grad()
    layer.forward(x, memory)
    layer.backward(dout)
    once = grads_of(layer)
    layer.backward(dout)
    check_accumulated(layer, once, rtol=1e-12, atol=1e-14)


# --- evaluation with state reuse ------------------------------------------------------------------


def test_state_reuse_equals_the_training_forward():
    """A segment evaluated against the cached memory equals forward(x, memory); token by token it
    equals the same; afterwards the cache holds the last mem_len positions of [memory ; x], so the
    next segment sees what forward(x2, that memory) sees."""
    rng = np.random.default_rng(10)
    layer = layer64(seed=6)
    memory = rng.standard_normal((2, 5, D))
    x = rng.standard_normal((2, 4, D))
    x2 = rng.standard_normal((2, 3, D))
    want = layer.forward(x, memory)

    layer.infer_reset(2, 5)
    layer.infer_memory(memory)
    assert layer.infer_length == 5
    np.testing.assert_allclose(layer.infer(x), want, rtol=0, atol=1e-12)
    assert layer.infer_length == 5
    np.testing.assert_allclose(
        layer.infer(x2), layer.forward(x2, np.concatenate([memory, x], 1)[:, -5:]), rtol=0, atol=1e-12
    )

    # one token at a time: each attends to the memory and the tokens before it
    layer.infer_reset(2, 9)
    layer.infer_memory(memory)
    steps = [layer.infer(x[:, i : i + 1]) for i in range(4)]
    np.testing.assert_allclose(np.concatenate(steps, 1), want, rtol=0, atol=1e-12)
    assert layer.infer_length == 9

    # a sliding window of 3 positions, many steps (the cache compacts its rows as it goes)
    layer.infer_reset(2, 3)
    seq = rng.standard_normal((2, 20, D))
    for i in range(20):
        got = layer.infer(seq[:, i : i + 1])
        ctx = seq[:, max(0, i - 3) : i]
        np.testing.assert_allclose(got, layer.forward(seq[:, i : i + 1], ctx), rtol=0, atol=1e-12)


def test_float32_agrees_with_float64():
    rng = np.random.default_rng(11)
    l64 = layer64(seed=7)
    l32 = tc.RelativeMultiHeadAttention(D, H, seed=7, dtype="float32")
    for name, p in l32.parameters().items():
        p.value[...] = l64.parameters()[name].value
    x = rng.standard_normal((2, 5, D))
    memory = rng.standard_normal((2, 4, D))
    dout = rng.standard_normal((2, 5, D))
    y64 = l64.forward(x, memory)
    y32 = l32.forward(x.astype(np.float32), memory.astype(np.float32))
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, y64, rtol=0, atol=2e-5 * np.abs(y64).max())
    l64.zero_grad()
    l32.zero_grad()
    dx64, dx32 = l64.backward(dout), l32.backward(dout.astype(np.float32))
    np.testing.assert_allclose(dx32, dx64, rtol=0, atol=2e-5 * np.abs(dx64).max())
    # relative to the largest parameter gradient: key.bias's true gradient is 0 (a shift of each
    # score row), so float32 leaves only rounding there
    scale = max(np.abs(p.grad).max() for p in l64.parameters().values())
    for name, p in l32.parameters().items():
        np.testing.assert_allclose(p.grad, l64.parameters()[name].grad, rtol=0, atol=2e-5 * scale, err_msg=name)
    l32.infer_reset(2, 4)
    l32.infer_memory(memory.astype(np.float32))
    np.testing.assert_allclose(l32.infer(x.astype(np.float32)), y64, rtol=0, atol=2e-5 * np.abs(y64).max())


# --- bad input ----------------------------------------------------------------------------------


def test_bad_input_names_the_argument():
    layer = tc.RelativeMultiHeadAttention(D, H, dtype="float64")
    x = np.zeros((2, 3, D))
    with pytest.raises(ValueError, match="memory must have last dimension 8"):
        layer.forward(x, np.zeros((2, 4, D + 1)))
    with pytest.raises(ValueError, match=r"memory must have the batch size of x \(2\)"):
        layer.forward(x, np.zeros((3, 4, D)))
    with pytest.raises(ValueError, match="memory must have shape"):
        layer.forward(x, np.zeros((4, D)))
    with pytest.raises(ValueError, match="x must have last dimension 8"):
        layer.forward(np.zeros((2, 3, D - 1)))
    with pytest.raises(ValueError, match="x must hold at least one position"):
        layer.forward(np.zeros((2, 0, D)))
    with pytest.raises(ValueError, match="memory"):
        layer.forward(x, np.full((2, 1, D), np.nan))
    with pytest.raises(ValueError, match="divisible"):
        tc.RelativeMultiHeadAttention(D, 3)
    with pytest.raises(ValueError, match="even"):
        tc.RelativeMultiHeadAttention(3, 1)
    with pytest.raises(ValueError, match="clamp_len"):
        tc.RelativeMultiHeadAttention(D, H, clamp_len=-1)
    with pytest.raises(RuntimeError, match="call infer_reset"):
        tc.RelativeMultiHeadAttention(D, H).infer(np.zeros((1, 1, D), np.float32))
    layer.infer_reset(2, 4)
    with pytest.raises(ValueError, match=r"memory must have the cache's batch size \(2\)"):
        layer.infer_memory(np.zeros((1, 4, D)))
    with pytest.raises(ValueError, match="x must have last dimension"):
        layer.infer(np.zeros((2, 1, D + 2)))
    with pytest.raises(ValueError, match="mem_len"):
        layer.infer_reset(2, -1)
    with pytest.raises(RuntimeError, match="call forward"):
        tc.RelativeMultiHeadAttention(D, H).backward(np.zeros((2, 3, D), np.float32))
