"""Reading the lines of a data file: line ends of any kind, a pairs member of a zip archive
(damaged archives and decompression bombs refused), decoding with the file and line named when a
line is not valid, and two aligned files read side by side."""

from __future__ import annotations

import codecs
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generator, Iterator, List, Optional, Sequence, Tuple

from .archive import ARCHIVE_ERRORS, open_pairs_member

__all__ = [
    "DECODE_ERRORS",
    "LineCountMismatch",
    "LoadStats",
    "MAX_LINE_BYTES",
    "UndecodableLineError",
    "check_encoding",
]


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


#: The longest line a data file may have (a pair of sentences takes a few hundred bytes, an aligned
#: paragraph a few kilobytes): a file
#: with a longer one is not a file of sentence pairs (a binary file, a damaged or sparse one), and
#: reading it whole could take all the memory.
MAX_LINE_BYTES = 1 << 22
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
    ends (``\\n``, ``\\r\\n`` or ``\\r``), as bytes. A damaged archive (a bad CRC, a broken
    stream) or one that expands beyond the caps of :mod:`.archive` is a ValueError naming it."""
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive, open_pairs_member(archive, path, caller, preferred) as f:
                yield from _universal_lines(f, path, caller)
        except ARCHIVE_ERRORS as exc:
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise ValueError(
                f"{caller}: '{path}' is a damaged zip archive ({detail}); expected an intact .zip holding one "
                ".txt or .tsv pairs file"
            ) from None
    elif path.suffix.lower() == ".zip":
        raise ValueError(f"{caller}: '{path}' has a .zip name but is not a valid zip archive")
    else:
        with open(path, "rb") as f:
            yield from _universal_lines(f, path, caller)


class LineCountMismatch(ValueError):
    """Two aligned files do not have the same number of lines. Attributes: ``line`` (1-based,
    the first line of the longer file without a counterpart), ``longer``, ``shorter`` (paths)."""

    def __init__(self, message: str, line: int, longer: Path, shorter: Path) -> None:
        super().__init__(message)
        self.line, self.longer, self.shorter = line, longer, shorter


def _decoded(
    raws: Iterator[Tuple[bytes, ...]],
    paths: Sequence[Path],
    encoding: str,
    errors: str,
    stats: LoadStats,
    caller: str,
) -> Iterator[Optional[Tuple[str, ...]]]:
    """Each tuple of raw lines decoded (None for an undecodable one with ``errors="skip"``);
    ``paths[i]`` is the file of the tuples' item ``i``, named when it is the undecodable one."""
    for raw in raws:
        stats.read += 1
        try:
            lines = tuple(r.decode(encoding) for r in raw)
        except UnicodeDecodeError as exc:
            if errors == "strict":
                which = next(i for i, r in enumerate(raw) if _fails(r, encoding))
                bad = raw[which]
                raise _undecodable(paths[which], stats.read, bad, encoding, _error_of(bad, encoding), caller) from None
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


def _aligned_lines(source: Path, target: Path, caller: str) -> Iterator[Tuple[bytes, bytes]]:
    """The lines of two aligned files side by side; LineCountMismatch at the first line that one
    file has and the other does not."""
    first, second = _read_lines(source, caller), _read_lines(target, caller)
    number = 0
    try:
        while True:
            a, b = next(first, None), next(second, None)
            if a is None and b is None:
                return
            number += 1
            if a is None or b is None:
                longer, shorter = (source, target) if b is None else (target, source)
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
