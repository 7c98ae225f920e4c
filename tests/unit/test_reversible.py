"""ReversibleStack: Reformer's reversible residual layers (Kitaev et al. 2020, Sec. 3).

Checked here: the backward rebuilds the stack's input from its output (Eq. 8); the gradients equal
those of the ordinary stack of the same blocks, which stores every block's activations, with
dropout off and on (the masks replayed); the ordinary stack equals the same blocks composed from
the package's own layers; float64 central differences; the chunked feed-forward equals the
unchunked one; a readable NumPy reference of a block and of its inverse; the activations held
do not grow with depth; bad input.
"""

from __future__ import annotations

import numpy as np
import pytest

import transformer_cpp as tc
from helpers.gradcheck import rel_error
from helpers.layer_checks import check_against_numeric, parameter_items, randomise_parameters
from transformer_cpp.bench.reversible import child_activation_memory
from transformer_cpp.functional import look_ahead_mask

D, HEADS, D_FF = 8, 2, 16


def make(
    n_layers=2, dtype="float64", dropout=0.0, reversible=True, causal=True, seed=3, chunk_rows=None, attention="softmax"
):
    stack = tc.ReversibleStack(
        n_layers,
        D,
        HEADS,
        D_FF,
        dropout,
        causal=causal,
        reversible=reversible,
        chunk_rows=chunk_rows,
        seed=seed,
        dtype=dtype,
        attention=attention,
    )
    # move LayerNorm weights and biases away from 1 and 0 (same draws for stacks of the same shape)
    randomise_parameters(stack, seed=11)
    return stack


def inputs(shape=(2, 5, D), seed=0, dtype="float64"):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype), rng.standard_normal(shape).astype(dtype)


def grads(stack):
    return {name: p.grad.copy() for name, p in stack.parameters().items()}


# --- a readable NumPy reference ---------------------------------------------------------------


def np_layer_norm(x, w, b, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def np_attention(x, p, heads, causal):
    """Multi-head self-attention; p maps 'query.weight', ... to arrays (PyTorch layout (out, in))."""
    B, T, d = x.shape
    dk = d // heads

    def project(name):
        y = x @ p[name + ".weight"].T + p[name + ".bias"]
        return y.reshape(B, T, heads, dk).transpose(0, 2, 1, 3)  # (B, H, T, dk)

    q, k, v = project("query"), project("key"), project("value")
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dk)  # (B, H, T, T)
    if causal:
        scores = np.where(np.triu(np.ones((T, T), bool), 1), -np.inf, scores)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = (weights @ v).transpose(0, 2, 1, 3).reshape(B, T, d)
    return context @ p["output.weight"].T + p["output.bias"]


def np_feed_forward(x, p):
    h = np.maximum(0.0, x @ p["linear1.weight"].T + p["linear1.bias"])
    return h @ p["linear2.weight"].T + p["linear2.bias"]


def block_params(stack, i):
    """The parameters of block i by their names inside the block ('norm1.weight', ...)."""
    prefix = f"layers.{i}."
    return {n[len(prefix) :]: p.value.copy() for n, p in stack.parameters().items() if n.startswith(prefix)}


def np_F(x2, p, causal=True):
    """F(x) = Attention(LN_1(x)) (dropout off)."""
    n = np_layer_norm(x2, p["norm1.weight"], p["norm1.bias"])
    sub = {k[len("self_attention.") :]: v for k, v in p.items() if k.startswith("self_attention.")}
    return np_attention(n, sub, HEADS, causal)


def np_G(y1, p):
    """G(x) = FFN(LN_2(x)) (dropout off)."""
    n = np_layer_norm(y1, p["norm2.weight"], p["norm2.bias"])
    sub = {k[len("feed_forward.") :]: v for k, v in p.items() if k.startswith("feed_forward.")}
    return np_feed_forward(n, sub)


def np_block(x1, x2, p, causal=True):
    """Eq. 7: y1 = x1 + F(x2), y2 = x2 + G(y1)."""
    y1 = x1 + np_F(x2, p, causal)
    y2 = x2 + np_G(y1, p)
    return y1, y2


def np_block_inverse(y1, y2, p, causal=True):
    """Eq. 8: x2 = y2 - G(y1), x1 = y1 - F(x2)."""
    x2 = y2 - np_G(y1, p)
    x1 = y1 - np_F(x2, p, causal)
    return x1, x2


def np_stack(stack, x, causal=True):
    """The whole stack: x1 = x2 = x, the blocks, output (y1 + y2) / 2."""
    x1 = x2 = x
    for i in range(stack.n_layers):
        x1, x2 = np_block(x1, x2, block_params(stack, i), causal)
    return (x1 + x2) / 2


@pytest.mark.parametrize("causal", [True, False])
def test_stack_matches_numpy_reference(causal):
    stack = make(n_layers=3, causal=causal)
    x, _ = inputs()
    y = stack.forward(x)
    ref = np_stack(stack, x, causal)
    assert np.abs(y - ref).max() <= 1e-12 * max(1.0, np.abs(ref).max())


def test_numpy_block_inverse_rebuilds_its_inputs():
    # the reference's Eq. 8 undoes its Eq. 7 (so the reference itself is a reversible block)
    stack = make(n_layers=1)
    p = block_params(stack, 0)
    x1, x2 = inputs()
    r1, r2 = np_block_inverse(*np_block(x1, x2, p), p)
    assert np.abs(r1 - x1).max() <= 1e-12 and np.abs(r2 - x2).max() <= 1e-12


def test_causal_output_ignores_later_positions():
    stack = make(n_layers=2)
    x, _ = inputs()
    y = stack.forward(x)
    x2 = x.copy()
    x2[:, -1] += 1.0
    y2 = stack.forward(x2)
    assert np.array_equal(y[:, :-1], y2[:, :-1])
    assert not np.allclose(y[:, -1], y2[:, -1])


# --- reversibility --------------------------------------------------------------------------------


@pytest.mark.parametrize("attention", ["softmax", "linear"])
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_backward_rebuilds_the_input_float64(dropout, attention):
    stack = make(n_layers=4, dropout=dropout, attention=attention)
    x, dout = inputs()
    stack.forward(x, training=True)
    stack.backward(dout)
    x1, x2 = stack.rebuilt_inputs()
    assert np.abs(x1 - x).max() <= 1e-10
    assert np.abs(x2 - x).max() <= 1e-10


def test_backward_rebuilds_the_input_float32():
    stack = make(n_layers=4, dtype="float32", dropout=0.2)
    x, dout = inputs(dtype="float32")
    stack.forward(x, training=True)
    stack.backward(dout)
    for r in stack.rebuilt_inputs():
        assert np.linalg.norm(r - x) <= 1e-5 * np.linalg.norm(x)


def test_the_ordinary_stack_does_not_rebuild():
    # with reversible=False the streams at the bottom are the stack's own last values (y), not x
    stack = make(n_layers=2, reversible=False)
    x, dout = inputs()
    stack.forward(x)
    stack.backward(dout)
    x1, _ = stack.rebuilt_inputs()
    assert np.abs(x1 - x).max() > 1e-3


# --- gradients ------------------------------------------------------------------------------------


@pytest.mark.parametrize("attention", ["softmax", "linear"])
@pytest.mark.parametrize("dropout", [0.0, 0.25])
def test_gradients_equal_the_ordinary_stack(dropout, attention):
    rev = make(n_layers=3, dropout=dropout, reversible=True, attention=attention)
    ordinary = make(n_layers=3, dropout=dropout, reversible=False, attention=attention)
    assert list(rev.parameters()) == list(ordinary.parameters())
    for step in range(2):  # the second forward draws new masks, the same in both stacks
        x, dout = inputs(seed=step)
        for s in (rev, ordinary):
            s.zero_grad()
        y_rev = rev.forward(x, training=True)
        y_ord = ordinary.forward(x, training=True)
        assert np.abs(y_rev - y_ord).max() <= 1e-12
        dx_rev = rev.backward(dout)
        dx_ord = ordinary.backward(dout)
        assert np.abs(dx_rev - dx_ord).max() <= 1e-10
        g_rev, g_ord = grads(rev), grads(ordinary)
        for name in g_ord:
            assert np.abs(g_rev[name] - g_ord[name]).max() <= 1e-10 * max(1.0, np.abs(g_ord[name]).max()), name
    if dropout:
        # dropout was on: the training output differs from the inference one
        assert not np.allclose(rev.forward(x, training=True), rev.forward(x))


def test_lsh_attention_hashes_are_replayed_by_the_rebuild():
    # 160 positions: three chunks of 64 and four buckets, so the buckets decide what attends to
    # what; the rebuilt attention must hash with the forward's rotations for x and the gradients
    # to come out as the ordinary stack's, step after step (each forward draws new rotations)
    rev = make(n_layers=2, reversible=True, attention="lsh")
    ordinary = make(n_layers=2, reversible=False, attention="lsh")
    for step in range(2):
        x, dout = inputs(shape=(2, 160, D), seed=step)
        for s in (rev, ordinary):
            s.zero_grad()
        assert np.abs(rev.forward(x, training=True) - ordinary.forward(x, training=True)).max() <= 1e-12
        dx_rev, dx_ord = rev.backward(dout), ordinary.backward(dout)
        assert np.abs(dx_rev - dx_ord).max() <= 1e-10
        for r in rev.rebuilt_inputs():
            assert np.abs(r - x).max() <= 1e-10
        g_rev, g_ord = grads(rev), grads(ordinary)
        for name in g_ord:
            assert np.abs(g_rev[name] - g_ord[name]).max() <= 1e-10 * max(1.0, np.abs(g_ord[name]).max()), name
    x, _ = inputs(shape=(2, 160, D), seed=0)
    assert not np.allclose(rev.forward(x), rev.forward(x), atol=1e-6)  # each forward hashes anew


class ComposedStack:
    """The ordinary stack written with the package's own layers (dropout off), weights copied
    from a ReversibleStack: each layer object is used once per forward, so it keeps its
    activations for the backward, which is the plain chain rule."""

    def __init__(self, stack):
        self.blocks = []
        self.causal = stack.causal
        for i in range(stack.n_layers):
            parts = {
                "norm1": tc.LayerNorm(D, dtype="float64"),
                "self_attention": tc.MultiHeadAttention(D, HEADS, dtype="float64"),
                "norm2": tc.LayerNorm(D, dtype="float64"),
                "feed_forward": tc.FeedForward(D, D_FF, 0.0, dtype="float64"),
            }
            for name, value in block_params(stack, i).items():
                part, rest = name.split(".", 1)
                parts[part].parameters()[rest].value[...] = value
            self.blocks.append(parts)

    def forward(self, x):
        T = x.shape[1]
        mask = look_ahead_mask(T) if self.causal else None
        x1 = x2 = x
        for b in self.blocks:
            x1 = x1 + b["self_attention"].forward(b["norm1"].forward(x2), mask=mask)
            x2 = x2 + b["feed_forward"].forward(b["norm2"].forward(x1))
        return (x1 + x2) / 2

    def backward(self, dout):
        dy1 = dy2 = dout / 2
        for b in reversed(self.blocks):
            dy1 = dy1 + b["norm2"].backward(b["feed_forward"].backward(dy2))
            dy2 = dy2 + b["norm1"].backward(b["self_attention"].backward(dy1))
        return dy1 + dy2

    def grads(self):
        out = {}
        for i, b in enumerate(self.blocks):
            for part, layer in b.items():
                for name, p in layer.parameters().items():
                    out[f"layers.{i}.{part}.{name}"] = p.grad.copy()
        return out


@pytest.mark.parametrize("reversible", [True, False])
def test_stack_equals_the_composition_of_the_package_layers(reversible):
    stack = make(n_layers=2, reversible=reversible)
    composed = ComposedStack(stack)
    x, dout = inputs()
    y = stack.forward(x, training=True)
    assert np.abs(y - composed.forward(x)).max() <= 1e-12
    stack.zero_grad()
    dx = stack.backward(dout)
    assert np.abs(dx - composed.backward(dout)).max() <= 1e-10
    expected = composed.grads()
    got = grads(stack)
    assert set(got) == set(expected)
    for name, g in expected.items():
        assert np.abs(got[name] - g).max() <= 1e-10 * max(1.0, np.abs(g).max()), name


@pytest.mark.parametrize("attention", ["softmax", "linear"])
def test_gradients_match_central_differences(attention):
    stack = make(n_layers=2, attention=attention)
    x, dout = inputs(shape=(2, 3, D))
    stack.zero_grad()
    stack.forward(x)
    dx = stack.backward(dout)
    analytic = grads(stack)

    def loss():
        return float(np.sum(stack.forward(x) * dout))

    items = parameter_items(stack, analytic)
    items["x"] = (x, dx)
    # softmax attention's key bias has a zero gradient; linear attention's does not
    check_against_numeric(loss, items, zero_gradients=("key.bias",) if attention == "softmax" else ())


# --- chunked feed-forward ---------------------------------------------------------------------------


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_chunked_feed_forward_equals_unchunked(dropout):
    x, dout = inputs(shape=(2, 7, D))  # 14 rows: chunks of 1, 5 (a partial last chunk) and all
    results = []
    for chunk in (1, 5, 14, 64):
        stack = make(n_layers=2, dropout=dropout, chunk_rows=chunk)
        assert stack.chunk_rows == chunk
        y = stack.forward(x, training=True)
        dx = stack.backward(dout)
        results.append((y, dx, grads(stack)))
    y0, dx0, g0 = results[-1]
    for y, dx, g in results[:-1]:
        assert np.abs(y - y0).max() <= 1e-13
        assert np.abs(dx - dx0).max() <= 1e-12
        for name in g0:
            assert np.abs(g[name] - g0[name]).max() <= 1e-12 * max(1.0, np.abs(g0[name]).max()), name


def test_float32_matches_float64():
    s64 = make(n_layers=2, dtype="float64")
    s32 = make(n_layers=2, dtype="float32")
    for (n, p64), p32 in zip(s64.parameters().items(), s32.parameters().values()):
        p32.value[...] = p64.value
    x, dout = inputs()
    y64 = s64.forward(x)
    y32 = s32.forward(x.astype(np.float32))
    assert rel_error(y32, y64) <= 1e-5
    assert rel_error(s32.backward(dout.astype(np.float32)), s64.backward(dout)) <= 1e-4


# --- memory ----------------------------------------------------------------------------------------


def test_activation_bytes_do_not_grow_with_depth():
    x, _ = inputs(shape=(1, 16, D), dtype="float32")
    held = {}
    for reversible in (True, False):
        for n in (2, 12):
            stack = make(n_layers=n, dtype="float32", reversible=reversible)
            assert stack.activation_bytes() == 0
            stack.forward(x, training=True)
            held[reversible, n] = stack.activation_bytes()
    assert held[True, 12] == held[True, 2] == 2 * 16 * D * 4  # the two streams
    assert held[False, 12] == pytest.approx(6 * held[False, 2])  # every block's activations


# --- bad input -------------------------------------------------------------------------------------


def test_bad_construction():
    with pytest.raises(ValueError, match="attention must be one of 'softmax', 'linear', 'lsh', got 'lsh2'"):
        tc.ReversibleStack(2, D, HEADS, D_FF, attention="lsh2")
    with pytest.raises(ValueError, match="attention must be one of 'softmax', 'linear', 'lsh', got 'relative'"):
        tc.ReversibleStack(2, D, HEADS, D_FF, attention="relative")
    with pytest.raises(TypeError, match="attention"):
        tc.ReversibleStack(2, D, HEADS, D_FF, attention=3)
    with pytest.raises(ValueError, match="n_layers"):
        tc.ReversibleStack(0, D, HEADS, D_FF)
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        tc.ReversibleStack(2, 10, 3, D_FF)
    with pytest.raises(ValueError, match="chunk_rows"):
        tc.ReversibleStack(2, D, HEADS, D_FF, chunk_rows=0)
    with pytest.raises(ValueError, match="dropout"):
        tc.ReversibleStack(2, D, HEADS, D_FF, dropout=1.0)
    with pytest.raises(TypeError, match="causal"):
        tc.ReversibleStack(2, D, HEADS, D_FF, causal="yes")
    with pytest.raises(ValueError, match="dtype"):
        tc.ReversibleStack(2, D, HEADS, D_FF, dtype="int32")


def test_bad_forward_and_backward():
    stack = make(n_layers=2)
    x, dout = inputs()
    with pytest.raises(RuntimeError, match="forward"):
        stack.backward(dout)
    with pytest.raises(ValueError, match=r"ReversibleStack.forward: x must have last dimension 8"):
        stack.forward(np.zeros((2, 5, D + 1)))
    with pytest.raises(ValueError, match=r"shape \(batch, length, 8\)"):
        stack.forward(np.zeros((10, D)))
    with pytest.raises(TypeError, match="floating-point"):
        stack.forward(np.zeros((2, 5, D), dtype=np.int64))
    bad = x.copy()
    bad[0, 1, 2] = np.nan
    with pytest.raises(ValueError, match="x"):
        stack.forward(bad)
    with pytest.raises(RuntimeError, match=r"rebuilt_inputs: call forward\(\) and backward\(\) first"):
        stack.rebuilt_inputs()
    stack.forward(x, training=True)
    with pytest.raises(ValueError, match="dout"):
        stack.backward(dout[:, :3])
    stack.backward(dout)
    with pytest.raises(RuntimeError, match="already called"):
        stack.backward(dout)


def test_memory_bench_child_reports_a_forward_and_backward():
    row = child_activation_memory(3, "reversible", length=16, d_model=D, n_heads=HEADS, d_ff=D_FF)
    assert row["layers"] == 3 and row["mode"] == "reversible"
    assert row["activation_bytes_mb"] == pytest.approx(2 * 16 * D * 4 / 2**20)
    assert row["peak_mb"] >= row["forward_peak_mb"] >= 0
    with pytest.raises(ValueError, match="mode must be one of reversible, ordinary"):
        child_activation_memory(2, "stored", length=16, d_model=D, n_heads=HEADS, d_ff=D_FF)
