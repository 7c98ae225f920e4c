"""tools/duplication_task.py: the sequences (S w S w), the loss and accuracy of the copy half only
with their gradient, and a short run that learns something with LSH attention."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

import duplication_task as dup  # noqa: E402


def test_sequences_are_a_separator_symbols_and_their_copy():
    tokens = dup.duplication_batch(np.random.default_rng(0), 5, 7, 4)
    assert tokens.shape == (5, 16)
    sep = tokens[:, 0]
    assert (sep == 5).all() and (tokens[:, 8] == 5).all()
    np.testing.assert_array_equal(tokens[:, 1:8], tokens[:, 9:16])
    assert tokens[:, 1:8].min() >= 1 and tokens[:, 1:8].max() <= 4


def test_copy_loss_scores_the_copy_half_only_and_its_gradient_is_right():
    rng = np.random.default_rng(1)
    length = 4
    tokens = dup.duplication_batch(rng, 3, length, 5)
    logits = rng.standard_normal((3, 2 * length + 1, 7))
    loss, accuracy, grad = dup.copy_loss(logits, tokens, length)
    rows = dup.copy_rows(length)
    assert np.abs(np.delete(grad, np.arange(2 * length + 1)[rows], axis=1)).max() == 0.0  # first half: no gradient
    # the loss by hand: mean -log softmax(label) over the copy rows
    z = logits[:, rows]
    labels = tokens[:, 1:][:, rows]
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    assert loss == np.float64(-np.take_along_axis(logp, labels[..., None], -1).mean())
    assert accuracy == (z.argmax(-1) == labels).mean()
    eps = 1e-6
    for idx in [(0, length + 1, 2), (2, 2 * length, labels[2, -1]), (1, length + 2, 0)]:
        up, down = logits.copy(), logits.copy()
        up[idx] += eps
        down[idx] -= eps
        numeric = (dup.copy_loss(up, tokens, length)[0] - dup.copy_loss(down, tokens, length)[0]) / (2 * eps)
        assert abs(numeric - grad[idx]) <= 1e-7


def test_a_short_run_with_lsh_attention_learns_part_of_the_copy():
    args = argparse.Namespace(
        length=6,
        symbols=4,
        attention="lsh",
        lsh_hashes=2,
        lsh_chunk=4,
        lsh_buckets=0,
        reversible=True,
        d_model=16,
        n_layers=2,
        n_heads=2,
        d_ff=32,
        batch_size=16,
        lr=3e-3,
        warmup=20,
        steps=300,
        time_budget=0.0,
        stop_at=0.0,
        eval_every=1000,
        eval_sequences=64,
        threads=1,
        seed=0,
    )
    result = dup.train(args)
    assert result["steps"] == 300
    assert result["copy_accuracy"] > 0.4  # chance is 1/4
