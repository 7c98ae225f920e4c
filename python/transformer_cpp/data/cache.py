"""The verified cache of the Tatoeba pairs: what an entry is, when it is trusted, and how one is
put in place or taken out.

An entry of ``pair`` (``fra-eng``) in the cache directory is::

    fra-eng.zip          the archive as downloaded
    fra-eng.zip.sha256   its SHA-256 ("<hex>  fra-eng.zip")
    fra-eng/fra.txt      the pairs member, unpacked
    fra-eng/_about.txt   the archive's notes, when it has them

An entry is trusted only when its archive has the recorded checksum and passes
:func:`~.archive.check_archive` (every member's CRC, the caps, the pairs member named for the
pair and tab-separated), and its unpacked file has the member's size and CRC (else it is unpacked
again). A pairs file without an archive (put there by hand) is trusted when it reads as pairs.
An entry that fails is removed whole (:func:`remove_entry`) and the pair fetched again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Optional, Tuple, Union

from .archive import check_archive, check_pairs_file

__all__ = [
    "EntryPaths",
    "archive_sha256",
    "entry_paths",
    "entry_problem",
    "file_sha256",
    "install_entry",
    "recorded_sha256",
    "remove_entry",
    "require_free_space",
    "unpack_entry",
    "write_atomically",
]

logger = logging.getLogger(__name__)

_PAIR_NAME = re.compile(r"([a-z]{3})-([a-z]{3})")
#: Kept free on the cache's disk beyond what a download or an unpacked file needs.
FREE_SPACE_MARGIN = 64 << 20

EntryPaths = Tuple[Path, Path, Path, Path]


def entry_paths(cache: Path, pair: str) -> EntryPaths:
    """(archive, checksum record, pairs file, about file) of ``pair`` in ``cache``."""
    lang = pair.split("-")[0]
    return (
        cache / f"{pair}.zip",
        cache / f"{pair}.zip.sha256",
        cache / pair / f"{lang}.txt",
        cache / pair / "_about.txt",
    )


def file_sha256(path: Union[str, "os.PathLike[str]"]) -> str:
    """The SHA-256 of a file, in hex, read a block at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _file_crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            crc = zlib.crc32(block, crc)
    return crc


def recorded_sha256(record: Path) -> Optional[str]:
    """The checksum a record holds, or None (no record, or not one)."""
    try:
        text = record.read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):
        return None
    return text[0].lower() if text and re.fullmatch(r"[0-9a-fA-F]{64}", text[0]) else None


def archive_sha256(pairs_file: Path) -> Optional[str]:
    """The recorded SHA-256 of the archive a cached pairs file (``<cache>/<pair>/<lang>.txt``) was
    unpacked from, or None when it is not such a file."""
    pair = pairs_file.parent.name
    if _PAIR_NAME.fullmatch(pair) is None:
        return None
    return recorded_sha256(pairs_file.parent.parent / f"{pair}.zip.sha256")


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path`` and rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def require_free_space(directory: Path, needed: int, what: str, caller: str) -> None:
    """``OSError`` unless ``directory``'s disk has ``needed`` bytes free (and a margin)."""
    free = shutil.disk_usage(directory).free
    if needed + FREE_SPACE_MARGIN > free:
        raise OSError(
            f"{caller}: {what} needs {needed:,} bytes but '{directory}' has only {free:,} free (at least "
            f"{FREE_SPACE_MARGIN:,} must stay free); free some space or set TRANSFORMER_CPP_CACHE elsewhere"
        )


def _extract(archive: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.stem}-", suffix=".txt.part", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as out, archive.open(info) as src:
            shutil.copyfileobj(src, out, 1 << 20)
        os.replace(tmp_name, dest)
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise


def unpack_entry(zip_path: Path, member: zipfile.ZipInfo, paths: EntryPaths, caller: str) -> Path:
    """Extract the checked archive's pairs ``member`` (and its ``_about.txt``) into place, each
    through a temporary file; returns the pairs file."""
    _, _, target, about = paths
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path) as archive:
        abouts = [i for i in archive.infolist() if i.filename.rsplit("/", 1)[-1] == "_about.txt"]
        wanted = [(member, target)] + ([(abouts[0], about)] if len(abouts) == 1 else [])
        require_free_space(target.parent, sum(i.file_size for i, _ in wanted), f"unpacking '{zip_path}'", caller)
        for info, dest in wanted:
            _extract(archive, info, dest)
    return target


def install_entry(part: Path, digest: str, member: zipfile.ZipInfo, paths: EntryPaths, caller: str) -> Path:
    """Put a checked download (``part``, SHA-256 ``digest``) in place as the entry: the old entry
    out, the pairs unpacked, then the archive renamed and, last, its record written."""
    zip_path, record, _, _ = paths
    remove_entry(paths)
    try:
        txt = unpack_entry(part, member, paths, caller)
        os.replace(part, zip_path)
        write_atomically(record, f"{digest}  {zip_path.name}\n".encode("ascii"))
    except BaseException:
        remove_entry(paths)  # no half-installed entry
        raise
    return txt


def remove_entry(paths: EntryPaths) -> None:
    """Remove an entry's files (and its folder when nothing else is in it)."""
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    try:
        paths[2].parent.rmdir()
    except OSError:
        pass


def entry_problem(paths: EntryPaths, caller: str) -> Tuple[Optional[str], Optional[zipfile.ZipInfo]]:
    """What is wrong with the cached archive of an entry (None when nothing), and its checked
    pairs member. An archive without a record (an older cache) is recorded once it passes."""
    zip_path, record, txt, _ = paths
    recorded, actual = recorded_sha256(record), file_sha256(zip_path)
    if recorded is not None and recorded != actual:
        return f"'{zip_path}' has SHA-256 {actual}, not the {recorded} recorded when it was downloaded", None
    try:
        member = check_archive(zip_path, txt.name, caller)
    except ValueError as exc:
        return str(exc).split(": ", 1)[-1], None
    if recorded is None:
        write_atomically(record, f"{actual}  {zip_path.name}\n".encode("ascii"))
    return None, member


def trusted_pairs_file(paths: EntryPaths, member: zipfile.ZipInfo, caller: str) -> Path:
    """The entry's pairs file, unpacked again from its (checked) archive unless it has the
    member's size and CRC."""
    zip_path, _, txt, _ = paths
    if txt.is_file() and txt.stat().st_size == member.file_size and _file_crc(txt) == member.CRC:
        return txt
    return unpack_entry(zip_path, member, paths, caller)


def loose_pairs_problem(txt: Path, caller: str) -> Optional[str]:
    """What is wrong with a cached pairs file that has no archive (None when it reads as pairs)."""
    try:
        check_pairs_file(txt, caller)
    except (OSError, ValueError) as exc:
        return str(exc).split(": ", 1)[-1]
    return None
