"""The Tatoeba sentence pairs by name: the archives of manythings.org (``fra-eng.zip``,
``spa-eng.zip``, ... about 80 languages, each paired with English), downloaded once into a cache.

A named pair is ``"LLL-eng"`` (``LLL`` the ISO 639-3 code of the other language, as manythings.org
names its files). The cache (:func:`default_cache_dir`) holds, for each pair::

    fra-eng.zip          the archive as downloaded
    fra-eng.zip.sha256   its SHA-256, recorded when it was downloaded ("<hex>  fra-eng.zip")
    fra-eng/fra.txt      the pairs, unpacked: English<TAB>French<TAB>attribution
    fra-eng/_about.txt   the archive's own notes: where the sentences come from, their licence

A download streams into a temporary ``.part`` file beside the archive, with a progress bar on a
terminal, within a deadline, a minimum rate and a size cap (and the disk's free space), and is
renamed into the cache with its checksum record only once it is checked whole: its length, its
checksum (when one is asked for), every member's CRC, the caps on unpacking, the pairs member's
name for the pair and its reading as pairs (:mod:`.archive`). The ``.part`` file is removed on
every way out, SIGTERM included. A cache entry that fails a check later is removed, said in one
warning line, and fetched again (:mod:`.cache`).

Where the archives come from: ``$TRANSFORMER_CPP_TATOEBA_URL`` (a base URL such as
``http://127.0.0.1:8000/``, for a mirror or a test server), else :data:`DEFAULT_TATOEBA_BASE_URL`;
the file is ``<base><pair>.zip``.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Set, Tuple, Type, Union

from .._runtime import tqdm_class
from .archive import ARCHIVE_ERRORS, check_archive, pick_zip_member
from .cache import (
    archive_sha256,
    entry_paths,
    entry_problem,
    file_sha256,
    install_entry,
    loose_pairs_problem,
    remove_entry,
    require_free_space,
    trusted_pairs_file,
)

__all__ = [
    "CACHE_ENV_VAR",
    "DEFAULT_TATOEBA_BASE_URL",
    "DEFAULT_TATOEBA_PAIR",
    "DOWNLOAD_DEADLINE",
    "MAX_DOWNLOAD_BYTES",
    "MIN_DOWNLOAD_RATE",
    "TATOEBA_LICENSE",
    "TATOEBA_URLS",
    "TATOEBA_URL_ENV_VAR",
    "archive_sha256",
    "cached_tatoeba",
    "check_tatoeba_pair",
    "default_cache_dir",
    "download_tatoeba",
    "file_sha256",
    "pick_zip_member",
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
#: The largest archive a download may be (announced or received); Tatoeba's are a few tens of MB.
MAX_DOWNLOAD_BYTES = 256 << 20
#: Seconds a download may take in all, however steadily the bytes come.
DOWNLOAD_DEADLINE = 1800.0
#: Bytes per second a download must keep up, measured over each :data:`RATE_WINDOW` seconds.
MIN_DOWNLOAD_RATE = 4096.0
RATE_WINDOW = 15.0
#: What a failed download attempt raises (the next URL is tried).
_DOWNLOAD_ERRORS: Tuple[Type[Exception], ...] = (OSError, ValueError, http.client.HTTPException, *ARCHIVE_ERRORS)


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


class _PartFiles:
    """The ``.part`` files being written, removed on every way out: ``finally`` for exceptions,
    and a SIGTERM handler (installed while a download runs in the main thread) that removes them
    and then lets the signal do what it did before."""

    def __init__(self) -> None:
        self.live: Set[Path] = set()
        self.previous: Any = None

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        for path in list(self.live):
            try:
                os.unlink(path)
            except OSError:
                pass
        previous = self.previous if self.previous is not None else signal.SIG_DFL
        signal.signal(signum, previous)
        if callable(previous):
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signum)

    @contextlib.contextmanager
    def new(self, cache: Path, pair: str) -> Iterator[Path]:
        installed = False
        if not self.live and threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._on_sigterm)
            installed = True
            if self.previous == signal.SIG_IGN:  # SIGTERM is ignored: nothing to clean up after
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                installed, self.previous = False, None
        fd, name = tempfile.mkstemp(prefix=f".{pair}-", suffix=".zip.part", dir=cache)
        os.close(fd)
        part = Path(name)
        self.live.add(part)
        try:
            yield part
        finally:
            self.live.discard(part)
            if part.exists():
                part.unlink()
            if installed:
                signal.signal(signal.SIGTERM, self.previous if self.previous is not None else signal.SIG_DFL)
                self.previous = None


_PARTS = _PartFiles()


def _progress_bar(total: Optional[int], label: str, progress: Optional[bool]) -> Any:
    """A tqdm byte bar on standard error (``progress`` None: only on a terminal), or None."""
    if progress is False or (progress is None and not sys.stderr.isatty()):
        return None
    tqdm = tqdm_class()

    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=label, file=sys.stderr, leave=False)


class _Pace:
    """The overall deadline and the minimum rate (checked over each :data:`RATE_WINDOW`)."""

    def __init__(self, deadline: float, min_rate: float) -> None:
        self.deadline, self.min_rate = deadline, min_rate
        self.start = self.window_start = time.monotonic()
        self.window_bytes = 0

    def check(self, got: int, new: int) -> None:
        now = time.monotonic()
        if now - self.start > self.deadline:
            raise OSError(
                f"the download took more than {self.deadline:g} s (the deadline) and stopped after {got:,} bytes"
            )
        self.window_bytes += new
        if now - self.window_start >= RATE_WINDOW:
            rate = self.window_bytes / (now - self.window_start)
            if rate < self.min_rate:
                raise OSError(
                    f"the download came at {rate:,.0f} bytes/s, below the {self.min_rate:,.0f} bytes/s allowed "
                    f"(stopped after {got:,} bytes)"
                )
            self.window_start, self.window_bytes = now, 0


def _announced(resp: Any, cache: Path, max_bytes: int, caller: str) -> Optional[int]:
    """The length the server announces, refused when over ``max_bytes`` or the free space."""
    length = resp.headers.get("Content-Length") if hasattr(resp, "headers") else None
    total = int(length) if length and length.strip().isdigit() else None
    if total is not None and total > max_bytes:
        raise OSError(f"the server announces {total:,} bytes; at most {max_bytes:,} are allowed")
    if total is not None:
        require_free_space(cache, total, "the download", caller)
    return total


def _fetch(url: str, part: Path, limits: Tuple[float, float, float, int], progress: Optional[bool], caller: str) -> str:
    """Stream ``url`` into ``part`` within ``limits`` (per-read timeout, overall deadline, minimum
    rate, size cap); return its SHA-256. A body shorter than the announced length is an error."""
    timeout, deadline, min_rate, max_bytes = limits
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    h = hashlib.sha256()
    got = 0
    pace = _Pace(deadline, min_rate)
    with open(part, "wb") as out, urllib.request.urlopen(request, timeout=min(timeout, deadline)) as resp:
        total = _announced(resp, part.parent, max_bytes, caller)
        read = getattr(resp, "read1", None) or resp.read
        bar = _progress_bar(total, url.rsplit("/", 1)[-1], progress)
        try:
            while True:
                block = read(_DOWNLOAD_CHUNK)
                pace.check(got, len(block))
                if not block:
                    break
                got += len(block)
                if got > max_bytes:
                    raise OSError(f"the download passed {max_bytes:,} bytes, the most allowed")
                out.write(block)
                h.update(block)
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


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, http.client.HTTPException):
        return f"the server's response broke off or was not HTTP ({text})"
    return text


def download_tatoeba(
    cache_dir: Union[str, os.PathLike[str], None] = None,
    *,
    pair: str = DEFAULT_TATOEBA_PAIR,
    urls: Optional[Sequence[str]] = None,
    timeout: float = 60.0,
    sha256: Optional[str] = None,
    progress: Optional[bool] = None,
    deadline: float = DOWNLOAD_DEADLINE,
    min_rate: float = MIN_DOWNLOAD_RATE,
    max_bytes: int = MAX_DOWNLOAD_BYTES,
) -> Path:
    """Download ``pair``'s archive (``spa-eng.zip`` by default) into the cache, record its
    checksum and unpack the pairs (and ``_about.txt``); return the path of the pairs file.

    Each URL of ``urls`` (default :func:`tatoeba_urls`) is tried in turn. The download streams
    into a temporary ``.part`` file, within an overall ``deadline``, a minimum rate and a size
    cap (announced and received, and the free space of the disk), and is put in the cache only
    once it is checked whole: the announced length, the checksum ``sha256`` (when given), every
    member's CRC and the caps on unpacking (:func:`~.archive.check_archive`), the pairs member
    named for ``pair`` (``fra.txt``) and reading as pairs. Otherwise the ``.part`` file is deleted
    (on SIGTERM too) and the next URL tried. A progress bar is shown on a terminal (``progress``
    True or False to choose).

    Args:
        cache_dir: the cache directory (default :func:`default_cache_dir`).
        pair: the Tatoeba pair, ``"LLL-eng"``.
        urls: URLs to try, in order (any scheme ``urllib`` opens, ``file://`` included).
        timeout: seconds to wait for each server.
        sha256: the archive's expected SHA-256 (hex); a download with another is refused.
        progress: show a progress bar (None: when standard error is a terminal).
        deadline, min_rate, max_bytes: seconds for the whole download, bytes per second it must
            keep up (over each :data:`RATE_WINDOW`), and the largest archive allowed.

    Raises:
        OSError: if no URL gave a usable archive (the message lists each URL and its error).
    """
    caller = "download_tatoeba"
    pair = check_tatoeba_pair(pair, caller)
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    url_list = list(tatoeba_urls(pair) if urls is None else urls)
    if not url_list:
        raise ValueError(f"{caller}: no URL to download from")
    for name, value in (("timeout", timeout), ("deadline", deadline), ("max_bytes", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{caller}: {name} must be a number > 0, got {value!r}")
    if isinstance(min_rate, bool) or not isinstance(min_rate, (int, float)) or not min_rate >= 0:
        raise ValueError(f"{caller}: min_rate must be a number >= 0 (bytes per second), got {min_rate!r}")
    if sha256 is not None and not (isinstance(sha256, str) and re.fullmatch(r"[0-9a-fA-F]{64}", sha256)):
        raise ValueError(f"{caller}: sha256 must be 64 hexadecimal digits, got {sha256!r}")
    cache.mkdir(parents=True, exist_ok=True)
    paths = entry_paths(cache, pair)
    wanted = paths[2].name
    limits = (float(timeout), float(deadline), float(min_rate), int(max_bytes))
    errors = []
    for url in url_list:
        with _PARTS.new(cache, pair) as part:
            try:
                logger.info("%s: downloading %s", caller, url)
                digest = _fetch(url, part, limits, progress, caller)
                if sha256 is not None and digest != sha256.lower():
                    raise ValueError(f"its SHA-256 is {digest}, expected {sha256.lower()}")
                member = check_archive(part, wanted, caller, where=url)
                txt = install_entry(part, digest, member, paths, caller)
                logger.info("%s: cached %s (sha256 %s)", caller, txt, digest)
                return txt
            except _DOWNLOAD_ERRORS as exc:
                message = _one_line(exc).replace(f"{caller}: '{url}' ", "").removeprefix(f"{caller}: ")
                logger.warning("%s: %s failed: %s", caller, url, message)
                errors.append(f"{url}: {message}")
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
    paths = entry_paths(cache, pair)
    zip_path, _, txt, _ = paths
    problem: Optional[str] = None
    if zip_path.is_file():
        problem, member = entry_problem(paths, caller)
        if member is not None:
            return trusted_pairs_file(paths, member, caller)
    elif txt.is_file():
        problem = loose_pairs_problem(txt, caller)
        if problem is None:
            return txt
    if problem is not None:
        remove_entry(paths)
        logger.warning("%s: removed the cached %s (%s)", caller, pair, problem)
        if not download:
            raise ValueError(f"{caller}: the cached {pair} was removed: {problem}; allow a download to fetch it again")
    if not download:
        raise FileNotFoundError(
            f"{caller}: no such file '{txt}' and download=False; pass a path or set TRANSFORMER_CPP_DATA"
        )
    return download_tatoeba(cache, pair=pair, urls=urls)
