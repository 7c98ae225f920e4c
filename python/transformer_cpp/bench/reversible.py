"""Activation memory against depth, with and without reversible layers (:class:`ReversibleStack`).

Each configuration (number of layers, reversible or ordinary) runs in a fresh child process
(the task ``depth`` of :mod:`.child`, :func:`child_activation_memory`): it builds the stack,
allocates its gradients, and reads its resident memory; then it resets the high-water mark (``/proc/self/clear_refs``), runs one training
forward and one backward, and reads the high-water mark again. The difference is the memory of
the activations and working buffers of that forward and backward, without the weights; the
stack's own count of the bytes it holds after the forward (``activation_bytes()``) is reported
next to it.

:func:`measure_activation_memory` returns the table's rows. ``transformer-cpp bench
--attention`` runs it as its depth section (:func:`bench_depth`, :data:`FULL_DEPTH`), with the
growth from the shallowest to the deepest stack of each kind.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..layers import ReversibleStack
from .child import run_child
from .machine import set_all_threads
from .report import section

__all__ = [
    "DepthShapes",
    "FULL_DEPTH",
    "QUICK_DEPTH",
    "bench_depth",
    "child_activation_memory",
    "depth_growth",
    "format_depth_table",
    "format_table",
    "measure_activation_memory",
]

MODES = ("reversible", "ordinary")


def _status_kb(field: str) -> Optional[int]:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset this process's resident high-water mark (VmHWM) to its current resident size."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child_activation_memory(
    n_layers: int,
    mode: str,
    length: int,
    d_model: int,
    n_heads: int,
    d_ff: int,
    batch: int = 1,
    dropout: float = 0.1,
    threads: int = 1,
    seed: int = 0,
) -> Dict[str, Any]:
    """In this (fresh) process: one training forward and backward of a stack of ``n_layers`` blocks;
    the peak resident memory it adds to the built stack with its gradients, in MiB."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    set_all_threads(threads)
    stack = ReversibleStack(
        n_layers, d_model, n_heads, d_ff, dropout, causal=True, reversible=mode == "reversible", seed=seed
    )
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, length, d_model)).astype(np.float32)
    dout = rng.standard_normal((batch, length, d_model)).astype(np.float32)
    stack.zero_grad()
    for p in stack.parameters().values():  # touch every page of the weights and gradients
        p.grad[...] = 0.0
    base_kb = _status_kb("VmRSS")
    reset = _reset_peak()
    start = time.perf_counter()
    stack.forward(x, training=True)
    held = stack.activation_bytes()
    forward_peak_kb = _status_kb("VmHWM")
    stack.backward(dout)
    seconds = time.perf_counter() - start
    peak_kb = _status_kb("VmHWM")
    if base_kb is None or peak_kb is None or forward_peak_kb is None or not reset:
        raise RuntimeError("child_activation_memory needs Linux's /proc/self/status and /proc/self/clear_refs")
    return {
        "layers": n_layers,
        "mode": mode,
        "length": length,
        "activation_bytes_mb": held / 2**20,
        "forward_peak_mb": (forward_peak_kb - base_kb) / 1024,
        "peak_mb": (peak_kb - base_kb) / 1024,
        "seconds": seconds,
    }


def measure_activation_memory(
    layers: Sequence[int] = (2, 4, 8, 12),
    length: int = 1024,
    d_model: int = 256,
    n_heads: int = 4,
    d_ff: int = 1024,
    batch: int = 1,
    threads: int = 1,
    modes: Sequence[str] = MODES,
) -> List[Dict[str, Any]]:
    """One child process per (layers, mode); the rows of :func:`child_activation_memory`, each with
    its growth over the smallest depth of the same mode (``growth``: peak / peak at layers[0])."""
    rows: List[Dict[str, Any]] = []
    for mode in modes:
        first: Optional[float] = None
        for n in layers:
            row = run_child(
                "depth",
                threads,
                n_layers=n,
                mode=mode,
                length=length,
                d_model=d_model,
                n_heads=n_heads,
                d_ff=d_ff,
                batch=batch,
            )
            if "error" in row:
                raise RuntimeError(f"reversible memory child ({n} layers, {mode}): {row['error']}")
            first = row["peak_mb"] if first is None else first
            row["growth"] = row["peak_mb"] / first if first else None
            rows.append(row)
    return rows


def format_table(rows: Sequence[Dict[str, Any]]) -> str:
    head = "| layers | stack | held after forward (MiB) | peak fwd (MiB) | peak fwd+bwd (MiB) | x first | s |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['layers']} | {r['mode']} | {r['activation_bytes_mb']:.1f} | {r['forward_peak_mb']:.1f} | "
            f"{r['peak_mb']:.1f} | {'-' if r['growth'] is None else format(r['growth'], '.2f')} | {r['seconds']:.2f} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class DepthShapes:
    """The stacks of the depth section: causal softmax blocks of ``d_model`` with ``heads`` heads
    (d_head 64 at the full shapes) over ``length`` positions, dropout 0.1 (replayed by the
    reversible backward)."""

    layers: Sequence[int] = (2, 4, 8, 12)
    length: int = 1024
    d_model: int = 256
    heads: int = 4
    d_ff: int = 1024
    batch: int = 1


FULL_DEPTH = DepthShapes()
QUICK_DEPTH = DepthShapes(layers=(2, 4), length=32, d_model=32, heads=2, d_ff=64)


def depth_growth(rows: Sequence[Mapping[str, Any]], key: str = "peak_mb") -> Dict[str, Optional[float]]:
    """Per stack kind: ``key`` at the deepest stack over ``key`` at the shallowest (None when the
    shallowest is not positive or a kind has fewer than two depths)."""
    out: Dict[str, Optional[float]] = {}
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = sorted((r for r in rows if r["mode"] == mode), key=lambda r: int(r["layers"]))
        first, last = float(mine[0][key]), float(mine[-1][key])
        out[mode] = last / first if len(mine) > 1 and first > 0 else None
    return out


def bench_depth(s: DepthShapes, threads: int, progress: Callable[[str], None] = lambda m: None) -> Dict[str, Any]:
    """:func:`measure_activation_memory` at ``s`` as a section of results: the rows, and the growth
    from the shallowest to the deepest stack of each kind (peak memory and the bytes held)."""
    out: Dict[str, Any] = {
        "method": "one training forward and backward per (layers, stack), each in a fresh process: MB = peak "
        "RSS (VmHWM, reset after the stack and its gradients are built) - the resident size before the forward",
        "shapes": asdict(s),
        "threads": threads,
        "dtype": "float32",
    }
    progress(f"activation memory against depth: {', '.join(map(str, s.layers))} layers, reversible and ordinary")
    try:
        rows = measure_activation_memory(s.layers, s.length, s.d_model, s.heads, s.d_ff, s.batch, threads)
    except RuntimeError as exc:
        out["error"] = str(exc)[:400]
        return out
    out["rows"] = rows
    out["growth"] = depth_growth(rows)
    out["growth_held"] = depth_growth(rows, "activation_bytes_mb")
    return out


def format_depth_table(r: Mapping[str, Any]) -> str:
    """The rows of :func:`format_table` under a heading, then the growth of each kind."""
    s = r["shapes"]
    head = (
        f"Activation memory against depth: length {s['length']}, d_model {s['d_model']}, {s['heads']} heads, "
        f"d_ff {s['d_ff']}, batch {s['batch']}, {r['dtype']}, {r['threads']} threads"
    )

    def x(v: Optional[float]) -> str:
        return "-" if v is None else f"{v:.2f}x"

    def body() -> List[str]:
        growth = ", ".join(f"{mode} {x(g)} (held {x(r['growth_held'].get(mode))})" for mode, g in r["growth"].items())
        first, last = min(s["layers"]), max(s["layers"])
        return [format_table(r["rows"]), f"growth from {first} to {last} layers: {growth}"]

    return section(head, r, body)
