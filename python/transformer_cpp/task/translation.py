"""The translation task: from a data file and a request (a preset and the settings given) to a
:class:`~transformer_cpp.training.Trainer` ready to fit, new or resumed.

Every step is a function of its own, so the command line, the notebooks, data-parallel runs and
the tools share them: read and split the data (:func:`load_split`, recorded in a
:class:`~transformer_cpp.data.DataRecord`), build the vocabularies (:func:`build_tokenizers`),
choose the length limit (:func:`choose_max_length`), encode (:func:`encode_split`), resolve
``precision="auto"`` and model size auto, and build the trainer (:func:`new_trainer`,
:func:`resume_trainer`). Progress goes through a ``report`` callback (one line each; pass
``quiet`` to say nothing). A problem the user can fix is a :class:`TaskError`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..checkpoint import TRAINER_STATE_FILE, load_checkpoint, read_checkpoint_config
from ..config import MODEL_FIELDS, defaults, settings_of
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
from ..model import Transformer
from ..precision import choose_precision, choose_size
from ..text import language_name
from ..tokenizer import SubwordTokenizer
from ..training import TrainConfig, Trainer, world_size_problem
from ..training.wording import plural
from .column_order import check_column_order
from .request_checks import check_training_settings
from .presets import AUTO_PRECISION, DEFAULT_PRESET, SIZE_FIELDS, preset_config, preset_recipe

__all__ = [
    "AUTOMATIC_LENGTH_CAP",
    "CHANGEABLE_ON_RESUME",
    "LENGTH_COVERAGE",
    "OUTLIER_FACTOR",
    "SetupSteps",
    "Silent",
    "Split",
    "TaskError",
    "TrainRequest",
    "build_tokenizers",
    "check_resume_request",
    "check_same_split",
    "choose_max_length",
    "encode_split",
    "load_pairs",
    "load_split",
    "new_trainer",
    "quiet",
    "requested_settings",
    "resume_trainer",
    "say",
    "size_growth",
    "split_digest",
    "split_sentences",
]

#: The automatic length limit is at most this many tokens, and at most OUTLIER_FACTOR times the
#: length that covers 99% of the training pairs: a few pairs far longer than the rest (a stray
#: paragraph, lines run together) are left out of training, named, instead of setting the
#: length of the model's batches. ``--max-length`` sets any limit in its range.
AUTOMATIC_LENGTH_CAP = 1024
OUTLIER_FACTOR = 4
#: TrainConfig settings a resumed run may change (they do not alter what a step computes).
CHANGEABLE_ON_RESUME = ("epochs", "time_budget", "threads", "progress", "keep_checkpoints", "average_last", "patience")

Report = Callable[[str], None]


def say(message: str) -> None:
    """The default ``report``: one line on standard error."""
    print(message, file=sys.stderr, flush=True)


def quiet(message: str) -> None:
    """A ``report`` that says nothing."""


class TaskError(ValueError):
    """A problem the user can fix: the data, the settings asked for, the run directory."""


class Silent(Exception):
    """A setup step failed on another rank of a data-parallel run, and rank 0 says what."""


# ------------------------------------------------------------------------------------ data


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


def _encode_valid(
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


# ------------------------------------------------------------------------------------ request


@dataclass
class TrainRequest:
    """What a user asks ``train`` for: a preset and the settings given on top of it.

    ``architecture`` holds Transformer arguments (``d_model``, ``precision``, ...), ``training``
    TrainConfig fields (``epochs``, ``warmup``, ...), ``data`` DataRecord fields (``num_samples``,
    ``vocab_size``, ``max_length_option``, ...): only the ones given; the preset fills the rest.
    ``preset`` None means the default preset for a new run, and the run's own for a resumed one.
    """

    preset: Optional[str] = None
    data_path: Optional[str] = None
    architecture: Dict[str, Any] = field(default_factory=dict)
    training: Dict[str, Any] = field(default_factory=dict)
    data: Dict[str, Any] = field(default_factory=dict)
    threads: Optional[int] = None
    progress: bool = True
    adaptive_threads: bool = True


def requested_settings(
    request: TrainRequest, preset: Optional[str]
) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """(architecture, TrainConfig fields, DataRecord fields) that ``preset`` and the request ask
    for; without a preset only the settings given."""
    arch: Dict[str, Any] = {}
    train: Dict[str, Any] = {}
    data: Dict[str, Any] = {}
    if preset is not None:
        arch = preset_config(preset)
        recipe = preset_recipe(preset)
        train = recipe["train"]
        data = {("max_length_option" if k == "max_length" else k): v for k, v in recipe["data"].items()}
        arch.update(recipe.get("model", {}))
    arch.update(request.architecture)
    check_training_settings(request.training)
    train.update(request.training)
    data.update(request.data)
    return arch, train, data


def size_growth(request: TrainRequest) -> Optional[Dict[str, Any]]:
    """The preset's larger architecture and the epochs it needs (``{"arch": ..., "min_epochs":
    ...}``, the recipe's "grow"), or None: no such section, or the request set the size."""
    grow = preset_recipe(request.preset or DEFAULT_PRESET).get("grow")
    if not grow or any(name in SIZE_FIELDS for name in request.architecture):
        return None
    return dict(grow)


def check_resume_request(
    request: TrainRequest, model_cfg: Dict[str, Any], train_cfg: Dict[str, Any], record: DataRecord
) -> Dict[str, Any]:
    """A resumed run keeps its settings: what the request asks for (its preset and settings) must
    agree with the checkpoint, except the settings a resumed run may change; returns those changes."""
    arch, train, data_req = requested_settings(request, request.preset)
    arch.pop("max_length", None)  # a positional-table cache, not a setting of the run
    grow = size_growth(request) if request.preset is not None else None
    if grow is not None and all(model_cfg.get(k) == v for k, v in grow["arch"].items()):
        arch.update(grow["arch"])  # model size auto chose the larger model when the run started
    declared = {**settings_of(TrainConfig), **settings_of(DataRecord)}  # their options' names
    saved_data = record.to_dict()
    section_defaults = {"architecture": defaults(MODEL_FIELDS), "training": TrainConfig().to_dict(), "data": {}}
    conflicts = []
    for section, requested, saved in (
        ("architecture", arch, model_cfg),
        ("training", train, train_cfg),
        ("data", data_req, saved_data),
    ):
        for key, value in requested.items():
            if section == "training" and key in CHANGEABLE_ON_RESUME:
                continue
            if section == "architecture" and key == "precision" and value == AUTO_PRECISION:
                continue  # "auto" accepts what the run chose when it started
            # a checkpoint written before a setting existed had its default
            have = saved.get(key, section_defaults[section].get(key))
            if value != have:
                option = declared[key].option if key in declared else ()
                flag = option[0] if option else "--" + key.replace("_", "-")
                conflicts.append(f"{flag} {value} (the run has {have})")
    if conflicts:
        raise TaskError(
            "--resume continues the run in --out with its own settings, and these options differ "
            "from it: " + ", ".join(conflicts) + "; drop them, or start a new run with another --out"
        )
    # the changes are the options given: a preset's value is not a request to change the run
    return {k: v for k, v in request.training.items() if k in CHANGEABLE_ON_RESUME}


# ------------------------------------------------------------------------------------ data parallel


class SetupSteps:
    """The setup of a run as steps that every rank of a data-parallel run takes together: each
    rank does its part, then they agree, so that a failure anywhere stops every rank and rank 0
    says it in one line. With ``parallel`` None (one process) a step just runs."""

    _FAILURES = (TaskError, OSError, ValueError, RuntimeError, MemoryError, TypeError)

    def __init__(self, parallel: Any = None) -> None:
        self.parallel = parallel

    def run(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` on every rank; a failure on any rank stops all of them."""
        if self.parallel is None:
            return fn()
        result, error = None, None
        try:
            result = fn()
        except self._FAILURES as exc:
            error = exc
        line = self.parallel.agree(error, what)
        if line is not None:
            if self.parallel.is_root:
                raise TaskError(line)
            raise Silent()
        return result

    def on_root(self, what: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` on rank 0, its result sent to every rank."""
        if self.parallel is None:
            return fn()
        result, error = None, None
        if self.parallel.is_root:
            try:
                result = fn()
            except self._FAILURES as exc:
                error = " ".join(str(exc).split()) or type(exc).__name__
        error, result = self.parallel.bcast((error, result), what)
        if error is not None:
            if self.parallel.is_root:
                raise TaskError(error)
            raise Silent()
        return result


# ------------------------------------------------------------------------------------ trainers


def _concrete_precision(arch: Dict[str, Any]) -> Dict[str, Any]:
    """``arch`` with precision "auto" (resolved later, when the vocabularies are known) read as
    float32, for checks that build a model before that."""
    return dict(arch, precision="float32") if arch.get("precision") == AUTO_PRECISION else arch


def _step_tokens(config: TrainConfig) -> int:
    """Target tokens of one training batch, for the steps precision.py times: the token budget,
    else the batch size times a typical sentence."""
    return int(config.max_tokens or 0) or int(config.batch_size) * 12


def _resolve_auto_precision(
    arch: Dict[str, Any], config: TrainConfig, src_vocab: int, tgt_vocab: int, parallel: Any, report: Report
) -> str:
    """Precision "auto": time a few steps of this model in float32 and bf16 and keep the faster
    (bf16 only from 1.10x, see precision.py); under MPI rank 0 measures and every rank takes its
    choice (the ranks must run the same products)."""
    budget = _step_tokens(config)
    if parallel is None or parallel.rank == 0:
        chosen, why = choose_precision(arch, src_vocab, tgt_vocab, budget, seed=config.seed)
    else:
        chosen, why = "", ""
    if parallel is not None:
        chosen, why = parallel.bcast((chosen, why), "the precision rank 0 measured")
    report(why)
    return str(chosen)


def _resolve_auto_size(
    arch: Dict[str, Any],
    grow: Dict[str, Any],
    config: TrainConfig,
    train: EncodedPairs,
    src_vocab: int,
    tgt_vocab: int,
    parallel: Any,
    report: Report,
) -> Dict[str, Any]:
    """Model size auto: time a step of the preset's model and of its larger one (rank 0 under MPI,
    the ranks sharing an epoch) and keep the larger if it gets ``min_epochs`` in the time budget
    (precision.choose_size)."""
    budget = _step_tokens(config)
    ranks = 1 if parallel is None else int(parallel.size)
    tokens_per_epoch = float(np.sum(np.maximum(train.tgt_lengths - 1, 0))) / ranks
    if parallel is None or parallel.rank == 0:
        chosen, why = choose_size(
            arch,
            grow["arch"],
            float(grow["min_epochs"]),
            src_vocab,
            tgt_vocab,
            budget,
            tokens_per_epoch,
            float(config.time_budget) * 60.0,
            seed=config.seed,
        )
    else:
        chosen, why = {}, ""
    if parallel is not None:
        chosen, why = parallel.bcast((chosen, why), "the model size rank 0 measured")
    report(why)
    return dict(chosen)


def new_trainer(request: TrainRequest, out: Path, report: Report = say, steps: Optional[SetupSteps] = None) -> Trainer:
    """A trainer for a new run in ``out``: reads and splits the data, builds the vocabularies
    (rank 0, shared), chooses the length limit, resolves the automatic precision and size, and
    builds the model. Each step through ``steps`` (data-parallel runs); nothing is written yet."""
    if request.training.get("init_from") is not None:
        raise TaskError("new_trainer: a request with init_from starts from a run: build it with finetune_trainer")
    steps = steps if steps is not None else SetupSteps()
    preset = request.preset or DEFAULT_PRESET
    arch, config, record, split = steps.run("reading the data", lambda: _read_new_run(request, preset, report))
    # the vocabularies: built once (rank 0) and shared, so that every rank encodes alike
    src_tok, tgt_tok = steps.on_root(
        "building the subword vocabularies", lambda: build_tokenizers(split, record, report)
    )
    return steps.run(  # type: ignore[no-any-return]
        "building the model",
        lambda: _build_new_run(request, out, arch, config, record, split, src_tok, tgt_tok, steps.parallel, report),
    )


def _read_new_run(
    request: TrainRequest, preset: str, report: Report
) -> Tuple[Dict[str, Any], TrainConfig, DataRecord, Split]:
    arch, settings, data_req = requested_settings(request, preset)
    record = DataRecord(**data_req).check()
    settings.setdefault("epochs", 10)
    config = TrainConfig(
        threads=request.threads, progress=request.progress, adaptive_threads=request.adaptive_threads, **settings
    )
    # a batch size against the preset's token budget would be ignored, not applied (given together
    # with max_tokens, it sizes the validation batches)
    if "batch_size" in request.training and config.max_tokens and "max_tokens" not in request.training:
        raise TaskError(
            f"--batch-size {request.training['batch_size']} would be ignored: the {preset} preset cuts "
            f"batches by tokens (max_tokens {config.max_tokens}); add --max-tokens 0 to batch by "
            "sentences, or leave out --batch-size"
        )
    # a bad or oversized architecture fails now, before any work (the real vocabulary sizes
    # are checked again when the model is built)
    Transformer(4, 4, seed=config.seed, **_concrete_precision(arch))
    split, record = load_split(request.data_path, record, report)
    refused = check_column_order(*split.train, record, report)
    if refused is not None:
        raise TaskError(refused)
    return arch, config, record, split


def _build_new_run(
    request: TrainRequest,
    out: Path,
    arch: Dict[str, Any],
    config: TrainConfig,
    record: DataRecord,
    split: Split,
    src_tok: Any,
    tgt_tok: Any,
    parallel: Any,
    report: Report,
) -> Trainer:
    max_length = choose_max_length(split, src_tok, tgt_tok, int(record.max_length_option or 0), report)
    record = record.replace(max_length=max_length)
    arch["max_length"] = max(int(arch.get("max_length", 0)), max_length)  # the positional table's first size
    train = encode_split(split, "train", src_tok, tgt_tok, max_length)
    if train is None:
        raise TaskError("no training pairs: lower --valid-fraction / --test-fraction or use more --num-samples")
    valid = _encode_valid(split, src_tok, tgt_tok, max_length, report)
    valid_note = f" ({plural(valid.removed, 'longer one')} left out)" if valid is not None and valid.removed else ""
    report(
        f"pairs of at most {max_length} tokens: {len(train):,} train ({plural(train.removed, 'longer one')} left out), "
        f"{len(valid) if valid is not None else 0:,} validation{valid_note}, {len(split.test[0]):,} test "
        f"(held out; split by source sentence)"
    )
    if record.joint_vocab:
        arch.setdefault("share_embeddings", True)
    if arch.get("precision") == AUTO_PRECISION:
        arch["precision"] = _resolve_auto_precision(
            arch, config, src_tok.vocab_size, tgt_tok.vocab_size, parallel, report
        )
    grow = size_growth(request)
    if grow is not None and config.time_budget:
        arch = _resolve_auto_size(arch, grow, config, train, src_tok.vocab_size, tgt_tok.vocab_size, parallel, report)
    model = Transformer(src_tok.vocab_size, tgt_tok.vocab_size, seed=config.seed, **arch)
    report(f"model: {model!r}")
    trainer = Trainer(
        model,
        train,
        valid,
        config,
        src_tokenizer=src_tok,
        tgt_tokenizer=tgt_tok,
        checkpoint_dir=out,
        data_info=record.to_dict(),
        parallel=parallel,
    )
    batches = f"about {trainer.batches_per_epoch:,} batches"
    if config.time_budget:  # the epochs are then a cap, if asked for (the presets' 1000 means none)
        cap = f", at most {plural(config.epochs, 'epoch')}" if "epochs" in request.training else ""
        plan = f"for {plural(config.time_budget, 'minute')} (epochs of {batches}{cap})"
    else:
        plan = f"up to {plural(config.epochs, 'epoch')} of {batches}"
    report(f"training {plan}; checkpoints in {out}")
    return trainer


def resume_trainer(
    request: TrainRequest, out: Path, report: Report = say, steps: Optional[SetupSteps] = None
) -> Trainer:
    """The trainer of the run in ``out``, at its latest checkpoint, on the same data: the request
    may change only :data:`CHANGEABLE_ON_RESUME` settings (anything else that differs is a
    :class:`TaskError`), and the data file must give the same split."""
    steps = steps if steps is not None else SetupSteps()
    return steps.run(  # type: ignore[no-any-return]
        "resuming the run", lambda: _resume_here(request, out, steps.parallel, report)
    )


def _resume_here(request: TrainRequest, out: Path, parallel: Any, report: Report) -> Trainer:
    ckpt_dir, cfg = read_checkpoint_config(out)
    _check_world_size(ckpt_dir, parallel)
    if not cfg.get("data") or cfg.get("train_config") is None:
        raise TaskError(
            f"checkpoint '{ckpt_dir}' was not written by 'transformer-cpp train'; it cannot be resumed here"
        )
    record = DataRecord.from_dict(cfg["data"])
    changes = check_resume_request(request, cfg["model"], cfg["train_config"], record)
    split, _ = load_split(request.data_path if request.data_path is not None else record.path, record, report)
    ckpt = load_checkpoint(ckpt_dir, optimizer=True)
    train = encode_split(split, "train", ckpt.src_tokenizer, ckpt.tgt_tokenizer, record.max_length)
    valid = _encode_valid(split, ckpt.src_tokenizer, ckpt.tgt_tokenizer, record.max_length, report)
    if train is None:
        raise TaskError(f"the run's training split is empty: '{record.path}' holds no training pair")
    trainer = Trainer.from_checkpoint(
        ckpt,
        train,
        valid,
        checkpoint_dir=out,
        threads=request.threads,
        progress=None if request.progress else False,
        parallel=parallel,
        # every other setting a resumed run may change (epochs, time budget, pruning, averaging):
        # one that from_checkpoint did not take would fail here, not be ignored
        **{k: v for k, v in changes.items() if k not in ("threads", "progress")},
    )
    trainer.config.adaptive_threads = request.adaptive_threads  # how threads are used: not part of the run
    report(
        f"resuming {ckpt.path} at epoch {trainer.epoch} (+{trainer.batch_in_epoch} batches), "
        f"step {trainer.model.step}, {trainer.elapsed / 60:.1f} minutes trained"
    )
    return trainer


def _check_world_size(ckpt_dir: Path, parallel: Any) -> None:
    """Refuse at once (before reading the data) to resume with another number of processes; a
    damaged state file is left to the full load to report."""
    try:
        state = json.loads((ckpt_dir / TRAINER_STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(state, dict):
        problem = world_size_problem(state.get("world_size", 1), 1 if parallel is None else parallel.size)
        if problem is not None and "damaged" not in problem:
            raise TaskError(problem)
