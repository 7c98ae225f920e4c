"""Reading sentence pairs: tab-separated files (the Tatoeba files of manythings.org among them),
two aligned text files, and the Tatoeba pairs by name (downloaded into a cache by :mod:`.download`).

What :func:`read_pairs` reads (a *data spec*, :func:`parse_data_spec`):

* a tab-separated file, ``.txt``/``.tsv`` or a ``.zip`` holding one: one pair a line,
  ``column<TAB>column[<TAB>...]``; which columns are the source and the target is the reader's
  ``columns`` (1-based; :func:`choose_columns` picks them by language or by number). The Tatoeba
  files (``spa.txt``, ``fra-eng.zip``, ...) are ``English<TAB>other language<TAB>attribution``;
* two aligned plain-text files, one sentence a line, written ``"train.es,train.en"`` (source file,
  comma, target file): line *n* of one is the translation of line *n* of the other, and files
  with different numbers of lines are refused, naming the first line that has no counterpart;
* ``"tatoeba:LLL-eng"``: the Tatoeba pair of manythings.org (``tatoeba:fra-eng``), downloaded
  once into the cache.

Without a spec: ``$TRANSFORMER_CPP_DATA`` (a spec too: how an offline machine points at a local
copy), else the named pair in the cache, else its download.

The Tatoeba sentences are licensed CC-BY 2.0 FR (:data:`TATOEBA_LICENSE`); the third column of
their files credits their authors, and :class:`SentencePairs` keeps it.
"""

from __future__ import annotations

import codecs
import logging
import os
import re
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._checks import (
    choice as _choice,
    integer as _integer,
    path as _path,
    seed as _seed,
)
from ..text import clean_sentence, language_code, language_iso3, language_name
from .download import (
    CACHE_ENV_VAR,
    DEFAULT_TATOEBA_PAIR,
    TATOEBA_LICENSE,
    TATOEBA_URLS,
    archive_sha256,
    cached_tatoeba,
    check_tatoeba_pair,
    default_cache_dir,
    download_tatoeba,
    pick_zip_member,
)

__all__ = [
    "CACHE_ENV_VAR",
    "DATA_ENV_VAR",
    "DECODE_ERRORS",
    "DataSpec",
    "LineCountMismatch",
    "LoadStats",
    "MAX_LINE_BYTES",
    "SAMPLING_MODES",
    "SentencePairs",
    "TATOEBA_LICENSE",
    "TATOEBA_URLS",
    "TatoebaPairs",
    "UndecodableLineError",
    "check_encoding",
    "choose_columns",
    "default_cache_dir",
    "download_tatoeba",
    "file_languages",
    "load_tatoeba",
    "parse_data_spec",
    "read_pairs",
    "resolve_data",
    "tatoeba_pair_for",
]

logger = logging.getLogger(__name__)

#: Environment variable naming the data to use when none is given (any data spec: a file, two
#: aligned files, a named pair), before the cache.
DATA_ENV_VAR = "TRANSFORMER_CPP_DATA"
#: How :func:`read_pairs` picks ``num_samples`` pairs: a seeded random sample, or the first N.
SAMPLING_MODES = ("random", "first")


# ---------------------------------------------------------------------------- loading


@dataclass
class LoadStats:
    """What :func:`read_pairs` saw in the file.

    Attributes:
        read: lines read (stops early once ``num_samples`` pairs are kept).
        kept: pairs kept.
        empty: blank lines (only whitespace).
        no_tab: non-blank lines without a tab (in a tab-separated file).
        missing_column: lines with a tab but fewer columns than the source and target need.
        empty_field: lines whose source or target is blank.
        undecodable: lines that are not valid in the file's encoding (only with ``errors="skip"``;
            by default such a line is an error).
        undecodable_lines: their line numbers (1-based).
        encoding: the encoding the file was read with.
    """

    read: int = 0
    kept: int = 0
    empty: int = 0
    no_tab: int = 0
    missing_column: int = 0
    empty_field: int = 0
    undecodable: int = 0
    undecodable_lines: List[int] = field(default_factory=list)
    encoding: str = "utf-8"

    @property
    def skipped(self) -> int:
        """Lines read but not kept."""
        return self.empty + self.no_tab + self.missing_column + self.empty_field + self.undecodable

    def describe_skipped(self) -> str:
        """``"3 empty, 1 without a tab, 0 with an empty side, 2 not valid utf-8"`` (and the lines
        with too few columns, when there are any)."""
        short = f"{self.missing_column} with too few columns, " if self.missing_column else ""
        return (
            f"{self.empty} empty, {self.no_tab} without a tab, {short}{self.empty_field} with an empty side, "
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
class SentencePairs:
    """Sentence pairs, source and target, with the attribution column of each line.

    ``pairs[i]`` is ``(source, target)``; ``len(pairs)`` the number of pairs. Iterating yields
    the same tuples. ``attributions[i]`` is what follows the source and target columns of the
    line ("" if nothing did; empty when read with ``attributions=False``). ``columns`` are the
    1-based columns the sources and targets were read from (``None`` for two aligned files),
    ``license`` the licence of the data when it is known (:data:`TATOEBA_LICENSE` for a Tatoeba
    file), ``about`` the path of the archive's ``_about.txt`` (authors, licence) when there is
    one, ``sha256`` the checksum of the downloaded archive when the pairs come from the cache.

    ``line_numbers[i]`` is the number of pair ``i``'s line in the file (1-based; empty when the
    pairs did not come from a file), so that a pair can be named to the user by its line.

    ``english`` and ``spanish`` are the names of ``sources`` and ``targets`` from when only
    English-to-Spanish was read; they still work, with a ``DeprecationWarning``.
    """

    sources: List[str]
    targets: List[str]
    attributions: List[str]
    stats: LoadStats = field(default_factory=LoadStats)
    source: Optional[Path] = None
    license: Optional[str] = TATOEBA_LICENSE
    columns: Optional[Tuple[int, int]] = (1, 2)
    target_file: Optional[Path] = None
    about: Optional[Path] = None
    sha256: Optional[str] = None
    line_numbers: List[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if (
            len(self.sources) != len(self.targets)
            or (self.attributions and len(self.attributions) != len(self.sources))
            or (self.line_numbers and len(self.line_numbers) != len(self.sources))
        ):
            raise ValueError(
                f"SentencePairs: sources ({len(self.sources)}), targets ({len(self.targets)}), "
                f"attributions ({len(self.attributions)}, or none) and line_numbers ({len(self.line_numbers)}, "
                "or none) must have the same length"
            )

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, index: Union[int, slice]) -> Any:
        if isinstance(index, slice):
            return list(zip(self.sources[index], self.targets[index]))
        return self.sources[index], self.targets[index]

    def __iter__(self) -> Iterator[Tuple[str, str]]:
        return iter(zip(self.sources, self.targets))

    def __repr__(self) -> str:
        return f"SentencePairs({len(self)} pairs, source={str(self.source)!r})"

    @property
    def english(self) -> List[str]:
        """Deprecated name of :attr:`sources`."""
        warnings.warn("SentencePairs.english is deprecated: use .sources", DeprecationWarning, stacklevel=2)
        return self.sources

    @property
    def spanish(self) -> List[str]:
        """Deprecated name of :attr:`targets`."""
        warnings.warn("SentencePairs.spanish is deprecated: use .targets", DeprecationWarning, stacklevel=2)
        return self.targets


#: Deprecated name of :class:`SentencePairs`.
TatoebaPairs = SentencePairs


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
                "not a file of sentence pairs (a binary or damaged file?)"
            )


def _read_lines(path: Path, caller: str, preferred: Sequence[str] = ()) -> Generator[bytes, None, None]:
    """Yield the lines of a text file or of the pairs member of a .zip file, without their line
    ends (``\\n``, ``\\r\\n`` or ``\\r``), as bytes."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            member = pick_zip_member(archive, path, caller, preferred)
            with archive.open(member) as f:
                yield from _universal_lines(f, path, caller)
    elif path.suffix.lower() == ".zip":
        raise ValueError(f"{caller}: '{path}' has a .zip name but is not a valid zip archive")
    else:
        with open(path, "rb") as f:
            yield from _universal_lines(f, path, caller)


# ---------------------------------------------------------------------------- data specs


@dataclass(frozen=True)
class DataSpec:
    """Where sentence pairs come from (see the module docstring): ``kind`` ``"file"`` (a
    tab-separated file or a zip holding one), ``"aligned"`` (``path`` the source sentences,
    ``target_path`` the target ones) or ``"tatoeba"`` (``pair`` such as ``"fra-eng"``; ``path``
    the cached pairs file once it is resolved)."""

    kind: str
    path: Optional[Path] = None
    target_path: Optional[Path] = None
    pair: Optional[str] = None

    def __str__(self) -> str:
        if self.kind == "aligned":
            return f"{self.path},{self.target_path}"
        if self.kind == "tatoeba" and self.path is None:
            return f"tatoeba:{self.pair}"
        return str(self.path)


def parse_data_spec(data: Union[str, "os.PathLike[str]", DataSpec], caller: str = "parse_data_spec") -> DataSpec:
    """The :class:`DataSpec` that ``data`` names: ``"tatoeba:fra-eng"``, ``"train.es,train.en"``
    (two aligned files; a name that is itself an existing file is that file) or a file. Nothing
    is checked on disk but which comma splits two existing files."""
    if isinstance(data, DataSpec):
        return data
    if not isinstance(data, str):
        return DataSpec("file", _path(f"{caller}: path", data))
    if data.startswith("tatoeba:"):
        return DataSpec("tatoeba", pair=check_tatoeba_pair(data[len("tatoeba:") :], caller))
    if "," in data and not Path(data).expanduser().exists():
        cuts = [i for i, ch in enumerate(data) if ch == "," and 0 < i < len(data) - 1]
        existing = [
            i for i in cuts if Path(data[:i]).expanduser().is_file() and Path(data[i + 1 :]).expanduser().is_file()
        ]
        if len(existing) == 1 or (not existing and len(cuts) == 1):
            i = (existing or cuts)[0]
            return DataSpec(
                "aligned", _path(f"{caller}: source file", data[:i]), _path(f"{caller}: target file", data[i + 1 :])
            )
        if not cuts:
            raise ValueError(
                f"{caller}: {data!r} is neither a file nor two files 'SOURCE,TARGET' (a name is missing around the comma)"
            )
    return DataSpec("file", _path(f"{caller}: path", data))


def _not_a_file(path: Path, caller: str, where: str) -> OSError:
    if path.exists():
        kind = "a directory" if path.is_dir() else "not a regular file"
        return IsADirectoryError(f"{caller}: '{path}'{where} is {kind}; expected a .txt or .zip data file")
    return FileNotFoundError(f"{caller}: no such file '{path}'{where}")


def resolve_data(
    data: Union[str, "os.PathLike[str]", DataSpec, None] = None,
    *,
    pair: str = DEFAULT_TATOEBA_PAIR,
    cache_dir: Union[str, "os.PathLike[str]", None] = None,
    download: bool = True,
    urls: Optional[Sequence[str]] = None,
    caller: str = "resolve_data",
) -> DataSpec:
    """The data to read, with its files found: ``data`` if given, else ``$TRANSFORMER_CPP_DATA``,
    else the named ``pair`` in the cache, else its download (unless ``download`` is false).

    Raises:
        FileNotFoundError / IsADirectoryError: a file that is not there, naming it (and the
            variable it came from).
        OSError: the download failed.
    """
    where = ""
    if data is None:
        env = os.environ.get(DATA_ENV_VAR)
        if env:
            data, where = env, f" (from ${DATA_ENV_VAR})"
        else:
            data = DataSpec("tatoeba", pair=check_tatoeba_pair(pair, caller))
    spec = parse_data_spec(data, caller)
    if spec.kind == "tatoeba":
        if spec.path is not None:
            return spec
        assert spec.pair is not None
        cached = cached_tatoeba(spec.pair, cache_dir, download=download, urls=urls, caller=caller)
        return DataSpec("tatoeba", path=cached, pair=spec.pair)
    for label, given in (("", spec.path), (" (target file)", spec.target_path)):
        if given is not None and not given.expanduser().is_file():
            raise _not_a_file(given.expanduser(), caller, where + (label if spec.kind == "aligned" else ""))
    return DataSpec(
        spec.kind, spec.path.expanduser() if spec.path else None, spec.target_path and spec.target_path.expanduser()
    )


def _tatoeba_code(name: str) -> Optional[str]:
    """The language of a Tatoeba file name's ISO 639-3 code, when the table knows the code."""
    try:
        code = language_code(name, "file_languages")
    except ValueError:
        return None
    return code if code != name else None


def file_languages(spec: Union[DataSpec, str, "os.PathLike[str]"]) -> Optional[Tuple[str, str]]:
    """The languages of the first two columns of a Tatoeba file, ``("en", other)``, when ``spec``
    is one: a named pair, or a file named as manythings.org names them (``spa.txt``,
    ``fra-eng.zip``, or ``LLL.txt`` in a folder ``LLL-eng``); None for any other file."""
    spec = parse_data_spec(spec) if not isinstance(spec, DataSpec) else spec
    if spec.kind == "aligned" or (spec.kind == "file" and spec.path is None):
        return None
    if spec.pair is not None:
        lang = spec.pair.split("-")[0]
        return "en", language_code(lang, "file_languages")
    assert spec.path is not None
    name, folder = spec.path.name.lower(), spec.path.parent.name.lower()
    m = re.fullmatch(r"([a-z]{3})\.txt", name) or re.fullmatch(r"([a-z]{3})-eng\.zip", name)
    if m is None or m.group(1) == "eng":
        return None
    if folder == f"{m.group(1)}-eng" and name.endswith(".txt"):
        return "en", language_code(m.group(1), "file_languages")
    code = _tatoeba_code(m.group(1))
    return ("en", code) if code is not None else None


def tatoeba_pair_for(source_lang: str, target_lang: str) -> Optional[str]:
    """The Tatoeba pair that holds ``source_lang`` and ``target_lang`` (``("es", "en")`` ->
    ``"spa-eng"``), or None when neither is English or the other is not in the language table."""
    src, tgt = language_code(source_lang, "tatoeba_pair_for"), language_code(target_lang, "tatoeba_pair_for")
    other = tgt if src == "en" else src if tgt == "en" else None
    if other is None or other == "en":
        return None
    iso3 = language_iso3(other)
    return f"{iso3}-eng" if iso3 is not None else None


ColumnsOption = Union[None, str, Sequence[Union[int, str]]]


def _column_items(columns: ColumnsOption, caller: str) -> List[Union[int, str]]:
    items: List[Any] = columns.split(",") if isinstance(columns, str) else list(columns or [])
    out: List[Union[int, str]] = []
    for item in items:
        if isinstance(item, str) and item.strip().isdigit():
            out.append(int(item.strip()))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            out.append(int(item))
        elif isinstance(item, str) and item.strip():
            out.append(language_code(item, caller))
        else:
            raise ValueError(f"{caller}: columns must be column numbers or language codes, got {columns!r}")
    return out


def choose_columns(
    columns: ColumnsOption,
    source_lang: str,
    target_lang: str,
    file_langs: Optional[Sequence[str]] = None,
    *,
    what: str = "the data",
    caller: str = "choose_columns",
) -> Tuple[int, int]:
    """The 1-based (source, target) columns of a tab-separated file.

    ``columns`` is either two column numbers, source then target (``"2,1"`` or ``(2, 1)``), or the
    languages of the file's columns in their order (``"en,es"``), from which ``source_lang`` and
    ``target_lang`` pick. Without it, the languages of a Tatoeba file (``file_langs``, see
    :func:`file_languages`) pick the same way, and any other file is ``source<TAB>target``: (1, 2).

    Raises:
        ValueError: numbers that are not two different columns >= 1, a language listed twice, or
            a source or target language that is not among the file's languages (the message names
            them and how to say otherwise).
    """
    src, tgt = language_code(source_lang, caller), language_code(target_lang, caller)
    if src == tgt:
        raise ValueError(f"{caller}: the source and target languages are both {src!r}; they must differ")
    items = _column_items(columns, caller)
    numbers = [i for i in items if isinstance(i, int)]
    if items and len(numbers) == len(items):
        if len(numbers) != 2 or numbers[0] == numbers[1] or min(numbers) < 1:
            raise ValueError(
                f"{caller}: column numbers must be two different columns >= 1, source then target "
                f"(such as 2,1), got {columns!r}"
            )
        return numbers[0], numbers[1]
    if numbers:
        raise ValueError(
            f"{caller}: columns must be two column numbers (2,1) or the languages of the file's columns (en,es), "
            f"not both, got {columns!r}"
        )
    langs = [str(i) for i in items] or [language_code(x, caller) for x in (file_langs or [])]
    if not langs:
        return 1, 2
    if len(set(langs)) != len(langs):
        raise ValueError(f"{caller}: a language is named twice in the columns {', '.join(langs)}")
    missing = [lang for lang in (src, tgt) if lang not in langs]
    if missing:
        said = "the columns are said to hold" if items else "is a Tatoeba file of"
        raise ValueError(
            f"{caller}: {what} {said} {' and '.join(f'{language_name(x)} ({x})' for x in langs)}; it has no "
            f"{' or '.join(f'{language_name(x)} ({x})' for x in missing)} column. Choose languages among "
            f"{', '.join(langs)}, other data, or the columns by number (source,target such as 2,1)"
        )
    return langs.index(src) + 1, langs.index(tgt) + 1


# ---------------------------------------------------------------------------- reading


class LineCountMismatch(ValueError):
    """Two aligned files do not have the same number of lines. Attributes: ``line`` (1-based,
    the first line of the longer file without a counterpart), ``longer``, ``shorter`` (paths)."""

    def __init__(self, message: str, line: int, longer: Path, shorter: Path) -> None:
        super().__init__(message)
        self.line, self.longer, self.shorter = line, longer, shorter


def _decoded(
    raws: Iterator[Tuple[bytes, ...]], path: Path, encoding: str, errors: str, stats: LoadStats, caller: str
) -> Iterator[Optional[Tuple[str, ...]]]:
    """Each tuple of raw lines decoded (None for an undecodable one with ``errors="skip"``)."""
    for raw in raws:
        stats.read += 1
        try:
            lines = tuple(r.decode(encoding) for r in raw)
        except UnicodeDecodeError as exc:
            if errors == "strict":
                bad = next(r for r in raw if _fails(r, encoding))
                raise _undecodable(path, stats.read, bad, encoding, _error_of(bad, encoding), caller) from None
            stats.undecodable += 1
            stats.undecodable_lines.append(stats.read)
            del exc
            yield None
            continue
        if stats.read == 1:
            lines = tuple(x.lstrip("\ufeff") for x in lines)
        yield lines


_END = ("",)  # the end of the lines


def _fails(raw: bytes, encoding: str) -> bool:
    try:
        raw.decode(encoding)
    except UnicodeDecodeError:
        return True
    return False


def _error_of(raw: bytes, encoding: str) -> UnicodeDecodeError:
    try:
        raw.decode(encoding)
    except UnicodeDecodeError as exc:
        return exc
    raise AssertionError("decodes")  # pragma: no cover


def _aligned_lines(spec: DataSpec, caller: str) -> Iterator[Tuple[bytes, bytes]]:
    """The lines of two aligned files side by side; LineCountMismatch at the first line that one
    file has and the other does not."""
    assert spec.path is not None and spec.target_path is not None
    first, second = _read_lines(spec.path, caller), _read_lines(spec.target_path, caller)
    number = 0
    try:
        while True:
            a, b = next(first, None), next(second, None)
            if a is None and b is None:
                return
            number += 1
            if a is None or b is None:
                longer, shorter = (spec.path, spec.target_path) if b is None else (spec.target_path, spec.path)
                raise LineCountMismatch(
                    f"{caller}: the aligned files differ in length: line {number} of '{longer}' has no counterpart, "
                    f"'{shorter}' has only {number - 1:,} lines. Each line of one must be the translation of the "
                    "same line of the other",
                    number,
                    longer,
                    shorter,
                )
            yield a, b
    finally:
        first.close()
        second.close()


def _parse(
    spec: DataSpec,
    num_samples: Optional[int],
    columns: Optional[Tuple[int, int]],
    clean: Optional[Tuple[str, str]],
    keep_attributions: bool,
    caller: str,
    encoding: str = "utf-8",
    errors: str = "strict",
) -> SentencePairs:
    assert spec.path is not None
    stats = LoadStats(encoding=encoding)
    sources: List[str] = []
    targets: List[str] = []
    attributions: List[str] = []
    numbers: List[int] = []
    aligned = spec.kind == "aligned"
    src_col, tgt_col = (0, 1) if aligned or columns is None else (columns[0] - 1, columns[1] - 1)
    needed = max(src_col, tgt_col) + 1
    clean_src: Callable[[str], str] = (lambda t: clean_sentence(t, clean[0])) if clean else str.strip
    clean_tgt: Callable[[str], str] = (lambda t: clean_sentence(t, clean[1])) if clean else str.strip
    preferred = [f"{spec.pair.split('-')[0]}.txt"] if spec.pair else []
    if not preferred and spec.path.name.lower().endswith("-eng.zip"):
        preferred = [spec.path.name.lower()[: -len("-eng.zip")] + ".txt"]
    raws: Iterator[Tuple[bytes, ...]] = (
        _aligned_lines(spec, caller) if aligned else ((line,) for line in _read_lines(spec.path, caller, preferred))
    )
    decoded = _decoded(raws, spec.path, encoding, errors, stats, caller)
    try:
        while num_samples is None or stats.kept < num_samples:  # reading stops there
            lines = next(decoded, _END)
            if lines is _END:
                break
            if lines is None:
                continue
            if aligned:
                fields = list(lines)
                if not fields[0].strip() and not fields[1].strip():
                    stats.empty += 1
                    continue
            else:
                line = lines[0]
                if not line.strip():
                    stats.empty += 1
                    continue
                if "\t" not in line:
                    stats.no_tab += 1
                    continue
                fields = line.split("\t")
                if len(fields) < needed:
                    stats.missing_column += 1
                    continue
            src, tgt = fields[src_col], fields[tgt_col]
            if not src.strip() or not tgt.strip():
                stats.empty_field += 1
                continue
            sources.append(clean_src(src))
            targets.append(clean_tgt(tgt))
            if keep_attributions and not aligned:
                attributions.append("\t".join(f for i, f in enumerate(fields) if i not in (src_col, tgt_col)).strip())
            numbers.append(stats.read)
            stats.kept += 1
    finally:
        decoded.close()  # type: ignore[attr-defined]
        if hasattr(raws, "close"):
            raws.close()
    if not sources:
        shape = "lines in both files" if aligned else f"line with {needed} tab-separated columns"
        raise ValueError(
            f"{caller}: no valid sentence pair ({shape}) in '{spec}' (read {stats.read} lines: {stats.describe_skipped()})"
        )
    if stats.skipped:
        logger.info(
            "%s: skipped %d of %d lines in %s (%s)", caller, stats.skipped, stats.read, spec, stats.describe_skipped()
        )
    tatoeba = spec.pair is not None or file_languages(spec) is not None
    about = spec.path.parent / "_about.txt" if tatoeba else None
    return SentencePairs(
        sources,
        targets,
        attributions if keep_attributions and not aligned else [],
        stats,
        spec.path,
        license=TATOEBA_LICENSE if tatoeba else None,
        columns=None if aligned else (src_col + 1, tgt_col + 1),
        target_file=spec.target_path,
        about=about if about is not None and about.is_file() else None,
        sha256=archive_sha256(spec.path) if spec.kind == "tatoeba" else None,
        line_numbers=numbers,
    )


def read_pairs(
    data: Union[str, "os.PathLike[str]", DataSpec, None] = None,
    num_samples: Optional[int] = None,
    *,
    columns: ColumnsOption = None,
    languages: Optional[Tuple[str, str]] = None,
    clean: bool = False,
    sampling: str = "random",
    seed: int = 0,
    pair: str = DEFAULT_TATOEBA_PAIR,
    cache_dir: Union[str, "os.PathLike[str]", None] = None,
    download: bool = True,
    urls: Optional[Sequence[str]] = None,
    encoding: str = "utf-8",
    errors: str = "strict",
    attributions: bool = True,
) -> SentencePairs:
    """Read sentence pairs: a tab-separated file, two aligned files or a named Tatoeba pair (see
    the module docstring; without ``data``: ``$TRANSFORMER_CPP_DATA``, else ``pair`` from the
    cache, else its download).

    Columns. ``columns`` chooses the source and target columns of a tab-separated file, by number
    or by the languages of the file's columns (:func:`choose_columns`, which ``languages``, the
    source and target languages, pick from); a Tatoeba file's columns are known (English first).
    Without ``languages``: the numbers given, or (1, 2). Two aligned files have no columns.

    Reading streams the file: a line is decoded, split and (with ``clean``, in each side's
    language, :func:`~transformer_cpp.text.clean_sentence`) cleaned as it is read, so the raw text
    is never held in memory as a whole. Blank lines, lines with too few columns and lines with an
    empty side are skipped and counted in ``.stats``; sides are stripped of surrounding whitespace.

    Encoding. The file is read as ``encoding`` (default UTF-8; a byte-order mark on the first
    line is dropped). A line that is not valid in it is an error naming the file, the line and
    the bytes (:class:`UndecodableLineError`), or with ``errors="skip"`` left out and counted,
    with its line number, in ``.stats``.

    Sampling. ``num_samples`` draws a seeded random sample by default (``sampling="random"``,
    the pairs stay in file order); ``sampling="first"`` keeps the first N valid pairs (a Tatoeba
    file is sorted by length: the N shortest).

    Args:
        data: the data spec, a path, or None.
        num_samples: how many pairs to keep (None: all).
        columns: the source and target columns, as :func:`choose_columns` takes them.
        languages: ``(source language, target language)``, for choosing columns by language and
            for cleaning.
        clean: clean each sentence in its language as it is read (needs ``languages``).
        sampling, seed: how ``num_samples`` pairs are chosen.
        pair: the Tatoeba pair used when no data is given.
        cache_dir, download, urls: the cache, whether a download may happen, and from where.
        encoding, errors: the text encoding, and what an undecodable line does.
        attributions: keep what follows the source and target columns of each line.

    Raises:
        FileNotFoundError: a file that does not exist.
        UndecodableLineError: a line is not valid in ``encoding`` (with ``errors="strict"``).
        LineCountMismatch: two aligned files of different lengths.
        ValueError: no valid pair, a bad argument, or columns that do not fit the data.
        OSError: the download failed.
    """
    caller = "read_pairs"
    seed = _seed(caller, "seed", seed)
    encoding = check_encoding(encoding, caller)
    errors = _choice(caller, "errors", errors, DECODE_ERRORS)
    if num_samples is not None:
        num_samples = _integer(caller, "num_samples", num_samples, 1)
    sampling = _choice(caller, "sampling", sampling, SAMPLING_MODES)
    if clean and languages is None:
        raise ValueError(f"{caller}: clean=True needs languages=(source language, target language)")
    spec = resolve_data(data, pair=pair, cache_dir=cache_dir, download=download, urls=urls, caller=caller)
    return _read(spec, num_samples, columns, languages, clean, sampling, seed, encoding, errors, attributions, caller)


def _read(
    spec: DataSpec,
    num_samples: Optional[int],
    columns: ColumnsOption,
    languages: Optional[Tuple[str, str]],
    clean: bool,
    sampling: str,
    seed: int,
    encoding: str,
    errors: str,
    attributions: bool,
    caller: str,
) -> SentencePairs:
    if spec.kind == "aligned":
        if columns is not None:
            raise ValueError(f"{caller}: columns are for a tab-separated file; '{spec}' is two aligned files")
        chosen = None
    elif languages is not None:
        chosen = choose_columns(
            columns, languages[0], languages[1], file_languages(spec), what=f"'{spec.path}'", caller=caller
        )
    else:
        chosen = choose_columns(columns, "en", "es", None, caller=caller) if columns is not None else (1, 2)
    cleaning = (
        (language_code(languages[0], caller), language_code(languages[1], caller)) if clean and languages else None
    )
    if sampling == "first" or num_samples is None:
        return _parse(spec, num_samples, chosen, cleaning, attributions, caller, encoding, errors)
    pairs = _parse(spec, None, chosen, cleaning, attributions, caller, encoding, errors)
    if num_samples >= len(pairs):
        return pairs
    keep = np.sort(np.random.default_rng(int(seed)).choice(len(pairs), size=num_samples, replace=False))
    pairs.sources = [pairs.sources[i] for i in keep]
    pairs.targets = [pairs.targets[i] for i in keep]
    if pairs.attributions:
        pairs.attributions = [pairs.attributions[i] for i in keep]
    pairs.line_numbers = [pairs.line_numbers[i] for i in keep]
    return pairs


def load_tatoeba(
    path: Union[str, "os.PathLike[str]", None] = None,
    num_samples: Optional[int] = None,
    *,
    sampling: str = "random",
    seed: int = 0,
    cache_dir: Union[str, "os.PathLike[str]", None] = None,
    download: bool = True,
    urls: Optional[Sequence[str]] = None,
    encoding: str = "utf-8",
    errors: str = "strict",
    pair: str = DEFAULT_TATOEBA_PAIR,
    columns: ColumnsOption = None,
) -> SentencePairs:
    """Load sentence pairs as :func:`read_pairs` does, by default the Tatoeba English-Spanish
    pairs (``spa.txt``): ``path`` if given (any data spec), else ``$TRANSFORMER_CPP_DATA``, else
    ``pair`` (default ``"spa-eng"``) in the cache (``cache_dir``, else ``$TRANSFORMER_CPP_CACHE``,
    else ``~/.cache/transformer_cpp``), unpacked again from a cached archive if only that is left,
    else downloaded from ``urls`` (default :func:`~transformer_cpp.data.download.tatoeba_urls`)
    unless ``download`` is false.

    The sources are the first column and the targets the second unless ``columns`` says otherwise
    (two numbers, source then target). In a zip, the member named like the pair (``spa.txt``) is
    read, else the only ``.txt`` file (files whose name starts with ``_``, like manythings.org's
    ``_about.txt``, are ignored). Encoding, skipped lines and sampling: see :func:`read_pairs`.

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
    spec = resolve_data(path, pair=pair, cache_dir=cache_dir, download=download, urls=urls, caller=caller)
    return _read(spec, num_samples, columns, None, False, sampling, seed, encoding, errors, True, caller)


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
