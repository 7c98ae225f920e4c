"""``transformer-cpp bench --attention``: attention kinds side by side against the sequence length.

For each kind in :data:`KINDS` and each length, one forward and backward pass of attention over
(batch, heads, length, d_head) float32 inputs, causal, is timed and its peak memory read, each
(kind, length) in a fresh child process (the task ``attention`` of :mod:`.child`) so that the
peak is that pass's own: the resident set size high-water mark after the
pass minus the one after the imports (:func:`transformer_cpp.bench.memory.peak_rss`).

Beside that section, ``--attention`` runs three more (:func:`measure_attention_sections`): per-token
generation time against position, KV-cached softmax against linear attention's RNN form, and
Transformer-XL evaluation per token with state reuse against recomputing the window
(:mod:`transformer_cpp.bench.per_token`); activation memory against depth with and without
reversible layers (:func:`transformer_cpp.bench.reversible.bench_depth`). The JSON holds one key per
section (``attention``, ``generation``, ``depth``, ``xl``) and the report one table each
(:func:`format_attention_report`).

A kind is one entry of :data:`KINDS`: a name, whether it computes exact softmax attention, and a
function that builds its inputs for a length and returns the step that runs one forward and
backward pass. Adding a kind (another attention, another library) is adding one entry.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..layers import LinearAttention, LSHAttention, TiledAttention
from .child import run_child
from .machine import SOFTWARE, log, machine_facts, set_all_threads
from .memory import peak_rss
from .per_token import (
    FULL_GENERATION,
    FULL_XL,
    QUICK_GENERATION,
    QUICK_XL,
    GenerationShapes,
    XLShapes,
    bench_generation,
    bench_xl,
    format_generation_table,
    format_xl_table,
)
from .report import JSON_SCHEMA_VERSION, emit, jsonable
from .reversible import FULL_DEPTH, QUICK_DEPTH, DepthShapes, bench_depth, format_depth_table

__all__ = [
    "AttentionShapes",
    "Kind",
    "KINDS",
    "QUICK_ATTENTION",
    "FULL_ATTENTION",
    "bench_attention",
    "crossover",
    "format_attention_report",
    "format_attention_table",
    "measure_attention_sections",
]


@dataclass(frozen=True)
class AttentionShapes:
    """What every kind is measured at."""

    lengths: Sequence[int]
    batch: int = 1
    heads: int = 4
    d_head: int = 64
    causal: bool = True
    repeats: int = 3  # timed passes per (kind, length) after one untimed pass; the fastest is reported
    long_repeats: int = 1  # from 8,192 positions on (each pass takes seconds)


FULL_ATTENTION = AttentionShapes(lengths=(512, 1024, 2048, 4096, 8192, 16384))
QUICK_ATTENTION = AttentionShapes(lengths=(32, 96), heads=2, d_head=16, repeats=1)

Step = Callable[[], None]


@dataclass(frozen=True)
class Kind:
    """One attention kind: ``setup(shapes, length, seed)`` builds the inputs and returns the step
    (one forward and backward pass); ``memory_bytes(shapes, length)`` is a rough bound of what the
    step allocates, so that lengths that cannot fit are skipped instead of run."""

    name: str
    label: str
    exact: bool  # computes softmax attention exactly (the kinds the others are compared with)
    needs_torch: bool
    setup: Callable[[AttentionShapes, int, int], Step]
    memory_bytes: Callable[[AttentionShapes, int], float]


def _qkv(s: AttentionShapes, n: int, seed: int) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (s.batch, s.heads, n, s.d_head)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(4)]  # q, k, v, dout


def _ours(tiled: bool) -> Callable[[AttentionShapes, int, int], Step]:
    def setup(s: AttentionShapes, n: int, seed: int) -> Step:
        q, k, v, dout = _qkv(s, n, seed)
        layer = TiledAttention(tiled=tiled, dtype="float32")

        def step() -> None:
            layer.forward(q, k, v, causal=s.causal)
            layer.backward(dout)

        return step

    return setup


def _torch_sdpa(s: AttentionShapes, n: int, seed: int) -> Step:
    import torch

    q, k, v, dout = (torch.from_numpy(a) for a in _qkv(s, n, seed))
    dout_t = dout

    def step() -> None:
        qq, kk, vv = (t.detach().requires_grad_(True) for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, is_causal=s.causal)
        out.backward(dout_t)  # type: ignore[no-untyped-call]

    return step


def _linear(s: AttentionShapes, n: int, seed: int) -> Step:
    q, k, v, dout = _qkv(s, n, seed)
    layer = LinearAttention(dtype="float32")

    def step() -> None:
        layer.forward(q, k, v, causal=s.causal)
        layer.backward(dout)

    return step


# Reformer's settings of the measurement: 4 hashes, chunks of 64 positions.
LSH_HASHES = 4
LSH_CHUNK = 64


def _lsh(s: AttentionShapes, n: int, seed: int) -> Step:
    # The kernel over given heads, like the other kinds: q doubles as the shared queries and keys
    # (Reformer's shared QK), k is unused.
    qk, _, v, dout = _qkv(s, n, seed)
    kernel = LSHAttention(chunk=LSH_CHUNK, n_hashes=LSH_HASHES, seed=seed, dtype="float32")

    def step() -> None:
        kernel.forward(qk, v, causal=s.causal)
        kernel.backward(dout)

    return step


def _lsh_bytes(s: AttentionShapes, n: int) -> float:
    # per hash round, each position's window of two chunks of scores and their gradient
    return LSH_HASHES * (_linear_bytes(s, n) + 16.0 * s.batch * s.heads * n * LSH_CHUNK)


def _linear_bytes(s: AttentionShapes, n: int) -> float:
    return 16.0 * s.batch * s.heads * n * s.d_head * 4


def _plain_bytes(s: AttentionShapes, n: int) -> float:
    # the weights and their gradient (B, H, n, n) in float32 plus the mask, a byte per head and pair
    return _linear_bytes(s, n) + 9.0 * s.batch * s.heads * n * n


KINDS: Dict[str, Kind] = {
    "softmax_plain": Kind(
        "softmax_plain", f"{SOFTWARE} softmax (plain)", True, False, _ours(tiled=False), _plain_bytes
    ),
    "softmax_tiled": Kind(
        "softmax_tiled", f"{SOFTWARE} softmax (tiled)", True, False, _ours(tiled=True), _linear_bytes
    ),
    "torch_sdpa": Kind("torch_sdpa", "PyTorch SDPA", True, True, _torch_sdpa, _linear_bytes),
    "linear": Kind("linear", f"{SOFTWARE} linear", False, False, _linear, _linear_bytes),
    "lsh": Kind("lsh", f"{SOFTWARE} LSH ({LSH_HASHES} hashes)", False, False, _lsh, _lsh_bytes),
}


def child_attention(kind: str, s: AttentionShapes, n: int, threads: int, seed: int) -> Dict[str, Any]:
    """In a fresh process: set the threads, import what the kind needs, read the baseline peak,
    build the inputs, run one untimed and then the timed passes, read the peak again."""
    k = KINDS[kind]
    torch_module = None
    if k.needs_torch:
        import torch

        torch_module = torch
    set_all_threads(threads, torch_module)
    baseline, source = peak_rss()
    step = k.setup(s, n, seed)
    step()  # untimed: first-touch of buffers, lazy initialisation
    times = []
    for _ in range(s.repeats if n < 8192 else s.long_repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    peak, _ = peak_rss()
    return {
        "kind": kind,
        "length": n,
        "ms": 1000.0 * min(times),
        "ms_all": [1000.0 * t for t in times],
        "peak_mb": (peak - baseline) / 2**20,
        "baseline_mb": baseline / 2**20,
        "source": source,
    }


def _mem_available() -> Optional[float]:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def crossover(a: Mapping[int, float], b: Mapping[int, float]) -> Optional[int]:
    """The shortest length from which ``a`` takes less time than ``b`` at that and every longer
    length measured for both; None when ``a`` is not faster at the longest one (or nothing is shared)."""
    shared = sorted(set(a) & set(b))
    first = None
    for n in reversed(shared):
        if a[n] < b[n]:
            first = n
        else:
            break
    return first


def bench_attention(
    s: AttentionShapes,
    threads: int,
    kinds: Sequence[str],
    seed: int = 0,
    progress: Callable[[str], None] = lambda m: None,
) -> Dict[str, Any]:
    """Every kind at every length, each in a child process; a kind that failed or could not fit at
    a length is skipped at the longer ones. Returns the results with per-length ratios against the
    fastest (and the smallest) exact softmax kind and the crossovers."""
    out: Dict[str, Any] = {
        "method": "one forward and backward pass per (kind, length), each in a fresh process: ms = the "
        "fastest of the timed passes after one untimed pass; MB = peak RSS (VmHWM) after the passes "
        "- the peak after the imports",
        "shapes": asdict(s),
        "threads": threads,
        "dtype": "float32",
        "kinds": {k: {"label": KINDS[k].label, "exact": KINDS[k].exact} for k in kinds},
        "results": {k: {} for k in kinds},
    }
    avail = _mem_available()
    for k in kinds:
        stopped: Optional[str] = None
        for n in s.lengths:
            if stopped is not None:
                out["results"][k][str(n)] = {"skipped": stopped}
                continue
            need = KINDS[k].memory_bytes(s, n)
            if avail is not None and need > 0.4 * avail:
                stopped = f"needs about {need / 2**30:.1f} GiB, more than 40% of the {avail / 2**30:.1f} GiB available"
                out["results"][k][str(n)] = {"skipped": stopped}
                progress(f"attention: {k} at {n} skipped: {stopped}")
                continue
            progress(f"attention: {k} at length {n}")
            found = run_child("attention", threads, kind=k, shapes=asdict(s), length=n, seed=seed)
            out["results"][k][str(n)] = found
            if "error" in found:
                stopped = found["error"]
                progress(f"attention: {k} at {n} failed: {stopped}")
    # ratios against the best exact softmax kind at each length
    exact = [k for k in kinds if KINDS[k].exact]
    ratios: Dict[str, Dict[str, Dict[str, float]]] = {k: {} for k in kinds}
    for n in s.lengths:
        cells = {k: out["results"][k].get(str(n), {}) for k in kinds}
        done = {k: c for k, c in cells.items() if "ms" in c}
        best_ms = min((done[k]["ms"] for k in exact if k in done), default=None)
        best_mb = min((max(done[k]["peak_mb"], 1.0) for k in exact if k in done), default=None)
        for k, c in done.items():
            if best_ms and best_mb:
                ratios[k][str(n)] = {"time": c["ms"] / best_ms, "memory": max(c["peak_mb"], 1.0) / best_mb}
    out["ratios"] = ratios
    times = {k: {int(n): c["ms"] for n, c in out["results"][k].items() if "ms" in c} for k in kinds}
    out["crossover"] = {
        f"{a} vs {b}": crossover(times[a], times[b]) for a in kinds for b in kinds if a != b and times[a] and times[b]
    }
    return out


def format_attention_table(r: Mapping[str, Any]) -> str:
    """Length x kind: ms and MB, each with its ratio to the best exact softmax kind at that length."""
    kinds = list(r["kinds"])
    s = r["shapes"]
    head = (
        f"Attention forward+backward: batch {s['batch']}, {s['heads']} heads, d_head {s['d_head']}, "
        f"{'causal' if s['causal'] else 'not causal'}, {r['dtype']}, {r['threads']} threads "
        "(x = ratio to the best exact softmax at that length)"
    )
    width = 36
    lines = [head, "length".rjust(7) + "".join(r["kinds"][k]["label"].rjust(width) for k in kinds)]
    for n in s["lengths"]:
        row = str(n).rjust(7)
        for k in kinds:
            c = r["results"][k].get(str(n), {})
            if "ms" in c:
                q = r["ratios"][k].get(str(n))
                cell = f"{c['ms']:.1f} ms / {c['peak_mb']:.0f} MB"
                if q:
                    cell = f"{c['ms']:.1f} ms {q['time']:.2f}x / {c['peak_mb']:.0f} MB {q['memory']:.1f}x"
            else:
                cell = "skipped" if "skipped" in c else "failed"
            row += "  " + cell.rjust(width - 2)
        lines.append(row)
    cross = {pair: n for pair, n in r.get("crossover", {}).items() if n is not None}
    if cross:
        lines.append("faster from this length on: " + ", ".join(f"{p}: {n}" for p, n in sorted(cross.items())))
    return "\n".join(lines)


def measure_attention_sections(
    threads: int,
    seed: int = 0,
    with_torch: bool = True,
    attention: Optional[AttentionShapes] = FULL_ATTENTION,
    generation: Optional[GenerationShapes] = FULL_GENERATION,
    depth: Optional[DepthShapes] = FULL_DEPTH,
    xl: Optional[XLShapes] = FULL_XL,
    progress: Callable[[str], None] = log,
) -> Dict[str, Any]:
    """The results of ``bench --attention`` at the given shapes (a section given as None is left
    out): the machine, then ``attention``, ``generation``, ``depth`` and ``xl``; JSON-ready."""
    notes: List[str] = []
    results: Dict[str, Any] = {
        "schema": JSON_SCHEMA_VERSION,
        "threads": threads,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine_facts(),
        "notes": notes,
    }
    if attention is not None:
        kinds = [k for k, kind in KINDS.items() if with_torch or not kind.needs_torch]
        if not with_torch:
            notes.append("PyTorch SDPA skipped: PyTorch not available or disabled with --no-torch")
        results["attention"] = bench_attention(attention, threads, kinds, seed, progress)
    if generation is not None:
        results["generation"] = bench_generation(generation, threads, seed, progress)
    if depth is not None:
        results["depth"] = bench_depth(depth, threads, progress)
    if xl is not None:
        results["xl"] = bench_xl(xl, threads, seed, progress)
    try:
        results["machine"]["load_average_end"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        pass
    return dict(jsonable(results))


def format_attention_report(results: Mapping[str, Any]) -> str:
    """One table per section present in ``results``, the machine and date first, the notes last."""
    m = results.get("machine", {})
    parts = [f"{m.get('cpu', 'unknown CPU')}, {m.get('cores', '?')} cores, {results.get('date', '')}"]
    formats = (
        ("attention", format_attention_table),
        ("generation", format_generation_table),
        ("depth", format_depth_table),
        ("xl", format_xl_table),
    )
    parts += [fmt(results[key]) for key, fmt in formats if key in results]
    parts += [f"note: {n}" for n in results.get("notes", [])]
    return "\n\n".join(parts)


def run_attention_bench(threads: int, quick: bool, seed: int, with_torch: bool, json_to: Optional[str]) -> int:
    """``bench --attention``: measure every section, print the tables, write JSON like the bench."""
    if quick:
        results = measure_attention_sections(
            threads, seed, with_torch, QUICK_ATTENTION, QUICK_GENERATION, QUICK_DEPTH, QUICK_XL
        )
    else:
        results = measure_attention_sections(threads, seed, with_torch)
    results = {"quick": quick, **results}
    emit(results, format_attention_report(results), json_to)
    return 0
