"""Small MarianMT models for the tests, built with Transformers' own classes (nothing downloaded):
a configuration with Marian's special ids, the tokenizer files of a MarianMT directory from
SentencePiece models trained in the test, and source rows and output ids in Marian's form."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import transformers

from helpers.sentencepiece_models import pieces, train_sentencepiece


def tiny_marian_config(vocab_size: int, *, layers: int = 2, heads: int = 4, ffn_dim: int = 32, **fields: Any) -> Any:
    """A ``MarianConfig`` of a model of width 16 (``layers`` layers of ``heads`` heads and
    feed-forward width ``ffn_dim`` on each side, 64 positions) over one vocabulary of
    ``vocab_size`` ids with Marian's special ids: padding, which is also the decoder's start, last
    (``pad=`` another), end 0, padding banned, no forced end. ``fields`` set any other value (one
    side's ``decoder_layers``, say)."""
    pad = fields.pop("pad", vocab_size - 1)
    per_side = {"layers": layers, "attention_heads": heads, "ffn_dim": ffn_dim}
    settings: Dict[str, Any] = dict(
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
        d_model=16,
        **{f"{side}_{name}": value for side in ("encoder", "decoder") for name, value in per_side.items()},
        max_position_embeddings=64,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=None,
        bad_words_ids=[[pad]],
    )
    settings.update(fields)
    return transformers.MarianConfig(**settings)


def write_marian_tokenizers(
    out: Path, src_spm: bytes, tgt_spm: bytes, tokenizer_config: Dict[str, Any]
) -> Dict[str, int]:
    """``source.spm``, ``target.spm``, a shared ``vocab.json`` (``</s>`` 0, ``<unk>`` 1, the pieces
    of both models, ``<pad>`` last) and ``tokenizer_config.json`` written into ``out``; returns the
    vocabulary."""
    (out / "source.spm").write_bytes(src_spm)
    (out / "target.spm").write_bytes(tgt_spm)
    first = ("</s>", "<unk>")
    order = list(first) + [p for p in dict.fromkeys(pieces(src_spm) + pieces(tgt_spm)) if p not in first]
    vocab = {p: i for i, p in enumerate(order + ["<pad>"])}
    (out / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config), encoding="utf-8")
    return vocab


def marian_directory(tmp: Path, words: Sequence[str], tokenizer_config: Dict[str, Any]) -> Tuple[Path, Dict[str, int]]:
    """The MarianMT directory ``tmp/opus-mt-en-es`` with the tokenizer files
    (:func:`write_marian_tokenizers`) of two SentencePiece models of about 50 pieces trained in
    ``tmp`` on 300 sentences of 7 of ``words`` (the target's in the reverse order), and its
    vocabulary."""
    lines = [" ".join(words[(i * 5 + j * 3) % len(words)] for j in range(7)) for i in range(300)]
    src, tgt = train_sentencepiece(tmp, "src", lines, 50), train_sentencepiece(tmp, "tgt", lines[::-1], 50)
    out = tmp / "opus-mt-en-es"
    out.mkdir()
    return out, write_marian_tokenizers(out, src, tgt, tokenizer_config)


def marian_sources(seed: int, lengths: Sequence[int], pad: int) -> np.ndarray:
    """Source rows of ``lengths`` random ids below ``pad`` (seeded by ``seed``), each followed by
    the end id 0, padded with ``pad`` to the longest."""
    rng = np.random.default_rng(seed)
    rows = [list(rng.integers(1, pad, size=n)) + [0] for n in lengths]
    src = np.full((len(rows), max(map(len, rows))), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        src[i, : len(r)] = r
    return src


def trimmed(row: Any, pad: int) -> List[int]:
    """The ids of ``row`` up to and including the end id 0, without padding."""
    out: List[int] = []
    for v in row:
        if v == pad:
            break
        out.append(int(v))
        if v == 0:
            break
    return out
