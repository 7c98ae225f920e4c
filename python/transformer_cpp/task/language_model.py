"""The language-model task: a decoder-only model trained on a long text, one character per token;
what is its own (windows of text, bits per character, generation, its model) beside the trainer,
run directory and checkpoints that translation uses too. The command line (``train-lm``,
``generate``, ``evaluate-lm``), notebooks and tools call it::

    from transformer_cpp.task import LmTrainRequest, new_lm_trainer, load_lm
    trainer = new_lm_trainer(LmTrainRequest(text="shakespeare", steps=500), "runs/lm")
    trainer.fit()                                          # the shared Trainer
    print(trainer.task.evaluate(trainer.model, "test"))    # held-out bits per character
    lm = load_lm("runs/lm")
    print(lm.generate("ROMEO:", max_tokens=200, temperature=0.8, top_k=20, seed=1))

Training draws windows of ``seq_len + 1`` characters at random positions of the training text
(``B`` of them per step, from a generator seeded by the run's seed and the step number, so a
resumed run draws what an uninterrupted one would). An epoch is one pass over the training
characters (``ceil(characters / (batch_size * seq_len))`` steps; with a segment memory, one walk
along the stripes). Bits per character are the mean cross-entropy in nats per character divided
by ln 2, over the text cut into consecutive windows (each character but the first scored once,
given up to ``seq_len`` characters before it).
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..checkpoint import CONFIG_FILE, LANGUAGE_MODEL_KIND, TRAINER_STATE_FILE, CheckpointError
from ..config import LM_FIELDS, LanguageModelConfig
from ..data import check_encoding
from ..data.lm_text import CharVocabulary, LmText, TextSplit, load_lm_text, split_text
from ..model import LanguageModel
from ..training.config import MAX_EPOCHS
from ..training import TrainConfig, Trainer
from ..training.run_dir import RunDirectory
from ..training.state import STATE_FORMAT, STATE_VERSION
from ..training.accumulate import accumulated_lm_step
from ..training.task import CheckpointRequest, StepOutcome, TrainingTask
from .lm_checkpoint import LmCheckpoint, average_lm_checkpoints, legacy_history, load_lm, load_trainer_state
from .lm_checkpoint import save_lm_checkpoint
from .lm_evaluation import bits_per_character
from .lm_sampling import generate, sample_next

__all__ = [
    "LM_KIND",
    "LmCheckpoint",
    "LmTask",
    "LmTrainRequest",
    "bits_per_character",
    "generate",
    "load_lm",
    "new_lm_trainer",
    "resume_lm_trainer",
    "sample_next",
    "saved_request",
]

Report = Callable[[str], None]

#: The ``kind`` a language model's checkpoint manifest records.
LM_KIND = LANGUAGE_MODEL_KIND
_ARCH = [f.name for f in LM_FIELDS if f.name not in ("vocab_size", "max_len")]
#: The steps a run takes when no limit (steps, epochs or time budget) is given.
DEFAULT_STEPS = 1000
_MOST_EPOCHS = MAX_EPOCHS


def _say(message: str) -> None:
    print(message, flush=True)


@dataclass
class LmTrainRequest:
    """What a language-model run is asked for: the text, the architecture and the training.

    ``text`` is ``"shakespeare"`` (the plays, see :mod:`transformer_cpp.data.lm_text`) or a file.
    The run stops when the model has taken ``steps`` steps, when ``time_budget`` minutes of
    training are spent (counted over every resume, as for translation), or when it has seen
    ``epochs`` times the training characters, whichever is given (1000 steps when none is).
    The settings it shares with translation (``time_budget``, ``keep_checkpoints``,
    ``average_last``, ``threads``, the optimiser's) have :class:`~transformer_cpp.training.TrainConfig`'s
    meaning, units and limits.
    """

    text: str = "shakespeare"
    encoding: str = "utf-8"
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    attention: str = "softmax"
    memory_length: int = 0
    lsh_hashes: int = 4
    lsh_chunk: int = 64
    lsh_buckets: int = 0
    reversible: bool = False
    pre_norm: bool = True
    share_embeddings: bool = True
    seq_len: int = 128
    batch_size: int = 32
    steps: Optional[int] = None
    time_budget: Optional[float] = None  # minutes
    epochs: Optional[float] = None
    warmup: int = 200
    lr_scale: float = 0.5
    clip_norm: float = 1.0
    eval_every: int = 200
    eval_chars: int = 65536
    patience: int = 0
    accumulate: int = 1
    keep_checkpoints: int = 3
    average_last: int = 0
    threads: Optional[int] = None
    adaptive_threads: bool = True
    progress: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        def positive_int(name: str, value: Any, low: int = 1) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"LmTrainRequest: {name} must be an integer >= {low}, got {value!r}")

        for name in ("seq_len", "batch_size", "warmup", "eval_every", "eval_chars"):
            positive_int(name, getattr(self, name))
        if self.steps is not None:
            positive_int("steps", self.steps)
        v = self.epochs
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf):
            raise ValueError(f"LmTrainRequest: epochs must be a finite number > 0, got {v!r}")
        if self.time_budget == 0:  # as for translation: no budget
            self.time_budget = None
        if self.time_budget is not None and (
            isinstance(self.time_budget, bool)
            or not isinstance(self.time_budget, (int, float))
            or not self.time_budget > 0
        ):
            raise ValueError(f"LmTrainRequest: time_budget must be a number of minutes > 0, got {self.time_budget!r}")
        if sum(x is not None for x in (self.steps, self.time_budget, self.epochs)) > 1:
            raise ValueError("LmTrainRequest: give at most one of steps, time_budget and epochs")
        if not isinstance(self.text, str) or not self.text:
            raise ValueError(
                f"LmTrainRequest: text must be 'shakespeare' or the path of a text file, got {self.text!r}"
            )
        check_encoding(self.encoding, "LmTrainRequest")
        # the settings shared with translation: TrainConfig's checks and messages
        self.train_config(1)
        # the architecture: the core's own checks, with its messages (vocab_size is the text's)
        LanguageModelConfig(vocab_size=2, **self.architecture())

    def architecture(self) -> Dict[str, Any]:
        """The model's fields this request sets (all but the vocabulary size and the table cache)."""
        return {name: getattr(self, name) for name in _ARCH}

    def train_config(self, steps_per_epoch: int) -> TrainConfig:
        """The shared trainer's settings for this request, with epochs of ``steps_per_epoch``
        batches (``steps`` counts optimiser steps: with ``accumulate``, one per that many batches)."""
        accumulate = self.accumulate if isinstance(self.accumulate, int) and self.accumulate >= 1 else 1
        steps_per_epoch = -(-steps_per_epoch // accumulate)
        limit = self.steps
        if self.epochs is not None:
            limit = max(1, int(math.ceil(self.epochs * steps_per_epoch)))
        elif limit is None and self.time_budget is None:
            limit = DEFAULT_STEPS
        try:
            return TrainConfig(
                # the limit is the step count (the epochs it reaches into) or the time budget
                epochs=-(-limit // steps_per_epoch) if limit else _MOST_EPOCHS,
                max_steps=limit or 0,
                time_budget=self.time_budget or 0.0,
                batch_size=self.batch_size,
                eval_every=self.eval_every,
                patience=self.patience,
                accumulate=self.accumulate,
                seed=self.seed,
                keep_checkpoints=self.keep_checkpoints,
                val_bleu_sentences=0,
                average_last=self.average_last,
                threads=self.threads,
                adaptive_threads=self.adaptive_threads,
                progress=self.progress,
                warmup=self.warmup,
                lr_scale=self.lr_scale,
                clip_norm=self.clip_norm,
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(str(exc).replace("TrainConfig:", "LmTrainRequest:", 1)) from None

    @classmethod
    def from_saved(cls, saved: Mapping[str, Any], changes: Optional[Mapping[str, Any]] = None) -> "LmTrainRequest":
        """The request a checkpoint records (a field it lacks has today's default), with ``changes``."""
        values = {f.name: saved[f.name] for f in fields(cls) if f.name in saved}
        values.update(changes or {})
        try:
            return cls(**values)
        except TypeError as exc:
            raise ValueError(f"LmTrainRequest: {exc}") from None


def saved_request(ckpt: LmCheckpoint, changes: Optional[Mapping[str, Any]] = None) -> LmTrainRequest:
    """The request checkpoint ``ckpt`` records (``CheckpointError`` naming the checkpoint and its
    file when a field is not valid), with ``changes``."""
    try:
        LmTrainRequest.from_saved(ckpt.request)
    except ValueError as exc:
        where = CONFIG_FILE if ckpt.legacy is None else TRAINER_STATE_FILE
        raise CheckpointError(f"checkpoint '{ckpt.path}': the run's request in '{where}' is not valid: {exc}") from None
    return LmTrainRequest.from_saved(ckpt.request, changes)


# ---------------------------------------------------------------------------- the task


def _digest(ids: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(ids, dtype=np.int64).tobytes()).hexdigest()[:16]


def text_digest(text: str) -> str:
    """The SHA-256 of a text (its UTF-8 bytes): a resume must read the text the run trained on."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class LmTask(TrainingTask):
    """The language model's side of training: the text's parts as ids, each step's windows, the
    validation bits per character, and checkpoints with the character vocabulary."""

    kind = LANGUAGE_MODEL_KIND
    metrics = ("val_bpc",)
    unit = "step"

    def __init__(
        self,
        request: LmTrainRequest,
        model: LanguageModel,
        vocabulary: CharVocabulary,
        split: TextSplit,
        source: LmText,
    ) -> None:
        self.request, self.model, self.vocabulary, self.split, self.source = request, model, vocabulary, split, source
        self.ids = {
            name: vocabulary.encode(getattr(split, name), unknown=vocabulary.chars[0])
            for name in ("train", "valid", "test")
        }
        r, train = request, len(self.ids["train"])
        if train < r.seq_len + 1:
            raise ValueError(
                f"seq_len {r.seq_len} is too long for a training text of {train} characters: each step needs "
                f"windows of seq_len + 1 = {r.seq_len + 1} characters"
            )
        if r.memory_length > 0 and train // r.batch_size < r.seq_len + 1:
            raise ValueError(
                f"a training text of {train} characters is too short for batch_size {r.batch_size} stripes of at "
                f"least seq_len + 1 = {r.seq_len + 1} characters (a segment memory walks each stripe in "
                "consecutive segments): lower batch_size or seq_len"
            )
        # a step's memory, before the first batch of ids is built
        model._core.check_batch(r.batch_size, r.seq_len + 1)

    @property
    def steps_per_epoch(self) -> int:
        """Steps of one pass over the training characters (with a segment memory: along the stripes)."""
        r = self.request
        if r.memory_length > 0:
            return self.segment_of(1)[1]
        return max(1, -(-len(self.ids["train"]) // (r.batch_size * r.seq_len)))

    def batch_plan(self, epoch: int, config: Any) -> Sequence[int]:
        n = self.steps_per_epoch
        return range(epoch * n + 1, (epoch + 1) * n + 1)

    def batch(self, step: int) -> np.ndarray:
        """The (batch_size, seq_len + 1) windows of step ``step`` (1-based): random positions from
        a generator seeded by the run's seed and the step. With a segment memory: row b is the
        next segment of stripe b of the text (see :meth:`segment_of`)."""
        r = self.request
        train = self.ids["train"]
        if r.memory_length > 0:
            k, _ = self.segment_of(step)
            width = len(train) // r.batch_size  # each stripe's characters
            start = k * r.seq_len
            return np.stack([train[b * width + start : b * width + start + r.seq_len + 1] for b in range(r.batch_size)])
        rng = np.random.default_rng([r.seed, step])
        starts = rng.integers(0, len(train) - r.seq_len, size=r.batch_size)
        return np.stack([train[s : s + r.seq_len + 1] for s in starts])

    def segment_of(self, step: int) -> Tuple[int, int]:
        """With a segment memory: ``(k, count)`` — step ``step`` (1-based) feeds segment k of the
        ``count`` consecutive segments of seq_len characters in each of the batch_size stripes of
        the training text; after the last one the stripes start again (and the memory is emptied)."""
        r = self.request
        count = (len(self.ids["train"]) // r.batch_size - 1) // r.seq_len
        return (step - 1) % count, count

    def step(self, model: Any, batch: Any) -> StepOutcome:
        r = self.request
        if r.memory_length > 0 and self.segment_of(batch)[0] == 0:
            # the stripes start (again): no memory of the text before. (A resumed run and the
            # validations start the next segment with an empty one.)
            model.reset_memory()
        loss = model.train_step(self.batch(batch))
        tokens = r.batch_size * r.seq_len
        return StepOutcome(loss, 0.0, tokens, tokens)  # the language model counts no accuracy

    def accumulated_step(self, model: Any, batches: Sequence[Any]) -> StepOutcome:
        if len(batches) == 1:
            return self.step(model, batches[0])
        r = self.request

        def before(i: int) -> None:  # as in step: a segment memory restarts with the stripes
            if r.memory_length > 0 and self.segment_of(batches[i])[0] == 0:
                model.reset_memory()

        loss, _ = accumulated_lm_step(model, [self.batch(b) for b in batches], before)
        tokens = len(batches) * r.batch_size * r.seq_len
        return StepOutcome(loss, 0.0, tokens, tokens)

    def evaluate(self, model: Any, part: str = "test", chars: Optional[int] = None) -> float:
        """Bits per character of a part of the text (``"train"``, ``"valid"`` or ``"test"``; its
        first ``chars`` characters when given)."""
        if part not in ("valid", "test", "train"):
            raise ValueError(f"evaluate: part must be 'train', 'valid' or 'test', got {part!r}")
        ids = self.ids[part] if chars is None else self.ids[part][:chars]
        return bits_per_character(model, ids, self.request.seq_len, self.request.batch_size)

    def validate(self, model: Any, config: Any) -> Dict[str, float]:
        if len(self.ids["valid"][: self.request.eval_chars]) < 2:
            return {}
        bpc = self.evaluate(model, "valid", self.request.eval_chars)
        if not math.isfinite(bpc):
            raise FloatingPointError(f"the validation bits per character are {bpc}")
        return {"val_bpc": bpc}

    # with early stopping (patience), the validation bits per character rank checkpoints (lower is
    # better: the score is their negative) and "best" names the best one; without, "latest" is the model
    score_name = "bits per character"
    unscored_average_is_best = False

    def score_model(self, model: Any, config: Any) -> Optional[float]:
        if not self.has_score(config):
            return None
        return -self.evaluate(model, "valid", self.request.eval_chars)

    def score(self, entry: Mapping[str, Any]) -> Optional[float]:
        bpc = entry.get("val_bpc")
        return None if bpc is None or not self.request.patience else -float(bpc)

    def has_score(self, config: Any) -> bool:
        return bool(self.request.patience) and len(self.ids["valid"][: self.request.eval_chars]) >= 2

    def shown_score(self, value: float) -> str:
        return f"{-value:.3f}"

    def fingerprints(self) -> Dict[str, Optional[str]]:
        return {"train": _digest(self.ids["train"]), "valid": _digest(self.ids["valid"])}

    def postfix(self, sums: Mapping[str, float]) -> Dict[str, str]:
        return {"bpc": f"{sums['loss'] / max(sums['tokens'], 1) / math.log(2):.3f}"}

    def describe(self, entry: Mapping[str, Any]) -> str:
        text = f"step {entry['step']}, train {entry['loss'] / math.log(2):.3f} bpc"
        if "val_bpc" in entry:
            text += f", valid {entry['val_bpc']:.3f} bpc"
        return text

    def record(self) -> Dict[str, Any]:
        """What a checkpoint's ``data`` section records: the request and the text."""
        return {
            "request": asdict(self.request),
            "text": {
                "source": self.source.source,
                "attribution": self.source.attribution,
                "characters": len(self.source.text),
                "sha256": text_digest(self.source.text),
                "split": self.split.sizes(),
            },
        }

    def save(self, model: Any, request: CheckpointRequest) -> Path:
        return save_lm_checkpoint(request.run_dir, model, self.vocabulary, self.record(), **request.keywords())

    def average(self, run_dir: Path, paths: Sequence[Path]) -> Tuple[Path, Any]:
        return average_lm_checkpoints(run_dir, paths)

    def generate(self, model: Any, prompt: str, max_tokens: int, **options: Any) -> str:
        """:func:`generate` with ``model`` and the context of the training windows."""
        options.setdefault("context", self.request.seq_len + self.request.memory_length)
        return generate(model, self.vocabulary, prompt, max_tokens, **options)


# ---------------------------------------------------------------------------- new and resumed runs


def _trainer(task: LmTask, out: Path) -> Trainer:
    return Trainer.for_task(task.model, task, task.request.train_config(task.steps_per_epoch), checkpoint_dir=out)


def new_lm_trainer(request: LmTrainRequest, out: Union[str, "os.PathLike[str]"], report: Report = _say) -> Trainer:
    """The shared :class:`~transformer_cpp.training.Trainer` of a new run of ``request`` writing
    into ``out`` (refused when it already holds a run or files of the user's under the names a
    run writes); ``trainer.task`` is its :class:`LmTask`."""
    run = RunDirectory(Path(out), "--out")
    if run.path.exists() and not run.path.is_dir():
        raise ValueError(f"--out '{run.path}' is a file, not a directory")
    run.check_own_entries()
    if run.holds_run():
        raise ValueError(f"'{run.path}' already holds a run; pass --resume to continue it or choose another --out")
    source = load_lm_text(request.text, request.encoding)
    if source.attribution:
        report(f"text: {source.attribution}")
    split = split_text(source.text)
    vocabulary = CharVocabulary.from_text(split.train)
    model = LanguageModel(vocabulary.vocab_size, max_len=max(request.seq_len, 16), **request.architecture())
    sizes = split.sizes()
    report(
        f"text: {len(source.text):,} characters ({sizes['train']:,} train, {sizes['valid']:,} valid, "
        f"{sizes['test']:,} test), {len(vocabulary.chars)} distinct; model: {model.num_parameters():,} parameters"
    )
    return _trainer(LmTask(request, model, vocabulary, split, source), run.path)


# the settings a resumed run may change (the architecture and the text are the checkpoint's)
CHANGEABLE_ON_RESUME = (
    "steps",
    "time_budget",
    "epochs",
    "eval_every",
    "eval_chars",
    "patience",
    "keep_checkpoints",
    "average_last",
    "threads",
    "adaptive_threads",
    "progress",
)
_LIMITS = ("steps", "time_budget", "epochs")


def resume_lm_trainer(
    out: Union[str, "os.PathLike[str]"], changes: Optional[Dict[str, Any]] = None, report: Report = _say
) -> Trainer:
    """Continue the run in ``out`` from its latest checkpoint, with the same text (checked by its
    digest) and architecture; ``changes`` may set the limit and the bookkeeping (those of
    :data:`CHANGEABLE_ON_RESUME`). A run written before the shared trainer continues at its step."""
    run = RunDirectory(Path(out), "--out")
    if not run.holds_run():
        raise ValueError(f"nothing to resume: '{run.path}' holds no checkpoint")
    ckpt = load_lm(run.path, optimizer=True)
    changes = dict(changes or {})
    for key in changes:
        if key not in CHANGEABLE_ON_RESUME:
            raise ValueError(f"--resume continues the saved run: {key} cannot be changed (it is the checkpoint's)")
    if any(k in changes for k in _LIMITS):
        changes.update({k: None for k in _LIMITS if k not in changes})
    request = saved_request(ckpt, changes)
    source = load_lm_text(request.text, request.encoding)
    if text_digest(source.text) != ckpt.text["sha256"]:
        raise ValueError(f"the text '{request.text}' is not the one this run was trained on (its digest differs)")
    task = LmTask(request, ckpt.model, ckpt.vocabulary, split_text(source.text), source)
    trainer = _trainer(task, run.path)
    state = ckpt.trainer_state if ckpt.legacy is None else _legacy_state(ckpt, task)
    if ckpt.run_id:
        trainer.run_id = ckpt.run_id
    load_trainer_state(trainer, ckpt, state)
    trainer.last_checkpoint = ckpt.path
    report(f"resuming {ckpt.path} at step {ckpt.model.step}")
    return trainer


def _legacy_state(ckpt: LmCheckpoint, task: LmTask) -> Dict[str, Any]:
    """An older run's state as the shared trainer's: the position of its step in epochs of
    ``task``'s steps, its elapsed time and its progress entries as history."""
    assert ckpt.legacy is not None
    n = task.steps_per_epoch
    epoch, batch = divmod(int(ckpt.legacy["step"]), n)
    zero = {"loss": 0.0, "correct": 0.0, "tokens": 0}
    return {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "epoch": epoch,
        "batch_in_epoch": batch,
        "step": ckpt.model.step,
        "epoch_sums": zero,
        "epoch_seconds": 0.0,
        "window": zero,
        "window_steps": 0,
        "history": legacy_history(ckpt.legacy["history"], n),
        "elapsed": ckpt.legacy["elapsed"],
        "run_id": ckpt.run_id,
    }
