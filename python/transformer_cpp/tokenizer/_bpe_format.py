"""The saved form of :class:`~transformer_cpp.tokenizer.SubwordTokenizer`: the document it writes
(:func:`saved_form`, :func:`bpe_tokenizer_json`), the check of a saved document before Hugging Face
``tokenizers`` reads it (only what this program writes is accepted), and the library's failures as
one-line errors."""

from __future__ import annotations

import contextlib
import json
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple, Type

if TYPE_CHECKING:
    from tokenizers import Tokenizer as _HFTokenizer

#: Special tokens in id order: padding is id 0, then start, end and unknown.
SPECIAL_TOKENS = ("<pad>", "<start>", "<end>", "<unk>")
_PAD, _START, _END, _UNK = SPECIAL_TOKENS

FORMAT_NAME = "transformer_cpp.SubwordTokenizer"
FORMAT_VERSION = 1
BYTE_ALPHABET_SIZE = 256
#: The largest ``target_vocab_size`` accepted (2**20). Subword vocabularies are far smaller; the
#: bound keeps an absurd size from reaching the tokenizers library, which aborts the process on one.
MAX_VOCAB_SIZE = 2**20
#: The ``kind`` of the saved form of a SubwordTokenizer (documents written before kinds have none).
KIND = "bpe"


def require_tokenizers() -> Tuple[Type[_HFTokenizer], ModuleType, ModuleType, ModuleType, ModuleType, ModuleType]:
    """Import the parts of Hugging Face ``tokenizers`` that learning and reading a tokenizer need."""
    try:
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    except ImportError as exc:  # pragma: no cover - tokenizers is a declared dependency
        raise ImportError("SubwordTokenizer needs the 'tokenizers' package: pip install tokenizers") from exc
    return Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers


def is_library_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a panic of the ``tokenizers`` library (pyo3's ``PanicException``, which
    derives from ``BaseException``: ``except Exception`` does not catch it)."""
    return type(exc).__name__ == "PanicException"


@contextlib.contextmanager
def library_errors(what: str) -> Iterator[None]:
    """Turn a failure inside the ``tokenizers`` library, a panic included, into a ``ValueError``
    that starts with ``what`` (which names the tokenizer and the call); Python's own exits
    (Ctrl-C, ``SystemExit``) and this module's errors pass through."""
    try:
        yield
    except (TypeError, ValueError):
        raise
    except BaseException as exc:  # noqa: B036  (the library's panics are BaseExceptions)
        if not (isinstance(exc, Exception) or is_library_panic(exc)):
            raise
        raise library_failure(what, exc) from None


def library_failure(what: str, exc: BaseException) -> ValueError:
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
    :func:`_bpe_training.learn_byte_level_bpe` makes (NFC and, with ``lowercase``, Lowercase normalisation;
    ByteLevel pre-tokenizer and decoder; a plain BPE model; the four special tokens; no post-processor,
    padding or truncation), before the library reads it: a file from elsewhere could hold any
    component (a regular expression that makes the library panic, a dropout that makes encoding
    random), and none of them is this program's. ``_Unwritten`` saying what differs."""
    top = _checked_top_level(tokenizer)
    _check_added_tokens(top["added_tokens"])
    _check_normalizer(top["normalizer"], lowercase)
    _check_byte_level(top["pre_tokenizer"], top["decoder"])
    _check_bpe_model(top["model"])


def _checked_top_level(tokenizer: Any) -> Dict[str, Any]:
    """The tokenizer's top-level object: only the known keys, those it needs present, no
    truncation, padding or post-processor."""
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
    return top


def _check_added_tokens(added: Any) -> None:
    """The added tokens are the four special tokens, in order, with ids 0 to 3."""
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


def _check_normalizer(normalizer: Any, lowercase: Any) -> None:
    """The normalizer is NFC, followed by Lowercase when ``lowercase`` is True."""
    normalizer = _check_keys(normalizer, "normalizer", ("type", "normalizers"), ("normalizers",), "Sequence")
    steps = normalizer["normalizers"]
    expected_steps = [{"type": "NFC"}] + ([{"type": "Lowercase"}] if lowercase is True else [])
    if steps != expected_steps:
        raise _Unwritten(
            f"normalizer.normalizers is {json.dumps(steps)[:120]}, this program writes {json.dumps(expected_steps)}"
            + (" for this tokenizer's 'lowercase' setting" if isinstance(steps, list) and len(steps) <= 2 else "")
        )


def _check_byte_level(pre_tokenizer: Any, decoder: Any) -> None:
    """The pre-tokenizer and the decoder are ByteLevel, with no prefix space and the regex on."""
    byte_level = ("type", "add_prefix_space", "trim_offsets", "use_regex")
    pre = _check_keys(pre_tokenizer, "pre_tokenizer", byte_level, kind="ByteLevel")
    _expect(pre.get("add_prefix_space", False), False, "pre_tokenizer.add_prefix_space")
    _expect(pre.get("use_regex", True), True, "pre_tokenizer.use_regex")
    _check_flags(pre, "pre_tokenizer", ("trim_offsets",))
    decoder = _check_keys(decoder, "decoder", byte_level, kind="ByteLevel")
    _check_flags(decoder, "decoder", ("add_prefix_space", "trim_offsets", "use_regex"))


def _check_bpe_model(model: Any) -> None:
    """The model is a plain BPE (no dropout, prefix, suffix or byte fallback) whose vocabulary
    numbers its tokens 0 to n - 1 and whose merges are pairs of tokens."""
    model = _check_keys(
        model,
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


def saved_form(tokenizer: Dict[str, Any], lowercase: bool) -> str:
    """The saved form of a ``SubwordTokenizer``: one JSON document of this format's name, kind and
    version, the ``lowercase`` flag, the special tokens and the Hugging Face ``tokenizer`` (a JSON
    object), which :func:`parse_document` reads back."""
    document = {
        "format": FORMAT_NAME,
        "kind": KIND,
        "version": FORMAT_VERSION,
        "lowercase": lowercase,
        "special_tokens": list(SPECIAL_TOKENS),
        "tokenizer": tokenizer,
    }
    return json.dumps(document, ensure_ascii=False, sort_keys=True)


def bpe_tokenizer_json(vocab: Dict[str, int], merges: List[Any], lowercase: bool) -> Dict[str, Any]:
    """The Hugging Face tokenizer (as a JSON object) of a byte-level BPE vocabulary and its merges,
    built of what learning makes: the special tokens first, NFC (and Lowercase) normalisation,
    ByteLevel pre-tokenizer and decoder, no post-processor."""
    flags = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    byte_level = {"type": "ByteLevel", "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [dict(flags, content=token, id=i) for i, token in enumerate(SPECIAL_TOKENS)],
        "normalizer": {
            "type": "Sequence",
            "normalizers": [{"type": "NFC"}] + ([{"type": "Lowercase"}] if lowercase else []),
        },
        "pre_tokenizer": dict(byte_level, add_prefix_space=False),
        "post_processor": None,
        "decoder": dict(byte_level, add_prefix_space=True),
        "model": {"type": "BPE", "dropout": None, "unk_token": _UNK, "vocab": vocab, "merges": merges},
    }


def parse_document(s: Any, caller: str) -> Tuple[Any, bool]:
    """The Hugging Face tokenizer and the ``lowercase`` flag of a serialised ``SubwordTokenizer``
    (what :meth:`SubwordTokenizer.to_str` writes); ``ValueError`` naming ``caller`` and what is
    wrong otherwise."""
    if not isinstance(s, str):
        raise TypeError(f"{caller}: expected a str, got {type(s).__name__}")
    Tokenizer = require_tokenizers()[0]
    try:
        document = json.loads(s)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{caller}: not a SubwordTokenizer: invalid JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise ValueError(f'{caller}: not a SubwordTokenizer: expected a JSON object with "format": "{FORMAT_NAME}"')
    version = document.get("version")
    if version != FORMAT_VERSION:
        raise ValueError(
            f"{caller}: unsupported SubwordTokenizer format version {version!r}; "
            f"this version of transformer_cpp reads version {FORMAT_VERSION}"
        )
    if document.get("kind", KIND) != KIND:
        raise ValueError(
            f"{caller}: not a SubwordTokenizer: its kind is {document.get('kind')!r:.40}, expected {KIND!r}"
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
        if not (isinstance(exc, Exception) or is_library_panic(exc)):
            raise
        raise ValueError(f"{caller}: damaged SubwordTokenizer: {' '.join(str(exc).split())}") from None
    return hf, lowercase
