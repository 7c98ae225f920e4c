"""What every tokenizer of the package offers: the :class:`Tokenizer` interface that the commands,
the server, the trainer and the checkpoint code rely on, whichever kind of subword model is inside
(byte-level BPE, :class:`~transformer_cpp.tokenizer.SubwordTokenizer`; SentencePiece,
:class:`~transformer_cpp.tokenizer.SentencePieceTokenizer`)."""

from __future__ import annotations

import os
from typing import Dict, FrozenSet, Iterable, List, Optional, Protocol, Sequence, Union, runtime_checkable

import numpy as np

__all__ = ["IdSequence", "Tokenizer"]

IdSequence = Union[Sequence[int], np.ndarray]


@runtime_checkable
class Tokenizer(Protocol):
    """A subword tokenizer: text to token ids and back, its special ids and its saved form.

    Attributes every tokenizer has:

    * ``kind``: the name of its saved form's kind (``"bpe"``, ``"sentencepiece"``); the checkpoint
      code reads a tokenizer file by the kind the file records.
    * ``pad_id``, ``start_id``, ``end_id``, ``unk_id``: the special ids (data of the tokenizer,
      not constants: a BPE vocabulary has 0, 1, 2, 3; a Marian vocabulary has ``</s>`` 0,
      ``<unk>`` 1 and ``<pad>`` last, the decoder's start token too); ``special_ids`` all of them.
    * ``adds_start``: whether :meth:`encode` puts ``start_id`` in front (BPE does; a Marian
      vocabulary only appends ``end_id``, the decoder is started with ``start_id`` by the model).
    * ``expects_cleaned_text``: whether text should go through
      :func:`~transformer_cpp.text.clean_sentence` before :meth:`encode` (the BPE vocabulary was
      learnt from cleaned text); false when the model normalises raw text itself (SentencePiece's
      normaliser), and then the translator and the trainer pass the text as it is.
    * ``normalization``: what the tokenizer itself does to text before it is split, in words
      (``"nfc"``, ``"nfc+lowercase"``, ``"sentencepiece:nmt_nfkc"``).
    """

    @property
    def kind(self) -> str: ...
    @property
    def pad_id(self) -> int: ...
    @property
    def start_id(self) -> int: ...
    @property
    def end_id(self) -> int: ...
    @property
    def unk_id(self) -> int: ...
    @property
    def special_ids(self) -> FrozenSet[int]: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def lowercase(self) -> bool: ...
    @property
    def adds_start(self) -> bool: ...
    @property
    def expects_cleaned_text(self) -> bool: ...
    @property
    def normalization(self) -> str: ...

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]: ...
    def encode_batch(self, texts: Iterable[str], add_special_tokens: bool = True) -> List[List[int]]: ...
    def decode(self, ids: IdSequence, skip_special_tokens: bool = True) -> str: ...
    def decode_batch(
        self, batch: Union[Iterable[IdSequence], np.ndarray], skip_special_tokens: bool = True
    ) -> List[str]: ...
    def tokens(self, text: str) -> List[str]: ...
    def id_to_token(self, token_id: int) -> str: ...
    def token_to_id(self, token: str) -> Optional[int]: ...
    def get_vocab(self) -> Dict[str, int]: ...
    def to_str(self) -> str: ...
    def save(self, path: Union[str, os.PathLike[str]]) -> None: ...
