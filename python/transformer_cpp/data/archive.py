"""Zip archives of sentence pairs: which member holds the pairs, and whether an archive is intact.

:func:`check_archive` is what a downloaded or cached Tatoeba archive must pass before it is
trusted: every member's CRC, a cap on what it unpacks to (:data:`MAX_UNPACKED_BYTES`) and on its
compression ratio (:data:`MAX_COMPRESSION_RATIO`), the pairs member named as the pair says
(``fra.txt`` for ``fra-eng``), and that member tab-separated UTF-8 text (:func:`check_pairs_stream`:
an HTML page saved under the name is refused). :func:`open_pairs_member` opens the pairs member
of any zip for reading, under the same caps.
"""

from __future__ import annotations

import codecs
import re
import zipfile
import zlib
from pathlib import Path
from typing import IO, Any, List, Sequence, Tuple, Type

__all__ = [
    "ARCHIVE_ERRORS",
    "MAX_COMPRESSION_RATIO",
    "MAX_UNPACKED_BYTES",
    "check_archive",
    "check_pairs_file",
    "check_pairs_stream",
    "members",
    "open_pairs_member",
    "pick_zip_member",
]

#: The most an archive may unpack to, all members together (the largest Tatoeba file is a few
#: hundred MB less than this).
MAX_UNPACKED_BYTES = 1 << 30
#: The most a member larger than :data:`RATIO_FLOOR_BYTES` may expand (text compresses about 4x;
#: a member that expands more is a decompression bomb).
MAX_COMPRESSION_RATIO = 50
#: Members up to this size are not held to :data:`MAX_COMPRESSION_RATIO`.
RATIO_FLOOR_BYTES = 8 << 20
#: What reading a damaged zip archive raises.
ARCHIVE_ERRORS: Tuple[Type[Exception], ...] = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    NotImplementedError,
    RuntimeError,
)
#: At most this share of the non-blank lines of a pairs file may lack a tab.
_MAX_NO_TAB_SHARE = 0.1
_TEXT_SUFFIXES = (".txt", ".tsv")
_CHUNK = 1 << 20


def members(archive: zipfile.ZipFile) -> List[str]:
    """The file members of ``archive`` (no folders, no ``__MACOSX/`` resource forks)."""
    return [n for n in archive.namelist() if not n.endswith("/") and not n.startswith("__MACOSX/")]


def pick_zip_member(archive: zipfile.ZipFile, zip_path: Path, caller: str, preferred: Sequence[str] = ()) -> str:
    """The member of ``archive`` that holds the pairs: the one named like ``preferred``
    (``"fra.txt"``; default ``spa.txt``), else the only ``.txt`` or ``.tsv`` file (files whose
    name starts with ``_``, like ``_about.txt``, or ``.`` do not count); ``ValueError`` when that
    is not one file."""
    names = members(archive)
    for wanted in [*preferred, "spa.txt"]:
        named = [n for n in names if n.rsplit("/", 1)[-1] == wanted]
        if len(named) == 1:
            return named[0]
        if len(named) > 1:
            break
    texts = [n for n in names if n.lower().endswith(_TEXT_SUFFIXES) and not n.rsplit("/", 1)[-1].startswith(("_", "."))]
    if len(texts) != 1:
        found = ", ".join(names) if names else "no files"
        want = " or ".join([*preferred, "spa.txt"])
        raise ValueError(
            f"{caller}: cannot tell which file of '{zip_path}' holds the pairs; expected a member "
            f"named {want} or exactly one .txt or .tsv file, found: {found}"
        )
    other = re.fullmatch(r"([a-z]{3})\.txt", texts[0].rsplit("/", 1)[-1])
    if preferred and other is not None and f"{other.group(1)}.txt" not in preferred:
        raise ValueError(
            f"{caller}: '{zip_path}' holds {texts[0]}, the Tatoeba pairs of another language, not "
            f"{' or '.join(preferred)}; give the archive of the pair wanted, or a file of another name"
        )
    return texts[0]


def _check_sizes(info: zipfile.ZipInfo, where: str, caller: str) -> None:
    if info.file_size > MAX_UNPACKED_BYTES:
        raise ValueError(
            f"{caller}: '{where}' member {info.filename} unpacks to {info.file_size:,} bytes; at most "
            f"{MAX_UNPACKED_BYTES:,} are allowed"
        )
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > RATIO_FLOOR_BYTES and ratio > MAX_COMPRESSION_RATIO:
        raise ValueError(
            f"{caller}: '{where}' member {info.filename} is compressed {ratio:,.0f} to 1 ({info.compress_size:,} "
            f"bytes unpack to {info.file_size:,}); at most {MAX_COMPRESSION_RATIO} to 1 is allowed (a "
            "decompression bomb?)"
        )


def open_pairs_member(archive: zipfile.ZipFile, path: Path, caller: str, preferred: Sequence[str] = ()) -> IO[bytes]:
    """The pairs member of ``archive`` (:func:`pick_zip_member`) opened for reading, once its
    size and compression ratio are within the caps."""
    name = pick_zip_member(archive, path, caller, preferred)
    _check_sizes(archive.getinfo(name), str(path), caller)
    return archive.open(name)


class _PairsCheck:
    """Fed a file's bytes in order: is it UTF-8, tab-separated lines?"""

    def __init__(self, where: str, caller: str) -> None:
        self.where, self.caller = where, caller
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.rest = b""
        self.lines = self.no_tab = self.with_tab = 0

    def _refuse(self, what: str) -> ValueError:
        return ValueError(
            f"{self.caller}: '{self.where}' is not a file of sentence pairs ({what}); expected UTF-8 lines "
            "'English<TAB>other language<TAB>attribution'"
        )

    def feed(self, data: bytes, final: bool = False) -> None:
        try:
            self.decoder.decode(data, final)
        except UnicodeDecodeError as exc:
            raise self._refuse(f"not valid UTF-8: {exc.reason}") from None
        lines = (self.rest + data).split(b"\n")
        self.rest = b"" if final else lines.pop()
        for line in lines:
            if not line.strip():
                continue
            self.lines += 1
            if b"\t" in line:
                self.with_tab += 1
            else:
                self.no_tab += 1
                if self.with_tab == 0:
                    shown = line[:60].decode("utf-8", "replace")
                    raise self._refuse(f"its first line {shown!r} has no tab")

    def finish(self) -> None:
        self.feed(b"", final=True)
        if self.with_tab == 0:
            raise self._refuse("no line with a tab")
        if self.no_tab > _MAX_NO_TAB_SHARE * self.lines:
            raise self._refuse(f"{self.no_tab:,} of its {self.lines:,} lines have no tab")


def check_pairs_stream(f: IO[bytes], where: str, caller: str) -> int:
    """Read ``f`` to its end and refuse it (``ValueError`` naming ``where``) unless it is UTF-8
    text whose first line and at least 90% of its lines hold a tab; returns its CRC-32."""
    check = _PairsCheck(where, caller)
    crc = 0
    for block in iter(lambda: f.read(_CHUNK), b""):
        check.feed(block)
        crc = zlib.crc32(block, crc)
    check.finish()
    return crc


def check_pairs_file(path: Path, caller: str) -> None:
    """:func:`check_pairs_stream` on a file."""
    with open(path, "rb") as f:
        check_pairs_stream(f, str(path), caller)


def check_archive(path: Path, wanted: str, caller: str, where: str = "") -> zipfile.ZipInfo:
    """Refuse ``path`` (``ValueError``, one line naming ``where``, default the path) unless it is
    an intact zip archive (every member read and its CRC checked, the caps on size and ratio
    kept) whose pairs member is named ``wanted`` (``"fra.txt"``, in any folder) and holds
    sentence pairs; returns the pairs member's entry."""
    where = where or str(path)
    try:
        with zipfile.ZipFile(path) as archive:
            infos = [i for i in archive.infolist() if not i.is_dir() and not i.filename.startswith("__MACOSX/")]
            total = sum(i.file_size for i in infos)
            if total > MAX_UNPACKED_BYTES:
                raise ValueError(
                    f"{caller}: '{where}' unpacks to {total:,} bytes; at most {MAX_UNPACKED_BYTES:,} are allowed"
                )
            named = [i for i in infos if i.filename.rsplit("/", 1)[-1] == wanted]
            if len(named) != 1:
                found = ", ".join(i.filename for i in infos) or "no files"
                raise ValueError(f"{caller}: '{where}' must hold exactly one pairs file named {wanted}, found: {found}")
            for info in infos:
                _check_sizes(info, where, caller)
                with archive.open(info) as member:
                    if info is named[0]:
                        check_pairs_stream(member, f"{where}: {info.filename}", caller)
                    else:
                        for _ in iter(lambda: member.read(_CHUNK), b""):
                            pass
            return named[0]
    except ARCHIVE_ERRORS as exc:
        raise ValueError(f"{caller}: '{where}' is not an intact zip archive ({_one_line(exc)})") from None


def _one_line(exc: Any) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
