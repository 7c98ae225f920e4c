"""Bits per character of a language model on a text: the mean cross-entropy of every character
but the first, each given up to ``seq_len`` characters before it, in nats divided by ln 2. A model
without a segment memory reads the text in consecutive windows (:func:`windows`); one with a
memory (Transformer-XL) reads ``batch_size`` stripes of it (:func:`stripes`), each walked in
consecutive segments (:func:`segments`), so every block attends to the positions before it."""

from __future__ import annotations

import math
from typing import List, Optional

import numpy as np

from ..config import attention_kind, quoted_kinds
from ..model import LanguageModel

__all__ = ["bits_per_character", "segments", "stripes", "windows"]


def windows(ids: np.ndarray, seq_len: int) -> np.ndarray:
    """Consecutive windows of seq_len + 1 ids overlapping by one (the last padded with 0): every id
    but the first is a label exactly once. (n_windows, seq_len + 1)."""
    n = len(ids)
    starts = np.arange(0, max(n - 1, 1), seq_len)
    out = np.zeros((len(starts), seq_len + 1), dtype=np.int64)
    for r, s in enumerate(starts):
        piece = ids[s : s + seq_len + 1]
        out[r, : len(piece)] = piece
    return out


def stripes(ids: np.ndarray, rows: int) -> np.ndarray:
    """The text cut into ``rows`` consecutive stripes (at most one per two characters) overlapping
    by one id, padded at the end with 0: every id but the first is a label of exactly one stripe.
    (rows, S + 1) with S = ceil((len(ids) - 1) / rows); the first stripe is never padded."""
    ids = np.asarray(ids, dtype=np.int64)
    labels = len(ids) - 1
    rows = max(1, min(rows, labels))
    width = -(-labels // rows)
    out = np.zeros((rows, width + 1), dtype=np.int64)
    for r in range(rows):
        piece = ids[r * width : r * width + width + 1]
        out[r, : len(piece)] = piece
    return out


def segments(block: np.ndarray, seq_len: int) -> List[np.ndarray]:
    """Consecutive (rows, seq_len + 1) windows of a (rows, S + 1) block, overlapping by one column
    (the last padded with 0): segment k continues segment k - 1 in every row."""
    width = block.shape[1] - 1
    out = []
    for start in range(0, width, seq_len):
        window = np.zeros((block.shape[0], seq_len + 1), dtype=np.int64)
        piece = block[:, start : start + seq_len + 1]
        window[:, : piece.shape[1]] = piece
        out.append(window)
    return out


def bits_per_character(
    model: LanguageModel,
    ids: np.ndarray,
    seq_len: int,
    batch_size: int = 32,
    memory_length: Optional[int] = None,
) -> float:
    """Mean cross-entropy of ``ids[1:]`` (each given up to ``seq_len`` ids before it), in bits per
    character: total nats / characters scored / ln 2.

    Relative attention (Transformer-XL) reads the text with state reuse: ``batch_size`` stripes
    of the text, each walked in consecutive segments of ``seq_len`` whose blocks also attend to
    the memory of the ``memory_length`` positions before (default the model's; any length,
    0 included). The model's memory length is restored afterwards (with an empty memory)."""
    if len(ids) < 2:
        raise ValueError("bits_per_character: the text must hold at least 2 characters")
    if attention_kind(model.config["attention"]).memory:
        return _bits_per_character_with_memory(model, ids, seq_len, batch_size, memory_length)
    if memory_length:
        raise ValueError(
            f"bits_per_character: a memory length needs attention {quoted_kinds(lambda k: k.memory)}, the model has "
            f"{model.config['attention']!r}"
        )
    rows = windows(np.asarray(ids, dtype=np.int64), seq_len)
    nats, count = 0.0, 0
    for i in range(0, len(rows), batch_size):
        loss, n = model.evaluate_loss(rows[i : i + batch_size])
        nats += loss * n
        count += n
    return nats / count / math.log(2)


def _bits_per_character_with_memory(
    model: LanguageModel, ids: np.ndarray, seq_len: int, batch_size: int, memory_length: Optional[int]
) -> float:
    kept = model.memory_length
    length = kept if memory_length is None else memory_length
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"bits_per_character: memory_length must be an integer >= 0, got {memory_length!r}")
    nats, count = 0.0, 0
    try:
        model.memory_length = length  # an empty memory: the stripes start their text
        for window in segments(stripes(ids, batch_size), seq_len):
            loss, n = model.evaluate_loss(window)
            nats += loss * n
            count += n
    finally:
        model.memory_length = kept
    return nats / count / math.log(2)
