"""Writing into a run directory safely: files pushed to disk before they count, temporary names
renamed into place, what an interrupted write or deletion left removed, and the run's lock."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List

try:
    import fcntl
except ImportError:  # pragma: no cover  (not POSIX: no run-directory lock)
    fcntl = None  # type: ignore[assignment]

from .._checks import path as _path
from .layout import LATEST_FILE, LOCK_FILE, TMP_PREFIX, PathLike, RunLockedError, is_temporary, refuse_foreign


def sha256(data: bytes) -> str:
    """The hex SHA-256 of ``data`` (what ``config.json`` records for every file)."""
    return hashlib.sha256(data).hexdigest()


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` and push it to disk before returning."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable (best effort: not every platform allows it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def json_bytes(obj: Any) -> bytes:
    """``obj`` as the checkpoint's JSON files hold it: indented, sorted keys, no NaN or infinity."""
    return (json.dumps(obj, indent=1, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


_in_flight: set[Path] = set()  # temporaries this process is writing or removing right now


@contextlib.contextmanager
def temporary(run: Path, what: str) -> Iterator[Path]:
    """A fresh temporary path in ``run``, ``.tmp-<what>-<pid>-<random>``, that
    :func:`remove_stale_temporaries` leaves alone for the ``with`` block (another thread of this
    process may be cleaning up meanwhile)."""
    path = run / f"{TMP_PREFIX}{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    _in_flight.add(path)
    try:
        yield path
    finally:
        _in_flight.discard(path)


def remove_path(path: Path) -> None:
    """Remove a file or a directory tree, ignoring what is already gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def remove_stale_temporaries(run: Path) -> None:
    """Remove what interrupted writes and deletions left in ``run`` (hidden files and directories
    named as :func:`temporary` names them, ``.tmp-<what>-<pid>-<8 hex digits>``), except those in
    use in this process; nothing else, whatever its name. Called with the run's lock held, so no
    other process is writing there."""
    try:
        children = list(run.iterdir())
    except OSError:
        return
    for child in children:
        if is_temporary(child.name) and child not in _in_flight:
            remove_path(child)


def remove_checkpoint(path: Path) -> None:
    """Delete a checkpoint directory: first renamed to a temporary name (one atomic step, after
    which it is no longer listed), then removed."""
    with temporary(path.parent, f"removed-{path.name}") as trash:
        try:
            os.replace(path, trash)
        except OSError:
            return  # not ours to remove after all (gone, or not permitted): leave it
        shutil.rmtree(trash, ignore_errors=True)


_held_locks: Dict[str, List[int]] = {}  # resolved run directory -> [file descriptor, depth]
_held_locks_guard = threading.Lock()


def _lock_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (process {text})" if text.isdigit() else ""


@contextlib.contextmanager
def lock_run(run_dir: PathLike) -> Iterator[Path]:
    """Hold the lock of run directory ``run_dir`` (created if needed) for the ``with`` block.

    The lock is ``fcntl.flock`` on ``<run>/.lock``: the operating system releases it when the
    process ends, however it ends. Within one process the lock is re-entrant. Taking it also
    removes what interrupted writes left behind (:func:`remove_stale_temporaries`). Where ``flock`` is
    not available (not POSIX, or a file system without locks) the block runs unlocked.

    Raises:
        RunLockedError: another process holds the lock.
        OSError: the directory cannot be created.
    """
    run = _path("lock_run: run_dir", run_dir)
    run.mkdir(parents=True, exist_ok=True)
    key = str(run.resolve())
    with _held_locks_guard:
        held = _held_locks.get(key)
        if held is not None:
            held[1] += 1
        else:
            held = _held_locks[key] = [_acquire(run), 1]  # non-blocking: fine under the guard
            if held[0] >= 0:
                remove_stale_temporaries(run)
    try:
        yield run
    finally:
        with _held_locks_guard:
            held[1] -= 1
            release = held[1] == 0
            if release:
                del _held_locks[key]
        if release and held[0] >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(held[0], fcntl.LOCK_UN)
            os.close(held[0])


def _acquire(run: Path) -> int:
    """Lock ``run``; the lock file's descriptor, or -1 when this platform cannot lock."""
    if fcntl is None:
        return -1
    refuse_foreign(run / LOCK_FILE, "lock_run", "move it elsewhere, or use another directory for the run")
    try:
        fd = os.open(run / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        return -1  # e.g. a read-only directory: writing will fail with its own message
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd)
        os.close(fd)
        raise RunLockedError(
            f"run directory '{run}' is in use by another process{holder} that trains or saves "
            "checkpoints there; wait until it ends, or use another directory"
        ) from None
    except OSError:  # a file system without flock
        os.close(fd)
        return -1
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd


def check_writable(run_dir: PathLike, what: str = "run directory") -> Path:
    """Create ``run_dir`` if needed and check that files can be written in it; raise
    ``OSError("<what> '<run_dir>' cannot be written: <reason>")`` otherwise. Returns the path."""
    run = _path(what, run_dir)
    try:
        run.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=run):
            pass
    except OSError as exc:
        raise OSError(f"{what} '{run}' cannot be written: {exc.strerror or exc}") from None
    return run


def write_pointer(run: Path, name: str, pointer: str = LATEST_FILE) -> None:
    """Make ``run/pointer`` hold ``name`` (atomically: a temporary file renamed into place); a
    file of that name that is not a pointer (the user's) is refused, not replaced."""
    refuse_foreign(run / pointer, "writing a checkpoint pointer", "move it elsewhere, or use another run directory")
    with temporary(run, pointer) as tmp:
        try:
            write_bytes(tmp, (name + "\n").encode("utf-8"))
            os.replace(tmp, run / pointer)
        except BaseException:
            if tmp.exists():
                tmp.unlink()
            raise
    fsync_dir(run)
