"""The Tatoeba English–Spanish pairs: finding, downloading and reading them.

The data (``spa-eng.zip`` from manythings.org) holds ``spa.txt``, one pair per line::

    English<TAB>Spanish<TAB>attribution

The sentences come from the Tatoeba project and are licensed CC-BY 2.0 FR; the third column
credits their authors, and :class:`TatoebaPairs` keeps it (see :data:`TATOEBA_LICENSE`).
"""

from __future__ import annotations

import codecs
import logging
import os
import re
import shutil
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generator, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._checks import (
    choice as _choice,
    integer as _integer,
    path as _path,
    seed as _seed,
)

__all__ = [
    "CACHE_ENV_VAR",
    "DATA_ENV_VAR",
    "DECODE_ERRORS",
    "LoadStats",
    "MAX_LINE_BYTES",
    "SAMPLING_MODES",
    "TATOEBA_LICENSE",
    "TATOEBA_URLS",
    "TatoebaPairs",
    "UndecodableLineError",
    "check_encoding",
    "default_cache_dir",
    "download_tatoeba",
    "load_tatoeba",
]

logger = logging.getLogger(__name__)

#: Where :func:`download_tatoeba` fetches ``spa-eng.zip``, tried in order. The second is a
#: mirror whose zip holds ``spa-eng/spa.txt``.
TATOEBA_URLS: Tuple[str, ...] = (
    "http://www.manythings.org/anki/spa-eng.zip",
    "https://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip",
)

#: Licence of the sentence pairs; show it wherever the data is redistributed or published.
TATOEBA_LICENSE = (
    "English-Spanish sentence pairs from the Tatoeba Project (https://tatoeba.org), "
    "selected by ManyThings.org (https://www.manythings.org/anki/). Licensed under "
    "Creative Commons Attribution 2.0 France (CC-BY 2.0 FR, "
    "https://creativecommons.org/licenses/by/2.0/fr/). Each pair's third column "
    "(TatoebaPairs.attributions) credits the sentences' authors."
)

#: Environment variable naming a local ``spa.txt`` or ``spa-eng.zip`` to use instead of the cache.
DATA_ENV_VAR = "TRANSFORMER_CPP_DATA"
#: How :func:`load_tatoeba` picks ``num_samples`` pairs: a seeded random sample, or the first N.
SAMPLING_MODES = ("random", "first")
#: Environment variable naming the cache directory (default ``~/.cache/transformer_cpp``).
CACHE_ENV_VAR = "TRANSFORMER_CPP_CACHE"

_CACHED_TXT = Path("spa-eng") / "spa.txt"
_CACHED_ZIP = "spa-eng.zip"
_USER_AGENT = "transformer-cpp data loader (Python urllib)"


# ---------------------------------------------------------------------------- loading


@dataclass
class LoadStats:
    """What :func:`load_tatoeba` saw in the file.

    Attributes:
        read: lines read (stops early once ``num_samples`` pairs are kept).
        kept: pairs kept.
        empty: blank lines (only whitespace).
        no_tab: non-blank lines without a tab.
        empty_field: lines whose English or Spanish field is blank.
        undecodable: lines that are not valid in the file's encoding (only with ``errors="skip"``;
            by default such a line is an error).
        undecodable_lines: their line numbers (1-based).
        encoding: the encoding the file was read with.
    """

    read: int = 0
    kept: int = 0
    empty: int = 0
    no_tab: int = 0
    empty_field: int = 0
    undecodable: int = 0
    undecodable_lines: List[int] = field(default_factory=list)
    encoding: str = "utf-8"

    @property
    def skipped(self) -> int:
        """Lines read but not kept."""
        return self.empty + self.no_tab + self.empty_field + self.undecodable

    def describe_skipped(self) -> str:
        """``"3 empty, 1 without a tab, 0 with an empty side, 2 not valid utf-8"``."""
        return (
            f"{self.empty} empty, {self.no_tab} without a tab, {self.empty_field} with an empty side, "
            f"{self.undecodable} not valid {self.encoding}"
        )


class UndecodableLineError(ValueError):
    """A line of a data file is not valid in the encoding it is read with.

    Attributes: ``path``, ``line`` (1-based), ``encoding`` and ``detail`` (what is wrong where).
    """

    def __init__(self, message: str, path: Path, line: int, encoding: str, detail: str) -> None:
        super().__init__(message)
        self.path, self.line, self.encoding, self.detail = path, line, encoding, detail


#: How :func:`load_tatoeba` treats a line that is not valid in the file's encoding.
DECODE_ERRORS = ("strict", "skip")


def check_encoding(encoding: str, caller: str = "load_tatoeba") -> str:
    """The canonical name of ``encoding`` (``"utf-8"``, ``"latin-1"`` -> ``"iso8859-1"``...);
    ``ValueError`` for an unknown one or one whose lines do not end with the byte ``0x0A``
    (UTF-16, UTF-32: convert such files to UTF-8 first)."""
    if not isinstance(encoding, str):
        raise ValueError(f"{caller}: encoding must be a str such as 'utf-8' or 'latin-1', got {encoding!r}")
    try:
        name = codecs.lookup(encoding).name
        newline_ok = "\n\t".encode(name) == b"\n\t"
    except (LookupError, UnicodeError, TypeError):
        raise ValueError(
            f"{caller}: unknown text encoding {encoding!r}; expected one such as 'utf-8', 'latin-1' or 'cp1252'"
        ) from None
    if not newline_ok:
        raise ValueError(
            f"{caller}: the encoding {encoding!r} is not supported: lines must end with the byte "
            "0x0A and fields be separated by 0x09 (convert UTF-16 or UTF-32 files to UTF-8 first)"
        )
    return name


@dataclass
class TatoebaPairs:
    """English–Spanish sentence pairs with their attributions.

    ``pairs[i]`` is ``(english, spanish)``; ``len(pairs)`` the number of pairs. Iterating
    yields the same tuples. ``attributions[i]`` is the third column of the line ("" if the line
    had none); ``line_numbers[i]`` the line's number in the file (1-based; empty when the pairs did
    not come from a file). ``license`` is :data:`TATOEBA_LICENSE`.
    """

    english: List[str]
    spanish: List[str]
    attributions: List[str]
    stats: LoadStats = field(default_factory=LoadStats)
    source: Optional[Path] = None
    license: str = TATOEBA_LICENSE
    line_numbers: List[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not (len(self.english) == len(self.spanish) == len(self.attributions)) or (
            self.line_numbers and len(self.line_numbers) != len(self.english)
        ):
            raise ValueError(
                f"TatoebaPairs: english ({len(self.english)}), spanish ({len(self.spanish)}), "
                f"attributions ({len(self.attributions)}) and line_numbers ({len(self.line_numbers)}, or none) "
                "must have the same length"
            )

    def __len__(self) -> int:
        return len(self.english)

    def __getitem__(self, index: Union[int, slice]) -> Any:
        if isinstance(index, slice):
            return list(zip(self.english[index], self.spanish[index]))
        return self.english[index], self.spanish[index]

    def __iter__(self) -> Iterator[Tuple[str, str]]:
        return iter(zip(self.english, self.spanish))

    def __repr__(self) -> str:
        return f"TatoebaPairs({len(self)} pairs, source={str(self.source)!r})"


def default_cache_dir() -> Path:
    """Return the cache directory: ``$TRANSFORMER_CPP_CACHE`` or ``~/.cache/transformer_cpp``."""
    env = os.environ.get(CACHE_ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "transformer_cpp"


def _pick_zip_member(archive: zipfile.ZipFile, zip_path: Path, caller: str) -> str:
    """Return the member to read: one named ``spa.txt``, else the only ``.txt`` file."""
    names = [n for n in archive.namelist() if not n.endswith("/") and not n.startswith("__MACOSX/")]
    named = [n for n in names if n.rsplit("/", 1)[-1] == "spa.txt"]
    if len(named) == 1:
        return named[0]
    texts = [n for n in names if n.lower().endswith(".txt") and not n.rsplit("/", 1)[-1].startswith(("_", "."))]
    if len(named) > 1 or len(texts) != 1:
        found = ", ".join(names) if names else "no files"
        raise ValueError(
            f"{caller}: cannot tell which file of '{zip_path}' holds the pairs; expected a member "
            f"named spa.txt or exactly one .txt file, found: {found}"
        )
    return texts[0]


#: The longest line a data file may have (a pair of sentences takes a few hundred bytes): a file
#: with a longer one is not a file of sentence pairs (a binary file, a damaged or sparse one), and
#: reading it whole could take all the memory.
MAX_LINE_BYTES = 1 << 26
_LINE_END = re.compile(rb"\r\n|\r|\n")
_CHUNK = 1 << 20


def _universal_lines(f: Any, path: Path, caller: str) -> Iterator[bytes]:
    """The lines of the binary file ``f`` without their ends: a line ends with ``\n``, ``\r\n`` or
    ``\r`` (Python's universal newlines, so that a file with old Mac line ends is not one long
    line). Read a chunk at a time; a line longer than :data:`MAX_LINE_BYTES` is a ValueError."""
    rest: List[bytes] = []  # the line in progress, in pieces (each byte is scanned once)
    rest_bytes = 0
    skip_lf = False  # the last chunk ended with \r: a \n that starts the next one ends the same line
    number = 0
    while True:
        data = f.read(_CHUNK)
        eof = not data
        if skip_lf and data[:1] == b"\n":
            data = data[1:]
        skip_lf = False
        if eof:
            if rest_bytes:
                yield b"".join(rest)
            return
        if _LINE_END.search(data) is None:  # the line goes on
            rest.append(data)
            rest_bytes += len(data)
        else:
            skip_lf = data.endswith(b"\r")
            lines = _LINE_END.split(data)
            lines[0] = b"".join(rest) + lines[0]
            last = lines.pop()  # what follows the last line end: a line not finished yet
            rest, rest_bytes = [last], len(last)
            for line in lines:
                number += 1
                yield line
        if rest_bytes > MAX_LINE_BYTES:
            raise ValueError(
                f"{caller}: '{path}' line {number + 1} is longer than {MAX_LINE_BYTES >> 20} MB: this is "
                "not a file of 'English<TAB>Spanish' lines (a binary or damaged file?)"
            )


def _read_lines(path: Path, caller: str) -> Generator[bytes, None, None]:
    """Yield the lines of a .txt file or of the right member of a .zip file, without their line
    ends (``\n``, ``\r\n`` or ``\r``), as bytes."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            member = _pick_zip_member(archive, path, caller)
            with archive.open(member) as f:
                yield from _universal_lines(f, path, caller)
    elif path.suffix.lower() == ".zip":
        raise ValueError(f"{caller}: '{path}' has a .zip name but is not a valid zip archive")
    else:
        with open(path, "rb") as f:
            yield from _universal_lines(f, path, caller)


def _undecodable(
    path: Path, number: int, raw: bytes, encoding: str, exc: UnicodeDecodeError, caller: str
) -> UndecodableLineError:
    bad = raw[exc.start : max(exc.end, exc.start + 1)]
    detail = f"{exc.reason} at byte {exc.start + 1} of the line ({bad!r})"
    if number == 1 and raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        detail += "; the file starts with a UTF-16 byte-order mark: convert it to UTF-8 first"
    return UndecodableLineError(
        f"{caller}: '{path}' line {number} is not valid {encoding}: {detail}. If the file uses another "
        "encoding, name it (encoding='latin-1', say); errors='skip' leaves such lines out instead",
        path,
        number,
        encoding,
        detail,
    )


def _parse(
    path: Path, num_samples: Optional[int], caller: str, encoding: str = "utf-8", errors: str = "strict"
) -> TatoebaPairs:
    stats = LoadStats(encoding=encoding)
    english: List[str] = []
    spanish: List[str] = []
    attributions: List[str] = []
    numbers: List[int] = []
    lines = _read_lines(path, caller)
    try:
        for raw in lines:
            if num_samples is not None and stats.kept >= num_samples:
                break
            stats.read += 1
            try:
                line = raw.decode(encoding)
            except UnicodeDecodeError as exc:
                if errors == "strict":
                    raise _undecodable(path, stats.read, raw, encoding, exc, caller) from None
                stats.undecodable += 1
                stats.undecodable_lines.append(stats.read)
                continue
            if stats.read == 1:
                line = line.lstrip("\ufeff")
            if not line.strip():
                stats.empty += 1
                continue
            if "\t" not in line:
                stats.no_tab += 1
                continue
            fields = line.split("\t")
            en, es = fields[0].strip(), fields[1].strip()
            if not en or not es:
                stats.empty_field += 1
                continue
            english.append(en)
            spanish.append(es)
            attributions.append("\t".join(fields[2:]).strip())
            numbers.append(stats.read)
            stats.kept += 1
    finally:
        lines.close()
    if not english:
        raise ValueError(
            f"{caller}: no valid 'English<TAB>Spanish' line in '{path}' "
            f"(read {stats.read} lines: {stats.describe_skipped()})"
        )
    if stats.skipped:
        logger.info(
            "%s: skipped %d of %d lines in %s (%s)", caller, stats.skipped, stats.read, path, stats.describe_skipped()
        )
    return TatoebaPairs(english, spanish, attributions, stats, path, line_numbers=numbers)


def _check_readable(txt: Path, caller: str) -> None:
    """Raise unless ``txt`` is a file whose first line looks like a pair."""
    try:
        with open(txt, "rb") as f:
            first = f.readline(MAX_LINE_BYTES)
    except OSError as exc:
        raise OSError(f"{caller}: the unpacked data '{txt}' cannot be read: {exc}") from exc
    if b"\t" not in first:
        raise ValueError(f"{caller}: the unpacked data '{txt}' does not look like 'English<TAB>Spanish' lines")


def download_tatoeba(
    cache_dir: Union[str, os.PathLike[str], None] = None,
    *,
    urls: Optional[Sequence[str]] = None,
    timeout: float = 60.0,
) -> Path:
    """Download ``spa-eng.zip`` into the cache and unpack ``spa-eng/spa.txt``; return its path.

    Each URL of ``urls`` (default :data:`TATOEBA_URLS`) is tried in turn. The download goes to
    a temporary file in the cache directory and is renamed into place only once it is a valid
    zip, and ``spa.txt`` is unpacked the same way, so an interrupted download never leaves a
    half-written file behind. The unpacked file is checked to be readable pair lines.

    Args:
        cache_dir: the cache directory (default :func:`default_cache_dir`).
        urls: URLs to try, in order (any scheme ``urllib`` opens, ``file://`` included).
        timeout: seconds to wait for each server.

    Raises:
        OSError: if no URL gave a usable zip (the message lists each URL and its error).
    """
    caller = "download_tatoeba"
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    url_list = list(TATOEBA_URLS if urls is None else urls)
    if not url_list:
        raise ValueError(f"{caller}: no URL to download from")
    cache.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in url_list:
        tmp_zip = None
        try:
            logger.info("%s: downloading %s", caller, url)
            request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
            fd, tmp_name = tempfile.mkstemp(prefix=".spa-eng-", suffix=".zip.part", dir=cache)
            tmp_zip = Path(tmp_name)
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=timeout) as resp:
                shutil.copyfileobj(resp, out)
            if not zipfile.is_zipfile(tmp_zip):
                raise ValueError("the download is not a zip archive")
            zip_path = cache / _CACHED_ZIP
            os.replace(tmp_zip, zip_path)
            tmp_zip = None
            txt = _unpack(zip_path, cache, caller)
            _check_readable(txt, caller)
            logger.info("%s: cached %s", caller, txt)
            return txt
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            logger.warning("%s: %s failed: %s", caller, url, exc)
            errors.append(f"{url}: {exc}")
        finally:
            if tmp_zip is not None and tmp_zip.exists():
                tmp_zip.unlink()
    raise OSError(
        f"{caller}: could not download the Tatoeba data into '{cache}'. Tried: "
        + "; ".join(errors)
        + f". Download spa-eng.zip by hand and pass its path, or set {DATA_ENV_VAR}."
    )


def _unpack(zip_path: Path, cache: Path, caller: str) -> Path:
    """Extract the pairs member of ``zip_path`` to ``cache/spa-eng/spa.txt`` atomically."""
    target = cache / _CACHED_TXT
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path) as archive:
        member = _pick_zip_member(archive, zip_path, caller)
        fd, tmp_name = tempfile.mkstemp(prefix=".spa-", suffix=".txt.part", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as out, archive.open(member) as src:
                shutil.copyfileobj(src, out)
            os.replace(tmp_name, target)
        except BaseException:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)
            raise
    return target


def _not_a_file(path: Path, caller: str, where: str) -> OSError:
    if path.exists():
        kind = "a directory" if path.is_dir() else "not a regular file"
        return IsADirectoryError(f"{caller}: '{path}'{where} is {kind}; expected a .txt or .zip data file")
    return FileNotFoundError(f"{caller}: no such file '{path}'{where}")


def _resolve_path(
    path: Union[str, os.PathLike[str], None],
    cache_dir: Union[str, os.PathLike[str], None],
    download: bool,
    urls: Optional[Sequence[str]],
    caller: str,
) -> Path:
    if path is not None:
        resolved = _path(f"{caller}: path", path)
        if not resolved.is_file():
            raise _not_a_file(resolved, caller, "")
        return resolved
    env = os.environ.get(DATA_ENV_VAR)
    if env:
        resolved = Path(env).expanduser()
        if not resolved.is_file():
            raise _not_a_file(resolved, caller, f" (from ${DATA_ENV_VAR})")
        return resolved
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    cached = cache / _CACHED_TXT
    if cached.is_file():
        return cached
    cached_zip = cache / _CACHED_ZIP
    if zipfile.is_zipfile(cached_zip):  # downloaded before, but not (or no longer) unpacked
        txt = _unpack(cached_zip, cache, caller)
        _check_readable(txt, caller)
        return txt
    if not download:
        raise FileNotFoundError(
            f"{caller}: no such file '{cached}' and download=False; pass a path or set {DATA_ENV_VAR}"
        )
    return download_tatoeba(cache, urls=urls)


def load_tatoeba(
    path: Union[str, os.PathLike[str], None] = None,
    num_samples: Optional[int] = None,
    *,
    sampling: str = "random",
    seed: int = 0,
    cache_dir: Union[str, os.PathLike[str], None] = None,
    download: bool = True,
    urls: Optional[Sequence[str]] = None,
    encoding: str = "utf-8",
    errors: str = "strict",
) -> TatoebaPairs:
    """Load English–Spanish pairs from ``spa.txt`` (a ``.txt`` file or a ``.zip`` holding it).

    Where the data comes from, in order:

    1. ``path``, if given (a ``.txt`` or ``.zip``);
    2. the file named by the environment variable ``TRANSFORMER_CPP_DATA``;
    3. ``spa-eng/spa.txt`` in the cache directory (``cache_dir``, else
       ``$TRANSFORMER_CPP_CACHE``, else ``~/.cache/transformer_cpp``), unpacked again from a
       cached ``spa-eng.zip`` if only that is left;
    4. a download from ``urls`` (default :data:`TATOEBA_URLS`) into that cache, unless
       ``download`` is false.

    In a zip, the member named ``spa.txt`` is read, else the only ``.txt`` file (files whose
    name starts with ``_``, like manythings.org's ``_about.txt``, are ignored). Blank lines,
    lines without a tab and lines with an empty side are skipped and counted in ``.stats``;
    fields are stripped of surrounding whitespace.

    Encoding. The file is read as ``encoding`` (default UTF-8; a byte-order mark on the first
    line is dropped). A line that is not valid in it is an error naming the file, the line and
    the bytes (:class:`UndecodableLineError`): a file in another encoding is refused rather than
    read with whole lines silently missing. Name its encoding (``encoding="latin-1"``), or pass
    ``errors="skip"`` to leave such lines out; they are then counted, with their line numbers,
    in ``.stats``.

    ``spa.txt`` is sorted by sentence length, so "the first N lines" are the N *shortest* pairs.
    ``num_samples`` therefore draws a seeded random sample by default (``sampling="random"``,
    the pairs stay in file order); ``sampling="first"`` keeps the first N valid pairs, as the
    TensorFlow tutorial does.

    Args:
        path: the data file; ``None`` to look it up as above.
        num_samples: how many pairs to keep (``None``: all of them).
        sampling: ``"random"`` (a sample drawn with ``seed``) or ``"first"`` (the first N valid
            pairs; reading stops there).
        seed: seed of the random sample.
        cache_dir: the cache directory for steps 3 and 4.
        download: whether step 4 may happen.
        urls: URLs for step 4.
        encoding: the file's text encoding (see :func:`check_encoding`).
        errors: ``"strict"`` (a line not valid in ``encoding`` is an error) or ``"skip"``.

    Raises:
        FileNotFoundError: if ``path`` (or ``$TRANSFORMER_CPP_DATA``) does not exist.
        UndecodableLineError: a line is not valid in ``encoding`` (with ``errors="strict"``).
        ValueError: if a zip holds no single pairs file, or no valid pair is left, or
            ``num_samples`` is not a positive int, or the encoding is unknown.
        OSError: if the download fails.
    """
    caller = "load_tatoeba"
    seed = _seed(caller, "seed", seed)
    encoding = check_encoding(encoding, caller)
    errors = _choice(caller, "errors", errors, DECODE_ERRORS)
    if num_samples is not None:
        num_samples = _integer(caller, "num_samples", num_samples, 1)
    sampling = _choice(caller, "sampling", sampling, SAMPLING_MODES)
    resolved = _resolve_path(path, cache_dir, download, urls, caller)
    if sampling == "first" or num_samples is None:
        return _parse(resolved, num_samples, caller, encoding, errors)
    pairs = _parse(resolved, None, caller, encoding, errors)
    if num_samples >= len(pairs):
        return pairs
    keep = np.sort(np.random.default_rng(int(seed)).choice(len(pairs), size=num_samples, replace=False))
    pairs.english = [pairs.english[i] for i in keep]
    pairs.spanish = [pairs.spanish[i] for i in keep]
    pairs.attributions = [pairs.attributions[i] for i in keep]
    pairs.line_numbers = [pairs.line_numbers[i] for i in keep]
    return pairs
