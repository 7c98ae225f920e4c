"""Training settings (:class:`TrainConfig`) and the two ways training stops early.

The optimiser's settings are the core's ``OptimizerConfig`` fields that have an option (all but
``total_steps``, which the trainer fits to the run), named by their option (``eps`` is
``adam_eps``). They are written out below so that readers and type checkers see them; their
defaults, limits and help come from the core's table (:data:`transformer_cpp.config.OPTIMIZER_FIELDS`),
the one home of each, and a test checks that the names and types written here are the table's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Dict, Mapping, Optional

from .._checks import Limit
from ..config import OPTIMIZER_FIELDS, option_fields

__all__ = ["TrainConfig", "TrainingInterrupted", "TrainingDiverged", "MAX_SEED", "MAX_THREADS"]

#: The largest seed: seeds reach the C++ core as 64-bit integers.
MAX_SEED = 2**63 - 1
#: The most C++ threads a setting may ask for.
MAX_THREADS = 1024  # the core's limit (set_num_threads)

# the optimiser's settings by option name: their default and limit come from the core's table
_OPTIMIZER = {f.option: f for f in option_fields(OPTIMIZER_FIELDS)}


@dataclass
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
    max_steps: int = 0  # > 0: stop when the model has taken this many optimiser steps (with a checkpoint)
    eval_every: int = 0  # > 0: also validate (a history entry, a line, a checkpoint) every this many steps
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
    # the optimiser's settings (the core's table; see the module docstring)
    warmup: int = _OPTIMIZER["warmup"].default
    lr_scale: float = _OPTIMIZER["lr_scale"].default
    fixed_lr: float = _OPTIMIZER["fixed_lr"].default
    beta1: float = _OPTIMIZER["beta1"].default
    beta2: float = _OPTIMIZER["beta2"].default
    adam_eps: float = _OPTIMIZER["adam_eps"].default
    clip_norm: float = _OPTIMIZER["clip_norm"].default
    label_smoothing: float = _OPTIMIZER["label_smoothing"].default

    #: The allowed values of each setting (the command line checks its options with these); the
    #: optimiser's are the core's.
    LIMITS: ClassVar[Dict[str, Limit]] = {
        "epochs": Limit(True, 0, 1_000_000),
        "batch_size": Limit(True, 1, 1_000_000),
        "max_tokens": Limit(True, 0, 100_000_000),
        "time_budget": Limit(False, 0, 1_000_000, unit="minutes"),  # about two years
        "max_steps": Limit(True, 0, 2**62),
        "eval_every": Limit(True, 0, 2**62),
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
        **{option: f.limit for option, f in _OPTIMIZER.items()},
    }

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
        return {f.name: getattr(self, option) for option, f in _OPTIMIZER.items()}

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


TrainConfig.__doc__ = (TrainConfig.__doc__ or "").replace(
    "    {optimizer}",
    "\n".join(
        f"    {option}: {f.help} ({f.limit.describe()}; default {f.default!r})." for option, f in _OPTIMIZER.items()
    ),
)


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
