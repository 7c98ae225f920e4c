"""Translators read from disk: from a checkpoint of this package (:func:`from_checkpoint`) or from a
published MarianMT model (:func:`from_pretrained`), what :meth:`Translator.from_checkpoint` and
:meth:`Translator.from_pretrained` return. Each takes the class to make, so that a subclass of the
translator is made as itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Optional, Protocol, TypeVar, Union

from ..checkpoint import load_checkpoint
from ..pretrained import load_pretrained

__all__ = ["from_checkpoint", "from_pretrained"]


class _FromCheckpoint(Protocol):
    """What a translator made from a checkpoint records: the checkpoint directory it was read from."""

    checkpoint: Optional[Path]


T = TypeVar("T", bound=_FromCheckpoint)
U = TypeVar("U")


#: The data record's key of the longest pair a fine-tuned model was trained on, over all its runs
#: (``None``: unknown, after an imported model); a run without it warns beyond its ``max_length``.
TRAINED_LENGTH = "trained_length"


def from_checkpoint(
    make: Callable[..., T], path: Union[str, Path], max_output_tokens: Optional[int], compute_type: str
) -> T:
    """A translator (made by ``make``, the class) of the checkpoint at ``path``: its model and
    tokenizers, the languages it records (English to Spanish for records without them), the
    longest training pair and the decoding defaults it records; its ``checkpoint`` is the
    directory read."""
    ckpt = load_checkpoint(path, optimizer=False)
    data = ckpt.data or {}
    # a fine-tuned run records the longest pair of all its training (None: unknown); others their own
    recorded = data[TRAINED_LENGTH] if TRAINED_LENGTH in data else data.get("max_length")
    trained = recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else None
    translator = make(
        ckpt.model,
        ckpt.src_tokenizer,
        ckpt.tgt_tokenizer,
        src_lang=data.get("src_lang", "en"),
        tgt_lang=data.get("tgt_lang", "es"),
        max_output_tokens=max_output_tokens,
        trained_length=trained,
        compute_type=compute_type,
        decode_defaults=data.get("decode_defaults"),
    )
    translator.checkpoint = ckpt.path
    return translator


def from_pretrained(make: Callable[..., U], source: Union[str, Path], keywords: Dict[str, Any]) -> U:
    """A translator (made by ``make``, the class) of the MarianMT model ``source``, read into
    memory: its languages unless ``keywords`` name ``src_lang`` / ``tgt_lang``, its generation
    rules as the decoding defaults unless ``keywords`` give ``decode_defaults``; the other
    ``keywords`` passed to the constructor."""
    keywords = dict(keywords)
    parts = load_pretrained(source, src_lang=keywords.pop("src_lang", None), tgt_lang=keywords.pop("tgt_lang", None))
    return make(
        parts.model,
        parts.src_tokenizer,
        parts.tgt_tokenizer,
        src_lang=parts.src_lang,
        tgt_lang=parts.tgt_lang,
        **{"decode_defaults": parts.decode_defaults, **keywords},
    )
