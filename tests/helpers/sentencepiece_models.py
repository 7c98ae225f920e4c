"""SentencePiece models trained inside a test, with Marian's special ids (end 0, unknown 1, no
start or padding piece), and their pieces in id order."""

from __future__ import annotations

from pathlib import Path
from typing import List

import sentencepiece as spm


def train_sentencepiece(directory: Path, name: str, lines: List[str], vocab_size: int) -> bytes:
    """The serialized unigram model learnt from ``lines`` (``vocab_size`` at most)."""
    corpus = directory / f"{name}.txt"
    corpus.write_text("\n".join(lines), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(directory / name),
        vocab_size=vocab_size,
        model_type="unigram",
        hard_vocab_limit=False,
        minloglevel=2,
        unk_id=1,
        eos_id=0,
        bos_id=-1,
        pad_id=-1,
    )
    return (directory / f"{name}.model").read_bytes()


def pieces(model: bytes) -> List[str]:
    """Every piece of a serialized model, in id order."""
    proc = spm.SentencePieceProcessor(model_proto=model)
    return [proc.id_to_piece(i) for i in range(proc.get_piece_size())]
