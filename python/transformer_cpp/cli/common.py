"""What every command of ``transformer-cpp`` shares: the program name, the user-error type, the
one-line argument parser, and the console (in a data-parallel run only rank 0 speaks)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from typing import Any, Callable, Iterator, List, NoReturn, Optional

from .._runtime import build_info, set_num_threads
from .._version import __version__
from ..task import TaskError

__all__ = [
    "PROG",
    "Console",
    "Parser",
    "add_command",
    "UserError",
    "console",
    "set_threads",
    "standalone",
    "terminate_as_interrupt",
    "version_text",
]

PROG = "transformer-cpp"


class UserError(TaskError):
    """An error the user can fix; printed as one line without a traceback."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block) and exit with status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class Console:
    """Where the commands' messages go: standard error. In a data-parallel run (``mpiexec``) only
    rank 0 speaks; the other ranks still report an error of their own, prefixed with their rank."""

    def __init__(self) -> None:
        self.quiet = False
        self.rank_prefix = ""

    def as_rank(self, rank: int) -> None:
        """Speak as rank ``rank`` of a data-parallel run."""
        self.quiet = rank != 0
        self.rank_prefix = f"rank {rank}: " if rank else ""

    def say(self, message: str) -> None:
        if not self.quiet:
            print(message, file=sys.stderr, flush=True)


#: The console of this process.
console = Console()


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """A ``with`` block in which SIGTERM (``kill``) interrupts like Ctrl-C, so that the command
    removes what it was writing on the way out instead of dying with it half written (in the
    main thread; elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def set_threads(threads: Optional[int]) -> None:
    """Use ``threads`` C++ threads (None: leave the default, every core)."""
    if threads is not None:
        set_num_threads(threads)


def version_text() -> str:
    """``transformer-cpp --version``: the version and the build facts."""
    info = build_info()
    lines = [f"transformer-cpp {__version__}"]
    for key in ("compiler", "build_type", "flags", "openmp", "eigen_version", "simd", "hardware_threads"):
        if key in info:
            lines.append(f"  {key:<16} {info[key]}")
    # the instruction-set level the kernels run at (TRANSFORMER_CPP_ISA may hold it below the CPU's)
    if "isa" in info:
        cpu = info.get("isa_cpu")
        held = f" (this CPU: {cpu})" if cpu and cpu != info["isa"] else ""
        lines.append(f"  {'isa':<16} {info['isa']}{held}")
    kernels = info.get("kernels")
    if isinstance(kernels, dict) and kernels:
        lines.append(f"  {'kernels':<16} " + ", ".join(f"{k} {v}" for k, v in sorted(kernels.items())))
    return "\n".join(lines)


def add_command(
    subparsers: Any,
    name: str,
    help: str,
    description: Optional[str],
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """Register subcommand ``name`` with its options on an ``argparse`` subparsers object; sets
    ``func`` to ``run``."""
    p: argparse.ArgumentParser = subparsers.add_parser(name, help=help, description=description)
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def standalone(
    module: str,
    description: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: Optional[List[str]] = None,
) -> int:
    """``python -m <module> [options]``: a command's options and run on their own, outside
    ``transformer-cpp`` (an error it reports is one line and status 1)."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except (OSError, ValueError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
