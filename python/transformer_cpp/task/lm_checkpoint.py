"""A language model's checkpoints, in the format every task writes (:mod:`transformer_cpp.checkpoint`):
a manifest of kind ``language_model`` whose ``model`` section is the ``LanguageModel``'s
configuration and whose ``data`` section holds the run's request and its text's digest; the
weights, the Adam moments, the character vocabulary (``vocabulary.json``) and the trainer's state.

Runs written before the language model trained through the shared trainer kept the request and
the text in ``trainer_state.json`` with the step, the elapsed seconds and a list of progress
entries; :func:`load_lm` reads those too (:attr:`LmCheckpoint.legacy`), and a resume continues
them at the same step.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..checkpoint import (
    CONFIG_FILE,
    FORMAT_NAME,
    FORMAT_VERSION,
    LANGUAGE_MODEL_KIND,
    MODEL_FILE,
    OPTIMIZER_FILE,
    TRAINER_STATE_FILE,
    CheckpointError,
    TensorFile,
    check_kind,
    checkpoint_name,
    json_bytes,
    load_tensors_into,
    nonfinite_tensors,
    read_checkpoint_config,
    read_file,
    read_json,
    write_checkpoint,
)
from .._checks import flag as _flag, integer as _integer
from ..data.lm_text import CharVocabulary
from ..model import LanguageModel, NonFiniteError
from .lm_sampling import generate

__all__ = [
    "LmCheckpoint",
    "VOCABULARY_FILE",
    "average_lm_checkpoints",
    "load_lm",
    "load_trainer_state",
    "save_lm_checkpoint",
]

VOCABULARY_FILE = "vocabulary.json"
#: The most bytes a vocabulary file holds (one JSON string of characters).
_MAX_VOCABULARY_BYTES = 64 << 20


@dataclass
class LmCheckpoint:
    """A language model read from a checkpoint.

    Attributes:
        path: the checkpoint directory read (``latest`` followed).
        model: the model with its weights (and with ``optimizer``, its Adam moments and counters).
        vocabulary: its characters.
        request: the run's request as a dict (:class:`~.language_model.LmTrainRequest`'s fields).
        text: the text's source, attribution, size, SHA-256 and split sizes.
        trainer_state: the shared trainer's state (None for an average, or an older run).
        run_id: the run that wrote it.
        legacy: an older run's ``{"step", "elapsed", "history"}`` (None for a current one).
    """

    path: Path
    model: LanguageModel
    vocabulary: CharVocabulary
    request: Dict[str, Any]
    text: Dict[str, Any]
    trainer_state: Optional[Dict[str, Any]]
    run_id: Optional[str]
    legacy: Optional[Dict[str, Any]] = None

    def generate(self, prompt: str, max_tokens: int, **options: Any) -> str:
        """:func:`~.lm_sampling.generate` with this model and vocabulary, with the context its
        training windows had."""
        options.setdefault("context", int(self.request["seq_len"]) + int(self.request.get("memory_length", 0)))
        return generate(self.model, self.vocabulary, prompt, max_tokens, **options)


def save_lm_checkpoint(
    run: Path,
    model: LanguageModel,
    vocabulary: CharVocabulary,
    data: Mapping[str, Any],
    *,
    trainer_state: Optional[Mapping[str, Any]],
    train_config: Optional[Mapping[str, Any]],
    keep: Optional[int],
    run_id: Optional[str],
    name: Optional[str] = None,
    best: bool = False,
) -> Path:
    """Write a checkpoint of ``model`` into run directory ``run`` (named by the trainer state's
    position unless ``name`` is given; with a trainer state, the optimiser too): the shared
    atomic write, ``latest`` moved (with ``best``, ``best`` too), the run's oldest pruned beyond ``keep``."""
    optimizer = trainer_state is not None
    bad = model.nonfinite_parameters(optimizer)
    if bad:
        raise NonFiniteError(f"the model holds non-finite values ({', '.join(bad[:3])}); not saved")
    if name is None:
        state = trainer_state or {}
        name = checkpoint_name(int(state.get("epoch", 0)), int(state.get("batch_in_epoch", 0)))
    files: Dict[str, Any] = {
        MODEL_FILE: TensorFile(model.parameters(), "weights"),
        VOCABULARY_FILE: vocabulary.to_str().encode("utf-8"),
        TRAINER_STATE_FILE: json_bytes(None if trainer_state is None else dict(trainer_state)),
    }
    if optimizer:
        files[OPTIMIZER_FILE] = TensorFile(model.optimizer_state(), "adam")
    config = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "kind": LANGUAGE_MODEL_KIND,
        "model": model.config,
        "optimizer": {
            "config": model.optimizer_config,
            "saved": optimizer,
            "step": model.step,
            "dropout_calls": model.dropout_calls,
        },
        "train_config": None if train_config is None else dict(train_config),
        "data": dict(data),
    }
    return write_checkpoint(run, name, files, config, keep=keep, run_id=run_id, best=best, what="train-lm")


def _mapping(ckpt: Path, what: str, value: Any) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise CheckpointError(f"checkpoint '{ckpt}': {what} must be a JSON object, got {type(value).__name__}")
    return value


def _legacy(ckpt: Path, state: Any) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """An older run's trainer_state.json: ``(request, text, {"step", "elapsed", "history"})``,
    the request in today's terms (``keep`` is ``keep_checkpoints``, the time budget in minutes)."""
    state = _mapping(ckpt, f"'{TRAINER_STATE_FILE}'", state)
    request = dict(_mapping(ckpt, f"'{TRAINER_STATE_FILE}' field 'request'", state.get("request")))
    text = _mapping(ckpt, f"'{TRAINER_STATE_FILE}' field 'text'", state.get("text"))
    if "keep" in request:
        request["keep_checkpoints"] = request.pop("keep")
    if isinstance(request.get("time_budget"), (int, float)) and not isinstance(request["time_budget"], bool):
        request["time_budget"] = request["time_budget"] / 60.0  # seconds of one call, then
    request.pop("checkpoint_every", None)
    history = state.get("history", [])
    if not isinstance(history, list) or not all(isinstance(e, dict) for e in history):
        raise CheckpointError(f"checkpoint '{ckpt}': '{TRAINER_STATE_FILE}' field 'history' must be a list of objects")
    elapsed = state.get("elapsed", 0.0)
    if isinstance(elapsed, bool) or not isinstance(elapsed, (int, float)) or not 0 <= elapsed < math.inf:
        raise CheckpointError(f"checkpoint '{ckpt}': '{TRAINER_STATE_FILE}' field 'elapsed' must be a number >= 0")
    return request, text, {"elapsed": float(elapsed), "history": history}


def load_lm(path: Union[str, "os.PathLike[str]"], *, optimizer: bool = False) -> LmCheckpoint:
    """The language model of a checkpoint directory, or of a run directory: its ``latest`` with
    ``optimizer`` (to resume), else its ``best`` when it has one (a run with early stopping),
    else its ``latest`` (:class:`CheckpointError` naming what is missing or damaged, or that the
    run is a translation model's)."""
    ckpt, manifest = read_checkpoint_config(path, "latest" if optimizer else "best")
    check_kind(ckpt, manifest, LANGUAGE_MODEL_KIND)
    files = _mapping(ckpt, f"the 'files' section of '{CONFIG_FILE}'", manifest.get("files"))
    model_config = dict(_mapping(ckpt, f"the 'model' section of '{CONFIG_FILE}'", manifest.get("model")))
    try:
        model = LanguageModel.from_config(model_config)
    except (TypeError, ValueError, KeyError) as exc:
        raise CheckpointError(
            f"checkpoint '{ckpt}': the 'model' section of '{CONFIG_FILE}' is not valid: {exc}"
        ) from None
    try:
        vocabulary = CharVocabulary.from_str(
            read_file(ckpt, VOCABULARY_FILE, files, _MAX_VOCABULARY_BYTES).decode("utf-8")
        )
    except (UnicodeDecodeError, TypeError, ValueError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"checkpoint '{ckpt}': '{VOCABULARY_FILE}' is not a vocabulary ({exc})") from None
    if vocabulary.vocab_size != model.config["vocab_size"]:
        raise CheckpointError(f"checkpoint '{ckpt}': the vocabulary does not match the model's vocab_size")
    load_tensors_into(ckpt, MODEL_FILE, files, model.parameters())
    opt = _mapping(ckpt, f"the 'optimizer' section of '{CONFIG_FILE}'", manifest.get("optimizer", {}))
    try:
        model.configure_optimizer(**_mapping(ckpt, "the optimiser settings", opt.get("config", {})))
        model.step = _integer("", "step", opt.get("step", 0))
        if optimizer:
            if not _flag("", "saved", opt.get("saved", False)):
                raise CheckpointError(
                    f"checkpoint '{ckpt}' was saved without optimiser state; it cannot resume training"
                )
            load_tensors_into(ckpt, OPTIMIZER_FILE, files, model.optimizer_state())
            model.dropout_calls = _integer("", "dropout_calls", opt.get("dropout_calls", 0))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(
            f"checkpoint '{ckpt}': the 'optimizer' section of '{CONFIG_FILE}' is not valid: {exc}"
        ) from None
    state = read_json(ckpt, TRAINER_STATE_FILE, files)
    data = manifest.get("data")
    legacy = None
    if data is None:  # an older run: the request and the text were the trainer state's
        request, text, legacy = _legacy(ckpt, state)
        legacy["step"] = model.step
        state = None
    else:
        data = _mapping(ckpt, f"the 'data' section of '{CONFIG_FILE}'", data)
        request = dict(_mapping(ckpt, f"the run's request in '{CONFIG_FILE}'", data.get("request")))
        text = _mapping(ckpt, f"the text record of '{CONFIG_FILE}'", data.get("text"))
        if state is not None:
            state = _mapping(ckpt, f"'{TRAINER_STATE_FILE}'", state)
    if not isinstance(request.get("seq_len"), int) or not isinstance(text.get("sha256"), str):
        raise CheckpointError(
            f"checkpoint '{ckpt}': its request or text record lacks seq_len or the text's digest ('{CONFIG_FILE}')"
        )
    try:  # what generation reads of the request (the rest is checked where a run's request is rebuilt)
        _integer("", "seq_len", request["seq_len"], 1)
        _integer("", "memory_length", request.get("memory_length", 0), 0)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint '{ckpt}': the run's request in '{CONFIG_FILE}' is not valid: {exc}"
        ) from None
    run_id = manifest.get("run_id")
    if run_id is not None and not isinstance(run_id, str):
        raise CheckpointError(
            f"checkpoint '{ckpt}': the run_id of '{CONFIG_FILE}' must be a string, got {run_id!r:.40}"
        )
    return LmCheckpoint(ckpt, model, vocabulary, request, text, state, run_id, legacy)


def load_trainer_state(trainer: Any, ckpt: LmCheckpoint, state: Optional[Mapping[str, Any]]) -> None:
    """Resume ``trainer`` from checkpoint ``ckpt``'s trainer state: every field the shared trainer
    writes must be there (a language model's state has always had them all; an older run's state
    is ``state``, made from what it saved), each of its type;
    ``CheckpointError`` naming the checkpoint, the file and the field otherwise."""
    where = f"checkpoint '{ckpt.path}': '{TRAINER_STATE_FILE}'"
    if state is None:
        raise CheckpointError(f"checkpoint '{ckpt.path}' has no trainer state; it cannot be resumed")
    missing = [key for key in trainer.state_dict() if key not in state]
    if missing and ckpt.legacy is None:  # (an older run's state is made from what it saved)
        raise CheckpointError(f"{where} lacks the field '{missing[0]}'; it cannot be resumed")
    try:
        trainer.load_state_dict(state)
    except ValueError as exc:
        message = str(exc)
        for prefix in ("Trainer.load_state_dict: damaged trainer state ", "Trainer.load_state_dict: ", "Trainer: "):
            if message.startswith(prefix):
                damaged = prefix.endswith("state ")
                message = message[len(prefix) :]
                break
        else:
            damaged = False
        raise CheckpointError(f"{where} is damaged {message}" if damaged else f"{where}: {message}") from None


def average_lm_checkpoints(run: Path, paths: Sequence[Path]) -> Tuple[Path, LanguageModel]:
    """Average the weights of the language-model checkpoints ``paths`` (one run's) into
    ``run/averaged``, without optimiser state: for generating and scoring, not for resuming."""
    first = load_lm(paths[0])
    sums = {k: np.array(p.value, dtype=np.float64) for k, p in first.model.parameters().items()}
    for path in paths[1:]:
        other = load_lm(path)
        if other.model.config != first.model.config or other.run_id != first.run_id:
            raise CheckpointError(f"average: '{other.path}' is not of the run and architecture of '{first.path}'")
        for k, p in other.model.parameters().items():
            sums[k] += p.value
    for k, p in first.model.parameters().items():
        p.value[...] = sums[k] / len(paths)
    bad = nonfinite_tensors(first.model.parameters())
    if bad:
        raise CheckpointError(f"average: the mean of the checkpoints is not finite ({bad[0]})")
    data = {"request": first.request, "text": first.text, "averaged_from": [Path(p).name for p in paths]}
    out = save_lm_checkpoint(
        run,
        first.model,
        first.vocabulary,
        data,
        trainer_state=None,
        train_config=None,
        keep=None,
        run_id=first.run_id,
        name="averaged",
    )
    return out, first.model


def legacy_history(entries: List[Dict[str, Any]], steps_per_epoch: int) -> Dict[str, Dict[str, List[Any]]]:
    """An older run's progress entries as the shared trainer's history (epochs by its steps)."""
    epoch: Dict[str, List[Any]] = {k: [] for k in ("epoch", "step", "loss", "accuracy", "val_bpc", "lr")}
    epoch.update({k: [] for k in ("seconds", "minutes", "tokens_per_second")})
    for e in entries:
        step = int(e.get("step", 0))
        epoch["epoch"].append(round(step / steps_per_epoch, 4))
        epoch["step"].append(step)
        epoch["loss"].append(float(e.get("train_loss", 0.0)))
        epoch["accuracy"].append(0.0)
        epoch["val_bpc"].append(float(e.get("valid_bpc", 0.0)))
        epoch["lr"].append(float(e.get("lr", 0.0)))
        epoch["seconds"].append(0.0)
        epoch["minutes"].append(float(e.get("elapsed", 0.0)) / 60.0)
        epoch["tokens_per_second"].append(0.0)
    return {"batch": {"step": [], "loss": [], "accuracy": [], "lr": []}, "epoch": epoch}
