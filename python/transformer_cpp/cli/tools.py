"""The smaller commands: ``figures`` (the positional-encoding figures), ``average`` (checkpoint
averaging) and ``export`` (CTranslate2, PyTorch, Hugging Face Transformers)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..checkpoint import AVERAGED_NAME, BEST_FILE, average_checkpoints, list_checkpoints, mark_best, refuse_foreign
from ..export import QUANTIZATIONS, export_ctranslate2, export_torch, export_transformers
from ..plotting import save_positional_encoding_figures
from .common import UserError, terminate_as_interrupt
from .options import add_model_option, count_option, path_option

__all__ = [
    "add_average_parser",
    "add_export_parser",
    "add_figures_parser",
    "run_average",
    "run_export",
    "run_figures",
]


def run_figures(args: argparse.Namespace) -> int:
    """``transformer-cpp figures``."""
    for path in save_positional_encoding_figures(args.out):
        print(path)
    return 0


def add_figures_parser(sub: Any) -> None:
    """``transformer-cpp figures``."""
    p = sub.add_parser("figures", help="render the positional-encoding figures to PNG files")
    p.add_argument(
        "--out",
        type=path_option,
        default="figures",
        help="output directory (default: figures); a file there under a figure's name that transformer-cpp did "
        "not draw is never replaced",
    )
    p.set_defaults(func=run_figures)


def add_average_parser(sub: Any) -> None:
    """``transformer-cpp average``."""
    p = sub.add_parser(
        "average",
        help="average the last checkpoints of a run into one",
        description="Average the weights of the newest N checkpoints of a run into the checkpoint "
        "'averaged' (for translating; 'latest', which --resume continues, is unchanged). An 'averaged' "
        "that is not a checkpoint (a file or directory of the user's) is never replaced.",
    )
    add_model_option(p, "run directory")
    p.add_argument(
        "--last",
        type=count_option("last", 1),
        default=5,
        help="how many of the newest checkpoints (default 5; train --average-last N does this at the end of a run)",
    )
    p.add_argument("--mark-best", action="store_true", help="point the run's 'best' at the average")
    p.set_defaults(func=run_average)


def run_average(args: argparse.Namespace) -> int:
    """``transformer-cpp average``."""
    run = Path(args.model)
    found = list_checkpoints(run)
    if len(found) < 2:
        raise UserError(f"'{run}' holds {len(found)} checkpoint(s); averaging needs at least 2")
    paths = found[-args.last :]
    # before any work: what the command replaces must be its own
    hint = "move it elsewhere to average into this run"
    refuse_foreign(run / AVERAGED_NAME, "", hint)
    if args.mark_best:
        refuse_foreign(run / BEST_FILE, "", hint)
    path, _ = average_checkpoints(paths, run)
    assert path is not None  # written, since run_dir was given
    if args.mark_best:
        mark_best(run, path.name)
    print(
        f"averaged {', '.join(p.name for p in paths)} into {path}"
        + ("; 'best' now points at it" if args.mark_best else "")
    )
    return 0


def run_export(args: argparse.Namespace) -> int:
    """``transformer-cpp export``."""
    if args.quantization is not None and args.to != "ctranslate2":
        raise UserError(
            f"--quantization is for --to ctranslate2 (the {args.to} export keeps the model's weights as they are)"
        )
    try:
        with terminate_as_interrupt():  # a killed export removes its staging directory
            if args.to == "ctranslate2":
                out = export_ctranslate2(args.model, args.out, quantization=args.quantization)
            elif args.to == "transformers":
                out = export_transformers(args.model, args.out)
            else:
                out = export_torch(args.model, args.out)
    except ImportError as exc:  # an optional dependency (its extra is named in the message)
        raise UserError(str(exc)) from None
    print(f"exported to {args.to}: {out}")
    return 0


def add_export_parser(sub: Any) -> None:
    """``transformer-cpp export``."""
    p = sub.add_parser(
        "export",
        help="export a trained model to CTranslate2, PyTorch or Hugging Face Transformers",
        description="Write the model (the run's best checkpoint) and its tokenizers for another "
        "runtime: a CTranslate2 model directory (exact in float32), a PyTorch state dict "
        "with a small module definition, transformer_torch.py, that needs no "
        "transformer-cpp, or a Hugging Face Transformers MarianMT model with its tokenizer "
        "(AutoModelForSeq2SeqLM and AutoTokenizer load it; greedy generate gives the same "
        "tokens; post-norm models only; exact for a LayerNorm epsilon of 1e-5, MarianMT's, "
        "and within a few 1e-5 in log-probability otherwise). OUT must not exist or be empty.",
    )
    add_model_option(p)
    p.add_argument(
        "--to", required=True, choices=("ctranslate2", "torch", "transformers"), help="the runtime to export for"
    )
    p.add_argument("out", type=path_option, metavar="OUT", help="the directory to write (new, or empty)")
    p.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="CTranslate2 weight type (default: float32, exact; the others are smaller and faster but not exact)",
    )
    p.set_defaults(func=run_export)
