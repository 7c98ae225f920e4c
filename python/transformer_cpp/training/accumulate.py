"""Gradient accumulation (``TrainConfig.accumulate``): one optimiser step from the gradients of
several batches, equal (within rounding) to one step on the batch that concatenates them.

The loss of a step is the mean over its scored tokens, so the gradient of the concatenated batch
is the sum over its tokens divided by their count. Each batch's gradient (of its own mean) is
therefore weighted by its own token count and the sum divided by the count of the whole group:
the batches need not hold the same number of tokens. The update, the clipping (of the group's
gradient norm) and the learning-rate schedule see one step.

The translator sums in the core's contiguous gradient buffer
(:meth:`~transformer_cpp.model.Transformer.compute_gradients` with ``accumulate``); the language
model sums its parameters' gradients here and applies them with
:meth:`~transformer_cpp.model.LanguageModel.apply_gradients`.
"""

from __future__ import annotations

from typing import Any, Sequence, Tuple

import numpy as np

__all__ = ["accumulated_lm_step", "accumulated_pairs_step"]


def accumulated_pairs_step(model: Any, batches: Sequence[Any]) -> Tuple[float, float, int]:
    """One update of a :class:`~transformer_cpp.model.Transformer` from ``batches`` (each a
    :class:`~transformer_cpp.data.Batch`): ``(loss, accuracy, tokens)`` of the whole group, the
    means weighted by each batch's target tokens.

    Raises:
        FloatingPointError: a loss, the gradient or the update is not finite; no weight changed.
    """
    pad = int(model.config.get("pad_id", 0))
    counts = [int(np.count_nonzero(b.tgt_out != pad)) for b in batches]
    loss_sum = correct = 0.0
    for i, (b, n) in enumerate(zip(batches, counts)):
        # each batch's mean-loss gradient times its token count: the sum over its tokens
        loss, acc = model.compute_gradients(b.src, b.tgt_in, b.tgt_out, grad_scale=float(n), accumulate=i > 0)
        loss_sum += loss * n
        correct += acc * n
    total = sum(counts)
    model.apply_gradients(1.0 / total)
    return loss_sum / total, correct / total, total


def accumulated_lm_step(model: Any, windows: Sequence[np.ndarray], before: Any = None) -> Tuple[float, int]:
    """One update of a :class:`~transformer_cpp.model.LanguageModel` from ``windows`` (each a
    (B, T + 1) array of ids, as ``train_step`` takes them): ``(loss, labels scored)`` of the
    whole group. ``before(i)``, when given, runs before window ``i`` is fed (a segment memory's
    reset, say).

    Raises:
        FloatingPointError: a loss, the gradient or the update is not finite; no weight changed.
    """
    params = model.parameters()
    sums = {name: np.zeros_like(p.grad) for name, p in params.items()}
    counts = [int(np.count_nonzero(w[:, 1:])) for w in windows]  # label 0 is padding: not scored
    total = sum(counts)
    loss_sum = 0.0
    for i, (w, n) in enumerate(zip(windows, counts)):
        if before is not None:
            before(i)
        loss = model.compute_gradients(w)  # the gradient of this window's mean loss, in .grad
        loss_sum += loss * n
        for name, p in params.items():
            sums[name] += p.grad * (n / total)
    for name, p in params.items():
        p.grad[...] = sums[name]
    model.apply_gradients()
    return loss_sum / total, total
