"""``transformer-cpp bench`` and ``python -m transformer_cpp.bench``: the options, generated from
:class:`~transformer_cpp.bench.BenchSettings`, of :func:`~transformer_cpp.bench.run_bench`."""

from __future__ import annotations

import argparse
from typing import Any, List, Optional

from ..bench import BENCH_DESCRIPTION, BenchSettings, run_bench
from .common import add_command, standalone
from .options import add_settings

__all__ = ["add_bench_parser", "main"]


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_settings(p, BenchSettings, owner="")


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``bench`` subcommand on an ``argparse`` subparsers object; sets ``func``."""
    what = "benchmark the C++ core against PyTorch (and CTranslate2)"
    return add_command(subparsers, "bench", what, BENCH_DESCRIPTION, _add_arguments, run_bench)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m transformer_cpp.bench [options]`` (the options of ``transformer-cpp bench``)."""
    return standalone("transformer_cpp.bench", BENCH_DESCRIPTION, _add_arguments, run_bench, argv)
