"""Per-token time of ``transformer-cpp bench --attention``: generation and Transformer-XL evaluation.

**Generation** (:func:`bench_generation`): the decoder-only :class:`~transformer_cpp.model.LanguageModel`
generating one token at a time, ``start_generation`` then ``generation_step`` at positions 1 ... N,
with softmax attention (each step attends to a key/value cache that grows by one position: its
time grows with the position) against linear attention's RNN form (each step updates a state of
fixed size, ``S`` (d_head, d_head) and ``z`` (d_head) per head: the same time at every position).
The model has one block, ``d_model`` 256, 4 heads of ``d_head`` 64 and ``d_ff`` 1024, and a
vocabulary of 64 characters: one block because the attention is what differs between the two and
every further block adds the same attention work again; ``d_head`` 64 as the papers; a small
vocabulary so that the output projection (the same for both) does not hide the attention.

A step takes tens of microseconds, and on a shared machine the other tenants slow whole stretches
of a run, for a second or more, by 10-50%: long enough that the fastest of several runs can still
be slow at some positions and not at others, which would read as growth. So every step is paired
with a step of a *partner*, an identical model whose generation restarts every ``window`` steps
(it stays at positions 1 ... ``window``), timed right after it: both see the same spell. In each
run, a position's ratio is the fastest of the ``window`` steps around it over the fastest of
their partners; over the ``repeats`` runs the median ratio, times the partner's fastest step of
all, is the time at that position: what the step costs when nothing else interferes, with any
growth of its work (the key/value cache's) kept. ``flatness`` is the largest over the smallest of
those per-position times; the total is the time of the first ``total_steps`` steps of the fastest
run, partners not counted.

**Transformer-XL evaluation** (:func:`bench_xl`): a :class:`~transformer_cpp.layers.RelativeMultiHeadAttention`
layer evaluating one new token with an attention length of ``length`` positions. With state
reuse (``infer_reset``, ``infer_memory``, then ``infer`` per token) the new token's query attends to
the ``length - 1`` cached keys and values and itself; recomputing, as a model without a memory must,
runs the forward over the whole window of ``length`` positions for every new token. The reuse time
is the median of the tokens of a run after its first (which builds the layer's table of projected
relative positions, once per evaluation of a text); the recompute time is one window's forward.
Each is the fastest of ``repeats`` runs; ``speedup`` is recompute over reuse.

Each kind runs in a fresh child process (the tasks ``generation`` and ``xl`` of :mod:`.child`)
with the thread count set before anything runs, and also reports the peak resident memory it added (a key/value cache grows with the position, an RNN
state does not; for generation the figure includes the partner model and its state of ``window``
positions, the same for both kinds).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np

from ..layers import RelativeMultiHeadAttention
from ..model import LanguageModel
from .child import run_child
from .machine import set_all_threads
from .memory import peak_rss
from .report import section

__all__ = [
    "GENERATION_KINDS",
    "FULL_GENERATION",
    "FULL_XL",
    "GenerationShapes",
    "QUICK_GENERATION",
    "QUICK_XL",
    "XLShapes",
    "bench_generation",
    "bench_xl",
    "flatness",
    "format_generation_table",
    "format_xl_table",
    "paired_per_position",
    "per_position",
]

# the attention of the language model's blocks -> the label of its generation step
GENERATION_KINDS = {"softmax": "softmax (KV cache)", "linear": "linear (RNN state)"}


@dataclass(frozen=True)
class GenerationShapes:
    """What the generation comparison measures (see the module docstring for why these shapes)."""

    positions: Sequence[int] = (1, 64, 512, 1024, 2048, 4096)  # reported; the run generates up to the last
    total_steps: int = 3072  # the total time is over the first this many steps
    d_model: int = 256
    heads: int = 4
    d_ff: int = 1024
    vocab: int = 64
    window: int = 64  # steps around a position, and the partner's positions (see the module docstring)
    curve_points: int = 64  # positions of the per-token curve kept in the results (for a figure)
    # full runs, each position's ratio to its partners the median of them (about 4 s for linear
    # attention, 10 s for softmax)
    repeats: int = 9


@dataclass(frozen=True)
class XLShapes:
    """What the Transformer-XL comparison measures: one layer, one new token at a time."""

    length: int = 512  # attention length: the cached positions and the new one, or the recomputed window
    d_model: int = 256
    heads: int = 4
    tokens: int = 64  # new tokens evaluated with state reuse per run (the first one untimed)
    recomputes: int = 3  # window forwards per run
    repeats: int = 3


FULL_GENERATION = GenerationShapes()
QUICK_GENERATION = GenerationShapes(
    positions=(1, 8, 32), total_steps=24, d_model=32, heads=2, d_ff=64, vocab=16, window=4, curve_points=8, repeats=1
)
FULL_XL = XLShapes()
QUICK_XL = XLShapes(length=32, d_model=32, heads=2, tokens=5, recomputes=1, repeats=1)


def _window(n: int, p: int, window: int) -> slice:
    """The ``window`` steps centred on (1-based) position ``p``, shifted to stay within ``n`` steps."""
    w = min(window, n)
    start = min(max(p - 1 - w // 2, 0), n - w)
    return slice(start, start + w)


def per_position(
    step_us: Union[Sequence[float], np.ndarray], positions: Sequence[int], window: int
) -> Dict[int, float]:
    """The time at each (1-based) position: the fastest of the ``window`` steps centred on it,
    shifted to stay within the run (``step_us[i]`` is the step at position ``i + 1``)."""
    n = len(step_us)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    out: Dict[int, float] = {}
    for p in positions:
        if not 1 <= p <= n:
            raise ValueError(f"position {p} is outside the run's positions 1 ... {n}")
        out[int(p)] = float(np.min(np.asarray(step_us[_window(n, p, window)], dtype=float)))
    return out


def paired_per_position(
    runs_us: np.ndarray, partners_us: np.ndarray, positions: Sequence[int], window: int
) -> Dict[int, float]:
    """The time at each position from runs (repeats, n) whose every step was timed beside a
    partner's step (same shape): per run the fastest step of the window around the position over
    the fastest partner step of the same window, the median of that ratio over the runs, times the
    fastest partner step of all."""
    runs_us, partners_us = np.asarray(runs_us, dtype=float), np.asarray(partners_us, dtype=float)
    if runs_us.ndim != 2 or runs_us.shape != partners_us.shape:
        raise ValueError(
            f"runs and partners must be (repeats, steps) of one shape, got {runs_us.shape} and {partners_us.shape}"
        )
    own = [per_position(r, positions, window) for r in runs_us]
    partner = [per_position(r, positions, window) for r in partners_us]
    best = float(partners_us.min())
    return {p: float(np.median([o[p] / q[p] for o, q in zip(own, partner)])) * best for p in own[0]}


def flatness(times: Mapping[Any, float]) -> Optional[float]:
    """The largest time over the smallest (1.0: the same time everywhere); None without positive times."""
    values = [float(t) for t in times.values()]
    if not values or min(values) <= 0:
        return None
    return max(values) / min(values)


def _curve_positions(n: int, points: int) -> List[int]:
    return sorted({int(round(p)) for p in np.linspace(1, n, max(points, 2))})


def child_generation(kind: str, s: GenerationShapes, threads: int, seed: int = 0) -> Dict[str, Any]:
    """In a fresh process: ``repeats`` generation runs of ``max(positions)`` steps with a one-block
    language model of attention ``kind``, each step paired with a partner's (see the module
    docstring); the time at each position, the fastest run's total."""
    if kind not in GENERATION_KINDS:
        raise ValueError(f"kind must be one of {', '.join(GENERATION_KINDS)}, got {kind!r}")
    set_all_threads(threads)
    baseline, source = peak_rss()
    n = max(s.positions)
    if s.total_steps > n:
        raise ValueError(f"total_steps ({s.total_steps}) must not exceed the last position ({n})")
    if s.window < 1:
        raise ValueError(f"window must be >= 1, got {s.window}")

    def build() -> LanguageModel:
        return LanguageModel(
            s.vocab,
            d_model=s.d_model,
            n_layers=1,
            n_heads=s.heads,
            d_ff=s.d_ff,
            dropout=0.0,
            attention=kind,
            max_len=n,
            seed=seed,
        )

    model, partner = build(), build()  # the partner restarts every window steps: positions 1 ... window
    w = min(s.window, n)
    tokens = np.random.default_rng(seed).integers(1, s.vocab, size=(n, 1)).astype(np.int64)
    model.start_generation(1, n)  # untimed: first touch of the caches, lazy initialisation
    partner.start_generation(1, w)
    for i in range(w):
        model.generation_step(tokens[i])
        partner.generation_step(tokens[i])
    curve_at = _curve_positions(n, s.curve_points)
    runs = np.empty((s.repeats, n))
    partners = np.empty((s.repeats, n))
    for r in range(s.repeats):
        model.start_generation(1, n)
        for i in range(n):
            if i % w == 0:
                partner.start_generation(1, w)
            t0 = time.perf_counter()
            model.generation_step(tokens[i])
            t1 = time.perf_counter()
            partner.generation_step(tokens[i % w])
            t2 = time.perf_counter()
            runs[r, i] = 1e6 * (t1 - t0)
            partners[r, i] = 1e6 * (t2 - t1)
    best = paired_per_position(runs, partners, s.positions, w)
    curve = paired_per_position(runs, partners, curve_at, w)
    fastest = {p: min(per_position(run, [p], w)[p] for run in runs) for p in s.positions}
    totals = [float(run[: s.total_steps].sum()) / 1000.0 for run in runs]
    peak, _ = peak_rss()
    return {
        "kind": kind,
        "us_per_token": {str(p): t for p, t in best.items()},
        "fastest_us_per_token": {str(p): t for p, t in fastest.items()},  # unpaired: the fastest step around it
        "partner_us": float(partners.min()),
        "curve_us": [[p, t] for p, t in sorted(curve.items())],
        "flatness": flatness(best),
        "total_ms": min(totals),
        "total_ms_all": totals,
        "peak_mb": (peak - baseline) / 2**20,
        "source": source,
    }


def child_xl(s: XLShapes, threads: int, seed: int = 0) -> Dict[str, Any]:
    """In a fresh process: per-token time of a relative-attention layer at attention length
    ``s.length``, recomputing the window against reusing the cached state."""
    set_all_threads(threads)
    baseline, source = peak_rss()
    layer = RelativeMultiHeadAttention(s.d_model, s.heads, seed=seed)
    rng = np.random.default_rng(seed)
    if s.tokens < 2 or s.length < 2:
        raise ValueError(f"XLShapes needs tokens >= 2 and length >= 2, got {s.tokens} and {s.length}")
    seq = rng.standard_normal((1, s.length - 1 + s.tokens, s.d_model)).astype(np.float32)  # memory, then tokens
    memory = seq[:, : s.length - 1]

    def recompute() -> float:
        t0 = time.perf_counter()
        layer.forward(seq[:, s.tokens - 1 : s.tokens - 1 + s.length])  # the window ending at the last token
        return time.perf_counter() - t0

    def reuse() -> float:
        layer.infer_reset(1, s.length - 1)
        layer.infer_memory(memory)
        layer.infer(seq[:, s.length - 1 : s.length])  # untimed: builds the table of W_{k,R} R once
        times = []
        for i in range(s.length, s.length - 1 + s.tokens):
            t0 = time.perf_counter()
            layer.infer(seq[:, i : i + 1])
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    recompute()  # untimed
    reuse()
    recompute_s = min(recompute() for _ in range(s.repeats * s.recomputes))
    reuse_s = min(reuse() for _ in range(s.repeats))
    peak, _ = peak_rss()
    return {
        "recompute_ms": 1000.0 * recompute_s,
        "reuse_ms": 1000.0 * reuse_s,
        "speedup": recompute_s / reuse_s if reuse_s > 0 else None,
        "peak_mb": (peak - baseline) / 2**20,
        "source": source,
    }


def _opening(method: str, s: Any, threads: int) -> Dict[str, Any]:
    """The first entries of a section's results: how it measures, its shapes and their head width,
    the threads and the dtype."""
    return {
        "method": method,
        "shapes": asdict(s),
        "d_head": s.d_model // s.heads,
        "threads": threads,
        "dtype": "float32",
    }


def bench_generation(
    s: GenerationShapes, threads: int, seed: int = 0, progress: Callable[[str], None] = lambda m: None
) -> Dict[str, Any]:
    """Both kinds, each in a child process; ``speedup``: softmax's total time over linear's."""
    out: Dict[str, Any] = {
        **_opening(
            "a one-block language model generating one token per step at positions 1 ... N, each "
            "kind in a fresh process: each step paired with a partner's step at positions 1 ... window; us per token = the median over the runs of the fastest step around the position over its partners' fastest, times the partners' fastest step; flatness = the largest of those over the smallest; total = the first total_steps "
            "steps of the fastest run",
            s,
            threads,
        ),
        "kinds": dict(GENERATION_KINDS),
        "results": {},
    }
    for kind in GENERATION_KINDS:
        progress(f"generation: {kind}, {max(s.positions)} steps x {s.repeats}")
        out["results"][kind] = run_child("generation", threads, kind=kind, shapes=asdict(s), seed=seed)
    soft, lin = out["results"]["softmax"], out["results"]["linear"]
    out["speedup"] = soft["total_ms"] / lin["total_ms"] if "total_ms" in soft and "total_ms" in lin else None
    return out


def bench_xl(
    s: XLShapes, threads: int, seed: int = 0, progress: Callable[[str], None] = lambda m: None
) -> Dict[str, Any]:
    """Recompute against state reuse in one child process."""
    progress(f"Transformer-XL evaluation at attention length {s.length}")
    out = _opening(
        "one relative-attention layer, one new token: reuse = infer over the cached keys and values "
        "(the median of the tokens of a run after its first, which builds the table of projected relative "
        "positions), recompute = forward over the whole window; the fastest of the runs",
        s,
        threads,
    )
    out.update(run_child("xl", threads, shapes=asdict(s), seed=seed))
    return out


def format_generation_table(r: Mapping[str, Any]) -> str:
    """Position x kind: microseconds per token, and linear's speedup; flatness and the totals below."""
    s = r["shapes"]
    kinds = list(r["kinds"])
    head = (
        f"Generation per token: 1 block, d_model {s['d_model']}, {s['heads']} heads, d_head {r['d_head']}, "
        f"d_ff {s['d_ff']}, vocabulary {s['vocab']}, {r['dtype']}, {r['threads']} threads "
        f"(us per token: the fastest of {s['window']} steps around the position, relative to a partner's steps at positions 1-{s['window']} timed beside them, median of {s['repeats']} runs)"
    )
    width = 22
    label = 22
    lines = [
        head,
        "position".rjust(label) + "".join(r["kinds"][k].rjust(width) for k in kinds) + "softmax/linear".rjust(16),
    ]
    res = r["results"]

    def cell(kind: str, p: str) -> Optional[float]:
        v = res[kind].get("us_per_token", {}).get(p)
        return None if v is None else float(v)

    for p in map(str, s["positions"]):
        values = [cell(k, p) for k in kinds]
        row = p.rjust(label) + "".join(("failed" if v is None else f"{v:.1f} us").rjust(width) for v in values)
        soft, lin = cell("softmax", p), cell("linear", p)
        lines.append(row + (f"{soft / lin:.2f}x" if soft and lin else "-").rjust(16))
    flat = "".join((f"{res[k]['flatness']:.2f}x" if res[k].get("flatness") else "-").rjust(width) for k in kinds)
    lines.append("flatness".rjust(label) + flat + "  (largest / smallest of the rows above)")
    total = "".join((f"{res[k]['total_ms']:.1f} ms" if "total_ms" in res[k] else "failed").rjust(width) for k in kinds)
    speed = f"{r['speedup']:.2f}x" if r.get("speedup") else "-"
    lines.append(f"total, {s['total_steps']} steps".rjust(label) + total + speed.rjust(16))
    for k in kinds:
        if "error" in res[k]:
            lines.append(f"{k}: {res[k]['error']}")
    return "\n".join(lines)


def format_xl_table(r: Mapping[str, Any]) -> str:
    """One line each: recompute, reuse, speedup."""
    s = r["shapes"]
    head = (
        f"Transformer-XL evaluation per token: attention length {s['length']}, d_model {s['d_model']}, "
        f"{s['heads']} heads, d_head {r['d_head']}, {r['dtype']}, {r['threads']} threads (one layer)"
    )
    return section(
        head,
        r,
        lambda: [
            f"  recompute the window   {r['recompute_ms']:10.3f} ms per token",
            f"  reuse the cached state {r['reuse_ms']:10.3f} ms per token",
            f"  state reuse is {r['speedup']:.0f}x faster" if r.get("speedup") else "  speedup: -",
        ],
    )
