"""Translation as a :class:`~.task.TrainingTask`: encoded sentence pairs in shuffled batches
(teacher forcing), validation loss, accuracy and greedy BLEU, checkpoints with the two tokenizers.

Each epoch the training pairs are shuffled by a generator seeded with ``(TrainConfig.seed,
epoch)`` (:func:`transformer_cpp.data.batch_plan`), optionally bucketed by length. The decoder
reads ``tgt[:, :-1]`` and learns to predict ``tgt[:, 1:]``; loss and accuracy count non-padding
target tokens only (``Transformer.last_token_count`` gives each batch's count).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..checkpoint import Checkpoint, CheckpointError, average_checkpoints, load_checkpoint, save_checkpoint
from ..data import Batch, EncodedPairs, batch_plan, make_batch
from ..translate import bleu_of_encoded, evaluate_loss
from .accumulate import accumulated_pairs_step
from .config import TrainConfig
from .state import data_fingerprint
from .task import CheckpointRequest, StepOutcome, TrainingTask

__all__ = ["PairsTask", "check_types", "no_batch_message", "resume_pairs"]


def check_types(train_data: Any, valid_data: Any) -> None:
    """TypeError unless the trainer's data are encoded pairs (the validation pairs may be None)."""
    if not isinstance(train_data, EncodedPairs):
        raise TypeError(
            f"Trainer: train_data must be EncodedPairs (from encode_pairs), got {type(train_data).__name__}"
        )
    if valid_data is not None and not isinstance(valid_data, EncodedPairs):
        raise TypeError(f"Trainer: valid_data must be EncodedPairs or None, got {type(valid_data).__name__}")


def _check_vocabularies(
    model: Any, src_tokenizer: Any, tgt_tokenizer: Any, train_data: EncodedPairs, valid_data: Optional[EncodedPairs]
) -> None:
    """ValueError when a tokenizer's vocabulary is not the model's, or the pairs hold token ids
    beyond the model's vocabularies: pairs encoded with other tokenizers would fail only when their
    batch comes, perhaps after an epoch of training."""
    for key, tok in (("src_vocab_size", src_tokenizer), ("tgt_vocab_size", tgt_tokenizer)):
        if tok is not None and tok.vocab_size != model.config[key]:
            raise ValueError(
                f"Trainer: the tokenizer has {tok.vocab_size} tokens but the model's {key} is {model.config[key]}"
            )
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


def no_batch_message(train_data: Any, config: Any) -> str:
    """Why an epoch of ``train_data`` has no batch under ``config``."""
    if train_data is None:
        return "Trainer: the task's first epoch has no batch"
    if not len(train_data):
        return "Trainer: train_data holds no pair"
    return (
        f"Trainer: no training batch: {len(train_data)} training pair(s) make no complete batch of "
        f"batch_size {config.batch_size} and drop_remainder drops the incomplete one; lower batch_size or "
        "set drop_remainder=False"
    )


class PairsTask(TrainingTask):
    """The translation task's side of training: ``train_data`` and ``valid_data`` (encoded pairs),
    the tokenizers that checkpoints hold, and ``data_info`` (how the data were read and split)."""

    kind = "translation"
    metrics = ("val_loss", "val_accuracy", "val_bleu")

    def __init__(
        self,
        model: Any,
        train_data: EncodedPairs,
        valid_data: Optional[EncodedPairs],
        src_tokenizer: Any,
        tgt_tokenizer: Any,
        data_info: Optional[Mapping[str, Any]],
    ) -> None:
        check_types(train_data, valid_data)
        _check_vocabularies(model, src_tokenizer, tgt_tokenizer, train_data, valid_data)
        self.train_data = train_data
        self.valid_data = valid_data
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.data_info = dict(data_info) if data_info is not None else None
        self._plan: Tuple[Any, List[np.ndarray]] = (None, [])

    def batch_plan(self, epoch: int, config: Any) -> List[np.ndarray]:
        key = (epoch, config.batch_size, config.max_tokens, config.seed, config.bucket_by_length, config.drop_remainder)
        if self._plan[0] != key:
            plan = batch_plan(
                self.train_data,
                config.batch_size,
                max_tokens=config.max_tokens,
                shuffle=True,
                seed=config.seed,
                epoch=epoch,
                bucket_by_length=config.bucket_by_length,
                drop_remainder=config.drop_remainder,
            )
            self._plan = (key, plan)
        return self._plan[1]

    def step(self, model: Any, batch: Any) -> StepOutcome:
        b = make_batch(self.train_data, batch)
        # transformer_cpp.NonFiniteError (a FloatingPointError) when the step would not be finite:
        # the core then changes nothing
        loss, acc = model.train_step(b.src, b.tgt_in, b.tgt_out)
        return StepOutcome(loss, acc, model.last_token_count, b.src.size + b.tgt_in.size)

    def accumulated_step(self, model: Any, batches: Sequence[Any]) -> StepOutcome:
        if len(batches) == 1:
            return self.step(model, batches[0])
        made = [make_batch(self.train_data, rows) for rows in batches]
        loss, acc, tokens = accumulated_pairs_step(model, made)
        return StepOutcome(loss, acc, tokens, sum(b.src.size + b.tgt_in.size for b in made))

    def parallel_batch(self, batch: Any) -> Batch:
        return make_batch(self.train_data, batch)

    def validate(self, model: Any, config: Any) -> Dict[str, float]:
        values: Dict[str, float] = {}
        if self.valid_data is not None:
            loss, acc, _ = evaluate_loss(model, self.valid_data, config.batch_size)
            values["val_loss"], values["val_accuracy"] = loss, acc
        bleu = self.bleu(model, config.val_bleu_sentences)
        if bleu is not None:
            values["val_bleu"] = bleu
        return values

    def bleu(self, model: Any, sentences: int) -> Optional[float]:
        """Greedy corpus BLEU on ``sentences`` validation pairs (evenly spread), or None without
        validation pairs, a target tokenizer or sentences."""
        if not sentences or self.valid_data is None or self.tgt_tokenizer is None:
            return None
        tgt_lang = (self.data_info or {}).get("tgt_lang")
        return bleu_of_encoded(
            model,
            self.valid_data,
            self.tgt_tokenizer,
            sentences,
            tgt_lang=tgt_lang if isinstance(tgt_lang, str) else None,
        )

    score_name = "BLEU"

    def has_score(self, config: Any) -> bool:
        return self.valid_data is not None and self.tgt_tokenizer is not None and config.val_bleu_sentences > 0

    def score_model(self, model: Any, config: Any) -> Optional[float]:
        return self.bleu(model, config.val_bleu_sentences)

    def score(self, entry: Mapping[str, Any]) -> Optional[float]:
        bleu = entry.get("val_bleu")
        return None if bleu is None else float(bleu)

    def fingerprints(self) -> Dict[str, Optional[str]]:
        return {"train": data_fingerprint(self.train_data), "valid": data_fingerprint(self.valid_data)}

    def describe(self, entry: Mapping[str, Any]) -> str:
        text = f"loss {entry['loss']:.4f}, acc {entry['accuracy']:.4f}"
        if "val_loss" in entry:
            text += f", val_loss {entry['val_loss']:.4f}, val_acc {entry['val_accuracy']:.4f}"
        if "val_bleu" in entry:
            text += f", val_bleu {entry['val_bleu']:.2f}"
        return text

    def save(self, model: Any, request: CheckpointRequest) -> Path:
        if self.src_tokenizer is None or self.tgt_tokenizer is None:
            raise ValueError(
                "Trainer: checkpoint_dir needs src_tokenizer and tgt_tokenizer (they are saved with the model)"
            )
        return save_checkpoint(
            request.run_dir,
            model,
            self.src_tokenizer,
            self.tgt_tokenizer,
            data=self.data_info,
            optimizer=True,
            **request.keywords(),
        )

    def average(self, run_dir: Path, paths: Sequence[Path]) -> Tuple[Path, Any]:
        path, model = average_checkpoints(paths, run_dir)
        assert path is not None  # written, since a run directory was given
        return path, model


def _resumed_config(ckpt: Checkpoint, **changes: Any) -> TrainConfig:
    """The checkpoint's training settings with ``changes`` (those not None) applied."""
    assert ckpt.train_config is not None
    try:
        values = dict(ckpt.train_config)
        values.update({k: v for k, v in changes.items() if v is not None})
        return TrainConfig.from_dict(values)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint '{ckpt.path}': invalid training settings ({exc})") from None


def resume_pairs(
    cls: Any,
    path: Union[str, Path, Checkpoint],
    train_data: EncodedPairs,
    valid_data: Optional[EncodedPairs],
    changes: Dict[str, Any],
    checkpoint_dir: Union[str, Path, None],
    parallel: Any,
) -> Any:
    """:meth:`Trainer.from_checkpoint <transformer_cpp.training.Trainer.from_checkpoint>`: a
    trainer of class ``cls`` continuing the translation run saved at ``path``, its settings
    with ``changes`` (those not None)."""
    ckpt = path if isinstance(path, Checkpoint) else load_checkpoint(path, optimizer=True)
    if not ckpt.optimizer_loaded:
        raise CheckpointError(f"checkpoint '{ckpt.path}' was loaded without its optimiser state; it cannot be resumed")
    if ckpt.trainer_state is None or ckpt.train_config is None:
        raise CheckpointError(f"checkpoint '{ckpt.path}' has no trainer state; it cannot be resumed")
    config = _resumed_config(ckpt, **changes)
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
