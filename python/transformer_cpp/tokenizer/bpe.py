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
import threading
import uuid
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Type, Union, cast

import numpy as np

from ._checks import ANY as _ANY_INTEGER, flag as _flag, integer as _integer

if TYPE_CHECKING:
    from tokenizers import Tokenizer as _HFTokenizer

__all__ = ["MAX_VOCAB_SIZE", "SubwordTokenizer", "SPECIAL_TOKENS"]

logger = logging.getLogger(__name__)

#: Special tokens in id order: padding is id 0, then start, end and unknown.
SPECIAL_TOKENS = ("<pad>", "<start>", "<end>", "<unk>")
_PAD, _START, _END, _UNK = SPECIAL_TOKENS

_FORMAT_NAME = "transformer_cpp.SubwordTokenizer"
_FORMAT_VERSION = 1
_BYTE_ALPHABET_SIZE = 256
#: The largest ``target_vocab_size`` accepted (2**20). Subword vocabularies are far smaller; the
#: bound keeps an absurd size from reaching the tokenizers library, which aborts the process on one.
MAX_VOCAB_SIZE = 2**20
#: The largest file :meth:`SubwordTokenizer.load` reads: a vocabulary of MAX_VOCAB_SIZE tokens and
#: its merges take a few hundred bytes each.
MAX_FILE_BYTES = 1 << 30

IdSequence = Union[Sequence[int], np.ndarray]


def _unicode_error(text: str, what: str) -> Optional[ValueError]:
    """A ValueError naming the first lone surrogate of ``text`` (what ``surrogateescape`` makes of
    bytes that are not UTF-8), or None when ``text`` is valid Unicode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return ValueError(
            f"{what} is not valid Unicode: it holds the lone surrogate {text[exc.start]!r} at position "
            f"{exc.start} (bytes that were not UTF-8?); decode the input correctly or replace them"
        )
    return None


def _require_tokenizers() -> Tuple[Type[_HFTokenizer], ModuleType, ModuleType, ModuleType, ModuleType, ModuleType]:
    """Import the parts of Hugging Face ``tokenizers`` this module needs."""
    try:
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    except ImportError as exc:  # pragma: no cover - tokenizers is a declared dependency
        raise ImportError("SubwordTokenizer needs the 'tokenizers' package: pip install tokenizers") from exc
    return Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers


def _learn_byte_level_bpe(
    corpus: List[str], target_vocab_size: int, min_frequency: int, lowercase: bool, name: str
) -> Any:
    """A byte-level BPE tokenizer (Hugging Face ``tokenizers``) learnt from ``corpus``: NFC (and
    lower-case) normalisation, the special tokens first, every byte symbol when the size allows."""
    Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers = _require_tokenizers()
    n_special = len(SPECIAL_TOKENS)
    tok = Tokenizer(models.BPE(unk_token=_UNK))
    norm = [normalizers.NFC()]
    if lowercase:
        norm.append(normalizers.Lowercase())
    tok.normalizer = normalizers.Sequence(norm)
    if target_vocab_size < n_special + _BYTE_ALPHABET_SIZE:
        # the byte symbols the corpus uses (after normalisation) must all fit, or its own text
        # would encode as <unk>
        used = len(set(tok.normalizer.normalize_str(" ".join(corpus)).encode("utf-8")))
        if target_vocab_size < n_special + used:
            raise ValueError(
                f"{name}: target_vocab_size {target_vocab_size} cannot hold the {n_special} special "
                f"tokens and the {used} byte symbols this corpus uses; it must be at least "
                f"{n_special + used} (at least {n_special + _BYTE_ALPHABET_SIZE} to encode any text)"
            )
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()

    trainer_args: Dict[str, Any] = dict(
        vocab_size=target_vocab_size,
        min_frequency=int(min_frequency),
        show_progress=False,
        special_tokens=list(SPECIAL_TOKENS),
    )
    if target_vocab_size >= n_special + _BYTE_ALPHABET_SIZE:
        trainer_args["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
    else:
        trainer_args["limit_alphabet"] = target_vocab_size - n_special
        logger.warning(
            "%s: target_vocab_size %d < %d cannot hold all byte symbols; bytes the corpus does "
            "not use will encode as %s and not round-trip",
            name,
            target_vocab_size,
            n_special + _BYTE_ALPHABET_SIZE,
            _UNK,
        )
    with _library_errors(name):
        tok.train_from_iterator(corpus, trainers.BpeTrainer(**trainer_args), length=len(corpus))
    return tok


def _is_library_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a panic of the ``tokenizers`` library (pyo3's ``PanicException``, which
    derives from ``BaseException``: ``except Exception`` does not catch it)."""
    return type(exc).__name__ == "PanicException"


@contextlib.contextmanager
def _library_errors(what: str) -> Iterator[None]:
    """Turn a failure inside the ``tokenizers`` library, a panic included, into a ``ValueError``
    that starts with ``what`` (which names the tokenizer and the call); Python's own exits
    (Ctrl-C, ``SystemExit``) and this module's errors pass through."""
    try:
        yield
    except (TypeError, ValueError):
        raise
    except BaseException as exc:  # noqa: B036  (the library's panics are BaseExceptions)
        if not (isinstance(exc, Exception) or _is_library_panic(exc)):
            raise
        raise _library_failure(what, exc) from None


def _library_failure(what: str, exc: BaseException) -> ValueError:
    """The ValueError that stands for ``exc``, a failure of the tokenizers library, in one line."""
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return ValueError(f"{what}: the tokenizers library failed: {detail}")


class _Unwritten(ValueError):
    """A part of a saved tokenizer that this module never writes."""


def _expect(value: Any, allowed: Any, where: str) -> None:
    """``value`` must equal ``allowed`` (or be one of a tuple of allowed values)."""
    options = allowed if isinstance(allowed, tuple) else (allowed,)
    if not any(value is option if option in (None, True, False) else value == option for option in options):
        described = " or ".join(json.dumps(o) for o in options)
        raise _Unwritten(f"{where} is {json.dumps(value)[:80]}, this program writes {described}")


def _check_keys(
    part: Any, where: str, known: Tuple[str, ...], required: Tuple[str, ...] = (), kind: Optional[str] = None
) -> Dict[str, Any]:
    """``part`` as a JSON object of type ``kind`` (its ``"type"`` field, checked first) with only
    ``known`` keys and every ``required`` one."""
    if not isinstance(part, dict):
        raise _Unwritten(f"{where} is {json.dumps(part)[:40]}, this program writes an object")
    if kind is not None:
        _expect(part.get("type"), kind, f"{where}.type")
    unknown = sorted(set(part) - set(known))
    if unknown:
        raise _Unwritten(f"{where} has the field {unknown[0]!r}, which this program never writes")
    missing = [k for k in required if k not in part]
    if missing:
        raise _Unwritten(f"{where} lacks the field {missing[0]!r}")
    return part


def _check_flags(part: Dict[str, Any], where: str, names: Tuple[str, ...]) -> None:
    for name in names:
        if name in part and not isinstance(part[name], bool):
            raise _Unwritten(f"{where}.{name} is {json.dumps(part[name])[:40]}, expected true or false")


def _check_written_here(tokenizer: Any, lowercase: Any) -> None:
    """Refuse a saved Hugging Face tokenizer built of anything but what
    :func:`_learn_byte_level_bpe` makes (NFC and, with ``lowercase``, Lowercase normalisation;
    ByteLevel pre-tokenizer and decoder; a plain BPE model; the four special tokens; no post-processor,
    padding or truncation), before the library reads it: a file from elsewhere could hold any
    component (a regular expression that makes the library panic, a dropout that makes encoding
    random), and none of them is this program's. ``_Unwritten`` saying what differs."""
    top = _check_keys(
        tokenizer,
        "the tokenizer",
        (
            "version",
            "truncation",
            "padding",
            "added_tokens",
            "normalizer",
            "pre_tokenizer",
            "post_processor",
            "decoder",
            "model",
        ),
        ("added_tokens", "normalizer", "pre_tokenizer", "decoder", "model"),
    )
    for name in ("truncation", "padding", "post_processor"):
        _expect(top.get(name), None, name)
    if not isinstance(top.get("version", ""), str):
        raise _Unwritten("version is not a string")

    added = top["added_tokens"]
    if not isinstance(added, list) or len(added) != len(SPECIAL_TOKENS):
        raise _Unwritten(f"added_tokens must be the {len(SPECIAL_TOKENS)} special tokens {', '.join(SPECIAL_TOKENS)}")
    for i, (entry, token) in enumerate(zip(added, SPECIAL_TOKENS)):
        where = f"added_tokens[{i}]"
        entry = _check_keys(
            entry,
            where,
            ("id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"),
            ("id", "content"),
        )
        _expect(entry["content"], token, f"{where}.content")
        _expect(entry["id"], i, f"the id of the special token {token}")
        _check_flags(entry, where, ("single_word", "lstrip", "rstrip", "normalized", "special"))

    normalizer = _check_keys(top["normalizer"], "normalizer", ("type", "normalizers"), ("normalizers",), "Sequence")
    steps = normalizer["normalizers"]
    expected_steps = [{"type": "NFC"}] + ([{"type": "Lowercase"}] if lowercase is True else [])
    if steps != expected_steps:
        raise _Unwritten(
            f"normalizer.normalizers is {json.dumps(steps)[:120]}, this program writes {json.dumps(expected_steps)}"
            + (" for this tokenizer's 'lowercase' setting" if isinstance(steps, list) and len(steps) <= 2 else "")
        )

    byte_level = ("type", "add_prefix_space", "trim_offsets", "use_regex")
    pre = _check_keys(top["pre_tokenizer"], "pre_tokenizer", byte_level, kind="ByteLevel")
    _expect(pre.get("add_prefix_space", False), False, "pre_tokenizer.add_prefix_space")
    _expect(pre.get("use_regex", True), True, "pre_tokenizer.use_regex")
    _check_flags(pre, "pre_tokenizer", ("trim_offsets",))
    decoder = _check_keys(top["decoder"], "decoder", byte_level, kind="ByteLevel")
    _check_flags(decoder, "decoder", ("add_prefix_space", "trim_offsets", "use_regex"))

    model = _check_keys(
        top["model"],
        "model",
        (
            "type",
            "dropout",
            "unk_token",
            "continuing_subword_prefix",
            "end_of_word_suffix",
            "fuse_unk",
            "byte_fallback",
            "ignore_merges",
            "vocab",
            "merges",
        ),
        ("vocab", "merges"),
        "BPE",
    )
    _expect(model.get("dropout"), None, "model.dropout")
    _expect(model.get("unk_token", _UNK), _UNK, "model.unk_token")
    _expect(model.get("continuing_subword_prefix"), None, "model.continuing_subword_prefix")
    _expect(model.get("end_of_word_suffix"), None, "model.end_of_word_suffix")
    _expect(model.get("byte_fallback", False), False, "model.byte_fallback")
    _expect(model.get("ignore_merges", False), False, "model.ignore_merges")
    _check_flags(model, "model", ("fuse_unk",))
    vocab = model["vocab"]
    if not isinstance(vocab, dict) or len(vocab) > MAX_VOCAB_SIZE:
        raise _Unwritten(f"model.vocab must be an object of at most {MAX_VOCAB_SIZE} tokens")
    ids = vocab.values()
    if not all(type(v) is int for v in ids) or sorted(ids) != list(range(len(vocab))):
        raise _Unwritten(f"model.vocab must number its {len(vocab)} tokens 0 to {len(vocab) - 1}, each once")
    merges = model["merges"]
    if not isinstance(merges, list) or not all(
        (isinstance(m, str) and m.count(" ") == 1)
        or (isinstance(m, list) and len(m) == 2 and all(isinstance(p, str) for p in m))
        for m in merges
    ):
        raise _Unwritten("model.merges must be a list of pairs of tokens")


def _parse_document(s: Any, caller: str) -> Tuple[Any, bool]:
    """The Hugging Face tokenizer and the ``lowercase`` flag of a serialised ``SubwordTokenizer``
    (what :meth:`SubwordTokenizer.to_str` writes); ``ValueError`` naming ``caller`` and what is
    wrong otherwise."""
    if not isinstance(s, str):
        raise TypeError(f"{caller}: expected a str, got {type(s).__name__}")
    Tokenizer = _require_tokenizers()[0]
    try:
        document = json.loads(s)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{caller}: not a SubwordTokenizer: invalid JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != _FORMAT_NAME:
        raise ValueError(f'{caller}: not a SubwordTokenizer: expected a JSON object with "format": "{_FORMAT_NAME}"')
    version = document.get("version")
    if version != _FORMAT_VERSION:
        raise ValueError(
            f"{caller}: unsupported SubwordTokenizer format version {version!r}; "
            f"this version of transformer_cpp reads version {_FORMAT_VERSION}"
        )
    if document.get("special_tokens") != list(SPECIAL_TOKENS) or "tokenizer" not in document:
        raise ValueError(f"{caller}: damaged SubwordTokenizer: special tokens or tokenizer missing")
    lowercase = document.get("lowercase", False)
    if not isinstance(lowercase, bool):
        raise ValueError(f"{caller}: damaged SubwordTokenizer: 'lowercase' must be true or false, got {lowercase!r}")
    try:
        _check_written_here(document["tokenizer"], lowercase)
    except _Unwritten as exc:
        raise ValueError(f"{caller}: not a tokenizer this program writes (damaged, or made elsewhere): {exc}") from None
    try:
        hf = Tokenizer.from_str(json.dumps(document["tokenizer"]))
    except BaseException as exc:  # noqa: B036  (tokenizers raises an Exception, or panics)
        if not (isinstance(exc, Exception) or _is_library_panic(exc)):
            raise
        raise ValueError(f"{caller}: damaged SubwordTokenizer: {' '.join(str(exc).split())}") from None
    return hf, lowercase


def _write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` (parent directories created) under a temporary name of its own,
    then rename it, so a crash never leaves half a file and two writers never share a temporary."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class SubwordTokenizer:
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

    def __len__(self) -> int:
        return self._vocab_size

    def __repr__(self) -> str:
        return f"SubwordTokenizer(vocab_size={self._vocab_size}, lowercase={self._lowercase})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SubwordTokenizer):
            return NotImplemented
        return self.to_str() == other.to_str()

    # mutable wrapper around a Rust object: not hashable (object types __hash__ as a method, and
    # mypy has no other spelling for "this class is unhashable")
    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        # pickling and copying go through the saved form, which every load turns into a tokenizer
        # with the runtime settings of __init__ (text that spells a special token stays ordinary
        # text: the library's own pickle would lose that flag)
        return (SubwordTokenizer.from_str, (self.to_str(),))

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
        ids = self._encode_all([" " + text], "encode")[0].ids
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
        if os.path.isdir(path):
            raise IsADirectoryError(
                f"SubwordTokenizer.load: {path!r} is a directory; expected a file written by SubwordTokenizer.save"
            )
        if not os.path.isfile(path):
            raise FileNotFoundError(f"SubwordTokenizer.load: no such file {path!r}")
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise ValueError(
                f"SubwordTokenizer.load: {path!r} has {size:,} bytes, more than any SubwordTokenizer file "
                f"({MAX_FILE_BYTES:,} at most); it is not one"
            )
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except UnicodeDecodeError:
            raise ValueError(
                f"SubwordTokenizer.load: {path!r} is not a SubwordTokenizer file (not UTF-8 text)"
            ) from None
        return cls._from_str(text, f"SubwordTokenizer.load({path!r})", path)
