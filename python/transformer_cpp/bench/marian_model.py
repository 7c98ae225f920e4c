"""The model of ``bench --marian`` (:mod:`transformer_cpp.bench.marian`): its sizes
(:class:`MarianShapes`, the ``--marian-shapes`` option), the random MarianMT directory with its
minimal tokenizer (:func:`build_marian_directory`) and random source sentences."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

__all__ = [
    "END_ID",
    "FULL_MARIAN",
    "QUICK_MARIAN",
    "SUPPRESSED",
    "UNK_ID",
    "MarianShapes",
    "build_marian_directory",
    "pad_rows",
    "parse_marian_shapes",
    "random_sources",
]

#: What the decoding copy's ``final_logits_bias`` holds at the end id and at padding.
SUPPRESSED = -1.0e4
END_ID, UNK_ID = 0, 1  # Marian's; padding (= decoder start) is the last id


@dataclass(frozen=True)
class MarianShapes:
    """Every size of the Marian section."""

    vocab: int = 65_001  # one vocabulary shared by source, target and output
    d_model: int = 512
    layers: int = 6  # encoder layers = decoder layers
    heads: int = 8
    d_ff: int = 2048
    max_positions: int = 512
    steps: int = 32  # tokens of every decoded output
    src_min: int = 8  # shortest source sentence, end token included
    src_max: int = 30
    beam: int = 4
    batch: int = 32  # sentences per batch of the batched decodes and of a training step
    beam_sentences: int = 64  # beam search at batch `batch` (0: not run)
    greedy1_sentences: int = 16  # greedy at batch 1 (0: not run)
    greedy_batch_sentences: int = 64  # greedy at batch `batch` (0: not run)
    train_min: int = 4  # shortest training sentence (source; targets 0.8-1.25x its length)
    train_max: int = 40
    warmup: int = 1  # untimed training steps per engine
    train_steps: int = 3  # timed training steps per engine
    memory_steps: int = 2  # training steps in each memory child

    @property
    def pad(self) -> int:
        return self.vocab - 1

    def decode_runs(self) -> List[Tuple[str, int, int, int]]:
        """``(name, beam, batch, sentences)`` of each decoding measurement that runs."""
        runs = [
            (f"beam{self.beam}_batch{self.batch}", self.beam, self.batch, self.beam_sentences),
            ("greedy_batch1", 1, 1, self.greedy1_sentences),
            (f"greedy_batch{self.batch}", 1, self.batch, self.greedy_batch_sentences),
        ]
        return [r for r in runs if r[3] > 0]


FULL_MARIAN = MarianShapes()
QUICK_MARIAN = MarianShapes(
    vocab=200,
    d_model=32,
    layers=1,
    heads=4,
    d_ff=64,
    max_positions=64,
    steps=6,
    src_min=3,
    src_max=9,
    batch=4,
    beam_sentences=8,
    greedy1_sentences=3,
    greedy_batch_sentences=8,
    train_min=3,
    train_max=8,
    warmup=1,
    train_steps=2,
    memory_steps=1,
)

_AT_LEAST = {"vocab": 8, "src_min": 2, "train_min": 2, "d_model": 2}
_MAY_BE_ZERO = ("beam_sentences", "greedy1_sentences", "greedy_batch_sentences", "warmup")


def parse_marian_shapes(text: Optional[str], base: MarianShapes = FULL_MARIAN) -> MarianShapes:
    """``base`` with the ``key=value,...`` of ``text`` (the ``--marian-shapes`` option) applied;
    ``ValueError`` naming a key that is unknown or a value that is not allowed."""
    if not text:
        return base
    names = [f.name for f in fields(MarianShapes)]
    changes: Dict[str, int] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in names:
            raise ValueError(f"--marian-shapes: {part.strip()!r} is not key=value with a key among {', '.join(names)}")
        low = 0 if key in _MAY_BE_ZERO else _AT_LEAST.get(key, 1)
        try:
            number = int(value)
        except ValueError:
            number = low - 1
        if number < low:
            raise ValueError(f"--marian-shapes: {key} must be an integer >= {low}, got {value.strip()!r}")
        changes[key] = number
    s = replace(base, **changes)
    if s.d_model % s.heads or s.d_model % 2:
        raise ValueError(f"--marian-shapes: d_model ({s.d_model}) must be even and divisible by heads ({s.heads})")
    if s.src_max < s.src_min or s.train_max < s.train_min:
        raise ValueError("--marian-shapes: src_max and train_max must be >= src_min and train_min")
    longest = max(s.src_max, (s.train_max * 5 + 3) // 4 + 1, s.steps + 1)
    if longest > s.max_positions:
        raise ValueError(
            f"--marian-shapes: max_positions ({s.max_positions}) must be >= {longest}, the longest sequence"
        )
    return s


def _marian_config(s: MarianShapes) -> Any:
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=s.vocab,
        decoder_vocab_size=s.vocab,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        d_model=s.d_model,
        encoder_layers=s.layers,
        decoder_layers=s.layers,
        encoder_attention_heads=s.heads,
        decoder_attention_heads=s.heads,
        encoder_ffn_dim=s.d_ff,
        decoder_ffn_dim=s.d_ff,
        max_position_embeddings=s.max_positions,
        activation_function="swish",
        scale_embedding=True,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=s.pad,
        decoder_start_token_id=s.pad,
        eos_token_id=END_ID,
        forced_eos_token_id=None,
    )


def _write_tokenizer(directory: Path, s: MarianShapes, seed: int) -> None:
    """A minimal Marian tokenizer: one small SentencePiece model (source.spm = target.spm, learnt
    from random letters), ``vocab.json`` naming every id (``</s>`` 0, ``<unk>`` 1, ``<pad>`` last)
    and ``tokenizer_config.json`` (languages en -> es)."""
    import sentencepiece as spm

    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnop")
    lines = [
        " ".join("".join(rng.choice(letters, size=int(rng.integers(2, 7)))) for _ in range(10)) for _ in range(300)
    ]
    with tempfile.TemporaryDirectory(prefix="tcpp-spm-") as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(lines), encoding="utf-8")
        spm.SentencePieceTrainer.train(
            input=str(corpus),
            model_prefix=str(Path(tmp) / "sp"),
            vocab_size=40,
            model_type="unigram",
            hard_vocab_limit=False,
            minloglevel=2,
            unk_id=UNK_ID,
            eos_id=END_ID,
            bos_id=-1,
            pad_id=-1,
        )
        model = (Path(tmp) / "sp.model").read_bytes()
    for side in ("source", "target"):
        (directory / f"{side}.spm").write_bytes(model)
    vocab = {"</s>": END_ID, "<unk>": UNK_ID, **{f"\u2581w{i}": i for i in range(2, s.pad)}, "<pad>": s.pad}
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    config = {
        "tokenizer_class": "MarianTokenizer",
        "source_lang": "en",
        "target_lang": "es",
        "separate_vocabs": False,
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": s.max_positions,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def build_marian_directory(s: MarianShapes, root: Path, seed: int = 0) -> Dict[str, Path]:
    """The random MarianMT model of ``s`` saved twice under ``root``: ``"model"`` as built (what
    is imported and fine-tuned) and ``"decoding"`` with the end id and padding suppressed in
    ``final_logits_bias`` (every decoded output then has exactly ``s.steps`` tokens); both with
    the minimal tokenizer of :func:`_write_tokenizer`."""
    import torch
    from transformers import MarianMTModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    torch.manual_seed(seed)
    model = MarianMTModel(_marian_config(s)).eval()  # type: ignore[no-untyped-call]
    paths = {"model": root / "marian", "decoding": root / "marian-fixed-length"}
    model.save_pretrained(paths["model"])
    _write_tokenizer(paths["model"], s, seed)
    with torch.no_grad():
        model.final_logits_bias[0, END_ID] = SUPPRESSED
        model.final_logits_bias[0, s.pad] = SUPPRESSED
    model.save_pretrained(paths["decoding"])
    for name in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json"):
        shutil.copyfile(paths["model"] / name, paths["decoding"] / name)
    return paths


def random_sources(rng: np.random.Generator, s: MarianShapes, count: int) -> List[List[int]]:
    """``count`` source sentences of ``s.src_min``-``s.src_max`` ids, the end id last."""
    out = []
    for _ in range(count):
        n = int(rng.integers(s.src_min, s.src_max + 1))
        out.append([int(x) for x in rng.integers(UNK_ID + 1, s.pad, size=n - 1)] + [END_ID])
    return out


def pad_rows(rows: List[List[int]], pad: int) -> np.ndarray:
    """Rows as one int64 matrix, padded at the end with ``pad``."""
    out = np.full((len(rows), max(len(r) for r in rows)), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out
