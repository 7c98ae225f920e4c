"""A run directory's layout: the file names, the checkpoint names and their order, listing the
checkpoints, following the ``latest`` and ``best`` pointers, and the types every part shares."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from .._checks import integer as _integer, path as _path
from ..model import Transformer
from ..tokenizer import Tokenizer

FORMAT_NAME = "transformer_cpp.checkpoint"
FORMAT_VERSION = 1

#: What a checkpoint's manifest records as its ``kind``: the task that trained it (a manifest
#: without one is a translation model's, as every checkpoint was before the language model).
TRANSLATION_KIND = "translation"
LANGUAGE_MODEL_KIND = "language_model"
#: How a message names each task's runs and the commands that read them.
_KINDS = {
    TRANSLATION_KIND: ("a translation model (trained by train)", "translate, evaluate or serve"),
    LANGUAGE_MODEL_KIND: ("a language model (trained by train-lm)", "generate or evaluate-lm"),
}

CONFIG_FILE = "config.json"
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
SRC_TOKENIZER_FILE = "src_tokenizer.json"
TGT_TOKENIZER_FILE = "tgt_tokenizer.json"
TRAINER_STATE_FILE = "trainer_state.json"
LATEST_FILE = "latest"
BEST_FILE = "best"
#: The checkpoint that :func:`~transformer_cpp.checkpoint.average_checkpoints` writes into a run directory.
AVERAGED_NAME = "averaged"
LOCK_FILE = ".lock"
#: The prefix of the hidden temporary files and directories of a write or a deletion in progress.
TMP_PREFIX = ".tmp-"
#: Size beyond which a config.json is not a checkpoint's (its manifest and settings take kilobytes).
MAX_CONFIG_BYTES = 16 << 20

_NAME_RE = re.compile(r"^epoch-(\d{4,})(?:-batch-(\d{6,}))?$")
#: A temporary of this program: ``.tmp-<what>-<pid>-<8 hex digits>`` (see ``files.temporary``).
_TMP_RE = re.compile(r"^\.tmp-.+-\d+-[0-9a-f]{8}$")
#: Size beyond which a pointer file is not one (it holds one checkpoint name).
_MAX_POINTER_BYTES = 4096
#: Size beyond which a lock file is not this program's (it holds a process id).
_MAX_LOCK_BYTES = 64

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
    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    trainer_state: Optional[Dict[str, Any]] = None
    train_config: Optional[Dict[str, Any]] = None
    data: Optional[Dict[str, Any]] = None
    optimizer_loaded: bool = False
    extra: Dict[str, Any] = field(default_factory=dict)
    run_id: Optional[str] = None  # the run that wrote it (pruning deletes only its own checkpoints)


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


def order_key(name: str) -> Optional[Tuple[int, int]]:
    """(complete epochs, batches into the next) for a checkpoint name, or None if not one."""
    match = _NAME_RE.match(name)
    if not match:
        return None
    epoch = int(match.group(1))
    if match.group(2) is None:
        return epoch, 0
    return epoch - 1, int(match.group(2))


def is_temporary(name: str) -> bool:
    """Whether ``name`` is that of a temporary file or directory this program makes in a run
    directory (``.tmp-<what>-<pid>-<8 hex digits>``); other hidden names are the user's."""
    return _TMP_RE.match(name) is not None


def _written_name(name: str) -> bool:
    """Whether this program writes a checkpoint named ``name`` (as :func:`checkpoint_name` spells
    it, or ``averaged``)."""
    key = order_key(name)
    if key is None:
        return name == AVERAGED_NAME
    epochs_done, batches = key
    return checkpoint_name(epochs_done, batches) == name


def _not_a_checkpoint(path: Path) -> Optional[str]:
    """Why the directory ``path`` is not a checkpoint this program wrote, or None when it is one:
    a directory (not a link) whose ``config.json`` is a checkpoint manifest and which holds
    nothing but the files that manifest lists. A checkpoint whose files were since damaged is
    still one of ours; a user's directory with a checkpoint's name is not."""
    if path.is_symlink():
        return "it is a symbolic link"
    if not path.is_dir():
        return "it is not a directory"
    manifest = path / CONFIG_FILE
    try:
        if manifest.is_symlink() or not manifest.is_file():
            return f"it has no checkpoint manifest '{CONFIG_FILE}'"
        if manifest.stat().st_size > MAX_CONFIG_BYTES:
            return f"its '{CONFIG_FILE}' is not a checkpoint manifest"
        config = json.loads(manifest.read_text(encoding="utf-8"))
        files = config.get("files") if isinstance(config, dict) else None
        if not isinstance(config, dict) or config.get("format") != FORMAT_NAME or not isinstance(files, dict):
            return f"its '{CONFIG_FILE}' is not a checkpoint manifest"
        for child in sorted(path.iterdir()):
            if child.name != CONFIG_FILE and child.name not in files:
                return f"it holds '{child.name}', which its manifest does not list"
            if child.is_symlink() or not child.is_file():
                return f"its '{child.name}' is not a regular file"
    except (OSError, ValueError):  # unreadable, not UTF-8, not JSON
        return f"its '{CONFIG_FILE}' is not a checkpoint manifest"
    return None


def _small_text(path: Path, most: int) -> Optional[str]:
    """The text of the regular file ``path`` if it holds at most ``most`` bytes of UTF-8, else None."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > most:
            return None
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def not_written_here(path: Path) -> Optional[str]:
    """Why ``path``, an entry of a run directory under a name this program writes (a checkpoint,
    ``averaged``, ``latest``, ``best``, ``.lock``), is not this program's own, or None when it is.

    A checkpoint is recognised by its manifest (:func:`_not_a_checkpoint`), a pointer by holding
    one checkpoint name, the lock file by holding a process id. What is not recognised is the
    user's: it is never replaced nor deleted."""
    name = path.name
    if name in (LATEST_FILE, BEST_FILE):
        text = _small_text(path, _MAX_POINTER_BYTES)
        if text is None or not _written_name(text.strip()):
            return "it does not hold one checkpoint name, as a pointer does"
        return None
    if name == LOCK_FILE:
        text = _small_text(path, _MAX_LOCK_BYTES)
        if text is None or not (text.strip() == "" or text.strip().isdigit()):
            return "it does not hold a process id, as a run's lock file does"
        return None
    return _not_a_checkpoint(path)


def foreign_entries(run: Path) -> List[Tuple[Path, str]]:
    """The entries of ``run`` under names this program writes (checkpoints, ``averaged``, the
    pointers, the lock file) that it did not write, each with why: ``(path, reason)``."""
    if not run.is_dir():
        return []
    found = []
    for child in sorted(run.iterdir()):
        if _written_name(child.name) or child.name in (LATEST_FILE, BEST_FILE, LOCK_FILE):
            reason = not_written_here(child)
            if reason is not None:
                found.append((child, reason))
    return found


def refuse_foreign(path: Path, what: str, hint: str) -> None:
    """Raise ``FileExistsError`` when ``path`` exists and is not this program's own (see
    :func:`not_written_here`), naming it, why, and ``hint`` (what the user can do); ``what``
    (the caller) starts the message unless empty."""
    if not (path.exists() or path.is_symlink()):
        return
    reason = not_written_here(path)
    if reason is not None:
        raise FileExistsError(
            f"{what + ': ' if what else ''}'{path}' was not written by transformer-cpp ({reason}); it is left as "
            f"it is: {hint}"
        )


def checkpoint_kind(config: Dict[str, Any]) -> str:
    """The task of the checkpoint whose manifest is ``config`` (translation when it records none)."""
    kind = config.get("kind", TRANSLATION_KIND)
    return kind if isinstance(kind, str) else repr(kind)


def check_kind(ckpt: Path, config: Dict[str, Any], expected: str) -> None:
    """Raise :class:`CheckpointError` when the checkpoint ``ckpt`` (manifest ``config``) was not
    written by task ``expected``, in one line naming what it holds and the commands that read it."""
    kind = checkpoint_kind(config)
    if kind == expected:
        return
    if kind not in _KINDS:
        raise CheckpointError(f"checkpoint '{ckpt}' holds a model of an unknown kind {kind!r}")
    holds, commands = _KINDS[kind]
    wanted = _KINDS[expected][0].split(" (")[0]
    raise CheckpointError(f"'{ckpt}' holds {holds}, not {wanted}: use it with transformer-cpp {commands}")


def _checkpoint_dirs(run: Path) -> List[Path]:
    """Directories of ``run`` named like :func:`checkpoint_name`, oldest first, whatever they hold."""
    if not run.is_dir():
        return []
    found = []
    for child in run.iterdir():
        key = order_key(child.name)
        if key is not None and child.is_dir():
            found.append((key, child))
    return [p for _, p in sorted(found)]


def complete_config(ckpt: Path) -> Optional[Dict[str, Any]]:
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
        return [p for p in dirs if (complete_config(p) or {}).get("run_id") == run_id]
    if complete:
        return [p for p in dirs if complete_config(p) is not None]
    return [p for p in dirs if (p / CONFIG_FILE).is_file()]


def latest_checkpoint(run_dir: PathLike) -> Optional[Path]:
    """The checkpoint that ``run_dir/latest`` names, or ``None`` if the run has no ``latest``.

    Raises:
        CheckpointError: if ``latest`` exists but names no checkpoint directory.
    """
    return follow_pointer(Path(run_dir), LATEST_FILE)


def best_checkpoint(run_dir: PathLike) -> Optional[Path]:
    """The checkpoint that ``run_dir/best`` names (best validation BLEU, possibly the averaged
    one), or ``None`` if the run has no ``best``."""
    return follow_pointer(Path(run_dir), BEST_FILE)


def follow_pointer(run: Path, pointer_name: str) -> Optional[Path]:
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
            target = follow_pointer(p.parent, p.name)  # raises when the pointer is damaged or dangling
            assert target is not None  # p is a file, so follow_pointer found the pointer
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
