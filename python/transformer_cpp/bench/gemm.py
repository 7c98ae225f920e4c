"""Section 1 of the benchmark: the machine's GEMM peaks.

The float32 peak is the best of several ``n x n`` NumPy matrix products, the practical ceiling
for dense compute on this machine; the bfloat16 peak is measured the same way, the best of
PyTorch's bfloat16 ``matmul`` (oneDNN) and our AVX512_BF16 kernel: what bf16 training runs
against. :func:`gemm_probe` times single products while other work runs (shared machines drift).
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Dict, List

import numpy as np

from .. import kernels

__all__ = ["bf16_gemm_peak", "gemm_peak", "gemm_probe"]


def gemm_peak(n: int = 2048, repeats: int = 5, seed: int = 0) -> Dict[str, Any]:
    """Best float32 ``n x n`` NumPy matrix-product throughput over ``repeats`` products (after one
    untimed product): ``2 n^3`` FLOPs each."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    np.matmul(a, b, out=c)
    times: List[float] = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        times.append(time.perf_counter() - t0)
    best = min(times)
    return {
        "n": n,
        "repeats": len(times),
        "best_s": best,
        "gflops": 2.0 * n**3 / best / 1e9,
        "median_gflops": 2.0 * n**3 / statistics.median(times) / 1e9,
    }


def gemm_probe(n: int = 2048, seed: int = 0) -> Callable[[], float]:
    """A function that times one float32 ``n x n`` NumPy product and returns its GFLOP/s."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)

    def probe() -> float:
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        return 2.0 * n**3 / (time.perf_counter() - t0) / 1e9

    return probe


def bf16_gemm_peak(n: int = 2048, repeats: int = 5, seed: int = 0, torch_module: Any = None) -> Dict[str, Any]:
    """The bfloat16 GEMM peak, measured as :func:`gemm_peak` measures float32 (best of ``repeats``
    ``n x n`` products after an untimed one, ``2 n^3`` FLOPs each): PyTorch's bfloat16 ``matmul``
    (oneDNN's AVX512_BF16 / AMX kernels where the CPU has them) and ours (AMX tiles or
    AVX512_BF16, ``kernel``: :func:`transformer_cpp.kernels.bf16_matmul`, float32 inputs rounded
    while packing). The peak
    is the faster of the two; each is reported. Empty when neither can run: both need a CPU with
    bf16 dot-product instructions (:func:`transformer_cpp.kernels.have_bf16`)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out: Dict[str, Any] = {"n": n, "repeats": max(1, repeats)}

    def best_of(fn: Callable[[], Any]) -> float:
        fn()
        times: List[float] = []
        for _ in range(max(1, repeats)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 2.0 * n**3 / min(times) / 1e9

    # Without bf16 dot-product instructions (AVX512_BF16, AMX) PyTorch's bfloat16 matmul converts
    # to float32 and back element by element: orders of magnitude below its float32 rate, and
    # minutes per product at this size. It is then no peer anyone would choose, so it is left out.
    if torch_module is not None and kernels.have_bf16():
        ta = torch_module.from_numpy(a).to(torch_module.bfloat16)
        tb = torch_module.from_numpy(b).to(torch_module.bfloat16)
        out["torch_gflops"] = best_of(lambda: torch_module.matmul(ta, tb))
    if kernels.have_bf16():
        out["ours_gflops"] = best_of(lambda: kernels.bf16_matmul(a, b))
        out["kernel"] = kernels.bf16_kernel()
    found = [out[k] for k in ("torch_gflops", "ours_gflops") if k in out]
    out["gflops"] = max(found) if found else None
    return out
