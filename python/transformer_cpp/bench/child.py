"""The benchmark's child processes.

A measurement that needs a process of its own (its own peak memory, its own thread count, an MPI
rank) runs as ``python -m transformer_cpp.bench.child REQUEST``, where REQUEST is a JSON object,
``{"task": TASK, ...the task's arguments}``; the child prints its result as one JSON line.
:func:`run_child` starts one (under a launcher such as ``mpiexec`` when given) and returns that
result, or ``{"error": ...}`` with the last line the child wrote to its standard error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from .machine import THREAD_ENV

__all__ = ["TASKS", "child_command", "main", "run_child"]


def _attention(kind: str, shapes: Dict[str, Any], length: int, threads: int, seed: int) -> Dict[str, Any]:
    from .attention import AttentionShapes, child_attention

    return child_attention(kind, AttentionShapes(**shapes), length, threads, seed)


def _generation(kind: str, shapes: Dict[str, Any], threads: int, seed: int) -> Dict[str, Any]:
    from .per_token import GenerationShapes, child_generation

    return child_generation(kind, GenerationShapes(**shapes), threads, seed)


def _xl(shapes: Dict[str, Any], threads: int, seed: int) -> Dict[str, Any]:
    from .per_token import XLShapes, child_xl

    return child_xl(XLShapes(**shapes), threads, seed)


def _depth(threads: int, **arguments: Any) -> Dict[str, Any]:
    from .reversible import child_activation_memory

    return child_activation_memory(threads=threads, **arguments)


def _marian(which: str, model: str, shapes: Dict[str, Any], threads: int, seed: int) -> Dict[str, Any]:
    from .marian_model import MarianShapes
    from .marian_training import run_marian_child
    from .report import jsonable

    return dict(jsonable(run_marian_child(which, Path(model), MarianShapes(**shapes), threads, seed)))


def _memory(which: str, shapes: Dict[str, Any], threads: int, seed: int) -> Dict[str, Any]:
    from .memory import child_memory
    from .report import jsonable
    from .shapes import BenchShapes

    return dict(jsonable(child_memory(which, BenchShapes(**shapes), threads, seed)))


def _mpi(mode: str, quick: bool, steps: int, warmup: int, threads: int, seed: int) -> Optional[Dict[str, Any]]:
    from .mpi import child_mpi

    return child_mpi(mode, quick, steps, warmup, threads, seed)


#: What a child can be asked to do: the task's name -> its function (keyword arguments from the
#: request, JSON in and out). A task that returns None prints nothing (an MPI rank other than 0).
TASKS: Dict[str, Callable[..., Optional[Dict[str, Any]]]] = {
    "attention": _attention,
    "generation": _generation,
    "xl": _xl,
    "depth": _depth,
    "marian": _marian,
    "memory": _memory,
    "mpi": _mpi,
}


def child_command(task: str, **arguments: Any) -> List[str]:
    """The command that runs ``task`` with ``arguments`` in a fresh Python."""
    if task not in TASKS:
        raise ValueError(f"child_command: task must be one of {', '.join(TASKS)}, got {task!r}")
    return [sys.executable, "-m", "transformer_cpp.bench.child", json.dumps({"task": task, **arguments})]


def run_child(
    task: str,
    threads: int,
    *,
    launcher: Sequence[str] = (),
    env: Optional[Mapping[str, str]] = None,
    timeout: float = 3600.0,
    attempts: int = 1,
    **arguments: Any,
) -> Dict[str, Any]:
    """Run ``task`` in a child process with every thread variable set to ``threads`` (the task's
    own ``threads`` argument too), ``env`` added to this process's environment, after ``launcher``
    (``mpiexec -n 2 ...``); its last JSON line, or ``{"error": "child exited with N: <its last
    line>"}`` after ``attempts`` tries (a second one rides out, e.g., an editable rebuild that raced
    a source edit)."""
    environment = dict(os.environ)
    environment.update(env or {})
    for key in THREAD_ENV:
        environment[key] = str(threads)
    cmd = [*launcher, *child_command(task, threads=threads, **arguments)]
    found: Dict[str, Any] = {}
    for _ in range(max(1, attempts)):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=environment, timeout=timeout)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode == 0 and lines:
            return dict(json.loads(lines[-1]))
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        found = {"error": f"child exited with {proc.returncode}: {last[:300]}"}
    return found


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Read the request, run its task, print the result as a JSON line; 2 for a bad request."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        request = json.loads(args[0]) if len(args) == 1 else None
    except json.JSONDecodeError:
        request = None
    if not isinstance(request, dict) or request.get("task") not in TASKS:
        print(
            'python -m transformer_cpp.bench.child: expected one JSON object {"task": TASK, ...} with a task of '
            f"{', '.join(TASKS)}, got {' '.join(args)[:200]!r}",
            file=sys.stderr,
        )
        return 2
    result = TASKS[request.pop("task")](**request)
    if result is not None:
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
