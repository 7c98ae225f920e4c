"""Scores of a model on held-out pairs: BLEU and chrF of its translations (sacrebleu), and the
teacher-forced loss and accuracy."""

from __future__ import annotations

import math

import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
from sacrebleu.metrics.bleu import BLEU
from sacrebleu.metrics.chrf import CHRF

from .._checks import integer
from ..data import EncodedPairs, batches, encode_pairs, sentence_key
from ..text import clean_sentence, language_code
from .decoding import DecodeOptions, decode_rows
from .batch import LongInputWarning
from .translator import Translator

__all__ = ["EvaluationResult", "bleu_of_encoded", "bleu_tokenizer", "evaluate", "evaluate_loss", "order_losses"]

# Languages written without spaces between words, whose BLEU counts characters (sacrebleu's
# "char" tokenizer): a sentence would otherwise be one or two "words" for 13a.
_NO_SPACE_LANGUAGES = frozenset({"ja", "th", "lo", "km", "my", "bo"})


def bleu_tokenizer(lang: Optional[str]) -> str:
    """The sacrebleu tokenizer BLEU uses for text in ``lang``: ``"zh"`` for Chinese (and
    Cantonese), ``"char"`` for the other languages written without spaces between words
    (Japanese, Thai, Lao, Khmer, Burmese, Tibetan), ``"13a"`` (sacrebleu's default) for every
    other language and for ``None``."""
    if lang is None:
        return "13a"
    primary = language_code(lang, "bleu_tokenizer").partition("-")[0]
    if primary in ("zh", "yue"):
        return "zh"
    return "char" if primary in _NO_SPACE_LANGUAGES else "13a"


@dataclass
class EvaluationResult:
    """Scores of :func:`evaluate`.

    Attributes:
        bleu: corpus BLEU (sacrebleu, 0-100). chrf: corpus chrF (sacrebleu, 0-100).
        loss, accuracy: masked loss and accuracy (teacher forcing, token-weighted) over the pairs
            that fit ``max_length``.
        sentences: pairs scored. scored_pairs: pairs in the loss (the same pairs).
        hypotheses, references: the translations and the cleaned references, one per pair given
            (a pair left out has the hypothesis ``""``).
        bleu_signature, chrf_signature: sacrebleu's signatures (how the scores were computed).
        sources: how many distinct source sentences the pairs hold.
        multi_bleu, multi_chrf: the scores with every reference of a source counted: one
            hypothesis per distinct source, scored against all the references given for it
            (sacrebleu with a variable number of references). Equal to ``bleu``/``chrf`` when no
            source repeats; higher when one English sentence has several Spanish translations,
            as a correct alternative translation then counts.
        skipped: the pairs left out of every score, ``(position in the lists, why)``: those the
            model cannot translate or score here (a source too long for the memory, say).
    """

    bleu: float
    chrf: float
    loss: float
    accuracy: float
    sentences: int
    scored_pairs: int
    hypotheses: List[str]
    references: List[str]
    bleu_signature: str = ""
    chrf_signature: str = ""
    sources: int = 0
    multi_bleu: float = float("nan")
    multi_chrf: float = float("nan")
    skipped: List[Tuple[int, str]] = field(default_factory=list)

    def summary(self) -> str:
        """One line with the four scores."""
        left_out = f", {len(self.skipped)} left out" if self.skipped else ""
        return (
            f"BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}  loss {self.loss:.4f}  accuracy {self.accuracy:.4f}  "
            f"({self.sentences} sentences{left_out})"
        )


# ------------------------------------------------------------------------------------ translator


def evaluate(
    translator: Translator,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    beam_size: int = 1,
    length_penalty: float = 1.0,
    batch_size: int = 64,
    tgt_lang: Optional[str] = "es",
) -> EvaluationResult:
    """BLEU and chrF of ``translator`` on held-out pairs, plus the masked loss and accuracy.

    The references are cleaned with :func:`clean_sentence` in ``tgt_lang`` (as the training
    targets were; ``None`` to leave them as they are) and scored against the translations with
    sacrebleu's BLEU (tokenised for ``tgt_lang``, :func:`bleu_tokenizer`: 13a for most languages)
    and chrF (character n-grams up to 6). The loss and accuracy are teacher-forced and token-weighted over
    every pair. Every source is translated whole (see :class:`Translator`).

    A pair the model cannot translate or score here (one whose batch is refused, a sentence too
    long for the memory say, is tried again on its own) is left out of every score and listed in
    ``skipped`` with why, instead of failing the whole evaluation.

    Raises:
        ValueError: if the lists differ in length or are empty, an option is out of range, or no
            pair can be scored (the first pair's reason).
    """
    sources, references = list(sources), list(references)
    if len(sources) != len(references):
        raise ValueError(f"evaluate: {len(sources)} sources but {len(references)} references")
    if not sources:
        raise ValueError("evaluate: no sentence pairs to evaluate")
    for name, value in (("beam_size", beam_size), ("length_penalty", length_penalty), ("batch_size", batch_size)):
        Translator.check(name, value)  # a bad option is an error, not a reason to skip every pair
    cleans = bool(getattr(translator.tgt_tokenizer, "expects_cleaned_text", True))  # not a MarianMT model's
    refs = [clean_sentence(r, tgt_lang) if tgt_lang and cleans else r.strip() for r in references]
    failed: Dict[int, str] = {}
    hyps = _translate_each(
        translator, sources, failed, beam_size=beam_size, length_penalty=length_penalty, batch_size=batch_size
    )
    loss, accuracy, scored = _loss_of_each(translator, sources, refs, failed, batch_size)
    kept = [i for i in range(len(sources)) if i not in failed]
    if not kept:
        first = min(failed)
        raise ValueError(f"evaluate: no pair can be scored; pair {first + 1}: {failed[first]}")
    kept_hyps = [cast(str, hyps[i]) for i in kept]
    kept_refs = [refs[i] for i in kept]
    bleu = BLEU(tokenize=bleu_tokenizer(tgt_lang))
    chrf = CHRF()
    bleu_score = bleu.corpus_score(kept_hyps, [kept_refs])
    chrf_score = chrf.corpus_score(kept_hyps, [kept_refs])
    multi_hyps, multi_refs = _group_references([sources[i] for i in kept], kept_hyps, kept_refs)
    # sacrebleu takes None for a source with fewer references than the others
    streams = cast(List[Sequence[str]], multi_refs)
    multi_bleu = BLEU(tokenize=bleu_tokenizer(tgt_lang)).corpus_score(multi_hyps, streams)
    multi_chrf = CHRF().corpus_score(multi_hyps, streams)
    return EvaluationResult(
        bleu=float(bleu_score.score),
        chrf=float(chrf_score.score),
        loss=loss,
        accuracy=accuracy,
        sentences=len(kept),
        scored_pairs=scored,
        hypotheses=[h if h is not None and i not in failed else "" for i, h in enumerate(hyps)],
        references=refs,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        sources=len(multi_hyps),
        multi_bleu=float(multi_bleu.score),
        multi_chrf=float(multi_chrf.score),
        skipped=sorted(failed.items()),
    )


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _each_or_alone(indices: Sequence[int], size: int, failed: Dict[int, str], work: Any) -> None:
    """``work(chunk)`` for ``indices`` ``size`` at a time; a chunk refused (``ValueError``,
    ``MemoryError``) is done again one index at a time, so that one pair fails alone: its reason
    goes into ``failed``."""
    for start in range(0, len(indices), size):
        chunk = list(indices[start : start + size])
        try:
            work(chunk)
            continue
        except (ValueError, MemoryError) as exc:
            if len(chunk) == 1:
                failed[chunk[0]] = _one_line(exc)
                continue
        for i in chunk:
            try:
                work([i])
            except (ValueError, MemoryError) as exc:
                failed[i] = _one_line(exc)


def _translate_each(
    translator: Translator, sources: List[str], failed: Dict[int, str], **options: Any
) -> List[Optional[str]]:
    """The translation of each source (None for one that failed, with its reason in ``failed``)."""
    hyps: List[Optional[str]] = [None] * len(sources)

    def translate(chunk: List[int]) -> None:
        texts = translator.translate_batch([sources[i] for i in chunk], **options)
        for i, text in zip(chunk, texts):
            hyps[i] = text

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LongInputWarning)
        _each_or_alone(range(len(sources)), int(options["batch_size"]), failed, translate)
    return hyps


def _weighted_losses(
    translator: Translator,
    sources: List[str],
    refs: List[str],
    rows: List[int],
    failed: Dict[int, str],
    batch_size: int,
) -> Tuple[float, float, int, List[int]]:
    """``(loss x tokens, accuracy x tokens, tokens, rows scored)``: the teacher-forced loss and
    accuracy of the pairs ``rows``, summed over their tokens (a pair that fails is added to
    ``failed`` and left out)."""
    sums = [0.0, 0.0, 0]  # loss x tokens, accuracy x tokens, tokens
    scored: List[int] = []

    def score(chunk: List[int]) -> None:
        enc = encode_pairs(
            [translator.clean(sources[i]) for i in chunk],
            [refs[i] for i in chunk],
            translator.src_tokenizer,
            translator.tgt_tokenizer,
            None,
        )
        loss, accuracy, tokens = evaluate_loss(translator.model, enc, batch_size)
        sums[0] += loss * tokens
        sums[1] += accuracy * tokens
        sums[2] += tokens
        scored.extend(chunk)

    _each_or_alone(rows, batch_size, failed, score)
    return sums[0], sums[1], int(sums[2]), scored


def _loss_of_each(
    translator: Translator, sources: List[str], refs: List[str], failed: Dict[int, str], batch_size: int
) -> Tuple[float, float, int]:
    """``(loss, accuracy, pairs)``: the teacher-forced loss and accuracy, token-weighted, of the
    pairs not in ``failed`` (one that fails is added to it)."""
    rows = [i for i in range(len(sources)) if i not in failed]
    loss, accuracy, tokens, scored = _weighted_losses(translator, sources, refs, rows, failed, batch_size)
    if not tokens:
        return 0.0, 0.0, len(scored)
    return loss / tokens, accuracy / tokens, len(scored)


def order_losses(
    translator: Translator, firsts: Sequence[str], seconds: Sequence[str], limit: int = 64, batch_size: int = 64
) -> Tuple[float, float]:
    """The model's teacher-forced loss on up to ``limit`` pairs spread over the lists, read both
    ways: ``(loss of firsts -> seconds, loss of seconds -> firsts)``, each side cleaned as the
    side it stands for. A model scores its own direction far better than the reverse (its source
    vocabulary and its decoder know one language each), so a clearly lower second loss says that
    the two columns are the other way round."""
    firsts, seconds = list(firsts), list(seconds)
    if len(firsts) != len(seconds) or not firsts:
        raise ValueError(f"order_losses: expected two non-empty parallel lists, got {len(firsts)} and {len(seconds)}")
    limit = integer("order_losses", "limit", limit, 1)
    rows = np.unique(np.linspace(0, len(firsts) - 1, min(limit, len(firsts))).round().astype(np.int64))
    a, b = [firsts[i] for i in rows], [seconds[i] for i in rows]
    tgt = translator.tgt_lang

    def loss(src: List[str], ref: List[str]) -> float:
        refs = [clean_sentence(r, tgt) if tgt else r.strip() for r in ref]
        # a pair the model cannot score (a source too long for the memory) is left out here too;
        # evaluate names it
        total, _, tokens, _ = _weighted_losses(translator, src, refs, list(range(len(src))), {}, batch_size)
        return total / tokens if tokens else math.inf

    return loss(a, b), loss(b, a)


def _group_references(
    sources: Sequence[str], hyps: Sequence[str], refs: Sequence[str]
) -> Tuple[List[str], List[List[Optional[str]]]]:
    """One hypothesis per distinct source (its first) and the reference streams sacrebleu takes
    for a variable number of references: stream k holds each source's k-th reference or None.
    Sources are "the same" as the leak-free split sees it (case and spacing ignored)."""
    order: Dict[str, int] = {}
    grouped: List[List[str]] = []
    first_hyp: List[str] = []
    for src, hyp, ref in zip(sources, hyps, refs):
        key = sentence_key(src)
        if key not in order:
            order[key] = len(grouped)
            grouped.append([])
            first_hyp.append(hyp)
        grouped[order[key]].append(ref)
    most = max(len(g) for g in grouped)
    streams = [[g[k] if k < len(g) else None for g in grouped] for k in range(most)]
    return first_hyp, streams


def evaluate_loss(model: Any, encoded: EncodedPairs, batch_size: int = 64) -> Tuple[float, float, int]:
    """Masked loss and accuracy of ``model`` over all pairs of ``encoded`` (inference mode).

    Both are token-weighted over the batches. Returns ``(loss, accuracy, target_tokens)``.
    """
    loss_sum = 0.0
    correct = 0.0
    tokens = 0
    for batch in batches(encoded, batch_size, shuffle=False):
        loss, acc = model.evaluate(batch.src, batch.tgt_in, batch.tgt_out)
        n = model.last_token_count
        loss_sum += loss * n
        correct += acc * n
        tokens += n
    if tokens == 0:
        return 0.0, 0.0, 0
    return loss_sum / tokens, correct / tokens, tokens


def bleu_of_encoded(
    model: Any,
    encoded: EncodedPairs,
    tgt_tokenizer: Any,
    limit: int = 0,
    batch_size: int = 64,
    tgt_lang: Optional[str] = None,
) -> float:
    """Greedy corpus BLEU (sacrebleu, tokenised for ``tgt_lang``: :func:`bleu_tokenizer`) of
    ``model`` on ``limit`` pairs of ``encoded`` spread evenly over it (all with 0): hypotheses and
    references decoded with ``tgt_tokenizer``.
    Evenly spread, not the first ones: the Tatoeba file is sorted by length, so the first pairs
    would be the shortest and their BLEU would flatter the model."""
    limit = integer("bleu_of_encoded", "limit", limit, 0)
    batch_size = integer("bleu_of_encoded", "batch_size", batch_size, 1)
    n = len(encoded) if not limit else min(int(limit), len(encoded))
    chosen = np.unique(np.linspace(0, len(encoded) - 1, n).round().astype(np.int64)) if n else np.zeros(0, np.int64)
    hyps: List[str] = []
    refs: List[str] = []
    for start in range(0, len(chosen), batch_size):
        rows = chosen[start : start + batch_size]
        sources = [encoded.src[r, : encoded.src_lengths[r]].tolist() for r in rows]
        found = decode_rows(model, sources, tgt_tokenizer.start_id, tgt_tokenizer.end_id, DecodeOptions())
        hyps.extend(tgt_tokenizer.decode(h[0].ids) for h in found)
        refs.extend(tgt_tokenizer.decode(encoded.tgt[r, : encoded.tgt_lengths[r]]) for r in rows)
    return float(BLEU(tokenize=bleu_tokenizer(tgt_lang)).corpus_score(hyps, [refs]).score)
