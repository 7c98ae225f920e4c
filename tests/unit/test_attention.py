"""Scaled dot-product and multi-head attention: values against NumPy written from the formula,
gradients against central differences (float64), masks including a fully masked query row."""

import numpy as np
import pytest

import transformer_cpp as tc
from helpers.layer_checks import check_accumulated, check_against_numeric, grads_of, parameter_items
from helpers.layer_checks import randomise_parameters

TOL64 = 1e-12  # float64 forward vs NumPy: a handful of roundings on O(1) values
TOL32 = 2e-6  # float32 forward vs a float64 NumPy reference, relative to max |value|


def sdpa_reference(q, k, v, mask=None):
    """softmax(Q K^T / sqrt(d) with blocked keys removed) V; a fully blocked row gives zeros."""
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    blocked = np.zeros(s.shape, bool) if mask is None else np.broadcast_to(np.asarray(mask) != 0, s.shape)
    s = np.where(blocked, -np.inf, s)
    mx = s.max(axis=-1, keepdims=True)
    dead = np.isneginf(mx)
    e = np.where(blocked, 0.0, np.exp(s - np.where(dead, 0.0, mx)))
    w = np.where(dead, 0.0, e / np.where(dead, 1.0, e.sum(axis=-1, keepdims=True)))
    return w @ v, w


def mha_reference(params, x, memory=None, mask=None, n_heads=2):
    """Multi-head attention from its parameters (name -> array), as in the paper: project, split
    heads, attend, concatenate, project."""

    def lin(a, name):
        return a @ params[f"{name}.weight"].T + params[f"{name}.bias"]

    kv = x if memory is None else memory
    q, k, v = lin(x, "query"), lin(kv, "key"), lin(kv, "value")
    b, tq, d = q.shape
    tk = k.shape[1]
    dk = d // n_heads

    def heads(t, n):
        return t.reshape(b, n, n_heads, dk).transpose(0, 2, 1, 3)

    m = None if mask is None else np.asarray(mask)[:, None]
    ctx, w = sdpa_reference(heads(q, tq), heads(k, tk), heads(v, tk), m)
    ctx = ctx.transpose(0, 2, 1, 3).reshape(b, tq, d)
    return lin(ctx, "output"), w


def decoder_mask_with_dead_row(rng, b, t):
    """Look-ahead + target padding, and one query row with every key blocked."""
    tokens = rng.integers(1, 9, (b, t))
    tokens[0, t - 2 :] = 0
    mask = tc.decoder_self_attention_mask(tokens).copy()
    mask[1, 2, :] = True
    return mask


# --- scaled dot-product attention ---------------------------------------------------------------


@pytest.mark.parametrize("dtype,tol", [("float64", TOL64), ("float32", TOL32)])
def test_sdpa_matches_numpy_with_masks(dtype, tol):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((3, 5, 4)).astype(dtype) for _ in range(3))
    mask = decoder_mask_with_dead_row(rng, 3, 5)
    out, w = tc.ScaledDotProductAttention(dtype=dtype).forward(q, k, v, mask)
    ref_out, ref_w = sdpa_reference(*(a.astype(np.float64) for a in (q, k, v)), mask)
    assert out.dtype == np.dtype(dtype) and out.shape == (3, 5, 4) and w.shape == (3, 5, 5)
    np.testing.assert_allclose(w, ref_w, rtol=0, atol=tol)
    np.testing.assert_allclose(out, ref_out, rtol=0, atol=tol * np.abs(ref_out).max())
    # blocked keys get exactly zero weight; live rows sum to 1; the dead row is all zeros
    assert np.all(w[mask] == 0)
    sums = w.sum(-1)
    dead = mask.all(-1)
    assert dead.sum() == 1 and np.all(sums[dead] == 0) and np.all(out[dead] == 0)
    np.testing.assert_allclose(sums[~dead], 1.0, rtol=0, atol=10 * tol)


def test_sdpa_leading_dimensions_and_broadcast_mask():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 3, 4, 5))  # (B, H, Tq, d)
    k = rng.standard_normal((2, 3, 6, 5))
    v = rng.standard_normal((2, 3, 6, 5))
    mask = rng.random((4, 6)) < 0.3  # one (Tq, Tk) mask for every batch entry and head
    out, w = tc.scaled_dot_product_attention(q, k, v, mask)
    ref_out, ref_w = sdpa_reference(q, k, v, mask)
    assert out.shape == (2, 3, 4, 5) and w.shape == (2, 3, 4, 6) and out.dtype == np.float64
    np.testing.assert_allclose(out, ref_out, rtol=0, atol=TOL64)
    np.testing.assert_allclose(w, ref_w, rtol=0, atol=TOL64)
    # no mask: a plain softmax
    out, _ = tc.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(out, sdpa_reference(q, k, v)[0], rtol=0, atol=TOL64)


@pytest.mark.parametrize("tq,tk", [(5, 5), (3, 5)])
def test_sdpa_gradients(tq, tk):
    rng = np.random.default_rng(2)
    q = rng.standard_normal((3, tq, 4))
    k = rng.standard_normal((3, tk, 4))
    v = rng.standard_normal((3, tk, 4))
    if tq == tk:
        mask = decoder_mask_with_dead_row(rng, 3, tq)
    else:
        mask = rng.random((3, tq, tk)) < 0.4
        mask[0, 1, :] = True  # a dead row
        mask[2, 0, :] = False
    attn = tc.ScaledDotProductAttention(dtype="float64")
    w = rng.standard_normal((3, tq, 4))

    def loss():
        return float(np.sum(attn.forward(q, k, v, mask)[0] * w))

    attn.forward(q, k, v, mask)
    dq, dk, dv = attn.backward(w)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    # the dead query row receives no gradient (its output is the constant 0)
    assert not dq[mask.all(-1)].any()
    check_against_numeric(loss, {"q": (q, dq), "k": (k, dk), "v": (v, dv)})


# --- multi-head attention -----------------------------------------------------------------------


def test_mha_parameters_and_shapes():
    mha = tc.MultiHeadAttention(8, 2, dtype="float64")
    p = mha.parameters()
    assert list(p) == [f"{n}.{k}" for n in ("query", "key", "value", "output") for k in ("weight", "bias")]
    assert all(p[f"{n}.weight"].value.shape == (8, 8) for n in ("query", "key", "value", "output"))
    assert all(p[f"{n}.bias"].value.shape == (8,) for n in ("query", "key", "value", "output"))
    assert (mha.d_model, mha.n_heads, mha.d_k) == (8, 2, 4)
    # the three projections start different (independent streams), biases at zero
    assert not np.allclose(p["query.weight"].value, p["key.weight"].value)
    assert not any(p[f"{n}.bias"].value.any() for n in ("query", "key", "value", "output"))
    # the same seed gives the same weights, another seed other weights
    same = tc.MultiHeadAttention(8, 2, dtype="float64").parameters()
    other = tc.MultiHeadAttention(8, 2, seed=1, dtype="float64").parameters()
    np.testing.assert_array_equal(same["value.weight"].value, p["value.weight"].value)
    assert not np.allclose(other["value.weight"].value, p["value.weight"].value)


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("dtype,tol", [("float64", TOL64), ("float32", TOL32)])
def test_mha_matches_numpy(cross, dtype, tol):
    rng = np.random.default_rng(3)
    mha = tc.MultiHeadAttention(8, 2, seed=4, dtype=dtype)
    randomise_parameters(mha, 5)
    x = rng.standard_normal((3, 4, 8)).astype(dtype)
    memory = rng.standard_normal((3, 6, 8)).astype(dtype) if cross else None
    tk = 6 if cross else 4
    mask = rng.random((3, 4, tk)) < 0.3
    mask[1, 2, :] = True
    y = mha.forward(x, memory, mask)
    params64 = {n: p.value.astype(np.float64) for n, p in mha.parameters().items()}
    ref, ref_w = mha_reference(
        params64, x.astype(np.float64), None if memory is None else memory.astype(np.float64), mask
    )
    assert y.shape == (3, 4, 8) and y.dtype == np.dtype(dtype)
    np.testing.assert_allclose(y, ref, rtol=0, atol=tol * np.abs(ref).max())
    w = mha.attention_weights()
    assert w.shape == (3, 2, 4, tk)
    np.testing.assert_allclose(w, ref_w, rtol=0, atol=tol)
    # the dead query row attends to nothing in every head: its context is 0, so y is the output bias
    assert np.all(w[1, :, 2] == 0)
    np.testing.assert_allclose(y[1, 2], mha.parameters()["output.bias"].value, rtol=0, atol=tol)


def test_mha_mask_forms_agree():
    """(B, Tq, Tk), (B, 1, Tq, Tk), (B, 1, Tk), 0/1 integers and 0/-inf additive masks are the same mask."""
    rng = np.random.default_rng(6)
    mha = tc.MultiHeadAttention(8, 2, dtype="float64")
    x = rng.standard_normal((2, 5, 8))
    key_pad = np.array([[0, 0, 0, 1, 1], [0, 0, 0, 0, 1]], bool)
    full = np.broadcast_to(key_pad[:, None, :], (2, 5, 5))
    base = mha.forward(x, mask=full)
    for m in (
        full[:, None],
        key_pad[:, None, :],
        full.astype(np.int64),
        np.where(full, -np.inf, 0.0),
        np.where(full, -1e9, 0.0),
    ):
        np.testing.assert_array_equal(mha.forward(x, mask=m), base)
    assert not np.allclose(mha.forward(x), base)  # the mask does something


def test_mha_self_attention_gradients():
    rng = np.random.default_rng(7)
    mha = tc.MultiHeadAttention(8, 2, seed=1, dtype="float64")
    randomise_parameters(mha, 8)
    x = rng.standard_normal((3, 5, 8))
    mask = decoder_mask_with_dead_row(rng, 3, 5)
    w = rng.standard_normal((3, 5, 8))

    def loss():
        return float(np.sum(mha.forward(x, mask=mask) * w))

    mha.zero_grad()
    mha.forward(x, mask=mask)
    dx = mha.backward(w)
    assert isinstance(dx, np.ndarray) and dx.shape == x.shape
    grads = {n: p.grad.copy() for n, p in mha.parameters().items()}
    items = {"x": (x, dx), **parameter_items(mha, grads)}
    check_against_numeric(loss, items)


def test_mha_cross_attention_gradients():
    rng = np.random.default_rng(9)
    mha = tc.MultiHeadAttention(8, 2, seed=2, dtype="float64")
    randomise_parameters(mha, 10)
    x = rng.standard_normal((3, 4, 8))
    memory = rng.standard_normal((3, 6, 8))
    src_pad = np.zeros((3, 6), bool)
    src_pad[0, 4:] = True
    src_pad[2, :] = True  # an all-padding source: every query row of batch 2 is dead
    mask = src_pad[:, None, :]
    w = rng.standard_normal((3, 4, 8))

    def loss():
        return float(np.sum(mha.forward(x, memory, mask) * w))

    mha.zero_grad()
    mha.forward(x, memory, mask)
    dx, dmem = mha.backward(w)
    assert dx.shape == x.shape and dmem.shape == memory.shape
    # padded memory rows are never read, so they get no gradient; nor do queries that read nothing
    assert not dmem[src_pad].any() and not dx[2].any()
    grads = {n: p.grad.copy() for n, p in mha.parameters().items()}
    items = {"x": (x, dx), "memory": (memory, dmem), **parameter_items(mha, grads)}
    check_against_numeric(loss, items)


def test_mha_gradients_accumulate_until_zero_grad():
    rng = np.random.default_rng(11)
    mha = tc.MultiHeadAttention(8, 2, dtype="float64")
    x = rng.standard_normal((2, 3, 8))
    d = rng.standard_normal((2, 3, 8))
    mha.forward(x)
    mha.backward(d)
    g1 = grads_of(mha)
    mha.backward(d)
    check_accumulated(mha, g1, rtol=1e-14, atol=1e-300)
