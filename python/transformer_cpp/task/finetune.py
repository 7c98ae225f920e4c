"""Fine-tuning: a new run that starts from the model of an existing run or checkpoint (an imported
MarianMT model, or a run of this package) and trains it on the user's sentence pairs.

``finetune_trainer(TrainRequest(training={"init_from": RUN, ...}), out)`` (``train --init-from RUN``)
takes from RUN everything that fixes what the model is: the architecture, the weights, both
tokenizers and the languages. Options that would change them are refused in one line (an
architecture option must equal RUN's value; the vocabulary options are refused), except the
precision of the matrix products and the dropout rate, which training may set. Everything else
works as for a new run: the preset's training recipe under the options given (learning rate,
warm-up, time budget, label smoothing, checkpoint averaging), the leak-free split of the data
(its test part is what ``evaluate`` scores), ``--resume``.

The data are read as RUN's tokenizers expect them: cleaned in their language for this package's
BPE vocabularies, as they are for SentencePiece ones, which normalise raw text themselves (the
record's ``clean``). The Adam moments and the step count start afresh. The run records where it
started (``data["init_from"]``: the checkpoint read and its run) and keeps RUN's provenance and
decoding defaults (``data["pretrained"]``, ``data["decode_defaults"]``, and ``pretrained.json``
copied into the new run directory).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..checkpoint import TRANSLATION_KIND, CheckpointError, check_kind, load_checkpoint, read_checkpoint_config
from ..data import DataRecord
from ..model import Transformer
from ..training import TrainConfig, Trainer
from ..translate.constructors import TRAINED_LENGTH
from .presets import AUTO_PRECISION, DEFAULT_PRESET
from .prepare import load_split
from .reporting import Report, TaskError, say
from .translation import (
    SetupSteps,
    TrainRequest,
    encode_for_training,
    requested_settings,
    start_trainer,
    training_config,
)

__all__ = ["CARRIED_OVER", "CHANGEABLE_ARCHITECTURE", "FIXED_DATA", "finetune_trainer"]

#: Architecture settings a fine-tuning run may set (they change how it trains, not the model).
CHANGEABLE_ARCHITECTURE = ("precision", "dropout")
#: Data settings that RUN's tokenizers fix: refused when given.
FIXED_DATA = ("vocab_size", "joint_vocab")
#: Sections of RUN's data record that the new run keeps.
CARRIED_OVER = ("pretrained", "decode_defaults")
PROVENANCE_FILE = "pretrained.json"


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _read_init(init_from: str) -> Tuple[Path, Dict[str, Any]]:
    try:
        ckpt_dir, cfg = read_checkpoint_config(init_from, "best")
        check_kind(ckpt_dir, cfg, TRANSLATION_KIND)
    except CheckpointError as exc:
        raise TaskError(f"--init-from: {exc}") from None
    return ckpt_dir, cfg


def _check_request(request: TrainRequest, model_cfg: Dict[str, Any], languages: Tuple[str, str]) -> None:
    """Refuse what would change RUN's model or vocabularies."""
    conflicts = [
        f"{_option(k)} {v} (the model has {model_cfg.get(k)})"
        for k, v in request.architecture.items()
        if k not in CHANGEABLE_ARCHITECTURE + ("max_length",) and model_cfg.get(k) != v
    ]
    conflicts += [f"{_option(k)} (the vocabularies are the model's)" for k in FIXED_DATA if k in request.data]
    for key, have in zip(("src_lang", "tgt_lang"), languages):
        if key in request.data and request.data[key] != have:
            flag = "--source-lang" if key == "src_lang" else "--target-lang"
            conflicts.append(f"{flag} {request.data[key]} (the model translates {languages[0]} -> {languages[1]})")
    if conflicts:
        raise TaskError(
            "--init-from keeps the architecture, vocabularies and languages of the model it starts from, and "
            "these options differ from it: " + ", ".join(conflicts) + "; drop them"
        )


def _model(ckpt_model: Transformer, arch: Dict[str, Any], max_length: int) -> Transformer:
    """RUN's model, rebuilt when the precision, the dropout or the positional table's size differ
    (the weights copied one tensor at a time)."""
    config = dict(ckpt_model.config)
    wanted = dict(config)
    for key in CHANGEABLE_ARCHITECTURE:
        if key in arch and not (key == "precision" and arch[key] == AUTO_PRECISION):
            wanted[key] = arch[key]
    wanted["max_length"] = max(int(config["max_length"]), int(max_length))
    if wanted == config:
        return ckpt_model
    model = Transformer.from_config(wanted)
    source = ckpt_model.parameters()
    for name, param in model.parameters().items():
        np.copyto(param.value, source[name].value)
    return model


def _settings(request: TrainRequest, init_data: Dict[str, Any]) -> Tuple[TrainConfig, DataRecord, Dict[str, Any]]:
    """The training settings (the preset's recipe, the options on top) and the data record."""
    preset = request.preset or DEFAULT_PRESET
    _, settings, data_req = requested_settings(request, preset)
    for key in FIXED_DATA:
        data_req.pop(key, None)
    data_req["src_lang"] = init_data.get("src_lang", "en")
    data_req["tgt_lang"] = init_data.get("tgt_lang", "es")
    return training_config(request, settings), DataRecord(**data_req).check(), dict(request.architecture)


def finetune_trainer(
    request: TrainRequest, out: Path, report: Report = say, steps: Optional[SetupSteps] = None
) -> Trainer:
    """A trainer of a new run in ``out`` that starts from the model of ``request.training
    ["init_from"]`` (a run or checkpoint directory) and trains it on ``request.data_path``'s pairs
    (see the module docstring). :class:`TaskError` for an option that would change the model."""
    steps = steps if steps is not None else SetupSteps()
    return steps.run(  # type: ignore[no-any-return]
        "preparing the fine-tuning", lambda: _build(request, out, steps.parallel, report)
    )


def _build(request: TrainRequest, out: Path, parallel: Any, report: Report) -> Trainer:
    ckpt_dir, cfg = _read_init(str(request.training["init_from"]))
    init_data = dict(cfg.get("data") or {})
    languages = (str(init_data.get("src_lang", "en")), str(init_data.get("tgt_lang", "es")))
    _check_request(request, dict(cfg.get("model") or {}), languages)
    config, record, arch = _settings(request, init_data)
    ckpt = load_checkpoint(ckpt_dir, optimizer=False)
    src_tok, tgt_tok = ckpt.src_tokenizer, ckpt.tgt_tokenizer
    clean = bool(getattr(src_tok, "expects_cleaned_text", True)) and bool(
        getattr(tgt_tok, "expects_cleaned_text", True)
    )
    record = record.replace(clean=clean)
    report(f"fine-tuning {ckpt_dir} ({languages[0]} -> {languages[1]}): its vocabularies and architecture")
    split, record = load_split(request.data_path, record, report)
    record, train, valid = encode_for_training(split, src_tok, tgt_tok, record, report)
    max_length = int(record.max_length or 0)  # set by encode_for_training
    model = _model(ckpt.model, arch, max_length)
    data_info = record.to_dict()
    data_info["init_from"] = {"checkpoint": str(ckpt_dir), "run_id": ckpt.run_id}
    data_info[TRAINED_LENGTH] = _trained_length(init_data, max_length)
    data_info.update({k: init_data[k] for k in CARRIED_OVER if k in init_data})
    trainer = start_trainer(
        request, model, (train, valid), config, (src_tok, tgt_tok), out, data_info, parallel, report
    )
    if trainer.run_dir is not None and "pretrained" in init_data:
        _write_provenance(out, ckpt_dir.parent / PROVENANCE_FILE, init_data["pretrained"])
    return trainer


def _trained_length(init_data: Dict[str, Any], max_length: int) -> Optional[int]:
    """The longest pair the model has been trained on, in tokens, over RUN's training and this
    one (what a translator warns beyond): ``None`` when RUN does not record it (an imported
    model, trained elsewhere on pairs of unknown length)."""
    before = init_data.get(TRAINED_LENGTH, init_data.get("max_length"))
    return None if not isinstance(before, int) else max(before, int(max_length))


def _write_provenance(out: Path, source: Path, record: Any) -> None:
    """RUN's ``pretrained.json`` (else the record of its manifest) in the new run directory."""
    tmp = out / f".{PROVENANCE_FILE}.tmp"
    if source.is_file():
        shutil.copyfile(source, tmp)
    else:
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, out / PROVENANCE_FILE)
