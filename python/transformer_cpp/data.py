"""The Tatoeba English–Spanish pairs: loading, splitting, encoding and batching.

The data (``spa-eng.zip`` from manythings.org) holds ``spa.txt``, one pair per line::

    English<TAB>Spanish<TAB>attribution

The sentences come from the Tatoeba project and are licensed CC-BY 2.0 FR; the third column
credits their authors, and :class:`TatoebaPairs` keeps it (see :data:`TATOEBA_LICENSE`).

Pipeline::

    pairs = load_tatoeba(num_samples=80_000)                # download once, then cached
    en = clean_corpus(pairs.english, "en"); es = clean_corpus(pairs.spanish, "es")
    tok_en = SubwordTokenizer.build_from_corpus(en, 2**14)
    tok_es = SubwordTokenizer.build_from_corpus(es, 2**14)
    train, valid, _ = train_val_test_split(len(pairs), valid_fraction=0.1)
    enc = encode_pairs([en[i] for i in train], [es[i] for i in train], tok_en, tok_es, 15)
    for batch in batches(enc, 64, seed=0, epoch=epoch):
        ...  # batch.src, batch.tgt_in, batch.tgt_out
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
from typing import Any, Dict, Generator, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._checks import (
    choice as _choice,
    flag as _flag,
    integer as _integer,
    number as _number,
    path as _path,
    seed as _seed,
)

__all__ = [
    "TATOEBA_URLS",
    "TATOEBA_LICENSE",
    "DATA_ENV_VAR",
    "CACHE_ENV_VAR",
    "LoadStats",
    "TatoebaPairs",
    "UndecodableLineError",
    "check_encoding",
    "check_fractions",
    "load_tatoeba",
    "download_tatoeba",
    "default_cache_dir",
    "SAMPLING_MODES",
    "train_val_test_split",
    "SourceSplit",
    "split_by_source",
    "sentence_key",
    "length_percentiles",
    "length_limit",
    "batch_plan",
    "make_batch",
    "EncodedPairs",
    "encode_pairs",
    "Batch",
    "batches",
    "num_batches",
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
    had none). ``license`` is :data:`TATOEBA_LICENSE`.
    """

    english: List[str]
    spanish: List[str]
    attributions: List[str]
    stats: LoadStats = field(default_factory=LoadStats)
    source: Optional[Path] = None
    license: str = TATOEBA_LICENSE

    def __post_init__(self) -> None:
        if not (len(self.english) == len(self.spanish) == len(self.attributions)):
            raise ValueError(
                f"TatoebaPairs: english ({len(self.english)}), spanish ({len(self.spanish)}) and "
                f"attributions ({len(self.attributions)}) must have the same length"
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
    return TatoebaPairs(english, spanish, attributions, stats, path)


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
    return pairs


# ---------------------------------------------------------------------------- splitting


def train_val_test_split(
    n_or_items: Union[int, Sequence[Any], np.ndarray],
    valid_fraction: float = 0.1,
    test_fraction: float = 0.0,
    seed: int = 0,
) -> Tuple[Any, Any, Any]:
    """Split ``n`` examples at random into train, validation and test parts.

    The split depends only on ``n`` and ``seed``. The validation part has
    ``round(n * valid_fraction)`` examples, the test part ``round(n * test_fraction)``, the
    training part the rest; the three are disjoint and cover everything.

    Args:
        n_or_items: the number of examples, or the examples themselves (a sequence or array).
        valid_fraction: share of examples for validation, in ``[0, 1)``.
        test_fraction: share of examples for testing, in ``[0, 1)``.
        seed: random seed.

    Returns:
        ``(train, valid, test)``: for an int, three sorted ``int64`` index arrays; for an
        array, the rows at those indices; for another sequence, lists of its items.

    Raises:
        ValueError: if a fraction is out of range or the fractions leave no training example.
    """
    caller = "train_val_test_split"
    if isinstance(n_or_items, bool):
        raise TypeError(f"{caller}: expected an int or a sequence, got bool")
    if isinstance(n_or_items, (int, np.integer)):
        n = int(n_or_items)
        if n < 0:
            raise ValueError(f"{caller}: the number of examples must be >= 0, got {n}")
        items = None
    else:
        try:
            n = len(n_or_items)
        except TypeError:
            raise TypeError(
                f"{caller}: expected an int or a sequence with a length, got {type(n_or_items).__name__}"
            ) from None
        items = n_or_items
    check_fractions(valid_fraction, test_fraction, caller)
    seed = _seed(caller, "seed", seed)
    n_valid = int(round(n * float(valid_fraction)))
    n_test = int(round(n * float(test_fraction)))
    if n > 0 and n_valid + n_test >= n:
        raise ValueError(
            f"{caller}: valid_fraction {valid_fraction} and test_fraction {test_fraction} leave no "
            f"training example out of {n}"
        )
    perm = np.random.default_rng(seed).permutation(n).astype(np.int64)  # seed checked above
    test = np.sort(perm[:n_test])
    valid = np.sort(perm[n_test : n_test + n_valid])
    train = np.sort(perm[n_test + n_valid :])
    if items is None:
        return train, valid, test
    if isinstance(items, np.ndarray):
        return items[train], items[valid], items[test]
    return tuple([items[int(i)] for i in part] for part in (train, valid, test))  # type: ignore[return-value]


def check_fractions(valid_fraction: Any, test_fraction: Any, caller: str = "split_by_source") -> Tuple[float, float]:
    """``(valid_fraction, test_fraction)`` as floats if each is a number in [0, 1) and together
    they leave pairs for training (sum < 1); ``ValueError`` otherwise."""
    values = [
        _number(caller, label, value, 0.0, 1.0, high_open=True)
        for label, value in (("valid_fraction", valid_fraction), ("test_fraction", test_fraction))
    ]
    if values[0] + values[1] >= 1.0:
        raise ValueError(
            f"{caller}: valid_fraction {valid_fraction} and test_fraction {test_fraction} add up to "
            "1 or more and leave nothing for training"
        )
    return values[0], values[1]


def sentence_key(text: str) -> str:
    """What makes two sentences "the same" for splitting: case and spacing ignored."""
    return " ".join(text.casefold().split())


@dataclass(eq=False)
class SourceSplit:
    """A split of sentence pairs drawn by source sentence (see :func:`split_by_source`).

    Attributes:
        train, valid, test: sorted ``int64`` indices of the pairs in each part.
        dropped: pairs left out of ``train`` (and ``valid``) because their target sentence is a
            reference of a later part: no reference is ever a training target.
    """

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    dropped: int

    def parts(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.train, self.valid, self.test


def split_by_source(
    sources: Sequence[str],
    targets: Sequence[str],
    valid_fraction: float = 0.05,
    test_fraction: float = 0.05,
    seed: int = 0,
) -> SourceSplit:
    """Split parallel sentences into train, validation and test **by source sentence**.

    Tatoeba gives one English sentence several Spanish translations; a pair-by-pair split puts
    some of them in training and others in the test part, so the test then measures memory.
    Here every distinct source sentence (case and spacing ignored) goes, with all its pairs,
    to exactly one part: the distinct sources are shuffled with ``seed`` and dealt to the test
    part until it holds ``round(n * test_fraction)`` pairs, then to validation, the rest to
    training. Then every training pair whose *target* sentence is also a test or validation
    reference is dropped, and every validation pair whose target is a test reference: no
    reference is ever seen as a training target either.

    Deterministic: the same sentences, fractions and seed give the same split.

    Raises:
        ValueError: if the lists differ in length, a fraction is outside ``[0, 1)``, or nothing
            is left for training.
    """
    caller = "split_by_source"
    if isinstance(sources, str) or isinstance(targets, str):
        raise TypeError(f"{caller}: expected lists of sentences, got a single string")
    sources, targets = list(sources), list(targets)  # any iterables (a generator has no len)
    if len(sources) != len(targets):
        raise ValueError(f"{caller}: {len(sources)} sources but {len(targets)} targets; expected parallel lists")
    check_fractions(valid_fraction, test_fraction, caller)
    seed = _seed(caller, "seed", seed)
    for label, texts in (("source", sources), ("target", targets)):
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"{caller}: {label} {i} is a {type(text).__name__}, expected a str")
    n = len(sources)
    group_of: Dict[str, int] = {}
    groups = np.empty(n, dtype=np.int64)
    for i, text in enumerate(sources):
        groups[i] = group_of.setdefault(sentence_key(text), len(group_of))
    sizes = np.bincount(groups, minlength=len(group_of))
    order = np.random.default_rng(int(seed)).permutation(len(group_of))
    filled = np.cumsum(sizes[order])
    n_test = int(round(n * float(test_fraction)))
    n_valid = int(round(n * float(valid_fraction)))
    # deal whole groups: a group goes to test while test is still short of its share, and so on
    part_of_group = np.full(len(group_of), 2, dtype=np.int64)  # 0 test, 1 valid, 2 train
    before = filled - sizes[order]
    in_test = before < n_test
    test_end = int(filled[in_test][-1]) if in_test.any() else 0  # pairs dealt to test (whole groups)
    part_of_group[order[in_test]] = 0
    part_of_group[order[~in_test & (before < test_end + n_valid)]] = 1
    part = part_of_group[groups]
    target_keys = [sentence_key(t) for t in targets]
    test_refs = {target_keys[i] for i in np.flatnonzero(part == 0)}
    valid_refs = {target_keys[i] for i in np.flatnonzero(part == 1)}
    keep = np.ones(n, dtype=bool)
    for i in range(n):
        key = target_keys[i]
        if (part[i] == 2 and (key in test_refs or key in valid_refs)) or (part[i] == 1 and key in test_refs):
            keep[i] = False
    train = np.flatnonzero((part == 2) & keep).astype(np.int64)
    if n and not len(train):
        raise ValueError(
            f"{caller}: valid_fraction {valid_fraction} and test_fraction {test_fraction} "
            f"leave no training pair out of {n}"
        )
    return SourceSplit(
        train=train,
        valid=np.flatnonzero((part == 1) & keep).astype(np.int64),
        test=np.flatnonzero(part == 0).astype(np.int64),
        dropped=int(n - keep.sum()),
    )


#: Percentiles that :func:`length_percentiles` reports.
LENGTH_PERCENTILES = (50.0, 90.0, 99.0, 99.5, 99.9, 100.0)


def length_percentiles(lengths: Sequence[int], percentiles: Sequence[float] = LENGTH_PERCENTILES) -> Dict[float, int]:
    """``{percentile: length}``: the smallest length that covers that share of ``lengths``."""
    values = np.sort(np.asarray(lengths, dtype=np.int64))
    if not len(values):
        raise ValueError("length_percentiles: no lengths")
    out = {}
    for p in percentiles:
        k = int(np.ceil(len(values) * float(p) / 100.0)) - 1
        out[float(p)] = int(values[min(max(k, 0), len(values) - 1)])
    return out


def length_limit(lengths: Sequence[int], coverage: float = 99.5) -> int:
    """The smallest length that covers ``coverage`` percent of ``lengths``."""
    if not 0.0 < float(coverage) <= 100.0:
        raise ValueError(f"length_limit: coverage must be in (0, 100], got {coverage!r}")
    return length_percentiles(lengths, (float(coverage),))[float(coverage)]


# ---------------------------------------------------------------------------- encoding


@dataclass(eq=False)
class EncodedPairs:
    """Sentence pairs as padded token ids, ready for :func:`batches`.

    Attributes:
        src: ``(N, S)`` int64 source ids, ``[start, ..., end, 0, 0, ...]``; S is the longest kept
            source.
        tgt: ``(N, T)`` int64 target ids, same layout.
        src_lengths: ``(N,)`` int64 number of non-padding source tokens per pair.
        tgt_lengths: ``(N,)`` int64 number of non-padding target tokens per pair.
        indices: ``(N,)`` int64 position of each kept pair in the input lists.
        removed: how many input pairs were dropped for being longer than ``max_length``.
        max_length: the limit used (``None`` for none).
    """

    src: np.ndarray
    tgt: np.ndarray
    src_lengths: np.ndarray
    tgt_lengths: np.ndarray
    indices: np.ndarray
    removed: int
    max_length: Optional[int]

    def __len__(self) -> int:
        return int(self.src.shape[0])


def _pad(rows: List[List[int]]) -> np.ndarray:
    """Stack id lists into a zero-padded (len(rows), longest) int64 array."""
    width = max(len(r) for r in rows)
    out = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def encode_pairs(
    src_sentences: Sequence[str],
    tgt_sentences: Sequence[str],
    src_tokenizer: Any,
    tgt_tokenizer: Any,
    max_length: Optional[int],
) -> EncodedPairs:
    """Encode sentence pairs with start/end tokens, drop pairs that are too long, pad with 0.

    A pair is removed when either side has more than ``max_length`` tokens, start and end
    included (the tutorial's filter); ``None`` keeps every pair. Each side is padded with id 0
    after its end token up to the longest kept sentence of that side.

    Args:
        src_sentences, tgt_sentences: parallel lists of sentences.
        src_tokenizer, tgt_tokenizer: :class:`~transformer_cpp.tokenizer.SubwordTokenizer` (or any
            object with ``encode_batch(texts, add_special_tokens=True)`` and ``pad_id == 0``).
        max_length: the longest sequence kept, in tokens, or ``None``.

    Raises:
        ValueError: if the lists differ in length or are empty, ``max_length < 2``, a tokenizer's
            padding id is not 0, or every pair is too long.
    """
    caller = "encode_pairs"
    if isinstance(src_sentences, str) or isinstance(tgt_sentences, str):
        raise TypeError(f"{caller}: expected lists of sentences, got a single string")
    src_list, tgt_list = list(src_sentences), list(tgt_sentences)
    if len(src_list) != len(tgt_list):
        raise ValueError(
            f"{caller}: {len(src_list)} source sentences but {len(tgt_list)} target sentences; expected parallel lists"
        )
    if not src_list:
        raise ValueError(f"{caller}: no sentence pairs to encode")
    if max_length is not None:
        max_length = _integer(caller, "max_length", max_length, 2)  # the start and end tokens
    for label, tok in (("src_tokenizer", src_tokenizer), ("tgt_tokenizer", tgt_tokenizer)):
        if getattr(tok, "pad_id", 0) != 0:
            raise ValueError(f"{caller}: {label}.pad_id is {tok.pad_id}; padding must be id 0")

    src_ids = src_tokenizer.encode_batch(src_list, add_special_tokens=True)
    tgt_ids = tgt_tokenizer.encode_batch(tgt_list, add_special_tokens=True)
    keep = [
        i
        for i, (s, t) in enumerate(zip(src_ids, tgt_ids))
        if max_length is None or (len(s) <= max_length and len(t) <= max_length)
    ]
    removed = len(src_list) - len(keep)
    if not keep:
        raise ValueError(f"{caller}: all {len(src_list)} pairs are longer than max_length={max_length} tokens")
    src_kept = [src_ids[i] for i in keep]
    tgt_kept = [tgt_ids[i] for i in keep]
    if removed:
        logger.info("%s: removed %d of %d pairs longer than %s tokens", caller, removed, len(src_list), max_length)
    return EncodedPairs(
        src=_pad(src_kept),
        tgt=_pad(tgt_kept),
        src_lengths=np.array([len(s) for s in src_kept], dtype=np.int64),
        tgt_lengths=np.array([len(t) for t in tgt_kept], dtype=np.int64),
        indices=np.array(keep, dtype=np.int64),
        removed=removed,
        max_length=max_length,
    )


# ---------------------------------------------------------------------------- batching


@dataclass(frozen=True, eq=False)
class Batch:
    """One training batch (teacher forcing), all C-contiguous int64.

    Attributes:
        src: ``(B, S)`` source ids, trimmed to the longest source in the batch.
        tgt_in: ``(B, T-1)`` decoder input, ``tgt[:, :-1]`` (starts with the start id).
        tgt_out: ``(B, T-1)`` labels, ``tgt[:, 1:]`` (ends with the end id, then padding).
        indices: ``(B,)`` rows of the :class:`EncodedPairs` in this batch.
    """

    src: np.ndarray
    tgt_in: np.ndarray
    tgt_out: np.ndarray
    indices: np.ndarray

    def __len__(self) -> int:
        return int(self.src.shape[0])

    @property
    def num_target_tokens(self) -> int:
        """Number of non-padding labels (what the loss averages over)."""
        return int(np.count_nonzero(self.tgt_out))


def num_batches(encoded_or_n: Union[EncodedPairs, int], batch_size: int, *, drop_remainder: bool = False) -> int:
    """Number of batches :func:`batches` yields for ``encoded_or_n`` examples (sentence batches)."""
    batch_size = _integer("num_batches", "batch_size", batch_size, 1)
    n = len(encoded_or_n) if isinstance(encoded_or_n, EncodedPairs) else int(encoded_or_n)
    if n < 0:
        raise ValueError(f"num_batches: the number of examples must be >= 0, got {n}")
    return n // batch_size if drop_remainder else -(-n // batch_size)


def batch_plan(
    encoded: EncodedPairs,
    batch_size: int = 64,
    *,
    max_tokens: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    bucket_by_length: bool = False,
    drop_remainder: bool = False,
    bucket_pool: int = 50,
) -> List[np.ndarray]:
    """The rows of ``encoded`` in each batch of one epoch, in training order (see :func:`batches`)."""
    caller = "batches"
    if not isinstance(encoded, EncodedPairs):
        raise TypeError(f"{caller}: expected EncodedPairs (from encode_pairs), got {type(encoded).__name__}")
    batch_size = _integer(caller, "batch_size", batch_size, 1)
    max_tokens = _integer(caller, "max_tokens", max_tokens, 0)  # 0: batches of batch_size pairs
    bucket_pool = _integer(caller, "bucket_pool", bucket_pool, 1)
    shuffle = _flag(caller, "shuffle", shuffle)
    bucket_by_length = _flag(caller, "bucket_by_length", bucket_by_length)
    drop_remainder = _flag(caller, "drop_remainder", drop_remainder)
    for name, value in (("bucket_by_length", bucket_by_length), ("drop_remainder", drop_remainder)):
        if max_tokens and value:  # it would be ignored, not applied
            raise ValueError(
                f"{caller}: {name} applies to batches of batch_size pairs; with max_tokens {max_tokens} "
                f"the batches are cut by tokens (and sorted by length): set max_tokens=0 or {name}=False"
            )
    seed, epoch = _seed(caller, "seed", seed), _seed(caller, "epoch", epoch)
    n = len(encoded)
    rng = np.random.default_rng([seed, epoch]) if shuffle else None
    order = rng.permutation(n) if rng is not None else np.arange(n)
    lengths = np.maximum(encoded.src_lengths, encoded.tgt_lengths)
    if max_tokens:
        # token budget: sort by length (ties in this epoch's random order), cut greedily so that
        # rows * longest row <= max_tokens, then shuffle the batches
        order = order[np.argsort(lengths[order], kind="stable")]
        plan: List[np.ndarray] = []
        start, longest = 0, 0
        for pos in range(n):
            length = int(lengths[order[pos]])
            if pos > start and (pos - start + 1) * max(longest, length) > max_tokens:
                plan.append(order[start:pos])
                start, longest = pos, 0
            longest = max(longest, length)
        if n > start:
            plan.append(order[start:n])
        if rng is not None:
            plan = [plan[i] for i in rng.permutation(len(plan))]
        return plan
    if bucket_by_length:
        pool = bucket_pool * batch_size
        pieces = []
        for start in range(0, n, pool):
            chunk = order[start : start + pool]
            pieces.append(chunk[np.argsort(lengths[chunk], kind="stable")])
        order = np.concatenate(pieces) if pieces else order
    starts = list(range(0, n, batch_size))
    if drop_remainder and n % batch_size:
        starts = starts[:-1]
    if bucket_by_length and rng is not None:
        starts = [starts[i] for i in rng.permutation(len(starts))]
    return [order[start : start + batch_size] for start in starts]


def batches(
    encoded: EncodedPairs,
    batch_size: int = 64,
    *,
    max_tokens: int = 0,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    bucket_by_length: bool = False,
    drop_remainder: bool = False,
    bucket_pool: int = 50,
) -> Iterator[Batch]:
    """Yield :class:`Batch` es over ``encoded``; each example appears once per epoch.

    Order: with ``shuffle``, the examples are permuted by a generator seeded with
    ``(seed, epoch)``, so a given epoch is reproducible and different epochs differ. With
    ``bucket_by_length``, the order is then cut into pools of ``bucket_pool * batch_size``
    examples, each pool is sorted by length (longer of source and target, stable), the result is
    cut into batches, and the batches are shuffled (when ``shuffle``), so that a batch holds
    sentences of similar length and carries little padding. Without ``drop_remainder`` the
    last batch may be smaller; with it, that batch is dropped.

    With ``max_tokens > 0`` batches are sized by tokens instead of pairs: the examples are
    sorted by length (ties in the epoch's random order) and cut so that each batch's padded
    size, ``pairs * longest (source or target)``, stays within ``max_tokens`` (a single longer
    pair makes a batch of its own); the batches are then shuffled. ``batch_size`` does not apply;
    ``bucket_by_length`` and ``drop_remainder`` are refused (ValueError).

    Each batch is trimmed to its longest source and target, so it has no all-padding column.
    """
    for idx in batch_plan(
        encoded,
        batch_size,
        max_tokens=max_tokens,
        shuffle=shuffle,
        seed=seed,
        epoch=epoch,
        bucket_by_length=bucket_by_length,
        drop_remainder=drop_remainder,
        bucket_pool=bucket_pool,
    ):
        yield make_batch(encoded, idx)


def make_batch(encoded: EncodedPairs, idx: np.ndarray) -> Batch:
    """The :class:`Batch` of rows ``idx`` of ``encoded``, trimmed to its longest source and target."""
    s_len = int(encoded.src_lengths[idx].max())
    t_len = int(encoded.tgt_lengths[idx].max())
    src = np.ascontiguousarray(encoded.src[idx, :s_len], dtype=np.int64)
    tgt = encoded.tgt[idx, :t_len]
    return Batch(
        src=src,
        tgt_in=np.ascontiguousarray(tgt[:, :-1], dtype=np.int64),
        tgt_out=np.ascontiguousarray(tgt[:, 1:], dtype=np.int64),
        indices=np.ascontiguousarray(idx, dtype=np.int64),
    )
