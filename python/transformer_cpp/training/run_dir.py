"""A training run's directory: whether it holds a run, its lock, its checkpoints, the ``best``
pointer, and the average of the last checkpoints (the files themselves are
:mod:`transformer_cpp.checkpoint`'s).

With a run directory, the trainer saves a checkpoint after every epoch (the newest
``keep_checkpoints`` of the run are kept; ``best`` always). The state saved is everything the next
step depends on: weights, Adam moments, step count, the dropout masks' counter, the epoch and the
position inside it, the running sums and the history. The batch order is a pure function of
``(seed, epoch)``, so it needs no saved generator state; hence a resumed run produces the same
losses, bit for bit, as a run that was never stopped (with the same thread count).
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Union

from .._checks import path as _path
from ..checkpoint import (
    LATEST_FILE,
    LOCK_FILE,
    check_writable,
    foreign_entries,
    list_checkpoints,
    lock_run,
    mark_best,
)
from .logs import LOG_FILE, TENSORBOARD_DIR

__all__ = ["CONFIG_FILE", "RunDirectory", "SIDE_FILES", "improves"]

#: The options a command-line run ran with (written by ``transformer-cpp train`` and ``train-lm``).
CONFIG_FILE = "config.yaml"
#: What a run writes beside its checkpoints: its options, its CSV log, its TensorBoard events.
SIDE_FILES = (CONFIG_FILE, LOG_FILE, TENSORBOARD_DIR)


def improves(bleu: Optional[float], best: Optional[float]) -> bool:
    """Whether a checkpoint with validation BLEU ``bleu`` becomes the run's best over one with
    ``best``: it has a BLEU, at least as high (on a tie the newer checkpoint wins: it has trained
    longer)."""
    return bleu is not None and (best is None or bleu >= best)


class RunDirectory:
    """The directory of one training run (what ``transformer-cpp train --out`` names).

    Args:
        path: the directory (it need not exist yet).
        what: how messages name it (``"--out"``, ``"Trainer: checkpoint_dir"``).
    """

    def __init__(self, path: Union[str, Path], what: str = "run directory") -> None:
        self.path = _path(what, path)
        self.what = what

    def __repr__(self) -> str:
        return f"RunDirectory({str(self.path)!r})"

    def holds_run(self) -> bool:
        """Whether a run was started here: it has a checkpoint directory (complete or not) or a
        ``latest`` pointer."""
        return bool(list_checkpoints(self.path, complete=False)) or (self.path / LATEST_FILE).exists()

    def check_writable(self) -> Path:
        """Create the directory if needed and check that files can be written in it (before any work,
        not after the first epoch); ``OSError`` naming it otherwise."""
        return check_writable(self.path, self.what)

    def check_own_entries(self) -> None:
        """Refuse, before any work, a directory that holds something of the user's under a name a
        run writes (a checkpoint name, ``averaged``, ``latest``, ``best``, ``.lock``): a run
        never replaces what it did not write. ``FileExistsError`` naming the first such entries."""
        found = foreign_entries(self.path)
        if found:
            listed = "; ".join(f"'{path}' ({reason})" for path, reason in found[:3])
            more = f" and {len(found) - 3} more" if len(found) > 3 else ""
            raise FileExistsError(
                f"{self.what} '{self.path}' holds what transformer-cpp did not write under a name a run "
                f"writes: {listed}{more}; it is left as it is: move it elsewhere, or choose another directory"
            )

    def lock(self) -> "contextlib.AbstractContextManager[Path]":
        """The run's lock for a ``with`` block (:func:`~transformer_cpp.checkpoint.lock_run`): one
        process at a time trains or saves here; ``RunLockedError`` when another holds it."""
        return lock_run(self.path)

    def remove_if_unused(self) -> None:
        """Remove the directory if nothing but its lock file and the files a run writes beside its
        checkpoints (``config.yaml``, ``log.csv``, ``tensorboard/``) is in it: a command that created
        it failed before its first checkpoint. Leave it otherwise, or when it cannot be removed."""
        try:
            if {p.name for p in self.path.iterdir()} <= {LOCK_FILE, *SIDE_FILES}:
                for name in SIDE_FILES:
                    side = self.path / name
                    if side.is_dir() and not side.is_symlink():
                        shutil.rmtree(side)
                    else:
                        side.unlink(missing_ok=True)
                (self.path / LOCK_FILE).unlink(missing_ok=True)
                self.path.rmdir()
        except OSError:
            pass

    @contextlib.contextmanager
    def removed_unless_used(self) -> Iterator["RunDirectory"]:
        """A ``with`` block after which the directory, if the block created it and fails before
        anything but the lock file is written, is removed again."""
        created = not self.path.exists()
        try:
            yield self
        except BaseException:
            if created:
                self.remove_if_unused()
            raise

    def checkpoints(self, run_id: Optional[str] = None) -> List[Path]:
        """The complete checkpoints, oldest first; with ``run_id``, only that run's."""
        return list_checkpoints(self.path, run_id=run_id)

    def mark_best(self, name: str) -> None:
        """Point ``best`` at checkpoint ``name``."""
        mark_best(self.path, name)

    def average_last(
        self, count: int, run_id: str, average: Callable[[Path, Sequence[Path]], Tuple[Path, Any]]
    ) -> Optional[Tuple[Path, Any, int]]:
        """Average the newest ``count`` complete checkpoints of run ``run_id`` into ``averaged``
        with the task's ``average(run directory, checkpoints)``: ``(its path, the averaged model,
        how many were averaged)``, or None with fewer than two."""
        paths = list_checkpoints(self.path, run_id=run_id)[-count:]
        if len(paths) < 2:
            return None
        path, model = average(self.path, paths)
        return path, model, len(paths)
