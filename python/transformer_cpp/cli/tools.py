"""The smaller commands: ``figures`` (the positional-encoding figures), ``average`` (checkpoint
averaging), ``export`` (CTranslate2, PyTorch, Hugging Face Transformers) and ``import`` (a
published MarianMT model as a run directory)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..checkpoint import AVERAGED_NAME, BEST_FILE, average_checkpoints, list_checkpoints, mark_best, refuse_foreign
from ..export import QUANTIZATIONS, export_ctranslate2, export_torch, export_transformers
from ..plotting import save_positional_encoding_figures
from ..pretrained import PROVENANCE_FILE, import_pretrained
from .common import UserError, add_command, terminate_as_interrupt
from .options import add_model_option, count_option, path_option

__all__ = [
    "add_average_parser",
    "add_export_parser",
    "add_figures_parser",
    "add_import_parser",
    "run_average",
    "run_export",
    "run_figures",
    "run_import",
]


_AVERAGE_DESCRIPTION = (
    "Average the weights of the newest N checkpoints of a run into the checkpoint "
    "'averaged' (for translating; 'latest', which --resume continues, is unchanged). An 'averaged' "
    "that is not a checkpoint (a file or directory of the user's) is never replaced."
)

_EXPORT_DESCRIPTION = (
    "Write the model (the run's best checkpoint) and its tokenizers for another "
    "runtime: a CTranslate2 model directory (exact in float32), a PyTorch state dict "
    "with a small module definition, transformer_torch.py, that needs no "
    "transformer-cpp, or a Hugging Face Transformers MarianMT model with its tokenizer "
    "(AutoModelForSeq2SeqLM and AutoTokenizer load it; greedy generate gives the same "
    "tokens; post-norm models only; exact for a LayerNorm epsilon of 1e-5, MarianMT's, "
    "and within a few 1e-5 in log-probability otherwise). OUT must not exist or be empty."
)

_IMPORT_DESCRIPTION = (
    "Read a Hugging Face MarianMT model (a local directory, or a Hub name such as "
    "Helsinki-NLP/opus-mt-en-es from the Hugging Face cache, else downloaded) and write it as a run "
    "directory that translate, evaluate and export read like a trained run. Where it came from "
    f"(the files' sha256) and its license are recorded in {PROVENANCE_FILE} in the run. No pickled "
    "code is executed. A directory written by 'transformer-cpp export --to transformers' is read back as "
    "the run it was exported from. Fine-tune the imported run with 'train --init-from RUN'."
)


def run_figures(args: argparse.Namespace) -> int:
    """``transformer-cpp figures``."""
    for path in save_positional_encoding_figures(args.out):
        print(path)
    return 0


def _add_figures_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        type=path_option,
        default="figures",
        help="output directory (default: figures); a file there under a figure's name that transformer-cpp did "
        "not draw is never replaced",
    )


def add_figures_parser(sub: Any) -> None:
    """``transformer-cpp figures``."""
    what = "render the positional-encoding figures to PNG files"
    add_command(sub, "figures", what, None, _add_figures_arguments, run_figures)


def _add_average_arguments(p: argparse.ArgumentParser) -> None:
    add_model_option(p, "run directory")
    p.add_argument(
        "--last",
        type=count_option("last", 1),
        default=5,
        help="how many of the newest checkpoints (default 5; train --average-last N does this at the end of a run)",
    )
    p.add_argument("--mark-best", action="store_true", help="point the run's 'best' at the average")


def add_average_parser(sub: Any) -> None:
    """``transformer-cpp average``."""
    what = "average the last checkpoints of a run into one"
    add_command(sub, "average", what, _AVERAGE_DESCRIPTION, _add_average_arguments, run_average)


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


def _add_export_arguments(p: argparse.ArgumentParser) -> None:
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


def add_export_parser(sub: Any) -> None:
    """``transformer-cpp export``."""
    what = "export a trained model to CTranslate2, PyTorch or Hugging Face Transformers"
    add_command(sub, "export", what, _EXPORT_DESCRIPTION, _add_export_arguments, run_export)


def run_import(args: argparse.Namespace) -> int:
    """``transformer-cpp import``."""
    try:
        path = import_pretrained(args.source, args.out, src_lang=args.source_lang, tgt_lang=args.target_lang)
    except ImportError as exc:  # huggingface_hub (a Hub name) or PyTorch (pytorch_model.bin)
        raise UserError(str(exc)) from None
    cfg = load_provenance(Path(args.out))
    print(f"imported {args.source} into {path} (license: {cfg.get('license', 'unknown')}; see {PROVENANCE_FILE})")
    return 0


def load_provenance(run: Path) -> dict:  # type: ignore[type-arg]
    """The provenance record of an imported run (empty when unreadable)."""
    import json

    try:
        found = json.loads((run / PROVENANCE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _add_import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "source",
        metavar="SOURCE",
        help="a MarianMT directory (an export of this package too) or a Hugging Face Hub name",
    )
    p.add_argument("--out", type=path_option, required=True, help="the run directory to write (new)")
    p.add_argument(
        "--source-lang",
        default=None,
        help="language of the input (default: the model's tokenizer_config.json, else an opus-mt-xx-yy name)",
    )
    p.add_argument(
        "--target-lang",
        default=None,
        help="language of the output (default: the model's tokenizer_config.json, else an opus-mt-xx-yy name)",
    )


def add_import_parser(sub: Any) -> None:
    """``transformer-cpp import``."""
    what = "import a published MarianMT (OPUS-MT) model as a run directory"
    add_command(sub, "import", what, _IMPORT_DESCRIPTION, _add_import_arguments, run_import)
