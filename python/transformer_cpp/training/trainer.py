"""The epoch loop: :class:`Trainer` feeds the model a task's batches, keeps the history, fits the
learning-rate schedule to a time budget or a step limit and validates after each epoch (and every
``eval_every`` steps when set).

What a step sees is the task's business (:mod:`.task`): shuffled sentence pairs for translation
(:mod:`.pairs`, what the constructor trains), windows of text for the language model
(:meth:`Trainer.for_task`). Where the steps run (this process, or MPI ranks) is :mod:`.steps`' business,
what is saved where is :mod:`.run_dir`'s, the history and the running sums are :mod:`.state`'s.

Divergence. When a step's loss (or its gradient norm) is NaN or infinite, the core refuses the
step and changes nothing (``transformer_cpp.NonFiniteError``); a NaN loss returned by a model, or
a non-finite validation loss, counts the same. :meth:`Trainer.fit` then saves the state before
that step (unless its weights are not finite: checkpoints never hold NaN or infinity) and raises
:class:`~.config.TrainingDiverged`, which names the step and the checkpoint.

Ctrl-C. The first Ctrl-C lets the current batch finish, writes a checkpoint of that exact position
(named ``epoch-000E-batch-00000B``) and raises :class:`~.config.TrainingInterrupted` (a
``KeyboardInterrupt``). Resuming from it skips the ``B`` batches of epoch ``E`` already done and
continues with the same order, so an interrupted run too is resumed exactly. A second Ctrl-C
stops at once without a new checkpoint (the last saved one is intact).
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .._runtime import ThreadGovernor, set_num_threads
from ..checkpoint import Checkpoint
from ..data import Batch, EncodedPairs
from ..translate import evaluate_loss
from .config import TrainConfig
from .run_dir import RunDirectory
from .pairs import PairsTask, check_types, no_batch_message, resume_pairs
from .state import STATE_FORMAT, STATE_VERSION, RunningSums, checked_state, empty_history
from .loop import Fit, average_last, configure_model
from .steps import steps_for
from .task import CheckpointRequest, TrainingTask

__all__ = ["Trainer"]

History = Dict[str, Dict[str, List[Any]]]


class Trainer:
    """Trains a :class:`~transformer_cpp.model.Transformer` on encoded sentence pairs.

    Args:
        model: the model; its optimiser is configured from ``config`` (warm-up schedule, Adam
            betas/eps, clipping, label smoothing).
        train_data: training pairs from :func:`transformer_cpp.data.encode_pairs`.
        valid_data: validation pairs (loss and accuracy after each epoch), or ``None``.
        config: the :class:`TrainConfig` (default settings if ``None``).
        src_tokenizer, tgt_tokenizer: needed to write checkpoints (they are saved with them).
        checkpoint_dir: the run directory for a checkpoint after every epoch, or ``None``; one
            that holds something of the user's under a name a run writes (a directory
            ``epoch-0002`` without a checkpoint manifest, say) is refused at once with
            ``FileExistsError`` naming it.
        data_info: JSON-serialisable description of the data (file, number of pairs, split seed,
            fractions, languages...), stored in each checkpoint so that the split can be rebuilt.
        parallel: a :class:`~transformer_cpp.distributed.DataParallel` to train on several
            processes (rank 0 alone validates, reports and writes checkpoints), or None.

    Attributes:
        epoch: complete epochs so far. batch_in_epoch: batches done of the epoch in progress.
        history: see :mod:`transformer_cpp.training.state`.
        last_checkpoint: the newest checkpoint written (or loaded), or ``None``.
        elapsed: seconds of training so far (what the time budget counts), over every fit and resume.
        finished: the time budget is spent (or early stopping stopped the run). best: the best
            validation BLEU so far, its checkpoint, and the validations since (``since``).
    """

    def __init__(
        self,
        model: Any,
        train_data: EncodedPairs,
        valid_data: Optional[EncodedPairs] = None,
        config: Optional[TrainConfig] = None,
        *,
        src_tokenizer: Any = None,
        tgt_tokenizer: Any = None,
        checkpoint_dir: Union[str, Path, None] = None,
        data_info: Optional[Mapping[str, Any]] = None,
        parallel: Any = None,
    ) -> None:
        check_types(train_data, valid_data)
        if checkpoint_dir is not None and (src_tokenizer is None or tgt_tokenizer is None):
            raise ValueError(
                "Trainer: checkpoint_dir needs src_tokenizer and tgt_tokenizer (they are saved with the model)"
            )
        self._setup(
            model,
            lambda: PairsTask(model, train_data, valid_data, src_tokenizer, tgt_tokenizer, data_info),
            config,
            checkpoint_dir,
            parallel,
        )

    @classmethod
    def for_task(
        cls,
        model: Any,
        task: TrainingTask,
        config: Optional[TrainConfig] = None,
        *,
        checkpoint_dir: Union[str, Path, None] = None,
        parallel: Any = None,
    ) -> "Trainer":
        """A trainer of ``model`` on ``task`` (a :class:`~.task.TrainingTask`: the language
        model's, say); the arguments otherwise as for the constructor, which trains the
        translation task on encoded pairs."""
        if not isinstance(task, TrainingTask):
            raise TypeError(f"Trainer.for_task: task must be a TrainingTask, got {type(task).__name__}")
        trainer = cls.__new__(cls)
        trainer._setup(model, lambda: task, config, checkpoint_dir, parallel)
        return trainer

    def _setup(
        self,
        model: Any,
        make_task: Callable[[], TrainingTask],
        config: Optional[TrainConfig],
        checkpoint_dir: Union[str, Path, None],
        parallel: Any,
    ) -> None:
        self._steps = steps_for(parallel)
        self.parallel = self._steps.parallel  # None in one process
        self.config = config if config is not None else TrainConfig()
        if not isinstance(self.config, TrainConfig):
            raise TypeError(f"Trainer: config must be a TrainConfig, got {type(self.config).__name__}")
        self.model = model
        self.run_dir: Optional[RunDirectory] = None  # rank 0 alone writes checkpoints
        if checkpoint_dir is not None and self._steps.is_root:
            self.run_dir = RunDirectory(checkpoint_dir, "Trainer: checkpoint_dir")
            self.run_dir.check_writable()  # before any work, not after an epoch
            self.run_dir.check_own_entries()  # nothing of the user's under a name a run writes
        self.task = make_task()
        configure_model(model, self.config)
        self._steps.seed_dropout(model)
        self.epoch = 0
        self.batch_in_epoch = 0
        self.history: History = empty_history(self.task.metrics)
        self.last_checkpoint: Optional[Path] = None
        self._sums = RunningSums()
        self._governor: Optional[ThreadGovernor] = None  # one per Trainer: what it learnt carries over
        self._fingerprints = self.task.fingerprints()
        self.elapsed = 0.0
        self.finished = False
        # the task's score (BLEU) and where; "since": validations since a better one (early stopping)
        self.best: Dict[str, Any] = {"bleu": None, "checkpoint": None, "since": 0}
        self.run_id = uuid.uuid4().hex[:16]  # recorded in each checkpoint: pruning deletes only this run's
        _check_plan(self)

    # the translation task's data and tokenizers (None for another task)
    train_data = property(lambda self: getattr(self.task, "train_data", None))
    valid_data = property(lambda self: getattr(self.task, "valid_data", None))
    src_tokenizer = property(lambda self: getattr(self.task, "src_tokenizer", None))
    tgt_tokenizer = property(lambda self: getattr(self.task, "tgt_tokenizer", None))
    data_info = property(lambda self: getattr(self.task, "data_info", None))

    @property
    def checkpoint_dir(self) -> Optional[Path]:
        """The run directory that checkpoints go to (None without one, and off rank 0)."""
        return None if self.run_dir is None else self.run_dir.path

    @property
    def world_size(self) -> int:
        """Processes that train together (MPI ranks; 1 without data parallelism)."""
        return self._steps.world_size

    @property
    def batches_per_epoch(self) -> int:
        """Batches in the current epoch (with ``max_tokens`` the count varies a little): its optimiser
        steps, or with ``accumulate`` N, N times as many."""
        return len(self.batch_plan(self.epoch))

    def batch_plan(self, epoch: int) -> Sequence[Any]:
        """The batches of 0-based ``epoch``, in order, as the task takes them (a pure function of
        the data, the settings and ``epoch``): the training rows of each batch for translation."""
        return self.task.batch_plan(epoch, self.config)

    def epoch_batches(self, epoch: int) -> Iterator[Batch]:
        """The batches of 0-based ``epoch`` in training order (what :meth:`fit` feeds the model)."""
        return (self.task.parallel_batch(idx) for idx in self.batch_plan(epoch))

    # ------------------------------------------------------------------ state

    def state_dict(self) -> Dict[str, Any]:
        """Everything besides the model needed to continue exactly (JSON-serialisable)."""
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "step": self.model.step,
            "dropout_calls": self.model.dropout_calls,
            **self._sums.state(),
            "history": self.history,
            "data_fingerprint": dict(self._fingerprints),
            "elapsed": self.elapsed,
            "finished": self.finished,
            "best": dict(self.best),
            "run_id": self.run_id,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (the model's weights and optimiser are separate).

        Raises:
            ValueError: if the state is not a trainer state, or was made with other data.
        """
        values = checked_state(state, self._fingerprints, self.world_size, self.task.metrics)
        _check_position(self, values)
        # every value checked: now the trainer changes, all at once
        self.epoch, self.batch_in_epoch = values["epoch"], values["batch_in_epoch"]
        self._sums.load(values)
        self.elapsed, self.finished, self.best = values["elapsed"], values["finished"], values["best"]
        if values["run_id"] is not None:
            self.run_id = values["run_id"]
        self.history = values["history"]

    @classmethod
    def from_checkpoint(
        cls,
        path: Union[str, Path, Checkpoint],
        train_data: EncodedPairs,
        valid_data: Optional[EncodedPairs] = None,
        *,
        checkpoint_dir: Union[str, Path, None] = None,
        epochs: Optional[int] = None,
        threads: Optional[int] = None,
        progress: Optional[bool] = None,
        time_budget: Optional[float] = None,
        keep_checkpoints: Optional[int] = None,
        average_last: Optional[int] = None,
        patience: Optional[int] = None,
        parallel: Any = None,
    ) -> "Trainer":
        """A trainer that continues the run saved at ``path`` (a run directory, one checkpoint
        directory, or a :class:`~transformer_cpp.checkpoint.Checkpoint` loaded with its optimiser).

        ``train_data`` and ``valid_data`` must be the same encoded pairs as in the saved run
        (checked with a hash). The model, tokenizers, optimiser state, settings and history come
        from the checkpoint; ``epochs`` (the total to reach), ``threads``, ``progress``,
        ``time_budget``, ``keep_checkpoints``, ``average_last`` and ``patience`` may be changed (None keeps the
        run's). New checkpoints go to ``checkpoint_dir``, by default the run
        directory that holds ``path``. ``parallel`` (a
        :class:`~transformer_cpp.distributed.DataParallel`) must have as many ranks as the run had.

        Raises:
            transformer_cpp.checkpoint.CheckpointError: a damaged checkpoint or one without
                optimiser or trainer state.
            ValueError: different data.
        """
        changes = dict(epochs=epochs, threads=threads, progress=progress, time_budget=time_budget)
        changes.update(keep_checkpoints=keep_checkpoints, average_last=average_last, patience=patience)
        trainer: Trainer = resume_pairs(cls, path, train_data, valid_data, changes, checkpoint_dir, parallel)
        return trainer

    def save_checkpoint(self, best: bool = False) -> Path:
        """Write a checkpoint of the current position into ``checkpoint_dir``; return its path.
        With ``best``, ``best`` names it too (set before the oldest checkpoints are pruned)."""
        if self.run_dir is None:
            raise ValueError("Trainer.save_checkpoint: no checkpoint_dir was given")
        request = CheckpointRequest(
            self.run_dir.path, self.state_dict(), self.config.to_dict(), self.config.keep_checkpoints, self.run_id, best
        )
        self.last_checkpoint = self.task.save(self.model, request)
        return self.last_checkpoint

    def average_checkpoints(self) -> Optional[Path]:
        """Average the newest ``average_last`` complete checkpoints of this run into
        ``<run>/averaged``; point ``best`` at it when its validation BLEU beats the best
        checkpoint's (or when there is no BLEU)."""
        return average_last(self)

    # ------------------------------------------------------------------ validation

    def evaluate(self, data: Optional[EncodedPairs] = None) -> Tuple[float, float]:
        """Masked loss and accuracy (token-weighted) on ``data`` (default: the validation pairs)."""
        data = self.valid_data if data is None else data
        if data is None:
            raise ValueError("Trainer.evaluate: no data (and no valid_data was given)")
        loss, acc, _ = evaluate_loss(self.model, data, self.config.batch_size)
        return loss, acc

    def validation_bleu(self, model: Any = None) -> Optional[float]:
        """The task's validation score of ``model`` (default the trainer's): for translation the
        greedy corpus BLEU (sacrebleu) on ``val_bleu_sentences`` validation pairs (evenly spread),
        or ``None`` without validation pairs, a target tokenizer or ``val_bleu_sentences``. The
        references are the encoded targets decoded back to text (exact for these tokenizers)."""
        return self.task.score_model(self.model if model is None else model, self.config)

    # ------------------------------------------------------------------ training

    def fit(
        self,
        epochs: Optional[int] = None,
        *,
        on_batch_end: Optional[Callable[["Trainer"], None]] = None,
        on_epoch_end: Optional[Callable[["Trainer", Dict[str, Any]], None]] = None,
    ) -> History:
        """Train until ``epochs`` (default ``config.epochs``) epochs are complete or the time budget
        is spent; return the history.

        Continues from the current position, so calling ``fit`` again after an interruption, or
        on a trainer from :meth:`from_checkpoint`, picks up where training stopped.
        ``on_batch_end(trainer)`` runs after each step, ``on_epoch_end(trainer, entry)`` after each
        epoch (after the checkpoint).

        Time budget (``config.time_budget`` minutes): the clock counts everything ``fit`` does
        (steps, validation, checkpoints) and carries over a resume. The decay of the learning
        rate (``config.decay``) is fitted to the steps that the measured speed allows, refitted
        every 50 steps, and training stops on time with a checkpoint, possibly inside an epoch.

        With ``checkpoint_dir``, the run directory's lock is held throughout (see
        :func:`~transformer_cpp.checkpoint.lock_run`): another process cannot train into it meanwhile.

        Raises:
            TrainingInterrupted: on Ctrl-C, after saving a checkpoint (see the module docstring).
            TrainingDiverged: the loss or the gradient became NaN or infinite; the step that did
                it changed nothing, and the state before it is saved (when its weights are finite).
            transformer_cpp.checkpoint.RunLockedError: another process is training in ``checkpoint_dir``.
        """
        with self.run_dir.lock() if self.run_dir is not None else contextlib.nullcontext():
            try:
                return Fit(self, epochs, on_batch_end, on_epoch_end).run()
            finally:
                if self._governor is not None:  # leave the core with the threads it was given
                    set_num_threads(self._governor.most)


def _check_plan(trainer: Trainer) -> None:
    """``ValueError`` when the run cannot train as configured: no batch to train on, gradient
    accumulation with data parallelism, or early stopping without a validation score."""
    config = trainer.config
    if not trainer.batch_plan(0):
        raise ValueError(no_batch_message(getattr(trainer.task, "train_data", None), config))
    if config.accumulate > 1 and trainer.world_size > 1:
        raise ValueError(
            f"Trainer: accumulate {config.accumulate} is not available with data parallelism "
            f"({trainer.world_size} processes); use accumulate=1 or a larger batch"
        )
    if config.patience and not trainer.task.has_score(config):
        raise ValueError(
            f"Trainer: patience {config.patience} needs a validation {trainer.task.score_name} to compare "
            "(for translation: validation pairs and val_bleu_sentences > 0); set patience=0 or give them"
        )


def _check_position(trainer: Trainer, values: Mapping[str, Any]) -> None:
    """``ValueError`` when a checked trainer state does not fit this trainer: a position past the
    end of its epoch, or a step count other than its model's."""
    batches = len(trainer.batch_plan(values["epoch"]))
    if values["batch_in_epoch"] > batches:
        raise ValueError(
            f"Trainer.load_state_dict: the state is {values['batch_in_epoch']} batches into an epoch "
            f"of {batches} batches (different batch size or data?)"
        )
    if values["step"] is not None and values["step"] != trainer.model.step:
        raise ValueError(
            f"Trainer.load_state_dict: the state was saved at step {values['step']} but the "
            f"model is at step {trainer.model.step}"
        )
