"""The Tatoeba sentence pairs by name: the archives of manythings.org (``fra-eng.zip``,
``spa-eng.zip``, ... about 80 languages, each paired with English), downloaded once into a cache.

A named pair is ``"LLL-eng"`` (``LLL`` the ISO 639-3 code of the other language, as manythings.org
names its files). The cache (:func:`default_cache_dir`) holds, for each pair::

    fra-eng.zip          the archive as downloaded
    fra-eng.zip.sha256   its SHA-256, recorded when it was downloaded ("<hex>  fra-eng.zip")
    fra-eng/fra.txt      the pairs, unpacked: English<TAB>French<TAB>attribution
    fra-eng/_about.txt   the archive's own notes: where the sentences come from, their licence

A download streams into a temporary ``.part`` file beside the archive, with a progress bar on a
terminal, and is renamed into place only once it is complete: its length is the one the server
announced, its checksum the one asked for (when one is), and it is a zip archive holding a pairs
file. An interrupted or refused download therefore never leaves a file that a later run trusts;
the next run downloads again from the start. A cached archive whose checksum no longer matches
the recorded one is not used.

Where the archives come from: ``$TRANSFORMER_CPP_TATOEBA_URL`` (a base URL such as
``http://127.0.0.1:8000/``, for a mirror or a test server), else :data:`DEFAULT_TATOEBA_BASE_URL`;
the file is ``<base><pair>.zip``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

__all__ = [
    "CACHE_ENV_VAR",
    "DEFAULT_TATOEBA_BASE_URL",
    "DEFAULT_TATOEBA_PAIR",
    "TATOEBA_LICENSE",
    "TATOEBA_URLS",
    "TATOEBA_URL_ENV_VAR",
    "cached_tatoeba",
    "check_tatoeba_pair",
    "default_cache_dir",
    "download_tatoeba",
    "file_sha256",
    "tatoeba_urls",
]

logger = logging.getLogger(__name__)

#: Licence of the Tatoeba sentence pairs; show it wherever the data is redistributed or published.
TATOEBA_LICENSE = (
    "Sentence pairs from the Tatoeba Project (https://tatoeba.org), selected by ManyThings.org "
    "(https://www.manythings.org/anki/). Licensed under Creative Commons Attribution 2.0 France "
    "(CC-BY 2.0 FR, https://creativecommons.org/licenses/by/2.0/fr/). Each pair's third column "
    "(SentencePairs.attributions) credits the sentences' authors; the archive's _about.txt says more."
)

#: The pair used when none is named: English and Spanish.
DEFAULT_TATOEBA_PAIR = "spa-eng"
#: Where the archives are downloaded from: ``<base><pair>.zip``.
DEFAULT_TATOEBA_BASE_URL = "https://www.manythings.org/anki/"
#: Environment variable that replaces :data:`DEFAULT_TATOEBA_BASE_URL` (a mirror, a test server).
TATOEBA_URL_ENV_VAR = "TRANSFORMER_CPP_TATOEBA_URL"
#: Environment variable naming the cache directory (default ``~/.cache/transformer_cpp``).
CACHE_ENV_VAR = "TRANSFORMER_CPP_CACHE"
#: Where ``spa-eng.zip`` is downloaded from, tried in order (without ``$TRANSFORMER_CPP_TATOEBA_URL``).
#: The second is a mirror whose zip holds ``spa-eng/spa.txt``.
TATOEBA_URLS: Tuple[str, ...] = (
    DEFAULT_TATOEBA_BASE_URL + "spa-eng.zip",
    "https://storage.googleapis.com/download.tensorflow.org/data/spa-eng.zip",
)

_PAIR_NAME = re.compile(r"([a-z]{3})-([a-z]{3})")
_USER_AGENT = "transformer-cpp data loader (Python urllib)"
_DOWNLOAD_CHUNK = 1 << 16


def default_cache_dir() -> Path:
    """Return the cache directory: ``$TRANSFORMER_CPP_CACHE`` or ``~/.cache/transformer_cpp``."""
    env = os.environ.get(CACHE_ENV_VAR)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "transformer_cpp"


def check_tatoeba_pair(pair: Any, caller: str = "check_tatoeba_pair") -> str:
    """``pair`` if it names a Tatoeba pair as manythings.org does (``"fra-eng"``: two ISO 639-3
    codes, the second ``eng``); ``ValueError`` otherwise."""
    if not isinstance(pair, str) or _PAIR_NAME.fullmatch(pair) is None or not pair.endswith("-eng"):
        raise ValueError(
            f"{caller}: {pair!r} is not a Tatoeba pair name; expected 'LLL-eng' with LLL the ISO 639-3 code "
            "of the other language, as manythings.org names its files ('fra-eng', 'deu-eng', 'jpn-eng')"
        )
    return pair


def tatoeba_urls(pair: str = DEFAULT_TATOEBA_PAIR) -> List[str]:
    """The URLs :func:`download_tatoeba` tries for ``pair``: ``<base><pair>.zip`` with the base
    from ``$TRANSFORMER_CPP_TATOEBA_URL`` or :data:`DEFAULT_TATOEBA_BASE_URL` (and, for
    ``spa-eng`` without the variable, :data:`TATOEBA_URLS`' mirror)."""
    pair = check_tatoeba_pair(pair, "tatoeba_urls")
    base = os.environ.get(TATOEBA_URL_ENV_VAR)
    if not base:
        return list(TATOEBA_URLS) if pair == "spa-eng" else [f"{DEFAULT_TATOEBA_BASE_URL}{pair}.zip"]
    return [base if base.endswith(".zip") else base.rstrip("/") + f"/{pair}.zip"]


def _members(archive: zipfile.ZipFile) -> List[str]:
    return [n for n in archive.namelist() if not n.endswith("/") and not n.startswith("__MACOSX/")]


def pick_zip_member(archive: zipfile.ZipFile, zip_path: Path, caller: str, preferred: Sequence[str] = ()) -> str:
    """The member of ``archive`` that holds the pairs: the one named like ``preferred``
    (``"fra.txt"``; default ``spa.txt``), else the only ``.txt`` file (files whose name starts with
    ``_``, like ``_about.txt``, or ``.`` do not count); ``ValueError`` when that is not one file."""
    names = _members(archive)
    for wanted in [*preferred, "spa.txt"]:
        named = [n for n in names if n.rsplit("/", 1)[-1] == wanted]
        if len(named) == 1:
            return named[0]
        if len(named) > 1:
            break
    texts = [n for n in names if n.lower().endswith(".txt") and not n.rsplit("/", 1)[-1].startswith(("_", "."))]
    if len(texts) != 1:
        found = ", ".join(names) if names else "no files"
        want = " or ".join([*preferred, "spa.txt"])
        raise ValueError(
            f"{caller}: cannot tell which file of '{zip_path}' holds the pairs; expected a member "
            f"named {want} or exactly one .txt file, found: {found}"
        )
    return texts[0]


def file_sha256(path: Union[str, os.PathLike[str]]) -> str:
    """The SHA-256 of a file, in hex, read a block at a time."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _paths(cache: Path, pair: str) -> Tuple[Path, Path, Path, Path]:
    """(archive, checksum record, pairs file, about file) of ``pair`` in ``cache``."""
    lang = pair.split("-")[0]
    return (
        cache / f"{pair}.zip",
        cache / f"{pair}.zip.sha256",
        cache / pair / f"{lang}.txt",
        cache / pair / "_about.txt",
    )


def _recorded_sha256(record: Path) -> Optional[str]:
    try:
        text = record.read_text(encoding="ascii").split()
    except (OSError, UnicodeDecodeError):
        return None
    return text[0].lower() if text and re.fullmatch(r"[0-9a-fA-F]{64}", text[0]) else None


def _write_atomically(path: Path, data: bytes) -> None:
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


def _check_readable(txt: Path, caller: str) -> None:
    """Raise unless ``txt`` is a file whose first line looks like a pair."""
    try:
        with open(txt, "rb") as f:
            first = f.readline(1 << 20)
    except OSError as exc:
        raise OSError(f"{caller}: the unpacked data '{txt}' cannot be read: {exc}") from exc
    if b"\t" not in first:
        raise ValueError(f"{caller}: the unpacked data '{txt}' does not look like tab-separated sentence pairs")


def _unpack(zip_path: Path, cache: Path, pair: str, caller: str) -> Path:
    """Extract the pairs member of ``zip_path`` (and ``_about.txt``) into ``cache/<pair>/``, each
    written under a temporary name and renamed; returns the pairs file."""
    _, _, target, about = _paths(cache, pair)
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(zip_path) as archive:
        member = pick_zip_member(archive, zip_path, caller, [target.name])
        abouts = [n for n in _members(archive) if n.rsplit("/", 1)[-1] == "_about.txt"]
        for name, dest in [(member, target)] + ([(abouts[0], about)] if len(abouts) == 1 else []):
            fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.stem}-", suffix=".txt.part", dir=dest.parent)
            try:
                with os.fdopen(fd, "wb") as out, archive.open(name) as src:
                    shutil.copyfileobj(src, out)
                os.replace(tmp_name, dest)
            except BaseException:
                if os.path.exists(tmp_name):
                    os.unlink(tmp_name)
                raise
    _check_readable(target, caller)
    return target


def _progress_bar(total: Optional[int], label: str, progress: Optional[bool]) -> Any:
    """A tqdm byte bar on standard error (``progress`` None: only on a terminal), or None."""
    if progress is False or (progress is None and not sys.stderr.isatty()):
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=label, file=sys.stderr, leave=False)


def _fetch(url: str, part: Path, timeout: float, progress: Optional[bool]) -> str:
    """Stream ``url`` into ``part``; return its SHA-256. A body shorter than the announced length
    is an error (the connection broke)."""
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    h = hashlib.sha256()
    got = 0
    with open(part, "wb") as out, urllib.request.urlopen(request, timeout=timeout) as resp:
        length = resp.headers.get("Content-Length") if hasattr(resp, "headers") else None
        total = int(length) if length and length.isdigit() else None
        bar = _progress_bar(total, url.rsplit("/", 1)[-1], progress)
        try:
            while True:
                block = resp.read(_DOWNLOAD_CHUNK)
                if not block:
                    break
                out.write(block)
                h.update(block)
                got += len(block)
                if bar is not None:
                    bar.update(len(block))
        finally:
            if bar is not None:
                bar.close()
        out.flush()
        os.fsync(out.fileno())
    if total is not None and got != total:
        raise OSError(f"the download stopped after {got:,} of {total:,} bytes")
    return h.hexdigest()


def download_tatoeba(
    cache_dir: Union[str, os.PathLike[str], None] = None,
    *,
    pair: str = DEFAULT_TATOEBA_PAIR,
    urls: Optional[Sequence[str]] = None,
    timeout: float = 60.0,
    sha256: Optional[str] = None,
    progress: Optional[bool] = None,
) -> Path:
    """Download ``pair``'s archive (``spa-eng.zip`` by default) into the cache, record its
    checksum and unpack the pairs (and ``_about.txt``); return the path of the pairs file.

    Each URL of ``urls`` (default :func:`tatoeba_urls`) is tried in turn. The download streams
    into a temporary ``.part`` file and is renamed into place only once it is whole (the
    announced length), has the checksum ``sha256`` (when given) and is a zip archive holding a
    pairs file; otherwise the ``.part`` file is deleted and the next URL tried. A progress bar is
    shown on a terminal (``progress`` True or False to choose).

    Args:
        cache_dir: the cache directory (default :func:`default_cache_dir`).
        pair: the Tatoeba pair, ``"LLL-eng"``.
        urls: URLs to try, in order (any scheme ``urllib`` opens, ``file://`` included).
        timeout: seconds to wait for each server.
        sha256: the archive's expected SHA-256 (hex); a download with another is refused.
        progress: show a progress bar (None: when standard error is a terminal).

    Raises:
        OSError: if no URL gave a usable archive (the message lists each URL and its error).
    """
    caller = "download_tatoeba"
    pair = check_tatoeba_pair(pair, caller)
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    url_list = list(tatoeba_urls(pair) if urls is None else urls)
    if not url_list:
        raise ValueError(f"{caller}: no URL to download from")
    if sha256 is not None and not (isinstance(sha256, str) and re.fullmatch(r"[0-9a-fA-F]{64}", sha256)):
        raise ValueError(f"{caller}: sha256 must be 64 hexadecimal digits, got {sha256!r}")
    cache.mkdir(parents=True, exist_ok=True)
    zip_path, record, _, _ = _paths(cache, pair)
    errors = []
    for url in url_list:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{pair}-", suffix=".zip.part", dir=cache)
        os.close(fd)
        part = Path(tmp_name)
        try:
            logger.info("%s: downloading %s", caller, url)
            digest = _fetch(url, part, timeout, progress)
            if sha256 is not None and digest != sha256.lower():
                raise ValueError(f"its SHA-256 is {digest}, expected {sha256.lower()}")
            if not zipfile.is_zipfile(part):
                raise ValueError("the download is not a zip archive")
            with zipfile.ZipFile(part) as archive:
                pick_zip_member(archive, Path(url), caller, [f"{pair.split('-')[0]}.txt"])
            _write_atomically(record, f"{digest}  {zip_path.name}\n".encode("ascii"))
            os.replace(part, zip_path)
            txt = _unpack(zip_path, cache, pair, caller)
            logger.info("%s: cached %s (sha256 %s)", caller, txt, digest)
            return txt
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            logger.warning("%s: %s failed: %s", caller, url, exc)
            errors.append(f"{url}: {exc}")
        finally:
            if part.exists():
                part.unlink()
    raise OSError(
        f"{caller}: could not download the Tatoeba pairs {pair} into '{cache}'. Tried: "
        + "; ".join(errors)
        + f". Download {pair}.zip by hand and pass its path with --data, or set TRANSFORMER_CPP_DATA."
    )


def cached_tatoeba(
    pair: str = DEFAULT_TATOEBA_PAIR,
    cache_dir: Union[str, os.PathLike[str], None] = None,
    *,
    download: bool = True,
    urls: Optional[Sequence[str]] = None,
    caller: str = "cached_tatoeba",
) -> Path:
    """The pairs file of ``pair`` in the cache: unpacked already, else unpacked again from the
    cached archive when its checksum is the recorded one, else downloaded (unless ``download`` is
    false: ``FileNotFoundError``)."""
    pair = check_tatoeba_pair(pair, caller)
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    zip_path, record, txt, _ = _paths(cache, pair)
    if txt.is_file():
        return txt
    if zipfile.is_zipfile(zip_path):  # downloaded before, but not (or no longer) unpacked
        recorded = _recorded_sha256(record)
        actual = file_sha256(zip_path)
        if recorded is None or recorded == actual:
            if recorded is None:  # cached before checksums were recorded
                _write_atomically(record, f"{actual}  {zip_path.name}\n".encode("ascii"))
            return _unpack(zip_path, cache, pair, caller)
        logger.warning(
            "%s: '%s' has SHA-256 %s, not the %s recorded when it was downloaded: not used",
            caller,
            zip_path,
            actual,
            recorded,
        )
        if not download:
            raise ValueError(
                f"{caller}: the cached '{zip_path}' has SHA-256 {actual}, not the {recorded} recorded when it "
                "was downloaded (a damaged file?); delete it to download it again"
            )
    if not download:
        raise FileNotFoundError(
            f"{caller}: no such file '{txt}' and download=False; pass a path or set TRANSFORMER_CPP_DATA"
        )
    return download_tatoeba(cache, pair=pair, urls=urls)


def archive_sha256(pairs_file: Path) -> Optional[str]:
    """The recorded SHA-256 of the archive a cached pairs file (``<cache>/<pair>/<lang>.txt``) was
    unpacked from, or None when it is not such a file."""
    pair = pairs_file.parent.name
    if _PAIR_NAME.fullmatch(pair) is None:
        return None
    return _recorded_sha256(pairs_file.parent.parent / f"{pair}.zip.sha256")
