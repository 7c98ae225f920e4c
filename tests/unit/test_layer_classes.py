"""The Python layers are classes (isinstance works) with one surface over their C++ objects."""

import inspect

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp import layers

D, H, F, V = 8, 2, 16, 11

# name -> (constructor, a forward call on a fresh layer)
x = np.random.default_rng(0).standard_normal((2, 3, D))
tokens = np.array([[3, 4, 0], [5, 1, 2]])
CASES = {
    "Linear": (lambda dt: tc.Linear(D, 4, dtype=dt), lambda m: m(x)),
    "Dropout": (lambda dt: tc.Dropout(0.5, dtype=dt), lambda m: m(x, training=True)),
    "ReLU": (lambda dt: tc.ReLU(dtype=dt), lambda m: m(x)),
    "LayerNorm": (lambda dt: tc.LayerNorm(D, dtype=dt), lambda m: m(x)),
    "FeedForward": (lambda dt: tc.FeedForward(D, F, 0.0, dtype=dt), lambda m: m(x)),
    "Embedding": (lambda dt: tc.Embedding(V, D, dtype=dt), lambda m: m(tokens)),
    "PositionalEmbedding": (lambda dt: tc.PositionalEmbedding(V, D, 16, dtype=dt), lambda m: m(tokens)),
    "ScaledDotProductAttention": (lambda dt: tc.ScaledDotProductAttention(dtype=dt), lambda m: m(x, x, x)[0]),
    "MultiHeadAttention": (lambda dt: tc.MultiHeadAttention(D, H, dtype=dt), lambda m: m(x)),
    "RelativeMultiHeadAttention": (lambda dt: tc.RelativeMultiHeadAttention(D, H, dtype=dt), lambda m: m(x, x)),
    "LinearAttention": (lambda dt: tc.LinearAttention(dtype=dt), lambda m: m(x, x, x, causal=True)),
    "LinearMultiHeadAttention": (lambda dt: tc.LinearMultiHeadAttention(D, H, dtype=dt), lambda m: m(x, causal=True)),
    "LSHAttention": (lambda dt: tc.LSHAttention(chunk=2, n_hashes=2, dtype=dt), lambda m: m(x[:, None], x[:, None])),
    "LSHSelfAttention": (lambda dt: tc.LSHSelfAttention(D, H, chunk=2, n_hashes=2, dtype=dt), lambda m: m(x)),
    "SoftmaxSelfAttention": (lambda dt: tc.SoftmaxSelfAttention(D, H, dtype=dt), lambda m: m(x)),
    "TiledAttention": (lambda dt: tc.TiledAttention(dtype=dt), lambda m: m(x[:, None], x[:, None], x[:, None])),
    "EncoderLayer": (lambda dt: tc.EncoderLayer(D, H, F, 0.0, dtype=dt), lambda m: m(x)),
    "DecoderLayer": (lambda dt: tc.DecoderLayer(D, H, F, 0.0, dtype=dt), lambda m: m(x, x)),
    "Encoder": (lambda dt: tc.Encoder(V, D, 1, H, F, 0.0, 16, dtype=dt), lambda m: m(tokens)),
    "Decoder": (lambda dt: tc.Decoder(V, D, 1, H, F, 0.0, 16, dtype=dt), lambda m: m(tokens, x)),
    "ReversibleStack": (lambda dt: tc.ReversibleStack(1, D, H, F, 0.0, dtype=dt), lambda m: m(x)),
}


def test_every_layer_of_the_module_is_covered():
    classes = {n for n in layers.__all__ if isinstance(getattr(layers, n), type) and n != "Layer"}
    assert classes == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layer_is_a_class_with_the_common_surface(name, dtype):
    make, run = CASES[name]
    layer = make(dtype)
    cls = getattr(tc, name)
    assert isinstance(layer, cls) and isinstance(layer, tc.Layer)
    assert layer.dtype == np.dtype(dtype)
    assert repr(layer).startswith(f"{name}(")
    out = run(layer)
    assert out.dtype == np.dtype(dtype)
    # backward accumulates, zero_grad clears, parameters are views of the C++ memory
    layer.backward(np.ones_like(out))
    params = layer.parameters()
    for p in params.values():
        assert p.value.dtype == np.dtype(dtype)
    layer.zero_grad()
    assert all(not np.any(p.grad) for p in params.values())


def test_every_layer_with_dropout_runs_inference_by_default():
    """One default for the training mode: a forward call without ``training`` is inference, for
    every layer that has dropout and for the model."""
    defaults = {
        name: inspect.signature(getattr(tc, name).forward).parameters["training"].default
        for name in CASES
        if "training" in inspect.signature(getattr(tc, name).forward).parameters
    }
    defaults["Transformer"] = inspect.signature(tc.Transformer.forward).parameters["training"].default
    assert set(defaults) == {
        "Dropout",
        "FeedForward",
        "EncoderLayer",
        "DecoderLayer",
        "Encoder",
        "Decoder",
        "ReversibleStack",
        "Transformer",
    }
    assert all(default is False for default in defaults.values()), defaults
    ones = np.ones((4, 64))
    np.testing.assert_array_equal(tc.Dropout(0.5, seed=3)(ones), ones)  # no mask, no scaling
    assert not np.array_equal(tc.Dropout(0.5, seed=3)(ones, training=True), ones)
    ffn = tc.FeedForward(D, F, dropout=0.5, seed=1, dtype="float64")
    np.testing.assert_array_equal(ffn(x), ffn(x, training=False))
    assert not np.array_equal(ffn(x, training=True), ffn(x, training=False))


def test_attributes_reach_the_core_object():
    d = tc.Dropout(0.5, seed=3)
    y1 = d(np.ones((4, 64)), training=True)
    d.calls = 0  # a setter of the C++ object, through the wrapper
    assert d.calls == 0
    np.testing.assert_array_equal(d(np.ones((4, 64)), training=True), y1)
    lin = tc.Linear(5, 7)
    assert (lin.in_features, lin.out_features) == (5, 7)
    with pytest.raises(AttributeError):
        lin.in_features = 3  # read-only in C++: refused, not shadowed by a Python attribute
    with pytest.raises(AttributeError):
        lin.no_such_attribute


def test_parameter_views_write_through_the_wrapper():
    lin = tc.Linear(3, 2, dtype="float64")
    lin.parameters()["weight"].value[...] = 0.0
    lin.parameters()["bias"].value[...] = 1.5
    np.testing.assert_array_equal(lin(np.ones((1, 3))), np.full((1, 2), 1.5))


def test_adam_is_a_class_over_the_layers_parameters():
    lin = tc.Linear(3, 2, dtype="float64")
    opt = tc.Adam(lin.parameters())
    assert isinstance(opt, tc.Adam) and len(opt) == 2 and opt.dtype == np.float64
    before = lin.parameters()["weight"].value.copy()
    lin(np.ones((1, 3)))
    lin.backward(np.ones((1, 2)))
    opt.step(0.1)
    assert opt.step_count == 1
    assert not np.allclose(lin.parameters()["weight"].value, before)
