"""The ``transformer-cpp`` command line (also ``python -m transformer_cpp``).

Subcommands::

    transformer-cpp train --preset tutorial --out runs/tutorial          # English -> Spanish
    transformer-cpp train --out runs/tutorial --resume                   # continue after Ctrl-C
    transformer-cpp translate --model runs/tutorial "you should pay for it."
    echo "we have no extra money." | transformer-cpp translate --model runs/tutorial
    transformer-cpp evaluate --model runs/tutorial                       # BLEU, chrF, loss, accuracy
    transformer-cpp figures --out figures                                # positional-encoding figures
    transformer-cpp export --model runs/tutorial --to ctranslate2 out    # or --to torch (see export.py)

The data file is ``--data``, else ``$TRANSFORMER_CPP_DATA``, else the download cache (see
:func:`transformer_cpp.data.load_tatoeba`); it is read as UTF-8 unless ``--encoding`` names
another encoding, and a line that is not valid in it stops ``train`` with the file and line
(``--decode-errors skip`` leaves such lines out, counted). Every line or pair left out (malformed,
undecodable, longer than the length limit, or a test reference) is counted in what ``train``
prints.

``translate`` reads standard input as bytes: a line that is not valid UTF-8 is reported on
standard error by its line number and gets an empty output line (so output lines stay aligned
with input lines); the others are translated, and the exit status is then 1.

Errors a user can cause (a missing file, a damaged checkpoint, a bad option, sizes that do not
fit in memory, a run that diverges) print one line and exit with status 1 (2 for a bad command
line). Options are checked before any work, against the ranges that ``--help`` shows and that
the Python API (``TrainConfig``, ``Translator``) checks too, with the same messages. Anything
else is a bug: it also prints one line, saying so; set ``TRANSFORMER_CPP_DEBUG=1`` to see the
traceback instead.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, NoReturn, Optional, Sequence, Tuple

from ._runtime import build_info, set_num_threads
from ._version import __version__
from .options import (
    MAX_LENGTH_RANGE,
    VOCAB_RANGE,
    add_decoding_options,
    config_options,
    count_option,
    encoding_option,
    fraction_option,
    limits_of,
    path_option,
    seconds_option,
    setting,
    threads_option,
)

PROG = "transformer-cpp"

# The architecture options (--d-model, --layers, ...) and the optimiser's (--warmup, --lr-scale, ...)
# are made from the core's configuration tables (transformer_cpp.config: each field that has an
# option); the training options below are TrainConfig's own settings, by their field names.
_TRAIN_OPTIONS = (
    "batch_size",
    "max_tokens",
    "decay",
    "log_every",
    "bucket_by_length",
    "drop_remainder",
    "keep_checkpoints",
    "val_bleu_sentences",
    "average_last",
)
# Training options a resumed run may change (they do not alter what a step computes).
_CHANGEABLE_ON_RESUME = ("epochs", "time_budget", "threads", "progress", "keep_checkpoints", "average_last")
# Data options: command-line flag -> key of the checkpoint's "data" section.
_DATA_OPTIONS = {
    "num_samples": "num_samples",
    "sampling": "sampling",
    "vocab_size": "vocab_size",
    "joint_vocab": "joint_vocab",
    "split_seed": "split_seed",
    "valid_fraction": "valid_fraction",
    "test_fraction": "test_fraction",
    "max_length": "max_length_option",
    "encoding": "encoding",
    "decode_errors": "decode_errors",
}
_DEFAULT_DATA = {
    "num_samples": 0,
    "sampling": "random",
    "vocab_size": 8000,
    "joint_vocab": False,
    "split_seed": 0,
    "valid_fraction": 0.02,
    "test_fraction": 0.03,
    "max_length_option": 0,
    "encoding": "utf-8",
    "decode_errors": "strict",
}
#: Share of the training pairs that the automatic length limit (--max-length 0) keeps.
LENGTH_COVERAGE = 99.9
DEFAULT_PRESET = "quick"
AUTO_PRECISION = "auto"  # --precision auto: measured when the run starts (precision.py)


class UserError(Exception):
    """An error the user can fix; printed as one line without a traceback."""


class _Silent(Exception):
    """Exit with status 1 without a message: in a data-parallel run, rank 0 says what went wrong."""


# In a data-parallel run (mpiexec), only rank 0 speaks: set for the other ranks by `train`. They
# still report an error of their own (not one that every rank raised alike), with their rank.
_QUIET = False
_RANK = ""


def _said_by_rank_0(exc: BaseException) -> bool:
    """Whether every rank raised ``exc`` alike, so that rank 0 reports it (data parallelism)."""
    from .distributed import PeerFailed, WeightsDrifted
    from .training import TrainingDiverged

    return isinstance(exc, (_Silent, UserError, PeerFailed, WeightsDrifted, TrainingDiverged, KeyboardInterrupt))


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) and exit with status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _say(message: str) -> None:
    if not _QUIET:
        print(message, file=sys.stderr, flush=True)


def _version_text() -> str:
    info = build_info()
    lines = [f"transformer-cpp {__version__}"]
    for key in ("compiler", "build_type", "flags", "openmp", "eigen_version", "simd", "hardware_threads"):
        if key in info:
            lines.append(f"  {key:<16} {info[key]}")
    return "\n".join(lines)


def _set_threads(threads: Optional[int]) -> None:
    if threads is not None:
        set_num_threads(threads)


# ------------------------------------------------------------------------------------ figures


def _cmd_figures(args: argparse.Namespace) -> int:
    from .plotting import save_positional_encoding_figures

    paths = save_positional_encoding_figures(args.out)
    for p in paths:
        print(p)
    return 0


# ------------------------------------------------------------------------------------ data


def _line_numbers(numbers: Sequence[int], shown: int = 20) -> str:
    """``"3, 9 and 17"``, or the first ``shown`` and how many more."""
    head = [str(n) for n in numbers[:shown]]
    if len(numbers) > shown:
        return ", ".join(head) + f" and {len(numbers) - shown:,} more"
    return head[0] if len(head) == 1 else ", ".join(head[:-1]) + " and " + head[-1]


def _load_pairs(path: Optional[str], info: Dict[str, Any], **kwargs: Any) -> Any:
    """:func:`~transformer_cpp.data.load_tatoeba` with the run's encoding and policy for undecodable
    lines; prints how many lines it kept and, by reason, how many it left out."""
    from .data import UndecodableLineError, load_tatoeba

    # runs recorded before "encoding" existed skipped undecodable lines: rebuild them the same way
    errors = info.get("decode_errors", "strict" if "encoding" in info else "skip")
    try:
        pairs = load_tatoeba(path, encoding=info.get("encoding", "utf-8"), errors=errors, **kwargs)
    except UndecodableLineError as exc:
        raise UserError(
            f"'{exc.path}' line {exc.line} is not valid {exc.encoding}: {exc.detail}. If the file uses "
            f"another encoding, name it with --encoding (e.g. --encoding latin-1); --decode-errors skip "
            f"leaves such lines out instead"
        ) from None
    stats = pairs.stats
    message = f"loaded {len(pairs):,} sentence pairs from {pairs.source}"
    if stats.skipped:
        message += f"; left out {stats.skipped:,} of {stats.read:,} lines ({stats.describe_skipped()})"
    _say(message)
    if stats.undecodable:
        _say(
            f"{pairs.source}: not valid {stats.encoding}, left out: line{'s' if stats.undecodable > 1 else ''} "
            f"{_line_numbers(stats.undecodable_lines)}"
        )
    return pairs


def _load_split(data_path: Optional[str], info: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """Load, clean and split the pairs as ``info`` says; returns (split, updated info).

    ``split`` maps ``"train"``, ``"valid"``, ``"test"`` to ``(source sentences, target sentences)``.
    Runs record ``split = "by-source"`` (:func:`~transformer_cpp.data.split_by_source`); a run
    without it was split pair by pair, and is rebuilt that way.
    """
    from .data import split_by_source, train_val_test_split
    from .text import clean_corpus

    num_samples = info.get("num_samples") or None
    pairs = _load_pairs(
        data_path,
        info,
        num_samples=num_samples,
        sampling=info.get("sampling", "first"),
        seed=int(info.get("split_seed", 0)),
    )
    src_all = clean_corpus(pairs.english, info["src_lang"])
    tgt_all = clean_corpus(pairs.spanish, info["tgt_lang"])
    if info.get("split") == "by-source":
        by_source = split_by_source(
            src_all, tgt_all, info["valid_fraction"], info["test_fraction"], seed=info["split_seed"]
        )
        parts = by_source.parts()
        if by_source.dropped:
            _say(
                f"left out {by_source.dropped:,} training or validation pairs whose Spanish sentence is a "
                "reference of a later split (so no reference is ever a training target)"
            )
    else:
        parts = train_val_test_split(len(pairs), info["valid_fraction"], info["test_fraction"], seed=info["split_seed"])
    split = {
        name: ([src_all[i] for i in idx], [tgt_all[i] for i in idx])
        for name, idx in zip(("train", "valid", "test"), parts)
    }
    info = dict(
        info,
        path=str(Path(pairs.source).resolve()) if pairs.source else None,
        pairs_loaded=len(pairs),
        split_digests={name: _split_digest(*split[name]) for name in split},
    )
    return split, info


def _split_digest(sources: Sequence[str], targets: Sequence[str]) -> str:
    """A short hash of a split's pairs, in order: the run records one per split, so that a split
    rebuilt later from a changed data file is not taken for the one the run held out."""
    import hashlib

    h = hashlib.sha256()
    for src, tgt in zip(sources, targets):
        h.update(src.encode("utf-8", "surrogatepass") + b"\t" + tgt.encode("utf-8", "surrogatepass") + b"\n")
    return h.hexdigest()[:16]


def _check_same_split(name: str, recorded: Dict[str, Any], rebuilt: Dict[str, Any]) -> None:
    """Refuse a ``name`` split rebuilt from a data file that changed since training: scoring it
    would report a test score on other pairs (perhaps training ones) without a word."""
    then = (recorded.get("split_digests") or {}).get(name)
    now = rebuilt["split_digests"][name]
    before, after = recorded.get("pairs_loaded"), rebuilt.get("pairs_loaded")
    if (then is not None and then != now) or (then is None and before is not None and before != after):
        counts = (
            f" ({after:,} pairs loaded now, {before:,} when the run was trained)"
            if before != after and isinstance(before, int)
            else ""
        )
        raise UserError(
            f"the {name} split rebuilt from '{rebuilt.get('path')}' differs from the one the run held out: "
            f"the data file changed since training{counts}, so its pairs are not the held-out ones; "
            "pass the original file with --data, or score a file of pairs with --pairs"
        )


def _encode(split: Dict[str, Any], name: str, src_tok: Any, tgt_tok: Any, max_length: Optional[int]) -> Optional[Any]:
    from .data import encode_pairs

    src, tgt = split[name]
    if not src:
        return None
    try:
        return encode_pairs(src, tgt, src_tok, tgt_tok, max_length)
    except ValueError as exc:
        hint = "; raise --max-length (0 = automatic)" if "longer than max_length" in str(exc) else ""
        raise UserError(f"the {name} split has no usable pair: {exc}{hint}") from None


def _encode_valid(split: Dict[str, Any], src_tok: Any, tgt_tok: Any, max_length: Optional[int]) -> Optional[Any]:
    """The encoded validation pairs, or None (said) when every one is longer than ``max_length``."""
    try:
        return _encode(split, "valid", src_tok, tgt_tok, max_length)
    except UserError as exc:
        _say(f"{exc}: training without validation")
        return None


def _choose_max_length(split: Dict[str, Any], src_tok: Any, tgt_tok: Any, option: int) -> int:
    """The training length limit: ``option`` if > 0, else the length that covers
    :data:`LENGTH_COVERAGE` percent of the training pairs; prints the percentiles."""
    from .data import length_limit, length_percentiles

    src, tgt = split["train"]
    lengths = [max(len(a), len(b)) for a, b in zip(src_tok.encode_batch(src), tgt_tok.encode_batch(tgt))]
    pct = length_percentiles(lengths)
    _say(
        "training pair lengths in tokens (longer side, start and end included): "
        + ", ".join(f"{p:g}% <= {v}" for p, v in pct.items())
    )
    if option:
        kept = sum(n <= option for n in lengths) / len(lengths) * 100
        _say(f"max length {option} tokens (--max-length) keeps {kept:.2f}% of the training pairs")
        return int(option)
    limit = length_limit(lengths, LENGTH_COVERAGE)
    _say(f"max length {limit} tokens: covers {LENGTH_COVERAGE}% of the training pairs")
    return limit


# ------------------------------------------------------------------------------------ train


def _arch_options() -> Dict[str, str]:
    """Command-line option (dest) -> Transformer argument, from the core's table."""
    from .config import MODEL_FIELDS, option_fields

    return {f.option: f.name for f in option_fields(MODEL_FIELDS)}


def _train_options() -> List[str]:
    """TrainConfig settings that options set (dest = field name): its own and the optimiser's."""
    from .config import OPTIMIZER_FIELDS, option_fields

    return [*_TRAIN_OPTIONS, *(f.option for f in option_fields(OPTIMIZER_FIELDS))]


def _given(args: argparse.Namespace, names: Sequence[str]) -> Dict[str, Any]:
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def _requested(
    args: argparse.Namespace, preset: Optional[str]
) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """(architecture, TrainConfig fields, data settings) that ``preset`` and the options ask for;
    without a preset only the options given."""
    from .model import preset_config, preset_recipe

    arch: Dict[str, Any] = {}
    train: Dict[str, Any] = {}
    data: Dict[str, Any] = {}
    if preset is not None:
        arch = preset_config(preset)
        recipe = preset_recipe(preset)
        train = recipe["train"]
        data = {("max_length_option" if k == "max_length" else k): v for k, v in recipe["data"].items()}
        arch.update(recipe.get("model", {}))
    arch.update({_arch_options()[k]: v for k, v in _given(args, list(_arch_options())).items()})
    train.update(_given(args, _train_options()))
    for flag in ("epochs", "seed", "time_budget"):
        if getattr(args, flag) is not None:
            train[flag] = getattr(args, flag)
    data.update({_DATA_OPTIONS[k]: v for k, v in _given(args, list(_DATA_OPTIONS)).items()})
    return arch, train, data


def _check_resume_options(
    args: argparse.Namespace, model_cfg: Dict[str, Any], train_cfg: Dict[str, Any], data: Dict[str, Any]
) -> Dict[str, Any]:
    """With --resume, what the command asks for (its preset and options) must agree with the
    checkpoint, except the settings a resumed run may change; returns those changes."""
    arch, train, data_req = _requested(args, args.preset)
    arch.pop("max_length", None)  # a positional-table cache, not a setting of the run
    grow = _size_growth(args) if args.preset is not None else None
    if grow is not None and all(model_cfg.get(k) == v for k, v in grow["arch"].items()):
        arch.update(grow["arch"])  # model size auto chose the larger model when the run started
    conflicts = []
    from .config import MODEL_FIELDS, defaults
    from .training import TrainConfig

    names = {v: k for k, v in {**_arch_options(), **_DATA_OPTIONS}.items()}
    # what a checkpoint written before a setting existed had: its default
    section_defaults = {
        "architecture": defaults(MODEL_FIELDS),
        "training": TrainConfig().to_dict(),
        "data": _DEFAULT_DATA,
    }
    for section, requested, saved in (
        ("architecture", arch, model_cfg),
        ("training", train, train_cfg),
        ("data", data_req, data),
    ):
        for key, value in requested.items():
            if section == "training" and key in _CHANGEABLE_ON_RESUME:
                continue
            if section == "architecture" and key == "precision" and value == AUTO_PRECISION:
                continue  # "auto" accepts what the run chose when it started
            have = saved.get(key, section_defaults[section].get(key))
            if value != have:
                flag = names.get(key, key).replace("_", "-")
                conflicts.append(f"--{flag} {value} (the run has {have})")
    if conflicts:
        raise UserError(
            "--resume continues the run in --out with its own settings, and these options differ "
            "from it: " + ", ".join(conflicts) + "; drop them, or start a new run with another --out"
        )
    return {k: v for k, v in train.items() if k in _CHANGEABLE_ON_RESUME}


def _show_epoch_summaries() -> None:
    """Without a progress bar, the trainer reports each epoch through its logger: show those lines."""
    import logging

    log = logging.getLogger(f"{__package__}.training")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)


def _build_tokenizers(split: Dict[str, Any], data_info: Dict[str, Any]) -> Tuple[Any, Any]:
    from .tokenizer import SubwordTokenizer

    vocab = int(data_info["vocab_size"])
    src, tgt = split["train"]
    if data_info.get("joint_vocab"):
        tok = SubwordTokenizer.build_from_corpus(list(src) + list(tgt), vocab)
        _say(f"joint subword vocabulary: {tok.vocab_size:,} tokens (target {vocab:,})")
        return tok, tok
    src_tok = SubwordTokenizer.build_from_corpus(src, vocab)
    tgt_tok = SubwordTokenizer.build_from_corpus(tgt, vocab)
    _say(
        f"subword vocabularies: {data_info['src_lang']} {src_tok.vocab_size:,} tokens, "
        f"{data_info['tgt_lang']} {tgt_tok.vocab_size:,} tokens (target {vocab:,})"
    )
    return src_tok, tgt_tok


def _cmd_train(args: argparse.Namespace) -> int:
    from .checkpoint import check_writable, list_checkpoints, lock_run

    out = Path(args.out if args.out is not None else f"runs/{args.preset or DEFAULT_PRESET}")
    parallel = _data_parallel(args)
    if parallel is not None:
        return _train_parallel(args, out, parallel)
    _set_threads(args.threads)
    existing = bool(list_checkpoints(out, complete=False)) or (out / "latest").exists()
    if args.resume and not existing:
        raise UserError(f"nothing to resume: '{out}' holds no checkpoint")
    if not args.resume and existing:
        raise UserError(f"'{out}' already holds a run; pass --resume to continue it or choose another --out")
    created = not out.exists()
    check_writable(out, "--out")  # before any work, not after the first epoch
    try:
        with lock_run(out):  # held to the end: a second `train` into the same --out fails at once
            trainer = _resume_trainer(args, out) if args.resume else _new_trainer(args, out)
            return _fit(trainer, out)
    except BaseException:
        if created:
            _remove_if_unused(out)
        raise


def _data_parallel(args: argparse.Namespace) -> Any:
    """The run's :class:`~transformer_cpp.distributed.DataParallel` when ``mpiexec`` started this
    process as one of several, else None (and MPI is not imported)."""
    global _QUIET, _RANK
    from .distributed import MPIUnavailable, from_environment, launched_world

    size, rank = launched_world()
    if size <= 1:
        return None
    _QUIET = rank != 0
    _RANK = f"rank {rank}: " if rank else ""
    try:
        return from_environment(timeout=args.mpi_timeout)
    except MPIUnavailable as exc:
        if rank != 0:
            # without MPI the ranks cannot agree: rank 0 says it, and the others wait for the launcher to
            # end the job when rank 0 fails (it would end it when the first process fails, rank 0
            # perhaps before it spoke); at most 30 s, in case rank 0 does not fail
            import time

            time.sleep(30.0)
        raise UserError(str(exc)) from None


class _Collective:
    """Setup steps of a data-parallel run: each rank does its part, then they agree, so that a
    failure anywhere stops every rank and rank 0 says it in one line. Without MPI, steps just run."""

    def __init__(self, parallel: Any) -> None:
        self.parallel = parallel

    def run(self, what: str, fn: Any) -> Any:
        if self.parallel is None:
            return fn()
        result, error = None, None
        try:
            result = fn()
        except (UserError, OSError, ValueError, RuntimeError, MemoryError, TypeError) as exc:
            error = exc
        line = self.parallel.agree(error, what)
        if line is not None:
            if self.parallel.is_root:
                raise UserError(line)
            raise _Silent()
        return result

    def on_root(self, what: str, fn: Any) -> Any:
        """``fn()`` on rank 0, its result sent to every rank."""
        if self.parallel is None:
            return fn()
        result, error = None, None
        if self.parallel.is_root:
            try:
                result = fn()
            except (UserError, OSError, ValueError, RuntimeError, MemoryError, TypeError) as exc:
                error = " ".join(str(exc).split()) or type(exc).__name__
        error, result = self.parallel.bcast((error, result), what)
        if error is not None:
            if self.parallel.is_root:
                raise UserError(error)
            raise _Silent()
        return result


def _train_parallel(args: argparse.Namespace, out: Path, parallel: Any) -> int:
    """``train`` as one rank of ``mpiexec -n N``: every rank reads the data and the run directory
    (shared by all hosts), rank 0 builds the vocabularies and alone writes into ``--out``."""
    import contextlib

    from .checkpoint import check_writable, list_checkpoints, lock_run

    steps = _Collective(parallel)
    _set_threads(args.threads)

    def check_out() -> bool:
        existing = bool(list_checkpoints(out, complete=False)) or (out / "latest").exists()
        if args.resume and not existing:
            raise UserError(f"nothing to resume: '{out}' holds no checkpoint")
        if not args.resume and existing:
            raise UserError(f"'{out}' already holds a run; pass --resume to continue it or choose another --out")
        created = not out.exists()
        if parallel.is_root:
            check_writable(out, "--out")
        return created

    created = steps.run("checking --out", check_out)
    _say(f"data-parallel training: {parallel.size} MPI processes; rank 0 writes {out}")
    with contextlib.ExitStack() as stack:
        try:
            if parallel.is_root:
                steps.run("locking --out", lambda: stack.enter_context(lock_run(out)))
            else:
                steps.run("locking --out", lambda: None)
            trainer = _resume_trainer(args, out, steps) if args.resume else _new_trainer(args, out, steps)
            return _fit(trainer, out)
        except BaseException:
            if created and parallel.is_root:
                stack.close()
                _remove_if_unused(out)
            raise


def _remove_if_unused(out: Path) -> None:
    """Remove the run directory this command created if nothing but its lock file is in it (the
    command failed before its first checkpoint)."""
    from .checkpoint import LOCK_FILE

    try:
        if {p.name for p in out.iterdir()} <= {LOCK_FILE}:
            (out / LOCK_FILE).unlink(missing_ok=True)
            out.rmdir()
    except OSError:
        pass


def _resume_trainer(args: argparse.Namespace, out: Path, steps: Optional[_Collective] = None) -> Any:
    steps = steps if steps is not None else _Collective(None)
    return steps.run("resuming the run", lambda: _resume_trainer_here(args, out, steps.parallel))


def _resume_trainer_here(args: argparse.Namespace, out: Path, parallel: Any) -> Any:
    from .checkpoint import load_checkpoint, read_checkpoint_config
    from .training import Trainer

    ckpt_dir, cfg = read_checkpoint_config(out)
    _check_world_size(ckpt_dir, parallel)
    data_info = cfg.get("data") or {}
    if not data_info or cfg.get("train_config") is None:
        raise UserError(
            f"checkpoint '{ckpt_dir}' was not written by 'transformer-cpp train'; it cannot be resumed here"
        )
    changes = _check_resume_options(args, cfg["model"], cfg["train_config"], data_info)
    split, _ = _load_split(args.data if args.data is not None else data_info.get("path"), data_info)
    ckpt = load_checkpoint(ckpt_dir, optimizer=True)
    max_length = data_info.get("max_length")
    train = _encode(split, "train", ckpt.src_tokenizer, ckpt.tgt_tokenizer, max_length)
    valid = _encode_valid(split, ckpt.src_tokenizer, ckpt.tgt_tokenizer, max_length)
    if train is None:
        raise UserError(f"the run's training split is empty: '{data_info.get('path')}' holds no training pair")
    trainer = Trainer.from_checkpoint(
        ckpt,
        train,
        valid,
        checkpoint_dir=out,
        epochs=changes.get("epochs"),
        threads=args.threads,
        progress=False if args.no_progress else None,
        time_budget=changes.get("time_budget"),
        parallel=parallel,
    )
    trainer.config.adaptive_threads = not args.fixed_threads  # how threads are used: not part of the run
    _say(
        f"resuming {ckpt.path} at epoch {trainer.epoch} (+{trainer.batch_in_epoch} batches), "
        f"step {trainer.model.step}, {trainer.elapsed / 60:.1f} minutes trained"
    )
    return trainer


def _check_world_size(ckpt_dir: Path, parallel: Any) -> None:
    """Refuse at once (before reading the data) to resume with another number of processes; a
    damaged state file is left to the full load to report."""
    import json

    from .checkpoint import TRAINER_STATE_FILE
    from .training import world_size_problem

    try:
        state = json.loads((ckpt_dir / TRAINER_STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(state, dict):
        problem = world_size_problem(state.get("world_size", 1), 1 if parallel is None else parallel.size)
        if problem is not None and "damaged" not in problem:
            raise UserError(problem)


def _new_trainer(args: argparse.Namespace, out: Path, steps: Optional[_Collective] = None) -> Any:
    steps = steps if steps is not None else _Collective(None)
    arch, config, data_info, split = steps.run("reading the data", lambda: _new_run_data(args))
    # the vocabularies: built once (rank 0) and shared, so that every rank encodes alike
    src_tok, tgt_tok = steps.on_root("building the subword vocabularies", lambda: _build_tokenizers(split, data_info))
    return steps.run(
        "building the model",
        lambda: _new_run_model(args, out, arch, config, data_info, split, src_tok, tgt_tok, steps.parallel),
    )


def _new_run_data(args: argparse.Namespace) -> Tuple[Dict[str, Any], Any, Dict[str, Any], Dict[str, Any]]:
    from .data import check_fractions
    from .model import Transformer
    from .training import TrainConfig

    arch, settings, data_req = _requested(args, args.preset or DEFAULT_PRESET)
    data_info: Dict[str, Any] = dict(_DEFAULT_DATA, src_lang="en", tgt_lang="es", split="by-source")
    data_info.update(data_req)
    settings.setdefault("epochs", 10)
    config = TrainConfig(
        threads=args.threads, progress=not args.no_progress, adaptive_threads=not args.fixed_threads, **settings
    )
    # --batch-size against the preset's token budget would be ignored, not applied (given together
    # with --max-tokens, it sizes the validation batches)
    if args.batch_size is not None and config.max_tokens and args.max_tokens is None:
        raise UserError(
            f"--batch-size {args.batch_size} would be ignored: the {args.preset or DEFAULT_PRESET} preset "
            f"cuts batches by tokens (max_tokens {config.max_tokens}); add --max-tokens 0 to batch by "
            "sentences, or leave out --batch-size"
        )
    check_fractions(data_info["valid_fraction"], data_info["test_fraction"])
    # a bad or oversized architecture fails now, before any work (the real vocabulary sizes
    # are checked again when the model is built)
    Transformer(4, 4, seed=config.seed, **_concrete_precision(arch))
    split, data_info = _load_split(args.data, data_info)
    return arch, config, data_info, split


def _concrete_precision(arch: Dict[str, Any]) -> Dict[str, Any]:
    """``arch`` with precision "auto" (resolved later, when the vocabularies are known) read as
    float32, for checks that build a model before that."""
    return dict(arch, precision="float32") if arch.get("precision") == AUTO_PRECISION else arch


def _step_tokens(config: Any) -> int:
    """Target tokens of one training batch, for the steps precision.py times: the token budget,
    else the batch size times a typical sentence."""
    return int(config.max_tokens or 0) or int(config.batch_size) * 12


def _resolve_auto_precision(arch: Dict[str, Any], config: Any, src_vocab: int, tgt_vocab: int, parallel: Any) -> str:
    """Precision "auto": time a few steps of this model in float32 and bf16 and keep the faster
    (bf16 only from 1.10x, see precision.py); under MPI rank 0 measures and every rank takes its
    choice (the ranks must run the same products)."""
    from .precision import choose_precision

    budget = _step_tokens(config)
    if parallel is None or parallel.rank == 0:
        chosen, why = choose_precision(arch, src_vocab, tgt_vocab, budget, seed=config.seed)
    else:
        chosen, why = "", ""
    if parallel is not None:
        chosen, why = parallel.bcast((chosen, why), "the precision rank 0 measured")
    _say(why)
    return str(chosen)


# the options that choose the model's size: given any, the user chose it and a preset's "grow"
# (model size auto) is not applied
_SIZE_FIELDS = ("d_model", "n_layers", "n_heads", "d_ff", "dropout")


def _size_growth(args: argparse.Namespace) -> Optional[Dict[str, Any]]:
    """The preset's larger architecture and the epochs it needs (``{"arch": ..., "min_epochs":
    ...}``, model.RECIPES "grow"), or None: no such section, or an option set the size."""
    from .model import preset_recipe

    grow = preset_recipe(args.preset or DEFAULT_PRESET).get("grow")
    if not grow:
        return None
    given = _given(args, list(_arch_options()))
    if any(_arch_options()[k] in _SIZE_FIELDS for k in given):
        return None
    return dict(grow)


def _resolve_auto_size(
    arch: Dict[str, Any], grow: Dict[str, Any], config: Any, train: Any, src_vocab: int, tgt_vocab: int, parallel: Any
) -> Dict[str, Any]:
    """Model size auto: time a step of the preset's model and of its larger one (rank 0 under MPI,
    the ranks sharing an epoch) and keep the larger if it gets ``min_epochs`` in the time budget
    (precision.choose_size)."""
    import numpy as np

    from .precision import choose_size

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
    _say(why)
    return dict(chosen)


def _new_run_model(
    args: argparse.Namespace,
    out: Path,
    arch: Dict[str, Any],
    config: Any,
    data_info: Dict[str, Any],
    split: Dict[str, Any],
    src_tok: Any,
    tgt_tok: Any,
    parallel: Any,
) -> Any:
    from .model import Transformer
    from .training import Trainer

    max_length = _choose_max_length(split, src_tok, tgt_tok, int(data_info["max_length_option"] or 0))
    data_info["max_length"] = max_length
    arch["max_length"] = max(int(arch.get("max_length", 0)), max_length)  # the positional table's first size
    train = _encode(split, "train", src_tok, tgt_tok, max_length)
    if train is None:
        raise UserError("no training pairs: lower --valid-fraction / --test-fraction or use more --num-samples")
    valid = _encode_valid(split, src_tok, tgt_tok, max_length)
    valid_note = f" ({valid.removed:,} longer ones left out)" if valid is not None and valid.removed else ""
    _say(
        f"pairs of at most {max_length} tokens: {len(train):,} train ({train.removed:,} longer ones left out), "
        f"{len(valid) if valid is not None else 0:,} validation{valid_note}, {len(split['test'][0]):,} test "
        f"(held out; split by English sentence)"
    )
    if data_info.get("joint_vocab"):
        arch.setdefault("share_embeddings", True)
    if arch.get("precision") == AUTO_PRECISION:
        arch["precision"] = _resolve_auto_precision(arch, config, src_tok.vocab_size, tgt_tok.vocab_size, parallel)
    grow = _size_growth(args)
    if grow is not None and config.time_budget:
        arch = _resolve_auto_size(arch, grow, config, train, src_tok.vocab_size, tgt_tok.vocab_size, parallel)
    model = Transformer(src_tok.vocab_size, tgt_tok.vocab_size, seed=config.seed, **arch)
    _say(f"model: {model!r}")
    trainer = Trainer(
        model,
        train,
        valid,
        config,
        src_tokenizer=src_tok,
        tgt_tokenizer=tgt_tok,
        checkpoint_dir=out,
        data_info=data_info,
        parallel=parallel,
    )
    budget = f" or {config.time_budget:g} minutes" if config.time_budget else ""
    _say(
        f"training up to {config.epochs} epochs of about {trainer.batches_per_epoch:,} batches{budget}; "
        f"checkpoints in {out}"
    )
    return trainer


def _fit(trainer: Any, out: Path) -> int:
    from .training import TrainingInterrupted

    _show_epoch_summaries()
    try:
        trainer.fit()
    except TrainingInterrupted as exc:
        where = f"checkpoint {exc.checkpoint}" if exc.checkpoint else "the last epoch checkpoint"
        _say(f"{PROG} train: interrupted; {where} holds the state; continue with the same command and --resume")
        return 130
    last = trainer.history["epoch"]
    if last["epoch"]:
        summary = f"loss {last['loss'][-1]:.4f}, accuracy {last['accuracy'][-1]:.4f}"
        if last["val_loss"]:
            summary += f", validation loss {last['val_loss'][-1]:.4f}, accuracy {last['val_accuracy'][-1]:.4f}"
        if last["val_bleu"]:
            summary += f", validation BLEU {last['val_bleu'][-1]:.2f}"
        _say(f"done after epoch {last['epoch'][-1]} ({trainer.elapsed / 60:.1f} minutes): {summary}")
    _say(
        f"model saved in {out} (translation uses {_best_name(out)}); try: {PROG} translate --model {out} "
        f'"you should pay for it."'
    )
    return 0


def _best_name(run: Path) -> str:
    from .checkpoint import resolve_checkpoint

    return resolve_checkpoint(run, "best").name


# ------------------------------------------------------------------------------------ translate


def _read_input_lines() -> Tuple[List[Optional[str]], List[Tuple[int, str]]]:
    """Standard input as lines of text, read as bytes and decoded line by line as UTF-8:
    ``(lines, bad)`` where an undecodable line is ``None`` in ``lines`` and ``(line number, what
    is wrong)`` in ``bad``. Lines end in ``\\n``, ``\\r\\n`` or a lone ``\\r`` (old Mac files), as
    data files are read."""
    import re

    data = sys.stdin.buffer.read()
    raw_lines = re.split(rb"\r\n|\r|\n", data)
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # the line end that ends the last line
    lines: List[Optional[str]] = []
    bad: List[Tuple[int, str]] = []
    for number, raw in enumerate(raw_lines, 1):
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a UTF-8 byte-order mark
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            lines.append(None)
            bad.append(
                (number, f"{exc.reason} at byte {exc.start + 1} ({raw[exc.start : max(exc.end, exc.start + 1)]!r})")
            )
    return lines, bad


def _translate_lines(
    translator: Any, todo: List[Tuple[int, str]], args: argparse.Namespace
) -> Tuple[Dict[int, str], List[Tuple[int, str]]]:
    """Translate ``(number, sentence)`` pairs a batch at a time: ``({number: translation}, failed)``.
    A batch the core refuses (a sentence too long for the memory, say) is retried sentence by
    sentence, so that one sentence fails alone: ``failed`` holds ``(number, why)``."""
    done: Dict[int, str] = {}
    failed: List[Tuple[int, str]] = []

    def translate(chunk: List[Tuple[int, str]]) -> None:
        texts = translator.translate_batch(
            [s for _, s in chunk],
            beam_size=args.beam_size,
            length_penalty=args.length_penalty,
            batch_size=args.batch_size,
        )
        done.update(zip((n for n, _ in chunk), texts))

    for start in range(0, len(todo), args.batch_size):
        chunk = todo[start : start + args.batch_size]
        try:
            translate(chunk)
        except (ValueError, MemoryError) as exc:
            if len(chunk) == 1:
                failed.append((chunk[0][0], " ".join(str(exc).split()) or type(exc).__name__))
                continue
            for item in chunk:
                try:
                    translate([item])
                except (ValueError, MemoryError) as one:
                    failed.append((item[0], " ".join(str(one).split()) or type(one).__name__))
    return done, failed


def _cmd_translate(args: argparse.Namespace) -> int:
    from .text import check_text
    from .translate import LongInputWarning, Translator

    _set_threads(args.threads)
    translator = Translator.from_checkpoint(args.model, max_length=args.max_length, compute_type=args.compute_type)
    bad: List[Tuple[int, str]] = []
    if args.sentences:
        sentences: List[Optional[str]] = []
        what = "argument"
        for number, sentence in enumerate(args.sentences, 1):
            try:
                sentences.append(check_text(sentence, "translate"))
            except ValueError:  # bytes that were not UTF-8 (Python keeps them as lone surrogates)
                sentences.append(None)
                bad.append((number, ""))
    else:
        if sys.stdin.isatty():
            _say("reading sentences from standard input, one per line (end with Ctrl-D)")
        sentences, bad = _read_input_lines()
        what = "line"
    for number, problem in bad[:20]:
        _say(
            f"{PROG} translate: {what} {number} is not valid UTF-8{f' ({problem})' if problem else ''}; its output "
            "line is left empty"
        )
    if len(bad) > 20:
        _say(f"{PROG} translate: {len(bad) - 20:,} more {what}s are not valid UTF-8; their output lines are left empty")
    todo = [(n, s) for n, s in enumerate(sentences, 1) if s is not None and s.strip()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LongInputWarning)
        done, failed = _translate_lines(translator, todo, args)
    for message in dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, LongInputWarning)):
        _say(f"{PROG} translate: warning: {message}")  # once each, though a refused batch is retried
    for number, why in failed:
        _say(f"{PROG} translate: {what} {number} cannot be translated: {why}; its output line is left empty")
    for number in range(1, len(sentences) + 1):
        print(done.get(number, ""))
    if bad or failed:
        _say(
            f"{PROG} translate: {len(bad) + len(failed):,} of {len(sentences):,} {what}s not translated (see above); "
            "the others are"
        )
        return 1
    return 0


# ------------------------------------------------------------------------------------ evaluate


def _read_pairs_file(path: str, encoding: str) -> Tuple[List[str], List[str]]:
    """The pairs of ``path``; lines that are not valid in ``encoding`` are left out and reported
    by line number, with every other line left out."""
    pairs = _load_pairs(path, {"encoding": encoding, "decode_errors": "skip"}, sampling="first")
    return pairs.english, pairs.spanish


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .checkpoint import read_checkpoint_config
    from .translate import Translator, evaluate

    _set_threads(args.threads)
    if args.output is not None:  # before the work, not after it
        folder = Path(args.output).parent
        if Path(args.output).is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
            raise UserError(f"--output '{args.output}' cannot be written (not a file in a writable directory)")
    ckpt_dir, cfg = read_checkpoint_config(args.model, "best")
    data_info = cfg.get("data") or {}
    translator = Translator.from_checkpoint(ckpt_dir, compute_type=args.compute_type)
    if args.pairs is not None:
        sources, references = _read_pairs_file(args.pairs, args.encoding or "utf-8")
        what = f"{args.pairs}"
    else:
        if not data_info:
            raise UserError(
                f"checkpoint '{ckpt_dir}' does not record its data split (it was not written by "
                f"'{PROG} train'); score it on a file with --pairs"
            )
        if args.split == "test" and not data_info.get("test_fraction"):
            raise UserError("the run kept no test split (test fraction 0); use --split valid or --pairs FILE")
        if args.encoding is not None:  # e.g. the data file was converted since
            data_info = dict(data_info, encoding=args.encoding)
        split, rebuilt = _load_split(args.data if args.data is not None else data_info.get("path"), data_info)
        _check_same_split(args.split, data_info, rebuilt)
        sources, references = split[args.split]
        what = f"the {args.split} split"
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    if not sources:
        raise UserError(f"{what} has no sentence pair")
    result = evaluate(
        translator,
        sources,
        references,
        beam_size=args.beam_size,
        length_penalty=args.length_penalty,
        batch_size=args.batch_size,
        tgt_lang=data_info.get("tgt_lang", "es"),
    )
    if args.output is not None:
        Path(args.output).write_text("".join(h + "\n" for h in result.hypotheses), encoding="utf-8")
    print(f"checkpoint  {ckpt_dir}")
    print(
        f"pairs       {what}: {result.sentences} sentence pairs, beam size {args.beam_size}"
        + (f", compute type {args.compute_type}" if args.compute_type != "float32" else "")
    )
    print(f"BLEU        {result.bleu:.2f}   ({result.bleu_signature})")
    print(f"chrF        {result.chrf:.2f}   ({result.chrf_signature})")
    if result.sources < result.sentences:
        print(
            f"all refs    BLEU {result.multi_bleu:.2f}  chrF {result.multi_chrf:.2f}   ({result.sources} distinct "
            f"sources, each scored once against all its references)"
        )
    print(f"loss        {result.loss:.4f}")
    print(f"accuracy    {result.accuracy:.4f}")
    if args.output is not None:
        print(f"hypotheses  {args.output}")
    for i in range(min(args.examples, len(sources))):
        print(f"\n  source     {sources[i]}\n  reference  {result.references[i]}\n  output     {result.hypotheses[i]}")
    return 0


# ------------------------------------------------------------------------------------ average


def _cmd_average(args: argparse.Namespace) -> int:
    from .checkpoint import average_checkpoints, list_checkpoints, mark_best

    run = Path(args.model)
    found = list_checkpoints(run)
    if len(found) < 2:
        raise UserError(f"'{run}' holds {len(found)} checkpoint(s); averaging needs at least 2")
    paths = found[-args.last :]
    path, _ = average_checkpoints(paths, run)
    assert path is not None  # written, since run_dir was given
    if args.mark_best:
        mark_best(run, path.name)
    print(
        f"averaged {', '.join(p.name for p in paths)} into {path}"
        + ("; 'best' now points at it" if args.mark_best else "")
    )
    return 0


# ------------------------------------------------------------------------------------ export


def _cmd_export(args: argparse.Namespace) -> int:
    from .export import export_ctranslate2, export_torch

    if args.quantization is not None and args.to != "ctranslate2":
        raise UserError(
            f"--quantization is for --to ctranslate2 (the {args.to} export keeps the model's weights as they are)"
        )
    try:
        if args.to == "ctranslate2":
            out = export_ctranslate2(args.model, args.out, quantization=args.quantization)
        else:
            out = export_torch(args.model, args.out)
    except ImportError as exc:  # an optional dependency (its extra is named in the message)
        raise UserError(str(exc)) from None
    print(f"exported to {args.to}: {out}")
    return 0


# ------------------------------------------------------------------------------------ parser


def _add_train_parser(sub: Any) -> None:
    from .model import PRESETS

    p = sub.add_parser(
        "train",
        help="train an English-to-Spanish model on the Tatoeba pairs",
        description="Train a Transformer on English-Spanish pairs. A checkpoint is written "
        "after every epoch (and on Ctrl-C); the same command with --resume "
        "continues exactly. Options left out take the preset's value. Presets: "
        "quick (10 minutes), standard (about an hour), tutorial (the TensorFlow "
        "tutorial's settings), base (the paper's base model), tiny (tests).",
    )
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help=f"architecture and training recipe (default: {DEFAULT_PRESET})",
    )
    p.add_argument(
        "--data",
        type=path_option,
        default=None,
        help="spa.txt or spa-eng.zip (default: $TRANSFORMER_CPP_DATA, else the download cache)",
    )
    p.add_argument(
        "--out", type=path_option, default=None, help="run directory for checkpoints (default: runs/<preset>)"
    )
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    p.add_argument(
        "--epochs",
        type=setting("TrainConfig", "epochs", minimum=1),
        default=None,
        help="epochs in total, at most 1000000 (default: the preset's; may be raised with --resume)",
    )
    p.add_argument(
        "--time-budget",
        type=setting("TrainConfig", "time_budget"),
        default=None,
        metavar="MINUTES",
        help="stop after this many minutes with a checkpoint; the learning-rate decay is fitted to it "
        "(0 = no budget; default: the preset's; " + limits_of("TrainConfig")["time_budget"].describe() + ")",
    )
    p.add_argument("--threads", type=threads_option(), default=None, help="C++ threads (default: all cores)")
    p.add_argument(
        "--fixed-threads",
        action="store_true",
        help="always use all --threads threads (by default the run times its steps and uses fewer "
        "while that is faster: another program holding a core slows every thread's share)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--mpi-timeout",
        type=seconds_option,
        default=None,
        metavar="SECONDS",
        help="under mpiexec: abort every process when a collective call (a step's gradient all-reduce, "
        "the wait for rank 0's validation) takes longer (default $TRANSFORMER_CPP_MPI_TIMEOUT or 600)",
    )
    g = p.add_argument_group("data")
    g.add_argument(
        "--num-samples",
        type=count_option("num_samples", 0),
        default=None,
        help="use N pairs of the file (default: the preset's; 0 = all)",
    )
    g.add_argument(
        "--sampling",
        choices=("random", "first"),
        default=None,
        help="how --num-samples picks pairs: a random sample seeded by --split-seed, or the first N "
        "lines (the file is sorted by length: the N shortest; the tutorial's way)",
    )
    g.add_argument(
        "--vocab-size",
        type=count_option("vocab_size", *VOCAB_RANGE),
        default=None,
        help=f"target size of each subword vocabulary, in [{VOCAB_RANGE[0]}, {VOCAB_RANGE[1]}] (at least "
        "the 4 special tokens and the 256 byte symbols)",
    )
    g.add_argument(
        "--joint-vocab",
        action="store_const",
        const=True,
        default=None,
        help="one subword vocabulary for English and Spanish, decoder embedding tied to the output layer",
    )
    g.add_argument(
        "--valid-fraction",
        type=fraction_option("valid_fraction"),
        default=None,
        help="share of pairs for validation, in [0, 1) (default 0.02)",
    )
    g.add_argument(
        "--test-fraction",
        type=fraction_option("test_fraction"),
        default=None,
        help="share of pairs held out for evaluate, in [0, 1) (default 0.03)",
    )
    g.add_argument(
        "--split-seed",
        type=count_option("split_seed", 0),
        default=None,
        help="seed of the sample and of the train/valid/test split by English sentence (default 0)",
    )
    g.add_argument(
        "--max-length",
        type=count_option("max_length", *MAX_LENGTH_RANGE, zero="automatic"),
        default=None,
        help=f"longest training pair in tokens, in [{MAX_LENGTH_RANGE[0]}, {MAX_LENGTH_RANGE[1]}]; longer "
        f"pairs are left out of training (0 = the length that covers {LENGTH_COVERAGE}%% of them). "
        "Translation has no length limit.",
    )
    g.add_argument(
        "--encoding",
        type=encoding_option,
        default=None,
        help="text encoding of the data file (default utf-8); a line not valid in it is an error",
    )
    g.add_argument(
        "--decode-errors",
        choices=("strict", "skip"),
        default=None,
        help="what a line that is not valid in the encoding does: stop with its line number (strict, the "
        "default) or be left out, counted (skip)",
    )
    from .config import MODEL_FIELDS, OPTIMIZER_FIELDS

    from .model import preset_recipe

    grow = preset_recipe(DEFAULT_PRESET)["grow"]
    grown = ", ".join(f"{k} {v}" for k, v in grow["arch"].items())
    config_options(
        p.add_argument_group(
            f"architecture (default: the preset's; the {DEFAULT_PRESET} preset trains {grown} instead when a "
            f"step of that model measures fast enough for {grow['min_epochs']:g} epochs in the time budget, "
            "unless --d-model, --layers, --heads, --d-ff or --dropout is given)"
        ),
        MODEL_FIELDS,
        "Transformer",
        extra={
            "precision": (
                AUTO_PRECISION,
                "auto (the quick and standard presets' default): a few training steps of the model in "
                "each precision when the run starts, bf16 kept if it is at least 1.10x faster",
            )
        },
    )
    g = p.add_argument_group("optimisation (default: the preset's)")
    config_options(g, OPTIMIZER_FIELDS, "TrainConfig")

    def add_setting(flag: str, help: str, **kw: Any) -> None:
        name = flag.replace("-", "_")
        g.add_argument(
            "--" + flag,
            type=setting("TrainConfig", name),
            default=None,
            help=f"{help} ({limits_of('TrainConfig')[name].describe()})",
            **kw,
        )

    add_setting("batch-size", "pairs per step (when --max-tokens is 0)")
    add_setting(
        "max-tokens", "tokens per step: batches of similar length with pairs x longest side <= N (0 = --batch-size)"
    )
    g.add_argument(
        "--decay",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="after the warm-up, decay the learning rate linearly to 0 at the end of the run",
    )
    add_setting("seed", "seed of weights, dropout and shuffling (default 0)")
    add_setting("log-every", "history entry every N steps (default 10)")
    g.add_argument(
        "--bucket-by-length",
        action="store_const",
        const=True,
        default=None,
        help="batch sentences of similar length together (with --batch-size)",
    )
    g.add_argument(
        "--drop-remainder",
        action="store_const",
        const=True,
        default=None,
        help="drop the last, smaller batch of each epoch (with --batch-size)",
    )
    add_setting(
        "keep-checkpoints", "keep the newest N checkpoints of the run (default 5; 0 = all); the best one is always kept"
    )
    add_setting(
        "val-bleu-sentences", "greedy validation BLEU on this many pairs after each epoch (default 500; 0 = off)"
    )
    add_setting("average-last", "at the end, average the newest N checkpoints into 'averaged' (0 or 1 = off)")
    p.set_defaults(func=_cmd_train)


def _add_translate_parser(sub: Any) -> None:
    p = sub.add_parser(
        "translate",
        help="translate sentences with a trained model",
        description="Translate the sentences given as arguments, or one per line from "
        "standard input; prints one translation per line.",
    )
    p.add_argument("sentences", nargs="*", help="sentences to translate (default: read standard input)")
    p.add_argument(
        "--model", type=path_option, required=True, help="run directory (its latest checkpoint) or checkpoint directory"
    )
    add_decoding_options(p)
    p.add_argument(
        "--max-length",
        type=setting("Translator", "max_length"),
        default=None,
        help="most tokens to generate per sentence (default: 1.5 x its source tokens + 10; "
        + limits_of("Translator")["max_length"].describe()
        + ")",
    )
    p.set_defaults(func=_cmd_translate)


def _add_evaluate_parser(sub: Any) -> None:
    p = sub.add_parser(
        "evaluate",
        help="BLEU, chrF, loss and accuracy on held-out pairs or a pairs file",
        description="Score the model (the run's best checkpoint) with sacrebleu: on a file of "
        "'English<TAB>Spanish[<TAB>...]' lines (--pairs), or on the run's own test (or "
        "validation) split, rebuilt from the checkpoint's record.",
    )
    p.add_argument(
        "--pairs",
        type=path_option,
        default=None,
        metavar="FILE",
        help="score on this pairs file instead of the run's split",
    )
    p.add_argument(
        "--output", type=path_option, default=None, metavar="FILE", help="write the translations here, one per line"
    )
    p.add_argument(
        "--model", type=path_option, required=True, help="run directory (its latest checkpoint) or checkpoint directory"
    )
    p.add_argument(
        "--data", type=path_option, default=None, help="the data file (default: the one the run was trained on)"
    )
    p.add_argument("--split", choices=("test", "valid"), default="test", help="which held-out pairs (default test)")
    p.add_argument(
        "--encoding",
        type=encoding_option,
        default=None,
        help="text encoding of --pairs (default utf-8) or --data (default: the run's); lines of --pairs "
        "not valid in it are left out and reported by line number",
    )
    p.add_argument(
        "--limit", type=count_option("limit", 0), default=0, help="score only the first N pairs (default all)"
    )
    add_decoding_options(p)
    p.add_argument(
        "--examples", type=count_option("examples", 0), default=0, help="also print the first N translations"
    )
    p.set_defaults(func=_cmd_evaluate)


def _add_export_parser(sub: Any) -> None:
    from .export import QUANTIZATIONS

    p = sub.add_parser(
        "export",
        help="export a trained model to CTranslate2 or PyTorch",
        description="Write the model (the run's best checkpoint) and its tokenizers for another "
        "runtime: a CTranslate2 model directory (exact in float32) or a PyTorch state dict "
        "with a small module definition, transformer_torch.py, that needs no "
        "transformer-cpp. OUT must not exist or be empty.",
    )
    p.add_argument(
        "--model", type=path_option, required=True, help="run directory (its best checkpoint) or checkpoint directory"
    )
    p.add_argument("--to", required=True, choices=("ctranslate2", "torch"), help="the runtime to export for")
    p.add_argument("out", type=path_option, metavar="OUT", help="the directory to write (new, or empty)")
    p.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="CTranslate2 weight type (default: float32, exact; the others are smaller and faster but not exact)",
    )
    p.set_defaults(func=_cmd_export)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``transformer-cpp`` with every subcommand."""
    parser = _Parser(prog=PROG, description="The Transformer of 'Attention Is All You Need' with a C++ core.")
    parser.add_argument("--version", action="store_true", help="print version and build facts")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    p = sub.add_parser("figures", help="render the positional-encoding figures to PNG files")
    p.add_argument("--out", type=path_option, default="figures", help="output directory (default: figures)")
    p.set_defaults(func=_cmd_figures)

    _add_train_parser(sub)
    _add_translate_parser(sub)
    _add_evaluate_parser(sub)

    p = sub.add_parser(
        "average",
        help="average the last checkpoints of a run into one",
        description="Average the weights of the newest N checkpoints of a run into the checkpoint "
        "'averaged' (for translating; 'latest', which --resume continues, is unchanged).",
    )
    p.add_argument("--model", type=path_option, required=True, help="run directory")
    p.add_argument(
        "--last", type=count_option("last", 1), default=5, help="how many of the newest checkpoints (default 5)"
    )
    p.add_argument("--mark-best", action="store_true", help="point the run's 'best' at the average")
    p.set_defaults(func=_cmd_average)

    _add_export_parser(sub)

    from .serve import add_serve_parser  # the HTTP server (its dependencies are imported when it runs)

    add_serve_parser(sub)

    from .bench import add_bench_parser  # the benchmark (PyTorch and CTranslate2 are imported when it runs)

    add_bench_parser(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line; returns the exit status."""
    try:
        return _main(argv)
    except BrokenPipeError:  # e.g. `transformer-cpp translate ... | head -1`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that Python's exit-time flush does not fail again
        return 0


def _main(argv: Optional[List[str]]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(_version_text())
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    _text_streams_in_utf8()
    if os.environ.get("TRANSFORMER_CPP_DEBUG"):
        return int(args.func(args) or 0)
    try:
        return int(args.func(args) or 0)
    # what a user can cause: bad files, checkpoints and options (CheckpointError, FileNotFoundError,
    # the core's ValueError), sizes beyond the memory (MemoryError), a diverged run
    # (TrainingDiverged, NonFiniteError: RuntimeError), a run directory in use
    except _Silent:
        return 1
    except (UserError, OSError, ValueError, RuntimeError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        if not _QUIET or not _said_by_rank_0(exc):  # data parallelism: rank 0 says what all ranks met
            print(f"{PROG} {args.command}: {_RANK}error: {message}", file=sys.stderr)
        return 1
    except MemoryError as exc:
        detail = " ".join(str(exc).split())
        print(
            f"{PROG} {args.command}: {_RANK}error: out of memory{f' ({detail})' if detail else ''}: the sizes asked for "
            "(model, vocabulary, batch, beam or length) need more memory than there is; ask for smaller ones",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        if not _QUIET:
            print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: one line too, but saying so
        message = " ".join(str(exc).split())
        print(
            f"{PROG} {args.command}: {_RANK}internal error: {type(exc).__name__}: {message} (this is a bug; run with "
            "TRANSFORMER_CPP_DEBUG=1 for the traceback, and please report it)",
            file=sys.stderr,
        )
        return 1


def _text_streams_in_utf8() -> None:
    """Write standard output and error as UTF-8 whatever the locale says (standard input is read
    as UTF-8 bytes too), replacing nothing: text in, text out."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("_", "-")
        if encoding not in ("utf-8", "utf8") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(encoding="utf-8")
            except (OSError, ValueError):
                pass


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
