"""The ``transformer-cpp`` command line (also ``python -m transformer_cpp``)."""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional


def _version_text() -> str:
    from . import __version__, build_info

    info = build_info()
    lines = [f"transformer-cpp {__version__}"]
    for key in ("compiler", "build_type", "flags", "openmp", "eigen_version", "simd", "hardware_threads"):
        if key in info:
            lines.append(f"  {key:<16} {info[key]}")
    return "\n".join(lines)


def _cmd_figures(args: argparse.Namespace) -> int:
    from .plotting import save_positional_encoding_figures

    paths = save_positional_encoding_figures(args.out)
    for p in paths:
        print(p)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transformer-cpp",
        description="The Transformer of 'Attention Is All You Need' with a C++ core.",
    )
    parser.add_argument("--version", action="store_true", help="print version and build facts")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("figures", help="render the positional-encoding figures to PNG files")
    p.add_argument("--out", default="figures", help="output directory (default: figures)")
    p.set_defaults(func=_cmd_figures)
    return parser


class UserError(Exception):
    """An error the user can fix; printed as one line without a traceback."""


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(_version_text())
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (UserError, FileNotFoundError, ValueError) as exc:
        print(f"transformer-cpp {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"transformer-cpp {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
