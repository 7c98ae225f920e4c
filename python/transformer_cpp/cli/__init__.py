"""The ``transformer-cpp`` command line (also ``python -m transformer_cpp``).

Subcommands::

    transformer-cpp train --preset tutorial --out runs/tutorial          # English -> Spanish
    transformer-cpp train --out runs/tutorial --resume                   # continue after Ctrl-C
    transformer-cpp translate --model runs/tutorial "you should pay for it."
    echo "we have no extra money." | transformer-cpp translate --model runs/tutorial
    transformer-cpp evaluate --model runs/tutorial                       # BLEU, chrF, loss, accuracy
    transformer-cpp figures --out figures                                # positional-encoding figures
    transformer-cpp export --model runs/tutorial --to ctranslate2 out    # or --to torch (see export.py)
    transformer-cpp import Helsinki-NLP/opus-mt-en-es --out runs/opus-en-es   # a published MarianMT model
    transformer-cpp train-lm --text shakespeare --time-budget 5 --out runs/lm     # a character LM
    transformer-cpp generate --model runs/lm --prompt "ROMEO:" --max-output-tokens 200 --seed 1
    transformer-cpp evaluate-lm --model runs/lm                          # held-out bits per character

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
from typing import List, Optional

from ..distributed import PeerFailed, WeightsDrifted
from ..task import Silent
from ..training import TrainingDiverged
from .bench import add_bench_parser
from .common import PROG, Parser, UserError, console, version_text
from .lm import add_lm_parsers
from .serve import add_serve_parser
from .tools import add_average_parser, add_export_parser, add_figures_parser, add_import_parser
from .train import add_train_parser
from .translate import add_evaluate_parser, add_translate_parser

__all__ = ["PROG", "UserError", "build_parser", "main"]


def _said_by_rank_0(exc: BaseException) -> bool:
    """Whether every rank raised ``exc`` alike, so that rank 0 reports it (data parallelism)."""
    return isinstance(exc, (Silent, UserError, PeerFailed, WeightsDrifted, TrainingDiverged, KeyboardInterrupt))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``transformer-cpp`` with every subcommand."""
    parser = Parser(prog=PROG, description="The Transformer of 'Attention Is All You Need' with a C++ core.")
    parser.add_argument("--version", action="store_true", help="print version and build facts")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    add_figures_parser(sub)
    add_train_parser(sub)
    add_translate_parser(sub)
    add_evaluate_parser(sub)
    add_lm_parsers(sub)  # train-lm, generate, evaluate-lm
    add_average_parser(sub)
    add_export_parser(sub)
    add_import_parser(sub)  # a published MarianMT model as a run directory
    add_serve_parser(sub)  # the HTTP server: its dependencies are imported when it runs
    add_bench_parser(sub)  # the benchmark: PyTorch and CTranslate2 are imported when it runs
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
        print(version_text())
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
    except Silent:
        return 1
    except BrokenPipeError:  # the reader of the output has gone: not an error of the command (see main)
        raise
    except (UserError, OSError, ValueError, RuntimeError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        if not console.quiet or not _said_by_rank_0(exc):  # data parallelism: rank 0 says what all ranks met
            print(f"{PROG} {args.command}: {console.rank_prefix}error: {message}", file=sys.stderr)
        return 1
    except MemoryError as exc:
        detail = " ".join(str(exc).split())
        return _failed(
            args,
            f"error: out of memory{f' ({detail})' if detail else ''}: the sizes asked for (model, vocabulary, "
            "batch, beam or length) need more memory than there is; ask for smaller ones",
        )
    except KeyboardInterrupt:
        if not console.quiet:
            print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: one line too, but saying so
        message = " ".join(str(exc).split())
        return _failed(
            args,
            f"internal error: {type(exc).__name__}: {message} (this is a bug; run with "
            "TRANSFORMER_CPP_DEBUG=1 for the traceback, and please report it)",
        )


def _failed(args: argparse.Namespace, what: str) -> int:
    """Say ``what`` went wrong, in one line naming the command (and the rank); status 1."""
    print(f"{PROG} {args.command}: {console.rank_prefix}{what}", file=sys.stderr)
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
