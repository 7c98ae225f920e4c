"""Section 4b of the benchmark: a busy machine, one core taken by another program.

A CPU hog (:func:`start_hog`, a bounded busy loop in another process) holds one core while
training steps and greedy-decoding batches run at 1 thread, at all threads fixed and at all
threads governed by :class:`transformer_cpp._runtime.ThreadGovernor` (what ``train`` and
``Translator`` do), taking turns in blocks.
"""

from __future__ import annotations

import functools
import itertools
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List

import numpy as np

from .._runtime import set_num_threads
from .._runtime import ThreadGovernor
from .machine import log
from .shapes import END_ID, START_ID, BenchShapes, make_batches, pad, random_sentences
from .training import build_ours

__all__ = ["BUSY_BLOCK", "bench_busy", "start_hog"]


BUSY_BLOCK = 4  # busy-machine section: units per setting before the next setting takes over
HOG_SOURCE = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def start_hog(seconds: float) -> "subprocess.Popen[bytes]":
    """A busy loop in another process that ends by itself after ``seconds`` (and is killed by the
    caller when the measurement ends first): one core taken, like a build or a browser tab."""
    return subprocess.Popen([sys.executable, "-c", HOG_SOURCE.format(seconds=float(seconds))])


def bench_busy(shapes: BenchShapes, threads: int, seed: int = 0) -> Dict[str, Any]:
    """Training steps and greedy-decoding batches (32 sentences) with a CPU hog holding one core:
    1 thread, ``threads`` fixed (every loop split in equal shares, so all wait for the thread that
    shares the hog's core) and ``threads`` governed (:class:`ThreadGovernor`, what ``train`` and
    ``Translator`` do). The three take turns in blocks of ``BUSY_BLOCK`` units; the first
    ``busy_settle`` units of each, and the first unit of every block, are not timed (the governor
    finds its count in the settling ones; a real run has thousands)."""
    model = build_ours(shapes, seed)
    batches = make_batches(shapes, shapes.busy_settle + shapes.busy_steps, seed=seed + 5)
    rng = np.random.default_rng(seed + 6)
    count = shapes.busy_settle + shapes.busy_steps
    sources = [
        pad(random_sentences(rng, 32, shapes.src_vocab, shapes.min_length, shapes.max_length)) for _ in range(count)
    ]
    out: Dict[str, Any] = {"threads": threads, "settle": shapes.busy_settle, "steps": shapes.busy_steps}
    hog = start_hog(600.0)
    try:
        time.sleep(0.3)
        for kind in ("training", "decoding"):
            governor = ThreadGovernor(threads)
            times: Dict[str, List[float]] = {"1": [], "fixed": [], "governed": []}
            chosen: List[int] = []
            # blocks of BUSY_BLOCK units per setting, each block of settings in another of the six
            # orders (who follows whom matters: the scheduler moves threads between the hog's core
            # and the free one with a delay); the first unit of a block is not timed
            orders = list(itertools.permutations(("1", "fixed", "governed")))
            for block, start in enumerate(range(0, count, BUSY_BLOCK)):
                for name in orders[block % len(orders)]:
                    for i in range(start, min(start + BUSY_BLOCK, count)):
                        if kind == "training":
                            b = batches[i]
                            work = float(b.src.size + b.tgt_in.size)
                            unit: Callable[[], Any] = functools.partial(model.train_step, b.src, b.tgt_in, b.tgt_out)
                        else:
                            src = sources[i]
                            work = float(src.size)
                            unit = functools.partial(model.greedy_decode, src, START_ID, END_ID, shapes.max_length)
                        n = {"1": 1, "fixed": threads, "governed": governor.threads}[name]
                        set_num_threads(n)
                        t0 = time.perf_counter()
                        result = unit()
                        seconds = time.perf_counter() - t0
                        if kind == "decoding":  # as Translator counts it: source + output tokens
                            work += float(np.count_nonzero(np.asarray(result)))
                        if name == "governed":
                            chosen.append(n)
                            governor.record(seconds, work)
                        if i >= shapes.busy_settle and i > start:
                            times[name].append(seconds)
                log(
                    f"busy machine, {kind} units {start + 1}-{min(start + BUSY_BLOCK, count)}/{count}"
                    + "".join(f"  {k} {v[-1]:.3f}s" for k, v in times.items() if v)
                )
            one = statistics.median(times["1"])
            out[kind] = {
                "seconds_1": one,
                "seconds_fixed": statistics.median(times["fixed"]),
                "seconds_governed": statistics.median(times["governed"]),
                "fixed_vs_1": one / statistics.median(times["fixed"]),
                "governed_vs_1": one / statistics.median(times["governed"]),
                "governed_threads": chosen,
                "unit": "training step" if kind == "training" else "greedy batch of 32",
            }
    finally:
        hog.kill()
        hog.wait()
        set_num_threads(threads)
    return out
