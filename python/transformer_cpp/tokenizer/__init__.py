"""Subword tokenizers behind one interface (:class:`Tokenizer`): byte-level BPE learnt from a
corpus (:class:`SubwordTokenizer`, ``bpe.py``); what every kind shares (``base.py``, ``_common.py``)."""

from __future__ import annotations

from ._common import MAX_FILE_BYTES
from .base import IdSequence, Tokenizer
from .bpe import MAX_VOCAB_SIZE, SPECIAL_TOKENS, SubwordTokenizer

__all__ = ["MAX_FILE_BYTES", "MAX_VOCAB_SIZE", "IdSequence", "SPECIAL_TOKENS", "SubwordTokenizer", "Tokenizer"]
