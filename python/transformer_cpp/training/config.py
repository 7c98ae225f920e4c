"""Training settings (:class:`TrainConfig`) and the two ways training stops early.

Each setting is declared once (:func:`transformer_cpp.config.setting`): its default, limit, help
and the option of ``transformer-cpp train`` that sets it. The optimiser's settings are the core's
``OptimizerConfig`` fields that have an option (all but ``total_steps``, which the trainer fits to
the run), named by their option (``eps`` is ``adam_eps``); they are written out below so that
readers and type checkers see them, and their defaults, limits and help come from the core's table
(:data:`transformer_cpp.config.OPTIMIZER_FIELDS`), the one home of each.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Dict, Mapping, Optional

from .._checks import Limit
from ..config import (
    OPTIMIZER_FIELDS,
    check_setting,
    core_setting,
    describe_settings,
    flag_setting,
    option_fields,
    setting,
    setting_limits,
    settings_of,
)

__all__ = ["TrainConfig", "TrainingInterrupted", "TrainingDiverged", "MAX_EPOCHS", "MAX_SEED", "MAX_THREADS"]

#: The most epochs a run may ask for (a time budget or a step limit is what ends longer runs).
MAX_EPOCHS = 1_000_000
#: The largest seed: seeds reach the C++ core as 64-bit integers.
MAX_SEED = 2**63 - 1
#: The most C++ threads a setting may ask for.
MAX_THREADS = 1024  # the core's limit (set_num_threads)

# the optimiser's settings by option name: their default and limit come from the core's table
_OPTIMIZER = {f.option: f for f in option_fields(OPTIMIZER_FIELDS)}


def _run_path(owner: str, name: str, value: Any) -> str:
    """A run or checkpoint directory, as an absolute path (a resumed run compares it)."""
    if not isinstance(value, (str, Path)) or not str(value):
        raise TypeError(f"{owner}: {name} must be the path of a run or checkpoint directory, got {value!r}")
    return str(Path(value).resolve())


@dataclass
class TrainConfig:
    """Training settings. The model architecture lives in the model's own config.

    The defaults follow the NMT tutorial (batch 64, warm-up 4000, no label smoothing); the paper
    used label smoothing 0.1. Every setting is checked when it is set. The settings:

    {settings}
    """

    epochs: int = setting(
        10,
        limit=Limit(True, 0, MAX_EPOCHS),
        option_limit=Limit(True, 1, MAX_EPOCHS),  # the command line trains at least one
        help="epochs in total (default: the preset's; may be raised with --resume)",
    )
    batch_size: int = setting(64, limit=Limit(True, 1, 1_000_000), help="pairs per step (when --max-tokens is 0)")
    max_tokens: int = setting(
        0,
        limit=Limit(True, 0, 100_000_000),
        help="tokens per step: batches of similar length with pairs x longest side <= N (0 = --batch-size)",
    )
    time_budget: float = setting(
        0.0,
        limit=Limit(False, 0, 1_000_000, unit="minutes"),  # about two years
        help="stop after this many minutes with a checkpoint; the learning-rate decay is fitted to it "
        "(0 = no budget; default: the preset's)",
        metavar="MINUTES",
    )
    max_steps: int = setting(
        0,
        limit=Limit(True, 0, 2**62),
        help="stop when the model has taken this many optimiser steps, with a checkpoint (0 = no limit)",
        option=(),
    )
    eval_every: int = setting(
        0,
        limit=Limit(True, 0, 2**62),
        help="also validate (a history entry, a line, a checkpoint) every this many steps (0 = once per epoch)",
        option=(),
    )
    patience: int = setting(
        0,
        limit=Limit(True, 0, 1_000_000),
        help="stop early after N validations in a row without a better validation score (the BLEU that "
        "ranks checkpoints), the best checkpoint staying the run's model (0 = off, the default)",
    )
    accumulate: int = setting(
        1,
        limit=Limit(True, 1, 1_000_000),
        help="take one optimiser step from the gradients of N consecutive batches, as from one N times "
        "larger batch (the loss averaged over all their tokens); the schedule counts these steps "
        "(default {default})",
    )
    decay: bool = flag_setting(
        "after the warm-up (from step 1 with --fixed-lr), decay the learning rate linearly to 0 at the end of the run",
        option=("--decay", "--no-decay"),
    )
    seed: int = setting(
        0,
        limit=Limit(True, 0, MAX_SEED),
        help="seed of weights, dropout and shuffling (default {default})",
    )
    log_every: int = setting(
        10,
        limit=Limit(True, 1, 1_000_000_000),
        help="history entry every N steps (default {default})",
    )
    bucket_by_length: bool = flag_setting("batch sentences of similar length together (with --batch-size)")
    drop_remainder: bool = flag_setting("drop the last, smaller batch of each epoch (with --batch-size)")
    keep_checkpoints: int = setting(
        5,
        limit=Limit(True, 0, 1_000_000),
        help="keep the newest N checkpoints of the run (default {default}; 0 = all); the best one is always kept",
    )
    val_bleu_sentences: int = setting(
        500,
        limit=Limit(True, 0, 1_000_000_000),
        help="greedy validation BLEU on this many pairs after each epoch (default {default}; 0 = off)",
    )
    average_last: int = setting(
        0,
        limit=Limit(True, 0, 1_000),
        help="at the end, average the newest N checkpoints into 'averaged', as 'average --last N' does (0 or 1 = off)",
    )
    threads: Optional[int] = setting(None, limit=Limit(True, 1, MAX_THREADS), help="C++ threads (default: all cores)")
    adaptive_threads: bool = flag_setting(
        "time the steps and use fewer of the --threads threads while that is faster, as when another "
        "program holds a core (the default); --no-adaptive-threads always uses them all, so that a run "
        "repeats bit for bit",
        default=True,
        option=("--adaptive-threads", "--no-adaptive-threads"),
    )
    progress: bool = flag_setting(
        "a progress bar per epoch (--no-progress: none)", default=True, option="--no-progress"
    )
    init_from: Optional[str] = setting(
        None,
        check=_run_path,
        help="fine-tune: start from the model of this run or checkpoint (an imported model, say), with its "
        "vocabularies and architecture, on the pairs of --data",
        metavar="RUN",
    )
    # the optimiser's settings (the core's table; see the module docstring)
    warmup: int = core_setting(_OPTIMIZER["warmup"])
    lr_scale: float = core_setting(_OPTIMIZER["lr_scale"])
    fixed_lr: float = core_setting(_OPTIMIZER["fixed_lr"])
    beta1: float = core_setting(_OPTIMIZER["beta1"])
    beta2: float = core_setting(_OPTIMIZER["beta2"])
    adam_eps: float = core_setting(_OPTIMIZER["adam_eps"])
    clip_norm: float = core_setting(_OPTIMIZER["clip_norm"])
    label_smoothing: float = core_setting(_OPTIMIZER["label_smoothing"])

    #: The allowed values of each setting, from the declarations (the optimiser's are the core's).
    LIMITS: ClassVar[Dict[str, Limit]]

    @classmethod
    def check(cls, name: str, value: Any) -> Any:
        """``value`` if it is allowed for setting ``name`` (as an ``int``, ``float`` or ``bool``),
        else ``TypeError`` (a value of the wrong type) or ``ValueError`` (out of range) naming the
        setting and what it allows."""
        declared = settings_of(cls).get(name)
        if declared is None:
            raise ValueError(f"TrainConfig: unknown setting {name!r}")
        return check_setting("TrainConfig", declared, value)

    def __post_init__(self) -> None:
        self._check_combination(self.max_tokens, self.bucket_by_length, self.drop_remainder)

    def __setattr__(self, name: str, value: Any) -> None:
        """Every setting is checked when it is set, at construction and after it (``config.fixed_lr
        = float("nan")`` is refused like ``TrainConfig(fixed_lr=float("nan"))``)."""
        if name in settings_of(self):
            value = self.check(name, value)
        together = ("max_tokens", "bucket_by_length", "drop_remainder")
        if name in together and all(hasattr(self, n) for n in together):
            now = {**{n: getattr(self, n) for n in together}, name: value}
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


TrainConfig.LIMITS = setting_limits(TrainConfig)
TrainConfig.__doc__ = (TrainConfig.__doc__ or "").replace("    {settings}", describe_settings(TrainConfig))


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
