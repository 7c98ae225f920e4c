"""The core's layers and functions: shapes, dtypes, strides, views that outlive their owner, reference values."""

from __future__ import annotations

import re
import threading
from typing import Any, Callable, Dict, List

import numpy as np

import transformer_cpp as tc
from transformer_cpp import kernels

from .base import (
    assert_close,
    linear_ref,
    HUGE,
    V,
    api,
    assert_unchanged,
    churn,
    err,
    raises,
    rand,
    weights,
)


# --- layers and functions of the core ----------------------------------------------------------


@api("linear: strided (non-contiguous) input")
def _(c):
    lin = tc.Linear(5, 3, seed=1, dtype="float64")
    x = rand(4, 10)[:, ::2]
    assert_close(lin.forward(x), linear_ref(lin, x), 1e-12)


@api("linear: Fortran-order input")
def _(c):
    lin = tc.Linear(5, 3, seed=1, dtype="float64")
    x = np.asfortranarray(rand(6, 5))
    assert_close(lin.forward(x), linear_ref(lin, x), 1e-12)


@api("linear: transposed 3-D input")
def _(c):
    lin = tc.Linear(5, 3, seed=1, dtype="float64")
    x = rand(5, 4, 2).transpose(2, 1, 0)  # (2, 4, 5), no axis contiguous
    assert_close(lin.forward(x), linear_ref(lin, x), 1e-12)


@api("linear: integer input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = np.arange(6).reshape(2, 3)
    assert_close(lin.forward(x), linear_ref(lin, x), 1e-12)


@api("linear: float16 input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1)
    x = np.ones((2, 3), np.float16)
    assert_close(lin.forward(x), linear_ref(lin, x.astype(np.float64)), 1e-5)


@api("linear: boolean input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = np.array([[True, False, True]])
    assert_close(lin.forward(x), linear_ref(lin, x.astype(np.float64)), 1e-12)


err("linear: complex input", lambda c: tc.Linear(3, 2).forward(np.ones((2, 3), complex)), "complex")
err("linear: object array", lambda c: tc.Linear(3, 2).forward(np.array([[1, "a", None]], dtype=object)), "x")
err("linear: string array", lambda c: tc.Linear(3, 2).forward(np.array([["1", "2", "3"]])), "x")


@api("linear: nested list input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    assert_close(lin.forward([[1.0, 2.0, 3.0]]), linear_ref(lin, np.array([[1.0, 2.0, 3.0]])), 1e-12)


@api("linear: 4-D input")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = rand(2, 3, 4, 3)
    assert_close(lin.forward(x), linear_ref(lin, x), 1e-12)


@api("linear: 1-D input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = rand(3)
    assert_close(lin.forward(x), linear_ref(lin, x), 1e-12)


err("linear: 0-D input", lambda c: tc.Linear(3, 2).forward(np.float32(1.0)), "x")
err("linear: wrong last dimension", lambda c: tc.Linear(3, 2).forward(np.ones((2, 4), np.float32)), "3")
err("linear: backward before forward", lambda c: tc.Linear(3, 2).backward(np.ones((2, 2), np.float32)), "forward")


def _linear_backward_wrong_shape(c):
    lin = tc.Linear(3, 2)
    lin.forward(np.ones((2, 3), np.float32))
    return lin.backward(np.ones((3, 2), np.float32))


err("linear: backward with the wrong dout shape", _linear_backward_wrong_shape, "dout")


@api("linear: two backwards accumulate gradients")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x, d = rand(4, 3), rand(4, 2, seed=1)
    lin.forward(x)
    lin.backward(d)
    g1 = lin.parameters()["weight"].grad.copy()
    lin.backward(d)
    assert_close(lin.parameters()["weight"].grad, 2 * g1, 1e-12)
    assert_close(g1, d.T @ x, 1e-12)


err("linear: zero in_features", lambda c: tc.Linear(0, 3), "in_features")
err("linear: negative out_features", lambda c: tc.Linear(3, -1), "out_features")
err("linear: dtype int32", lambda c: tc.Linear(3, 2, dtype="int32"), "dtype")
err("linear: dtype float16", lambda c: tc.Linear(3, 2, dtype="float16"), "dtype")
err("linear: dtype nonsense", lambda c: tc.Linear(3, 2, dtype="banana"), "dtype")


@api("linear: output not overwritten by the next forward")
def _(c):
    lin = tc.Linear(3, 2, seed=1)
    y1 = lin.forward(np.ones((2, 3), np.float32))
    keep = y1.copy()
    lin.forward(np.full((2, 3), 5, np.float32))
    assert np.array_equal(y1, keep), "the first output changed"


@api("linear: dx not overwritten by the next backward")
def _(c):
    lin = tc.Linear(3, 2, seed=1)
    lin.forward(np.ones((2, 3), np.float32))
    d1 = lin.backward(np.ones((2, 2), np.float32))
    keep = d1.copy()
    lin.forward(np.ones((2, 3), np.float32))
    lin.backward(np.full((2, 2), 9, np.float32))
    assert np.array_equal(d1, keep), "the first dx changed"


@api("linear: float64 layer, float32 input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = rand(2, 3).astype(np.float32)
    assert_close(lin.forward(x), linear_ref(lin, x), 1e-6)


@api("linear: read-only input")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = rand(2, 3)
    x.setflags(write=False)
    assert_close(lin.forward(x), linear_ref(lin, x), 1e-12)


@api("linear: zero rows", expect="either")
def _(c):
    out = tc.Linear(3, 2).forward(np.zeros((0, 3), np.float32))
    assert out.shape == (0, 2), out.shape


@api("linear: without bias")
def _(c):
    lin = tc.Linear(3, 2, bias=False, seed=2, dtype="float64")
    assert list(lin.parameters()) == ["weight"], list(lin.parameters())
    x = rand(4, 3)
    assert_close(lin.forward(x), x @ lin.parameters()["weight"].value.T, 1e-12)


@api("linear: parameter outlives its layer")
def _(c):
    p = tc.Linear(64, 64, seed=3).parameters()["weight"]
    keep = np.array(p.value, copy=True)
    churn()
    assert np.array_equal(p.value, keep), "the weight changed after its layer was freed"
    p.value[...] = 1.0  # writing must not corrupt anything
    churn()
    assert np.all(p.value == 1.0)


@api("linear: value view outlives its layer")
def _(c):
    v = tc.Linear(64, 64, seed=3).parameters()["weight"].value
    keep = v.copy()
    churn()
    assert np.array_equal(v, keep), "the view changed after its layer was freed"


@api("adam: steps parameters of a freed layer")
def _(c):
    params = tc.Linear(32, 32, seed=1).parameters()
    opt = tc.Adam(params)
    churn()
    for p in params.values():
        p.grad[...] = 1.0
    opt.step(1e-2)
    assert all(np.isfinite(p.value).all() for p in params.values())


err("embedding: negative id", lambda c: tc.Embedding(10, 4).forward(np.array([[1, -1]])), "-1")
err("embedding: id equal to vocab_size", lambda c: tc.Embedding(10, 4).forward(np.array([[1, 10]])), "10")
err(
    "embedding: uint64 id beyond int64 is named as given",
    lambda c: tc.Embedding(10, 4).forward(np.array([[1, 2**63 + 5]], np.uint64)),
    "tokens holds the token id 9223372036854775813 at flat index 1",
    raises=ValueError,
)


@api("embedding: small uint64 ids work")
def _(c):
    emb = tc.Embedding(10, 4, dtype="float64")
    out = emb.forward(np.array([[1, 9]], np.uint64))
    assert_close(out[0], emb.parameters()["weight"].value[[1, 9]], 0)


err("embedding: float ids", lambda c: tc.Embedding(10, 4).forward(np.array([[1.0, 2.0]])), "integer")


@api("embedding: boolean ids", expect="either")
def _(c):
    emb = tc.Embedding(10, 4, seed=1, dtype="float64")
    out = emb.forward(np.array([[True, False]]))
    assert_close(out[0], emb.parameters()["weight"].value[[1, 0]], 1e-12)


@api("embedding: 1-D ids", expect="either")
def _(c):
    emb = tc.Embedding(10, 4, seed=1, dtype="float64")
    out = emb.forward(np.array([3, 4]))
    assert_close(np.reshape(out, (2, 4)), emb.parameters()["weight"].value[[3, 4]], 1e-12)


@api("embedding: repeated ids accumulate gradient, padding row none")
def _(c):
    emb = tc.Embedding(6, 3, seed=1, dtype="float64")
    emb.forward(np.array([[2, 2, 0, 5]]))
    d = rand(1, 4, 3)
    emb.backward(d)
    g = emb.parameters()["weight"].grad
    assert_close(g[2], d[0, 0] + d[0, 1], 1e-12)
    assert_close(g[5], d[0, 3], 1e-12)
    assert not g[0].any(), "the padding row got a gradient"


err(
    "embedding: non-finite scale",
    lambda c: tc.Embedding(4, 2).forward(np.ones((1, 2), int), scale=float("nan")),
    "scale",
)


@api("positional embedding: sequence beyond max_length equals a larger table")
def _(c):
    ids = np.array([[1, 2, 3, 4, 5, 6, 7, 1, 2, 3]])
    a = tc.PositionalEmbedding(9, 6, max_length=2, seed=4, dtype="float64").forward(ids)
    b = tc.PositionalEmbedding(9, 6, max_length=64, seed=4, dtype="float64").forward(ids)
    assert_close(a, b, 1e-12)


err("positional embedding: bad layout", lambda c: tc.PositionalEmbedding(9, 6, layout="spiral"), "layout")
err("positional embedding: max_length 0", lambda c: tc.PositionalEmbedding(9, 6, max_length=0), "max_length")


@api("layernorm: constant rows")
def _(c):
    ln = tc.LayerNorm(4, dtype="float64")
    out = ln.forward(np.full((3, 4), 2.5))
    assert_close(out, np.zeros((3, 4)), 1e-12)


# eps = 0 divides by zero on a constant row (a NaN reported as an overflow) and in Adam's first
# step over a zero gradient: refused where it is given
err(
    "layernorm: eps 0",
    lambda c: tc.LayerNorm(4, eps=0.0),
    "LayerNorm: eps must be a finite number > 0, got 0",
    raises=ValueError,
)
err(
    "encoder layer: eps 0",
    lambda c: tc.EncoderLayer(8, 2, 16, eps=0.0),
    "EncoderLayer: eps must be a finite number > 0, got 0.0",
    raises=ValueError,
)


@api("layernorm: width 1")
def _(c):
    out = tc.LayerNorm(1, dtype="float64").forward(rand(5, 1))
    assert_close(out, np.zeros((5, 1)), 1e-12)


@api("layernorm: subnormal values")
def _(c):
    x = np.full((2, 4), 1e-40, np.float32)
    x[:, 0] = 3e-40
    out = tc.LayerNorm(4).forward(x)
    assert np.all(np.isfinite(out)), out


@api("layernorm: float32 extremes")
def _(c):
    x = np.array([[3.0e38, -3.0e38, 1.0, 0.0]], np.float32)
    out = tc.LayerNorm(4).forward(x)
    assert np.all(np.isfinite(out)), out
    assert abs(float(out.mean())) < 1e-3


err("layernorm: wrong width", lambda c: tc.LayerNorm(4).forward(np.ones((2, 5), np.float32)), "4")
err("layernorm: negative eps", lambda c: tc.LayerNorm(4, eps=-1e-6), "eps")


@api("dropout: training=False is the identity")
def _(c):
    x = rand(4, 5)
    assert np.array_equal(tc.Dropout(0.5, dtype="float64").forward(x, training=False), x)


@api("dropout: kept values are scaled by 1/(1-p)")
def _(c):
    x = np.ones((200, 50))
    out = tc.Dropout(0.25, seed=3, dtype="float64").forward(x, training=True)
    kept = out[out != 0]
    assert_close(kept, np.full(kept.shape, 1 / 0.75), 1e-12)
    assert 0.2 < 1 - kept.size / out.size < 0.3, kept.size / out.size


@api("dropout: rate 0 is the identity")
def _(c):
    x = rand(4, 5)
    assert np.array_equal(tc.Dropout(0.0, dtype="float64").forward(x, training=True), x)


err("dropout: negative rate", lambda c: tc.Dropout(-0.1), "rate")
err("dropout: rate 1", lambda c: tc.Dropout(1.0), "rate")


@api("relu: negative zero and large values")
def _(c):
    x = np.array([[-0.0, 0.0, 1e308, -1e308]])
    out = tc.ReLU(dtype="float64").forward(x)
    assert_close(out, np.maximum(x, 0), 0)


@api("softmax: rows holding +inf give the limit")
def _(c):
    out = tc.softmax(np.array([[np.inf, 0.0, 1.0], [np.inf, -np.inf, np.inf], [1.0, 2.0, 3.0]]))
    np.testing.assert_array_equal(out[0], [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(out[1], [0.5, 0.0, 0.5])
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(out[2], e / e.sum(), rtol=1e-12)
    assert np.isnan(tc.softmax(np.array([[np.inf, np.nan]]))).all()  # NaN still shows


@api("softmax: a NaN row stays NaN, a row of -inf gives zeros")
def _(c):
    # an all-NaN row is NaN, not zeros like a fully masked (all -inf) row
    out = tc.softmax(np.array([[np.nan, np.nan], [-np.inf, -np.inf], [np.nan, 1.0]]))
    assert np.isnan(out[0]).all() and np.isnan(out[2]).all()
    np.testing.assert_array_equal(out[1], [0, 0])


@api("softmax: huge float64 values")
def _(c):
    out = tc.softmax(np.array([[1e308, -1e308, 1e308]]))
    assert_close(out, [[0.5, 0.0, 0.5]], 1e-12)


@api("softmax: integer input", expect="either")
def _(c):
    out = tc.softmax(np.array([[1, 2, 3]]))
    e = np.exp([1.0, 2.0, 3.0])
    assert_close(out, [e / e.sum()], 1e-6)


@api("softmax: 3-D input")
def _(c):
    x = rand(2, 3, 4)
    e = np.exp(x - x.max(-1, keepdims=True))
    assert_close(tc.softmax(x), e / e.sum(-1, keepdims=True), 1e-12)


err("softmax: 0-D input", lambda c: tc.softmax(np.float64(2.0)), "dimension")
err("softmax_backward: shapes differ", lambda c: tc.softmax_backward(np.ones((2, 3)), np.ones((2, 4))), "shape")


@api("softmax_backward: matches the Jacobian")
def _(c):
    x, dy = rand(3, 4), rand(3, 4, seed=2)
    y = tc.softmax(x)
    want = y * (dy - (dy * y).sum(-1, keepdims=True))
    assert_close(tc.softmax_backward(y, dy), want, 1e-12)


err(
    "masked_cross_entropy: target beyond the vocabulary",
    lambda c: tc.masked_cross_entropy(np.zeros((2, 4)), np.array([1, 4])),
    "4",
)
err(
    "masked_cross_entropy: negative target",
    lambda c: tc.masked_cross_entropy(np.zeros((2, 4)), np.array([1, -2])),
    "-2",
)
err(
    "masked_cross_entropy: float targets",
    lambda c: tc.masked_cross_entropy(np.zeros((2, 4)), np.array([1.0, 2.0])),
    "target",
)
err(
    "masked_cross_entropy: rows and targets differ",
    lambda c: tc.masked_cross_entropy(np.zeros((2, 4)), np.array([1, 2, 3])),
    "target",
)
err(
    "masked_cross_entropy: negative label smoothing",
    lambda c: tc.masked_cross_entropy(np.zeros((1, 3)), np.ones(1, int), label_smoothing=-0.1),
    "label_smoothing",
)


@api("masked_cross_entropy: all padding", expect="either")
def _(c):
    loss, grad = tc.masked_cross_entropy(rand(2, 4), np.array([0, 0]))
    assert np.isfinite(loss), loss
    assert np.all(np.asarray(grad) == 0), "padding rows got a gradient"


@api("masked_cross_entropy: matches a NumPy reference")
def _(c):
    logits, targets = rand(5, 6), np.array([1, 0, 3, 5, 2])
    loss, grad = tc.masked_cross_entropy(logits, targets)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    keep = targets != 0
    want = -np.log(p[np.arange(5), targets])[keep].mean()
    assert_close(loss, want, 1e-10)


@api("masked_accuracy: all padding", expect="either")
def _(c):
    acc = tc.masked_accuracy(rand(2, 4), np.array([0, 0]))
    assert np.isfinite(acc) and 0 <= acc <= 1, acc


@api("padding_mask: float ids", expect="either")
def _(c):
    m = tc.padding_mask(np.array([[1.0, 0.0, 2.5]]))
    assert (
        np.asarray(m).astype(bool).ravel().tolist()[-3:] == [False, True, False]
        or np.asarray(m).astype(bool).sum() == 1
    ), m


err("warmup_learning_rate: negative scale", lambda c: tc.warmup_learning_rate(1, 8, scale=-1.0), "scale")
err("warmup_learning_rate: step 0", lambda c: tc.warmup_learning_rate(0, 8), "step")


@api("warmup_learning_rate: step 2**62")
def _(c):
    lr = tc.warmup_learning_rate(2**62, 512)
    assert np.isfinite(lr) and lr > 0, lr
    assert_close(lr, 512**-0.5 * (2**62) ** -0.5, 1e-9)


err("look_ahead_mask: float size", lambda c: tc.look_ahead_mask(2.5), "size")
err("look_ahead_mask: string size", lambda c: tc.look_ahead_mask("3"), "size")


@api("look_ahead_mask: numpy integer size")
def _(c):
    m = np.asarray(tc.look_ahead_mask(np.int64(3))).astype(bool)
    assert np.array_equal(m, np.triu(np.ones((3, 3), bool), 1)), m


err(
    "decoder_self_attention_mask: 3-D tokens",
    lambda c: tc.decoder_self_attention_mask(np.ones((1, 2, 3), int)),
    "tokens",
)


@api("attention: 0/1 integer mask equals the boolean mask")
def _(c):
    q, k, v = rand(2, 3, 4), rand(2, 5, 4, seed=1), rand(2, 5, 4, seed=2)
    mask = np.random.default_rng(3).integers(0, 2, (2, 3, 5))
    mask[:, :, 0] = 0
    a = tc.scaled_dot_product_attention(q, k, v, mask)[0]
    b = tc.scaled_dot_product_attention(q, k, v, mask.astype(bool))[0]
    assert_close(a, b, 1e-12)


@api("attention: broadcast mask matches NumPy")
def _(c):
    q, k, v = rand(2, 3, 4), rand(2, 5, 4, seed=1), rand(2, 5, 4, seed=2)
    mask = np.zeros((1, 1, 5), bool)
    mask[..., 3:] = True
    out, w = tc.scaled_dot_product_attention(q, k, v, mask)
    s = q @ k.transpose(0, 2, 1) / 2.0
    s = np.where(mask, -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    assert_close(out, p @ v, 1e-12)
    assert_close(w, p, 1e-12)


err(
    "attention: mask that does not broadcast",
    lambda c: tc.scaled_dot_product_attention(rand(2, 3, 4), rand(2, 5, 4), rand(2, 5, 4), np.zeros((3, 3), bool)),
    "mask",
)
# the mismatch is named in the message, not reported as a failed NumPy reshape
err(
    "attention: q and k widths differ",
    lambda c: tc.scaled_dot_product_attention(np.zeros((2, 3, 4)), np.zeros((2, 5, 3)), np.zeros((2, 5, 3))),
    "q, k, v",
    raises=ValueError,
)
err(
    "attention: k and v lengths differ",
    lambda c: tc.scaled_dot_product_attention(np.zeros((2, 3, 4)), np.zeros((2, 5, 4)), np.zeros((2, 4, 4))),
    "q, k, v",
    raises=ValueError,
)
for _name, _make in {
    "multi-head attention": lambda: tc.MultiHeadAttention(10, 4),
    "multi-head attention (float64)": lambda: tc.MultiHeadAttention(10, 4, dtype="float64"),
    "encoder layer": lambda: tc.EncoderLayer(10, 4, 12),
    "decoder layer": lambda: tc.DecoderLayer(10, 4, 12),
    "encoder": lambda: tc.Encoder(11, 10, 1, 4, 12),
    "decoder": lambda: tc.Decoder(11, 10, 1, 4, 12),
    "model": lambda: tc.Transformer(11, 13, d_model=10, n_heads=4),
}.items():
    err(
        f"{_name}: width not divisible by heads",
        (lambda make: lambda c: make())(_make),
        "d_model 10 is not divisible by n_heads 4",
        raises=ValueError,
    )
err(
    "multi-head attention: memory of another width",
    lambda c: tc.MultiHeadAttention(8, 2).forward(np.ones((1, 3, 8), np.float32), np.ones((1, 4, 6), np.float32)),
    "memory",
)
err(
    "multi-head attention: memory of another batch",
    lambda c: tc.MultiHeadAttention(8, 2).forward(np.ones((2, 3, 8), np.float32), np.ones((3, 4, 8), np.float32)),
    "memory has batch size 3 but x has 2",
    raises=ValueError,
)


@api("multi-head attention: weights before any forward", expect="either")
def _(c):
    w = tc.MultiHeadAttention(8, 2).attention_weights()
    assert np.asarray(w).size == 0, f"weights before any forward: {np.asarray(w).shape}"


@api("multi-head attention: fully masked queries give zeros")
def _(c):
    mha = tc.MultiHeadAttention(8, 2, seed=1, dtype="float64")
    out = mha.forward(rand(1, 3, 8), mask=np.ones((1, 3, 3), bool))
    assert np.all(np.isfinite(out))
    bias = mha.parameters()["output.bias"].value if "output.bias" in mha.parameters() else None
    if bias is not None:
        assert_close(out, np.broadcast_to(bias, out.shape), 1e-12)


@api("encoder: a batch of padding only", expect="either")
def _(c):
    out = tc.Encoder(V, 8, 1, 2, 16, dropout=0.0, dtype="float64").forward(np.zeros((2, 4), int))
    assert np.all(np.isfinite(out)), "non-finite output"


@api("encoder layer: every key masked")
def _(c):
    out = tc.EncoderLayer(8, 2, 16, dropout=0.0, dtype="float64").forward(rand(1, 3, 8), mask=np.ones((1, 3, 3), bool))
    assert np.all(np.isfinite(out))


err(
    "decoder: memory of another batch",
    lambda c: tc.Decoder(V, 8, 1, 2, 16).forward(np.ones((2, 3), int), np.ones((1, 4, 8), np.float32)),
    "memory has batch size",
    raises=ValueError,
)
err(
    "decoder: token beyond the vocabulary",
    lambda c: tc.Decoder(V, 8, 1, 2, 16).forward(np.full((1, 3), V), np.ones((1, 4, 8), np.float32)),
    str(V),
)


@api("adam: no parameters", expect="either")
def _(c):
    tc.Adam({}).step(1e-3)


err("adam: not parameters", lambda c: tc.Adam({"w": np.ones(3)}), "Parameter")
err(
    "adam: negative learning rate",
    lambda c: tc.Adam(tc.Linear(2, 2).parameters()).step(-1e-3),
    "Adam.step: lr must be a finite number >= 0, got -0.001",
)


@api("adam: the same parameter twice", expect="either")
def _(c):
    a, b = tc.Linear(3, 3, seed=1), tc.Linear(3, 3, seed=1)
    pa, pb = a.parameters()["weight"], b.parameters()["weight"]
    pa.grad[...] = 1.0
    pb.grad[...] = 1.0
    tc.Adam({"w": pa}).step(0.1)
    tc.Adam({"w1": pb, "w2": pb}).step(0.1)
    assert_close(pb.value, pa.value, 1e-6)


@api("adam: clipping zero gradients")
def _(c):
    lin = tc.Linear(3, 3, seed=1)
    opt = tc.Adam(lin.parameters())
    norm = opt.clip_grad_norm(1.0)
    assert np.isfinite(norm) and norm == 0, norm
    assert all(np.isfinite(p.grad).all() for p in lin.parameters().values())


@api("adam: a NaN gradient is refused and changes nothing")
def _(c):
    lin = tc.Linear(3, 3, seed=1)
    adam = tc.Adam(lin.parameters())
    before = weights(lin)
    lin.parameters()["weight"].grad[0, 0] = np.nan
    raises(lambda: adam.step(1e-3), tc.NonFiniteError, re.compile("Adam.step: the update .* no update was applied"))
    assert_unchanged(lin, before)
    assert adam.step_count == 0


# --- construction -------------------------------------------------------------------------------

err("multi-head attention: zero heads", lambda c: tc.MultiHeadAttention(8, 0), "positive", raises=ValueError)
err(
    "feed-forward: dropout 1",
    lambda c: tc.FeedForward(8, 12, dropout=1.0),
    "FeedForward: dropout must be a number in [0, 1), got 1.0",
    raises=ValueError,
)
err("encoder: zero layers", lambda c: tc.Encoder(11, 8, 0, 2, 12), "n_layers", raises=ValueError)
err(
    "multi-head attention: dtype int32",
    lambda c: tc.MultiHeadAttention(8, 2, dtype="int32"),
    "dtype",
    raises=ValueError,
)


# --- backward before forward, gradients of the wrong shape or dtype ------------------------------

for _name, (_make, _width) in {
    "scaled_dot_product_attention": (lambda: tc.ScaledDotProductAttention(), 8),
    "MultiHeadAttention": (lambda: tc.MultiHeadAttention(8, 2), 8),
    "FeedForward": (lambda: tc.FeedForward(8, 12), 8),
    "EncoderLayer": (lambda: tc.EncoderLayer(8, 2, 12), 8),
    "DecoderLayer": (lambda: tc.DecoderLayer(8, 2, 12), 8),
    "Encoder": (lambda: tc.Encoder(11, 8, 1, 2, 12), 8),
    "Decoder": (lambda: tc.Decoder(13, 8, 1, 2, 12), 8),
    "Transformer": (lambda: tc.Transformer(11, 13, d_model=8, n_layers=1, n_heads=2, d_ff=12), 13),
}.items():
    err(
        f"{_name}: backward before forward",
        (lambda make, width: lambda c: make().backward(np.zeros((2, 3, width), np.float32)))(_make, _width),
        f"{_name}.backward: call forward() first",
        raises=RuntimeError,
    )


def _after_forward(layer: Any, *inputs: Any) -> Any:
    layer.forward(*inputs)
    return layer


err(
    "multi-head attention: backward with the wrong dout shape",
    lambda c: _after_forward(tc.MultiHeadAttention(8, 2), np.zeros((2, 3, 8), np.float32)).backward(
        np.zeros((2, 4, 8), np.float32)
    ),
    "output's shape",
    raises=ValueError,
)
err(
    "decoder layer: backward with the wrong dout batch",
    lambda c: _after_forward(
        tc.DecoderLayer(8, 2, 12), np.zeros((2, 3, 8), np.float32), np.zeros((2, 5, 8), np.float32)
    ).backward(np.zeros((3, 3, 8), np.float32)),
    "output's shape",
    raises=ValueError,
)


# --- float inputs of the layers -----------------------------------------------------------------

_X = np.zeros((2, 3, 8), np.float32)
err(
    "multi-head attention: integer input",
    lambda c: tc.MultiHeadAttention(8, 2).forward(np.zeros((2, 3, 8), np.int64)),
    "floating-point",
    raises=TypeError,
)
err(
    "multi-head attention: 2-D input",
    lambda c: tc.MultiHeadAttention(8, 2).forward(np.zeros((3, 8), np.float32)),
    "(batch, length, d_model)",
    raises=ValueError,
)
err(
    "multi-head attention: wrong last dimension",
    lambda c: tc.MultiHeadAttention(8, 2).forward(np.zeros((2, 3, 9), np.float32)),
    "last dimension 8",
    raises=ValueError,
)
err(
    "feed-forward: wrong last dimension",
    lambda c: tc.FeedForward(8, 12).forward(np.zeros((2, 7), np.float32)),
    "last dimension 8",
    raises=ValueError,
)
err(
    "decoder layer: memory of another batch",
    lambda c: tc.DecoderLayer(8, 2, 12).forward(_X, np.zeros((1, 3, 8), np.float32)),
    "memory has batch size",
    raises=ValueError,
)


@api("multi-head attention: float32 input to a float64 layer is converted")
def _(c):
    mha64 = tc.MultiHeadAttention(8, 2, dtype="float64")
    x = rand(2, 3, 8).astype(np.float32)
    np.testing.assert_allclose(mha64.forward(x), mha64.forward(x.astype(np.float64)))


# --- masks --------------------------------------------------------------------------------------

_MEM = np.zeros((2, 5, 8), np.float32)
for _name, _call, _fragment, _type in [
    (
        "a mask of another query length",
        lambda: tc.MultiHeadAttention(8, 2).forward(_X, mask=np.zeros((2, 4, 3), bool)),
        "does not broadcast to (B, Tq, Tk) = (2, 3, 3)",
        ValueError,
    ),
    (
        "a self-attention mask for cross-attention",
        lambda: tc.MultiHeadAttention(8, 2).forward(_X, _MEM, mask=np.zeros((2, 3, 3), bool)),
        "(2, 3, 5)",
        ValueError,
    ),
    (
        "a per-head mask",
        lambda: tc.MultiHeadAttention(8, 2).forward(_X, mask=np.zeros((2, 2, 3, 3), bool)),
        "(B, 1, Tq, Tk)",
        ValueError,
    ),
    (
        "a 1-D mask",
        lambda: tc.MultiHeadAttention(8, 2).forward(_X, mask=np.zeros(3, bool)),
        "must broadcast",
        ValueError,
    ),
    (
        "a mask of strings",
        lambda: tc.MultiHeadAttention(8, 2).forward(_X, mask=np.array([["a"] * 3] * 3)),
        "boolean or numeric",
        TypeError,
    ),
]:
    err(f"multi-head attention: {_name}", (lambda call: lambda c: call())(_call), _fragment, raises=_type)
err(
    "encoder layer: a mask of another batch",
    lambda c: tc.EncoderLayer(8, 2, 12).forward(_X, mask=np.zeros((3, 3, 3), bool)),
    "does not broadcast",
    raises=ValueError,
)
err(
    "decoder layer: a self mask of the memory's length",
    lambda c: tc.DecoderLayer(8, 2, 12).forward(_X, _MEM, self_mask=np.zeros((2, 3, 5), bool)),
    "does not broadcast",
    raises=ValueError,
)
err(
    "decoder layer: a cross mask of the target's length",
    lambda c: tc.DecoderLayer(8, 2, 12).forward(_X, _MEM, cross_mask=np.zeros((2, 3, 3), bool)),
    "does not broadcast",
    raises=ValueError,
)
err(
    "decoder: source_padding of another length",
    lambda c: tc.Decoder(13, 8, 1, 2, 12).forward(np.ones((2, 3), int), _MEM, source_padding=np.zeros((2, 4), bool)),
    "source_padding must have shape (2, 5)",
    raises=ValueError,
)
err(
    "attention: a mask of the value's width",
    lambda c: tc.scaled_dot_product_attention(
        np.zeros((2, 3, 4)), np.zeros((2, 5, 4)), np.zeros((2, 5, 4)), np.zeros((2, 3, 4), bool)
    ),
    "does not broadcast",
    raises=ValueError,
)


_Q4 = np.zeros((2, 2, 3, 8))
# every way a layer takes a mask: its name, and a call with the mask given
_MASKED: Dict[str, Callable[[Any], Any]] = {
    "multi-head attention": lambda m: tc.MultiHeadAttention(8, 2).forward(_X, mask=m),
    "encoder layer": lambda m: tc.EncoderLayer(8, 2, 12).forward(_X, mask=m),
    "decoder layer (self_mask)": lambda m: tc.DecoderLayer(8, 2, 12).forward(_X, _X, self_mask=m),
    "decoder layer (cross_mask)": lambda m: tc.DecoderLayer(8, 2, 12).forward(_X, _X, cross_mask=m),
    "ScaledDotProductAttention": lambda m: tc.ScaledDotProductAttention().forward(_X, _X, _X, m),
    "scaled_dot_product_attention": lambda m: tc.scaled_dot_product_attention(_X, _X, _X, m),
    "TiledAttention (key_padding)": lambda m: tc.TiledAttention().forward(_Q4, _Q4, _Q4, key_padding=m[:, 0]),
    "Decoder (source_padding)": lambda m: tc.Decoder(13, 8, 1, 2, 12).forward(np.ones((2, 3), int), _X, m[:, 0]),
}


def _masks_refused(call: Callable[[Any], Any]) -> Callable[[Any], None]:
    def case(c: Any) -> None:
        for value in (0.5, np.nan, 2, np.inf, -1.0):
            mask = np.zeros((2, 3, 3))
            mask[1, 0, 2] = value
            exc = raises(lambda: call(mask), ValueError, "must be boolean", "0 and 1", "additive")
            assert repr(float(value))[:3] in str(exc) or str(value) in str(exc), (value, str(exc))
        call(np.zeros((2, 3, 3), bool))  # the same call with a boolean mask works

    return case


for _name, _call in _MASKED.items():
    api(f"{_name}: a mask of 0.5, NaN, 2, inf or -1 is refused naming the value")(_masks_refused(_call))


@api("masks: 0/1 integers and additive 0/-inf masks are the boolean mask, padding masks too")
def _(c):
    q = rand(2, 2, 4, 8)
    pad = np.array([[0, 0, 1, 1], [0, 0, 0, 1]], bool)
    tiled = tc.TiledAttention(dtype="float64")
    base = tiled.forward(q, q, q, key_padding=pad)
    for same in (pad.astype(np.int64), np.where(pad, -np.inf, 0.0), np.where(pad, -1e9, 0.0)):
        np.testing.assert_array_equal(tiled.forward(q, q, q, key_padding=same), base)
    assert not np.allclose(tiled.forward(q, q, q), base)
    dec, tok, mem = tc.Decoder(13, 8, 1, 2, 12, dropout=0.0, dtype="float64"), np.ones((2, 3), int), rand(2, 4, 8)
    base = dec.forward(tok, mem, pad)
    np.testing.assert_array_equal(dec.forward(tok, mem, pad.astype(np.uint8)), base)
    np.testing.assert_array_equal(dec.forward(tok, mem, np.where(pad, -np.inf, 0.0)), base)
    assert not np.allclose(dec.forward(tok, mem), base)


def _broadcast(shape: tuple, seed: int = 0) -> np.ndarray:
    """A read-only view with zero strides over its leading axes (np.broadcast_to of the last two)."""
    return np.broadcast_to(rand(*shape[-2:], seed=seed), shape)


@api("layers: broadcast views (zero strides) as inputs and gradients give what their copies give")
def _(c):
    d = "float64"
    x, q4 = _broadcast((2, 4, 8)), _broadcast((2, 2, 4, 8))
    tok = np.broadcast_to(np.array([1, 2, 3, 4]), (2, 4))
    pad = np.broadcast_to(np.array([False, False, False, True]), (2, 4))
    calls: Dict[str, Callable[[], Any]] = {
        "Linear": lambda: (tc.Linear(8, 3, seed=1, dtype=d), (x,)),
        "LayerNorm": lambda: (tc.LayerNorm(8, dtype=d), (x,)),
        "FeedForward": lambda: (tc.FeedForward(8, 12, dropout=0.0, dtype=d), (x,)),
        "MultiHeadAttention": lambda: (
            tc.MultiHeadAttention(8, 2, dtype=d),
            (x, x, np.broadcast_to(pad[:, None], (2, 4, 4))),
        ),
        "EncoderLayer": lambda: (tc.EncoderLayer(8, 2, 12, dropout=0.0, dtype=d), (x,)),
        "DecoderLayer": lambda: (tc.DecoderLayer(8, 2, 12, dropout=0.0, dtype=d), (x, x)),
        "RelativeMultiHeadAttention": lambda: (tc.RelativeMultiHeadAttention(8, 2, dtype=d), (x,)),
        "LinearMultiHeadAttention": lambda: (tc.LinearMultiHeadAttention(8, 2, dtype=d), (x,)),
        "SoftmaxSelfAttention": lambda: (tc.SoftmaxSelfAttention(8, 2, dtype=d), (x,)),
        "LSHSelfAttention": lambda: (tc.LSHSelfAttention(8, 2, chunk=2, dtype=d), (x,)),
        "ReversibleStack": lambda: (tc.ReversibleStack(1, 8, 2, 12, dropout=0.0, dtype=d), (x,)),
        "TiledAttention": lambda: (tc.TiledAttention(dtype=d), (q4, q4, q4, False, pad)),
        "LSHAttention": lambda: (tc.LSHAttention(chunk=2, dtype=d), (q4, q4)),
        "Embedding": lambda: (tc.Embedding(13, 8, dtype=d), (tok,)),
        "Decoder": lambda: (tc.Decoder(13, 8, 1, 2, 12, dropout=0.0, dtype=d), (tok, x, pad)),
    }
    for name, make in calls.items():
        layer, args = make()
        out = layer.forward(*args)
        out = out[0] if isinstance(out, tuple) else out
        copy, copied = make()[0], tuple(np.array(a) if isinstance(a, np.ndarray) else a for a in args)
        expected = copy.forward(*copied)
        expected = expected[0] if isinstance(expected, tuple) else expected
        np.testing.assert_array_equal(out, expected, err_msg=f"{name}.forward")
        dout = np.broadcast_to(rand(out.shape[-1], seed=3), out.shape)
        got, want = layer.backward(dout), copy.backward(np.array(dout))
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            np.testing.assert_array_equal(g, w, err_msg=f"{name}.backward")


# --- NaN and infinity ---------------------------------------------------------------------------

for _value in ("nan", "inf"):
    err(
        f"masked_cross_entropy: {_value} logits",
        (lambda v: lambda c: tc.masked_cross_entropy(_poisoned_logits(v), np.ones((2, 3), int)))(float(_value)),
        "not finite",
        raises=RuntimeError,
    )


def _poisoned_logits(value: float) -> np.ndarray:
    logits = np.zeros((2, 3, 5), np.float32)
    logits[1, 2, 4] = value
    return logits


@api("masked_accuracy and masked_cross_entropy: NaN only in padding rows is ignored, elsewhere refused")
def _(c):
    logits = np.zeros((2, 4))
    logits[1, 2] = np.nan
    # row 1 is padding (target 0): ignored, as the loss of a padded batch must be
    assert tc.masked_accuracy(logits, np.array([1, 0])) == 0.0
    assert np.isfinite(tc.masked_cross_entropy(logits, np.array([1, 0]))[0])
    # a row that counts: an arg max over NaN means nothing
    raises(
        lambda: tc.masked_accuracy(logits, np.array([1, 3])),
        tc.NonFiniteError,
        "masked_accuracy: the logits of row 1 are NaN",
    )
    raises(
        lambda: tc.masked_cross_entropy(logits, np.array([1, 3])),
        tc.NonFiniteError,
        "masked_cross_entropy: the loss is not finite",
    )


@api("attention: scores that overflow are refused, a fully masked row gives zeros")
def _(c):
    q = np.full((1, 2, 4), 1e20, np.float32)  # all scores -inf without a mask: not zero weights
    raises(
        lambda: tc.scaled_dot_product_attention(q, -q, np.ones((1, 2, 4), np.float32)),
        tc.NonFiniteError,
        "output is not finite",
    )
    mask = np.ones((1, 2, 2), bool)
    out, w = tc.scaled_dot_product_attention(np.ones((1, 2, 4)), np.ones((1, 2, 4)), np.ones((1, 2, 4)), mask)
    assert not out.any() and not w.any()


@api("multi-head attention: a fully masked query row has a zero gradient, never 0 * inf")
def _(c):
    mha = tc.MultiHeadAttention(4, 1, seed=3)
    x = np.zeros((1, 1, 4), np.float32)
    x[0, 0, 0] = 3.4e38
    mha.forward(x, mask=np.ones((1, 1, 1), bool))
    dx = mha.backward(np.ones((1, 1, 4), np.float32))
    assert np.isfinite(dx).all() and not dx.any()
    for n, p in mha.parameters().items():
        assert np.isfinite(p.grad).all(), n


@api("linear: a gradient that overflows is refused in backward")
def _(c):
    lin = tc.Linear(4, 4, seed=1)
    lin.forward(np.full((2, 4), 1e30, np.float32))
    raises(
        lambda: lin.backward(np.full((2, 4), 1e30, np.float32)),
        tc.NonFiniteError,
        "Linear.backward: the gradient of parameter 'weight' is not finite",
    )


@api("positional_encoding: each call hands over a table of its own")
def _(c):
    a = tc.positional_encoding(7, 6)
    assert a.flags.writeable and a.shape == (7, 6)
    b = tc.positional_encoding(7, 6)
    a[...] = 0
    assert b.any()


err(
    "kernels.fingerprint: a seed beyond 64 bits",
    lambda c: kernels.fingerprint(np.zeros(3), seed=HUGE),
    "seed must be an integer in [0, 2**64)",
    raises=ValueError,
)
err(
    "kernels.fingerprint: a list",
    lambda c: kernels.fingerprint([1, 2, 3]),
    "data must be a NumPy array",
    raises=TypeError,
)
err("look_ahead_mask: size 10**400", lambda c: tc.look_ahead_mask(10**400), "memory available", raises=ValueError)


# --- one call at a time per object: two threads get an error, never a crash -----------------------


def _hammer(make_call: Callable[[], Callable[[], Any]]) -> None:
    """Two threads call the same object until each outcome (done, refused as busy) was seen three
    times; the refusal must be the RuntimeError that names the other thread."""
    call = make_call()
    stats = {"ok": 0, "busy": 0}
    lock = threading.Lock()
    start = threading.Barrier(2)
    errors: List[str] = []

    def hammer() -> None:
        start.wait()
        for _ in range(3000):
            try:
                call()
                key = "ok"
            except RuntimeError as exc:
                if "in use by another thread" not in str(exc):
                    errors.append(str(exc))
                    return
                key = "busy"
            with lock:
                stats[key] += 1
                if stats["busy"] >= 3 and stats["ok"] >= 3:
                    return

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors, errors[0]
    assert stats["ok"] > 0, stats
    assert stats["busy"] > 0, f"the two threads never overlapped: {stats}"


def _layer_call(
    make: Callable[[], Any], forward: Callable[[Any], Any], dout_shape: Any
) -> Callable[[], Callable[[], Any]]:
    def make_call() -> Callable[[], Any]:
        obj = make()

        def call() -> None:
            forward(obj)
            obj.backward(np.ones(dout_shape, np.float32))

        return call

    return make_call


def _adam_call() -> Callable[[], Any]:
    opt = tc.Adam(tc.Linear(512, 512).parameters())
    return lambda: opt.step(1e-3)


def _model_call() -> Callable[[], Any]:
    m = tc.Transformer(50, 50, d_model=64, n_layers=1, n_heads=4, d_ff=64, dropout=0.1)
    return lambda: m.train_step(_TOK, _TOK, _TOK)


_B, _T, _D = 8, 24, 64
_rng = np.random.default_rng(0)
_HX = _rng.standard_normal((_B, _T, _D)).astype(np.float32)
_HMEM = _rng.standard_normal((_B, _T, _D)).astype(np.float32)
_TOK = _rng.integers(1, 50, (_B, _T))
_BIG = _rng.standard_normal((256, 512)).astype(np.float32)
_HAMMERED = {
    "Linear": _layer_call(lambda: tc.Linear(512, 512), lambda l: l.forward(_BIG), (256, 512)),
    "Dropout": _layer_call(lambda: tc.Dropout(0.5), lambda l: l.forward(_BIG, training=True), (256, 512)),
    "ReLU": _layer_call(lambda: tc.ReLU(), lambda l: l.forward(_BIG), (256, 512)),
    "LayerNorm": _layer_call(lambda: tc.LayerNorm(512), lambda l: l.forward(_BIG), (256, 512)),
    "Embedding": _layer_call(lambda: tc.Embedding(50, _D), lambda l: l.forward(_TOK), (_B, _T, _D)),
    "PositionalEmbedding": _layer_call(
        lambda: tc.PositionalEmbedding(50, _D, max_length=4), lambda l: l.forward(_TOK), (_B, _T, _D)
    ),
    "ScaledDotProductAttention": _layer_call(
        lambda: tc.ScaledDotProductAttention(), lambda l: l.forward(_HX, _HX, _HX), (_B, _T, _D)
    ),
    "MultiHeadAttention": _layer_call(
        lambda: tc.MultiHeadAttention(_D, 4), lambda l: l.forward(_HX, _HMEM), (_B, _T, _D)
    ),
    "FeedForward": _layer_call(lambda: tc.FeedForward(_D, 256), lambda l: l.forward(_HX, training=True), (_B, _T, _D)),
    "EncoderLayer": _layer_call(lambda: tc.EncoderLayer(_D, 4, 128), lambda l: l.forward(_HX), (_B, _T, _D)),
    "DecoderLayer": _layer_call(lambda: tc.DecoderLayer(_D, 4, 128), lambda l: l.forward(_HX, _HMEM), (_B, _T, _D)),
    "Encoder": _layer_call(lambda: tc.Encoder(50, _D, 2, 4, 128), lambda l: l.forward(_TOK), (_B, _T, _D)),
    "Decoder": _layer_call(lambda: tc.Decoder(50, _D, 2, 4, 128), lambda l: l.forward(_TOK, _HMEM), (_B, _T, _D)),
    "Adam": _adam_call,
    "Transformer": _model_call,
}
for _name, _make_call in _HAMMERED.items():
    api(f"threads: two threads on one {_name}")((lambda mc: lambda c: _hammer(mc))(_make_call))


@api("threads: a layer works again after a refused call")
def _(c):
    lin = tc.Linear(4, 3, dtype="float64")
    x = np.ones((2, 4))
    y = lin.forward(x)
    np.testing.assert_array_equal(lin.forward(x), y)
    lin.zero_grad()


# --- backward uses what forward saw; non-finite inputs and weights -----------------------------------

_r0 = np.random.default_rng(0)
_MX = _r0.standard_normal((2, 5, 8))
_MMEM = _r0.standard_normal((2, 6, 8))
_MTOK = _r0.integers(1, V, (2, 5))

# name -> (make the layer, forward(layer, inputs), inputs, dout shape)
MUTATION_CASES: Dict[str, Any] = {
    "Linear": (lambda: tc.Linear(8, 6, seed=1, dtype="float64"), lambda l, a: l.forward(a[0]), [_MX], (2, 5, 6)),
    "LayerNorm": (lambda: tc.LayerNorm(8, dtype="float64"), lambda l, a: l.forward(a[0]), [_MX], (2, 5, 8)),
    "LayerNorm.forward_residual": (
        lambda: tc.LayerNorm(8, dtype="float64"),
        lambda l, a: l.forward_residual(a[0], a[1]),
        [_MX, _MX * 2],
        (2, 5, 8),
    ),
    "ReLU": (lambda: tc.ReLU(dtype="float64"), lambda l, a: l.forward(a[0]), [_MX], (2, 5, 8)),
    "Dropout": (
        lambda: tc.Dropout(0.3, seed=2, dtype="float64"),
        lambda l, a: l.forward(a[0], training=True),
        [_MX],
        (2, 5, 8),
    ),
    "FeedForward": (
        lambda: tc.FeedForward(8, 16, dropout=0.2, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0], training=True),
        [_MX],
        (2, 5, 8),
    ),
    "ScaledDotProductAttention": (
        lambda: tc.ScaledDotProductAttention(dtype="float64"),
        lambda l, a: l.forward(a[0], a[1], a[2]),
        [_MX, _MMEM, _MMEM * 3],
        (2, 5, 8),
    ),
    "MultiHeadAttention self": (
        lambda: tc.MultiHeadAttention(8, 2, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0]),
        [_MX],
        (2, 5, 8),
    ),
    "MultiHeadAttention cross": (
        lambda: tc.MultiHeadAttention(8, 2, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0], a[1]),
        [_MX, _MMEM],
        (2, 5, 8),
    ),
    "EncoderLayer": (
        lambda: tc.EncoderLayer(8, 2, 16, dropout=0.1, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0], training=True),
        [_MX],
        (2, 5, 8),
    ),
    "EncoderLayer pre-norm": (
        lambda: tc.EncoderLayer(8, 2, 16, pre_norm=True, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0]),
        [_MX],
        (2, 5, 8),
    ),
    "DecoderLayer": (
        lambda: tc.DecoderLayer(8, 2, 16, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0], a[1]),
        [_MX, _MMEM],
        (2, 5, 8),
    ),
    "Embedding": (
        lambda: tc.Embedding(V, 8, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0]),
        [_MTOK],
        (2, 5, 8),
    ),
    "PositionalEmbedding": (
        lambda: tc.PositionalEmbedding(V, 8, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0]),
        [_MTOK],
        (2, 5, 8),
    ),
    "Encoder": (
        lambda: tc.Encoder(V, 8, 1, 2, 16, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0]),
        [_MTOK],
        (2, 5, 8),
    ),
    "Decoder": (
        lambda: tc.Decoder(V, 8, 1, 2, 16, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0], a[1]),
        [_MTOK, _MMEM],
        (2, 5, 8),
    ),
}


def _as_list(out: Any) -> List[Any]:
    return list(out) if isinstance(out, tuple) else [out]


def _backward_uses_what_forward_saw(name: str) -> None:
    """Changing the input arrays in place (or through a view) between forward and backward changes
    nothing: equal up to rounding (SIMD reductions may round differently at another address), where
    a mutated input would change the results by O(1)."""
    make, forward, inputs, dout_shape = MUTATION_CASES[name]
    dout = np.random.default_rng(5).standard_normal(dout_shape)
    ref_layer = make()
    ref_out = forward(ref_layer, [a.copy() for a in inputs])
    ref_back = _as_list(ref_layer.backward(dout))
    ref_grads = {n: p.grad.copy() for n, p in ref_layer.parameters().items()}
    for view in (False, True):
        layer = make()
        bases = [a.copy() for a in inputs]
        args = [b[...] if view else b for b in bases]  # a view shares the base's memory
        out = forward(layer, args)
        for b in bases:  # the caller reuses its buffers before backward
            b[...] = 7 if b.dtype.kind == "f" else 1
        back = _as_list(layer.backward(dout))
        close = dict(rtol=1e-12, atol=1e-12)
        for got, want in zip(_as_list(out), _as_list(ref_out)):
            np.testing.assert_allclose(got, want, **close)
        for got, want in zip(back, ref_back):
            if want is None:
                assert got is None
            else:
                np.testing.assert_allclose(got, want, **close)
        for n, p in layer.parameters().items():
            np.testing.assert_allclose(p.grad, ref_grads[n], err_msg=n, **close)


def _poison(a: Any, value: float) -> np.ndarray:
    a = np.array(a, dtype=np.float64)
    a.flat[a.size // 2] = value
    return a


def _refuses_nonfinite_inputs(name: str) -> None:
    make, forward, inputs, dout_shape = MUTATION_CASES[name]
    for value in (np.nan, np.inf, -np.inf):
        for i in range(len(inputs)):
            if inputs[i].dtype.kind != "f":
                continue
            args = [a.copy() for a in inputs]
            args[i] = _poison(args[i], value)
            raises(
                lambda: forward(make(), args),
                ValueError,
                re.compile("holds .* at flat index .*inputs must be finite"),
            )
        layer = make()
        forward(layer, inputs)
        raises(lambda: layer.backward(_poison(np.ones(dout_shape), value)), ValueError, "dout holds")


def _refuses_nonfinite_weights(name: str) -> None:
    make, forward, inputs, _ = MUTATION_CASES[name]
    layer = make()
    pname, p = list(layer.parameters().items())[-1]
    p.value.flat[0] = np.nan
    raises(lambda: forward(layer, inputs), tc.NonFiniteError, f"weights are not finite: parameter '{pname}'")


for _name in MUTATION_CASES:
    api(f"{_name}: backward uses what forward saw")((lambda n: lambda c: _backward_uses_what_forward_saw(n))(_name))
    api(f"{_name}: NaN and infinite inputs and gradients are refused")(
        (lambda n: lambda c: _refuses_nonfinite_inputs(n))(_name)
    )
    if _name not in ("ReLU", "Dropout", "ScaledDotProductAttention"):  # (no weights)
        api(f"{_name}: a NaN weight is refused")((lambda n: lambda c: _refuses_nonfinite_weights(n))(_name))
