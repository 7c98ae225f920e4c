"""Training logs that other programs read: ``log.csv`` in the run directory, and TensorBoard event
files in its ``tensorboard/`` directory when the ``tensorboard`` package is installed.

The CSV has a header and one row per history entry (:mod:`.state`): a ``step`` row every
``log_every`` optimiser steps (the loss and accuracy are the token-weighted means over those
steps) and an ``epoch`` row for each epoch's entry and for each validation inside an epoch
(``eval_every``), with the validation values the task gives. Its columns, in order:

    kind, step, epoch, loss, accuracy, lr, tokens_per_second, <the task's validation values:
    val_loss, val_accuracy, val_bleu for translation, val_bpc for the language model>,
    elapsed_seconds

``epoch`` is the position in epochs (fractional inside an epoch); ``tokens_per_second`` counts the
scored target tokens over the steps of the row (a ``step`` row) or of the epoch; ``elapsed_seconds``
is the run's training time so far, over every resume. A value a row does not have is empty.

A resumed run appends to the same file. Rows that its checkpoint does not cover (written after the
checkpoint by a process that was then killed) are dropped first, since the resumed run takes those
steps again; a new run in a directory that holds no checkpoint starts the file afresh.

TensorBoard: with the ``tensorboard`` extra (``pip install transformer-cpp[tensorboard]``), the
same values are written as scalars (``train/loss``, ``train/lr``, ``train/tokens_per_second``,
``epoch/loss``, ``validation/bleu``, ...) by tensorboard's own writer
(``tensorboard.summary.Writer``, which needs neither TensorFlow nor PyTorch), one event file per
process that trains into the run; ``tensorboard --logdir RUN/tensorboard`` shows them. Without the
package the trainer says so once and writes the CSV alone.

Only the process that writes checkpoints writes logs (rank 0 of a data-parallel run); a trainer
without a run directory writes none.
"""

from __future__ import annotations

import csv
import importlib
import io
import logging
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

__all__ = ["LOG_FILE", "TENSORBOARD_DIR", "RunLog", "run_log"]

#: The CSV log of a run directory.
LOG_FILE = "log.csv"
#: The directory of a run's TensorBoard event files.
TENSORBOARD_DIR = "tensorboard"

logger = logging.getLogger(__package__)
_said_unavailable = False  # the line about a missing tensorboard package: once per process

_FIRST = ("kind", "step", "epoch", "loss", "accuracy", "lr", "tokens_per_second")
_LAST = ("elapsed_seconds",)


def columns(metrics: Sequence[str]) -> List[str]:
    """The CSV's columns for a task whose validation gives ``metrics``."""
    return [*_FIRST, *metrics, *_LAST]


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _step_of(row: Mapping[str, str]) -> Optional[int]:
    try:
        return int(row.get("step") or "")
    except ValueError:
        return None


def _tensorboard_writer(directory: Path) -> Any:
    """tensorboard's summary writer into ``directory``, or None without the package (said once)."""
    global _said_unavailable
    try:
        summary = importlib.import_module("tensorboard.summary")
    except ImportError:
        if not _said_unavailable:
            logger.info("TensorBoard logs: not written (pip install tensorboard to have them); log.csv is")
            _said_unavailable = True
        return None
    directory.mkdir(parents=True, exist_ok=True)
    return summary.Writer(str(directory))


class RunLog:
    """The logs of one :meth:`Trainer.fit <transformer_cpp.training.Trainer.fit>` into run directory ``run``.

    Args:
        run: the run directory.
        metrics: the task's validation values (the CSV's columns between ``tokens_per_second``
            and ``elapsed_seconds``).
        start_step: the model's step when the fit starts: rows of later steps already in the
            file are dropped (they are trained again).
        tensorboard: also write TensorBoard event files (when the package is installed).
    """

    def __init__(self, run: Path, metrics: Sequence[str], start_step: int, tensorboard: bool = True) -> None:
        self.path = Path(run) / LOG_FILE
        self.columns = columns(metrics)
        self.start_step = int(start_step)
        self.tensorboard = tensorboard
        self._opened = False
        self._writer: Any = None
        self._tokens = 0
        self._seconds = 0.0

    # -------------------------------------------------------------------------------- the file

    def _open(self) -> None:
        """Make the file ready to append to: its header, and only the rows the run's state covers."""
        self._opened = True
        if self.path.exists():
            with open(self.path, newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                header = list(reader.fieldnames or [])
                rows = list(reader)
            kept = [r for r in rows if (_step_of(r) or 0) <= self.start_step] if self.start_step else []
            if header == self.columns and len(kept) == len(rows):
                self._open_tensorboard()
                return
            self._rewrite(kept)
        else:
            self._rewrite([])
        self._open_tensorboard()

    def _rewrite(self, rows: Sequence[Mapping[str, str]]) -> None:
        text = io.StringIO()
        out = csv.DictWriter(text, self.columns, extrasaction="ignore", lineterminator="\n")
        out.writeheader()
        out.writerows(rows)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(text.getvalue(), encoding="utf-8")
        os.replace(temporary, self.path)

    def _open_tensorboard(self) -> None:
        if self.tensorboard:
            self._writer = _tensorboard_writer(self.path.parent / TENSORBOARD_DIR)

    def _append(self, values: Mapping[str, Any]) -> None:
        if not self._opened:
            self._open()
        line = io.StringIO()
        csv.writer(line, lineterminator="\n").writerow([_cell(values.get(c)) for c in self.columns])
        with open(self.path, "a", encoding="utf-8", newline="") as f:
            f.write(line.getvalue())

    def _scalars(self, prefix: str, values: Mapping[str, Any], step: int) -> None:
        if self._writer is None:
            return
        for key, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                if key.startswith("val_"):
                    tag = "validation/" + key[4:]
                else:
                    tag = f"{prefix}/{key}"
                self._writer.add_scalar(tag, float(value), step=int(step))

    # -------------------------------------------------------------------------------- the rows

    def count(self, tokens: int, seconds: float) -> None:
        """One optimiser step of ``tokens`` scored tokens in ``seconds``: the next ``step`` row's rate."""
        self._tokens += int(tokens)
        self._seconds += float(seconds)

    def step(self, step: int, epoch: float, loss: float, accuracy: float, lr: float, elapsed: float) -> None:
        """A ``step`` row: the history's batch entry of ``step`` (the steps counted since the last one)."""
        rate = self._tokens / self._seconds if self._seconds > 0 else None
        self._tokens, self._seconds = 0, 0.0
        values = {"loss": loss, "accuracy": accuracy, "lr": lr, "tokens_per_second": rate}
        self._append({"kind": "step", "step": step, "epoch": round(epoch, 4), **values, "elapsed_seconds": elapsed})
        self._scalars("train", values, step)

    def epoch(self, entry: Mapping[str, Any], elapsed: float) -> None:
        """An ``epoch`` row: an epoch's (or a validation's) history entry."""
        self._append({**entry, "kind": "epoch", "elapsed_seconds": elapsed})
        shown = {k: entry.get(k) for k in self.columns if k not in ("kind", "step", "epoch", "elapsed_seconds")}
        self._scalars("epoch", {**shown, "number": entry.get("epoch")}, int(entry["step"]))
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close the TensorBoard writer (the CSV is written row by row)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> "RunLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _NoLog(RunLog):
    """The logs of a trainer that writes none (no run directory, or not rank 0)."""

    def __init__(self) -> None:
        super().__init__(Path("."), (), 0, False)

    def _append(self, values: Mapping[str, Any]) -> None:
        pass


def run_log(trainer: Any) -> RunLog:
    """The logs of a fit of ``trainer``: into its run directory, else none."""
    if trainer.run_dir is None:
        return _NoLog()
    return RunLog(trainer.run_dir.path, trainer.task.metrics, trainer.model.step)


def read_log(path: Path) -> List[Dict[str, str]]:
    """The rows of a ``log.csv`` as dicts of text (for tests and tools)."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))
