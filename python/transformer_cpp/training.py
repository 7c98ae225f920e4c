"""Training loop: epochs of shuffled batches, metrics, history, checkpoints and exact resume.

The model does the heavy work: ``Transformer.train_step`` runs forward, the masked loss,
backward, clipping and one Adam step with the warm-up schedule in C++. This module decides what
goes into each step and keeps the books::

    model = Transformer(tok_en.vocab_size, tok_es.vocab_size, **preset_config("tutorial"))
    trainer = Trainer(model, train_pairs, valid_pairs, TrainConfig(epochs=10),
                      src_tokenizer=tok_en, tgt_tokenizer=tok_es, checkpoint_dir="runs/tutorial")
    history = trainer.fit()
    history_plot(history)

What a step sees. Each epoch the training pairs are shuffled by a generator seeded with
``(TrainConfig.seed, epoch)`` (:func:`transformer_cpp.data.batches`), optionally bucketed by
length. Teacher forcing: the decoder reads ``tgt[:, :-1]`` and learns to predict
``tgt[:, 1:]``. Loss and accuracy count non-padding target tokens only.

Metrics. Loss and accuracy are *token-weighted*: a batch with 600 target tokens weighs 600 times
as much as one token, so an epoch's value is the mean over its tokens, whatever the batch sizes
(``Transformer.last_token_count`` gives each batch's count). The history is a dict that
:func:`transformer_cpp.plotting.history_plot` draws::

    {"batch": {"step": [...], "loss": [...], "accuracy": [...], "lr": [...]},
     "epoch": {"epoch": [...], "step": [...], "loss": [...], "accuracy": [...],
               "val_loss": [...], "val_accuracy": [...], "lr": [...],
               "seconds": [...], "tokens_per_second": [...]}}

``batch`` gets one entry every ``log_every`` optimiser steps: the token-weighted mean over those
steps and the learning rate of the last one. ``seconds`` is the wall-clock time of an epoch's
training steps (validation and checkpointing excluded); ``tokens_per_second`` is target
(non-padding label) tokens per second of that time.

Checkpoints and resume. With ``checkpoint_dir``, the trainer saves a checkpoint after every epoch
(:mod:`transformer_cpp.checkpoint`; the newest ``keep_checkpoints`` are kept). The state saved is
everything the next step depends on: weights, Adam moments, step count, the dropout masks'
counter, the epoch and the position inside it, the running sums and the history. The batch order
is a pure function of ``(seed, epoch)``, so it needs no saved generator state. Hence
:meth:`Trainer.from_checkpoint` continues *exactly*: the resumed run produces the same losses,
bit for bit, as a run that was never stopped (with the same thread count; the tests check it).

Divergence. When a step's loss (or its gradient norm) is NaN or infinite, the core refuses the
step and changes nothing (``transformer_cpp.NonFiniteError``); a NaN loss returned by a model, or
a non-finite validation loss, counts the same. :meth:`Trainer.fit` then saves the state before
that step (unless its weights are not finite: checkpoints never hold NaN or infinity) and raises
:class:`TrainingDiverged`, which names the step and the checkpoint. Settings are checked when a
:class:`TrainConfig` is made (:attr:`TrainConfig.LIMITS`), and a trainer whose epoch would have
no batch (``drop_remainder`` with fewer pairs than a batch) is refused when it is made.

Ctrl-C. While :meth:`Trainer.fit` runs in the main thread, the first Ctrl-C (SIGINT) does not
kill the step in progress: the current batch finishes, a checkpoint of that exact position is
written (named ``epoch-000E-batch-00000B``), and :class:`TrainingInterrupted` (a
``KeyboardInterrupt``) is raised. Resuming from it skips the ``B`` batches of epoch ``E`` already
done and continues with the same order, so an interrupted run too is resumed exactly. A second
Ctrl-C stops at once without a new checkpoint (the last saved one is intact). Python delivers
signals to the main thread only; when ``fit`` runs elsewhere it cannot be interrupted this way.

Data parallelism. ``Trainer(..., parallel=DataParallel)`` (see :mod:`transformer_cpp.distributed`;
``transformer-cpp train`` under ``mpiexec`` does it) trains on several processes: each step splits
the global batch across the ranks, sums the gradients with one all-reduce and applies the same
Adam step everywhere. SIGTERM and SIGUSR1 then stop like Ctrl-C, on whichever rank they arrive;
rank 0 alone validates, reports and writes checkpoints; the number of processes is part of the
saved state, and a resume with another number is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import math
import signal
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ClassVar,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Tuple,
    Type,
    TypeVar,
    Union,
)

import numpy as np

from ._checks import Limit, integer as _integer, number as _number, path as _path
from .config import OPTIMIZER_FIELDS, option_fields, python_type
from .checkpoint import checkpoint_name, lock_run, mark_best, nonfinite_tensors
from .data import Batch, EncodedPairs, batch_plan, make_batch
from .translate import bleu_of_encoded, evaluate_loss, output_limit

__all__ = [
    "Limit",
    "TrainConfig",
    "Trainer",
    "TrainingInterrupted",
    "TrainingDiverged",
    "evaluate_loss",
    "empty_history",
    "bleu_of_encoded",
    "output_limit",
]

logger = logging.getLogger(__name__)

STATE_FORMAT = "transformer_cpp.trainer_state"
STATE_VERSION = 1

#: The largest seed: seeds reach the C++ core as 64-bit integers.
MAX_SEED = 2**63 - 1
#: The most C++ threads a setting may ask for.
MAX_THREADS = 1024  # the core's limit (set_num_threads)


_T = TypeVar("_T")


def _with_optimizer_settings(cls: Type[_T]) -> Type[_T]:
    """Add the optimiser's settings to ``cls`` before ``@dataclass`` makes its fields: every field of
    the core's ``OptimizerConfig`` that has an option (all but ``total_steps``, which the trainer
    fits to the run), named by its option (``eps`` is ``adam_eps``), with the table's default and
    limit. A field added to the core's table is a training setting without a change here."""
    limits: Dict[str, Limit] = getattr(cls, "LIMITS")
    settings = option_fields(OPTIMIZER_FIELDS)
    for f in settings:
        cls.__annotations__[f.option] = python_type(f).__name__
        setattr(cls, f.option, f.default)
        limits[f.option] = f.limit
    text = "\n".join(f"    {f.option}: {f.help} ({f.limit.describe()}; default {f.default!r})." for f in settings)
    cls.__doc__ = (cls.__doc__ or "").replace("    {optimizer}", text)
    return cls


@dataclass
@_with_optimizer_settings
class TrainConfig:
    """Training settings. The model architecture lives in the model's own config.

    The defaults follow the NMT tutorial (batch 64, warm-up 4000, no label smoothing); the paper
    used label smoothing 0.1. Besides the fields below, the optimiser's settings, the core's
    ``OptimizerConfig`` fields by their option names (:data:`transformer_cpp.config.OPTIMIZER_FIELDS`):

    {optimizer}
    """

    epochs: int = 10  # passes over the training pairs (a resumed run trains until this many are done)
    batch_size: int = 64  # sentence pairs per optimiser step (when max_tokens is 0)
    max_tokens: int = 0  # > 0: batches of at most this many padded tokens (pairs * longest side), by length
    time_budget: float = 0.0  # > 0: minutes of training; the schedule is fitted to it and training stops on time
    decay: bool = False  # after the warm-up (from step 1 with fixed_lr), decay linearly to 0 at the run's end
    seed: int = 0  # seeds the per-epoch shuffling (the model has its own seed for weights and dropout)
    log_every: int = 10  # one "batch" history entry per this many steps
    bucket_by_length: bool = False  # batch sentences of similar length together (less padding)
    drop_remainder: bool = False  # drop the last, smaller batch of each epoch
    keep_checkpoints: int = 5  # keep the newest this many checkpoints (0 = keep all; "best" is always kept)
    val_bleu_sentences: int = 500  # greedy BLEU on this many validation pairs after each epoch (0 = off)
    average_last: int = 0  # > 1: at the end, average the newest this many checkpoints into "averaged"
    threads: Optional[int] = None  # C++ threads (None: leave the current setting)
    adaptive_threads: bool = True  # use fewer of those threads while that is faster (a busy machine)
    progress: bool = True  # a tqdm progress bar per epoch

    #: The allowed values of each setting (the command line checks its options with these); the
    #: optimiser's are the core's (added by _with_optimizer_settings).
    LIMITS: ClassVar[Dict[str, Limit]] = {
        "epochs": Limit(True, 0, 1_000_000),
        "batch_size": Limit(True, 1, 1_000_000),
        "max_tokens": Limit(True, 0, 100_000_000),
        "time_budget": Limit(False, 0, 1_000_000, unit="minutes"),  # about two years
        "decay": Limit.flag(),
        "seed": Limit(True, 0, MAX_SEED),
        "log_every": Limit(True, 1, 1_000_000_000),
        "bucket_by_length": Limit.flag(),
        "drop_remainder": Limit.flag(),
        "keep_checkpoints": Limit(True, 0, 1_000_000),
        "val_bleu_sentences": Limit(True, 0, 1_000_000_000),
        "average_last": Limit(True, 0, 1_000),
        "threads": Limit(True, 1, MAX_THREADS),
        "adaptive_threads": Limit.flag(),
        "progress": Limit.flag(),
    }

    if TYPE_CHECKING:  # the optimiser's settings are added at run time, from the core's table

        def __init__(self, **settings: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

    @classmethod
    def check(cls, name: str, value: Any) -> Any:
        """``value`` if it is allowed for setting ``name`` (as an ``int``, ``float`` or ``bool``),
        else ``TypeError`` (a value of the wrong type) or ``ValueError`` (out of range) naming the
        setting and what it allows."""
        if name == "threads" and value is None:
            return None
        if name not in cls.LIMITS:
            raise ValueError(f"TrainConfig: unknown setting {name!r}")
        return cls.LIMITS[name].check("TrainConfig", name, value)

    def __post_init__(self) -> None:
        self._check_combination(self.max_tokens, self.bucket_by_length, self.drop_remainder)

    def __setattr__(self, name: str, value: Any) -> None:
        """Every setting is checked when it is set, at construction and after it (``config.fixed_lr
        = float("nan")`` is refused like ``TrainConfig(fixed_lr=float("nan"))``)."""
        if name in self.LIMITS:
            value = self.check(name, value)
            if name in ("max_tokens", "bucket_by_length", "drop_remainder") and all(
                hasattr(self, n) for n in ("max_tokens", "bucket_by_length", "drop_remainder")
            ):
                now = {
                    "max_tokens": self.max_tokens,
                    "bucket_by_length": self.bucket_by_length,
                    "drop_remainder": self.drop_remainder,
                    name: value,
                }
                self._check_combination(now["max_tokens"], now["bucket_by_length"], now["drop_remainder"])
        object.__setattr__(self, name, value)

    @staticmethod
    def _check_combination(max_tokens: int, bucket_by_length: bool, drop_remainder: bool) -> None:
        for name, on in (("bucket_by_length", bucket_by_length), ("drop_remainder", drop_remainder)):
            if max_tokens and on:  # it would be ignored, not applied
                raise ValueError(
                    f"TrainConfig: {name} applies to batches of batch_size pairs; with max_tokens "
                    f"{max_tokens} the batches are cut by tokens (and sorted by length): set "
                    f"max_tokens=0 or {name}=False"
                )

    def optimizer_settings(self) -> Dict[str, Any]:
        """The optimiser's settings as ``Transformer.configure_optimizer`` takes them (by field name:
        ``adam_eps`` is ``eps``), without ``total_steps``."""
        return {f.name: getattr(self, f.option) for f in option_fields(OPTIMIZER_FIELDS)}

    def to_dict(self) -> Dict[str, Any]:
        """The settings as a JSON-serialisable dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "TrainConfig":
        """Rebuild from :meth:`to_dict` output; unknown keys are an error."""
        if not isinstance(values, Mapping):
            raise TypeError(f"TrainConfig.from_dict: expected a mapping of settings, got {type(values).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(map(str, set(values) - known))
        if unknown:
            raise ValueError(f"TrainConfig: unknown setting(s) {', '.join(unknown)}")
        return cls(**dict(values))


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped on Ctrl-C. ``checkpoint`` is the checkpoint written at the stop (or None)."""

    def __init__(self, message: str, checkpoint: Optional[Path] = None) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint


class TrainingDiverged(RuntimeError):
    """Training stopped because the loss (or the gradient, or a validation loss) became NaN or
    infinite. The step that failed changed nothing; ``checkpoint`` is the checkpoint of the state
    before it (written when the run has a checkpoint directory and the weights are finite), or
    the newest earlier one, or ``None``."""

    def __init__(self, message: str, checkpoint: Optional[Path] = None) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint


class _Diverged(Exception):
    """Raised inside an epoch when a value became non-finite; :meth:`Trainer.fit` turns it into
    :class:`TrainingDiverged` after saving what can be saved."""


def empty_history() -> Dict[str, Dict[str, List[Any]]]:
    """A history with every series present and empty."""
    return {
        "batch": {"step": [], "loss": [], "accuracy": [], "lr": []},
        "epoch": {
            "epoch": [],
            "step": [],
            "loss": [],
            "accuracy": [],
            "val_loss": [],
            "val_accuracy": [],
            "val_bleu": [],
            "lr": [],
            "seconds": [],
            "minutes": [],
            "tokens_per_second": [],
        },
    }


def _fingerprint(encoded: Optional[EncodedPairs]) -> Optional[str]:
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


class _StopRequest:
    """SIGINT handler for the duration of ``fit``: the first Ctrl-C asks for a clean stop after
    the current batch, a second one raises ``KeyboardInterrupt`` at once."""

    def __init__(self, terminate: bool = False, quiet: bool = False) -> None:
        self.requested = False
        self._quiet = quiet  # data parallelism: rank 0 alone says it
        self._previous: Dict[int, Any] = {}
        self._installed = False
        # data parallelism: SIGTERM (a cluster's scheduler stopping the job) and SIGUSR1 (what Open MPI's
        # mpiexec passes on to every rank, where it answers SIGINT and SIGTERM by killing them) stop
        # with a checkpoint too
        self._signals = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1) if terminate else (signal.SIGINT,)

    def __enter__(self) -> "_StopRequest":
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


def _checked_state(state: Mapping[str, Any]) -> Dict[str, Any]:
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
    finished = state.get("finished", False)
    if not isinstance(finished, bool):
        raise ValueError(f"finished must be true or false, got {finished!r:.40}")
    saved_history = state["history"]
    if not isinstance(saved_history, Mapping):
        raise ValueError(f"history must be an object, got {type(saved_history).__name__}")
    history = empty_history()
    for section, series in history.items():
        saved = saved_history.get(section, {})
        if not isinstance(saved, Mapping):
            raise ValueError(f"history.{section} must be an object, got {type(saved).__name__}")
        for key in series:
            values = saved.get(key, [])
            if not isinstance(values, list):
                raise ValueError(f"history.{section}.{key} must be a list, got {type(values).__name__}")
            series[key] = list(values)
    step = state.get("step")
    if step is not None:
        step = _state_number(state, "step", True)
    run_id = state.get("run_id")
    return {
        "epoch": _state_number(state, "epoch", True),
        "batch_in_epoch": _state_number(state, "batch_in_epoch", True),
        "epoch_sums": _state_sums(state, "epoch_sums"),
        "epoch_seconds": _state_number(state, "epoch_seconds", False),
        "window": _state_sums(state, "window"),
        "window_steps": _state_number(state, "window_steps", True),
        "elapsed": _state_number(state, "elapsed", False, 0.0),
        "finished": finished,
        "best": {"bleu": bleu, "checkpoint": name},
        "history": history,
        "step": step,
        "run_id": run_id if isinstance(run_id, str) and run_id else None,
    }


class Trainer:
    """Trains a :class:`~transformer_cpp.model.Transformer` on encoded sentence pairs.

    Args:
        model: the model; its optimiser is configured from ``config`` (warm-up schedule, Adam
            betas/eps, clipping, label smoothing).
        train_data: training pairs from :func:`transformer_cpp.data.encode_pairs`.
        valid_data: validation pairs (loss and accuracy after each epoch), or ``None``.
        config: the :class:`TrainConfig` (default settings if ``None``).
        src_tokenizer, tgt_tokenizer: needed to write checkpoints (they are saved with them).
        checkpoint_dir: the run directory for a checkpoint after every epoch, or ``None``.
        data_info: JSON-serialisable description of the data (file, number of pairs, split seed,
            fractions, languages...), stored in each checkpoint so that the split can be rebuilt.

    Attributes:
        epoch: complete epochs so far. batch_in_epoch: batches done of the epoch in progress.
        history: see the module docstring.
        last_checkpoint: the newest checkpoint written (or loaded), or ``None``.
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
        if parallel is not None and not all(hasattr(parallel, a) for a in ("rank", "size", "train_step")):
            raise TypeError(
                f"Trainer: parallel must be a transformer_cpp.distributed.DataParallel or None, got "
                f"{type(parallel).__name__}"
            )
        # data parallelism over MPI: every rank trains; rank 0 alone writes checkpoints and reports
        self.parallel = parallel if parallel is not None and parallel.size > 1 else None
        self._root = self.parallel is None or self.parallel.rank == 0
        if not self._root:
            checkpoint_dir = None
        if not isinstance(train_data, EncodedPairs):
            raise TypeError(
                f"Trainer: train_data must be EncodedPairs (from encode_pairs), got {type(train_data).__name__}"
            )
        if valid_data is not None and not isinstance(valid_data, EncodedPairs):
            raise TypeError(f"Trainer: valid_data must be EncodedPairs or None, got {type(valid_data).__name__}")
        self.config = config if config is not None else TrainConfig()
        if not isinstance(self.config, TrainConfig):
            raise TypeError(f"Trainer: config must be a TrainConfig, got {type(self.config).__name__}")
        self.model = model
        self.train_data = train_data
        self.valid_data = valid_data
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.checkpoint_dir = _path("Trainer: checkpoint_dir", checkpoint_dir) if checkpoint_dir is not None else None
        if self.checkpoint_dir is not None and (src_tokenizer is None or tgt_tokenizer is None):
            raise ValueError(
                "Trainer: checkpoint_dir needs src_tokenizer and tgt_tokenizer (they are saved with the model)"
            )
        if self.checkpoint_dir is not None:
            from .checkpoint import check_writable

            check_writable(self.checkpoint_dir, "Trainer: checkpoint_dir")  # before any work, not after an epoch
        self.data_info = dict(data_info) if data_info is not None else None
        for key, tok in (("src_vocab_size", src_tokenizer), ("tgt_vocab_size", tgt_tokenizer)):
            if tok is not None and tok.vocab_size != model.config[key]:
                raise ValueError(
                    f"Trainer: the tokenizer has {tok.vocab_size} tokens but the model's {key} is {model.config[key]}"
                )
        # ids beyond the model's vocabularies (pairs encoded with other tokenizers) would fail only
        # when their batch comes, perhaps after an epoch of training
        for label, data in (("train_data", train_data), ("valid_data", valid_data)):
            if data is None or not len(data):
                continue
            for side, ids, key in (("source", data.src, "src_vocab_size"), ("target", data.tgt, "tgt_vocab_size")):
                low, high = int(ids.min()), int(ids.max())
                if low < 0 or high >= model.config[key]:
                    raise ValueError(
                        f"Trainer: {label} holds {side} token id {high if high >= 0 else low}, outside the "
                        f"model's {key} {model.config[key]}; were the pairs encoded with other tokenizers?"
                    )
        self._configure_model()
        if self.parallel is not None:  # each rank its own dropout masks, deterministically
            model.set_dropout_seed(self.parallel.dropout_seed(int(model.config["seed"])))
        self._stop_all = False  # a rank asked to stop (data parallelism: the step's all-reduce says so)
        self._step_seconds = 0.0  # this rank's last step
        self._agreed_step_seconds = 0.0  # rank 0's step before the last (data parallelism: what every rank times with)
        self.epoch = 0
        self.batch_in_epoch = 0
        self.history = empty_history()
        self.last_checkpoint: Optional[Path] = None
        self._epoch_sums = _zero_sums()
        self._epoch_seconds = 0.0
        self._governor: Optional[Any] = None
        self._window = _zero_sums()
        self._window_steps = 0
        self._fingerprints = {"train": _fingerprint(train_data), "valid": _fingerprint(valid_data)}
        self._plan: Tuple[int, List[np.ndarray]] = (-1, [])
        self.elapsed = 0.0  # seconds of training so far (what the time budget counts), over all sessions
        self.finished = False  # the time budget is spent
        self.best: Dict[str, Any] = {"bleu": None, "checkpoint": None}  # best validation BLEU so far
        self._clock = time.perf_counter()
        self.run_id = uuid.uuid4().hex[:16]  # recorded in each checkpoint: pruning deletes only this run's
        if not self.batch_plan(0):
            c = self.config
            raise ValueError(
                f"Trainer: no training batch: {len(train_data)} training pair(s) make no complete batch of "
                f"batch_size {c.batch_size} and drop_remainder drops the incomplete one; lower batch_size or "
                "set drop_remainder=False"
                if len(train_data)
                else "Trainer: train_data holds no pair"
            )

    # ------------------------------------------------------------------ setup

    def _configure_model(self, total_steps: int = 0) -> None:
        c = self.config
        if total_steps and total_steps <= c.warmup and c.fixed_lr == 0:
            total_steps = c.warmup + 1  # a run shorter than its warm-up: decay over its last step
        self.model.configure_optimizer(**c.optimizer_settings(), total_steps=int(total_steps))
        if c.threads is not None:
            from ._runtime import set_num_threads

            set_num_threads(c.threads)

    @property
    def batches_per_epoch(self) -> int:
        """Optimiser steps in the current epoch (with ``max_tokens`` the count varies a little)."""
        return len(self.batch_plan(self.epoch))

    def batch_plan(self, epoch: int) -> List[np.ndarray]:
        """The training rows of each batch of 0-based ``epoch``, in order (a pure function of
        the data, the settings and ``epoch``)."""
        if self._plan[0] != epoch:
            c = self.config
            self._plan = (
                epoch,
                batch_plan(
                    self.train_data,
                    c.batch_size,
                    max_tokens=c.max_tokens,
                    shuffle=True,
                    seed=c.seed,
                    epoch=epoch,
                    bucket_by_length=c.bucket_by_length,
                    drop_remainder=c.drop_remainder,
                ),
            )
        return self._plan[1]

    def epoch_batches(self, epoch: int) -> Iterator[Batch]:
        """The batches of 0-based ``epoch`` in training order (what :meth:`fit` feeds the model)."""
        return (make_batch(self.train_data, idx) for idx in self.batch_plan(epoch))

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
            "epoch_sums": dict(self._epoch_sums),
            "epoch_seconds": self._epoch_seconds,
            "window": dict(self._window),
            "window_steps": self._window_steps,
            "history": self.history,
            "data_fingerprint": dict(self._fingerprints),
            "elapsed": self.elapsed,
            "finished": self.finished,
            "best": dict(self.best),
            "run_id": self.run_id,
            "world_size": self.world_size,
        }

    @property
    def world_size(self) -> int:
        """Processes that train together (MPI ranks; 1 without data parallelism)."""
        return 1 if self.parallel is None else int(self.parallel.size)

    @property
    def _progress(self) -> bool:
        return bool(self.config.progress) and self._root

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (the model's weights and optimiser are separate).

        Raises:
            ValueError: if the state is not a trainer state, or was made with other data.
        """
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ValueError("Trainer.load_state_dict: not a transformer_cpp trainer state")
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"Trainer.load_state_dict: unsupported trainer state version {state.get('version')!r}")
        saved = state.get("data_fingerprint") or {}
        for part in ("train", "valid"):
            if (
                saved.get(part) is not None
                and self._fingerprints[part] is not None
                and saved[part] != self._fingerprints[part]
            ):
                raise ValueError(
                    f"Trainer: the {part} data differ from those the checkpoint was trained on (different file, "
                    "number of samples, split, tokenizers or max_length); resuming would not continue the same run"
                )
        try:
            values = _checked_state(state)
        except KeyError as exc:
            raise ValueError(f"Trainer.load_state_dict: damaged trainer state (it lacks {exc})") from None
        except (TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"Trainer.load_state_dict: damaged trainer state ({exc})") from None
        problem = world_size_problem(state.get("world_size", 1), self.world_size)
        if problem is not None:
            raise ValueError(problem)
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
        self._epoch_sums, self._epoch_seconds = values["epoch_sums"], values["epoch_seconds"]
        self._window, self._window_steps = values["window"], values["window_steps"]
        self.elapsed, self.finished, self.best = values["elapsed"], values["finished"], values["best"]
        if values["run_id"] is not None:
            self.run_id = values["run_id"]
        self.history = values["history"]

    @classmethod
    def from_checkpoint(
        cls,
        path: Union[str, Path, Any],
        train_data: EncodedPairs,
        valid_data: Optional[EncodedPairs] = None,
        *,
        checkpoint_dir: Union[str, Path, None] = None,
        epochs: Optional[int] = None,
        threads: Optional[int] = None,
        progress: Optional[bool] = None,
        time_budget: Optional[float] = None,
        parallel: Any = None,
    ) -> "Trainer":
        """A trainer that continues the run saved at ``path`` (a run directory, one checkpoint
        directory, or a :class:`~transformer_cpp.checkpoint.Checkpoint` loaded with its optimiser).

        ``train_data`` and ``valid_data`` must be the same encoded pairs as in the saved run
        (checked with a hash). The model, tokenizers, optimiser state, settings and history come
        from the checkpoint; ``epochs`` (the total to reach), ``threads`` and ``progress`` may be
        changed since they do not alter the numbers. New checkpoints go to ``checkpoint_dir``,
        by default the run directory that holds ``path``. ``parallel`` (a
        :class:`~transformer_cpp.distributed.DataParallel`) must have as many ranks as the run had.

        Raises:
            transformer_cpp.checkpoint.CheckpointError: a damaged checkpoint or one without
                optimiser or trainer state.
            ValueError: different data.
        """
        from .checkpoint import Checkpoint, CheckpointError, load_checkpoint

        ckpt = path if isinstance(path, Checkpoint) else load_checkpoint(path, optimizer=True)
        if not ckpt.optimizer_loaded:
            raise CheckpointError(
                f"checkpoint '{ckpt.path}' was loaded without its optimiser state; it cannot be resumed"
            )
        if ckpt.trainer_state is None or ckpt.train_config is None:
            raise CheckpointError(f"checkpoint '{ckpt.path}' has no trainer state; it cannot be resumed")
        try:
            values = dict(ckpt.train_config)
            if epochs is not None:
                values["epochs"] = epochs
            if threads is not None:
                values["threads"] = threads
            if progress is not None:
                values["progress"] = progress
            if time_budget is not None:
                values["time_budget"] = time_budget
            config = TrainConfig.from_dict(values)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint '{ckpt.path}': invalid training settings ({exc})") from None
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

    def save_checkpoint(self) -> Path:
        """Write a checkpoint of the current position into ``checkpoint_dir``; return its path."""
        from .checkpoint import save_checkpoint

        if self.checkpoint_dir is None:
            raise ValueError("Trainer.save_checkpoint: no checkpoint_dir was given")
        path = save_checkpoint(
            self.checkpoint_dir,
            self.model,
            self.src_tokenizer,
            self.tgt_tokenizer,
            trainer_state=self.state_dict(),
            train_config=self.config.to_dict(),
            data=self.data_info,
            optimizer=True,
            keep=self.config.keep_checkpoints,
            run_id=self.run_id,
        )
        self.last_checkpoint = path
        return path

    # ------------------------------------------------------------------ training

    def evaluate(self, data: Optional[EncodedPairs] = None) -> Tuple[float, float]:
        """Masked loss and accuracy (token-weighted) on ``data`` (default: the validation pairs)."""
        data = self.valid_data if data is None else data
        if data is None:
            raise ValueError("Trainer.evaluate: no data (and no valid_data was given)")
        loss, acc, _ = evaluate_loss(self.model, data, self.config.batch_size)
        return loss, acc

    def _record_step(self, loss: float, acc: float, tokens: int) -> None:
        for sums in (self._epoch_sums, self._window):
            sums["loss"] += loss * tokens
            sums["correct"] += acc * tokens
            sums["tokens"] += tokens
        self._window_steps += 1
        self.batch_in_epoch += 1
        if self._window_steps >= self.config.log_every:
            w = self._window
            n = max(w["tokens"], 1)
            step = self.model.step
            h = self.history["batch"]
            h["step"].append(step)
            h["loss"].append(w["loss"] / n)
            h["accuracy"].append(w["correct"] / n)
            h["lr"].append(self.model.learning_rate(step))
            self._window = _zero_sums()
            self._window_steps = 0

    def validation_bleu(self, model: Any = None) -> Optional[float]:
        """Greedy corpus BLEU (sacrebleu) on ``val_bleu_sentences`` validation pairs (evenly spread),
        or ``None`` without validation pairs, a target tokenizer or ``val_bleu_sentences``.
        The references are the encoded targets decoded back to text (exact for these tokenizers)."""
        n = self.config.val_bleu_sentences
        if not n or self.valid_data is None or self.tgt_tokenizer is None:
            return None
        return bleu_of_encoded(self.model if model is None else model, self.valid_data, self.tgt_tokenizer, n)

    def _finish_epoch(self, partial: bool = False) -> Dict[str, Any]:
        """The history entry of the epoch just trained (``partial``: stopped inside it by the
        time budget; the entry's ``epoch`` is then fractional and the epoch count stays)."""
        s = self._epoch_sums
        n = max(s["tokens"], 1)
        e = self.history["epoch"]
        done = self.epoch + (self.batch_in_epoch / max(self.batches_per_epoch, 1) if partial else 1)
        entry: Dict[str, Any] = {
            "epoch": round(done, 4) if partial else self.epoch + 1,
            "step": self.model.step,
            "loss": s["loss"] / n,
            "accuracy": s["correct"] / n,
            "lr": self.model.learning_rate(max(self.model.step, 1)),
            "seconds": self._epoch_seconds,
            "minutes": self.elapsed / 60.0,
            "tokens_per_second": s["tokens"] / self._epoch_seconds if self._epoch_seconds > 0 else 0.0,
        }
        failure = None
        if self._root:  # data parallelism: rank 0 validates, the others wait for its entry
            try:
                if self.valid_data is not None:
                    entry["val_loss"], entry["val_accuracy"] = self.evaluate()
                bleu = self.validation_bleu()
                if bleu is not None:
                    entry["val_bleu"] = bleu
            except FloatingPointError as exc:
                failure = str(exc)
        if self.parallel is not None:
            failure, entry = self.parallel.bcast(
                (failure, entry) if self._root else None, f"the wait for rank 0's validation of epoch {self.epoch + 1}"
            )
        if failure is not None:
            raise FloatingPointError(failure)
        for key, value in entry.items():
            e[key].append(value)
        if not partial:
            self.epoch += 1
            self.batch_in_epoch = 0
        self._epoch_sums = _zero_sums()
        self._epoch_seconds = 0.0
        return entry

    def _save_and_rank(self, entry: Optional[Dict[str, Any]]) -> Optional[Path]:
        """Save a checkpoint (with a run directory) and point ``best`` at it if its validation BLEU
        is the best so far."""
        if self.checkpoint_dir is None:
            return None
        bleu = None if entry is None else entry.get("val_bleu")
        # on a tie the newer checkpoint wins (it has trained longer)
        better = bleu is not None and (self.best["bleu"] is None or bleu >= self.best["bleu"])
        if better:
            self.best = {"bleu": bleu, "checkpoint": checkpoint_name(self.epoch, self.batch_in_epoch)}
        path = self.save_checkpoint()
        if better:
            mark_best(self.checkpoint_dir, path.name)
        return path

    def _fit_schedule(self, remaining_seconds: float, seconds_per_step: float) -> None:
        """Fit the learning-rate decay to the end of the run: the time budget (estimated from
        the measured seconds per step) or the last epoch."""
        c = self.config
        if not c.decay:
            return
        if c.time_budget > 0:
            total = self.model.step + int(max(remaining_seconds, 0.0) / max(seconds_per_step, 1e-9))
            if c.epochs:
                total = min(total, self._steps_to_epoch(c.epochs))
        else:
            total = self._steps_to_epoch(c.epochs)
        self._configure_model(total_steps=max(total, 1))

    def _steps_to_epoch(self, epochs: int) -> int:
        """Optimiser steps when ``epochs`` epochs are done (estimated from the current epoch's size)."""
        return int(self.model.step) + (epochs - self.epoch) * self.batches_per_epoch - self.batch_in_epoch

    def fit(
        self,
        epochs: Optional[int] = None,
        *,
        on_batch_end: Optional[Callable[["Trainer"], None]] = None,
        on_epoch_end: Optional[Callable[["Trainer", Dict[str, Any]], None]] = None,
    ) -> Dict[str, Dict[str, List[Any]]]:
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
        lock = lock_run(self.checkpoint_dir) if self.checkpoint_dir is not None else contextlib.nullcontext()
        with lock:
            try:
                return self._fit(epochs, on_batch_end, on_epoch_end)
            finally:
                if self._governor is not None:  # leave the core with the threads it was given
                    from ._runtime import set_num_threads

                    set_num_threads(self._governor.most)

    def _fit(
        self,
        epochs: Optional[int],
        on_batch_end: Optional[Callable[["Trainer"], None]],
        on_epoch_end: Optional[Callable[["Trainer", Dict[str, Any]], None]],
    ) -> Dict[str, Dict[str, List[Any]]]:
        target = self.config.epochs if epochs is None else TrainConfig.check("epochs", epochs)
        if self.config.threads is not None:
            from ._runtime import set_num_threads

            set_num_threads(self.config.threads)
        budget = self.config.time_budget * 60.0
        # "finished" means the budget is spent: a resume with a larger budget trains on
        self.finished = bool(budget) and self.elapsed >= budget * 0.985
        if self.finished:
            return self.history
        self._clock = time.perf_counter() - self.elapsed  # elapsed carries over from earlier sessions
        self._fit_schedule(budget - self.elapsed, 1.0)  # a first guess; refitted once steps are timed
        if self.parallel is not None:
            self.parallel.check_same_weights(self.model, self.model.step)
        with _StopRequest(terminate=self.parallel is not None, quiet=not self._root) as stop:
            while self.epoch < target and not self.finished:
                try:
                    entry = self._run_epoch(target, stop, on_batch_end, budget)
                except _Diverged as exc:
                    raise self._diverged(str(exc)) from None
                if entry is None:  # interrupted
                    path = self.save_checkpoint() if self.checkpoint_dir is not None else None
                    if self.parallel is not None:  # every rank stops once rank 0's checkpoint is written
                        self.parallel.barrier("the wait for rank 0's checkpoint")
                    where = f"; checkpoint saved to {path}" if path is not None else ""
                    raise TrainingInterrupted(
                        f"training interrupted in epoch {self.epoch + 1} after {self.batch_in_epoch} batches{where}",
                        path,
                    )
                path = self._save_and_rank(entry)
                self.elapsed = time.perf_counter() - self._clock
                if on_epoch_end is not None:
                    on_epoch_end(self, entry)
                requested = (
                    stop.requested
                    if self.parallel is None
                    else self.parallel.any(stop.requested, f"the stop check after epoch {self.epoch}")
                )
                if requested and self.epoch < target and not self.finished:  # Ctrl-C during validation or saving
                    where = f"; checkpoint saved to {path}" if path is not None else ""
                    raise TrainingInterrupted(f"training interrupted after epoch {self.epoch}{where}", path)
        if self.parallel is not None:
            self.parallel.check_same_weights(self.model, self.model.step)
        if self.config.average_last > 1 and self.checkpoint_dir is not None:
            self.average_checkpoints()
        return self.history

    def _parallel_step(
        self, rows: np.ndarray, stop: _StopRequest, where: str, session_start: float
    ) -> Tuple[float, float, int, int]:
        """One data-parallel step on the global batch ``rows`` (see
        :meth:`transformer_cpp.distributed.DataParallel.train_step`); returns the global loss,
        accuracy and token count, and this rank's work for the thread governor."""
        assert self.parallel is not None
        shapes: List[int] = [0]

        def batch_of(share: np.ndarray) -> Batch:
            b = make_batch(self.train_data, share)
            shapes[0] = b.src.size + b.tgt_in.size
            return b

        try:
            r = self.parallel.train_step(
                self.model,
                batch_of,
                rows,
                stop=stop.requested,
                elapsed=time.perf_counter() - session_start,
                step_seconds=self._step_seconds,
                where=where,
            )
        except FloatingPointError as exc:  # on every rank alike; nothing was updated
            raise _Diverged(f"{where}: {exc}") from None
        self._stop_all = r["stop"]
        self.elapsed = r["elapsed"]
        self._agreed_step_seconds = r["step_seconds"]
        return r["loss"], r["accuracy"], r["tokens"], shapes[0]

    def _diverged(self, reason: str) -> TrainingDiverged:
        """Save the state before the step that failed (when its weights are finite) and describe
        what happened."""
        if self.checkpoint_dir is None:
            saved = "nothing was saved (the trainer has no checkpoint_dir)"
            path = None
        else:
            bad = nonfinite_tensors(self.model.parameters())
            if not bad:
                path = self.save_checkpoint()
                saved = f"the state before it is saved in {path}"
            else:
                path = self.last_checkpoint
                saved = (
                    f"the weights are not finite ({len(bad)} tensor(s), e.g. {bad[0]}), so nothing new was saved; "
                    + (f"the last good checkpoint is {path}" if path is not None else "no checkpoint was written")
                )
        return TrainingDiverged(
            f"training diverged {reason}; {saved}; a lower learning rate (lr_scale or fixed_lr), gradient clipping "
            "(clip_norm) or a longer warm-up may help",
            path,
        )

    def average_checkpoints(self) -> Optional[Path]:
        """Average the newest ``average_last`` complete checkpoints of this run into
        ``<run>/averaged``; point ``best`` at it when its validation BLEU beats the best
        checkpoint's (or when there is no BLEU)."""
        from .checkpoint import average_checkpoints, list_checkpoints

        assert self.checkpoint_dir is not None
        paths = list_checkpoints(self.checkpoint_dir, run_id=self.run_id)[-self.config.average_last :]
        if len(paths) < 2:
            return None
        path, model = average_checkpoints(paths, self.checkpoint_dir)
        assert path is not None  # written, since run_dir was given
        bleu = self.validation_bleu(model)
        if bleu is None or self.best["bleu"] is None or bleu > self.best["bleu"]:
            mark_best(self.checkpoint_dir, path.name)
        message = f"averaged the last {len(paths)} checkpoints into {path}"
        if bleu is not None:
            message += (
                f": validation BLEU {bleu:.2f} (best checkpoint {self.best['bleu']:.2f})"
                if self.best["bleu"] is not None
                else f": validation BLEU {bleu:.2f}"
            )
        self._report(message)
        return path

    def _report(self, message: str) -> None:
        if not self._root:
            return
        if self.config.progress:
            from tqdm.auto import tqdm

            tqdm.write(message, file=sys.stderr)
        else:
            logger.info("%s", message)

    def _thread_governor(self) -> Optional[Any]:
        """The run's :class:`~transformer_cpp._runtime.ThreadGovernor` (one per Trainer, so what
        it learnt carries over between epochs), or None with one thread or ``adaptive_threads``
        off."""
        from ._runtime import ThreadGovernor, get_num_threads, set_num_threads

        most = self.config.threads if self.config.threads is not None else get_num_threads()
        if not self.config.adaptive_threads or most <= 1:
            if self._governor is not None:  # switched off between fits: all threads again
                set_num_threads(self._governor.most)
                self._governor = None
            return None
        if self._governor is None or self._governor.most != most:
            self._governor = ThreadGovernor(most)
        else:
            set_num_threads(self._governor.threads)  # validation may have run with another count
        return self._governor

    def _run_epoch(
        self, target: int, stop: _StopRequest, on_batch_end: Optional[Callable[["Trainer"], None]], budget: float = 0.0
    ) -> Optional[Dict[str, Any]]:
        """Run the rest of the current epoch; the epoch's history entry, or None if stopped by
        Ctrl-C. With a time budget the epoch may end early (a partial entry; ``finished`` set)."""
        from tqdm.auto import tqdm

        total = self.batches_per_epoch
        skip = self.batch_in_epoch
        bar = tqdm(
            total=total,
            initial=skip,
            desc=f"epoch {self.epoch + 1}/{target}",
            unit="batch",
            disable=not self._progress,
            leave=True,
            dynamic_ncols=True,
            file=sys.stderr,
        )
        model = self.model
        session_start = self._clock
        timed_steps, timed_seconds = 0, 0.0
        partial = False
        governor = self._thread_governor()
        try:
            for rows in itertools.islice(self.batch_plan(self.epoch), skip, None):
                t0 = time.perf_counter()
                where = f"at step {model.step + 1} (epoch {self.epoch + 1}, batch {self.batch_in_epoch + 1})"
                if self.parallel is None:
                    batch = make_batch(self.train_data, rows)
                    try:
                        loss, acc = model.train_step(batch.src, batch.tgt_in, batch.tgt_out)
                    except FloatingPointError as exc:  # transformer_cpp.NonFiniteError: the step changed nothing
                        raise _Diverged(f"{where}: {exc}") from None
                    tokens, work = model.last_token_count, batch.src.size + batch.tgt_in.size
                else:
                    loss, acc, tokens, work = self._parallel_step(rows, stop, where, session_start)
                if not math.isfinite(loss):
                    raise _Diverged(f"{where}: the loss is {loss}")
                t1 = time.perf_counter()
                if governor is not None:
                    governor.record(t1 - t0, work)
                self._epoch_seconds += t1 - t0
                if self.parallel is None:  # (data parallelism: every rank has rank 0's clock, set by the step)
                    self.elapsed = t1 - session_start
                step_seconds = t1 - t0 if self.parallel is None else self._agreed_step_seconds
                self._step_seconds = t1 - t0
                self._record_step(loss, acc, tokens)
                if self.parallel is not None and model.step % self.parallel.check_every == 0:
                    self.parallel.check_same_weights(model, model.step)
                if self.batch_in_epoch > skip + 2:  # the first steps of a session warm caches up
                    timed_steps += 1
                    timed_seconds += step_seconds
                    if timed_steps % 50 == 0:
                        # epoch ends cost validation and a checkpoint: reserve 3% of the budget for them
                        self._fit_schedule(budget * 0.97 - self.elapsed, timed_seconds / timed_steps)
                if self._progress:
                    s = self._epoch_sums
                    n = max(s["tokens"], 1)
                    bar.set_postfix(
                        loss=f"{s['loss'] / n:.4f}",
                        acc=f"{s['correct'] / n:.4f}",
                        lr=f"{model.learning_rate(model.step):.2e}",
                        refresh=False,
                    )
                    bar.update(1)
                if on_batch_end is not None:
                    on_batch_end(self)
                if stop.requested if self.parallel is None else self._stop_all:
                    return None
                if budget and self.elapsed >= budget * 0.985:
                    self.finished = True
                    partial = self.batch_in_epoch < total
                    break
            try:
                entry = self._finish_epoch(partial=partial)
            except FloatingPointError as exc:  # a non-finite validation loss or decoding
                raise _Diverged(f"in the validation of epoch {self.epoch + 1}: {exc}") from None
            self.elapsed = time.perf_counter() - session_start
            val = ""
            if "val_loss" in entry:
                val = f", val_loss {entry['val_loss']:.4f}, val_acc {entry['val_accuracy']:.4f}"
            if "val_bleu" in entry:
                val += f", val_bleu {entry['val_bleu']:.2f}"
            label = f"epoch {entry['epoch']}" + (" (time budget spent)" if self.finished else "")
            summary = (
                f"{label}: loss {entry['loss']:.4f}, acc {entry['accuracy']:.4f}{val}, "
                f"{entry['seconds']:.1f} s, {entry['tokens_per_second']:.0f} tokens/s, "
                f"{self.elapsed / 60:.1f} min in all"
            )
            if self._progress:
                bar.set_postfix(
                    loss=f"{entry['loss']:.4f}", acc=f"{entry['accuracy']:.4f}", lr=f"{entry['lr']:.2e}", refresh=True
                )
                bar.close()
                tqdm.write(summary, file=sys.stderr)
            elif self._root:
                logger.info("%s", summary)  # the command line shows these; a library user may enable them
            return entry
        finally:
            bar.close()
