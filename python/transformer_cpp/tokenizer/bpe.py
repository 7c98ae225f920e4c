"""Subword tokenizer learned from a corpus: byte-level BPE from Hugging Face ``tokenizers``.

Design:

* **Model**: byte-pair encoding trained with ``tokenizers.trainers.BpeTrainer`` to a target
  vocabulary size (the tutorial aims at ``2**14``). Training is deterministic: the same corpus
  and arguments give the same vocabulary.
* **Pre-tokenizer / decoder**: ``ByteLevel`` on both sides. Text is turned into its UTF-8 bytes,
  so accents, ``¿ ¡``, emoji — any character at all — can be encoded and decoded exactly;
  the unknown token is never needed as long as the vocabulary holds the 256 byte symbols
  (it does whenever ``target_vocab_size >= 4 + 256``; see :meth:`SubwordTokenizer.build_from_corpus`).
* **Leading space**: every text is encoded as ``" " + text`` and one leading space is removed on
  decoding, so a word has the same tokens at the start of a sentence as in the middle, and
  ``decode(encode(text)) == text`` for every text that is already in Unicode NFC (which
  :func:`transformer_cpp.text.clean_sentence` guarantees). Text that is not in NFC comes back
  in NFC; with ``lowercase=True`` it comes back in lower case.
* **Special tokens** have fixed ids: ``<pad>`` 0 (the C++ core treats token 0 as padding),
  ``<start>`` 1, ``<end>`` 2, ``<unk>`` 3. Only :meth:`SubwordTokenizer.encode` adds them; text
  that happens to spell one (``"a <end> b"``) is encoded as ordinary text and round-trips.

A saved tokenizer is one JSON document: the Hugging Face tokenizer plus a small header with
this class's format name and version (see :meth:`SubwordTokenizer.to_str`).

This module holds the class and the helpers of its text on the way in and out (segments, id
checks, the decoding rules); learning the merges is in ``_bpe_training.py``, the saved form and
its checks in ``_bpe_format.py``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Union, cast

import numpy as np

from .._checks import flag as _flag
from ._bpe_format import (
    KIND as _KIND,
    MAX_VOCAB_SIZE,
    SPECIAL_TOKENS,
    bpe_tokenizer_json as _bpe_tokenizer_json,
    is_library_panic as _is_library_panic,
    library_errors as _library_errors,
    library_failure as _library_failure,
    parse_document as _parse_document,
    saved_form as _saved_form,
)
from ._bpe_training import learn_from_corpus as _learn_from_corpus
from ._common import (
    MAX_FILE_BYTES,
    BySavedForm,
    SpecialIds,
    SpecialTokenIds,
    read_tokenizer_file as _read_tokenizer_file,
    unicode_error as _unicode_error,
    write_atomically as _write_atomically,
)

__all__ = ["MAX_FILE_BYTES", "MAX_VOCAB_SIZE", "SubwordTokenizer", "SPECIAL_TOKENS"]


_PAD, _START, _END, _UNK = SPECIAL_TOKENS
_PAD_ID, _START_ID, _END_ID, _UNK_ID = range(len(SPECIAL_TOKENS))

IdSequence = Union[Sequence[int], np.ndarray]


#: A text longer than this many characters is encoded in segments of about this length (see
#: :func:`_segments`): the library's record of a text takes a few hundred bytes per token, so a
#: sentence of a megabyte would take hundreds of megabytes at once.
_SEGMENT_CHARS = 1 << 14


def _cuttable(text: str, i: int) -> bool:
    """Whether ``text[i]`` is a single space between two non-space characters."""
    return text[i] == " " and not text[i - 1].isspace() and not text[i + 1].isspace()


def _segments(text: str) -> Iterator[str]:
    """``text`` cut before single spaces between two non-space characters, into pieces of about
    :data:`_SEGMENT_CHARS` characters (a piece may be longer where there is no such space). The
    ByteLevel pre-tokenizer's pieces never cross such a space (each word starts with its one
    leading space), and the NFC normaliser and lower-casing never join a character to a space, so
    the segments' ids, one after the other, are the ids of the whole text."""
    start = 0
    while len(text) - start > _SEGMENT_CHARS:
        cut = start + _SEGMENT_CHARS
        while cut + 1 < len(text) and not _cuttable(text, cut):
            cut += 1
        if cut + 1 >= len(text):
            break
        yield text[start:cut]
        start = cut
    yield text[start:]


def _library_tokenizer(hf: Any) -> Any:
    """``hf`` if it looks like a trained ``tokenizers.Tokenizer``, else a ``TypeError``."""
    if not all(hasattr(hf, a) for a in ("token_to_id", "get_vocab_size", "encode", "decode")):
        raise TypeError(
            f"SubwordTokenizer: expected a trained tokenizers.Tokenizer, got "
            f"{type(hf).__name__}; make one with SubwordTokenizer.build_from_corpus, "
            "load or from_str"
        )
    return hf


def _checked_source(source: Any, who: str) -> Optional[str]:
    """``source`` (what a tokenizer was read from, named in its errors) if it is a ``str`` or
    ``None``, else a ``TypeError`` naming ``who``."""
    if source is not None and not isinstance(source, str):
        raise TypeError(f"{who}: source must be a str or None, got {type(source).__name__}")
    return source


def _prepared_vocab_size(hf: Any) -> int:
    """The vocabulary size of the library tokenizer ``hf``, once its special tokens are checked to
    have this class's ids (``ValueError`` otherwise) and it is set to encode text that spells one
    as ordinary text."""
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        got = hf.token_to_id(token)
        if got != expected_id:
            raise ValueError(
                f"SubwordTokenizer: special token {token!r} must have id {expected_id}, "
                f"found {got}; the tokenizer was not built by SubwordTokenizer.build_from_corpus"
            )
    # Text that spells a special token ("<end>", "<pad>") is ordinary text: encoded as its bytes,
    # never as the special id (which would end or blank the sentence). A runtime flag of
    # tokenizers >= 0.19, not part of the saved JSON, so it is set on every load.
    if hasattr(hf, "encode_special_tokens"):
        hf.encode_special_tokens = True
    return int(hf.get_vocab_size(with_added_tokens=True))


def _checked_text(text: Any, caller: str, index: Optional[int] = None) -> str:
    """``text`` if it is a ``str``, else a ``TypeError`` naming the call (and the text's place in
    a batch, ``index``)."""
    if not isinstance(text, str):
        if index is None:
            raise TypeError(f"SubwordTokenizer.{caller}: expected a str, got {type(text).__name__}")
        raise TypeError(f"SubwordTokenizer.{caller}: text {index} is a {type(text).__name__}, expected a str")
    return text


def _encodings(hf: Any, texts: List[str], caller: str, what: str) -> List[Any]:
    """The ``tokenizers`` encodings of ``texts`` (each with its leading space) by ``hf``, without
    special tokens. Text that is not valid Unicode is a ValueError naming it and ``caller`` (the
    library says only "TextInputSequence must be str"); another failure of the library is one
    naming ``what``."""
    try:
        if len(texts) == 1:
            return [hf.encode(texts[0], add_special_tokens=False)]
        return cast(List[Any], hf.encode_batch(texts, add_special_tokens=False))
    except BaseException as exc:  # noqa: B036  (the library's panics are BaseExceptions)
        if not (isinstance(exc, Exception) or _is_library_panic(exc)):
            raise
        for i, text in enumerate(texts):
            bad = _unicode_error(text[1:], f"{caller}: text {i}" if len(texts) > 1 else f"{caller}: the text")
            if bad is not None:
                raise bad from None
        raise _library_failure(what, exc) from None


def _wrapped(ids: List[int], add_special_tokens: bool) -> List[int]:
    """``ids`` between the start and end tokens (with ``add_special_tokens``), as a new list."""
    if add_special_tokens:
        return [_START_ID, *ids, _END_ID]
    return list(ids)


def _readable_pieces(decoder: Any, pieces: List[str]) -> List[str]:
    """Each byte-level piece as the text it stands for, a space written ``▁`` (``<unk>`` as it is)."""
    return [piece if piece == _UNK else decoder.decode([piece]).replace(" ", "\u2581") for piece in pieces]


def _checked_ids(ids: Any, vocab_size: int, name: str) -> List[int]:
    """A 1-D list/tuple/array of ints as a list of Python ints in ``[0, vocab_size)``; a
    ``TypeError`` or ``ValueError`` naming ``name`` otherwise."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name}: expected a sequence of token ids, got a string")
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array of token ids, got shape {ids.shape}")
        if ids.size and not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"{name}: expected integer token ids, got dtype {ids.dtype}")
        values = [int(v) for v in ids.tolist()]
    else:
        try:
            raw = list(ids)
        except TypeError:
            raise TypeError(f"{name}: expected a sequence of token ids, got {type(ids).__name__}") from None
        values = []
        for v in raw:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name}: token ids must be ints, got {type(v).__name__} {v!r}")
            values.append(int(v))
    for v in values:
        if v < 0 or v >= vocab_size:
            raise ValueError(f"{name}: token id {v} is out of range [0, {vocab_size})")
    return values


def _kept_rows(batch: Any, vocab_size: int, skip_special_tokens: bool, name: str) -> List[List[int]]:
    """:func:`_kept_ids` of each row of ``batch``, a list of id sequences or a 2-D array, each row
    checked by :func:`_checked_ids` (``ValueError`` for an array of another shape)."""
    if isinstance(batch, np.ndarray) and batch.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array (one row per sequence), got shape {batch.shape}")
    return [_kept_ids(_checked_ids(row, vocab_size, name), skip_special_tokens) for row in list(batch)]


def _kept_ids(ids: List[int], skip_special_tokens: bool) -> List[int]:
    """The ids decoding turns into text: never padding; with ``skip_special_tokens`` neither the
    start nor the unknown token, and nothing from the first end token on."""
    kept = []
    for v in ids:
        if skip_special_tokens:
            if v == _END_ID:
                break
            if v in (_PAD_ID, _START_ID, _UNK_ID):
                continue
        elif v == _PAD_ID:
            continue
        kept.append(v)
    return kept


def _without_leading_space(text: str) -> str:
    """Decoded text without the one leading space every text is encoded with."""
    return text[1:] if text.startswith(" ") else text


class SubwordTokenizer(SpecialIds, BySavedForm):
    """A byte-level BPE vocabulary with fixed special ids (``pad_id == 0``).

    Build one with :meth:`build_from_corpus`, or restore one with :meth:`load` /
    :meth:`from_str`. The constructor wraps an already trained ``tokenizers.Tokenizer`` and is
    not meant to be called directly.

    Example::

        tok = SubwordTokenizer.build_from_corpus(spanish_sentences, target_vocab_size=2**14)
        ids = tok.encode("¿Qué año?")        # [start_id, ..., end_id]
        tok.decode(ids)                       # '¿Qué año?'
    """

    def __init__(self, hf_tokenizer: Any, *, lowercase: bool = False, source: Optional[str] = None) -> None:
        self._tok = _library_tokenizer(hf_tokenizer)
        self._lowercase = _flag("SubwordTokenizer", "lowercase", lowercase)
        self._source = _checked_source(source, "SubwordTokenizer")  # the file it was read from, named in errors
        self._vocab_size = _prepared_vocab_size(hf_tokenizer)

    # ------------------------------------------------------------------ building

    @classmethod
    def build_from_corpus(
        cls,
        sentences: Iterable[str],
        target_vocab_size: int,
        *,
        min_frequency: int = 2,
        lowercase: bool = False,
    ) -> "SubwordTokenizer":
        """Learn a subword vocabulary of at most ``target_vocab_size`` tokens from ``sentences``.

        The size includes the 4 special tokens. With ``target_vocab_size >= 260`` the 256 byte
        symbols are always in the vocabulary, so any text round-trips. A smaller target (toy
        vocabularies in tests) must still hold every byte symbol of the corpus, so that the
        corpus itself round-trips; bytes the corpus never uses then encode as ``<unk>`` (a
        warning is logged). The trainer may stop below the target when no pair of tokens occurs
        ``min_frequency`` times any more.

        Args:
            sentences: the training text, one sentence per item (cleaned sentences are best).
            target_vocab_size: the largest vocabulary wanted, special tokens included.
            min_frequency: a pair of tokens is merged only if it occurs at least this often.
            lowercase: lower-case all text before encoding (decoding then gives lower case).

        Raises:
            TypeError: if ``sentences`` is a single string or holds a non-string, or a size is
                not an int.
            ValueError: if ``target_vocab_size < 5`` (4 special tokens + 1) or cannot hold the 4
                special tokens and the byte symbols of the corpus (the message gives the
                minimum), if it is above :data:`MAX_VOCAB_SIZE`, if ``min_frequency < 1``, or if
                the corpus has no non-empty sentence.
        """
        learned = _learn_from_corpus(
            sentences, target_vocab_size, min_frequency, lowercase, "SubwordTokenizer.build_from_corpus"
        )
        return cls(learned.tokenizer, lowercase=learned.lowercase)

    # ------------------------------------------------------------------ properties

    # the ids of SPECIAL_TOKENS, in their order (unk only appears when the byte alphabet is incomplete)
    _special = SpecialTokenIds(pad_id=0, start_id=1, end_id=2, unk_id=3)

    @property
    def vocab_size(self) -> int:
        """Number of tokens, special tokens included; valid ids are ``0 .. vocab_size - 1``."""
        return self._vocab_size

    @property
    def lowercase(self) -> bool:
        """Whether text is lower-cased before encoding."""
        return self._lowercase

    @property
    def kind(self) -> str:
        """The kind of this tokenizer's saved form: ``"bpe"``."""
        return _KIND

    @property
    def adds_start(self) -> bool:
        """Whether :meth:`encode` puts ``start_id`` in front of the text's ids: always."""
        return True

    @property
    def expects_cleaned_text(self) -> bool:
        """Whether text should be cleaned (:func:`~transformer_cpp.text.clean_sentence`) before
        it is encoded: always, as the vocabulary was learnt from cleaned text."""
        return True

    @property
    def normalization(self) -> str:
        """What encoding does to text first: ``"nfc"``, or ``"nfc+lowercase"`` with ``lowercase``."""
        return "nfc+lowercase" if self._lowercase else "nfc"

    def __len__(self) -> int:
        return self._vocab_size

    def __repr__(self) -> str:
        return f"SubwordTokenizer(vocab_size={self._vocab_size}, lowercase={self._lowercase})"

    # ------------------------------------------------------------------ encoding

    def _encode_all(self, texts: List[str], caller: str) -> List[Any]:
        """``tokenizers`` encodings of ``texts`` (each with its leading space)."""
        return _encodings(self._tok, texts, f"SubwordTokenizer.{caller}", self._what(caller))

    def _what(self, caller: str) -> str:
        """How errors name the call ``caller`` of this tokenizer: with the file it was read from."""
        return f"SubwordTokenizer.{caller}" + (f" (tokenizer file '{self._source}')" if self._source else "")

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """Return the token ids of ``text``: ``[start_id, ..., end_id]`` (or without the two
        special ids when ``add_special_tokens`` is false).

        Raises:
            TypeError: if ``text`` is not a ``str``.
            ValueError: if ``text`` is not valid Unicode (a lone surrogate, e.g. from bytes that
                were decoded with ``errors="surrogateescape"``); the message gives the position.
        """
        _checked_text(text, "encode")
        add_special_tokens = _flag("SubwordTokenizer.encode", "add_special_tokens", add_special_tokens)
        pieces = [" " + text] if len(text) <= _SEGMENT_CHARS else _segments(" " + text)
        ids = [i for piece in pieces for i in self._encode_all([piece], "encode")[0].ids]
        return _wrapped(ids, add_special_tokens)

    def encode_batch(self, texts: Iterable[str], add_special_tokens: bool = True) -> List[List[int]]:
        """Encode several texts at once (in parallel, inside ``tokenizers``).

        Raises:
            TypeError: if ``texts`` is a single string or holds a non-string.
        """
        if isinstance(texts, (str, bytes)):
            raise TypeError("SubwordTokenizer.encode_batch: expected a list of texts, got a single string")
        add_special_tokens = _flag("SubwordTokenizer.encode_batch", "add_special_tokens", add_special_tokens)
        prepared = [" " + _checked_text(text, "encode_batch", i) for i, text in enumerate(texts)]
        if not prepared:
            return []
        return [_wrapped(e.ids, add_special_tokens) for e in self._encode_all(prepared, "encode_batch")]

    def tokens(self, text: str) -> List[str]:
        """Return the subword pieces of ``text`` as readable strings, for display.

        Each piece is shown as the text it stands for, with a leading space written ``▁``
        (``"¿Qué año?"`` -> ``['▁¿', 'Qué', '▁año', '?']``, depending on the vocabulary). A piece
        holding only part of a multi-byte character is shown as ``�``. No special tokens.
        """
        _checked_text(text, "tokens")
        pieces = self._encode_all([" " + text], "tokens")[0].tokens
        decoder = self._tok.decoder
        with _library_errors(self._what("tokens")):
            return _readable_pieces(decoder, pieces)

    # ------------------------------------------------------------------ decoding

    def decode(self, ids: IdSequence, skip_special_tokens: bool = True) -> str:
        """Turn token ids back into text.

        With ``skip_special_tokens`` (the default) decoding stops at the first ``end_id`` and
        ``<pad>``, ``<start>`` and ``<unk>`` are left out — what you want for model output.
        Without it, special tokens other than padding are written out (``<start>``, ...).
        Padding is always ignored. Accepts a list, tuple or 1-D NumPy array of ints.

        Raises:
            TypeError: if ``ids`` is not a sequence of integers.
            ValueError: if an id is outside ``[0, vocab_size)`` or an array is not 1-D.
        """
        skip_special_tokens = _flag("SubwordTokenizer.decode", "skip_special_tokens", skip_special_tokens)
        values = _kept_ids(_checked_ids(ids, self._vocab_size, "SubwordTokenizer.decode"), skip_special_tokens)
        if not values:
            return ""
        with _library_errors(self._what("decode")):
            text = self._tok.decode(values, skip_special_tokens=False)
        return _without_leading_space(text)

    def decode_batch(
        self, batch: Union[Iterable[IdSequence], np.ndarray], skip_special_tokens: bool = True
    ) -> List[str]:
        """Decode several id sequences (a list of sequences or a 2-D array, one row each).

        Raises:
            TypeError / ValueError: as :meth:`decode`, for the offending row.
        """
        skip_special_tokens = _flag("SubwordTokenizer.decode_batch", "skip_special_tokens", skip_special_tokens)
        selected = _kept_rows(batch, self._vocab_size, skip_special_tokens, "SubwordTokenizer.decode_batch")
        with _library_errors(self._what("decode_batch")):
            texts = self._tok.decode_batch(selected, skip_special_tokens=False) if selected else []
        return [_without_leading_space(t) if sel else "" for t, sel in zip(texts, selected)]

    # ------------------------------------------------------------------ vocabulary

    def id_to_token(self, token_id: int) -> str:
        """Return the vocabulary entry of ``token_id`` in byte-level form (``'Ġaño'`` has a
        leading space; see :meth:`tokens` for readable pieces).

        Raises:
            ValueError: if ``token_id`` is out of range.
        """
        (value,) = _checked_ids([token_id], self._vocab_size, "SubwordTokenizer.id_to_token")
        return cast(str, self._tok.id_to_token(value))

    def token_to_id(self, token: str) -> Optional[int]:
        """Return the id of a vocabulary entry (byte-level form, or a special token such as
        ``'<end>'``), or ``None`` if it is not in the vocabulary."""
        return cast(Optional[int], self._tok.token_to_id(_checked_text(token, "token_to_id")))

    def get_vocab(self) -> Dict[str, int]:
        """Return the vocabulary as ``{token: id}`` (byte-level form), special tokens included."""
        return dict(self._tok.get_vocab(with_added_tokens=True))

    # ------------------------------------------------------------------ persistence

    def to_str(self) -> str:
        """Serialise to one JSON string (for embedding in a checkpoint); see :meth:`from_str`."""
        return _saved_form(json.loads(self._tok.to_str()), self._lowercase)

    @classmethod
    def from_str(cls, s: str, *, source: Optional[str] = None) -> "SubwordTokenizer":
        """Rebuild a tokenizer from the output of :meth:`to_str`; ``source`` names where the text
        came from (a file) in every error about it, then and later.

        Only what this class writes is accepted: byte-level BPE with NFC (and Lowercase)
        normalisation and the four special tokens; any other component of the Hugging Face format
        (a regular expression, a dropout, a post-processor, ...) is refused before the library
        reads it. A failure of the library, then or when the tokenizer runs, is a ``ValueError``.

        Raises:
            TypeError: if ``s`` is not a ``str``.
            ValueError: if ``s`` is not a serialised ``SubwordTokenizer`` (not JSON, wrong
                format name or version, a component this class does not write, damaged tokenizer).
        """
        _checked_source(source, "SubwordTokenizer.from_str")
        caller = f"SubwordTokenizer.from_str({source!r})" if source else "SubwordTokenizer.from_str"
        return cls._from_str(s, caller, source)

    @classmethod
    def _from_str(cls, s: Any, caller: str, source: Optional[str]) -> "SubwordTokenizer":
        hf, lowercase = _parse_document(s, caller)
        try:
            return cls(hf, lowercase=lowercase, source=source)
        except ValueError as exc:
            raise ValueError(f"{caller}: damaged SubwordTokenizer: {exc}") from None

    @classmethod
    def from_bpe(
        cls, vocab: Dict[str, int], merges: List[Any], *, lowercase: bool = False, source: Optional[str] = None
    ) -> "SubwordTokenizer":
        """A tokenizer of this class from a byte-level BPE vocabulary and its merges (as a
        ``tokenizer.json`` holds them under ``model``), with the special tokens first; checked as
        :meth:`from_str` checks a saved one (``ValueError`` naming what differs)."""
        caller = f"SubwordTokenizer.from_bpe({source!r})" if source else "SubwordTokenizer.from_bpe"
        return cls._from_str(_saved_form(_bpe_tokenizer_json(vocab, merges, lowercase), lowercase), caller, source)

    def save(self, path: Union[str, os.PathLike[str]]) -> None:
        """Write the tokenizer to ``path`` as one UTF-8 JSON file (parent directories are
        created). The file is written to a temporary name and renamed, so a crash never leaves
        half a file."""
        path = os.fspath(path)
        if os.path.isdir(path):
            raise IsADirectoryError(f"SubwordTokenizer.save: {path!r} is a directory; give a file name")
        _write_atomically(path, self.to_str())

    @classmethod
    def load(cls, path: Union[str, os.PathLike[str]]) -> "SubwordTokenizer":
        """Read a tokenizer written by :meth:`save`.

        Raises:
            FileNotFoundError: if ``path`` does not exist.
            ValueError: if the file is not a saved ``SubwordTokenizer`` (the path is named).
        """
        path = os.fspath(path)
        text = _read_tokenizer_file(path, "SubwordTokenizer.load", "SubwordTokenizer", "SubwordTokenizer.save")
        return cls._from_str(text, f"SubwordTokenizer.load({path!r})", path)
