"""The models a server serves: one :class:`ServedModel` per language pair, each with its own
:class:`~transformer_cpp.serve.Batcher` (and so its own decoding thread and queue), and the
:class:`ModelRegistry` that picks the model of a request's ``source`` and ``target``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._version import __version__
from ..text import language_name
from ..translate import Translator
from .batcher import Batcher
from .config import ServeConfig, ServeError

__all__ = ["ModelRegistry", "ServedModel", "model_info"]


def _checkpoint_name(path: Any) -> Optional[str]:
    """The checkpoint as ``/info`` shows it: its run directory's name and its own
    (``quick/epoch-0003``), not the absolute path, which would tell clients about the machine."""
    if path is None:
        return None
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def _languages(translator: Translator) -> Optional[str]:
    """``"English -> Spanish"``: the model's direction as a person reads it (None when unknown)."""
    if translator.src_lang is None or translator.tgt_lang is None:
        return None
    return f"{language_name(translator.src_lang)} -> {language_name(translator.tgt_lang)}"


def model_info(translator: Translator) -> Dict[str, Any]:
    """One model as ``GET /info`` shows it."""
    return {
        "checkpoint": _checkpoint_name(translator.checkpoint),
        "model": dict(translator.model.config),
        "vocab_sizes": {
            "source": int(translator.src_tokenizer.vocab_size),
            "target": int(translator.tgt_tokenizer.vocab_size),
        },
        "source_language": translator.src_lang,
        "target_language": translator.tgt_lang,
        "languages": _languages(translator),
        "trained_length": translator.trained_length,
        "max_output_tokens": translator.max_output_tokens,
        "compute_type": translator.compute_type,
    }


@dataclass
class ServedModel:
    """One model of the server: its translator, its batcher and its language pair (``None``
    when the checkpoint does not record it)."""

    translator: Translator
    batcher: Batcher

    @property
    def source(self) -> Optional[str]:
        return getattr(self.translator, "src_lang", None)

    @property
    def target(self) -> Optional[str]:
        return getattr(self.translator, "tgt_lang", None)

    @property
    def pair(self) -> str:
        return f"{self.source}-{self.target}"


class ModelRegistry:
    """The server's models, one per language pair; :meth:`pick` finds a request's."""

    def __init__(self, translators: Sequence[Translator], config: ServeConfig, threads: Optional[int] = None) -> None:
        if not translators:
            raise ValueError("the server needs at least one model")
        seen: Dict[Tuple[Optional[str], Optional[str]], Translator] = {}
        for t in translators:
            key = (getattr(t, "src_lang", None), getattr(t, "tgt_lang", None))
            if len(translators) > 1 and None in key:
                raise ValueError(
                    f"the model {_checkpoint_name(t.checkpoint)} does not record its languages; with several "
                    "models each must (its checkpoint's data has src_lang and tgt_lang)"
                )
            if key in seen:
                raise ValueError(
                    f"two models translate {key[0]} to {key[1]} ({_checkpoint_name(seen[key].checkpoint)} and "
                    f"{_checkpoint_name(t.checkpoint)}); serve one model per language pair"
                )
            if any(other.model is t.model for other in seen.values()):
                raise ValueError(
                    f"the same model object is in two translators ({key[0]} to {key[1]} and another); each "
                    "model decodes on its own thread, so give each pair its own model (load it again)"
                )
            seen[key] = t
        self.models = [ServedModel(t, Batcher(t, config, threads)) for t in translators]

    @property
    def single(self) -> bool:
        return len(self.models) == 1

    def pairs(self) -> str:
        """The pairs served, as an error message names them: ``en-es, fr-de``."""
        return ", ".join(m.pair for m in self.models)

    def sources(self, target: Optional[str] = None) -> List[str]:
        """The source languages, in order (those translated to ``target`` when given)."""
        found: List[str] = []
        for m in self.models:
            if m.source is not None and m.source not in found and (target is None or m.target == target):
                found.append(m.source)
        return found

    def pick(self, source: Optional[str], target: Optional[str]) -> ServedModel:
        """The model of ``source`` to ``target``; either may be left out when only one model
        matches the other (with one model, both). :class:`ServeError` 400 names the pairs served."""
        matches = [
            m for m in self.models if (source is None or m.source == source) and (target is None or m.target == target)
        ]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise ServeError(
                400,
                f"no model translates {source or 'any language'} to {target or 'any language'}; "
                f"this server translates {self.pairs()} (source-target)",
            )
        raise ServeError(400, f"this server has several models ({self.pairs()}): give source and target to choose one")

    def language_list(self) -> List[Dict[str, Any]]:
        """``GET /languages`` in LibreTranslate's form: each language with its code, English name
        and the targets it can be translated to."""
        codes: List[str] = []
        for m in self.models:
            for code in (m.source, m.target):
                if code is not None and code not in codes:
                    codes.append(code)
        return [
            {
                "code": code,
                "name": language_name(code),
                "targets": [m.target for m in self.models if m.source == code and m.target is not None],
            }
            for code in codes
        ]

    def info(self, config: ServeConfig) -> Dict[str, Any]:
        """The answer of ``GET /info``: the first model's fields at the top (as with one model),
        every model under ``models``, the server's settings."""
        first = self.models[0]
        return {
            "name": "transformer-cpp",
            "version": __version__,
            **model_info(first.translator),
            "models": [model_info(m.translator) for m in self.models],
            "threads": first.batcher.threads,
            "batching": {
                "max_batch": config.max_batch,
                "max_wait_ms": config.max_wait_ms,
                "max_batch_tokens": config.max_batch_tokens,
                "batch_seconds": config.batch_seconds,
            },
            "defaults": {"beam_size": config.beam_size, "length_penalty": config.length_penalty},
            "limits": {
                "max_request_bytes": config.max_request_bytes,
                "max_texts": config.max_texts,
                "max_chars": config.max_chars,
                "max_beam_size": config.max_beam_size,
                "max_queue": config.max_queue,
                "max_source_tokens": config.max_source_tokens,
                "max_request_tokens": config.max_request_tokens,
                "max_attention_weights": config.max_attention_weights,
                "read_timeout": config.read_timeout,
            },
        }
