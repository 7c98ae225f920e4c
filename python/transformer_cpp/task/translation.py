"""The translation task: from a data file and a request (a preset and the settings given) to a
:class:`~transformer_cpp.training.Trainer` ready to fit, new or resumed.

Every step is a function of its own, so the command line, the notebooks, data-parallel runs and
the tools share them: the data steps live in :mod:`.prepare` (read and split the data, build the
vocabularies, choose the length limit, encode), and this module resolves ``precision="auto"`` and
model size auto and builds the trainer (:func:`new_trainer`, :func:`resume_trainer`). Progress
goes through a ``report`` callback (one line each; pass ``quiet`` to say nothing). A problem the
user can fix is a :class:`TaskError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from ..checkpoint import TRAINER_STATE_FILE, load_checkpoint, read_checkpoint_config
from ..config import MODEL_FIELDS, defaults, settings_of
from ..data import LENGTH_COVERAGE, DataRecord, EncodedPairs
from ..model import Transformer
from ..precision import choose_precision, choose_size
from ..training import TrainConfig, Trainer, world_size_problem
from ..training.wording import plural
from .column_order import check_column_order
from .prepare import (
    AUTOMATIC_LENGTH_CAP,
    OUTLIER_FACTOR,
    Split,
    build_tokenizers,
    check_same_split,
    choose_max_length,
    encode_split,
    encode_train,
    encode_valid,
    load_pairs,
    load_split,
    split_digest,
    split_sentences,
)
from .presets import AUTO_PRECISION, DEFAULT_PRESET, SIZE_FIELDS, preset_config, preset_recipe
from .reporting import Report, Silent, TaskError, quiet, say
from .request_checks import check_training_settings

__all__ = [
    "AUTOMATIC_LENGTH_CAP",
    "CHANGEABLE_ON_RESUME",
    "LENGTH_COVERAGE",
    "OUTLIER_FACTOR",
    "SetupSteps",
    "Silent",
    "Split",
    "TaskError",
    "TrainRequest",
    "build_tokenizers",
    "check_resume_request",
    "check_same_split",
    "choose_max_length",
    "encode_split",
    "load_pairs",
    "load_split",
    "new_trainer",
    "quiet",
    "requested_settings",
    "resume_trainer",
    "say",
    "size_growth",
    "split_digest",
    "split_sentences",
]

#: TrainConfig settings a resumed run may change (they do not alter what a step computes).
CHANGEABLE_ON_RESUME = ("epochs", "time_budget", "threads", "progress", "keep_checkpoints", "average_last", "patience")

# ------------------------------------------------------------------------------------ request


@dataclass
class TrainRequest:
    """What a user asks ``train`` for: a preset and the settings given on top of it.

    ``architecture`` holds Transformer arguments (``d_model``, ``precision``, ...), ``training``
    TrainConfig fields (``epochs``, ``warmup``, ...), ``data`` DataRecord fields (``num_samples``,
    ``vocab_size``, ``max_length_option``, ...): only the ones given; the preset fills the rest.
    ``preset`` None means the default preset for a new run, and the run's own for a resumed one.
    """

    preset: Optional[str] = None
    data_path: Optional[str] = None
    architecture: Dict[str, Any] = field(default_factory=dict)
    training: Dict[str, Any] = field(default_factory=dict)
    data: Dict[str, Any] = field(default_factory=dict)
    threads: Optional[int] = None
    progress: bool = True
    adaptive_threads: bool = True


def requested_settings(
    request: TrainRequest, preset: Optional[str]
) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """(architecture, TrainConfig fields, DataRecord fields) that ``preset`` and the request ask
    for; without a preset only the settings given."""
    arch: Dict[str, Any] = {}
    train: Dict[str, Any] = {}
    data: Dict[str, Any] = {}
    if preset is not None:
        arch = preset_config(preset)
        recipe = preset_recipe(preset)
        train = recipe["train"]
        data = {("max_length_option" if k == "max_length" else k): v for k, v in recipe["data"].items()}
        arch.update(recipe.get("model", {}))
    arch.update(request.architecture)
    check_training_settings(request.training)
    train.update(request.training)
    data.update(request.data)
    return arch, train, data


def training_config(request: TrainRequest, settings: Dict[str, Any]) -> TrainConfig:
    """The run's :class:`TrainConfig`: ``settings`` (:func:`requested_settings`' TrainConfig fields;
    10 epochs when they name none) with the request's threads, progress bar and thread adaptation."""
    settings.setdefault("epochs", 10)
    return TrainConfig(
        threads=request.threads, progress=request.progress, adaptive_threads=request.adaptive_threads, **settings
    )


def size_growth(request: TrainRequest) -> Optional[Dict[str, Any]]:
    """The preset's larger architecture and the epochs it needs (``{"arch": ..., "min_epochs":
    ...}``, the recipe's "grow"), or None: no such section, or the request set the size."""
    grow = preset_recipe(request.preset or DEFAULT_PRESET).get("grow")
    if not grow or any(name in SIZE_FIELDS for name in request.architecture):
        return None
    return dict(grow)


def check_resume_request(
    request: TrainRequest, model_cfg: Dict[str, Any], train_cfg: Dict[str, Any], record: DataRecord
) -> Dict[str, Any]:
    """A resumed run keeps its settings: what the request asks for (its preset and settings) must
    agree with the checkpoint, except the settings a resumed run may change; returns those changes."""
    arch, train, data_req = requested_settings(request, request.preset)
    arch.pop("max_length", None)  # a positional-table cache, not a setting of the run
    grow = size_growth(request) if request.preset is not None else None
    if grow is not None and all(model_cfg.get(k) == v for k, v in grow["arch"].items()):
        arch.update(grow["arch"])  # model size auto chose the larger model when the run started
    declared = {**settings_of(TrainConfig), **settings_of(DataRecord)}  # their options' names
    saved_data = record.to_dict()
    section_defaults = {"architecture": defaults(MODEL_FIELDS), "training": TrainConfig().to_dict(), "data": {}}
    conflicts = []
    for section, requested, saved in (
        ("architecture", arch, model_cfg),
        ("training", train, train_cfg),
        ("data", data_req, saved_data),
    ):
        for key, value in requested.items():
            if section == "training" and key in CHANGEABLE_ON_RESUME:
                continue
            if section == "architecture" and key == "precision" and value == AUTO_PRECISION:
                continue  # "auto" accepts what the run chose when it started
            # a checkpoint written before a setting existed had its default
            have = saved.get(key, section_defaults[section].get(key))
            if value != have:
                option = declared[key].option if key in declared else ()
                flag = option[0] if option else "--" + key.replace("_", "-")
                conflicts.append(f"{flag} {value} (the run has {have})")
    if conflicts:
        raise TaskError(
            "--resume continues the run in --out with its own settings, and these options differ "
            "from it: " + ", ".join(conflicts) + "; drop them, or start a new run with another --out"
        )
    # the changes are the options given: a preset's value is not a request to change the run
    return {k: v for k, v in request.training.items() if k in CHANGEABLE_ON_RESUME}


# ------------------------------------------------------------------------------------ data parallel


class SetupSteps:
    """The setup of a run as steps that every rank of a data-parallel run takes together: each
    rank does its part, then they agree, so that a failure anywhere stops every rank and rank 0
    says it in one line. With ``parallel`` None (one process) a step just runs."""

    _FAILURES = (TaskError, OSError, ValueError, RuntimeError, MemoryError, TypeError)

    def __init__(self, parallel: Any = None) -> None:
        self.parallel = parallel

    def run(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` on every rank; a failure on any rank stops all of them."""
        if self.parallel is None:
            return fn()
        result, error = None, None
        try:
            result = fn()
        except self._FAILURES as exc:
            error = exc
        line = self.parallel.agree(error, what)
        if line is not None:
            if self.parallel.is_root:
                raise TaskError(line)
            raise Silent()
        return result

    def on_root(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` on rank 0, its result sent to every rank."""
        if self.parallel is None:
            return fn()
        result, error = None, None
        if self.parallel.is_root:
            try:
                result = fn()
            except self._FAILURES as exc:
                error = " ".join(str(exc).split()) or type(exc).__name__
        error, result = self.parallel.bcast((error, result), what)
        if error is not None:
            if self.parallel.is_root:
                raise TaskError(error)
            raise Silent()
        return result


# ------------------------------------------------------------------------------------ trainers


def _concrete_precision(arch: Dict[str, Any]) -> Dict[str, Any]:
    """``arch`` with precision "auto" (resolved later, when the vocabularies are known) read as
    float32, for checks that build a model before that."""
    return dict(arch, precision="float32") if arch.get("precision") == AUTO_PRECISION else arch


def _step_tokens(config: TrainConfig) -> int:
    """Target tokens of one training batch, for the steps precision.py times: the token budget,
    else the batch size times a typical sentence."""
    return int(config.max_tokens or 0) or int(config.batch_size) * 12


def _resolve_auto_precision(
    arch: Dict[str, Any], config: TrainConfig, src_vocab: int, tgt_vocab: int, parallel: Any, report: Report
) -> str:
    """Precision "auto": time a few steps of this model in float32 and bf16 and keep the faster
    (bf16 only from 1.10x, see precision.py); under MPI rank 0 measures and every rank takes its
    choice (the ranks must run the same products)."""
    budget = _step_tokens(config)
    if parallel is None or parallel.rank == 0:
        chosen, why = choose_precision(arch, src_vocab, tgt_vocab, budget, seed=config.seed)
    else:
        chosen, why = "", ""
    if parallel is not None:
        chosen, why = parallel.bcast((chosen, why), "the precision rank 0 measured")
    report(why)
    return str(chosen)


def _resolve_auto_size(
    arch: Dict[str, Any],
    grow: Dict[str, Any],
    config: TrainConfig,
    train: EncodedPairs,
    src_vocab: int,
    tgt_vocab: int,
    parallel: Any,
    report: Report,
) -> Dict[str, Any]:
    """Model size auto: time a step of the preset's model and of its larger one (rank 0 under MPI,
    the ranks sharing an epoch) and keep the larger if it gets ``min_epochs`` in the time budget
    (precision.choose_size)."""
    budget = _step_tokens(config)
    ranks = 1 if parallel is None else int(parallel.size)
    tokens_per_epoch = float(np.sum(np.maximum(train.tgt_lengths - 1, 0))) / ranks
    if parallel is None or parallel.rank == 0:
        chosen, why = choose_size(
            arch,
            grow["arch"],
            float(grow["min_epochs"]),
            src_vocab,
            tgt_vocab,
            budget,
            tokens_per_epoch,
            float(config.time_budget) * 60.0,
            seed=config.seed,
        )
    else:
        chosen, why = {}, ""
    if parallel is not None:
        chosen, why = parallel.bcast((chosen, why), "the model size rank 0 measured")
    report(why)
    return dict(chosen)


def new_trainer(request: TrainRequest, out: Path, report: Report = say, steps: Optional[SetupSteps] = None) -> Trainer:
    """A trainer for a new run in ``out``: reads and splits the data, builds the vocabularies
    (rank 0, shared), chooses the length limit, resolves the automatic precision and size, and
    builds the model. Each step through ``steps`` (data-parallel runs); nothing is written yet."""
    if request.training.get("init_from") is not None:
        raise TaskError("new_trainer: a request with init_from starts from a run: build it with finetune_trainer")
    steps = steps if steps is not None else SetupSteps()
    preset = request.preset or DEFAULT_PRESET
    arch, config, record, split = steps.run("reading the data", lambda: _read_new_run(request, preset, report))
    # the vocabularies: built once (rank 0) and shared, so that every rank encodes alike
    src_tok, tgt_tok = steps.on_root(
        "building the subword vocabularies", lambda: build_tokenizers(split, record, report)
    )
    return steps.run(  # type: ignore[no-any-return]
        "building the model",
        lambda: _build_new_run(request, out, arch, config, record, split, src_tok, tgt_tok, steps.parallel, report),
    )


def _read_new_run(
    request: TrainRequest, preset: str, report: Report
) -> Tuple[Dict[str, Any], TrainConfig, DataRecord, Split]:
    arch, settings, data_req = requested_settings(request, preset)
    record = DataRecord(**data_req).check()
    config = training_config(request, settings)
    # a batch size against the preset's token budget would be ignored, not applied (given together
    # with max_tokens, it sizes the validation batches)
    if "batch_size" in request.training and config.max_tokens and "max_tokens" not in request.training:
        raise TaskError(
            f"--batch-size {request.training['batch_size']} would be ignored: the {preset} preset cuts "
            f"batches by tokens (max_tokens {config.max_tokens}); add --max-tokens 0 to batch by "
            "sentences, or leave out --batch-size"
        )
    # a bad or oversized architecture fails now, before any work (the real vocabulary sizes
    # are checked again when the model is built)
    Transformer(4, 4, seed=config.seed, **_concrete_precision(arch))
    split, record = load_split(request.data_path, record, report)
    refused = check_column_order(*split.train, record, report)
    if refused is not None:
        raise TaskError(refused)
    return arch, config, record, split


def _build_new_run(
    request: TrainRequest,
    out: Path,
    arch: Dict[str, Any],
    config: TrainConfig,
    record: DataRecord,
    split: Split,
    src_tok: Any,
    tgt_tok: Any,
    parallel: Any,
    report: Report,
) -> Trainer:
    record, train, valid = encode_for_training(split, src_tok, tgt_tok, record, report)
    # the positional table's first size
    arch["max_length"] = max(int(arch.get("max_length", 0)), int(record.max_length or 0))
    if record.joint_vocab:
        arch.setdefault("share_embeddings", True)
    if arch.get("precision") == AUTO_PRECISION:
        arch["precision"] = _resolve_auto_precision(
            arch, config, src_tok.vocab_size, tgt_tok.vocab_size, parallel, report
        )
    grow = size_growth(request)
    if grow is not None and config.time_budget:
        arch = _resolve_auto_size(arch, grow, config, train, src_tok.vocab_size, tgt_tok.vocab_size, parallel, report)
    model = Transformer(src_tok.vocab_size, tgt_tok.vocab_size, seed=config.seed, **arch)
    report(f"model: {model!r}")
    return start_trainer(
        request, model, (train, valid), config, (src_tok, tgt_tok), out, record.to_dict(), parallel, report
    )


def encode_for_training(
    split: Split, src_tok: Any, tgt_tok: Any, record: DataRecord, report: Report
) -> Tuple[DataRecord, EncodedPairs, Optional[EncodedPairs]]:
    """The split's training and validation pairs encoded and cut at the length chosen from them
    (``record``'s option, or what covers 99.9 % of the pairs), ``record`` with that length, and one
    line of counts: how a new run and a fine-tuning prepare their pairs."""
    max_length = choose_max_length(split, src_tok, tgt_tok, int(record.max_length_option or 0), report)
    train = encode_train(split, src_tok, tgt_tok, max_length)
    valid = encode_valid(split, src_tok, tgt_tok, max_length, report)
    valid_note = f" ({plural(valid.removed, 'longer one')} left out)" if valid is not None and valid.removed else ""
    report(
        f"pairs of at most {max_length} tokens: {len(train):,} train ({plural(train.removed, 'longer one')} left out), "
        f"{len(valid) if valid is not None else 0:,} validation{valid_note}, {len(split.test[0]):,} test "
        f"(held out; split by source sentence)"
    )
    return record.replace(max_length=max_length), train, valid


def start_trainer(
    request: TrainRequest,
    model: Transformer,
    pairs: Tuple[EncodedPairs, Optional[EncodedPairs]],
    config: TrainConfig,
    tokenizers: Tuple[Any, Any],
    out: Path,
    data_info: Dict[str, Any],
    parallel: Any,
    report: Report,
) -> Trainer:
    """The trainer of a new run of ``model`` in ``out`` on the (training, validation) ``pairs``,
    after one line on how long it trains (its time budget, or its epochs) and where it writes."""
    trainer = Trainer(
        model,
        pairs[0],
        pairs[1],
        config,
        src_tokenizer=tokenizers[0],
        tgt_tokenizer=tokenizers[1],
        checkpoint_dir=out,
        data_info=data_info,
        parallel=parallel,
    )
    batches = f"about {trainer.batches_per_epoch:,} batches"
    if config.time_budget:  # the epochs are then a cap, if asked for (the presets' 1000 means none)
        cap = f", at most {plural(config.epochs, 'epoch')}" if "epochs" in request.training else ""
        plan = f"for {plural(config.time_budget, 'minute')} (epochs of {batches}{cap})"
    else:
        plan = f"up to {plural(config.epochs, 'epoch')} of {batches}"
    report(f"training {plan}; checkpoints in {out}")
    return trainer


def resume_trainer(
    request: TrainRequest, out: Path, report: Report = say, steps: Optional[SetupSteps] = None
) -> Trainer:
    """The trainer of the run in ``out``, at its latest checkpoint, on the same data: the request
    may change only :data:`CHANGEABLE_ON_RESUME` settings (anything else that differs is a
    :class:`TaskError`), and the data file must give the same split."""
    steps = steps if steps is not None else SetupSteps()
    return steps.run(  # type: ignore[no-any-return]
        "resuming the run", lambda: _resume_here(request, out, steps.parallel, report)
    )


def _resume_here(request: TrainRequest, out: Path, parallel: Any, report: Report) -> Trainer:
    ckpt_dir, cfg = read_checkpoint_config(out)
    _check_world_size(ckpt_dir, parallel)
    if not cfg.get("data") or cfg.get("train_config") is None:
        raise TaskError(
            f"checkpoint '{ckpt_dir}' was not written by 'transformer-cpp train'; it cannot be resumed here"
        )
    record = DataRecord.from_dict(cfg["data"])
    changes = check_resume_request(request, cfg["model"], cfg["train_config"], record)
    split, _ = load_split(request.data_path if request.data_path is not None else record.path, record, report)
    ckpt = load_checkpoint(ckpt_dir, optimizer=True)
    train = encode_split(split, "train", ckpt.src_tokenizer, ckpt.tgt_tokenizer, record.max_length)
    valid = encode_valid(split, ckpt.src_tokenizer, ckpt.tgt_tokenizer, record.max_length, report)
    if train is None:
        raise TaskError(f"the run's training split is empty: '{record.path}' holds no training pair")
    trainer = Trainer.from_checkpoint(
        ckpt,
        train,
        valid,
        checkpoint_dir=out,
        threads=request.threads,
        progress=None if request.progress else False,
        parallel=parallel,
        # every other setting a resumed run may change (epochs, time budget, pruning, averaging):
        # one that from_checkpoint did not take would fail here, not be ignored
        **{k: v for k, v in changes.items() if k not in ("threads", "progress")},
    )
    trainer.config.adaptive_threads = request.adaptive_threads  # how threads are used: not part of the run
    report(
        f"resuming {ckpt.path} at epoch {trainer.epoch} (+{trainer.batch_in_epoch} batches), "
        f"step {trainer.model.step}, {trainer.elapsed / 60:.1f} minutes trained"
    )
    return trainer


def _check_world_size(ckpt_dir: Path, parallel: Any) -> None:
    """Refuse at once (before reading the data) to resume with another number of processes; a
    damaged state file is left to the full load to report."""
    try:
        state = json.loads((ckpt_dir / TRAINER_STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(state, dict):
        problem = world_size_problem(state.get("world_size", 1), 1 if parallel is None else parallel.size)
        if problem is not None and "damaged" not in problem:
            raise TaskError(problem)
