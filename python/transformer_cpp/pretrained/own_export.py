"""A model this package exported to Transformers (``transformer-cpp export --to transformers``),
read back: a MarianMT directory whose ``transformer_cpp.json`` records the export, with one
byte-level BPE ``tokenizer.json`` instead of SentencePiece models.

The export gives both sides one vocabulary (the target's ids, then the source tokens the target
lacks) and the source tokenizer's merges, and masks the ids no target token has with a
``final_logits_bias`` of minus infinity; when the run's two tokenizers differ it adds
``target_tokenizer.json``, the target tokenizer's merges over the same vocabulary. Read back, the
model keeps that vocabulary on both sides, with a
:class:`~transformer_cpp.tokenizer.SubwordTokenizer` per side of the export's vocabulary and that
side's merges: the source one splits text into the same tokens as the run's source tokenizer, the
target one as the run's target tokenizer (so fine-tuning and evaluation see the run's target
tokens), and a generated id is the run's target id; the masked ids get a bias of
:data:`MASKED_BIAS`, finite so that the run can be saved, trained and averaged, and never generated. The LayerNorm epsilon the run was trained
with (the export writes MarianMT's) comes back from the record, the languages too, and the decoding
defaults are the package's own, as the run's were: the model translates as the run it was exported
from did.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..model import Transformer
from ..tokenizer import SubwordTokenizer
from ..tokenizer._common import read_tokenizer_file
from .marian import load_marian

__all__ = ["EXPORT_RECORD", "MASKED_BIAS", "TARGET_TOKENIZER_FILE", "is_own_export", "read_own_export"]

#: The record an export of this package writes beside the model.
EXPORT_RECORD = "transformer_cpp.json"
#: The output bias of the ids the export masked: exp(-1e9) is 0 in float32 and float64.
MASKED_BIAS = -1e9
#: What the export adds when the run's source and target tokenizers differ: the target tokenizer's
#: merges over the same vocabulary, so that target text (fine-tuning, evaluation) is split as the
#: run's target tokenizer splits it. Transformers does not read it.
TARGET_TOKENIZER_FILE = "target_tokenizer.json"
_MAX_RECORD_BYTES = 1 << 20


def _record(directory: Path) -> Optional[Dict[str, Any]]:
    path = directory / EXPORT_RECORD
    if not path.is_file() or path.stat().st_size > _MAX_RECORD_BYTES:
        return None
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def is_own_export(directory: Path) -> bool:
    """Whether ``directory`` is a Transformers export of this package: its record says so and it
    holds ``tokenizer.json`` (and no SentencePiece model)."""
    record = _record(directory)
    return (
        record is not None
        and record.get("format") == "transformer_cpp.export"
        and record.get("to") == "transformers"
        and (directory / "tokenizer.json").is_file()
        and not (directory / "source.spm").exists()
    )


def _epsilon(record: Dict[str, Any]) -> float:
    recorded = record.get("layer_norm_eps")
    eps = recorded.get("model") if isinstance(recorded, dict) else None
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1:
        raise ValueError(f"import: {EXPORT_RECORD}'s layer_norm_eps.model is {eps!r}; expected a number in (0, 1)")
    return float(eps)


def _tokenizer(directory: Path, name: str = "tokenizer.json") -> SubwordTokenizer:
    path = str(directory / name)
    text = read_tokenizer_file(path, "import", name, "transformer-cpp export --to transformers")
    try:
        document = json.loads(text)
        model, normalizer = document["model"], document["normalizer"]
        steps = normalizer["normalizers"] if isinstance(normalizer, dict) else []
        lowercase = any(isinstance(step, dict) and step.get("type") == "Lowercase" for step in steps)
        vocab, merges = model["vocab"], model["merges"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"import: {path} is not the tokenizer an export of transformer-cpp writes") from None
    return SubwordTokenizer.from_bpe(vocab, merges, lowercase=lowercase, source=path)


def _target_tokenizer(directory: Path, record: Dict[str, Any], source: SubwordTokenizer) -> SubwordTokenizer:
    """The target side's tokenizer: ``target_tokenizer.json`` when the record names it, else the
    source one (the run had one tokenizer). A record of a run whose vocabularies differ that names
    no target tokenizer is refused: target text split by the source merges would be other tokens."""
    name = record.get("target_tokenizer", "tokenizer.json")
    if name == TARGET_TOKENIZER_FILE:
        return _tokenizer(directory, name)
    if name != "tokenizer.json":
        raise ValueError(
            f"import: {EXPORT_RECORD}'s target_tokenizer is {name!r}; expected 'tokenizer.json' or "
            f"{TARGET_TOKENIZER_FILE!r}"
        )
    run = record.get("model")
    if isinstance(run, dict) and run.get("src_vocab_size") != run.get("tgt_vocab_size"):
        raise ValueError(
            f"import: {EXPORT_RECORD} records a run with separate source and target vocabularies but the export "
            f"has no {TARGET_TOKENIZER_FILE}; export the run again with `transformer-cpp export --to transformers`"
        )
    return source


def _unmask(model: Transformer) -> None:
    bias = model.parameters()["output.bias"].value
    masked = ~np.isfinite(bias)
    if np.any(np.isnan(bias)) or np.any(bias[masked] > 0):
        raise ValueError("import: final_logits_bias holds NaN or +infinity; an export masks ids with -infinity only")
    bias[masked] = MASKED_BIAS


def read_own_export(
    directory: Path, dtype: str = "float32"
) -> Tuple[Transformer, SubwordTokenizer, SubwordTokenizer, Dict[str, Any]]:
    """The model, the source and target tokenizers and ``{"src_lang", "tgt_lang"}`` of an export of
    this package (:func:`is_own_export`). ``ValueError`` naming what does not match an export."""
    record = _record(directory) or {}
    model = load_marian(directory, dtype=dtype, layer_norm_eps=_epsilon(record))
    _unmask(model)
    src_tok = _tokenizer(directory)
    tgt_tok = _target_tokenizer(directory, record, src_tok)
    for name, tokenizer in (("tokenizer.json", src_tok), (TARGET_TOKENIZER_FILE, tgt_tok)):
        if tokenizer.vocab_size != model.config["src_vocab_size"]:
            raise ValueError(
                f"import: {name} has {tokenizer.vocab_size} tokens but the model's vocabulary "
                f"{model.config['src_vocab_size']}"
            )
    languages = {side: record.get(side) for side in ("src_lang", "tgt_lang")}
    for side, code in languages.items():
        if code is not None and not isinstance(code, str):
            raise ValueError(f"import: {EXPORT_RECORD}'s {side} is {code!r}; expected a language code")
    return model, src_tok, tgt_tok, languages
