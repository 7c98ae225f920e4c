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
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Union, cast

import numpy as np

from .._checks import ANY as _ANY_INTEGER, flag as _flag, integer as _integer
from ._bpe_format import (
    FORMAT_NAME as _FORMAT_NAME,
    FORMAT_VERSION as _FORMAT_VERSION,
    KIND as _KIND,
    MAX_VOCAB_SIZE,
    SPECIAL_TOKENS,
    is_library_panic as _is_library_panic,
    learn_byte_level_bpe as _learn_byte_level_bpe,
    library_errors as _library_errors,
    library_failure as _library_failure,
    parse_document as _parse_document,
)
from ._common import (
    MAX_FILE_BYTES,
    BySavedForm,
    read_tokenizer_file as _read_tokenizer_file,
    unicode_error as _unicode_error,
    write_atomically as _write_atomically,
)

__all__ = ["MAX_FILE_BYTES", "MAX_VOCAB_SIZE", "SubwordTokenizer", "SPECIAL_TOKENS"]

logger = logging.getLogger(__name__)

_PAD, _START, _END, _UNK = SPECIAL_TOKENS

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


class SubwordTokenizer(BySavedForm):
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
        if not all(hasattr(hf_tokenizer, a) for a in ("token_to_id", "get_vocab_size", "encode", "decode")):
            raise TypeError(
                f"SubwordTokenizer: expected a trained tokenizers.Tokenizer, got "
                f"{type(hf_tokenizer).__name__}; make one with SubwordTokenizer.build_from_corpus, "
                "load or from_str"
            )
        self._tok = hf_tokenizer
        self._lowercase = _flag("SubwordTokenizer", "lowercase", lowercase)
        if source is not None and not isinstance(source, str):
            raise TypeError(f"SubwordTokenizer: source must be a str or None, got {type(source).__name__}")
        self._source = source  # the file it was read from, named in errors
        for expected_id, token in enumerate(SPECIAL_TOKENS):
            got = hf_tokenizer.token_to_id(token)
            if got != expected_id:
                raise ValueError(
                    f"SubwordTokenizer: special token {token!r} must have id {expected_id}, "
                    f"found {got}; the tokenizer was not built by SubwordTokenizer.build_from_corpus"
                )
        self._vocab_size = int(hf_tokenizer.get_vocab_size(with_added_tokens=True))
        # Text that spells a special token ("<end>", "<pad>") is ordinary text: encoded as its
        # bytes, never as the special id (which would end or blank the sentence). A runtime flag of
        # tokenizers >= 0.19, not part of the saved JSON, so it is set on every load.
        if hasattr(hf_tokenizer, "encode_special_tokens"):
            hf_tokenizer.encode_special_tokens = True

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
        name = "SubwordTokenizer.build_from_corpus"
        if isinstance(sentences, (str, bytes)):
            raise TypeError(f"{name}: expected an iterable of sentences, got a single string")
        target_vocab_size = _integer(name, "target_vocab_size", target_vocab_size, _ANY_INTEGER)
        n_special = len(SPECIAL_TOKENS)
        if target_vocab_size < n_special + 1:
            raise ValueError(
                f"{name}: target_vocab_size {target_vocab_size} is too small; it must be at least "
                f"{n_special + 1} ({n_special} special tokens + 1)"
            )
        if target_vocab_size > MAX_VOCAB_SIZE:
            raise ValueError(
                f"{name}: target_vocab_size {target_vocab_size} is too large; it must be at most "
                f"{MAX_VOCAB_SIZE} (2**20)"
            )
        min_frequency = _integer(name, "min_frequency", min_frequency, 1, 2**63 - 1)
        lowercase = _flag(name, "lowercase", lowercase)

        corpus: List[str] = []
        for i, sentence in enumerate(sentences):
            if not isinstance(sentence, str):
                raise TypeError(f"{name}: sentence {i} is a {type(sentence).__name__}, expected a str")
            bad = _unicode_error(sentence, f"{name}: sentence {i}")
            if bad is not None:
                raise bad
            if sentence.strip():
                corpus.append(" " + sentence)
        if not corpus:
            raise ValueError(f"{name}: the corpus is empty (no non-empty sentence)")

        tok = _learn_byte_level_bpe(corpus, target_vocab_size, int(min_frequency), lowercase, name)
        result = cls(tok, lowercase=lowercase)
        logger.info(
            "%s: learned %d tokens (target %d) from %d sentences",
            name,
            result.vocab_size,
            target_vocab_size,
            len(corpus),
        )
        return result

    # ------------------------------------------------------------------ properties

    @property
    def pad_id(self) -> int:
        """Id of the padding token; always 0."""
        return 0

    @property
    def start_id(self) -> int:
        """Id of the start-of-sentence token."""
        return 1

    @property
    def end_id(self) -> int:
        """Id of the end-of-sentence token."""
        return 2

    @property
    def unk_id(self) -> int:
        """Id of the unknown token (only used when the byte alphabet is incomplete)."""
        return 3

    @property
    def special_ids(self) -> frozenset[int]:
        """The ids of all special tokens."""
        return frozenset(range(len(SPECIAL_TOKENS)))

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

    def _check_text(self, text: Any, caller: str) -> str:
        if not isinstance(text, str):
            raise TypeError(f"SubwordTokenizer.{caller}: expected a str, got {type(text).__name__}")
        return text

    def _encode_all(self, texts: List[str], caller: str) -> List[Any]:
        """``tokenizers`` encodings of ``texts`` (each with its leading space); text that is not
        valid Unicode is a ValueError naming it (the library says only "TextInputSequence must be
        str")."""
        try:
            if len(texts) == 1:
                return [self._tok.encode(texts[0], add_special_tokens=False)]
            return cast(List[Any], self._tok.encode_batch(texts, add_special_tokens=False))
        except BaseException as exc:  # noqa: B036  (the library's panics are BaseExceptions)
            if not (isinstance(exc, Exception) or _is_library_panic(exc)):
                raise
            for i, text in enumerate(texts):
                bad = _unicode_error(
                    text[1:],
                    f"SubwordTokenizer.{caller}: text {i}"
                    if len(texts) > 1
                    else f"SubwordTokenizer.{caller}: the text",
                )
                if bad is not None:
                    raise bad from None
            raise _library_failure(self._what(caller), exc) from None

    def _what(self, caller: str) -> str:
        """How errors name the call ``caller`` of this tokenizer: with the file it was read from."""
        return f"SubwordTokenizer.{caller}" + (f" (tokenizer file '{self._source}')" if self._source else "")

    def _library_errors(self, caller: str) -> "contextlib.AbstractContextManager[None]":
        """A block in which a failure of the tokenizers library (a panic included) is a ValueError
        naming the call and the file this tokenizer was read from."""
        return _library_errors(self._what(caller))

    def _wrap(self, ids: List[int], add_special_tokens: bool) -> List[int]:
        if add_special_tokens:  # checked by the caller
            return [self.start_id, *ids, self.end_id]
        return list(ids)

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """Return the token ids of ``text``: ``[start_id, ..., end_id]`` (or without the two
        special ids when ``add_special_tokens`` is false).

        Raises:
            TypeError: if ``text`` is not a ``str``.
            ValueError: if ``text`` is not valid Unicode (a lone surrogate, e.g. from bytes that
                were decoded with ``errors="surrogateescape"``); the message gives the position.
        """
        self._check_text(text, "encode")
        add_special_tokens = _flag("SubwordTokenizer.encode", "add_special_tokens", add_special_tokens)
        if len(text) <= _SEGMENT_CHARS:
            ids = self._encode_all([" " + text], "encode")[0].ids
        else:
            ids = []
            for piece in _segments(" " + text):
                ids.extend(self._encode_all([piece], "encode")[0].ids)
        return self._wrap(ids, add_special_tokens)

    def encode_batch(self, texts: Iterable[str], add_special_tokens: bool = True) -> List[List[int]]:
        """Encode several texts at once (in parallel, inside ``tokenizers``).

        Raises:
            TypeError: if ``texts`` is a single string or holds a non-string.
        """
        if isinstance(texts, (str, bytes)):
            raise TypeError("SubwordTokenizer.encode_batch: expected a list of texts, got a single string")
        add_special_tokens = _flag("SubwordTokenizer.encode_batch", "add_special_tokens", add_special_tokens)
        prepared = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"SubwordTokenizer.encode_batch: text {i} is a {type(text).__name__}, expected a str")
            prepared.append(" " + text)
        if not prepared:
            return []
        encodings = self._encode_all(prepared, "encode_batch")
        return [self._wrap(e.ids, add_special_tokens) for e in encodings]

    def tokens(self, text: str) -> List[str]:
        """Return the subword pieces of ``text`` as readable strings, for display.

        Each piece is shown as the text it stands for, with a leading space written ``▁``
        (``"¿Qué año?"`` -> ``['▁¿', 'Qué', '▁año', '?']``, depending on the vocabulary). A piece
        holding only part of a multi-byte character is shown as ``�``. No special tokens.
        """
        self._check_text(text, "tokens")
        pieces = self._encode_all([" " + text], "tokens")[0].tokens
        decoder = self._tok.decoder
        shown = []
        with self._library_errors("tokens"):
            for piece in pieces:
                if piece == _UNK:
                    shown.append(piece)
                    continue
                readable = decoder.decode([piece])
                shown.append(readable.replace(" ", "\u2581"))
        return shown

    # ------------------------------------------------------------------ decoding

    def _check_ids(self, ids: Any, caller: str) -> List[int]:
        """Turn a 1-D list/tuple/array of ints into a list of Python ints in range."""
        name = f"SubwordTokenizer.{caller}"
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
            if v < 0 or v >= self._vocab_size:
                raise ValueError(f"{name}: token id {v} is out of range [0, {self._vocab_size})")
        return values

    def _select(self, ids: List[int], skip_special_tokens: bool) -> List[int]:
        """Apply the decoding rules: stop at end, drop padding (and specials if asked)."""
        kept = []
        for v in ids:
            if skip_special_tokens:
                if v == self.end_id:
                    break
                if v in (self.pad_id, self.start_id, self.unk_id):
                    continue
            elif v == self.pad_id:
                continue
            kept.append(v)
        return kept

    def _finish(self, text: str) -> str:
        return text[1:] if text.startswith(" ") else text

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
        values = self._select(self._check_ids(ids, "decode"), skip_special_tokens)
        if not values:
            return ""
        with self._library_errors("decode"):
            text = self._tok.decode(values, skip_special_tokens=False)
        return self._finish(text)

    def decode_batch(
        self, batch: Union[Iterable[IdSequence], np.ndarray], skip_special_tokens: bool = True
    ) -> List[str]:
        """Decode several id sequences (a list of sequences or a 2-D array, one row each).

        Raises:
            TypeError / ValueError: as :meth:`decode`, for the offending row.
        """
        skip_special_tokens = _flag("SubwordTokenizer.decode_batch", "skip_special_tokens", skip_special_tokens)
        if isinstance(batch, np.ndarray):
            if batch.ndim != 2:
                raise ValueError(
                    f"SubwordTokenizer.decode_batch: expected a 2-D array (one row per sequence), "
                    f"got shape {batch.shape}"
                )
            rows = list(batch)
        else:
            rows = list(batch)
        selected = [self._select(self._check_ids(r, "decode_batch"), skip_special_tokens) for r in rows]
        with self._library_errors("decode_batch"):
            texts = self._tok.decode_batch(selected, skip_special_tokens=False) if selected else []
        return [self._finish(t) if sel else "" for t, sel in zip(texts, selected)]

    # ------------------------------------------------------------------ vocabulary

    def id_to_token(self, token_id: int) -> str:
        """Return the vocabulary entry of ``token_id`` in byte-level form (``'Ġaño'`` has a
        leading space; see :meth:`tokens` for readable pieces).

        Raises:
            ValueError: if ``token_id`` is out of range.
        """
        (value,) = self._check_ids([token_id], "id_to_token")
        return cast(str, self._tok.id_to_token(value))

    def token_to_id(self, token: str) -> Optional[int]:
        """Return the id of a vocabulary entry (byte-level form, or a special token such as
        ``'<end>'``), or ``None`` if it is not in the vocabulary."""
        if not isinstance(token, str):
            raise TypeError(f"SubwordTokenizer.token_to_id: expected a str, got {type(token).__name__}")
        return cast(Optional[int], self._tok.token_to_id(token))

    def get_vocab(self) -> Dict[str, int]:
        """Return the vocabulary as ``{token: id}`` (byte-level form), special tokens included."""
        return dict(self._tok.get_vocab(with_added_tokens=True))

    # ------------------------------------------------------------------ persistence

    def to_str(self) -> str:
        """Serialise to one JSON string (for embedding in a checkpoint); see :meth:`from_str`."""
        document = {
            "format": _FORMAT_NAME,
            "kind": _KIND,
            "version": _FORMAT_VERSION,
            "lowercase": self._lowercase,
            "special_tokens": list(SPECIAL_TOKENS),
            "tokenizer": json.loads(self._tok.to_str()),
        }
        return json.dumps(document, ensure_ascii=False, sort_keys=True)

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
        if source is not None and not isinstance(source, str):
            raise TypeError(f"SubwordTokenizer.from_str: source must be a str or None, got {type(source).__name__}")
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
        flags = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
        added = [dict(flags, content=token, id=i) for i, token in enumerate(SPECIAL_TOKENS)]
        byte_level = {"type": "ByteLevel", "trim_offsets": True, "use_regex": True}
        hf = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": {
                "type": "Sequence",
                "normalizers": [{"type": "NFC"}] + ([{"type": "Lowercase"}] if lowercase else []),
            },
            "pre_tokenizer": dict(byte_level, add_prefix_space=False),
            "post_processor": None,
            "decoder": dict(byte_level, add_prefix_space=True),
            "model": {"type": "BPE", "dropout": None, "unk_token": _UNK, "vocab": vocab, "merges": merges},
        }
        document = {
            "format": _FORMAT_NAME,
            "kind": _KIND,
            "version": _FORMAT_VERSION,
            "lowercase": lowercase,
            "special_tokens": list(SPECIAL_TOKENS),
            "tokenizer": hf,
        }
        caller = f"SubwordTokenizer.from_bpe({source!r})" if source else "SubwordTokenizer.from_bpe"
        return cls._from_str(json.dumps(document, ensure_ascii=False), caller, source)

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
