"""Encoding sentence pairs as padded token-id arrays, and batching them: by sentence count or by
tokens (batches of similar lengths), shuffled by a seed and the epoch so that a resumed run sees
the same batches."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._checks import flag as _flag, integer as _integer, seed as _seed

logger = logging.getLogger("transformer_cpp.data")

__all__ = [
    "Batch",
    "EncodedPairs",
    "ENCODE_CHUNK",
    "batch_plan",
    "batches",
    "encode_pairs",
    "make_batch",
    "num_batches",
    "token_lengths",
]

#: Sentences encoded at a time: the token lists of one chunk are the only ones alive at once.
ENCODE_CHUNK = 8192


@dataclass(eq=False)
class EncodedPairs:
    """Sentence pairs as padded token ids, ready for :func:`batches`.

    Attributes:
        src: ``(N, S)`` int64 source ids, ``[start, ..., end, pad, pad, ...]``; S is the longest kept
            source.
        tgt: ``(N, T)`` int64 target ids, same layout.
        src_lengths: ``(N,)`` int64 number of non-padding source tokens per pair.
        tgt_lengths: ``(N,)`` int64 number of non-padding target tokens per pair.
        indices: ``(N,)`` int64 position of each kept pair in the input lists.
        removed: how many input pairs were dropped for being longer than ``max_length``.
        max_length: the limit used (``None`` for none).
        src_pad_id, tgt_pad_id: the padding id of each side (the tokenizers' ``pad_id``; 0 for
            this package's own tokenizers, the last id for an imported MarianMT model's).
    """

    src: np.ndarray
    tgt: np.ndarray
    src_lengths: np.ndarray
    tgt_lengths: np.ndarray
    indices: np.ndarray
    removed: int
    max_length: Optional[int]
    src_pad_id: int = 0
    tgt_pad_id: int = 0

    def __len__(self) -> int:
        return int(self.src.shape[0])


def _encode_ragged(sentences: List[str], tokenizer: Any) -> Tuple[np.ndarray, np.ndarray]:
    """``(ids, offsets)``: the token ids of every sentence (start and end included) one after the
    other as int32, and where each sentence starts (``offsets[i]:offsets[i + 1]``), encoded a
    chunk of :data:`ENCODE_CHUNK` sentences at a time, so that no list of every sentence's token
    list is ever built."""
    pieces: List[np.ndarray] = []
    lengths = np.empty(len(sentences), dtype=np.int64)
    for start in range(0, len(sentences), ENCODE_CHUNK):
        rows = tokenizer.encode_batch(sentences[start : start + ENCODE_CHUNK], add_special_tokens=True)
        lengths[start : start + len(rows)] = [len(r) for r in rows]
        pieces.append(np.fromiter((t for r in rows for t in r), dtype=np.int32, count=int(sum(map(len, rows)))))
    offsets = np.zeros(len(sentences) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
    return ids, offsets


def token_lengths(sentences: Sequence[str], tokenizer: Any) -> np.ndarray:
    """The number of tokens of each sentence, start and end included, as an int64 array (encoded
    a chunk at a time: memory for one chunk's tokens, not the corpus's)."""
    if isinstance(sentences, str):
        raise TypeError("token_lengths: expected a list of sentences, got a single string")
    items = list(sentences) if not isinstance(sentences, list) else sentences
    lengths = np.empty(len(items), dtype=np.int64)
    for start in range(0, len(items), ENCODE_CHUNK):
        rows = tokenizer.encode_batch(items[start : start + ENCODE_CHUNK], add_special_tokens=True)
        lengths[start : start + len(rows)] = [len(r) for r in rows]
    return lengths


def _pad(ids: np.ndarray, offsets: np.ndarray, fits: np.ndarray, pad_id: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """The sentences of a ragged encoding where ``fits`` is true as a (kept, longest) int64 array
    padded with ``pad_id``, and their lengths."""
    all_lengths = np.diff(offsets)
    lengths = all_lengths[fits]
    out = np.full((len(lengths), int(lengths.max())), pad_id, dtype=np.int64)
    # row-major order of the non-padding cells is the order of the kept ids
    out[np.arange(out.shape[1])[None, :] < lengths[:, None]] = ids[np.repeat(fits, all_lengths)]
    return out, lengths


def encode_pairs(
    src_sentences: Sequence[str],
    tgt_sentences: Sequence[str],
    src_tokenizer: Any,
    tgt_tokenizer: Any,
    max_length: Optional[int],
) -> EncodedPairs:
    """Encode sentence pairs with start/end tokens, drop pairs that are too long, pad each side
    with its tokenizer's padding id.

    A pair is removed when either side has more than ``max_length`` tokens, start and end
    included (the tutorial's filter); ``None`` keeps every pair. Each side is padded with its
    tokenizer's ``pad_id`` (0 when it has none) after its end token up to the longest kept sentence of that side. The sentences are encoded
    a chunk at a time into one flat array per side, so that the memory needed is about that of
    the result.

    Args:
        src_sentences, tgt_sentences: parallel lists of sentences.
        src_tokenizer, tgt_tokenizer: :class:`~transformer_cpp.tokenizer.SubwordTokenizer` (or any
            object with ``encode_batch(texts, add_special_tokens=True)`` and a ``pad_id``).
        max_length: the longest sequence kept, in tokens, or ``None``.

    Raises:
        ValueError: if the lists differ in length or are empty, ``max_length < 2``, a tokenizer's
            padding id is not an int >= 0, or every pair is too long.
    """
    caller = "encode_pairs"
    if isinstance(src_sentences, str) or isinstance(tgt_sentences, str):
        raise TypeError(f"{caller}: expected lists of sentences, got a single string")
    src_list = src_sentences if isinstance(src_sentences, list) else list(src_sentences)
    tgt_list = tgt_sentences if isinstance(tgt_sentences, list) else list(tgt_sentences)
    if len(src_list) != len(tgt_list):
        raise ValueError(
            f"{caller}: {len(src_list)} source sentences but {len(tgt_list)} target sentences; expected parallel lists"
        )
    if not src_list:
        raise ValueError(f"{caller}: no sentence pairs to encode")
    if max_length is not None:
        max_length = _integer(caller, "max_length", max_length, 2)  # the start and end tokens
    pads = []
    for label, tok in (("src_tokenizer", src_tokenizer), ("tgt_tokenizer", tgt_tokenizer)):
        pad = getattr(tok, "pad_id", 0)
        if isinstance(pad, bool) or not isinstance(pad, (int, np.integer)) or pad < 0:
            raise ValueError(f"{caller}: {label}.pad_id is {pad!r}; padding must be an id (an int >= 0)")
        pads.append(int(pad))

    src_ids, src_offsets = _encode_ragged(src_list, src_tokenizer)
    tgt_ids, tgt_offsets = _encode_ragged(tgt_list, tgt_tokenizer)
    if not getattr(tgt_tokenizer, "adds_start", True):  # MarianMT's: the decoder input starts with start_id
        tgt_ids = np.insert(tgt_ids, tgt_offsets[:-1], int(tgt_tokenizer.start_id))
        tgt_offsets = tgt_offsets + np.arange(len(tgt_offsets), dtype=tgt_offsets.dtype)
    src_len, tgt_len = np.diff(src_offsets), np.diff(tgt_offsets)
    fits = (
        np.ones(len(src_list), dtype=bool) if max_length is None else (src_len <= max_length) & (tgt_len <= max_length)
    )
    keep = np.flatnonzero(fits).astype(np.int64)
    removed = len(src_list) - len(keep)
    if not len(keep):
        raise ValueError(f"{caller}: all {len(src_list)} pairs are longer than max_length={max_length} tokens")
    if removed:
        logger.info("%s: removed %d of %d pairs longer than %s tokens", caller, removed, len(src_list), max_length)
    src, src_lengths = _pad(src_ids, src_offsets, fits, pads[0])
    del src_ids
    tgt, tgt_lengths = _pad(tgt_ids, tgt_offsets, fits, pads[1])
    return EncodedPairs(
        src=src,
        tgt=tgt,
        src_lengths=src_lengths,
        tgt_lengths=tgt_lengths,
        indices=keep,
        removed=removed,
        max_length=max_length,
        src_pad_id=pads[0],
        tgt_pad_id=pads[1],
    )


# ---------------------------------------------------------------------------- batching


@dataclass(frozen=True, eq=False)
class Batch:
    """One training batch (teacher forcing), all C-contiguous int64.

    Attributes:
        src: ``(B, S)`` source ids, trimmed to the longest source in the batch.
        tgt_in: ``(B, T-1)`` decoder input, ``tgt[:, :-1]`` (starts with the start id).
        tgt_out: ``(B, T-1)`` labels, ``tgt[:, 1:]`` (ends with the end id, then padding).
        indices: ``(B,)`` rows of the :class:`EncodedPairs` in this batch.
        pad_id: the target side's padding id (see :attr:`EncodedPairs.tgt_pad_id`).
    """

    src: np.ndarray
    tgt_in: np.ndarray
    tgt_out: np.ndarray
    indices: np.ndarray
    pad_id: int = 0

    def __len__(self) -> int:
        return int(self.src.shape[0])

    @property
    def num_target_tokens(self) -> int:
        """Number of non-padding labels (what the loss averages over)."""
        return int(np.count_nonzero(self.tgt_out != self.pad_id))


def num_batches(encoded_or_n: Union[EncodedPairs, int], batch_size: int, *, drop_remainder: bool = False) -> int:
    """Number of batches :func:`batches` yields for ``encoded_or_n`` examples (sentence batches)."""
    batch_size = _integer("num_batches", "batch_size", batch_size, 1)
    n = len(encoded_or_n) if isinstance(encoded_or_n, EncodedPairs) else int(encoded_or_n)
    if n < 0:
        raise ValueError(f"num_batches: the number of examples must be >= 0, got {n}")
    return n // batch_size if drop_remainder else -(-n // batch_size)


def batch_plan(
    encoded: EncodedPairs,
    batch_size: int = 64,
    *,
    max_tokens: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    bucket_by_length: bool = False,
    drop_remainder: bool = False,
    bucket_pool: int = 50,
) -> List[np.ndarray]:
    """The rows of ``encoded`` in each batch of one epoch, in training order (see :func:`batches`)."""
    caller = "batches"
    if not isinstance(encoded, EncodedPairs):
        raise TypeError(f"{caller}: expected EncodedPairs (from encode_pairs), got {type(encoded).__name__}")
    batch_size = _integer(caller, "batch_size", batch_size, 1)
    max_tokens = _integer(caller, "max_tokens", max_tokens, 0)  # 0: batches of batch_size pairs
    bucket_pool = _integer(caller, "bucket_pool", bucket_pool, 1)
    shuffle = _flag(caller, "shuffle", shuffle)
    bucket_by_length = _flag(caller, "bucket_by_length", bucket_by_length)
    drop_remainder = _flag(caller, "drop_remainder", drop_remainder)
    for name, value in (("bucket_by_length", bucket_by_length), ("drop_remainder", drop_remainder)):
        if max_tokens and value:  # it would be ignored, not applied
            raise ValueError(
                f"{caller}: {name} applies to batches of batch_size pairs; with max_tokens {max_tokens} "
                f"the batches are cut by tokens (and sorted by length): set max_tokens=0 or {name}=False"
            )
    seed, epoch = _seed(caller, "seed", seed), _seed(caller, "epoch", epoch)
    n = len(encoded)
    rng = np.random.default_rng([seed, epoch]) if shuffle else None
    order = rng.permutation(n) if rng is not None else np.arange(n)
    lengths = np.maximum(encoded.src_lengths, encoded.tgt_lengths)
    if max_tokens:
        # token budget: sort by length (ties in this epoch's random order), cut greedily so that
        # rows * longest row <= max_tokens, then shuffle the batches
        order = order[np.argsort(lengths[order], kind="stable")]
        plan: List[np.ndarray] = []
        start, longest = 0, 0
        for pos in range(n):
            length = int(lengths[order[pos]])
            if pos > start and (pos - start + 1) * max(longest, length) > max_tokens:
                plan.append(order[start:pos])
                start, longest = pos, 0
            longest = max(longest, length)
        if n > start:
            plan.append(order[start:n])
        if rng is not None:
            plan = [plan[i] for i in rng.permutation(len(plan))]
        return plan
    if bucket_by_length:
        pool = bucket_pool * batch_size
        pieces = []
        for start in range(0, n, pool):
            chunk = order[start : start + pool]
            pieces.append(chunk[np.argsort(lengths[chunk], kind="stable")])
        order = np.concatenate(pieces) if pieces else order
    starts = list(range(0, n, batch_size))
    if drop_remainder and n % batch_size:
        starts = starts[:-1]
    if bucket_by_length and rng is not None:
        starts = [starts[i] for i in rng.permutation(len(starts))]
    return [order[start : start + batch_size] for start in starts]


def batches(
    encoded: EncodedPairs,
    batch_size: int = 64,
    *,
    max_tokens: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    bucket_by_length: bool = False,
    drop_remainder: bool = False,
    bucket_pool: int = 50,
) -> Iterator[Batch]:
    """Yield :class:`Batch` es over ``encoded``; each example appears once per epoch.

    Order: with ``shuffle``, the examples are permuted by a generator seeded with
    ``(seed, epoch)``, so a given epoch is reproducible and different epochs differ. With
    ``bucket_by_length``, the order is then cut into pools of ``bucket_pool * batch_size``
    examples, each pool is sorted by length (longer of source and target, stable), the result is
    cut into batches, and the batches are shuffled (when ``shuffle``), so that a batch holds
    sentences of similar length and carries little padding. Without ``drop_remainder`` the
    last batch may be smaller; with it, that batch is dropped.

    With ``max_tokens > 0`` batches are sized by tokens instead of pairs: the examples are
    sorted by length (ties in the epoch's random order) and cut so that each batch's padded
    size, ``pairs * longest (source or target)``, stays within ``max_tokens`` (a single longer
    pair makes a batch of its own); the batches are then shuffled. ``batch_size`` does not apply;
    ``bucket_by_length`` and ``drop_remainder`` are refused (ValueError).

    Each batch is trimmed to its longest source and target, so it has no all-padding column.
    """
    for idx in batch_plan(
        encoded,
        batch_size,
        max_tokens=max_tokens,
        shuffle=shuffle,
        seed=seed,
        epoch=epoch,
        bucket_by_length=bucket_by_length,
        drop_remainder=drop_remainder,
        bucket_pool=bucket_pool,
    ):
        yield make_batch(encoded, idx)


def make_batch(encoded: EncodedPairs, idx: np.ndarray) -> Batch:
    """The :class:`Batch` of rows ``idx`` of ``encoded``, trimmed to its longest source and target."""
    s_len = int(encoded.src_lengths[idx].max())
    t_len = int(encoded.tgt_lengths[idx].max())
    src = np.ascontiguousarray(encoded.src[idx, :s_len], dtype=np.int64)
    tgt = encoded.tgt[idx, :t_len]
    return Batch(
        src=src,
        tgt_in=np.ascontiguousarray(tgt[:, :-1], dtype=np.int64),
        tgt_out=np.ascontiguousarray(tgt[:, 1:], dtype=np.int64),
        indices=np.ascontiguousarray(idx, dtype=np.int64),
        pad_id=encoded.tgt_pad_id,
    )
