"""Whether a new run's pairs read the other way round: before training, a sample of each side is
given to a language detector (the ``lingua-language-detector`` package, in the ``serve`` extra,
when it is installed) that chooses between the run's two languages. When most of the sources read
as the target language and most of the targets as the source language, ``train`` refuses the
columns it chose itself (an hour of training in the wrong direction costs more than a command
line) and names ``--columns``; columns given with ``--columns`` are trained as given, with a
warning."""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

from ..data import DataRecord
from ..text import language_name

__all__ = ["SWAPPED_SHARE", "check_column_order", "detected_shares"]

#: Sentences of each side the detector reads.
SAMPLE = 200
#: The columns read the other way round when at most this share of each side is detected in its
#: own language (and the rest in the other).
SWAPPED_SHARE = 0.2


def _detector(languages: Tuple[str, str]) -> Any:
    """lingua's detector restricted to the two languages, or None (not installed, or a language it
    does not know)."""
    try:
        from lingua import IsoCode639_1, Language, LanguageDetectorBuilder
    except ImportError:
        return None
    try:
        chosen = [Language.from_iso_code_639_1(IsoCode639_1.from_str(code)) for code in languages]
    except (ValueError, AttributeError, KeyError):
        return None
    if len(set(chosen)) != 2:
        return None
    return LanguageDetectorBuilder.from_languages(*chosen).with_low_accuracy_mode().build()


def _sample(texts: Sequence[str]) -> List[str]:
    step = max(1, len(texts) // SAMPLE)
    return list(texts[::step][:SAMPLE])


def detected_shares(
    sources: Sequence[str], targets: Sequence[str], src: str, tgt: str
) -> Optional[Tuple[float, float]]:
    """The share of a sample of ``sources`` detected as ``src`` and of ``targets`` as ``tgt``
    (each among the two languages; sentences the detector leaves undecided count for neither), or
    None when no detector can tell the two apart."""
    detector = _detector((src, tgt))
    if detector is None or not sources:
        return None

    def share(texts: Sequence[str], code: str) -> float:
        found = [detector.detect_language_of(t) for t in _sample(texts)]
        decided = [f.iso_code_639_1.name.lower() for f in found if f is not None]
        return sum(c == code for c in decided) / len(decided) if decided else 1.0

    return share(sources, src), share(targets, tgt)


def check_column_order(
    sources: Sequence[str], targets: Sequence[str], record: DataRecord, report: Callable[[str], None]
) -> Optional[str]:
    """The refusal (one line, for the caller to raise) when the pairs of ``record`` look the other
    way round and their columns were chosen by the program, else ``None``: columns given with
    ``--columns`` that look the other way round are reported as a warning."""
    shares = detected_shares(sources, targets, record.src_lang, record.tgt_lang)
    if shares is None or max(shares) > SWAPPED_SHARE:
        return None
    src, tgt = language_name(record.src_lang), language_name(record.tgt_lang)
    columns = (record.source_column, record.target_column)
    two_files = columns[0] is None
    sides = ("the source file", "the target file") if two_files else (f"column {columns[0]}", f"column {columns[1]}")
    problem = (
        f"the pairs of {record.path or 'the data'} look the other way round for {record.direction}: "
        f"{1 - shares[0]:.0%} of a sample of {sides[0]} reads as {tgt} and {1 - shares[1]:.0%} of {sides[1]} as {src}"
    )
    if record.columns is not None:
        report(f"warning: {problem}; training as --columns says")
        return None
    fix = "give the two files the other way round" if two_files else f"pass --columns {columns[1]},{columns[0]}"
    keep = "" if two_files else f", or --columns {columns[0]},{columns[1]} to train on them as read"
    return f"{problem}; {fix} (source then target){keep}"
