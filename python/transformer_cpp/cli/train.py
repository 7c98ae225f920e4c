"""``transformer-cpp train``: the options, turned into a :class:`~transformer_cpp.task.TrainRequest`;
the run directory (checked, locked, removed again if the command fails before its first
checkpoint); the task builds the trainer; one process, or one rank of ``mpiexec -n N``."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

from ..checkpoint import resolve_checkpoint
from ..config import MODEL_FIELDS, OPTIMIZER_FIELDS, option_fields
from ..distributed import MPIUnavailable, from_environment, launched_world
from ..options import (
    MAX_LENGTH_RANGE,
    VOCAB_RANGE,
    columns_option,
    config_options,
    count_option,
    deprecated_alias,
    encoding_option,
    fraction_option,
    language_option,
    limits_of,
    path_option,
    seconds_option,
    setting,
    threads_option,
)
from ..task import (
    AUTO_PRECISION,
    DEFAULT_PRESET,
    LENGTH_COVERAGE,
    PRESETS,
    SetupSteps,
    TrainRequest,
    new_trainer,
    preset_recipe,
    resume_trainer,
)
from ..training import RunDirectory, Trainer, TrainingInterrupted
from .common import PROG, UserError, console, set_threads

__all__ = ["add_train_parser", "check_out", "request_from_args", "run_train", "show_epoch_summaries"]

# TrainConfig's own settings that options set, by their field names; the architecture options
# (--d-model, --n-layers, ...) and the optimiser's (--warmup, --lr-scale, ...) are made from the
# core's configuration tables (each field that has an option).
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
    "epochs",
    "seed",
    "time_budget",
)
# Data options: command-line option (dest) -> DataRecord field.
_DATA_OPTIONS = {
    "source_lang": "src_lang",
    "target_lang": "tgt_lang",
    "columns": "columns",
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


def _given(args: argparse.Namespace, names: Sequence[str]) -> Dict[str, Any]:
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def request_from_args(args: argparse.Namespace) -> TrainRequest:
    """What the options of ``train`` ask for, by setting (the options left out are not in it)."""
    train_options: List[str] = [*_TRAIN_OPTIONS, *(f.option for f in option_fields(OPTIMIZER_FIELDS))]
    return TrainRequest(
        preset=args.preset,
        data_path=args.data,
        architecture=_given(args, [f.name for f in option_fields(MODEL_FIELDS)]),
        training=_given(args, train_options),
        data={_DATA_OPTIONS[k]: v for k, v in _given(args, list(_DATA_OPTIONS)).items()},
        threads=args.threads,
        progress=not args.no_progress,
        adaptive_threads=args.adaptive_threads is not False,
    )


def show_epoch_summaries() -> None:
    """Without a progress bar, the trainer reports each epoch through its logger: show those lines."""
    log = logging.getLogger("transformer_cpp.training")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)


def check_out(run: RunDirectory, resume: bool) -> None:
    """Refuse to start a run over another one or over files of the user's, or to resume none."""
    if not resume:
        run.check_own_entries()  # a resumed run is checked once its checkpoint has been read
    existing = run.holds_run()
    if resume and not existing:
        raise UserError(f"nothing to resume: '{run.path}' holds no checkpoint")
    if not resume and existing:
        raise UserError(f"'{run.path}' already holds a run; pass --resume to continue it or choose another --out")


def run_train(args: argparse.Namespace) -> int:
    """``transformer-cpp train``."""
    out = Path(args.out if args.out is not None else f"runs/{args.preset or DEFAULT_PRESET}")
    parallel = _data_parallel(args)
    if parallel is not None:
        return _train_parallel(args, out, parallel)
    set_threads(args.threads)
    request = request_from_args(args)
    run = RunDirectory(out, "--out")
    check_out(run, args.resume)
    with run.removed_unless_used():
        run.check_writable()  # before any work, not after the first epoch
        with run.lock():  # held to the end: a second `train` into the same --out fails at once
            build = resume_trainer if args.resume else new_trainer
            return _fit(build(request, out, console.say), out)


def _data_parallel(args: argparse.Namespace) -> Any:
    """The run's :class:`~transformer_cpp.distributed.DataParallel` when ``mpiexec`` started this
    process as one of several, else None (and MPI is not imported)."""
    size, rank = launched_world()
    if size <= 1:
        return None
    console.as_rank(rank)
    try:
        return from_environment(timeout=args.mpi_timeout)
    except MPIUnavailable as exc:
        if rank != 0:
            # without MPI the ranks cannot agree: rank 0 says it, and the others wait for the launcher to
            # end the job when rank 0 fails (it would end it when the first process fails, rank 0
            # perhaps before it spoke); at most 30 s, in case rank 0 does not fail
            time.sleep(30.0)
        raise UserError(str(exc)) from None


def _train_parallel(args: argparse.Namespace, out: Path, parallel: Any) -> int:
    """``train`` as one rank of ``mpiexec -n N``: every rank reads the data and the run directory
    (shared by all hosts), rank 0 builds the vocabularies and alone writes into ``--out``."""
    steps = SetupSteps(parallel)
    set_threads(args.threads)
    request = request_from_args(args)
    run = RunDirectory(out, "--out")

    def checked_out() -> bool:
        check_out(run, args.resume)
        created = not out.exists()
        if parallel.is_root:
            run.check_writable()
        return created

    created = steps.run("checking --out", checked_out)
    console.say(f"data-parallel training: {parallel.size} MPI processes; rank 0 writes {out}")
    with contextlib.ExitStack() as stack:
        try:
            if parallel.is_root:
                steps.run("locking --out", lambda: stack.enter_context(run.lock()))
            else:
                steps.run("locking --out", lambda: None)
            build = resume_trainer if args.resume else new_trainer
            return _fit(build(request, out, console.say, steps), out)
        except BaseException:
            if created and parallel.is_root:
                stack.close()
                run.remove_if_unused()
            raise


def _fit(trainer: Trainer, out: Path) -> int:
    show_epoch_summaries()
    try:
        trainer.fit()
    except TrainingInterrupted as exc:
        where = f"checkpoint {exc.checkpoint}" if exc.checkpoint else "the last epoch checkpoint"
        console.say(f"{PROG} train: interrupted; {where} holds the state; continue with the same command and --resume")
        return 130
    last = trainer.history["epoch"]
    if last["epoch"]:
        summary = f"loss {last['loss'][-1]:.4f}, accuracy {last['accuracy'][-1]:.4f}"
        if last["val_loss"]:
            summary += f", validation loss {last['val_loss'][-1]:.4f}, accuracy {last['val_accuracy'][-1]:.4f}"
        if last["val_bleu"]:
            summary += f", validation BLEU {last['val_bleu'][-1]:.2f}"
        console.say(f"done after epoch {last['epoch'][-1]} ({trainer.elapsed / 60:.1f} minutes): {summary}")
    langs = trainer.data_info or {}
    console.say(
        f"model saved in {out} (translation uses {_best_name(out)}), {langs.get('src_lang', 'en')} -> "
        f'{langs.get("tgt_lang", "es")}; try: {PROG} translate --model {out} "A sentence to translate."'
    )
    return 0


def _best_name(run: Path) -> str:
    return resolve_checkpoint(run, "best").name


def add_train_parser(sub: Any) -> None:
    """``transformer-cpp train``."""
    p = sub.add_parser(
        "train",
        help="train a translation model from sentence pairs (default: Tatoeba English to Spanish)",
        description="Train a Transformer to translate from --source-lang into --target-lang "
        "(default en -> es) on sentence pairs: a tab-separated file, two aligned text files or a "
        "Tatoeba pair (see --data). A checkpoint is written "
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
        metavar="DATA",
        help="the sentence pairs: a tab-separated file (.txt, .tsv, or a .zip holding one; see --columns), "
        "two aligned files of one sentence a line 'SOURCE_FILE,TARGET_FILE', or tatoeba:LLL-eng (the "
        "manythings.org Tatoeba pair, e.g. tatoeba:fra-eng, downloaded once into the cache). Default: "
        "$TRANSFORMER_CPP_DATA, else the Tatoeba pair of the two languages from the cache, else its download",
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
        "--adaptive-threads",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="time the steps and use fewer of the --threads threads while that is faster, as when another "
        "program holds a core (the default); --no-adaptive-threads always uses them all, so that a run "
        "repeats bit for bit",
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
        "--source-lang",
        type=language_option,
        default=None,
        metavar="LANG",
        help="language to translate from: a code (en, es, fr, ja, ...) or an English name; cleaning follows "
        "it (default en)",
    )
    g.add_argument(
        "--target-lang",
        type=language_option,
        default=None,
        metavar="LANG",
        help="language to translate into (default es)",
    )
    g.add_argument(
        "--columns",
        type=columns_option,
        default=None,
        metavar="COLS",
        help="which columns of a tab-separated file hold the source and the target: the languages of its "
        "columns in order (en,es: the languages pick), or two column numbers, source then target (2,1). "
        "Default: a Tatoeba file (spa.txt, fra-eng.zip) is English then the other language; any other file "
        "is source<TAB>target",
    )
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
        help="one subword vocabulary for both languages, decoder embedding tied to the output layer",
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
        help="seed of the sample and of the train/valid/test split by source sentence (default 0)",
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
    grow = preset_recipe(DEFAULT_PRESET)["grow"]
    grown = ", ".join(f"{k} {v}" for k, v in grow["arch"].items())
    config_options(
        p.add_argument_group(
            f"architecture (default: the preset's; the {DEFAULT_PRESET} preset trains {grown} instead when a "
            f"step of that model measures fast enough for {grow['min_epochs']:g} epochs in the time budget, "
            "unless --d-model, --n-layers, --n-heads, --d-ff or --dropout is given)"
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
    add_setting(
        "average-last",
        "at the end, average the newest N checkpoints into 'averaged', as 'average --last N' does (0 or 1 = off)",
    )
    # old spellings, still accepted: each prints one line naming its replacement
    for old, new in (("--layers", "--n-layers"), ("--heads", "--n-heads")):
        deprecated_alias(p, old, new)
    deprecated_alias(p, "--tie-embeddings", "--share-embeddings", value=True)
    deprecated_alias(p, "--no-tie-embeddings", "--no-share-embeddings", value=False)
    deprecated_alias(p, "--fixed-threads", "--no-adaptive-threads", value=False)
    p.set_defaults(func=run_train)
