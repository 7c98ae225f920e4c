"""What the :class:`~.trainer.Trainer` asks of a task: the small interface through which one epoch
loop, time budget, schedule, thread governor, progress bar, history and run directory train both
the translator (:class:`~.pairs.PairsTask`) and the language model
(:class:`transformer_cpp.task.language_model.LmTask`).

A task says what a batch is and how a step takes it, what validation measures, which validation
value ranks checkpoints, and what a checkpoint holds besides the trainer's state. The trainer
never asks which task it trains.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from ..data import Batch

__all__ = ["CheckpointRequest", "StepOutcome", "TrainingTask"]


@dataclass(frozen=True)
class StepOutcome:
    """What one optimiser step of a task gives the epoch loop."""

    loss: float  # mean over the step's scored tokens, in nats
    accuracy: float  # share of those tokens predicted right (NaN when the task does not count it)
    tokens: int  # scored tokens (the weights of the running means)
    work: int  # tokens this process fed the model: what the thread governor times


@dataclass(frozen=True)
class CheckpointRequest:
    """What the trainer asks of a checkpoint besides the model: where it goes and what it records."""

    run_dir: Path  # the run directory
    trainer_state: Mapping[str, Any]  # what the trainer needs to continue exactly (Trainer.state_dict)
    train_config: Mapping[str, Any]  # the training settings, as TrainConfig.to_dict gives them
    keep: int  # keep only the run's newest ``keep`` complete checkpoints (0: all)
    run_id: str  # the run the checkpoint belongs to (pruning deletes only that run's)
    best: bool  # point ``best`` at it too

    def keywords(self) -> Dict[str, Any]:
        """Every field but ``run_dir``: the keywords that the checkpoint writers
        (``save_checkpoint``, ``save_lm_checkpoint``) take."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "run_dir"}


class TrainingTask(abc.ABC):
    """One task's side of training.

    Attributes:
        kind: the task's name, as checkpoints record it.
        metrics: the validation values :meth:`validate` may give, as the history's ``epoch``
            section names them (``val_loss``, ``val_bpc``, ...).
        unit: what the progress bar counts.
    """

    kind: str = ""
    metrics: Tuple[str, ...] = ()
    unit: str = "batch"

    @abc.abstractmethod
    def batch_plan(self, epoch: int, config: Any) -> Sequence[Any]:
        """The batches of 0-based ``epoch`` in training order, each as :meth:`step` takes it (a
        pure function of the data, ``config`` and ``epoch``, so that a resumed run repeats it)."""

    @abc.abstractmethod
    def step(self, model: Any, batch: Any) -> StepOutcome:
        """One optimiser step of ``model`` on ``batch``.

        Raises:
            FloatingPointError: the loss or the update is not finite; nothing was updated.
        """

    def accumulated_step(self, model: Any, batches: Sequence[Any]) -> StepOutcome:
        """One optimiser step of ``model`` from the gradients of ``batches`` together (gradient
        accumulation, :mod:`.accumulate`): the step on their concatenation, the loss averaged
        over all their tokens. One batch: :meth:`step`.

        Raises:
            FloatingPointError: a loss or the update is not finite; nothing was updated.
        """
        if len(batches) == 1:
            return self.step(model, batches[0])
        raise ValueError(f"gradient accumulation is not available for the {self.kind} task")

    def parallel_batch(self, batch: Any) -> Batch:
        """The ``Batch`` of ``batch`` (a share of a global batch) for a data-parallel step."""
        raise ValueError(f"data-parallel training is not available for the {self.kind} task")

    @abc.abstractmethod
    def validate(self, model: Any, config: Any) -> Dict[str, float]:
        """The validation values of ``model`` now, by their :attr:`metrics` names (none: {}).

        Raises:
            FloatingPointError: a value is not finite.
        """

    #: What :meth:`score` measures, as messages name it.
    score_name: str = "score"
    #: Whether an average of checkpoints that no score ranks becomes the run's ``best``.
    unscored_average_is_best: bool = True

    def score(self, entry: Mapping[str, Any]) -> Optional[float]:
        """The value of a history entry that ranks checkpoints for ``best`` (higher is better), or
        None when the task ranks none."""
        return None

    def has_score(self, config: Any) -> bool:
        """Whether validation under ``config`` gives :meth:`score` a value (what early stopping
        compares)."""
        return False

    def shown_score(self, value: float) -> str:
        """A :meth:`score` as messages show it."""
        return f"{value:.2f}"

    def score_model(self, model: Any, config: Any) -> Optional[float]:
        """:meth:`score` of ``model`` itself (an average of checkpoints, say), or None."""
        return None

    def fingerprints(self) -> Dict[str, Optional[str]]:
        """Short hashes of the training and validation data (``train``, ``valid``): a resume
        with other data is refused."""
        return {"train": None, "valid": None}

    def postfix(self, sums: Mapping[str, float]) -> Dict[str, str]:
        """What the progress bar shows of the epoch's token-weighted sums (``loss``, ``correct``,
        ``tokens``)."""
        n = max(sums["tokens"], 1)
        return {"loss": f"{sums['loss'] / n:.4f}", "acc": f"{sums['correct'] / n:.4f}"}

    def describe(self, entry: Mapping[str, Any]) -> str:
        """An epoch's (or a validation's) history entry in words, for its progress line."""
        text = f"loss {entry['loss']:.4f}, acc {entry['accuracy']:.4f}"
        for key in self.metrics:
            if key in entry:
                text += f", {key} {entry[key]:.4f}"
        return text

    @abc.abstractmethod
    def save(self, model: Any, request: CheckpointRequest) -> Path:
        """Write a resumable checkpoint of ``model`` as ``request`` asks (into its run directory,
        named by the trainer state's position, ``latest`` moved, the oldest of the run pruned
        beyond ``keep``)."""

    @abc.abstractmethod
    def average(self, run_dir: Path, paths: Sequence[Path]) -> Tuple[Path, Any]:
        """Average the weights of the checkpoints ``paths`` into ``run_dir/averaged``:
        ``(its path, the averaged model)``."""
