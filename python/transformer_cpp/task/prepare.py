"""A translation run's data, from a file to encoded parts: the pairs read as the run's
:class:`~transformer_cpp.data.DataRecord` says (:func:`load_pairs`), split by source sentence with
a digest per part (:func:`load_split`, :func:`split_sentences`, :func:`check_same_split`), the
subword vocabularies (:func:`build_tokenizers`), the length limit (:func:`choose_max_length`) and
the encoded parts (:func:`encode_split`). A line far longer than any limit is known by its words
and never tokenized."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..data import (
    DATA_ENV_VAR,
    DEFAULT_TATOEBA_PAIR,
    LENGTH_COVERAGE,
    SPLIT_BY_SOURCE,
    DataRecord,
    EncodedPairs,
    LineCountMismatch,
    SentencePairs,
    UndecodableLineError,
    encode_pairs,
    length_limit,
    length_percentiles,
    read_pairs,
    split_by_source,
    tatoeba_pair_for,
    token_lengths,
    train_val_test_split,
)
from ..text import language_name
from ..tokenizer import SubwordTokenizer
from .reporting import Report, TaskError, say

__all__ = [
    "AUTOMATIC_LENGTH_CAP",
    "OUTLIER_FACTOR",
    "Split",
    "build_tokenizers",
    "check_same_split",
    "choose_max_length",
    "encode_split",
    "encode_train",
    "encode_valid",
    "load_pairs",
    "load_split",
    "split_digest",
    "split_sentences",
]

#: The automatic length limit is at most this many tokens, and at most OUTLIER_FACTOR times the
#: length that covers 99% of the training pairs: a few pairs far longer than the rest (a stray
#: paragraph, lines run together) are left out of training, named, instead of setting the
#: length of the model's batches. ``--max-length`` sets any limit in its range.
AUTOMATIC_LENGTH_CAP = 1024
OUTLIER_FACTOR = 4


def _line_numbers(numbers: Sequence[int], shown: int = 20) -> str:
    """``"3, 9 and 17"``, or the first ``shown`` and how many more."""
    head = [str(n) for n in numbers[:shown]]
    if len(numbers) > shown:
        return ", ".join(head) + f" and {len(numbers) - shown:,} more"
    return head[0] if len(head) == 1 else ", ".join(head[:-1]) + " and " + head[-1]


def load_pairs(
    path: Optional[str], record: DataRecord, report: Report = say, *, clean: bool = False, **kwargs: Any
) -> SentencePairs:
    """:func:`~transformer_cpp.data.read_pairs` as ``record`` says: its languages and columns,
    encoding and policy for undecodable lines (``kwargs``: its sampling arguments; ``clean``: clean
    each sentence in its language as it is read). Without ``path`` (and without
    ``$TRANSFORMER_CPP_DATA``) the Tatoeba pair of the two languages. Reports where the pairs come
    from, which column is which language, how many lines it kept and, by reason, how many it left
    out."""
    pair = tatoeba_pair_for(record.src_lang, record.tgt_lang)
    if path is None and not os.environ.get(DATA_ENV_VAR) and pair is None:
        raise TaskError(
            f"no data given for {record.direction}, and no Tatoeba pair holds both languages (each pairs "
            "English with another language): pass --data FILE (a tab-separated file, two aligned files "
            f"'SOURCE,TARGET', or tatoeba:LLL-eng), or set {DATA_ENV_VAR}"
        )
    target_path = record.target_path
    if path is not None and target_path is not None and "," not in path and not Path(path).is_dir():
        path = f"{path},{target_path}"  # the run's two aligned files
    try:
        pairs = read_pairs(
            path,
            columns=record.read_columns(),
            languages=(record.src_lang, record.tgt_lang),
            clean=clean,
            pair=pair or DEFAULT_TATOEBA_PAIR,
            encoding=record.encoding,
            errors=record.decode_errors,
            attributions=False,
            **kwargs,
        )
    except UndecodableLineError as exc:
        raise TaskError(
            f"'{exc.path}' line {exc.line} is not valid {exc.encoding}: {exc.detail}. If the file uses "
            f"another encoding, name it with --encoding (e.g. --encoding latin-1); --decode-errors skip "
            f"leaves such lines out instead"
        ) from None
    except LineCountMismatch as exc:
        raise TaskError(str(exc).split(": ", 1)[1]) from None
    stats = pairs.stats
    where = f"{pairs.source},{pairs.target_file}" if pairs.target_file else str(pairs.source)
    message = f"loaded {len(pairs):,} sentence pairs from {where}"
    if stats.skipped:
        message += f"; left out {stats.skipped:,} of {stats.read:,} lines ({stats.describe_skipped()})"
    report(message)
    src, tgt = language_name(record.src_lang), language_name(record.tgt_lang)
    if pairs.columns is not None:
        report(
            f"source: column {pairs.columns[0]}, {src} ({record.src_lang}); target: column {pairs.columns[1]}, {tgt} ({record.tgt_lang})"
        )
    else:
        report(
            f"source: {pairs.source}, {src} ({record.src_lang}); target: {pairs.target_file}, {tgt} ({record.tgt_lang})"
        )
    if pairs.sha256:
        report(
            f"Tatoeba archive sha256 {pairs.sha256}; licence CC-BY 2.0 FR, authors in {pairs.about or 'the archive'}"
        )
    if stats.undecodable:
        report(
            f"{pairs.source}: not valid {stats.encoding}, left out: line{'s' if stats.undecodable > 1 else ''} "
            f"{_line_numbers(stats.undecodable_lines)}"
        )
    return pairs


@dataclass
class Split:
    """A run's cleaned sentence pairs in three parts, each ``(sources, targets)``; ``lines`` holds
    each part's line numbers in the data file, when known (messages name a pair by its line)."""

    train: Tuple[List[str], List[str]]
    valid: Tuple[List[str], List[str]]
    test: Tuple[List[str], List[str]]
    lines: Dict[str, List[int]] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Tuple[List[str], List[str]]:
        if name not in ("train", "valid", "test"):
            raise KeyError(name)
        part: Tuple[List[str], List[str]] = getattr(self, name)
        return part


def split_digest(sources: Sequence[str], targets: Sequence[str]) -> str:
    """A short hash of a split's pairs, in order: a run records one per split, so that a split
    rebuilt later from a changed data file is not taken for the one the run held out."""
    h = hashlib.sha256()
    for src, tgt in zip(sources, targets):
        h.update(src.encode("utf-8", "surrogatepass") + b"\t" + tgt.encode("utf-8", "surrogatepass") + b"\n")
    return h.hexdigest()[:16]


def split_sentences(
    sources: Sequence[str],
    targets: Sequence[str],
    record: DataRecord,
    report: Report = say,
    lines: Optional[Sequence[int]] = None,
) -> Tuple[Split, DataRecord]:
    """Split cleaned pairs as ``record`` says (by source sentence, or pair by pair for runs that
    recorded that); returns the split and the record with each part's digest. ``lines``: the
    pairs' line numbers in the data file, kept with each part."""
    if record.split == SPLIT_BY_SOURCE:
        by_source = split_by_source(
            sources, targets, record.valid_fraction, record.test_fraction, seed=record.split_seed
        )
        parts = by_source.parts()
        if by_source.dropped:
            report(
                f"left out {by_source.dropped:,} training or validation pairs whose target sentence is a "
                "reference of a later split (so no reference is ever a training target)"
            )
    else:
        parts = train_val_test_split(len(sources), record.valid_fraction, record.test_fraction, seed=record.split_seed)
    chosen = [([sources[i] for i in idx], [targets[i] for i in idx]) for idx in parts]
    split = Split(train=chosen[0], valid=chosen[1], test=chosen[2])
    if lines is not None and len(lines) == len(sources):
        split.lines = {name: [lines[i] for i in idx] for name, idx in zip(("train", "valid", "test"), parts)}
    digests = {name: split_digest(*split[name]) for name in ("train", "valid", "test")}
    return split, record.replace(split_digests=digests)


def load_split(path: Optional[str], record: DataRecord, report: Report = say) -> Tuple[Split, DataRecord]:
    """Load, clean (each side in its language, as it is read) and split the pairs as ``record``
    says; returns the split and the record with the file's absolute path, the columns read, the
    number of pairs loaded and each part's digest."""
    pairs = load_pairs(
        path,
        record,
        report,
        clean=record.clean,
        num_samples=record.num_samples or None,
        sampling=record.sampling,
        seed=record.split_seed,
    )
    loaded = len(pairs)
    sources, targets = pairs.sources, pairs.targets
    lines = pairs.line_numbers or None
    pairs.sources, pairs.targets = [], []  # the split's lists are the only ones kept
    split, record = split_sentences(sources, targets, record, report, lines)
    del sources, targets
    resolved = str(Path(pairs.source).resolve()) if pairs.source else None
    columns = pairs.columns or (None, None)
    return split, record.replace(
        path=resolved,
        target_path=str(Path(pairs.target_file).resolve()) if pairs.target_file else None,
        source_column=columns[0],
        target_column=columns[1],
        tatoeba_pair=pairs.source.parent.name if pairs.sha256 and pairs.source else None,
        archive_sha256=pairs.sha256,
        pairs_loaded=loaded,
    )


def check_same_split(name: str, recorded: DataRecord, rebuilt: DataRecord) -> None:
    """Refuse a ``name`` split rebuilt from a data file that changed since training: scoring it
    would report a test score on other pairs (perhaps training ones) without a word."""
    then = recorded.split_digests.get(name)
    now = rebuilt.split_digests[name]
    before, after = recorded.pairs_loaded, rebuilt.pairs_loaded
    if (then is not None and then != now) or (then is None and before is not None and before != after):
        counts = (
            f" ({after:,} pairs loaded now, {before:,} when the run was trained)"
            if before != after and isinstance(before, int) and isinstance(after, int)
            else ""
        )
        raise TaskError(
            f"the {name} split rebuilt from '{rebuilt.path}' differs from the one the run held out: "
            f"the data file changed since training{counts}, so its pairs are not the held-out ones; "
            "pass the original file with --data, or score a file of pairs with --pairs"
        )


def _fewest_tokens(sentence: str, bound: int) -> int:
    """How many tokens this program's tokenizers make of ``sentence`` at least, start and end
    included, known without tokenizing it (so that an enormous line costs no tokenizing): one per
    word between ASCII spaces, tabs or line breaks (a piece of the byte-level pre-tokenizer never
    spans one), and two. Only counted for a sentence of more than ``bound`` characters (a shorter
    one has at most ``bound`` words); 0 for it."""
    if len(sentence) <= bound:
        return 0
    return len(sentence.encode("utf-8", "surrogatepass").split()) + 2


def _surely_longer(sources: Sequence[str], targets: Sequence[str], bound: int) -> List[int]:
    """The positions of the pairs that have more than ``bound`` tokens on one side for certain
    (:func:`_fewest_tokens`)."""
    return [
        i
        for i, (src, tgt) in enumerate(zip(sources, targets))
        if max(_fewest_tokens(src, bound), _fewest_tokens(tgt, bound)) > bound
    ]


def encode_split(
    split: Split, name: str, src_tok: Any, tgt_tok: Any, max_length: Optional[int]
) -> Optional[EncodedPairs]:
    """The ``name`` part encoded (pairs longer than ``max_length`` left out, those with more words
    than ``max_length`` before they are tokenized), or None if it is empty."""
    src, tgt = split[name]
    if not src:
        return None
    long = set(_surely_longer(src, tgt, max_length)) if max_length else set()
    kept = [i for i in range(len(src)) if i not in long]
    try:
        if not kept:
            raise ValueError(f"all {len(src)} pairs are longer than max_length={max_length} tokens")
        encoded = encode_pairs([src[i] for i in kept], [tgt[i] for i in kept], src_tok, tgt_tok, max_length)
    except ValueError as exc:
        hint = "; raise --max-length (0 = automatic)" if "longer than max_length" in str(exc) else ""
        raise TaskError(f"the {name} split has no usable pair: {exc}{hint}") from None
    if not long:
        return encoded
    return dataclasses.replace(
        encoded, indices=np.asarray(kept, dtype=np.int64)[encoded.indices], removed=encoded.removed + len(long)
    )


def encode_train(split: Split, src_tok: Any, tgt_tok: Any, max_length: Optional[int]) -> EncodedPairs:
    """The encoded training pairs; :class:`TaskError` when the split has none."""
    train = encode_split(split, "train", src_tok, tgt_tok, max_length)
    if train is None:
        raise TaskError("no training pairs: lower --valid-fraction / --test-fraction or use more --num-samples")
    return train


def encode_valid(
    split: Split, src_tok: Any, tgt_tok: Any, max_length: Optional[int], report: Report
) -> Optional[EncodedPairs]:
    """The encoded validation pairs, or None (reported) when every one is longer than ``max_length``."""
    try:
        return encode_split(split, "valid", src_tok, tgt_tok, max_length)
    except TaskError as exc:
        report(f"{exc}: training without validation")
        return None


def choose_max_length(split: Split, src_tok: Any, tgt_tok: Any, option: int, report: Report = say) -> int:
    """The training length limit: ``option`` if > 0, else the length that covers
    :data:`LENGTH_COVERAGE` percent of the training pairs, capped (:data:`AUTOMATIC_LENGTH_CAP`,
    :data:`OUTLIER_FACTOR`: the pairs beyond the cap are reported by their line in the data
    file); reports the percentiles."""
    src, tgt = split.train
    # a pair with more words than any limit the run may take is not tokenized: its length in
    # tokens is at least its words (an enormous line costs no tokenizing)
    bound = int(option) if option else AUTOMATIC_LENGTH_CAP
    long = _surely_longer(src, tgt, bound)
    lengths: Any  # int64 array: one length per training pair
    if long:
        lengths = np.zeros(len(src), dtype=np.int64)
        for i in long:
            lengths[i] = max(_fewest_tokens(src[i], bound), _fewest_tokens(tgt[i], bound))
        skip = set(long)
        kept = [i for i in range(len(src)) if i not in skip]
        lengths[kept] = np.maximum(  # a chunk at a time
            token_lengths([src[i] for i in kept], src_tok), token_lengths([tgt[i] for i in kept], tgt_tok)
        )
    else:
        lengths = np.maximum(token_lengths(src, src_tok), token_lengths(tgt, tgt_tok))  # a chunk at a time
    pct = length_percentiles(lengths)
    report(
        "training pair lengths in tokens (longer side, start and end included): "
        + ", ".join(f"{p:g}% <= {v}" for p, v in pct.items())
    )
    if option:
        share = sum(n <= option for n in lengths) / len(lengths) * 100
        report(f"max length {option} tokens (--max-length) keeps {share:.2f}% of the training pairs")
        return int(option)
    limit = int(length_limit(lengths, LENGTH_COVERAGE))
    ceiling = min(AUTOMATIC_LENGTH_CAP, OUTLIER_FACTOR * length_limit(lengths, 99.0))
    if limit <= ceiling:
        report(f"max length {limit} tokens: covers {LENGTH_COVERAGE}% of the training pairs")
        return limit
    covered = limit
    limit = int(max((n for n in lengths if n <= ceiling), default=ceiling))  # the longest pair within it
    outliers = [i for i, n in enumerate(lengths) if n > limit]
    counted_from_words = set(long)
    lines = split.lines.get("train")
    named = [
        (f"line {lines[i]}" if lines else f"training pair {i + 1}")
        + (f" (at least {lengths[i]:,} tokens)" if i in counted_from_words else f" ({lengths[i]:,} tokens)")
        for i in outliers[:5]
    ]
    more = f" and {len(outliers) - 5:,} more" if len(outliers) > 5 else ""
    report(
        f"max length {limit} tokens, not the {covered:,} that would cover {LENGTH_COVERAGE}% of the training pairs: "
        f"{len(outliers):,} pair(s) far longer than the rest (over {ceiling} tokens: {OUTLIER_FACTOR}x the length "
        f"of 99% of them, {AUTOMATIC_LENGTH_CAP} at most) are left out of training: data file "
        f"{', '.join(named)}{more}; --max-length sets another limit"
    )
    return limit


def build_tokenizers(split: Split, record: DataRecord, report: Report = say) -> Tuple[Any, Any]:
    """The subword tokenizers of the training part: one per language, or one shared (``joint_vocab``);
    pairs with more words than the length limit can be (``max_length_option``, else
    :data:`AUTOMATIC_LENGTH_CAP`) are left out of the corpus, as they are of training."""
    vocab = int(record.vocab_size)
    src, tgt = split.train
    # pairs too long for any limit the run may take are never trained on: not learnt from either
    long = set(_surely_longer(src, tgt, int(record.max_length_option or 0) or AUTOMATIC_LENGTH_CAP))
    if long and len(long) < len(src):
        src = [s for i, s in enumerate(src) if i not in long]
        tgt = [t for i, t in enumerate(tgt) if i not in long]
    if record.joint_vocab:
        tok = SubwordTokenizer.build_from_corpus(list(src) + list(tgt), vocab)
        report(f"joint subword vocabulary: {tok.vocab_size:,} tokens (asked for {vocab:,})")
        return tok, tok
    src_tok = SubwordTokenizer.build_from_corpus(src, vocab)
    tgt_tok = SubwordTokenizer.build_from_corpus(tgt, vocab)
    report(
        f"subword vocabularies: {record.src_lang} {src_tok.vocab_size:,} tokens, "
        f"{record.tgt_lang} {tgt_tok.vocab_size:,} tokens (asked for {vocab:,} each)"
    )
    return src_tok, tgt_tok
