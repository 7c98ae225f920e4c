"""Gradient accumulation: one update from several batches equals the update from their
concatenation (float64, within rounding), the loss averaged over all their tokens."""

from __future__ import annotations

from types import SimpleNamespace as Batch

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp.training.accumulate import accumulated_lm_step, accumulated_pairs_step

V = 12


def _pairs_batch(rng, rows, src_len, tgt_len):
    """Random token ids (>= 1) with each row padded (0) after a random length of at least 1."""
    src = rng.integers(1, V, size=(rows, src_len))
    tgt = rng.integers(1, V, size=(rows, tgt_len + 1))
    for r in range(rows):
        src[r, rng.integers(1, src_len + 1) :] = 0
        tgt[r, rng.integers(2, tgt_len + 2) :] = 0
    return Batch(src=src, tgt_in=tgt[:, :-1], tgt_out=tgt[:, 1:])


def _model(seed=3):
    m = tc.Transformer(
        V, V, d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, max_length=8, seed=seed, dtype="float64"
    )
    m.configure_optimizer(warmup=10, lr_scale=2.0, clip_norm=0.5)  # clipping sees the group's norm
    return m


def _weights(model):
    return {k: p.value.copy() for k, p in model.parameters().items()}


def _assert_same_weight(name, actual, expected):
    if name.endswith("key.bias"):
        # its gradient is 0 (the softmax ignores it) up to rounding, which Adam's first steps scale
        # up to about lr * 1e-9: both stay at 0 within that
        assert np.abs(actual).max() < 1e-9 and np.abs(expected).max() < 1e-9, name
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-10, atol=1e-13, err_msg=name)


def test_accumulated_pairs_step_equals_the_concatenated_batch():
    rng = np.random.default_rng(0)
    batches = [_pairs_batch(rng, rows, 5, 6) for rows in (3, 5, 2)]
    counts = [int(np.count_nonzero(b.tgt_out)) for b in batches]
    assert len(set(counts)) == 3  # different token counts: the weighting matters
    big = Batch(**{f: np.concatenate([getattr(b, f) for b in batches]) for f in ("src", "tgt_in", "tgt_out")})
    before = _weights(_model())
    accumulated, whole = _model(), _model()
    for _ in range(2):  # the second update also uses the Adam moments of the first
        loss, acc, tokens = accumulated_pairs_step(accumulated, batches)
        big_loss, big_acc = whole.train_step(big.src, big.tgt_in, big.tgt_out)
        assert tokens == sum(counts) == whole.last_token_count
        assert loss == pytest.approx(big_loss, rel=1e-12) and acc == pytest.approx(big_acc, rel=1e-12)
    assert accumulated.step == whole.step == 2
    assert accumulated.last_grad_norm == pytest.approx(whole.last_grad_norm, rel=1e-10)
    for name, value in _weights(whole).items():
        assert not np.array_equal(value, before[name]), name
        _assert_same_weight(name, _weights(accumulated)[name], value)


def test_accumulated_pairs_step_needs_a_first_batch():
    model = _model()
    b = _pairs_batch(np.random.default_rng(1), 2, 4, 4)
    with pytest.raises(ValueError, match="accumulate adds to gradients not yet applied"):
        model.compute_gradients(b.src, b.tgt_in, b.tgt_out, accumulate=True)


def test_accumulated_lm_step_equals_the_concatenated_batch():
    rng = np.random.default_rng(2)
    windows = [rng.integers(0, 9, size=(rows, 7)) for rows in (2, 3, 1)]  # label 0 (padding) is not scored
    counts = [int(np.count_nonzero(w[:, 1:])) for w in windows]
    assert len(set(counts)) == 3

    def model():
        m = tc.LanguageModel(
            9, d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, max_len=16, seed=4, dtype="float64"
        )
        m.configure_optimizer(warmup=10, lr_scale=2.0, clip_norm=0.5)
        return m

    accumulated, whole = model(), model()
    for _ in range(2):
        loss, tokens = accumulated_lm_step(accumulated, windows)
        big_loss = whole.train_step(np.concatenate(windows))
        assert tokens == sum(counts)
        assert loss == pytest.approx(big_loss, rel=1e-12)
    assert accumulated.step == whole.step == 2
    for name, p in whole.parameters().items():
        _assert_same_weight(name, accumulated.parameters()[name].value, p.value)
        assert not np.any(accumulated.parameters()[name].grad), name  # the update zeroes the gradients
