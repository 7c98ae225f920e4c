"""How the trainer takes its steps: in one process (:class:`LocalSteps`), or data-parallel over MPI
(:class:`ParallelSteps`), behind one interface, so that the epoch loop never asks which.

Data parallelism (:mod:`transformer_cpp.distributed`): each step splits the global batch across
the ranks, sums the gradients with one all-reduce and applies the same Adam step everywhere. Every
decision that could differ between ranks is taken from values that travel in that all-reduce or
in an explicit collective: whether to stop (:meth:`Steps.stop_after_step`, :meth:`Steps.any`),
the run's clock and the step time that the schedule is fitted with (:class:`StepResult`), rank 0's
validation (:meth:`Steps.broadcast`). Rank 0 alone validates, reports and writes checkpoints
(:attr:`Steps.is_root`). In one process each of these is the process's own value.

Stopping. While ``Trainer.fit`` runs in the main thread, a :class:`StopRequest` answers the first
Ctrl-C (SIGINT) by asking for a clean stop after the current batch (with a checkpoint of that exact
position), and a second one by stopping at once. Data-parallel ranks answer SIGTERM and SIGUSR1
the same way, on whichever rank they arrive. Python delivers signals to the main thread only; when
``fit`` runs elsewhere it cannot be interrupted this way.
"""

from __future__ import annotations

import abc
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, Optional, TypeVar

import numpy as np

from ..data import Batch
from .task import TrainingTask

__all__ = ["StopRequest", "StepContext", "StepResult", "Steps", "LocalSteps", "ParallelSteps", "steps_for"]

_T = TypeVar("_T")


class StopRequest:
    """Signal handlers for the duration of ``fit``: the first signal asks for a clean stop after the
    current batch, a second one raises ``KeyboardInterrupt`` at once.

    Args:
        terminate: also answer SIGTERM (a cluster's scheduler stopping the job) and SIGUSR1 (what
            Open MPI's mpiexec passes on to every rank, where it answers SIGINT and SIGTERM by
            killing them), so that a data-parallel run stops with a checkpoint too.
        quiet: say nothing when a signal arrives (data parallelism: rank 0 alone says it).
    """

    def __init__(self, terminate: bool = False, quiet: bool = False) -> None:
        self.requested = False
        self._quiet = quiet
        self._previous: Dict[int, Any] = {}
        self._installed = False
        self._signals = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1) if terminate else (signal.SIGINT,)

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            try:
                for sig in self._signals:
                    self._previous[sig] = signal.signal(sig, self._handle)
                self._installed = True
            except (ValueError, OSError):  # e.g. an embedded interpreter without signals
                self._installed = False
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if not self._quiet:
            print(
                f"\n{name}: stopping after this batch and saving a checkpoint (press Ctrl-C again to stop now)",
                file=sys.stderr,
                flush=True,
            )

    @property
    def installed(self) -> bool:
        return self._installed

    def __exit__(self, *exc: Any) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}
        self._installed = False


@dataclass(frozen=True)
class StepResult:
    """What one optimiser step gives the epoch loop."""

    loss: float  # mean over the target tokens of the whole (global) batch
    accuracy: float  # likewise
    tokens: int  # target (non-padding label) tokens of the whole batch
    work: int  # this process's source and decoder-input tokens: what the thread governor times
    seconds: float  # this process's wall time of the step
    elapsed: float  # seconds of training after the step (the run's clock, the same on every rank)
    schedule_seconds: float  # the step time the schedule is fitted with (the same on every rank)


@dataclass(frozen=True)
class StepContext:
    """Where the epoch loop stands when it asks for a step."""

    stop: bool  # a stop is requested here
    origin: float  # the time.perf_counter() at which the run's clock read 0
    previous_seconds: float  # this process's previous step time
    where: str  # the step's place, for messages


class Steps(abc.ABC):
    """The interface of :class:`LocalSteps` and :class:`ParallelSteps`.

    Attributes:
        parallel: the :class:`~transformer_cpp.distributed.DataParallel`, or None in one process.
        is_root: this process validates, reports and writes checkpoints (rank 0).
        world_size: the number of processes that train together.
    """

    parallel: Any = None
    is_root: bool = True
    world_size: int = 1

    @abc.abstractmethod
    def stop_request(self) -> StopRequest:
        """A fresh :class:`StopRequest` for one ``fit``, with the signals this kind of run answers."""

    @abc.abstractmethod
    def seed_dropout(self, model: Any) -> None:
        """Give ``model`` this process's dropout seed (once, when the trainer is made)."""

    @abc.abstractmethod
    def step(self, model: Any, task: TrainingTask, rows: Any, context: StepContext) -> StepResult:
        """One optimiser step of ``task`` on its global batches ``rows`` (one, or with gradient
        accumulation several: :meth:`~.task.TrainingTask.accumulated_step`), taken where
        ``context`` says.

        Raises:
            FloatingPointError: the loss, a gradient or the update is not finite (on every rank
                alike); nothing was updated.
        """

    @abc.abstractmethod
    def stop_after_step(self, requested: bool) -> bool:
        """Whether to stop after the step just taken, with ``requested`` this process's request now."""

    @abc.abstractmethod
    def any(self, flag: bool, what: str) -> bool:
        """True on every process when ``flag`` is true on any."""

    @abc.abstractmethod
    def broadcast(self, value: Optional[_T], what: str) -> _T:
        """Rank 0's ``value`` on every process."""

    @abc.abstractmethod
    def barrier(self, what: str) -> None:
        """Wait until every process is here."""

    @abc.abstractmethod
    def check_same_weights(self, model: Any) -> None:
        """Raise :class:`~transformer_cpp.distributed.WeightsDrifted` when the processes' weights differ."""

    @abc.abstractmethod
    def check_weights_on_schedule(self, model: Any) -> None:
        """:meth:`check_same_weights` every ``check_every`` steps."""


class LocalSteps(Steps):
    """Steps in this process alone: the task's step on the whole batch; every agreement is this
    process's own value."""

    def stop_request(self) -> StopRequest:
        return StopRequest()

    def seed_dropout(self, model: Any) -> None:
        pass  # the model's own seed, as it was made

    def step(self, model: Any, task: TrainingTask, rows: Any, context: StepContext) -> StepResult:
        t0 = time.perf_counter()
        # a FloatingPointError (transformer_cpp.NonFiniteError) when the step would not be finite:
        # the core then changes nothing
        o = task.accumulated_step(model, rows)
        t1 = time.perf_counter()
        return StepResult(o.loss, o.accuracy, o.tokens, o.work, t1 - t0, t1 - context.origin, t1 - t0)

    def stop_after_step(self, requested: bool) -> bool:
        return requested

    def any(self, flag: bool, what: str) -> bool:
        return flag

    def broadcast(self, value: Optional[_T], what: str) -> _T:
        assert value is not None  # this process is rank 0
        return value

    def barrier(self, what: str) -> None:
        pass

    def check_same_weights(self, model: Any) -> None:
        pass

    def check_weights_on_schedule(self, model: Any) -> None:
        pass


class ParallelSteps(Steps):
    """Data-parallel steps over ``parallel`` (a :class:`~transformer_cpp.distributed.DataParallel`
    of two or more ranks): :meth:`~transformer_cpp.distributed.DataParallel.train_step` on this
    rank's share of each batch, every agreement a bounded collective."""

    def __init__(self, parallel: Any) -> None:
        self.parallel = parallel
        self.is_root = parallel.rank == 0
        self.world_size = int(parallel.size)
        self._stop = False  # a rank asked to stop when the last step began (agreed in its all-reduce)

    def stop_request(self) -> StopRequest:
        return StopRequest(terminate=True, quiet=not self.is_root)

    def seed_dropout(self, model: Any) -> None:
        # each rank its own dropout masks, deterministically
        model.set_dropout_seed(self.parallel.dropout_seed(int(model.config["seed"])))

    def step(self, model: Any, task: TrainingTask, rows: Any, context: StepContext) -> StepResult:
        t0 = time.perf_counter()
        work = [0]  # this rank's share (none when the batch has fewer pairs than ranks)

        def batch_of(share: np.ndarray) -> Batch:
            b = task.parallel_batch(share)
            work[0] = b.src.size + b.tgt_in.size
            return b

        # rank 0's clock and its previous step time travel in the all-reduce, so that every rank
        # fits the schedule and stops on the same numbers
        r = self.parallel.train_step(
            model,
            batch_of,
            rows[0],  # one batch a step: data parallelism takes no gradient accumulation
            stop=context.stop,
            elapsed=time.perf_counter() - context.origin,
            step_seconds=context.previous_seconds,
            where=context.where,
        )
        t1 = time.perf_counter()
        self._stop = bool(r["stop"])
        return StepResult(r["loss"], r["accuracy"], r["tokens"], work[0], t1 - t0, r["elapsed"], r["step_seconds"])

    def stop_after_step(self, requested: bool) -> bool:
        # what every rank saw in the step's all-reduce: a request that came later is agreed at the next
        return self._stop

    def any(self, flag: bool, what: str) -> bool:
        return bool(self.parallel.any(flag, what))

    def broadcast(self, value: Optional[_T], what: str) -> _T:
        result: _T = self.parallel.bcast(value, what)
        return result

    def barrier(self, what: str) -> None:
        self.parallel.barrier(what)

    def check_same_weights(self, model: Any) -> None:
        self.parallel.check_same_weights(model, model.step)

    def check_weights_on_schedule(self, model: Any) -> None:
        if model.step % self.parallel.check_every == 0:
            self.parallel.check_same_weights(model, model.step)


def steps_for(parallel: Any) -> Steps:
    """The steps of a trainer given ``parallel`` (a :class:`~transformer_cpp.distributed.DataParallel`
    or None): data-parallel with two or more ranks, else in this process."""
    if parallel is not None and not all(hasattr(parallel, a) for a in ("rank", "size", "train_step")):
        raise TypeError(
            f"Trainer: parallel must be a transformer_cpp.distributed.DataParallel or None, got "
            f"{type(parallel).__name__}"
        )
    if parallel is not None and parallel.size > 1:
        return ParallelSteps(parallel)
    return LocalSteps()
