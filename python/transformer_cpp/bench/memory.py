"""Section 4 of the benchmark: peak memory of training steps, ours (float32 and, where the CPU has
AVX512_BF16, bf16) and PyTorch's.

Each implementation runs in a fresh child process (the task ``memory`` of :mod:`.child`,
:func:`child_memory`): the peak resident set size after the imports, then after
``memory_steps`` training steps; the delta is what the model, its optimiser and its
steps cost (see :func:`peak_rss` for where the peak is read).
"""

from __future__ import annotations

import resource
import sys
from dataclasses import asdict
from typing import Any, Dict, Tuple

from .. import kernels
from .child import run_child
from .machine import log, set_all_threads
from .peers import TorchTrainer
from .shapes import BenchShapes, make_batches
from .training import build_ours

__all__ = ["MEMORY_CHILDREN", "child_memory", "measure_memory", "peak_rss"]

# what a memory child can run: our model in float32, our model in bf16 mixed precision, PyTorch's
MEMORY_CHILDREN = ("ours", "ours_bf16", "torch")


def peak_rss() -> Tuple[int, str]:
    """Peak resident set size of this process so far, in bytes, and where it was read.

    Linux: ``VmHWM`` of ``/proc/self/status``, the high-water mark of this process image. Not
    ``ru_maxrss``: Linux carries ``ru_maxrss`` across ``fork``/``exec``, so a child started by the
    (large) benchmark process would report the parent's peak. Elsewhere: ``ru_maxrss``.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024, "VmHWM"
    except OSError:
        pass
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (int(r) if sys.platform == "darwin" else int(r) * 1024), "ru_maxrss"


def child_memory(which: str, shapes: BenchShapes, threads: int, seed: int = 0) -> Dict[str, Any]:
    """Run in a fresh process: import what ``which`` needs, read the baseline peak RSS, build the
    model and optimiser, run ``shapes.memory_steps`` training steps, read the peak RSS again."""
    set_all_threads(threads)
    if which == "torch":
        import torch

        torch.set_num_threads(threads)
        from .. import torch_reference  # noqa: F401
    baseline, source = peak_rss()
    batches = make_batches(shapes, shapes.memory_steps, seed=seed + 1)
    if which in ("ours", "ours_bf16"):
        model = build_ours(shapes, seed, precision="bf16" if which == "ours_bf16" else "float32")
        for b in batches:
            model.train_step(b.src, b.tgt_in, b.tgt_out)
    elif which == "torch":
        trainer = TorchTrainer(shapes, None, seed)
        for b in batches:
            trainer.train_step(*trainer.tensors(b))
    else:
        raise ValueError(f"child_memory: expected one of {', '.join(MEMORY_CHILDREN)}, got {which!r}")
    peak, _ = peak_rss()
    return {
        "which": which,
        "baseline_mb": baseline / 2**20,
        "raw_mb": peak / 2**20,
        "delta_mb": (peak - baseline) / 2**20,
        "steps": len(batches),
        "source": source,
    }


def measure_memory(shapes: BenchShapes, threads: int, with_torch: bool, seed: int = 0) -> Dict[str, Any]:
    """Peak memory of training steps, ours (float32, and bf16 where the CPU has AVX512_BF16) and
    PyTorch's, each in its own child process."""
    out: Dict[str, Any] = {
        "method": "peak RSS (VmHWM, else ru_maxrss) of a child process after its training "
        "steps; delta = that peak - the peak after imports"
    }
    children = ["ours"] + (["ours_bf16"] if kernels.have_bf16() else []) + (["torch"] if with_torch else [])
    for which in children:
        log(f"memory: {which} in a child process")
        out[which] = run_child(
            "memory", threads, attempts=2, timeout=900, which=which, shapes=asdict(shapes), seed=seed
        )
        if "error" in out[which]:
            log(f"memory child ({which}) failed: {out[which]['error']}")
    ours_delta = out.get("ours", {}).get("delta_mb")
    torch_delta = (out.get("torch") or {}).get("delta_mb")
    # a tiny (quick) model may fit in memory the imports already touched: no ratio then
    out["ratio_delta"] = ours_delta / torch_delta if ours_delta is not None and torch_delta else None
    # the bf16 step against the float32 one: bf16 training should need no more memory than float32
    bf16_delta = (out.get("ours_bf16") or {}).get("delta_mb")
    out["ratio_bf16_delta"] = bf16_delta / ours_delta if bf16_delta is not None and ours_delta else None
    return out
