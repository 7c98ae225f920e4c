"""One call of :meth:`Trainer.fit <transformer_cpp.training.Trainer.fit>`: the epochs, the
steps the task takes, the time budget and the step limit, the schedule fitted to them, the
validations, the checkpoints, and what an interruption or a divergence leaves behind."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, cast

from .._runtime import ThreadGovernor, get_num_threads, governor_for, set_num_threads
from ..checkpoint import checkpoint_name, nonfinite_tensors
from .config import MAX_EPOCHS, TrainConfig, TrainingDiverged, TrainingInterrupted
from .logs import run_log
from .progress import Progress, epoch_summary
from .wording import plural
from .run_dir import improves
from .steps import StepContext, StopRequest

__all__ = ["Fit", "average_last", "configure_model", "thread_governor"]

History = Dict[str, Dict[str, List[Any]]]


class Diverged(Exception):
    """Raised inside an epoch when a value became non-finite; :meth:`Trainer.fit` turns it into
    :class:`TrainingDiverged` after saving what can be saved."""


def configure_model(model: Any, c: TrainConfig, total_steps: int = 0) -> None:
    """Configure ``model``'s optimiser from ``c`` (decaying to 0 at ``total_steps``; 0: no decay)."""
    if total_steps and total_steps <= c.warmup and c.fixed_lr == 0:
        total_steps = c.warmup + 1  # a run shorter than its warm-up: decay over its last step
    model.configure_optimizer(**c.optimizer_settings(), total_steps=int(total_steps))
    if c.threads is not None:
        set_num_threads(c.threads)


def average_last(t: Any) -> Optional[Path]:
    """:meth:`Trainer.average_checkpoints <transformer_cpp.training.Trainer.average_checkpoints>` of trainer ``t``."""
    assert t.run_dir is not None
    averaged = t.run_dir.average_last(t.config.average_last, t.run_id, t.task.average)
    if averaged is None:
        return None
    path, model, count = averaged
    bleu = t.task.score_model(model, t.config)
    best = t.best["bleu"]
    if (bleu is None and t.task.unscored_average_is_best) or (bleu is not None and (best is None or bleu > best)):
        t.run_dir.mark_best(path.name)
    message = f"averaged the last {count} checkpoints into {path}"
    if bleu is not None:
        versus = f" (best checkpoint {t.task.shown_score(best)})" if best is not None else ""
        message += f": validation {t.task.score_name} {t.task.shown_score(bleu)}{versus}"
    progress_of(t).say(message)
    return Path(path)


def progress_of(t: Any) -> Progress:
    """What trainer ``t`` shows: bars with its ``progress`` setting, on the root process only."""
    return Progress(bool(t.config.progress), t._steps.is_root)


def thread_governor(t: Any) -> Optional[ThreadGovernor]:
    """The run's (trainer ``t``'s) ThreadGovernor for the next epoch, or None with one thread or
    ``adaptive_threads`` off."""
    most = t.config.threads if t.config.threads is not None else get_num_threads()
    governor = governor_for(t._governor, most, t.config.adaptive_threads)
    if governor is None and t._governor is not None:  # switched off between fits: all threads again
        set_num_threads(t._governor.most)
    t._governor = governor
    return governor


def groups(plan: Sequence[Any], skip: int, size: int) -> Iterator[Sequence[Any]]:
    """The batches of an epoch's ``plan`` from batch ``skip`` on, ``size`` at a time (the batches of
    one optimiser step; the last group of the epoch may hold fewer)."""
    for start in range(skip, len(plan), size):
        yield plan[start : start + size]


class Fit:
    """One call of :meth:`Trainer.fit`: the epochs up to ``epochs`` within the time budget, with that
    call's stop request and callbacks. The trainer holds what outlives the call (the position, the
    history, the sums, the thread governor); this class is its loop and reaches into it."""

    def __init__(
        self,
        trainer: Any,  # the Trainer
        epochs: Optional[int],
        on_batch_end: Optional[Callable[[Any], None]],
        on_epoch_end: Optional[Callable[[Any, Dict[str, Any]], None]],
    ) -> None:
        self.trainer = trainer
        self.epochs = epochs
        self.on_batch_end = on_batch_end
        self.on_epoch_end = on_epoch_end
        self.steps = trainer._steps
        self.sums = trainer._sums
        self.progress = progress_of(trainer)
        self.budget = trainer.config.time_budget * 60.0  # seconds; 0: none
        self.clock = 0.0  # the perf_counter() at which the trainer's elapsed was 0
        self.previous_seconds = 0.0  # this process's previous step
        self.log = run_log(trainer)  # log.csv and TensorBoard (with a run directory)
        self.validated_and_saved = False  # the epoch ended at a validation inside it, already saved

    def run(self) -> History:
        t = self.trainer
        target = t.config.epochs if self.epochs is None else TrainConfig.check("epochs", self.epochs)
        if t.config.threads is not None:
            set_num_threads(t.config.threads)
        budget = self.budget
        # "finished" means the budget (or the step limit) is spent: a resume with a larger one trains on
        t.finished = bool(self.stop_reason())
        if t.finished:
            return cast(History, t.history)
        self.clock = time.perf_counter() - t.elapsed  # elapsed carries over from earlier fits and resumes
        self.fit_schedule(budget - t.elapsed, 1.0)  # a first guess; refitted once steps are timed
        self.steps.check_same_weights(t.model)
        with self.steps.stop_request() as stop, self.log:
            while t.epoch < target and not t.finished:
                try:
                    entry = self.epoch(target, stop)
                except Diverged as exc:
                    raise self.diverged(str(exc)) from None
                if entry is None:  # stopped inside the epoch
                    path = t.save_checkpoint() if t.run_dir is not None else None
                    self.steps.barrier("the wait for rank 0's checkpoint")  # every rank stops once it is written
                    where = f"; checkpoint saved to {path}" if path is not None else ""
                    raise TrainingInterrupted(
                        f"training interrupted in epoch {t.epoch + 1} after {t.batch_in_epoch} batches{where}", path
                    )
                path = t.last_checkpoint if self.validated_and_saved else self.save_and_rank(entry)
                self.validated_and_saved = False
                if self.patience_spent():
                    t.finished = True
                    self.progress.say(self.early_stop_message())
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
        return cast(History, t.history)

    def epoch(self, target: int, stop: StopRequest) -> Optional[Dict[str, Any]]:
        """Run the rest of the current epoch; the epoch's history entry, or None if stopped by
        Ctrl-C. With a time budget the epoch may end early (a partial entry; ``finished`` set)."""
        t, model, budget = self.trainer, self.trainer.model, self.budget
        total = t.batches_per_epoch
        skip = t.batch_in_epoch
        # no total with the most epochs, nor under a time budget (the epochs are then only a cap)
        of = f"/{target}" if target < MAX_EPOCHS and not budget else ""
        bar = self.progress.epoch_bar(total, skip, f"epoch {t.epoch + 1}{of}", t.task.unit, timed=bool(budget))
        timed_steps, timed_seconds = 0, 0.0
        partial = False
        governor = thread_governor(t)
        try:
            for group in groups(t.batch_plan(t.epoch), skip, t.config.accumulate):
                where = f"at step {model.step + 1} (epoch {t.epoch + 1}, batch {t.batch_in_epoch + 1})"
                try:
                    context = StepContext(stop.requested, self.clock, self.previous_seconds, where)
                    r = self.steps.step(model, t.task, group, context)
                except FloatingPointError as exc:  # on every rank alike: the step changed nothing
                    raise Diverged(f"{where}: {exc}") from None
                if not math.isfinite(r.loss):
                    raise Diverged(f"{where}: the loss is {r.loss}")
                if governor is not None:
                    governor.record(r.seconds, r.work)
                self.sums.epoch_seconds += r.seconds
                t.elapsed, self.previous_seconds = r.elapsed, r.seconds
                self.record_step(r.loss, r.accuracy, r.tokens, len(group))
                self.steps.check_weights_on_schedule(model)
                if t.batch_in_epoch > skip + 2:  # the first steps of an epoch (or a resume) warm caches up
                    timed_steps += 1
                    timed_seconds += r.schedule_seconds
                    if timed_steps % 50 == 0:
                        # epoch ends cost validation and a checkpoint: reserve 3% of the budget for them
                        self.fit_schedule(budget * 0.97 - t.elapsed, timed_seconds / timed_steps)
                bar.step(self.postfix(self.sums.epoch), len(group), budget - t.elapsed if budget else None)
                if self.on_batch_end is not None:
                    self.on_batch_end(t)
                if self.steps.stop_after_step(stop.requested):
                    return None
                if self.stop_reason():
                    t.finished = True
                    partial = t.batch_in_epoch < total
                    break
                if t.config.eval_every and model.step % t.config.eval_every == 0 and t.batch_in_epoch < total:
                    interim = self.interim_validation()
                    if self.patience_spent():  # early stopping: this validation ends the run
                        t.finished = True
                        self.validated_and_saved = True
                        return interim
            try:
                entry = self.finish_epoch(partial=partial)
            except FloatingPointError as exc:  # a non-finite validation loss or decoding
                raise Diverged(f"in the validation of epoch {t.epoch + 1}: {exc}") from None
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
        if self.patience_spent():
            return f"no better validation {t.task.score_name} in {plural(t.config.patience, 'validation')}"
        return ""

    def patience_spent(self) -> bool:
        """Early stopping: ``patience`` validations in a row gave no better score than the best."""
        t = self.trainer
        return bool(t.config.patience) and int(t.best.get("since", 0)) >= t.config.patience

    def early_stop_message(self) -> str:
        t = self.trainer
        best, name = t.best["bleu"], t.best["checkpoint"]
        where = f"checkpoint {name}, the run's model" if name is not None and t.run_dir is not None else "no checkpoint"
        last = "validation" if t.config.patience == 1 else plural(t.config.patience, "validation")
        return (
            f"stopping early: no better validation {t.task.score_name} in the last {last}; the best is "
            f"{t.task.shown_score(best)} ({where})"
        )

    def postfix(self, sums: Dict[str, float]) -> Dict[str, str]:
        """What the progress bar shows: the task's running means and the learning rate."""
        model = self.trainer.model
        return {**self.trainer.task.postfix(sums), "lr": f"{model.learning_rate(max(model.step, 1)):.2e}"}

    def interim_validation(self) -> Dict[str, Any]:
        """Validate inside the epoch (every ``eval_every`` steps): a history entry with a
        fractional epoch (its losses the means since the previous entry), its line, a checkpoint;
        the entry."""
        t = self.trainer
        try:
            entry = self.finish_epoch(partial=True)
        except FloatingPointError as exc:
            raise Diverged(f"in the validation at step {t.model.step}: {exc}") from None
        self.save_and_rank(entry)
        t.elapsed = time.perf_counter() - self.clock
        self.progress.say(epoch_summary(entry, "", t.elapsed, t.task.describe(entry)))
        return entry

    def record_step(self, loss: float, acc: float, tokens: int, batches: int = 1) -> None:
        t = self.trainer
        t.batch_in_epoch += batches
        window = self.sums.add(loss, acc, tokens, t.config.log_every)
        self.log.count(tokens, self.previous_seconds)
        if window is not None:
            step = t.model.step
            h = t.history["batch"]
            h["step"].append(step)
            h["loss"].append(window[0])
            h["accuracy"].append(window[1])
            h["lr"].append(t.model.learning_rate(step))
            position = t.epoch + t.batch_in_epoch / max(t.batches_per_epoch, 1)
            self.log.step(step, position, window[0], window[1], h["lr"][-1], t.elapsed)

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
        self.log.epoch(entry, time.perf_counter() - self.clock)
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
        configure_model(t.model, c, total_steps=max(total, 1))

    def steps_to_epoch(self, epochs: int) -> int:
        """Optimiser steps when ``epochs`` epochs are done (estimated from the current epoch's size;
        with ``accumulate``, a step per that many batches, the last of an epoch perhaps fewer)."""
        t = self.trainer
        n, batches, done = int(t.config.accumulate), int(t.batches_per_epoch), int(t.batch_in_epoch)
        per_epoch, left = -(-batches // n), -(-(batches - done) // n)
        return int(t.model.step) + left + (epochs - int(t.epoch) - 1) * per_epoch

    def save_and_rank(self, entry: Dict[str, Any]) -> Optional[Path]:
        """Rank the validation ``entry`` (its score against the best so far, and the validations
        since a better one, for early stopping); with a run directory, save a checkpoint and point
        ``best`` at it if its score is the best so far (a tie too: the newer one)."""
        t = self.trainer
        bleu = t.task.score(entry)
        better = improves(bleu, t.best["bleu"])
        if bleu is not None:  # (before saving: the trainer state in the checkpoint records it)
            strictly = t.best["bleu"] is None or bleu > t.best["bleu"]
            since = 0 if strictly else int(t.best.get("since", 0)) + 1
            name = checkpoint_name(t.epoch, t.batch_in_epoch) if t.run_dir is not None else None
            t.best = {"bleu": bleu, "checkpoint": name, "since": since} if better else {**t.best, "since": since}
        if t.run_dir is None:
            return None
        # best moves before pruning, so the checkpoint it named until now is pruned like any other
        return cast(Optional[Path], t.save_checkpoint(best=better))

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
