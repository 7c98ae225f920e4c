"""Linear attention (Katharopoulos et al. 2020): the kernel and the multi-head layer against a
NumPy reference written from the formula (the causal form as the explicitly masked product), a
PyTorch restatement of the reference implementation's formulas (causal by an explicit cumulative
sum of phi(K_j) V_j^T) with autograd gradients, central differences in float64, the RNN form
against the parallel form, float32 against float64, and bad input."""

import numpy as np
import pytest
import torch

import transformer_cpp as tc
from helpers.gradcheck import TOLERANCE, numeric_grad, rel_error
from helpers.layer_checks import check_input_errors, randomise_parameters

pytestmark = pytest.mark.torch  # the module imports PyTorch

EPS = 1e-6  # the denominator's eps
CHUNK = 64  # tuning::kLinearAttentionChunk: lengths around it cross the chunk boundaries
EXACT = 1e-10  # float64: the chunked cumulative sums against the masked product, the RNN form
TOL32 = 2e-5  # float32 against float64, relative to max |value|
LENGTHS = [1, 3, 63, 64, 65, 128, 150]  # shorter than a chunk, one chunk exactly, across chunks


# --- NumPy reference, straight from the formula ---------------------------------------------------


def phi(x):
    """elu(x) + 1: x + 1 for x > 0, e^x otherwise."""
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def masked_linear_attention(q, k, v, causal):
    """(phi(Q) phi(K)^T, lower triangle when causal) V / row sums + eps: the quadratic form."""
    a = phi(q) @ np.swapaxes(phi(k), -1, -2)  # (..., T, T) similarities, all positive
    if causal:
        a = np.tril(a)  # position i sees j <= i
    return (a @ v) / (a.sum(axis=-1, keepdims=True) + EPS)


def linear_mha_reference(params, x, causal, n_heads):
    """The whole layer from its parameters: project, split heads, linear attention, concatenate,
    project (the projections are MultiHeadAttention's)."""

    def lin(a, name):
        return a @ params[f"{name}.weight"].T + params[f"{name}.bias"]

    q, k, v = lin(x, "query"), lin(x, "key"), lin(x, "value")
    b, t, d = q.shape
    dk = d // n_heads

    def heads(a):
        return a.reshape(b, t, n_heads, dk).transpose(0, 2, 1, 3)

    ctx = masked_linear_attention(heads(q), heads(k), heads(v), causal)
    return lin(ctx.transpose(0, 2, 1, 3).reshape(b, t, d), "output")


# --- PyTorch restatement of the reference implementation's formulas -------------------------------


def torch_linear_attention(q, k, v, causal):
    """(N, H, L, D) tensors. Non-causal: KV = sum_s phi(K_s) V_s^T, Z = 1 / (phi(Q) . sum_s phi(K_s) + eps),
    out = phi(Q) KV Z. Causal: the same with KV and sum phi(K) replaced by their cumulative sums
    over positions (S_i and z_i of the paper, stored per position: the memory-hungry form)."""
    fq, fk = torch.nn.functional.elu(q) + 1, torch.nn.functional.elu(k) + 1
    if not causal:
        kv = torch.einsum("nhsd,nhsm->nhmd", fk, v)
        z = 1 / (torch.einsum("nhld,nhd->nhl", fq, fk.sum(dim=2)) + EPS)
        return torch.einsum("nhld,nhmd,nhl->nhlm", fq, kv, z)
    s = torch.cumsum(torch.einsum("nhld,nhlm->nhldm", fk, v), dim=2)  # S_i, (N, H, L, D, M)
    z = 1 / (torch.einsum("nhld,nhld->nhl", fq, fk.cumsum(dim=2)) + EPS)
    return torch.einsum("nhld,nhldm,nhl->nhlm", fq, s, z)


def inputs(rng, shape, dtype="float64"):
    """q, k, v with both signs (both branches of phi) and a spread of magnitudes."""
    return tuple((1.5 * rng.standard_normal(shape)).astype(dtype) for _ in range(3))


def check_numeric(loss, items):
    """Relative error of each analytic gradient against central differences (one thread)."""
    threads = tc.get_num_threads()
    tc.set_num_threads(1)
    try:
        errors = {name: rel_error(g, numeric_grad(loss, view)) for name, (view, g) in items.items()}
    finally:
        tc.set_num_threads(threads)
    for name, (_, g) in items.items():
        assert np.linalg.norm(g) > 1e-8, f"{name}: zero gradient, the check proves nothing"
    bad = {n: e for n, e in errors.items() if not e <= TOLERANCE}
    assert not bad, f"gradient check failed (relative error > {TOLERANCE}): {bad}"
    return errors


# --- the kernel -----------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("t", LENGTHS)
def test_cumulative_form_equals_masked_form(t, causal):
    rng = np.random.default_rng(t)
    q, k, v = inputs(rng, (2, 3, t, 5))  # (B, H, T, d)
    out = tc.linear_attention(q, k, v, causal=causal)
    ref = masked_linear_attention(q, k, v, causal)
    assert out.shape == q.shape and out.dtype == np.float64
    np.testing.assert_allclose(out, ref, rtol=0, atol=EXACT)
    if causal:  # a prefix does not see what follows it
        head = tc.linear_attention(q[:, :, : t // 2 + 1], k[:, :, : t // 2 + 1], v[:, :, : t // 2 + 1], causal=True)
        np.testing.assert_allclose(head, out[:, :, : t // 2 + 1], rtol=0, atol=EXACT)


def test_causal_differs_from_non_causal_and_state_is_the_total():
    rng = np.random.default_rng(1)
    q, k, v = inputs(rng, (2, 70, 4))
    la = tc.LinearAttention(dtype="float64")
    causal = la.forward(q, k, v, causal=True)
    s, z = la.state()
    full = la.forward(q, k, v, causal=False)
    # the last position sees everything either way; the first sees only itself when causal
    np.testing.assert_allclose(causal[:, -1], full[:, -1], rtol=0, atol=EXACT)
    assert np.abs(causal[:, 0] - full[:, 0]).max() > 1e-3
    a00 = (phi(q[:, 0]) * phi(k[:, 0])).sum(axis=-1, keepdims=True)  # (G, 1)
    np.testing.assert_allclose(causal[:, 0], a00 * v[:, 0] / (a00 + EPS), rtol=0, atol=EXACT)
    # the state after the sequence: S = sum_j phi(K_j)^T V_j, z = sum_j phi(K_j)
    np.testing.assert_allclose(s, np.swapaxes(phi(k), -1, -2) @ v, rtol=1e-13, atol=0)
    np.testing.assert_allclose(z, phi(k).sum(axis=1), rtol=1e-13, atol=0)
    np.testing.assert_allclose(la.state()[0], s, rtol=1e-13, atol=0)  # the same for the non-causal form


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [(2, 5, 4), (1, 67, 3)])
def test_kernel_gradients(shape, causal):
    rng = np.random.default_rng(2)
    q, k, v = inputs(rng, shape)
    w = rng.standard_normal(shape)
    la = tc.LinearAttention(dtype="float64")

    def loss():
        return float(np.sum(la.forward(q, k, v, causal=causal) * w))

    la.forward(q, k, v, causal=causal)
    dq, dk, dv = la.backward(w)
    assert dq.shape == dk.shape == dv.shape == shape
    check_numeric(loss, {"q": (q, dq), "k": (k, dk), "v": (v, dv)})


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("t", [7, 64, 130])
def test_kernel_matches_torch_formulas_and_autograd(t, causal):
    rng = np.random.default_rng(3)
    q, k, v = inputs(rng, (2, 2, t, 6))
    g = rng.standard_normal(q.shape)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    ref = torch_linear_attention(tq, tk, tv, causal)
    ref.backward(torch.tensor(g))
    la = tc.LinearAttention(dtype="float64")
    out = la.forward(q, k, v, causal=causal)
    dq, dk, dv = la.backward(g)
    np.testing.assert_allclose(out, ref.detach().numpy(), rtol=0, atol=EXACT)
    for name, mine, theirs in (("q", dq, tq), ("k", dk, tk), ("v", dv, tv)):
        want = theirs.grad.numpy()
        np.testing.assert_allclose(mine, want, rtol=0, atol=1e-9 * np.abs(want).max(), err_msg=name)


@pytest.mark.parametrize("causal", [True, False])
def test_kernel_float32_against_float64(causal):
    rng = np.random.default_rng(4)
    q, k, v = inputs(rng, (2, 2, 100, 8))
    g = rng.standard_normal(q.shape)
    results = {}
    for dtype in ("float32", "float64"):
        la = tc.LinearAttention(dtype=dtype)
        out = la.forward(*(a.astype(dtype) for a in (q, k, v)), causal=causal)
        results[dtype] = (out, *la.backward(g.astype(dtype)))
        assert all(r.dtype == np.dtype(dtype) for r in results[dtype])
    for a32, a64 in zip(results["float32"], results["float64"]):
        np.testing.assert_allclose(a32, a64, rtol=0, atol=TOL32 * np.abs(a64).max())


# --- the layer ------------------------------------------------------------------------------------


def test_layer_parameters_are_those_of_multi_head_attention():
    lin = tc.LinearMultiHeadAttention(8, 2, seed=3, dtype="float64")
    mha = tc.MultiHeadAttention(8, 2, seed=3, dtype="float64")
    assert isinstance(lin, tc.layers.Layer)
    assert (lin.d_model, lin.n_heads, lin.d_k) == (8, 2, 4)
    p, m = lin.parameters(), mha.parameters()
    assert list(p) == list(m) == [f"{n}.{k}" for n in ("query", "key", "value", "output") for k in ("weight", "bias")]
    for name in p:  # same layout and, for one seed, the same initial values
        np.testing.assert_array_equal(p[name].value, m[name].value)
    other = tc.LinearMultiHeadAttention(8, 2, seed=4, dtype="float64").parameters()
    assert not np.allclose(other["query.weight"].value, p["query.weight"].value)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype,tol", [("float64", 1e-12), ("float32", TOL32)])
def test_layer_matches_numpy_reference(dtype, tol, causal):
    rng = np.random.default_rng(5)
    layer = tc.LinearMultiHeadAttention(12, 3, seed=1, dtype=dtype)
    randomise_parameters(layer, 6)
    x = rng.standard_normal((2, 70, 12)).astype(dtype)
    y = layer.forward(x, causal=causal)
    params64 = {n: p.value.astype(np.float64) for n, p in layer.parameters().items()}
    ref = linear_mha_reference(params64, x.astype(np.float64), causal, 3)
    assert y.shape == x.shape and y.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y, ref, rtol=0, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("t", [5, 66])
def test_layer_gradients(t, causal):
    rng = np.random.default_rng(7)
    layer = tc.LinearMultiHeadAttention(6, 2, seed=2, dtype="float64")
    randomise_parameters(layer, 8)
    x = rng.standard_normal((2, t, 6))
    w = rng.standard_normal(x.shape)

    def loss():
        return float(np.sum(layer.forward(x, causal=causal) * w))

    layer.zero_grad()
    layer.forward(x, causal=causal)
    dx = layer.backward(w)
    assert dx.shape == x.shape
    grads = {n: p.grad.copy() for n, p in layer.parameters().items()}
    items = {"x": (x, dx)}
    items.update({n: (p.value, grads[n]) for n, p in layer.parameters().items()})
    check_numeric(loss, items)
    # parameter gradients accumulate over backward calls; zero_grad clears them
    layer.forward(x, causal=causal)
    layer.backward(w)
    np.testing.assert_allclose(layer.parameters()["key.weight"].grad, 2 * grads["key.weight"], rtol=1e-12)
    layer.zero_grad()
    assert not any(p.grad.any() for p in layer.parameters().values())


@pytest.mark.parametrize("dtype,tol", [("float64", EXACT), ("float32", TOL32)])
def test_rnn_form_equals_causal_forward(dtype, tol):
    rng = np.random.default_rng(9)
    layer = tc.LinearMultiHeadAttention(8, 2, seed=5, dtype=dtype)
    randomise_parameters(layer, 10)
    b, t = 3, 70
    x = rng.standard_normal((b, t, 8)).astype(dtype)
    parallel = layer.forward(x, causal=True)
    state = layer.new_state(b)
    assert (state.rows, state.length) == (b, 0)
    for i in range(t):
        y = layer.step(x[:, i], state)
        assert y.shape == (b, 8) and y.dtype == np.dtype(dtype)
        np.testing.assert_allclose(y, parallel[:, i], rtol=0, atol=tol * np.abs(parallel).max(), err_msg=f"step {i}")
    assert state.length == t
    # the state is S = sum phi(k)^T v and z = sum phi(k) of each sequence and head
    s, z = state.values()
    p = {n: v.value.astype(np.float64) for n, v in layer.parameters().items()}
    xk = x.astype(np.float64) @ p["key.weight"].T + p["key.bias"]
    xv = x.astype(np.float64) @ p["value.weight"].T + p["value.bias"]
    fk = phi(xk.reshape(b, t, 2, 4)).transpose(0, 2, 1, 3)
    vv = xv.reshape(b, t, 2, 4).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(s, np.swapaxes(fk, -1, -2) @ vv, rtol=10 * tol, atol=0)
    np.testing.assert_allclose(z, fk.sum(axis=2), rtol=10 * tol, atol=0)
    # stepping does not disturb the forward's cache: backward still works after it
    assert layer.backward(np.ones_like(x)).shape == x.shape


def test_release_frees_the_forward():
    layer = tc.LinearMultiHeadAttention(4, 1, dtype="float64")
    x = np.random.default_rng(0).standard_normal((1, 3, 4))
    layer.forward(x, causal=True)
    layer.release()
    with pytest.raises(RuntimeError, match="forward"):
        layer.backward(np.ones_like(x))
    layer.forward(x, causal=True)
    assert layer.backward(np.ones_like(x)).shape == x.shape


# --- bad input ------------------------------------------------------------------------------------


def test_bad_input():
    with pytest.raises(ValueError, match="LinearMultiHeadAttention: d_model 6 is not divisible by n_heads 4"):
        tc.LinearMultiHeadAttention(6, 4)
    with pytest.raises(ValueError, match="n_heads"):
        tc.LinearMultiHeadAttention(6, 0)
    layer = tc.LinearMultiHeadAttention(4, 2, dtype="float64")
    x = np.zeros((2, 3, 4))
    with pytest.raises(RuntimeError, match="call forward"):
        layer.backward(x)
    check_input_errors(layer, (2, 3, 4))
    with pytest.raises(ValueError, match="not finite|NaN|finite"):
        layer.forward(np.full((2, 3, 4), np.nan))
    with pytest.raises(ValueError, match="at least one position"):
        layer.forward(np.zeros((2, 0, 4)))
    layer.forward(x, causal=True)
    with pytest.raises(ValueError, match="dout"):
        layer.backward(np.zeros((2, 4, 4)))
    # generation
    with pytest.raises(ValueError, match="rows"):
        layer.new_state(0)
    state = layer.new_state(2)
    with pytest.raises(ValueError, match=r"x must have shape \(2, 4\)"):
        layer.step(np.zeros((3, 4)), state)
    with pytest.raises(ValueError, match=r"x must have shape \(2, 4\)"):
        layer.step(np.zeros((2, 1, 4)), state)
    with pytest.raises(ValueError, match="state was made for d_model 8"):
        layer.step(np.zeros((2, 4)), tc.LinearMultiHeadAttention(8, 2, dtype="float64").new_state(2))
    with pytest.raises(TypeError):
        layer.step(np.zeros((2, 4)), "not a state")
    assert state.length == 0  # nothing above advanced it
    # the kernel
    q = np.zeros((2, 5, 3))
    with pytest.raises(ValueError, match="one shape"):
        tc.linear_attention(q, np.zeros((2, 6, 3)), np.zeros((2, 6, 3)))
    with pytest.raises(ValueError, match="one shape"):
        tc.linear_attention(q, q, np.zeros((2, 5, 4)))
    with pytest.raises(ValueError, match="rank >= 2"):
        tc.linear_attention(np.zeros(3), np.zeros(3), np.zeros(3))
    with pytest.raises(TypeError, match="causal must be True or False"):
        tc.linear_attention(q, q, q, causal="yes")
    with pytest.raises(TypeError, match="floating-point"):
        tc.linear_attention(q.astype(np.int32), q, q)
    with pytest.raises(ValueError, match="finite|NaN"):
        tc.linear_attention(np.full((2, 5, 3), np.inf), q, q)
    with pytest.raises(ValueError, match="empty"):
        tc.linear_attention(np.zeros((2, 0, 3)), np.zeros((2, 0, 3)), np.zeros((2, 0, 3)))
    la = tc.LinearAttention(dtype="float64")
    with pytest.raises(RuntimeError, match="call forward"):
        la.backward(q)
    la.forward(q, q, q)
    with pytest.raises(ValueError, match="dout must have the output's shape"):
        la.backward(np.zeros((2, 5, 4)))
