"""The trainer's books: the history, the token-weighted running sums, and the checks that a saved
trainer state passes before a resume takes any of it.

Loss and accuracy are *token-weighted*: a batch with 600 target tokens weighs 600 times as much as
one token, so an epoch's value is the mean over its tokens, whatever the batch sizes. The history
is a dict that :func:`transformer_cpp.plotting.history_plot` draws::

    {"batch": {"step": [...], "loss": [...], "accuracy": [...], "lr": [...]},
     "epoch": {"epoch": [...], "step": [...], "loss": [...], "accuracy": [...],
               "val_loss": [...], "val_accuracy": [...], "val_bleu": [...], "lr": [...],
               "seconds": [...], "minutes": [...], "tokens_per_second": [...]}}

``batch`` gets one entry every ``log_every`` optimiser steps: the token-weighted mean over those
steps and the learning rate of the last one. ``seconds`` is the wall-clock time of an epoch's
training steps (validation and checkpointing excluded); ``tokens_per_second`` is target
(non-padding label) tokens per second of that time.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .._checks import integer as _integer, number as _number
from ..data import EncodedPairs

__all__ = [
    "STATE_FORMAT",
    "STATE_VERSION",
    "RunningSums",
    "checked_state",
    "data_fingerprint",
    "empty_history",
    "world_size_problem",
]

STATE_FORMAT = "transformer_cpp.trainer_state"
STATE_VERSION = 1


#: The validation series of a translation run's history (another task names its own).
TRANSLATION_METRICS = ("val_loss", "val_accuracy", "val_bleu")


def empty_history(metrics: Sequence[str] = TRANSLATION_METRICS) -> Dict[str, Dict[str, List[Any]]]:
    """A history with every series present and empty: the training series and the task's
    validation ``metrics`` (by default translation's)."""
    history: Dict[str, Dict[str, List[Any]]] = {
        "batch": {"step": [], "loss": [], "accuracy": [], "lr": []},
        "epoch": {
            "epoch": [],
            "step": [],
            "loss": [],
            "accuracy": [],
            **{key: [] for key in metrics},
            "lr": [],
            "seconds": [],
            "minutes": [],
            "tokens_per_second": [],
        },
    }
    return history


def data_fingerprint(encoded: Optional[EncodedPairs]) -> Optional[str]:
    """A short hash of the token ids, to catch resuming with different data."""
    if encoded is None:
        return None
    h = hashlib.sha256()
    for array in (encoded.src, encoded.tgt):
        a = np.ascontiguousarray(array, dtype=np.int64)
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def world_size_problem(saved: Any, current: int) -> Optional[str]:
    """Why a run trained as ``saved`` processes (a trainer state's ``world_size``) cannot continue
    as ``current`` ones, or None when it can (the same number)."""
    if isinstance(saved, bool) or not isinstance(saved, int) or saved < 1:
        return f"Trainer.load_state_dict: damaged trainer state (world_size must be an integer >= 1, got {saved!r:.40})"
    if saved == current:
        return None
    how = f"mpiexec -n {saved}" if saved > 1 else "one process (without mpiexec)"
    return (
        f"Trainer: the run was trained as {saved} process(es) and this launch has {current}: the batches would "
        f"be split and the dropout masks drawn differently, so it would not continue the same run; resume it "
        f"with {how}"
    )


def _zero_sums() -> Dict[str, float]:
    return {"loss": 0.0, "correct": 0.0, "tokens": 0}


class RunningSums:
    """The token-weighted sums of the epoch in progress and of the window of steps since the last
    ``batch`` entry of the history, and the seconds of the epoch's steps."""

    def __init__(self) -> None:
        self.epoch = _zero_sums()
        self.epoch_seconds = 0.0
        self.window = _zero_sums()
        self.window_steps = 0

    def add(self, loss: float, accuracy: float, tokens: int, log_every: int) -> Optional[Tuple[float, float]]:
        """Count one step; when it completes a window of ``log_every`` steps, the window's mean loss
        and accuracy (and a new window starts)."""
        for sums in (self.epoch, self.window):
            sums["loss"] += loss * tokens
            sums["correct"] += accuracy * tokens
            sums["tokens"] += tokens
        self.window_steps += 1
        if self.window_steps < log_every:
            return None
        w = self.window
        n = max(w["tokens"], 1)
        self.window = _zero_sums()
        self.window_steps = 0
        return w["loss"] / n, w["correct"] / n

    def epoch_means(self) -> Dict[str, float]:
        """The epoch's ``loss``, ``accuracy``, ``seconds`` and ``tokens_per_second`` so far."""
        s = self.epoch
        n = max(s["tokens"], 1)
        seconds = self.epoch_seconds
        return {
            "loss": s["loss"] / n,
            "accuracy": s["correct"] / n,
            "seconds": seconds,
            "tokens_per_second": s["tokens"] / seconds if seconds > 0 else 0.0,
        }

    def new_epoch(self) -> None:
        self.epoch = _zero_sums()
        self.epoch_seconds = 0.0

    def state(self) -> Dict[str, Any]:
        """The sums as a trainer state holds them."""
        return {
            "epoch_sums": dict(self.epoch),
            "epoch_seconds": self.epoch_seconds,
            "window": dict(self.window),
            "window_steps": self.window_steps,
        }

    def load(self, values: Mapping[str, Any]) -> None:
        """Take the sums of :func:`checked_state`'s values."""
        self.epoch, self.epoch_seconds = values["epoch_sums"], values["epoch_seconds"]
        self.window, self.window_steps = values["window"], values["window_steps"]


def _state_number(state: Mapping[str, Any], key: str, integer: bool, default: Any = None, where: str = "") -> Any:
    """``state[key]`` if it is a finite number >= 0 (an integer with ``integer``); else ValueError
    naming ``where + key``."""
    value = state.get(key, default) if default is not None else state[key]
    return _integer("", where + key, value) if integer else _number("", where + key, value, 0)


def _state_sums(state: Mapping[str, Any], key: str) -> Dict[str, float]:
    sums = state[key]
    if not isinstance(sums, Mapping):
        raise ValueError(f"{key} must be an object, got {type(sums).__name__}")
    where = f"{key}."
    for k in ("loss", "correct", "tokens"):
        if k not in sums:
            raise KeyError(f"{where}{k}")
    return {
        "loss": _state_number(sums, "loss", False, where=where),
        "correct": _state_number(sums, "correct", False, where=where),
        "tokens": _state_number(sums, "tokens", True, where=where),
    }


def _checked_values(state: Mapping[str, Any], metrics: Sequence[str]) -> Dict[str, Any]:
    """The values of a trainer state, each checked for its type and range (a damaged or edited
    trainer_state.json must not resume a run from a negative epoch, or with text for numbers)."""
    best = state.get("best") or {}
    if not isinstance(best, Mapping):
        raise ValueError(f"best must be an object, got {type(best).__name__}")
    bleu, name = best.get("bleu"), best.get("checkpoint")
    if bleu is not None and (isinstance(bleu, bool) or not isinstance(bleu, (int, float)) or not math.isfinite(bleu)):
        raise ValueError(f"best.bleu must be a finite number or null, got {bleu!r:.40}")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"best.checkpoint must be a checkpoint name or null, got {name!r:.40}")
    since = best.get("since", 0)  # (a state written before early stopping has none)
    if isinstance(since, bool) or not isinstance(since, int) or since < 0:
        raise ValueError(f"best.since must be an integer >= 0, got {since!r:.40}")
    finished = state.get("finished", False)
    if not isinstance(finished, bool):
        raise ValueError(f"finished must be true or false, got {finished!r:.40}")
    saved_history = state["history"]
    if not isinstance(saved_history, Mapping):
        raise ValueError(f"history must be an object, got {type(saved_history).__name__}")
    history = empty_history(metrics)
    for section, series in history.items():
        saved = saved_history.get(section, {})
        if not isinstance(saved, Mapping):
            raise ValueError(f"history.{section} must be an object, got {type(saved).__name__}")
        for key in series:
            values = saved.get(key, [])
            if not isinstance(values, list):
                raise ValueError(f"history.{section}.{key} must be a list, got {type(values).__name__}")
            for v in values:
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                    raise ValueError(f"history.{section}.{key} must be a list of numbers, it holds {v!r:.40}")
            series[key] = list(values)
    step = state.get("step")
    if step is not None:
        step = _state_number(state, "step", True)
    if state.get("dropout_calls") is not None:
        _state_number(state, "dropout_calls", True)
    run_id = state.get("run_id")
    if run_id is not None and not isinstance(run_id, str):
        raise ValueError(f"run_id must be a string or null, got {run_id!r:.40}")
    return {
        "epoch": _state_number(state, "epoch", True),
        "batch_in_epoch": _state_number(state, "batch_in_epoch", True),
        "epoch_sums": _state_sums(state, "epoch_sums"),
        "epoch_seconds": _state_number(state, "epoch_seconds", False),
        "window": _state_sums(state, "window"),
        "window_steps": _state_number(state, "window_steps", True),
        "elapsed": _state_number(state, "elapsed", False, 0.0),
        "finished": finished,
        "best": {"bleu": bleu, "checkpoint": name, "since": since},
        "history": history,
        "step": step,
        "run_id": run_id if isinstance(run_id, str) and run_id else None,
    }


def checked_state(
    state: Mapping[str, Any],
    fingerprints: Mapping[str, Optional[str]],
    world_size: int,
    metrics: Sequence[str] = TRANSLATION_METRICS,
) -> Dict[str, Any]:
    """The values of a trainer state (what ``Trainer.state_dict`` returned, perhaps read back from
    a checkpoint), each checked for its type and range, for a trainer with data of these
    ``fingerprints`` (:func:`data_fingerprint`) on ``world_size`` processes, whose task validates
    ``metrics``.

    Raises:
        ValueError: not a trainer state, another version, other data, another number of
            processes, or a damaged value (naming it).
    """
    if not isinstance(state, Mapping):
        raise ValueError("Trainer.load_state_dict: not a transformer_cpp trainer state")
    if state.get("format") != STATE_FORMAT:
        raise ValueError(
            f"Trainer.load_state_dict: not a transformer_cpp trainer state (its format is {state.get('format')!r:.40}, "
            f"expected {STATE_FORMAT!r})"
        )
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"Trainer.load_state_dict: unsupported trainer state version {state.get('version')!r}")
    saved = state.get("data_fingerprint") or {}
    if not isinstance(saved, Mapping) or any(
        not isinstance(saved.get(p), (str, type(None))) for p in ("train", "valid")
    ):
        raise ValueError(
            f"Trainer.load_state_dict: damaged trainer state (data_fingerprint must be an object of digests, "
            f"got {saved!r:.60})"
        )
    for part in ("train", "valid"):
        if saved.get(part) is not None and fingerprints[part] is not None and saved[part] != fingerprints[part]:
            raise ValueError(
                f"Trainer: the {part} data differ from those the checkpoint was trained on (different file, "
                "number of samples, split, tokenizers or max_length); resuming would not continue the same run"
            )
    try:
        values = _checked_values(state, metrics)
    except KeyError as exc:
        raise ValueError(f"Trainer.load_state_dict: damaged trainer state (it lacks {exc})") from None
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"Trainer.load_state_dict: damaged trainer state ({exc})") from None
    problem = world_size_problem(state.get("world_size", 1), world_size)
    if problem is not None:
        raise ValueError(problem)
    return values
