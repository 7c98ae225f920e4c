"""The benchmark's shapes, synthetic data and FLOP model.

:class:`BenchShapes` holds one configuration's model and batch shapes and the section sizes
(``TUTORIAL_SHAPES``: the ``tutorial`` preset with the tutorial's vocabularies and batch size;
``QUICK_SHAPES``: tiny shapes for smoke runs). :func:`make_batches` draws random teacher-forced
batches of realistic padding; :func:`forward_matmul_flops` counts the matrix products of a forward
pass on the padded shapes and :func:`useful_forward_flops` on the real tokens only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

__all__ = [
    "END_ID",
    "QUICK_SHAPES",
    "START_ID",
    "TUTORIAL_SHAPES",
    "Batch",
    "BenchShapes",
    "forward_matmul_flops",
    "make_batches",
    "pad",
    "random_sentences",
    "training_step_flops",
    "useful_forward_flops",
]

START_ID, END_ID = 1, 2  # special token ids of the synthetic vocabularies; 0 is padding
_FIRST_WORD_ID = 3


@dataclass(frozen=True)
class BenchShapes:
    """Model and batch shapes of one benchmark configuration."""

    name: str
    batch: int = 64  # sentences per training batch
    min_length: int = 4  # shortest sentence, start and end tokens included
    max_length: int = 15  # longest sentence (and the model's positional table)
    d_model: int = 512
    n_layers: int = 4  # encoder layers = decoder layers
    d_ff: int = 512
    n_heads: int = 8
    src_vocab: int = 14_000
    tgt_vocab: int = 15_500
    dropout: float = 0.1
    gemm_n: int = 2048  # GEMM peak matrix size
    gemm_repeats: int = 5
    warmup: int = 2  # training steps per implementation, not timed
    steps: int = 5  # timed training steps per implementation
    scaling_steps: int = 2  # timed steps per thread count in the scaling section
    busy_settle: int = 16  # busy-machine section: untimed steps (the governor finds its count: a probe
    # after 6 units takes 5, a move to more threads 5 more to confirm it)
    busy_steps: int = 24  # busy-machine section: units after settling (the first of each block untimed)
    sentences: int = 256  # greedy decoding: sentences translated per batch size
    decode_batches: Tuple[int, ...] = (1, 32)
    memory_steps: int = 3  # training steps in each memory child (the first ones warm up)

    def model_config(self, seed: int = 0) -> Dict[str, Any]:
        """Keyword arguments of :class:`transformer_cpp.Transformer` for these shapes."""
        return dict(
            src_vocab_size=self.src_vocab,
            tgt_vocab_size=self.tgt_vocab,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            max_length=self.max_length,
            seed=seed,
        )


# The ``tutorial`` preset (model.PRESETS) with the tutorial's vocabularies and batch size.
TUTORIAL_SHAPES = BenchShapes(name="tutorial")
# Tiny shapes for CI smoke runs: seconds, not minutes. Numbers mean little.
QUICK_SHAPES = BenchShapes(
    name="quick",
    batch=8,
    max_length=10,
    d_model=64,
    n_layers=2,
    d_ff=128,
    n_heads=4,
    src_vocab=300,
    tgt_vocab=320,
    gemm_n=256,
    gemm_repeats=3,
    warmup=1,
    steps=2,
    scaling_steps=1,
    sentences=8,
    decode_batches=(1, 4),
    memory_steps=2,
    busy_settle=8,
    busy_steps=3,
)


def random_sentences(
    rng: np.random.Generator, count: int, vocab: int, min_length: int, max_length: int
) -> List[np.ndarray]:
    """``count`` sentences ``[START, w..., END]`` with lengths uniform in ``[min_length, max_length]``
    (start and end tokens included) and words uniform in ``[3, vocab)``."""
    lengths = rng.integers(min_length, max_length + 1, size=count)
    return [
        np.concatenate(([START_ID], rng.integers(_FIRST_WORD_ID, vocab, size=n - 2), [END_ID])).astype(np.int64)
        for n in lengths
    ]


def pad(sentences: Sequence[np.ndarray]) -> np.ndarray:
    """Right-pad int sentences with 0 to the longest one: (B, max length) int64."""
    out = np.zeros((len(sentences), max(len(s) for s in sentences)), np.int64)
    for i, s in enumerate(sentences):
        out[i, : len(s)] = s
    return out


@dataclass
class Batch:
    """One training batch with teacher forcing: ``tgt_in = tgt[:, :-1]``, ``tgt_out = tgt[:, 1:]``."""

    src: np.ndarray  # (B, S) int64, 0-padded
    tgt_in: np.ndarray  # (B, T) int64
    tgt_out: np.ndarray  # (B, T) int64
    tokens: int  # non-padding target tokens (what the loss averages over)


def make_batches(shapes: BenchShapes, count: int, seed: int = 0) -> List[Batch]:
    """``count`` random batches of ``shapes.batch`` sentence pairs, source and target lengths drawn
    independently and uniformly in ``[min_length, max_length]``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        src = pad(random_sentences(rng, shapes.batch, shapes.src_vocab, shapes.min_length, shapes.max_length))
        tgt = pad(random_sentences(rng, shapes.batch, shapes.tgt_vocab, shapes.min_length, shapes.max_length))
        tgt_in, tgt_out = np.ascontiguousarray(tgt[:, :-1]), np.ascontiguousarray(tgt[:, 1:])
        out.append(Batch(src, tgt_in, tgt_out, int(np.count_nonzero(tgt_out))))
    return out


def forward_matmul_flops(shapes: BenchShapes, batch_size: int, src_len: int, tgt_len: int) -> int:
    """Floating-point operations of the matrix products of one forward pass (2 per multiply-add).

    With batch ``B``, padded source length ``S``, padded decoder-input length ``T``, width ``d``,
    feed-forward width ``f``, ``L`` layers per stack and target vocabulary ``V``:

    * encoder layer: Q, K, V and output projections ``4 * 2BSd^2``; attention scores ``Q K^T``
      and weighted sums ``P V`` over all heads ``2 * 2BS^2 d``; feed-forward ``2 * 2BSdf``;
    * decoder layer: self-attention ``4 * 2BTd^2 + 2 * 2BT^2 d``; cross-attention Q and output
      projections ``2 * 2BTd^2``, K and V of the memory ``2 * 2BSd^2``, scores and weighted sums
      ``2 * 2BTSd``; feed-forward ``2 * 2BTdf``;
    * output projection ``2BTdV``.

    Attention is counted on the padded lengths (what both implementations compute). Embedding
    look-ups, softmax, LayerNorm, dropout, the loss and Adam are not matrix products and are left
    out. A training step costs ``3x`` this (forward; backward = gradients of inputs and weights).
    """
    b, s, t = batch_size, src_len, tgt_len
    d, f, n_layers, v = shapes.d_model, shapes.d_ff, shapes.n_layers, shapes.tgt_vocab
    encoder_layer = 4 * 2 * b * s * d * d + 2 * 2 * b * s * s * d + 2 * 2 * b * s * d * f
    decoder_layer = (
        4 * 2 * b * t * d * d
        + 2 * 2 * b * t * t * d
        + 2 * 2 * b * t * d * d
        + 2 * 2 * b * s * d * d
        + 2 * 2 * b * t * s * d
        + 2 * 2 * b * t * d * f
    )
    return n_layers * (encoder_layer + decoder_layer) + 2 * b * t * d * v


def useful_forward_flops(shapes: BenchShapes, batch: Batch) -> int:
    """Matrix-product FLOPs of one forward pass counted on the real tokens only.

    :func:`forward_matmul_flops` counts the padded shapes (what a padded implementation such as
    the PyTorch reference executes). Ours removes padding rows from the position-wise work in
    ``train_step``, so the "model GFLOP/s" of the padded count credits it with work it skipped.
    This count is the honest one for ours: projections, feed-forward and output layer per real
    source token ``s_b`` / decoder position ``t_b`` (positions with an input or a target), and
    attention per real query-key pair, sentence by sentence.
    """
    d, f, n_layers, v = shapes.d_model, shapes.d_ff, shapes.n_layers, shapes.tgt_vocab
    s = np.count_nonzero(batch.src, axis=1).astype(np.int64)
    t = np.count_nonzero((batch.tgt_in != 0) | (batch.tgt_out != 0), axis=1).astype(np.int64)
    ns, nt = int(s.sum()), int(t.sum())
    encoder_layer = 4 * 2 * ns * d * d + 2 * 2 * int((s * s).sum()) * d + 2 * 2 * ns * d * f
    decoder_layer = (
        4 * 2 * nt * d * d
        + 2 * 2 * int((t * t).sum()) * d
        + 2 * 2 * nt * d * d
        + 2 * 2 * ns * d * d
        + 2 * 2 * int((t * s).sum()) * d
        + 2 * 2 * nt * d * f
    )
    return n_layers * (encoder_layer + decoder_layer) + 2 * nt * d * v


def training_step_flops(shapes: BenchShapes, batch: Batch) -> int:
    """Matrix-product FLOPs of one training step: ``3 *`` :func:`forward_matmul_flops`."""
    return 3 * forward_matmul_flops(shapes, batch.src.shape[0], batch.src.shape[1], batch.tgt_in.shape[1])
