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
from typing import Any

from ..checkpoint import TRANSLATION_KIND, check_kind, read_checkpoint_config, resolve_checkpoint
from ..config import MODEL_FIELDS, OPTIMIZER_FIELDS, option_fields, settings_of
from ..data import DataRecord
from ..distributed import MPIUnavailable, from_environment, launched_world
from ..task import (
    AUTO_PRECISION,
    DEFAULT_PRESET,
    PRESETS,
    SetupSteps,
    TrainRequest,
    finetune_trainer,
    new_trainer,
    preset_recipe,
    resume_trainer,
)
from ..training import RunDirectory, TrainConfig, Trainer, TrainingInterrupted
from .common import PROG, UserError, add_command, console, set_threads
from .config_file import add_config_option, save_run_config, train_values
from .options import add_settings, config_options, deprecated_alias, given, path_option, seconds_option

__all__ = ["add_train_parser", "check_out", "request_from_args", "run_train", "show_epoch_summaries"]

# TrainConfig's settings that train's options set, by group: the first ones beside --data and
# --out, the others with the optimiser's (the core's table, TrainConfig's last fields); the
# command itself sets threads, adaptive_threads and progress
_RUN_SETTINGS = ("init_from", "epochs", "time_budget", "threads", "adaptive_threads", "progress")
_BY_ITSELF = ("threads", "adaptive_threads", "progress")
_OPTIMIZER = tuple(f.option for f in option_fields(OPTIMIZER_FIELDS))
_OPTIMISATION = _OPTIMIZER + tuple(
    n for n, s in settings_of(TrainConfig).items() if s.option and n not in _RUN_SETTINGS + _OPTIMIZER
)


def request_from_args(args: argparse.Namespace) -> TrainRequest:
    """What the options of ``train`` ask for, by setting (the options left out are not in it)."""
    training = given(args, TrainConfig)
    return TrainRequest(
        preset=args.preset,
        data_path=args.data,
        architecture=given(args, [f.name for f in option_fields(MODEL_FIELDS)]),
        training={k: v for k, v in training.items() if k not in _BY_ITSELF},
        data=given(args, DataRecord),
        threads=args.threads,
        progress=args.progress is not False,
        adaptive_threads=args.adaptive_threads is not False,
    )


class _StandardError(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler that writes to what ``sys.stderr`` is when a line is logged, not when it was made
    (a program, or a test, may replace the stream between two commands of one process)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def show_epoch_summaries() -> None:
    """Without a progress bar, the trainer reports each epoch through its logger: show those lines."""
    log = logging.getLogger("transformer_cpp.training")
    if not any(isinstance(h, _StandardError) for h in log.handlers):
        handler = _StandardError()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
    log.setLevel(logging.INFO)


def check_out(run: RunDirectory, resume: bool, kind: str = TRANSLATION_KIND) -> None:
    """Refuse to start a run over another one or over files of the user's, to resume none, or to
    resume a run of another task than ``kind``."""
    if not resume:
        run.check_own_entries()  # a resumed run is checked once its checkpoint has been read
    existing = run.holds_run()
    if resume and not existing:
        raise UserError(f"nothing to resume: '{run.path}' holds no checkpoint")
    if not resume and existing:
        raise UserError(f"'{run.path}' already holds a run; pass --resume to continue it or choose another --out")
    if resume:  # a run of the other task says so before any data is read
        check_kind(*read_checkpoint_config(run.path, "latest"), kind)


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
            build = _builder(args)
            return _fit(_saving_config(args, build(request, out, console.say), out), out)


def _builder(args: argparse.Namespace) -> Any:
    """The task's function that builds this run's trainer: resumed, fine-tuned or new."""
    if args.resume:
        return resume_trainer
    return finetune_trainer if args.init_from is not None else new_trainer


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
            build = _builder(args)
            return _fit(_saving_config(args, build(request, out, console.say, steps), out), out)
        except BaseException:
            if created and parallel.is_root:
                stack.close()
                run.remove_if_unused()
            raise


def _saving_config(args: argparse.Namespace, trainer: Trainer, out: Path) -> Trainer:
    """``trainer``, once the options its run resolved are written into ``out`` (rank 0)."""
    if trainer.run_dir is not None:
        save_run_config("train", train_values(args, trainer, out), out)
    return trainer


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


_TRAIN_DESCRIPTION = (
    "Train a Transformer to translate from --source-lang into --target-lang "
    "(default en -> es) on sentence pairs: a tab-separated file, two aligned text files or a "
    "Tatoeba pair (see --data). A checkpoint is written "
    "after every epoch (and on Ctrl-C); the same command with --resume "
    "continues exactly. Options left out take the preset's value. Presets: "
    "quick (10 minutes), standard (about an hour), tutorial (the TensorFlow "
    "tutorial's settings), base (the paper's base model), tiny (a first run: 1.5 minutes, short sentences)."
)


def _add_train_arguments(p: argparse.ArgumentParser) -> None:
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
    add_config_option(p, "train")
    add_settings(p, TrainConfig, only=_RUN_SETTINGS, unset=True)
    p.add_argument(
        "--mpi-timeout",
        type=seconds_option,
        default=None,
        metavar="SECONDS",
        help="under mpiexec: abort every process when a collective call (a step's gradient all-reduce, "
        "the wait for rank 0's validation) takes longer (default $TRANSFORMER_CPP_MPI_TIMEOUT or 600)",
    )
    add_settings(p.add_argument_group("data"), DataRecord, owner="", unset=True)
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
                "With auto (the quick and standard presets' default), a few training steps of the model are "
                "timed in each precision when the run starts, and bf16 is kept if it is at least 1.10x faster.",
            )
        },
    )
    add_settings(
        p.add_argument_group("optimisation (default: the preset's)"), TrainConfig, only=_OPTIMISATION, unset=True
    )
    # old spellings, still accepted: each prints one line naming its replacement
    for old, new in (("--layers", "--n-layers"), ("--heads", "--n-heads")):
        deprecated_alias(p, old, new)
    deprecated_alias(p, "--tie-embeddings", "--share-embeddings", value=True)
    deprecated_alias(p, "--no-tie-embeddings", "--no-share-embeddings", value=False)
    deprecated_alias(p, "--fixed-threads", "--no-adaptive-threads", value=False)


def add_train_parser(sub: Any) -> None:
    """``transformer-cpp train``."""
    what = "train a translation model from sentence pairs (default: Tatoeba English to Spanish)"
    add_command(sub, "train", what, _TRAIN_DESCRIPTION, _add_train_arguments, run_train)
