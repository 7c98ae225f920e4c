"""What every tokenizer of the package shares: the check that text is valid Unicode, the
atomic write of a saved tokenizer, the reading of one, with its size cap, the special ids
(:class:`SpecialIds`), and equality, hashing and pickling by the saved form (:class:`BySavedForm`)."""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from typing import Any, FrozenSet, NamedTuple, Optional

from .._delegated import Delegated

#: The largest file a tokenizer's ``load`` reads: a vocabulary of MAX_VOCAB_SIZE tokens and its
#: merges take a few hundred bytes each.
MAX_FILE_BYTES = 1 << 30


class SpecialTokenIds(NamedTuple):
    """The ids of a tokenizer's special tokens."""

    pad_id: int
    start_id: int
    end_id: int
    unk_id: int


class SpecialIds:
    """The special ids of a tokenizer, read from its ``_special`` (data of the tokenizer, not
    constants)."""

    _special: SpecialTokenIds

    pad_id = Delegated("_special", "Id of the padding token.")
    start_id = Delegated("_special", "Id of the start-of-sentence token, the decoder's first input.")
    end_id = Delegated("_special", "Id of the end-of-sentence token.")
    unk_id = Delegated("_special", "Id of the unknown token.")

    @property
    def special_ids(self) -> FrozenSet[int]:
        """The ids of all special tokens."""
        return frozenset(self._special)


def unicode_error(text: str, what: str) -> Optional[ValueError]:
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


def write_atomically(path: str, text: str) -> None:
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


def read_tokenizer_file(path: str, caller: str, kind: str, writer: str) -> str:
    """The text of the tokenizer file ``path`` for ``caller`` (``SubwordTokenizer.load``, ...):
    a ``kind`` file written by ``writer``; one-line errors for a directory, a missing file, a file
    over :data:`MAX_FILE_BYTES` and one that is not UTF-8."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"{caller}: {path!r} is a directory; expected a file written by {writer}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{caller}: no such file {path!r}")
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise ValueError(
            f"{caller}: {path!r} has {size:,} bytes, more than any {kind} file ({MAX_FILE_BYTES:,} at most); it is not one"
        )
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except UnicodeDecodeError:
        raise ValueError(f"{caller}: {path!r} is not a {kind} file (not UTF-8 text)") from None


class BySavedForm:
    """A tokenizer that is its saved form: two are equal when their :meth:`to_str` is, and pickling
    and copying go through :meth:`to_str` and :meth:`from_str`, which every load turns into a
    tokenizer with the runtime settings of ``__init__`` (a wrapped library's own pickle can lose
    one: with ``tokenizers``, that text spelling a special token stays ordinary text). It is not
    hashable: it wraps a mutable object."""

    def to_str(self) -> str:
        raise NotImplementedError

    @classmethod
    def from_str(cls, s: str, *, source: Optional[str] = None) -> Any:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        return self.to_str() == other.to_str()

    # object types __hash__ as a method, and mypy has no other spelling for "this class is
    # unhashable"
    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> Any:
        return (type(self).from_str, (self.to_str(),))
