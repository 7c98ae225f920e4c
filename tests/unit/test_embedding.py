"""Embedding and PositionalEmbedding: initialisation, values, weight gradients, padding, bad input."""

import numpy as np
import pytest
import torch

import transformer_cpp as tc
from transformer_cpp.functional import padding_mask
from transformer_cpp.layers import Embedding, PositionalEmbedding
from helpers.gradcheck import TOLERANCE, numeric_grad, rel_error

pytestmark = pytest.mark.torch  # the module imports PyTorch

TOKENS = np.array([[3, 1, 4, 1, 5, 0], [2, 6, 5, 0, 0, 0]])  # repeats and padding


def test_initialisation():
    emb = Embedding(1000, 64, seed=1)
    w = emb.parameters()["weight"].value
    assert w.shape == (1000, 64) and w.dtype == np.float32
    assert list(emb.parameters()) == ["weight"]
    assert not w[0].any(), "the padding row starts at zero"
    # N(0, d^-1/2): 63,936 draws, so the sample std is within ~0.3% of 1/8
    assert abs(w[1:].std() - 64**-0.5) < 0.02 * 64**-0.5
    assert abs(w[1:].mean()) < 0.005
    same = Embedding(1000, 64, seed=1).parameters()["weight"].value
    other = Embedding(1000, 64, seed=2).parameters()["weight"].value
    np.testing.assert_array_equal(w, same)
    assert not np.array_equal(w, other)
    # the float64 build draws the same numbers
    w64 = Embedding(1000, 64, seed=1, dtype="float64").parameters()["weight"].value
    np.testing.assert_allclose(w, w64, rtol=1e-7)


def test_embedding_forward_is_a_scaled_lookup():
    emb = Embedding(7, 4, seed=3, dtype="float64")
    w = emb.parameters()["weight"].value
    np.testing.assert_array_equal(emb.forward(TOKENS), w[TOKENS])
    y = emb.forward(TOKENS.astype(np.int32), scale=2.5)
    assert y.shape == (2, 6, 4)
    np.testing.assert_allclose(y, 2.5 * w[TOKENS], rtol=1e-15)


def test_positional_embedding_tutorial_shape_and_values():
    # As in the tutorial: PositionalEmbedding(1000, 512) on int tokens of shape (1, 100)
    pe = PositionalEmbedding(vocab_size=1000, d_model=512)
    tokens = np.random.default_rng(0).integers(0, 1000, size=(1, 100))
    y = pe.forward(tokens)
    assert y.shape == (1, 100, 512) and y.dtype == np.float32
    assert pe.max_length == 2048 and pe.layout == "interleaved" and pe.d_model == 512
    w = pe.parameters()["weight"].value.astype(np.float64)
    ref = w[tokens] * np.sqrt(512) + tc.positional_encoding(100, 512, dtype="float64")
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
def test_positional_table_and_float64_values(layout):
    pe = PositionalEmbedding(11, 6, max_length=9, layout=layout, seed=4, dtype="float64")
    table = tc.positional_encoding(9, 6, layout=layout, dtype="float64")
    np.testing.assert_array_equal(pe.table, table)
    assert not pe.table.flags.writeable
    w = pe.parameters()["weight"].value
    tokens = np.array([[1, 10, 0, 4], [7, 7, 2, 0]])
    np.testing.assert_allclose(pe.forward(tokens), w[tokens] * np.sqrt(6) + table[:4], rtol=1e-15, atol=1e-15)
    # the full table length is allowed
    assert pe.forward(np.ones((1, 9), np.int64)).shape == (1, 9, 6)


def check_weight_gradient(layer, tokens):
    """Analytic weight gradient of sum(forward(tokens) * w) against central differences over the
    non-padding rows; the padding row must get exactly zero gradient."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal(layer.forward(tokens).shape)
    layer.zero_grad()
    layer.forward(tokens)
    assert layer.backward(w) is None
    p = layer.parameters()["weight"]
    analytic = p.grad.copy()
    assert not analytic[0].any(), "the padding row received gradient"
    numeric = numeric_grad(lambda: float(np.sum(layer.forward(tokens) * w)), p.value[1:])
    err = rel_error(analytic[1:], numeric)
    assert err <= TOLERANCE, err
    unused = np.setdiff1d(np.arange(1, p.value.shape[0]), tokens)
    assert not analytic[unused].any()


def test_embedding_weight_gradient_float64():
    emb = Embedding(8, 5, seed=6, dtype="float64")
    check_weight_gradient(emb, TOKENS)


def test_positional_embedding_weight_gradient_float64():
    pe = PositionalEmbedding(8, 5, max_length=10, seed=7, dtype="float64")
    check_weight_gradient(pe, TOKENS)


def test_weight_gradient_matches_torch_padding_idx():
    vocab, d = 50, 32
    pe = PositionalEmbedding(vocab, d, seed=8, dtype="float64")
    rng = np.random.default_rng(9)
    tokens = rng.integers(0, vocab, size=(16, 40))  # 20480 output elements: parallel path
    tokens[:, 30:] = 0
    dout = rng.standard_normal((16, 40, d))
    pe.forward(tokens)
    pe.backward(dout)
    wt = torch.from_numpy(pe.parameters()["weight"].value.copy()).requires_grad_(True)
    yt = torch.nn.functional.embedding(torch.from_numpy(tokens), wt, padding_idx=0) * np.sqrt(d)
    yt.backward(torch.from_numpy(dout))
    np.testing.assert_allclose(pe.parameters()["weight"].grad, wt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_gradients_accumulate_until_zero_grad():
    emb = Embedding(8, 3, dtype="float64")
    d = np.ones((2, 6, 3))
    emb.forward(TOKENS)
    emb.backward(d)
    g = emb.parameters()["weight"].grad.copy()
    assert g[1].tolist() == [2.0, 2.0, 2.0]  # token 1 appears twice
    emb.backward(d)
    np.testing.assert_array_equal(emb.parameters()["weight"].grad, 2 * g)
    emb.zero_grad()
    assert not emb.parameters()["weight"].grad.any()


def test_backward_does_not_depend_on_thread_count():
    tokens = np.random.default_rng(10).integers(0, 20, size=(32, 50))
    d = np.random.default_rng(11).standard_normal((32, 50, 64)).astype(np.float32)
    n = tc.get_num_threads()
    grads = []
    try:
        for threads in (1, 2):
            tc.set_num_threads(threads)
            pe = PositionalEmbedding(20, 64)
            pe.forward(tokens)
            pe.backward(d)
            grads.append(pe.parameters()["weight"].grad.copy())
    finally:
        tc.set_num_threads(n)
    np.testing.assert_array_equal(grads[0], grads[1])


def test_padding_mask():
    expected = TOKENS == 0
    for mask in (
        padding_mask(TOKENS),
        Embedding(8, 2).padding_mask(TOKENS),
        PositionalEmbedding(8, 2).padding_mask(TOKENS.astype(np.int32)),
    ):
        assert mask.dtype == np.bool_ and mask.shape == TOKENS.shape
        np.testing.assert_array_equal(mask, expected)
    with pytest.raises(TypeError, match="integer"):
        padding_mask(TOKENS.astype(np.float32))


def test_embedding_bad_input():
    emb = Embedding(1000, 8)
    with pytest.raises(ValueError, match="^Embedding: token id 1200 is out of range for vocabulary size 1000$"):
        emb.forward(np.array([[5, 1200]]))
    with pytest.raises(ValueError, match="token id -3 is out of range for vocabulary size 1000"):
        emb.forward(np.array([[-3, 1]]))
    with pytest.raises(TypeError, match="integer token ids"):
        emb.forward(np.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="2 dimensions"):
        emb.forward(np.array([1, 2]))
    with pytest.raises(RuntimeError, match="forward"):
        Embedding(10, 4).backward(np.zeros((1, 2, 4), np.float32))
    emb.forward(np.array([[1, 2, 3]]))
    with pytest.raises(ValueError, match=r"shape of the last output \(1, 3, 8\)"):
        emb.backward(np.zeros((1, 2, 8), np.float32))
    with pytest.raises(ValueError, match="vocab_size must be positive"):
        Embedding(0, 4)
    with pytest.raises(ValueError, match="d_model must be positive"):
        Embedding(4, 0)


def test_positional_embedding_bad_input():
    pe = PositionalEmbedding(100, 8, max_length=16)
    # the table is a cache: a longer sequence extends it with the same sinusoids
    y = pe.forward(np.ones((2, 40), np.int64))
    assert y.shape == (2, 40, 8) and pe.max_length >= 40
    np.testing.assert_allclose(pe.table[:40], tc.positional_encoding(40, 8), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="token id 100 is out of range for vocabulary size 100"):
        pe.forward(np.array([[1, 100]]))
    with pytest.raises(RuntimeError, match="forward"):
        PositionalEmbedding(100, 8).backward(np.zeros((1, 1, 8), np.float32))
    with pytest.raises(ValueError, match="unknown layout"):
        PositionalEmbedding(100, 8, layout="sideways")
    with pytest.raises(ValueError, match="even depth"):
        PositionalEmbedding(100, 7, layout="concatenated")
    with pytest.raises(ValueError, match="max_length must be positive"):
        PositionalEmbedding(100, 8, max_length=0)
    with pytest.raises(TypeError, match="integer token ids"):
        pe.forward(np.ones((1, 3), np.float64))
    # a failed forward leaves the previous one usable
    pe.forward(np.array([[1, 2]]))
    with pytest.raises(ValueError):
        pe.forward(np.array([[1, 500]]))
    pe.backward(np.ones((1, 2, 8), np.float32))
    assert pe.parameters()["weight"].grad[1].any()
