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
import itertools
import math
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .._runtime import ThreadGovernor, get_num_threads, governor_for, set_num_threads
from ..checkpoint import Checkpoint, CheckpointError, checkpoint_name, load_checkpoint, nonfinite_tensors
from ..data import Batch, EncodedPairs
from ..translate import evaluate_loss
from .config import TrainConfig, TrainingDiverged, TrainingInterrupted
from .progress import Progress, epoch_summary
from .run_dir import RunDirectory, improves
from .pairs import PairsTask, check_types, no_batch_message
from .state import STATE_FORMAT, STATE_VERSION, RunningSums, checked_state, empty_history
from .steps import StopRequest, steps_for
from .task import TrainingTask

__all__ = ["Trainer"]

History = Dict[str, Dict[str, List[Any]]]


class _Diverged(Exception):
    """Raised inside an epoch when a value became non-finite; :meth:`Trainer.fit` turns it into
    :class:`TrainingDiverged` after saving what can be saved."""


def _resumed_config(ckpt: Checkpoint, **changes: Any) -> TrainConfig:
    """The checkpoint's training settings with ``changes`` (those not None) applied."""
    assert ckpt.train_config is not None
    try:
        values = dict(ckpt.train_config)
        values.update({k: v for k, v in changes.items() if v is not None})
        return TrainConfig.from_dict(values)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint '{ckpt.path}': invalid training settings ({exc})") from None


def _configure_model(model: Any, c: TrainConfig, total_steps: int = 0) -> None:
    """Configure ``model``'s optimiser from ``c`` (decaying to 0 at ``total_steps``; 0: no decay)."""
    if total_steps and total_steps <= c.warmup and c.fixed_lr == 0:
        total_steps = c.warmup + 1  # a run shorter than its warm-up: decay over its last step
    model.configure_optimizer(**c.optimizer_settings(), total_steps=int(total_steps))
    if c.threads is not None:
        set_num_threads(c.threads)


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
        finished: the time budget is spent. best: the best validation BLEU so far and its checkpoint.
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
        _configure_model(model, self.config)
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
        self.best: Dict[str, Any] = {"bleu": None, "checkpoint": None}  # the task's score (BLEU) and where
        self.run_id = uuid.uuid4().hex[:16]  # recorded in each checkpoint: pruning deletes only this run's
        if not self.batch_plan(0):
            raise ValueError(no_batch_message(getattr(self.task, "train_data", None), self.config))

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
        """Optimiser steps in the current epoch (with ``max_tokens`` the count varies a little)."""
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
        batches = len(self.batch_plan(values["epoch"]))
        if values["batch_in_epoch"] > batches:
            raise ValueError(
                f"Trainer.load_state_dict: the state is {values['batch_in_epoch']} batches into an epoch "
                f"of {batches} batches (different batch size or data?)"
            )
        if values["step"] is not None and values["step"] != self.model.step:
            raise ValueError(
                f"Trainer.load_state_dict: the state was saved at step {values['step']} but the "
                f"model is at step {self.model.step}"
            )
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
        parallel: Any = None,
    ) -> "Trainer":
        """A trainer that continues the run saved at ``path`` (a run directory, one checkpoint
        directory, or a :class:`~transformer_cpp.checkpoint.Checkpoint` loaded with its optimiser).

        ``train_data`` and ``valid_data`` must be the same encoded pairs as in the saved run
        (checked with a hash). The model, tokenizers, optimiser state, settings and history come
        from the checkpoint; ``epochs`` (the total to reach), ``threads``, ``progress``,
        ``time_budget``, ``keep_checkpoints`` and ``average_last`` may be changed (None keeps the
        run's). New checkpoints go to ``checkpoint_dir``, by default the run
        directory that holds ``path``. ``parallel`` (a
        :class:`~transformer_cpp.distributed.DataParallel`) must have as many ranks as the run had.

        Raises:
            transformer_cpp.checkpoint.CheckpointError: a damaged checkpoint or one without
                optimiser or trainer state.
            ValueError: different data.
        """
        ckpt = path if isinstance(path, Checkpoint) else load_checkpoint(path, optimizer=True)
        if not ckpt.optimizer_loaded:
            raise CheckpointError(
                f"checkpoint '{ckpt.path}' was loaded without its optimiser state; it cannot be resumed"
            )
        if ckpt.trainer_state is None or ckpt.train_config is None:
            raise CheckpointError(f"checkpoint '{ckpt.path}' has no trainer state; it cannot be resumed")
        config = _resumed_config(
            ckpt,
            epochs=epochs,
            threads=threads,
            progress=progress,
            time_budget=time_budget,
            keep_checkpoints=keep_checkpoints,
            average_last=average_last,
        )
        trainer = cls(
            ckpt.model,
            train_data,
            valid_data,
            config,
            src_tokenizer=ckpt.src_tokenizer,
            tgt_tokenizer=ckpt.tgt_tokenizer,
            checkpoint_dir=checkpoint_dir if checkpoint_dir is not None else ckpt.path.parent,
            data_info=ckpt.data,
            parallel=parallel,
        )
        if ckpt.run_id is not None:
            trainer.run_id = ckpt.run_id
        trainer.load_state_dict(ckpt.trainer_state)
        trainer.last_checkpoint = ckpt.path
        return trainer

    def save_checkpoint(self, best: bool = False) -> Path:
        """Write a checkpoint of the current position into ``checkpoint_dir``; return its path.
        With ``best``, ``best`` names it too (set before the oldest checkpoints are pruned)."""
        if self.run_dir is None:
            raise ValueError("Trainer.save_checkpoint: no checkpoint_dir was given")
        self.last_checkpoint = self.task.save(
            self.run_dir.path,
            self.model,
            trainer_state=self.state_dict(),
            train_config=self.config.to_dict(),
            keep=self.config.keep_checkpoints,
            run_id=self.run_id,
            best=best,
        )
        return self.last_checkpoint

    def average_checkpoints(self) -> Optional[Path]:
        """Average the newest ``average_last`` complete checkpoints of this run into
        ``<run>/averaged``; point ``best`` at it when its validation BLEU beats the best
        checkpoint's (or when there is no BLEU)."""
        assert self.run_dir is not None
        averaged = self.run_dir.average_last(self.config.average_last, self.run_id, self.task.average)
        if averaged is None:
            return None
        path, model, count = averaged
        bleu = self.task.score_model(model, self.config)
        best = self.best["bleu"]
        if bleu is None or best is None or bleu > best:
            self.run_dir.mark_best(path.name)
        message = f"averaged the last {count} checkpoints into {path}"
        if bleu is not None:
            versus = f" (best checkpoint {best:.2f})" if best is not None else ""
            message += f": validation {self.task.score_name} {bleu:.2f}{versus}"
        self._progress.say(message)
        return path

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
                return _Fit(self, epochs, on_batch_end, on_epoch_end).run()
            finally:
                if self._governor is not None:  # leave the core with the threads it was given
                    set_num_threads(self._governor.most)

    def _thread_governor(self) -> Optional[ThreadGovernor]:
        """The run's ThreadGovernor for the next epoch, or None with one thread or
        ``adaptive_threads`` off."""
        most = self.config.threads if self.config.threads is not None else get_num_threads()
        governor = governor_for(self._governor, most, self.config.adaptive_threads)
        if governor is None and self._governor is not None:  # switched off between fits: all threads again
            set_num_threads(self._governor.most)
        self._governor = governor
        return governor

    @property
    def _progress(self) -> Progress:
        return Progress(bool(self.config.progress), self._steps.is_root)


class _Fit:
    """One call of :meth:`Trainer.fit`: the epochs up to ``epochs`` within the time budget, with that
    call's stop request and callbacks. The trainer holds what outlives the call (the position, the
    history, the sums, the thread governor); this class is its loop and reaches into it."""

    def __init__(
        self,
        trainer: Trainer,
        epochs: Optional[int],
        on_batch_end: Optional[Callable[[Trainer], None]],
        on_epoch_end: Optional[Callable[[Trainer, Dict[str, Any]], None]],
    ) -> None:
        self.trainer = trainer
        self.epochs = epochs
        self.on_batch_end = on_batch_end
        self.on_epoch_end = on_epoch_end
        self.steps = trainer._steps
        self.sums = trainer._sums
        self.progress = trainer._progress
        self.budget = trainer.config.time_budget * 60.0  # seconds; 0: none
        self.clock = 0.0  # the perf_counter() at which the trainer's elapsed was 0
        self.previous_seconds = 0.0  # this process's previous step

    def run(self) -> History:
        t = self.trainer
        target = t.config.epochs if self.epochs is None else TrainConfig.check("epochs", self.epochs)
        if t.config.threads is not None:
            set_num_threads(t.config.threads)
        budget = self.budget
        # "finished" means the budget (or the step limit) is spent: a resume with a larger one trains on
        t.finished = bool(self.stop_reason())
        if t.finished:
            return t.history
        self.clock = time.perf_counter() - t.elapsed  # elapsed carries over from earlier fits and resumes
        self.fit_schedule(budget - t.elapsed, 1.0)  # a first guess; refitted once steps are timed
        self.steps.check_same_weights(t.model)
        with self.steps.stop_request() as stop:
            while t.epoch < target and not t.finished:
                try:
                    entry = self.epoch(target, stop)
                except _Diverged as exc:
                    raise self.diverged(str(exc)) from None
                if entry is None:  # stopped inside the epoch
                    path = t.save_checkpoint() if t.run_dir is not None else None
                    self.steps.barrier("the wait for rank 0's checkpoint")  # every rank stops once it is written
                    where = f"; checkpoint saved to {path}" if path is not None else ""
                    raise TrainingInterrupted(
                        f"training interrupted in epoch {t.epoch + 1} after {t.batch_in_epoch} batches{where}", path
                    )
                path = self.save_and_rank(entry)
                t.elapsed = time.perf_counter() - self.clock
                if self.on_epoch_end is not None:
                    self.on_epoch_end(t, entry)
                requested = self.steps.any(stop.requested, f"the stop check after epoch {t.epoch}")
                if requested and t.epoch < target and not t.finished:  # Ctrl-C during validation or saving
                    where = f"; checkpoint saved to {path}" if path is not None else ""
                    raise TrainingInterrupted(f"training interrupted after epoch {t.epoch}{where}", path)
        self.steps.check_same_weights(t.model)
        if t.config.average_last > 1 and t.run_dir is not None:
            t.average_checkpoints()
        return t.history

    def epoch(self, target: int, stop: StopRequest) -> Optional[Dict[str, Any]]:
        """Run the rest of the current epoch; the epoch's history entry, or None if stopped by
        Ctrl-C. With a time budget the epoch may end early (a partial entry; ``finished`` set)."""
        t, model, budget = self.trainer, self.trainer.model, self.budget
        total = t.batches_per_epoch
        skip = t.batch_in_epoch
        of = f"/{target}" if target < TrainConfig.LIMITS["epochs"].high else ""  # (the most: no count to show)
        bar = self.progress.epoch_bar(total, skip, f"epoch {t.epoch + 1}{of}", t.task.unit)
        timed_steps, timed_seconds = 0, 0.0
        partial = False
        governor = t._thread_governor()
        try:
            for rows in itertools.islice(t.batch_plan(t.epoch), skip, None):
                where = f"at step {model.step + 1} (epoch {t.epoch + 1}, batch {t.batch_in_epoch + 1})"
                try:
                    r = self.steps.step(
                        model,
                        t.task,
                        rows,
                        stop=stop.requested,
                        origin=self.clock,
                        previous_seconds=self.previous_seconds,
                        where=where,
                    )
                except FloatingPointError as exc:  # on every rank alike: the step changed nothing
                    raise _Diverged(f"{where}: {exc}") from None
                if not math.isfinite(r.loss):
                    raise _Diverged(f"{where}: the loss is {r.loss}")
                if governor is not None:
                    governor.record(r.seconds, r.work)
                self.sums.epoch_seconds += r.seconds
                t.elapsed, self.previous_seconds = r.elapsed, r.seconds
                self.record_step(r.loss, r.accuracy, r.tokens)
                self.steps.check_weights_on_schedule(model)
                if t.batch_in_epoch > skip + 2:  # the first steps of an epoch (or a resume) warm caches up
                    timed_steps += 1
                    timed_seconds += r.schedule_seconds
                    if timed_steps % 50 == 0:
                        # epoch ends cost validation and a checkpoint: reserve 3% of the budget for them
                        self.fit_schedule(budget * 0.97 - t.elapsed, timed_seconds / timed_steps)
                bar.step(self.postfix(self.sums.epoch))
                if self.on_batch_end is not None:
                    self.on_batch_end(t)
                if self.steps.stop_after_step(stop.requested):
                    return None
                if self.stop_reason():
                    t.finished = True
                    partial = t.batch_in_epoch < total
                    break
                if t.config.eval_every and model.step % t.config.eval_every == 0 and t.batch_in_epoch < total:
                    self.interim_validation()
            try:
                entry = self.finish_epoch(partial=partial)
            except FloatingPointError as exc:  # a non-finite validation loss or decoding
                raise _Diverged(f"in the validation of epoch {t.epoch + 1}: {exc}") from None
            t.elapsed = time.perf_counter() - self.clock
            bar.finish(self.postfix({"loss": entry["loss"], "correct": entry["accuracy"], "tokens": 1}))
            self.progress.say(epoch_summary(entry, self.stop_reason(), t.elapsed, t.task.describe(entry)))
            return entry
        finally:
            bar.close()

    def stop_reason(self) -> str:
        """Why the run stops now: its time budget or its step limit is spent (else "")."""
        t = self.trainer
        if self.budget and t.elapsed >= self.budget * 0.985:
            return "time budget spent"
        if t.config.max_steps and t.model.step >= t.config.max_steps:
            return "step limit reached"
        return ""

    def postfix(self, sums: Dict[str, float]) -> Dict[str, str]:
        """What the progress bar shows: the task's running means and the learning rate."""
        model = self.trainer.model
        return {**self.trainer.task.postfix(sums), "lr": f"{model.learning_rate(max(model.step, 1)):.2e}"}

    def interim_validation(self) -> None:
        """Validate inside the epoch (every ``eval_every`` steps): a history entry with a
        fractional epoch (its losses the means since the previous entry), its line, a checkpoint."""
        t = self.trainer
        try:
            entry = self.finish_epoch(partial=True)
        except FloatingPointError as exc:
            raise _Diverged(f"in the validation at step {t.model.step}: {exc}") from None
        self.save_and_rank(entry)
        t.elapsed = time.perf_counter() - self.clock
        self.progress.say(epoch_summary(entry, "", t.elapsed, t.task.describe(entry)))

    def record_step(self, loss: float, acc: float, tokens: int) -> None:
        t = self.trainer
        t.batch_in_epoch += 1
        window = self.sums.add(loss, acc, tokens, t.config.log_every)
        if window is not None:
            step = t.model.step
            h = t.history["batch"]
            h["step"].append(step)
            h["loss"].append(window[0])
            h["accuracy"].append(window[1])
            h["lr"].append(t.model.learning_rate(step))

    def finish_epoch(self, partial: bool = False) -> Dict[str, Any]:
        """The history entry of the epoch just trained (``partial``: stopped inside it by the
        time budget; the entry's ``epoch`` is then fractional and the epoch count stays)."""
        t = self.trainer
        means = self.sums.epoch_means()
        done = t.epoch + (t.batch_in_epoch / max(t.batches_per_epoch, 1) if partial else 1)
        entry: Dict[str, Any] = {
            "epoch": round(done, 4) if partial else t.epoch + 1,
            "step": t.model.step,
            "loss": means["loss"],
            "accuracy": means["accuracy"],
            "lr": t.model.learning_rate(max(t.model.step, 1)),
            "seconds": means["seconds"],
            "minutes": t.elapsed / 60.0,
            "tokens_per_second": means["tokens_per_second"],
        }
        failure = None
        if self.steps.is_root:  # data parallelism: rank 0 validates, the others wait for its entry
            try:
                entry.update(t.task.validate(t.model, t.config))
            except FloatingPointError as exc:
                failure = str(exc)
        failure, entry = self.steps.broadcast(
            (failure, entry) if self.steps.is_root else None,
            f"the wait for rank 0's validation of epoch {t.epoch + 1}",
        )
        if failure is not None:
            raise FloatingPointError(failure)
        for key, value in entry.items():
            t.history["epoch"][key].append(value)
        if not partial:
            t.epoch += 1
            t.batch_in_epoch = 0
        self.sums.new_epoch()
        return entry

    def fit_schedule(self, remaining_seconds: float, seconds_per_step: float) -> None:
        """Fit the learning-rate decay to the end of the run: the time budget (estimated from
        the measured seconds per step) or the last epoch."""
        t = self.trainer
        c = t.config
        if not c.decay:
            return
        if c.time_budget > 0:
            total = t.model.step + int(max(remaining_seconds, 0.0) / max(seconds_per_step, 1e-9))
            if c.epochs:
                total = min(total, self.steps_to_epoch(c.epochs))
        else:
            total = self.steps_to_epoch(c.epochs)
        if c.max_steps:
            total = min(total, c.max_steps)
        _configure_model(t.model, c, total_steps=max(total, 1))

    def steps_to_epoch(self, epochs: int) -> int:
        """Optimiser steps when ``epochs`` epochs are done (estimated from the current epoch's size)."""
        t = self.trainer
        return int(t.model.step) + (epochs - t.epoch) * t.batches_per_epoch - t.batch_in_epoch

    def save_and_rank(self, entry: Dict[str, Any]) -> Optional[Path]:
        """Save a checkpoint (with a run directory) and point ``best`` at it if its validation BLEU
        is the best so far."""
        t = self.trainer
        if t.run_dir is None:
            return None
        bleu = t.task.score(entry)
        better = improves(bleu, t.best["bleu"])
        if better:  # (before saving: the trainer state in the checkpoint records it)
            t.best = {"bleu": bleu, "checkpoint": checkpoint_name(t.epoch, t.batch_in_epoch)}
        # best moves before pruning, so the checkpoint it named until now is pruned like any other
        return t.save_checkpoint(best=better)

    def diverged(self, reason: str) -> TrainingDiverged:
        """Save the state before the step that failed (when its weights are finite) and describe
        what happened."""
        t = self.trainer
        if t.run_dir is None:
            saved = "nothing was saved (the trainer has no checkpoint_dir)"
            path = None
        else:
            bad = nonfinite_tensors(t.model.parameters())
            if not bad:
                path = t.save_checkpoint()
                saved = f"the state before it is saved in {path}"
            else:
                path = t.last_checkpoint
                saved = (
                    f"the weights are not finite ({len(bad)} tensor(s), e.g. {bad[0]}), so nothing new was saved; "
                    + (f"the last good checkpoint is {path}" if path is not None else "no checkpoint was written")
                )
        return TrainingDiverged(
            f"training diverged {reason}; {saved}; a lower learning rate (lr_scale or fixed_lr), gradient clipping "
            "(clip_norm) or a longer warm-up may help",
            path,
        )
