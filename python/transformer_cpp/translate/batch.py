"""A batch of translations: each input as the model sees it (:func:`encode_source`: cleaned,
encoded whole, with the warning text when it is longer than any training pair), one decode call
for the batch (:func:`translate_encoded`, which :class:`~transformer_cpp.translate.Translator` and
the server's batcher both call, so they give the same translations), and each result as a
:class:`Translation` with its pieces, score and attention. :meth:`Translator.translate_batch
<transformer_cpp.translate.Translator.translate_batch>` encodes each input's prefix and
constraints with :func:`search_ids` and decodes its inputs a chunk at a time with
:func:`translate_in_chunks`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Protocol, Sequence, Tuple, cast

import numpy as np

from .._runtime import ThreadGovernor, set_num_threads
from ..text import check_text
from .decoding import DecodeOptions, Hypothesis, decode_rows, one_line

__all__ = [
    "EncodedSource",
    "Translates",
    "LongInputWarning",
    "Translation",
    "encode_source",
    "encode_target_text",
    "per_input",
    "search_ids",
    "token_piece",
    "translate_encoded",
    "translate_in_chunks",
]


class Translates(Protocol):
    """What a batch needs of a :class:`~transformer_cpp.translate.Translator`: its model, its two
    tokenizers, its cleaning and the length of its longest training pair."""

    model: Any
    src_tokenizer: Any
    tgt_tokenizer: Any
    trained_length: Optional[int]

    def clean(self, sentence: str) -> str: ...


class LongInputWarning(UserWarning):
    """An input is longer than any training pair: it is translated whole, but quality may suffer."""


@dataclass
class Translation:
    """One translation with what is needed to inspect it.

    Attributes:
        source: the input sentence after cleaning.
        text: the translation (detokenised).
        source_ids: the encoder input, ``[start, ..., end]`` (the whole sentence).
        target_ids: the generated ids (the end token included when ``finished``).
        source_pieces, target_pieces: readable subword pieces for ``source_ids`` / ``target_ids``
            (``▁`` marks a leading space), for axis labels.
        finished: whether decoding produced the end token (else it hit the output limit).
        score: beam search's length-normalised log-probability (``None`` for greedy decoding).
        attention: with ``return_attention=True``, decoder layer name ->
            cross-attention weights ``(heads, len(target_ids), len(source_ids))``, recorded while
            decoding.
        hypotheses: with ``n_best > 1`` (:func:`translate_encoded`), the ``n_best`` translations
            of the source, best first (the first one is this translation, without hypotheses).
    """

    source: str
    text: str
    source_ids: List[int]
    target_ids: List[int]
    source_pieces: List[str]
    target_pieces: List[str]
    finished: bool
    score: Optional[float] = None
    attention: Dict[str, np.ndarray] = field(default_factory=dict)
    hypotheses: List["Translation"] = field(default_factory=list)
    #: lexical constraints the translation does not hold: 0 unless the search reached the output
    #: limit before meeting them all (then this is the hypothesis that meets the most)
    constraints_missing: int = 0

    def cross_attention(self, layer: int = -1) -> np.ndarray:
        """Cross-attention ``(heads, target, source)`` of decoder layer ``layer`` (default the last).

        Raises:
            ValueError: if the translation was made without ``return_attention=True``.
        """
        if not self.attention:
            raise ValueError(
                "Translation.cross_attention: translate with return_attention=True to get attention weights"
            )
        names = sorted(self.attention, key=lambda n: int(n.split(".")[2]))
        if (
            isinstance(layer, (bool, np.bool_))
            or not isinstance(layer, (int, np.integer))
            or not -len(names) <= int(layer) < len(names)
        ):
            raise ValueError(
                f"Translation.cross_attention: layer must be an integer in [{-len(names)}, {len(names)}) "
                f"(the model has {len(names)} decoder layer{'s' if len(names) != 1 else ''}), got {layer!r}"
            )
        return self.attention[names[int(layer)]]

    def __str__(self) -> str:
        return self.text


class EncodedSource(NamedTuple):
    """One input as the model sees it (:func:`encode_source`)."""

    source: str  # the input as cleaned for the model
    ids: List[int]  # the encoder input [start, ..., end]
    warning: Optional[str]  # what LongInputWarning says when the input is longer than every training pair


def encode_source(translator: Translates, sentence: str) -> EncodedSource:
    """``sentence`` cleaned (:meth:`Translator.clean`) and encoded, all of it, with the warning
    text when it is longer than any training pair (the caller warns, or answers with it).

    Raises:
        TypeError, ValueError: ``sentence`` is not valid text.
    """
    cleaned = translator.clean(sentence)
    ids = list(translator.src_tokenizer.encode(cleaned))
    trained = translator.trained_length
    warning = None
    if trained is not None and len(ids) > trained:
        warning = (
            f"the sentence {cleaned[:60]!r}{'...' if len(cleaned) > 60 else ''} has {len(ids)} tokens, more than any "
            f"training pair ({trained}); it is translated whole, but the translation may be poorer"
        )
    return EncodedSource(cleaned, ids, warning)


def translate_encoded(
    translator: Translates,
    encoded: Sequence[EncodedSource],
    options: DecodeOptions,
    return_attention: bool = False,
    target_prefix: Optional[Sequence[Sequence[int]]] = None,
    constraints: Optional[Sequence[Sequence[Sequence[int]]]] = None,
) -> List["Translation"]:
    """Translate encoded inputs (:func:`encode_source`) with one decode call: what
    :meth:`Translator.translate_batch` does for each chunk and the server's batcher for each batch,
    so both give the same translations. With ``options.n_best > 1`` each translation lists its
    :attr:`~Translation.hypotheses`; with ``return_attention`` each carries the cross-attention
    weights its decoding recorded."""
    tgt = translator.tgt_tokenizer
    rows = [e.ids for e in encoded]
    found = decode_rows(
        translator.model, rows, tgt.start_id, tgt.end_id, options, return_attention, target_prefix, constraints
    )
    results = []
    for enc, hyps in zip(encoded, found):
        best = _translation(translator, enc, hyps[0])
        if options.n_best > 1:
            best.hypotheses = [_translation(translator, enc, h) for h in hyps]
        results.append(best)
    return results


def translate_in_chunks(
    translator: Translates,
    encoded: Sequence[EncodedSource],
    options: DecodeOptions,
    return_attention: bool,
    prefixes: Optional[Sequence[Sequence[int]]],
    wanted: Optional[Sequence[Sequence[Sequence[int]]]],
    batch_size: int,
    governor: Optional[ThreadGovernor],
) -> List["Translation"]:
    """Translate ``encoded`` ``batch_size`` at a time (``prefixes`` and ``wanted``, the
    constraints, one per input or None), each chunk one :func:`translate_encoded` call; the thread
    ``governor`` (None: the threads are left as they are) is told the time and work of each chunk,
    and the core is left with all the threads it governs."""
    results: List[Translation] = []
    try:
        for start in range(0, len(encoded), batch_size):
            chunk = encoded[start : start + batch_size]
            end = start + len(chunk)
            t0 = time.perf_counter()
            results.extend(
                translate_encoded(
                    translator,
                    chunk,
                    options,
                    return_attention,
                    None if prefixes is None else prefixes[start:end],
                    None if wanted is None else wanted[start:end],
                )
            )
            if governor is not None:  # work ~ sentences x (source + output length)
                work = sum(len(e.ids) + len(r.target_ids) for e, r in zip(chunk, results[start:]))
                governor.record(time.perf_counter() - t0, max(work, 1))
    finally:
        if governor is not None:
            set_num_threads(governor.most)
    return results


def _translation(translator: Translates, enc: EncodedSource, hyp: Hypothesis) -> "Translation":
    tgt = translator.tgt_tokenizer
    return Translation(
        source=enc.source,
        text=one_line(tgt.decode(hyp.ids)),
        source_ids=list(enc.ids),
        target_ids=hyp.ids,
        source_pieces=[token_piece(translator.src_tokenizer, i) for i in enc.ids],
        target_pieces=[token_piece(tgt, i) for i in hyp.ids],
        finished=hyp.finished,
        score=hyp.score,
        attention=hyp.attention or {},
        constraints_missing=hyp.constraints_missing,
    )


def encode_target_text(translator: Translates, text: Any, what: str) -> List[int]:
    """The target tokenizer's ids of ``text`` (stripped) without start and end; ``ValueError``
    naming ``what`` when it is not text or encodes to no token."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be text (str), got {type(text).__name__}")
    tgt = translator.tgt_tokenizer
    stripped = check_text(text, what).strip()
    ids = [int(i) for i in tgt.encode(stripped, add_special_tokens=False)] if stripped else []
    ids = [i for i in ids if i not in tgt.special_ids]
    if not ids:
        raise ValueError(f"{what} {text!r} encodes to no token; give text with at least one character the model writes")
    return ids


def search_ids(
    translator: Translates, count: int, target_prefix: Any, constraints: Any, beam_size: int
) -> Tuple[Optional[List[List[int]]], Optional[List[List[List[int]]]]]:
    """The prefix and constraint ids of each of ``count`` inputs (``None``: not asked), from
    ``target_prefix`` and ``constraints`` as :meth:`Translator.translate_batch` takes them (one for
    all inputs or one per input); ``ValueError`` for more constraints than ``beam_size`` leaves
    room for."""
    prefixes = None
    if target_prefix is not None:
        prefixes = [
            encode_target_text(translator, p, "target_prefix")
            for p in per_input(target_prefix, count, "target_prefix", 1)
        ]
    wanted = None
    if constraints is not None:
        wanted = [
            [encode_target_text(translator, c, "constraint") for c in cs]
            for cs in per_input(constraints, count, "constraints", 2)
        ]
        most = max((len(cs) for cs in wanted), default=0)
        if most and most >= beam_size:
            raise ValueError(
                f"constraints: {most} constraints need beam_size of at least {most + 1} (one more than the "
                f"constraints), got beam_size {beam_size}"
            )
    return prefixes, wanted


def per_input(value: Any, count: int, what: str, depth: int) -> List[Any]:
    """``value`` for each of ``count`` inputs: one for all (a str, or a list of str when ``depth``
    is 2), or a list of one per input."""
    if value is None:
        return [None] * count
    one_for_all = isinstance(value, str) if depth == 1 else (not value or isinstance(value[0], str))
    if one_for_all:
        return [value] * count
    items = list(value)
    if len(items) != count:
        raise ValueError(f"{what}: give one for all inputs or one per input ({count}), got {len(items)}")
    return items


def token_piece(tokenizer: Any, token_id: int) -> str:
    """A readable label for one token id: ``▁`` for a leading space, ``<end>`` for specials."""
    if token_id in tokenizer.special_ids:
        return cast(str, tokenizer.id_to_token(token_id))
    text = cast(str, tokenizer.decode([token_id]))
    # byte-level BPE writes a leading space as "Ġ"; decode() drops one leading space, so restore it
    return ("\u2581" + text) if tokenizer.id_to_token(token_id).startswith("\u0120") else text
