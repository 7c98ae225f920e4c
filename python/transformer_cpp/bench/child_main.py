"""The program of the benchmark's child processes (:mod:`.child`, which starts them):
``python -m transformer_cpp.bench.child_main REQUEST`` reads the JSON request, runs its task and
prints the result as one JSON line; a bad request exits with 2, naming the tasks."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence

from .attention import AttentionShapes, child_attention
from .marian_model import MarianShapes
from .marian_training import run_marian_child
from .memory import child_memory
from .mpi import child_mpi
from .per_token import GenerationShapes, XLShapes, child_generation, child_xl
from .report import jsonable
from .reversible import child_activation_memory
from .shapes import BenchShapes

__all__ = ["RUNNERS", "main"]


def _attention(kind: str, shapes: Dict[str, Any], length: int, threads: int, seed: int) -> Dict[str, Any]:
    return child_attention(kind, AttentionShapes(**shapes), length, threads, seed)


def _generation(kind: str, shapes: Dict[str, Any], threads: int, seed: int) -> Dict[str, Any]:
    return child_generation(kind, GenerationShapes(**shapes), threads, seed)


def _xl(shapes: Dict[str, Any], threads: int, seed: int) -> Dict[str, Any]:
    return child_xl(XLShapes(**shapes), threads, seed)


def _marian(which: str, model: str, shapes: Dict[str, Any], threads: int, seed: int) -> Dict[str, Any]:
    return dict(jsonable(run_marian_child(which, Path(model), MarianShapes(**shapes), threads, seed)))


def _memory(which: str, shapes: Dict[str, Any], threads: int, seed: int) -> Dict[str, Any]:
    return dict(jsonable(child_memory(which, BenchShapes(**shapes), threads, seed)))


#: The task's name -> its function (keyword arguments from the request, JSON in and out). A task
#: that returns None prints nothing (an MPI rank other than 0).
RUNNERS: Dict[str, Callable[..., Optional[Dict[str, Any]]]] = {
    "attention": _attention,
    "generation": _generation,
    "xl": _xl,
    "depth": child_activation_memory,
    "marian": _marian,
    "memory": _memory,
    "mpi": child_mpi,
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Read the request, run its task, print the result as a JSON line; 2 for a bad request."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        request = json.loads(args[0]) if len(args) == 1 else None
    except json.JSONDecodeError:
        request = None
    if not isinstance(request, dict) or request.get("task") not in RUNNERS:
        print(
            'python -m transformer_cpp.bench.child_main: expected one JSON object {"task": TASK, ...} with a task of '
            f"{', '.join(RUNNERS)}, got {' '.join(args)[:200]!r}",
            file=sys.stderr,
        )
        return 2
    result = RUNNERS[request.pop("task")](**request)
    if result is not None:
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
