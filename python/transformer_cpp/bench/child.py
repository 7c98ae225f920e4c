"""The benchmark's child processes.

A measurement that needs a process of its own (its own peak memory, its own thread count, an MPI
rank) runs as ``python -m transformer_cpp.bench.child_main REQUEST``, where REQUEST is a JSON
object, ``{"task": TASK, ...the task's arguments}``; the child prints its result as one JSON line.
:func:`run_child` starts one (under a launcher such as ``mpiexec`` when given) and returns that
result, or ``{"error": ...}`` with the last line the child wrote to its standard error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .machine import THREAD_ENV

__all__ = ["TASKS", "child_command", "run_child"]


#: What a child can be asked to do; :mod:`.child_main` runs each (its keyword arguments from the
#: request, JSON in and out).
TASKS = ("attention", "generation", "xl", "depth", "marian", "memory", "mpi")


def child_command(task: str, **arguments: Any) -> List[str]:
    """The command that runs ``task`` with ``arguments`` in a fresh Python."""
    if task not in TASKS:
        raise ValueError(f"child_command: task must be one of {', '.join(TASKS)}, got {task!r}")
    return [sys.executable, "-m", "transformer_cpp.bench.child_main", json.dumps({"task": task, **arguments})]


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
