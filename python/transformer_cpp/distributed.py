"""Data-parallel training over MPI (``mpiexec -n N transformer-cpp train ...``).

Every process ("rank") holds the whole model. Each global batch (what one process would train on)
is split by a fixed rule, rank ``r`` taking the pairs ``r, r + N, r + 2N, ...`` of it; each rank
runs forward and backward on its share in C++ (:meth:`Transformer.compute_gradients`), with its
gradients multiplied by its count of target tokens, into the model's one contiguous gradient
buffer. One ``MPI_Allreduce`` (sum, in place) per step over that buffer gives every rank the sum
over all the batch's tokens; its 8 spare values carry the loss and accuracy sums, the token
count, the stop requests, a failure flag and rank 0's clock in the same call. Every rank then
divides by the global token count and applies the same Adam step
(:meth:`Transformer.apply_gradients`): the update is the single-process update on the whole
batch, up to float32 rounding of the sums.

This module imports mpi4py only when a launcher started several processes
(:func:`launched_world`); a plain ``transformer-cpp train`` never imports it. Every collective
call here is *bounded*: a watchdog thread aborts the whole job (``MPI_Abort``, after one line on
standard error) when a call has not completed within :attr:`DataParallel.timeout` seconds, so a
rank that hangs or dies cannot leave the others waiting forever. (Open MPI's launcher also ends
the job when a process dies.) Rank 0 alone writes checkpoints, logs, progress bars and plots.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ._checks import integer
from ._runtime import splitmix64

__all__ = [
    "DataParallel",
    "MPIUnavailable",
    "WeightsDrifted",
    "PeerFailed",
    "launched_world",
    "from_environment",
    "DEFAULT_TIMEOUT",
    "SPARE_SLOTS",
]

#: Seconds a collective call may take before the job is aborted (TRANSFORMER_CPP_MPI_TIMEOUT).
#: It must exceed the longest wait at an epoch end: rank 0's validation, BLEU and checkpoint.
DEFAULT_TIMEOUT = 600.0
#: Spare values after the gradients in the model's gradient buffer (Transformer::kFlatSpareSlots).
SPARE_SLOTS = 8
# what the spare values hold in a training step (summed over the ranks)
_LOSS, _CORRECT, _TOKENS, _STOP, _FAILED, _DIVERGED, _STEP_SECONDS, _ELAPSED = range(8)

# Environment variables by which launchers tell a process the size of its job and its rank:
# Open MPI, then MPICH / Intel MPI (Hydra) and Slurm's PMI.
_LAUNCHER_VARIABLES = (("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"), ("PMI_SIZE", "PMI_RANK"))


class MPIUnavailable(RuntimeError):
    """Launched as several processes, but mpi4py (the ``mpi`` extra) cannot be imported."""


class WeightsDrifted(RuntimeError):
    """The ranks' weights are no longer identical (their fingerprints differ)."""


class PeerFailed(RuntimeError):
    """Another rank's part of a step failed (that rank raises its own error)."""


def launched_world() -> Tuple[int, int]:
    """``(size, rank)`` of the job as the MPI launcher's environment variables give them, without
    importing MPI; ``(1, 0)`` for a process not started by a launcher."""
    for size_var, rank_var in _LAUNCHER_VARIABLES:
        size, rank = os.environ.get(size_var), os.environ.get(rank_var)
        if size is not None:
            try:
                return max(int(size), 1), max(int(rank or 0), 0)
            except ValueError:
                continue
    return 1, 0


def _timeout_from_environment(timeout: Optional[float]) -> float:
    if timeout is not None:
        value: Any = timeout
        origin = "timeout"
    else:
        value = os.environ.get("TRANSFORMER_CPP_MPI_TIMEOUT", DEFAULT_TIMEOUT)
        origin = "TRANSFORMER_CPP_MPI_TIMEOUT"
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = float("nan")
    if not (seconds > 0 and seconds < 1e9):
        raise ValueError(f"DataParallel: {origin} must be a number of seconds > 0, got {value!r}")
    return seconds


def from_environment(timeout: Optional[float] = None, check_every: int = 100) -> Optional["DataParallel"]:
    """A :class:`DataParallel` over ``MPI.COMM_WORLD`` when a launcher started this process as
    one of several, else ``None`` (and mpi4py is not imported).

    Raises:
        MPIUnavailable: launched as several processes but mpi4py is not installed.
    """
    size, rank = launched_world()
    if size <= 1:
        return None
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise MPIUnavailable(
            f"started by an MPI launcher as {size} processes, but mpi4py cannot be imported ({exc}); install the "
            "extra with: pip install 'transformer-cpp[mpi]' (or run one process, without mpiexec)"
        ) from None
    return DataParallel(MPI.COMM_WORLD, timeout=timeout, check_every=check_every)


class _Watchdog:
    """One daemon thread that aborts the MPI job when an armed deadline passes."""

    def __init__(self, on_timeout: Any) -> None:
        self._on_timeout = on_timeout
        self._cond = threading.Condition()
        self._deadline: Optional[float] = None
        self._what = ""
        self._thread: Optional[threading.Thread] = None

    def arm(self, seconds: float, what: str) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="transformer-cpp-mpi-watchdog", daemon=True)
                self._thread.start()
            self._deadline = time.monotonic() + seconds
            self._what = what
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None

    def _run(self) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                what, self._deadline = self._what, None
                self._on_timeout(what)


class DataParallel:
    """The processes of one data-parallel run over an MPI communicator (mpi4py).

    Args:
        comm: an ``mpi4py.MPI.Intracomm`` (``MPI.COMM_WORLD``).
        timeout: seconds any collective call may take (default ``TRANSFORMER_CPP_MPI_TIMEOUT`` or
            :data:`DEFAULT_TIMEOUT`); past it the job is aborted with a message naming the call.
        check_every: compare the weights' fingerprints across the ranks every this many steps
            (and at every epoch end); :class:`WeightsDrifted` when they differ.

    Attributes: ``rank``, ``size``; ``seconds`` sums the time of the training steps' phases
    (``compute``, ``allreduce`` with the wait for the slowest rank, ``update``) and counts
    ``steps``, for the benchmark.
    """

    def __init__(self, comm: Any, *, timeout: Optional[float] = None, check_every: int = 100) -> None:
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm
        self.rank = int(comm.Get_rank())
        self.size = int(comm.Get_size())
        self.timeout = _timeout_from_environment(timeout)
        self.check_every = integer("DataParallel", "check_every", check_every, 1)
        self.seconds: Dict[str, float] = {"compute": 0.0, "allreduce": 0.0, "update": 0.0, "steps": 0}
        self._watchdog = _Watchdog(self._abort_on_timeout)

    def __repr__(self) -> str:
        return f"DataParallel(rank={self.rank}, size={self.size}, timeout={self.timeout:g})"

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    # ---------------------------------------------------------------- bounded collectives

    def _abort_on_timeout(self, what: str) -> None:
        print(
            f"transformer-cpp: error: rank {self.rank} of {self.size}: {what} did not complete within "
            f"{self.timeout:g} s: another process has died or hangs; aborting all processes (the limit is "
            "TRANSFORMER_CPP_MPI_TIMEOUT or train --mpi-timeout)",
            file=sys.stderr,
            flush=True,
        )
        try:
            self.comm.Abort(1)
        finally:  # Abort does not return; if it did, leave anyway
            os._exit(1)

    def _bounded(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        self._watchdog.arm(self.timeout, what)
        try:
            return call(*args, **kwargs)
        finally:
            self._watchdog.disarm()

    def allreduce_sum(self, buffer: np.ndarray, what: str = "an all-reduce") -> None:
        """Sum ``buffer`` (contiguous) over the ranks, in place."""
        self._bounded(what, self.comm.Allreduce, self._MPI.IN_PLACE, buffer, op=self._MPI.SUM)

    def barrier(self, what: str = "a barrier") -> None:
        self._bounded(what, self.comm.Barrier)

    def bcast(self, obj: Any, what: str = "a broadcast from rank 0") -> Any:
        """Rank 0's ``obj`` on every rank (pickled)."""
        return self._bounded(what, self.comm.bcast, obj, root=0)

    def allgather(self, obj: Any, what: str = "an all-gather") -> List[Any]:
        gathered: List[Any] = self._bounded(what, self.comm.allgather, obj)
        return gathered

    def any(self, flag: bool, what: str = "an agreement") -> bool:
        """True on every rank when ``flag`` is true on any."""
        buf = np.array([1 if flag else 0], dtype=np.int64)
        self.allreduce_sum(buf, what)
        return bool(buf[0])

    def agree(self, error: Optional[BaseException], what: str) -> Optional[str]:
        """Every rank says whether its part of ``what`` failed; returns ``None`` when none did, else
        one line for the user: the error (the same on every rank that failed; ranks named when not
        all failed)."""
        text = None if error is None else (" ".join(str(error).split()) or type(error).__name__)
        texts = self.allgather(text, what)
        failed = [(r, t) for r, t in enumerate(texts) if t is not None]
        if not failed:
            return None
        distinct: List[str] = list(dict.fromkeys(str(t) for _, t in failed))
        if len(failed) == self.size and len(distinct) == 1:
            return distinct[0]
        return "; ".join(f"rank {r}: {t}" for r, t in failed)

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)

    # ---------------------------------------------------------------- the data-parallel rules

    def shard(self, rows: np.ndarray) -> np.ndarray:
        """This rank's rows of a global batch: every ``size``-th row from position ``rank`` (a
        batch sorted by length then gives every rank similar lengths)."""
        return rows[self.rank :: self.size]

    def dropout_seed(self, seed: int) -> int:
        """The dropout seed of this rank: ``seed`` on rank 0 (a run on one rank has one process's
        masks), a distinct deterministic seed on the others."""
        if self.rank == 0:
            return int(seed)
        # the core's seed mixer (random.hpp), not a copy of it
        return splitmix64((splitmix64(int(seed) % 2**64) + self.rank) % 2**64) & 0x7FFFFFFFFFFFFFFF

    def check_same_weights(self, model: Any, step: int) -> None:
        """Raise :class:`WeightsDrifted` on every rank when the ranks' weights differ."""
        prints = self.allgather(model.weights_fingerprint(), f"the weight check at step {step}")
        if len(set(prints)) > 1:
            shown = ", ".join(f"rank {r}: {p:016x}" for r, p in enumerate(prints))
            raise WeightsDrifted(
                f"the ranks' weights differ at step {step} ({shown}); the processes no longer train "
                "the same model (a different build, thread library or a memory error?); resume from "
                "the last checkpoint"
            )

    def train_step(
        self,
        model: Any,
        batch_of: Any,
        rows: np.ndarray,
        *,
        stop: bool,
        elapsed: float,
        step_seconds: float,
        where: str,
    ) -> Dict[str, Any]:
        """One data-parallel step on the global batch ``rows``: this rank's share (``batch_of(share)``
        makes its :class:`~transformer_cpp.data.Batch`) through :meth:`Transformer.compute_gradients`,
        one all-reduce of the gradient buffer, then :meth:`Transformer.apply_gradients` with the
        global token count.

        ``stop`` (this rank wants to stop), ``elapsed`` and ``step_seconds`` (rank 0's clock and its
        previous step's time) travel in the same all-reduce, so that every rank takes the same
        decisions. Returns the global ``loss``, ``accuracy``, ``tokens``, ``stop``, ``elapsed`` and
        ``step_seconds``.

        Raises (on every rank alike): ``FloatingPointError`` when the loss, a gradient or the update
        is not finite on any rank (nothing is updated); ``RuntimeError`` when a rank's step failed
        otherwise (that rank raises its own error).
        """
        buf = model.gradient_buffer()
        t0 = time.perf_counter()
        share = self.shard(rows)
        error: Optional[BaseException] = None
        loss = acc = 0.0
        n = 0
        try:
            if len(share):
                batch = batch_of(share)
                n = int(np.count_nonzero(batch.tgt_out))
                loss, acc = model.compute_gradients(batch.src, batch.tgt_in, batch.tgt_out, grad_scale=float(max(n, 1)))
            else:  # a batch with fewer pairs than ranks: this rank adds nothing
                model.zero_gradient_buffer()
                # and counts the forward it did not need, so that every rank's dropout counter (which
                # rank 0's checkpoint records for all) stays the number of steps
                model.dropout_calls = model.dropout_calls + 1
        except (ValueError, RuntimeError, FloatingPointError, MemoryError) as exc:
            error = exc
            buf[:] = 0  # (the sum is not applied: every rank raises below)
            n = 0
            loss = acc = 0.0
        spare = buf[-SPARE_SLOTS:]
        spare[:] = 0
        spare[_LOSS] = loss * n
        spare[_CORRECT] = acc * n
        spare[_TOKENS] = n
        spare[_STOP] = 1 if stop else 0
        spare[_DIVERGED if isinstance(error, FloatingPointError) else _FAILED] = 0 if error is None else 1
        if self.rank == 0:
            spare[_STEP_SECONDS] = step_seconds
            spare[_ELAPSED] = elapsed
        t1 = time.perf_counter()
        self.allreduce_sum(buf, f"the gradient all-reduce {where}")
        t2 = time.perf_counter()
        totals = spare.astype(np.float64)
        if totals[_FAILED] > 0 or totals[_DIVERGED] > 0:
            if error is not None:
                raise error
            kind = PeerFailed if totals[_FAILED] > 0 else FloatingPointError
            raise kind(f"another rank's step failed {where} (its own message says why); no update was applied")
        tokens = int(round(totals[_TOKENS]))
        model.apply_gradients(1.0 / tokens)
        t3 = time.perf_counter()
        self.seconds["compute"] += t1 - t0
        self.seconds["allreduce"] += t2 - t1
        self.seconds["update"] += t3 - t2
        self.seconds["steps"] += 1
        return {
            "loss": totals[_LOSS] / tokens,
            "accuracy": totals[_CORRECT] / tokens,
            "tokens": tokens,
            "stop": totals[_STOP] > 0,
            "elapsed": float(totals[_ELAPSED]),
            "step_seconds": float(totals[_STEP_SECONDS]),
        }
