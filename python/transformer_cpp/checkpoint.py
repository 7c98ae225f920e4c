"""Saving and loading model checkpoints: one directory per checkpoint, written atomically.

A *run directory* (what ``transformer-cpp train --out`` names) holds checkpoints and a pointer::

    runs/tutorial/
        latest                        one line: the name of the newest checkpoint
        epoch-0003/                   the state after 3 complete epochs
        epoch-0004/
        epoch-0005-batch-000417/      interrupted (Ctrl-C) in epoch 5 after 417 of its batches
            config.json               format, model architecture, optimiser settings, training
                                      and data settings, and the size + SHA-256 of every file
            model.safetensors         the weights, one tensor per ``Transformer.parameters()`` name
            optimizer.safetensors     Adam moments, ``<parameter>.m`` / ``<parameter>.v``
            src_tokenizer.json        the source SubwordTokenizer
            tgt_tokenizer.json        the target SubwordTokenizer
            trainer_state.json        epoch, step, dropout counter, position in the epoch,
                                      history (see ``transformer_cpp.training``)

No pickle anywhere: tensors are safetensors, everything else is JSON.

Crash safety. A checkpoint is first written into a hidden temporary directory next to its final
place (``.tmp-<name>-<pid>-<random>``), every file is flushed to disk, and the directory is then
renamed into place with one ``os.replace``. Only after that is ``latest`` rewritten, again through
a temporary file and ``os.replace``. A crash at any moment therefore leaves ``latest`` naming a
complete checkpoint; a half-written temporary directory or pointer file is ignored by
:func:`load_checkpoint` and removed when the run directory is next locked or written.

Housekeeping. Old checkpoints beyond ``keep`` are deleted last, and only those that this run wrote
(``config.json`` records the run's ``run_id``) and that are complete (every file present with the
size ``config.json`` records): a damaged or foreign directory with a checkpoint's name is never
counted or deleted, the one just written and ``best`` are always kept. A checkpoint is deleted by
renaming it to a temporary name first, so a half-deleted one is never listed.

One writer at a time. Writing into a run directory takes its lock, ``<run>/.lock``
(``fcntl.flock``; :func:`lock_run`); a trainer holds it for the whole of ``fit`` and the command
line for the whole command, so a second process that tries to train or save into the same
directory fails at once with :class:`RunLockedError`.

Loading checks everything it reads and raises :class:`CheckpointError` (a ``ValueError``) with the
path and what is wrong: missing directory or file, invalid JSON, a file whose size or checksum
differs from what ``config.json`` recorded (truncated or damaged), unreadable safetensors, missing
or unexpected tensors, shapes or dtypes that do not match the architecture, NaN or infinite
values (naming the tensor), tokenizers whose vocabulary does not match the model. Saving refuses
weights or moments that are not finite, so a checkpoint that loads is a usable one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import threading
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

try:
    import fcntl
except ImportError:  # pragma: no cover  (not POSIX: no run-directory lock)
    fcntl = None  # type: ignore[assignment]

import numpy as np

from . import _core
from ._checks import flag as _flag, integer as _integer, path as _path
from .model import Transformer
from .tokenizer import MAX_FILE_BYTES as _MAX_TOKENIZER_BYTES, SubwordTokenizer

__all__ = [
    "CheckpointError",
    "RunLockedError",
    "Checkpoint",
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "list_checkpoints",
    "checkpoint_name",
    "resolve_checkpoint",
    "read_checkpoint_config",
    "average_checkpoints",
    "mark_best",
    "best_checkpoint",
    "lock_run",
    "check_writable",
    "nonfinite_tensors",
    "FORMAT_NAME",
    "FORMAT_VERSION",
]

FORMAT_NAME = "transformer_cpp.checkpoint"
FORMAT_VERSION = 1

CONFIG_FILE = "config.json"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
SRC_TOKENIZER_FILE = "src_tokenizer.json"
TGT_TOKENIZER_FILE = "tgt_tokenizer.json"
TRAINER_STATE_FILE = "trainer_state.json"
LATEST_FILE = "latest"
BEST_FILE = "best"
#: The checkpoint that :func:`average_checkpoints` writes into a run directory.
AVERAGED_NAME = "averaged"

_NAME_RE = re.compile(r"^epoch-(\d{4,})(?:-batch-(\d{6,}))?$")
#: Sizes beyond which a pointer file or a config.json is not one (a checkpoint's own files are
#: bounded by what config.json records and what the architecture needs).
_MAX_POINTER_BYTES = 4096
_MAX_CONFIG_BYTES = 16 << 20
_MAX_STATE_BYTES = 1 << 30
_TMP_PREFIX = ".tmp-"
LOCK_FILE = ".lock"

PathLike = Union[str, "os.PathLike[str]"]


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete, damaged or does not fit its own architecture."""


class RunLockedError(CheckpointError):
    """Another process holds the run directory's lock (it is training or saving there)."""


@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns.

    Attributes:
        path: the checkpoint directory that was read (``latest`` already followed).
        model: the Transformer with its weights (and, if loaded, optimiser moments, step and
            dropout counter) restored.
        src_tokenizer, tgt_tokenizer: the tokenizers the model was trained with.
        trainer_state: the ``Trainer``'s state (epoch, position, history, ...) or ``None``.
        train_config: the training settings (a ``TrainConfig`` as a dict) or ``None``.
        data: how the data was loaded and split (path, num_samples, split seed, fractions,
            languages, max_length) or ``None``.
        optimizer_loaded: whether the optimiser moments were restored.
    """

    path: Path
    model: Transformer
    src_tokenizer: SubwordTokenizer
    tgt_tokenizer: SubwordTokenizer
    trainer_state: Optional[Dict[str, Any]] = None
    train_config: Optional[Dict[str, Any]] = None
    data: Optional[Dict[str, Any]] = None
    optimizer_loaded: bool = False
    extra: Dict[str, Any] = field(default_factory=dict)
    run_id: Optional[str] = None  # the run that wrote it (see the module docstring)


# ------------------------------------------------------------------------------------ names


def checkpoint_name(epochs_done: int, batches_into_next_epoch: int = 0) -> str:
    """The directory name of a checkpoint.

    ``epoch-0003`` is the state after 3 complete epochs; ``epoch-0004-batch-000017`` the state
    after 3 complete epochs and 17 batches of the 4th (a checkpoint saved on Ctrl-C).
    """
    epochs_done = _integer("checkpoint_name", "epochs_done", epochs_done)
    batches_into_next_epoch = _integer("checkpoint_name", "batches_into_next_epoch", batches_into_next_epoch)
    if batches_into_next_epoch:
        return f"epoch-{epochs_done + 1:04d}-batch-{batches_into_next_epoch:06d}"
    return f"epoch-{epochs_done:04d}"


def _order_key(name: str) -> Optional[Tuple[int, int]]:
    """(complete epochs, batches into the next) for a checkpoint name, or None if not one."""
    match = _NAME_RE.match(name)
    if not match:
        return None
    epoch = int(match.group(1))
    if match.group(2) is None:
        return epoch, 0
    return epoch - 1, int(match.group(2))


def _checkpoint_dirs(run: Path) -> List[Path]:
    """Directories of ``run`` named like :func:`checkpoint_name`, oldest first, whatever they hold."""
    if not run.is_dir():
        return []
    found = []
    for child in run.iterdir():
        key = _order_key(child.name)
        if key is not None and child.is_dir():
            found.append((key, child))
    return [p for _, p in sorted(found)]


def _complete_config(ckpt: Path) -> Optional[Dict[str, Any]]:
    """The ``config.json`` of ``ckpt`` if the checkpoint is complete: that file is a checkpoint
    configuration and every file it records is there with the recorded size (no checksum: cheap
    enough for every listing). ``None`` for anything else."""
    try:
        config = json.loads((ckpt / CONFIG_FILE).read_text(encoding="utf-8"))
        if not isinstance(config, dict) or config.get("format") != FORMAT_NAME:
            return None
        files = config.get("files")
        if not isinstance(files, dict) or MODEL_FILE not in files:
            return None
        for fname, info in files.items():
            if "/" in fname or not isinstance(info, dict) or (ckpt / fname).stat().st_size != info.get("bytes"):
                return None
    except (OSError, ValueError):  # missing or unreadable files, invalid JSON or UTF-8
        return None
    return config


def list_checkpoints(run_dir: PathLike, *, complete: bool = True, run_id: Optional[str] = None) -> List[Path]:
    """The checkpoint directories of ``run_dir``, oldest first (by training progress).

    Only directories named like :func:`checkpoint_name` count; temporary directories of an
    interrupted write or deletion are ignored. With ``complete`` (the default) a directory must
    also hold a checkpoint whose files are all there with the sizes ``config.json`` records;
    with ``complete=False`` a ``config.json`` is enough. With ``run_id``, only the complete
    checkpoints of that run are listed.
    """
    dirs = _checkpoint_dirs(Path(run_dir))
    if run_id is not None:
        return [p for p in dirs if (_complete_config(p) or {}).get("run_id") == run_id]
    if complete:
        return [p for p in dirs if _complete_config(p) is not None]
    return [p for p in dirs if (p / CONFIG_FILE).is_file()]


def latest_checkpoint(run_dir: PathLike) -> Optional[Path]:
    """The checkpoint that ``run_dir/latest`` names, or ``None`` if the run has no ``latest``.

    Raises:
        CheckpointError: if ``latest`` exists but names no checkpoint directory.
    """
    return _follow(Path(run_dir), LATEST_FILE)


def best_checkpoint(run_dir: PathLike) -> Optional[Path]:
    """The checkpoint that ``run_dir/best`` names (best validation BLEU, possibly the averaged
    one), or ``None`` if the run has no ``best``."""
    return _follow(Path(run_dir), BEST_FILE)


def mark_best(run_dir: PathLike, name: str) -> None:
    """Point ``run_dir/best`` at the checkpoint ``name`` (atomically)."""
    run = Path(run_dir)
    if not isinstance(name, str) or (_order_key(name) is None and name != AVERAGED_NAME):
        raise CheckpointError(
            f"mark_best: name {name!r} is not the name of a checkpoint of the run, such as "
            f"'epoch-0003' or {AVERAGED_NAME!r}"
        )
    if not (run / name / CONFIG_FILE).is_file():
        raise CheckpointError(f"mark_best: '{run / name}' is not a checkpoint")
    with lock_run(run):
        _write_pointer(run, name, BEST_FILE)


def _follow(run: Path, pointer_name: str) -> Optional[Path]:
    pointer = run / pointer_name
    if not pointer.is_file():
        return None
    try:
        with open(pointer, "rb") as f:
            raw = f.read(_MAX_POINTER_BYTES + 1)  # one line: never read a damaged, huge file whole
        if len(raw) > _MAX_POINTER_BYTES:
            raise CheckpointError(
                f"checkpoint pointer '{pointer}' is damaged (over {_MAX_POINTER_BYTES} bytes; it "
                "should hold one checkpoint name)"
            )
        name = raw.decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"cannot read checkpoint pointer '{pointer}': {exc}") from None
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise CheckpointError(f"checkpoint pointer '{pointer}' is damaged (content {name!r})")
    target = run / name
    if not target.is_dir():
        raise CheckpointError(f"checkpoint pointer '{pointer}' names '{name}', which does not exist in '{run}'")
    return target


def resolve_checkpoint(path: PathLike, prefer: str = "latest") -> Path:
    """Turn a run directory (with ``latest``), one of its pointer files (``latest``, ``best``) or a
    checkpoint directory into a checkpoint directory.

    ``prefer="best"`` takes the run's ``best`` checkpoint when it has one (translation), else
    ``latest`` (what resuming needs).

    Raises:
        CheckpointError: if ``path`` does not exist or holds neither ``latest`` nor ``config.json``.
    """
    p = _path("checkpoint path", path)
    if not p.exists():
        raise CheckpointError(f"no such checkpoint directory '{p}'")
    if not p.is_dir():
        if p.name in (LATEST_FILE, BEST_FILE):
            # a run's pointer file (runs/x/best): the checkpoint it names, as a user means by it
            target = _follow(p.parent, p.name)  # raises when the pointer is damaged or dangling
            assert target is not None  # p is a file, so _follow found the pointer
            if not (target / CONFIG_FILE).is_file():
                raise CheckpointError(f"checkpoint pointer '{p}' names '{target.name}', which holds no '{CONFIG_FILE}'")
            return target
        raise CheckpointError(
            f"'{p}' is a file; expected a run directory (with 'latest'), its 'latest' or 'best' pointer, "
            "or a checkpoint directory"
        )
    if (p / CONFIG_FILE).is_file():
        return p
    if prefer not in ("latest", "best"):
        raise ValueError(f"resolve_checkpoint: prefer must be 'latest' or 'best', got {prefer!r}")
    if prefer == "best":
        best = best_checkpoint(p)
        if best is not None:
            return best
    latest = latest_checkpoint(p)
    if latest is not None:
        return latest
    raise CheckpointError(
        f"'{p}' holds no checkpoint: expected a '{LATEST_FILE}' file (a run directory) or a "
        f"'{CONFIG_FILE}' (a checkpoint directory)"
    )


# ------------------------------------------------------------------------------------ saving


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` and push it to disk before returning."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
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


def _json_bytes(obj: Any) -> bytes:
    return (json.dumps(obj, indent=1, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def _tensor_bytes(tensors: Mapping[str, Any], kind: str) -> bytes:
    from safetensors.numpy import save

    arrays = {name: np.ascontiguousarray(np.array(t.value, copy=True)) for name, t in tensors.items()}
    return save(arrays, metadata={"format": FORMAT_NAME, "content": kind})


_in_flight: set[Path] = set()  # temporaries this process is writing or removing right now


@contextlib.contextmanager
def _temporary(run: Path, what: str) -> Iterator[Path]:
    """A fresh temporary path in ``run``, ``.tmp-<what>-<pid>-<random>``, that
    :func:`_remove_stale_temporaries` leaves alone for the ``with`` block (another thread of this
    process may be cleaning up meanwhile)."""
    path = run / f"{_TMP_PREFIX}{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    _in_flight.add(path)
    try:
        yield path
    finally:
        _in_flight.discard(path)


def _remove_path(path: Path) -> None:
    """Remove a file or a directory tree, ignoring what is already gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _remove_stale_temporaries(run: Path) -> None:
    """Remove what interrupted writes and deletions left in ``run`` (hidden ``.tmp-*`` files and
    directories), except those in use in this process. Called with the run's lock held, so no
    other process is writing there."""
    try:
        children = list(run.iterdir())
    except OSError:
        return
    for child in children:
        if child.name.startswith(_TMP_PREFIX) and child not in _in_flight:
            _remove_path(child)


def _remove_checkpoint(path: Path) -> None:
    """Delete a checkpoint directory: first renamed to a temporary name (one atomic step, after
    which it is no longer listed), then removed."""
    with _temporary(path.parent, f"removed-{path.name}") as trash:
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
    removes what interrupted writes left behind (see the module docstring). Where ``flock`` is
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
                _remove_stale_temporaries(run)
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
    try:
        fd = os.open(run / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
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
    import tempfile

    run = _path(what, run_dir)
    try:
        run.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=run):
            pass
    except OSError as exc:
        raise OSError(f"{what} '{run}' cannot be written: {exc.strerror or exc}") from None
    return run


def nonfinite_tensors(tensors: Mapping[str, Any]) -> List[str]:
    """The names of the tensors (arrays, or objects with a ``.value`` array) that hold a NaN or
    infinite value, each with what it holds: ``"'output.bias' (3 NaN, 0 infinite of 120)"``."""
    bad = []
    for name, t in tensors.items():
        value = np.asarray(getattr(t, "value", t))
        if value.dtype.kind not in "fc":
            continue
        finite = np.isfinite(value)
        if not finite.all():
            nan = int(np.isnan(value).sum())
            bad.append(f"{name!r} ({nan} NaN, {int(value.size - finite.sum()) - nan} infinite of {value.size})")
    return bad


def _describe_bad(bad: List[str]) -> str:
    return ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")


def save_checkpoint(
    run_dir: PathLike,
    model: Transformer,
    src_tokenizer: SubwordTokenizer,
    tgt_tokenizer: SubwordTokenizer,
    *,
    name: Optional[str] = None,
    trainer_state: Optional[Mapping[str, Any]] = None,
    train_config: Optional[Mapping[str, Any]] = None,
    data: Optional[Mapping[str, Any]] = None,
    optimizer: bool = True,
    keep: Optional[int] = 5,
    run_id: Optional[str] = None,
) -> Path:
    """Write a checkpoint of ``model`` into ``run_dir/name`` atomically; point ``latest`` at it.

    Args:
        run_dir: the run directory (created if needed).
        model: the model; its ``config``, ``optimizer_config``, weights and (with ``optimizer``)
            Adam moments, ``step`` and ``dropout_calls`` are saved.
        src_tokenizer, tgt_tokenizer: the tokenizers (their vocabulary sizes must match the model).
        name: the directory name, as made by :func:`checkpoint_name` (default: from
            ``trainer_state``'s ``epoch`` and ``batch_in_epoch``, else ``epoch-0000``).
        trainer_state, train_config, data: JSON-serialisable dicts stored as they are.
        optimizer: also save the optimiser moments (needed to resume training, not to translate).
        keep: keep only the newest ``keep`` complete checkpoints of this run (``None`` or 0:
            keep all). The one just written and ``best`` are always kept; checkpoints of other
            runs and damaged directories are never deleted.
        run_id: the run this checkpoint belongs to (recorded in ``config.json``; pruning only
            deletes checkpoints of the same run). Default: the run of the checkpoint ``latest``
            names, else a new one.

    Returns:
        The checkpoint directory.

    Raises:
        ValueError: bad arguments (a name not made by :func:`checkpoint_name`, tokenizers that do
            not match the model, state that is not JSON-serialisable, weights or moments that
            hold NaN or infinite values).
        RunLockedError: another process is writing into ``run_dir``.
    """
    run = _path("save_checkpoint: run_dir", run_dir)
    if name is None:
        state = trainer_state or {}
        name = checkpoint_name(int(state.get("epoch", 0)), int(state.get("batch_in_epoch", 0)))
    if _order_key(name) is None and name != AVERAGED_NAME:
        raise ValueError(
            f"save_checkpoint: name {name!r} is not a checkpoint name such as 'epoch-0003' (or {AVERAGED_NAME!r})"
        )
    optimizer = _flag("save_checkpoint", "optimizer", optimizer)
    if keep is not None:
        keep = _integer("save_checkpoint", "keep", keep)
    cfg = model.config
    for label, tok, key in (
        ("src_tokenizer", src_tokenizer, "src_vocab_size"),
        ("tgt_tokenizer", tgt_tokenizer, "tgt_vocab_size"),
    ):
        if not isinstance(tok, SubwordTokenizer):
            raise ValueError(f"save_checkpoint: {label} must be a SubwordTokenizer, got {type(tok).__name__}")
        if tok.vocab_size != cfg[key]:
            raise ValueError(
                f"save_checkpoint: {label} has {tok.vocab_size} tokens but the model's {key} is {cfg[key]}"
            )

    bad = nonfinite_tensors(model.parameters())
    if optimizer and not bad:
        bad = nonfinite_tensors(model.optimizer_state())
    if bad:
        raise ValueError(
            f"save_checkpoint: the model holds non-finite values, in {_describe_bad(bad)}; "
            "a checkpoint of it could not be used (has training diverged?)"
        )
    if run_id is not None and (not isinstance(run_id, str) or not run_id):
        raise ValueError(f"save_checkpoint: run_id must be a non-empty str or None, got {run_id!r}")

    # Everything is serialised before the first byte is written, so that bad input fails early.
    files: Dict[str, bytes] = {
        MODEL_FILE: _tensor_bytes(model.parameters(), "weights"),
        SRC_TOKENIZER_FILE: src_tokenizer.to_str().encode("utf-8"),
        TGT_TOKENIZER_FILE: tgt_tokenizer.to_str().encode("utf-8"),
    }
    if optimizer:
        files[OPTIMIZER_FILE] = _tensor_bytes(model.optimizer_state(), "adam")
    try:
        files[TRAINER_STATE_FILE] = _json_bytes(None if trainer_state is None else dict(trainer_state))
        config: Dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "model": cfg,
            "optimizer": {
                "config": model.optimizer_config,
                "saved": bool(optimizer),
                "step": model.step,
                "dropout_calls": model.dropout_calls,
            },
            "train_config": None if train_config is None else dict(train_config),
            "data": None if data is None else dict(data),
            "files": {fname: {"bytes": len(b), "sha256": _sha256(b)} for fname, b in sorted(files.items())},
        }
    except (TypeError, ValueError) as exc:
        raise ValueError(f"save_checkpoint: state is not JSON-serialisable: {exc}") from None

    with lock_run(run):
        config["run_id"] = run_id or _latest_run_id(run) or uuid.uuid4().hex[:16]
        config_bytes = _json_bytes(config)
        target = run / name
        with _temporary(run, name) as tmp, _temporary(run, f"old-{name}") as trash:
            tmp.mkdir()
            try:
                for fname, payload in files.items():
                    _write_bytes(tmp / fname, payload)
                _write_bytes(tmp / CONFIG_FILE, config_bytes)  # last: a directory with config.json is complete
                _fsync_dir(tmp)
                if target.exists():  # e.g. the same epoch saved again after resuming from an older checkpoint
                    os.replace(target, trash)
                    os.replace(tmp, target)
                    shutil.rmtree(trash, ignore_errors=True)
                else:
                    os.replace(tmp, target)
                _fsync_dir(run)
            except OSError as exc:  # a full disk, a file size limit, a vanished directory
                shutil.rmtree(tmp, ignore_errors=True)
                raise type(exc)(
                    f"save_checkpoint: writing checkpoint '{target}' failed: {exc.strerror or exc} "
                    f"(disk full?); '{run}' is as it was"
                ) from None
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise

        if name != AVERAGED_NAME:  # "latest" is what a resume continues: never the average
            try:
                _write_pointer(run, name)
            except OSError as exc:
                raise type(exc)(
                    f"save_checkpoint: checkpoint '{target}' is complete, but writing '{LATEST_FILE}' "
                    f"failed: {exc.strerror or exc} (disk full?); it still names the previous "
                    "checkpoint"
                ) from None
        _remove_stale_temporaries(run)
        if keep:
            _prune(run, int(keep), protect=target, run_id=config["run_id"])
    return target


def _latest_run_id(run: Path) -> Optional[str]:
    """The run id recorded by the checkpoint ``latest`` names, if it can be read."""
    try:
        latest = latest_checkpoint(run)
    except CheckpointError:
        return None
    config = _complete_config(latest) if latest is not None else None
    run_id = config.get("run_id") if config is not None else None
    return run_id if isinstance(run_id, str) and run_id else None


def _write_pointer(run: Path, name: str, pointer: str = LATEST_FILE) -> None:
    with _temporary(run, pointer) as tmp:
        try:
            _write_bytes(tmp, (name + "\n").encode("utf-8"))
            os.replace(tmp, run / pointer)
        except BaseException:
            if tmp.exists():
                tmp.unlink()
            raise
    _fsync_dir(run)


def _prune(run: Path, keep: int, protect: Path, run_id: str) -> None:
    """Delete the oldest complete checkpoints of run ``run_id`` beyond the newest ``keep``, never
    ``protect`` (the one just written) nor ``best``."""
    ours = list_checkpoints(run, run_id=run_id)
    try:
        best = best_checkpoint(run)
    except CheckpointError:
        best = None
    for old in ours[: max(0, len(ours) - keep)]:
        if old != protect and old != best:
            _remove_checkpoint(old)


# ------------------------------------------------------------------------------------ loading


def _read_file(ckpt: Path, fname: str, files: Mapping[str, Any], most: Optional[int] = None) -> bytes:
    """The bytes of ``fname``, checked against the size and SHA-256 that config.json records before
    (size) and after (checksum) reading; a recorded size above ``most`` bytes (what such a file can
    hold) or above the memory there is is refused before anything is read."""
    path = ckpt / fname
    expected = files.get(fname)
    if not (
        isinstance(expected, Mapping)
        and isinstance(expected.get("bytes"), int)
        and not isinstance(expected.get("bytes"), bool)
        and expected["bytes"] >= 0
        and isinstance(expected.get("sha256"), str)
    ):
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{CONFIG_FILE}' records no valid size and SHA-256 for '{fname}' "
            f"(got {expected!r:.80}); the checkpoint is damaged"
        )
    if not path.is_file():
        raise CheckpointError(f"checkpoint '{ckpt}' is incomplete: '{fname}' is missing")
    size = path.stat().st_size
    if size != expected["bytes"]:
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{fname}' has {size} bytes, expected {expected['bytes']} (truncated or overwritten)"
        )
    if most is not None and size > most:
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{fname}' has {size:,} bytes, more than such a file can hold "
            f"({most:,}); the checkpoint is damaged"
        )
    room = _core._memory_limit_bytes()  # compared here: paths need not be valid UTF-8 for the core
    if size > room:
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{fname}' has {size:,} bytes, more than the {room:,.0f} bytes of "
            "memory available to read it"
        )
    data = path.read_bytes()
    if len(data) != size:
        raise CheckpointError(f"checkpoint '{ckpt}': '{fname}' changed while it was read")
    if _sha256(data) != expected["sha256"]:
        raise CheckpointError(f"checkpoint '{ckpt}': '{fname}' is damaged (its SHA-256 does not match config.json)")
    return data


def _read_json(ckpt: Path, fname: str, files: Mapping[str, Any]) -> Any:
    data = _read_file(ckpt, fname, files, _MAX_STATE_BYTES)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint '{ckpt}': '{fname}' is not valid JSON ({exc})") from None


def _tensor_file_bound(targets: Mapping[str, Any]) -> int:
    """The most bytes a safetensors file of ``targets`` can take: the tensors (at 8 bytes an element,
    so that float64 tensors for a float32 model are refused for their dtype, by name) and a header
    with a generous allowance per tensor."""
    return int(sum(8 * t.value.size + 1024 for t in targets.values())) + (1 << 20)


def _load_tensors(
    ckpt: Path, fname: str, files: Mapping[str, Any], targets: Optional[Mapping[str, Any]] = None
) -> Dict[str, np.ndarray]:
    from safetensors.numpy import load

    data = _read_file(ckpt, fname, files, None if targets is None else _tensor_file_bound(targets))
    try:
        return load(data)
    except Exception as exc:  # safetensors raises its own SafetensorError (an Exception)
        raise CheckpointError(f"checkpoint '{ckpt}': '{fname}' is not a readable safetensors file ({exc})") from None


def _assign(ckpt: Path, fname: str, targets: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> None:
    """Copy ``tensors`` into the ``.value`` views of ``targets``, checking names, shapes, dtypes."""
    missing = [n for n in targets if n not in tensors]
    unexpected = [n for n in tensors if n not in targets]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {len(missing)} tensor(s), e.g. {missing[0]!r}")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected tensor(s), e.g. {unexpected[0]!r}")
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{fname}' does not match the architecture in config.json: " + "; ".join(parts)
        )
    for n, target in targets.items():
        value = tensors[n]
        if value.shape != target.value.shape:
            raise CheckpointError(
                f"checkpoint '{ckpt}': '{fname}' tensor {n!r} has shape {value.shape}, "
                f"the architecture in config.json needs {target.value.shape}"
            )
        if value.dtype != target.value.dtype:
            raise CheckpointError(
                f"checkpoint '{ckpt}': '{fname}' tensor {n!r} is {value.dtype}, the model is {target.value.dtype}"
            )
    bad = nonfinite_tensors(tensors)
    if bad:
        raise CheckpointError(
            f"checkpoint '{ckpt}': '{fname}' holds non-finite values, in tensor {_describe_bad(bad)}; "
            "the checkpoint is unusable (saved from a diverged run, or damaged)"
        )
    for n, target in targets.items():
        target.value[...] = tensors[n]


def _load_tokenizer(ckpt: Path, fname: str, files: Mapping[str, Any]) -> SubwordTokenizer:
    data = _read_file(ckpt, fname, files, _MAX_TOKENIZER_BYTES)
    try:
        return SubwordTokenizer.from_str(data.decode("utf-8"))
    except (UnicodeDecodeError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint '{ckpt}': '{fname}' is not a SubwordTokenizer ({exc})") from None


def average_checkpoints(
    paths: Sequence[PathLike], run_dir: Optional[PathLike] = None, name: str = AVERAGED_NAME
) -> Tuple[Optional[Path], Transformer]:
    """Average the weights of several checkpoints of one run (the same architecture and
    tokenizers); return ``(path written or None, the averaged model)``.

    Every weight becomes the arithmetic mean over ``paths`` (accumulated in float64). With
    ``run_dir``, the result is saved there as checkpoint ``name`` (default ``averaged``)
    without optimiser state: it is for translating, not for resuming; ``latest`` is unchanged.

    Raises:
        CheckpointError: fewer than one checkpoint, or checkpoints that differ in architecture
            or tokenizers.
    """
    if not paths:
        raise CheckpointError("average_checkpoints: no checkpoint to average")
    first = load_checkpoint(paths[0], optimizer=False)
    params = first.model.parameters()
    sums = {k: np.array(p.value, dtype=np.float64) for k, p in params.items()}
    for path in paths[1:]:
        ckpt = load_checkpoint(path, optimizer=False)
        if ckpt.model.config != first.model.config:
            raise CheckpointError(f"average_checkpoints: '{ckpt.path}' has another architecture than '{first.path}'")
        if ckpt.src_tokenizer != first.src_tokenizer or ckpt.tgt_tokenizer != first.tgt_tokenizer:
            raise CheckpointError(f"average_checkpoints: '{ckpt.path}' has other tokenizers than '{first.path}'")
        if ckpt.run_id != first.run_id:
            raise CheckpointError(
                f"average_checkpoints: '{ckpt.path}' belongs to another run ({ckpt.run_id}) than "
                f"'{first.path}' ({first.run_id}); average checkpoints of one run"
            )
        for k, p in ckpt.model.parameters().items():
            sums[k] += p.value
    for k, p in params.items():
        p.value[...] = sums[k] / len(paths)
    out = None
    if run_dir is not None:
        data = dict(first.data or {}, averaged_from=[Path(p).name for p in paths])
        out = save_checkpoint(
            run_dir,
            first.model,
            first.src_tokenizer,
            first.tgt_tokenizer,
            name=name,
            train_config=first.train_config,
            data=data,
            optimizer=False,
            keep=None,
        )
    return out, first.model


def read_checkpoint_config(path: PathLike, prefer: str = "latest") -> Tuple[Path, Dict[str, Any]]:
    """``(checkpoint directory, its config.json as a dict)`` without loading any tensor.

    The dict has the sections ``model`` (architecture), ``optimizer``, ``train_config``, ``data``
    and ``files``. Useful to look at a run, or to rebuild its data split, cheaply.

    Raises:
        CheckpointError: no checkpoint at ``path``, or a ``config.json`` that is not valid.
    """
    ckpt = resolve_checkpoint(path, prefer)
    config_path = ckpt / CONFIG_FILE
    try:
        size = config_path.stat().st_size
        if size > _MAX_CONFIG_BYTES:
            raise CheckpointError(
                f"checkpoint '{ckpt}': '{CONFIG_FILE}' has {size:,} bytes, more than a checkpoint "
                f"configuration ({_MAX_CONFIG_BYTES:,} at most); it is damaged"
            )
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint '{ckpt}': '{CONFIG_FILE}' is not valid JSON ({exc})") from None
    except OSError as exc:
        raise CheckpointError(f"checkpoint '{ckpt}': cannot read '{CONFIG_FILE}' ({exc})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT_NAME:
        raise CheckpointError(f"checkpoint '{ckpt}': '{CONFIG_FILE}' is not a transformer_cpp checkpoint configuration")
    if config.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint '{ckpt}': format version {config.get('version')!r} is not supported "
            f"(this transformer_cpp reads version {FORMAT_VERSION})"
        )
    return ckpt, config


def load_checkpoint(path: PathLike, *, optimizer: bool = True, prefer: Optional[str] = None) -> Checkpoint:
    """Load a checkpoint written by :func:`save_checkpoint`.

    Args:
        path: a run directory (its ``latest`` checkpoint is read) or a checkpoint directory.
        optimizer: also restore the Adam moments, ``step`` and ``dropout_calls`` (to resume
            training). Translation does not need them, and with ``False`` the optimiser file is
            not even read.
        prefer: for a run directory, ``"latest"`` or ``"best"`` (see :func:`resolve_checkpoint`);
            default ``"latest"`` with ``optimizer`` (resuming), else ``"best"`` (translating).

    Raises:
        CheckpointError: anything missing, damaged or inconsistent (the message says what and where).
    """
    optimizer = _flag("load_checkpoint", "optimizer", optimizer)
    ckpt, config = read_checkpoint_config(path, prefer or ("latest" if optimizer else "best"))
    files = config.get("files")
    model_cfg = config.get("model")
    opt = config.get("optimizer")
    if not isinstance(files, dict) or not isinstance(model_cfg, dict) or not isinstance(opt, dict):
        raise CheckpointError(f"checkpoint '{ckpt}': '{CONFIG_FILE}' lacks its 'model', 'optimizer' or 'files' section")
    for section in ("train_config", "data"):
        if config.get(section) is not None and not isinstance(config[section], dict):
            raise CheckpointError(
                f"checkpoint '{ckpt}': the '{section}' section of '{CONFIG_FILE}' must be an object "
                f"or null, got {type(config[section]).__name__}"
            )

    if not optimizer and model_cfg.get("precision") == "bf16" and not _core._bf16_supported():
        # decoding runs in float32 whatever the training precision: a model trained in bf16 is
        # still translated here; only resuming its training needs the bf16 kernel
        warnings.warn(
            f"checkpoint '{ckpt}' was trained with precision 'bf16', which cannot run here "
            f"({_core._bf16_unsupported_reason()}); loaded with precision 'float32' (decoding is float32 "
            "either way)",
            RuntimeWarning,
            stacklevel=2,
        )
        model_cfg = dict(model_cfg, precision="float32")
    try:
        model = Transformer.from_config(model_cfg)
        if isinstance(opt.get("config"), dict):
            model.configure_optimizer(**opt["config"])
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint '{ckpt}': the configuration in '{CONFIG_FILE}' is invalid ({exc})") from None

    _assign(ckpt, MODEL_FILE, model.parameters(), _load_tensors(ckpt, MODEL_FILE, files, model.parameters()))
    optimizer_loaded = False
    if optimizer:
        if not opt.get("saved", False):
            raise CheckpointError(f"checkpoint '{ckpt}' was saved without optimiser state; it cannot resume training")
        _assign(
            ckpt,
            OPTIMIZER_FILE,
            model.optimizer_state(),
            _load_tensors(ckpt, OPTIMIZER_FILE, files, model.optimizer_state()),
        )
        try:
            model.step = _integer("", "step", opt.get("step"))
            model.dropout_calls = _integer("", "dropout_calls", opt.get("dropout_calls"))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"checkpoint '{ckpt}': '{CONFIG_FILE}' lacks a valid optimiser step ({exc})"
            ) from None
        optimizer_loaded = True

    src_tok = _load_tokenizer(ckpt, SRC_TOKENIZER_FILE, files)
    tgt_tok = _load_tokenizer(ckpt, TGT_TOKENIZER_FILE, files)
    for label, tok, key in (("source", src_tok, "src_vocab_size"), ("target", tgt_tok, "tgt_vocab_size")):
        if tok.vocab_size != model_cfg.get(key):
            raise CheckpointError(
                f"checkpoint '{ckpt}': the {label} tokenizer has {tok.vocab_size} tokens but the model's "
                f"{key} is {model_cfg.get(key)}"
            )
    trainer_state = _read_json(ckpt, TRAINER_STATE_FILE, files)
    if trainer_state is not None and not isinstance(trainer_state, dict):
        raise CheckpointError(f"checkpoint '{ckpt}': '{TRAINER_STATE_FILE}' must hold a JSON object or null")
    run_id = config.get("run_id")
    return Checkpoint(
        path=ckpt,
        model=model,
        src_tokenizer=src_tok,
        tgt_tokenizer=tgt_tok,
        trainer_state=trainer_state,
        train_config=config.get("train_config"),
        data=config.get("data"),
        optimizer_loaded=optimizer_loaded,
        run_id=run_id if isinstance(run_id, str) and run_id else None,
    )
