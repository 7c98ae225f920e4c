"""Subword tokenizers behind one interface (:class:`Tokenizer`): byte-level BPE learnt from a
corpus (:class:`SubwordTokenizer`, ``bpe.py``; learning it in ``_bpe_training.py``, its saved form in
``_bpe_format.py``); what every kind shares (``base.py``, ``_common.py``)."""

from __future__ import annotations

import json
from typing import Optional

from ._common import MAX_FILE_BYTES
from .base import IdSequence, Tokenizer
from .bpe import MAX_VOCAB_SIZE, SPECIAL_TOKENS, SubwordTokenizer
from .sentencepiece import SentencePieceTokenizer


def tokenizer_from_str(s: str, *, source: Optional[str] = None) -> Tokenizer:
    """A tokenizer from its saved form, by the kind the document records (none: BPE)."""
    try:
        kind = json.loads(s).get("kind", "bpe")
    except (ValueError, AttributeError, TypeError):
        kind = "bpe"  # the BPE parser gives the one-line error
    if kind == "sentencepiece":
        return SentencePieceTokenizer.from_str(s, source=source)
    return SubwordTokenizer.from_str(s, source=source)


__all__ = [
    "MAX_FILE_BYTES",
    "MAX_VOCAB_SIZE",
    "IdSequence",
    "SPECIAL_TOKENS",
    "SentencePieceTokenizer",
    "tokenizer_from_str",
    "SubwordTokenizer",
    "Tokenizer",
]
