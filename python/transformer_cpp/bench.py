"""``transformer-cpp bench``: our C++ core against PyTorch (and CTranslate2) in one run.

Everything runs in this process with one thread count for every library (default: all cores the
process may use), except the peak-memory measurement, which needs a fresh process per
implementation, and the serving section's HTTP clients:

1. **Machine GEMM peak**: float32 ``2048 x 2048`` matrix products in NumPy (best of several),
   the practical ceiling for dense compute on this machine; and the **bfloat16 GEMM peak**
   measured the same way, the best of PyTorch's bfloat16 ``matmul`` (oneDNN) and our AVX512_BF16
   kernel (:func:`bf16_gemm_peak`): what bf16 training runs against.
2. **Training step** at the ``tutorial`` preset shapes (batch 64, sentences of 4-15 tokens with
   realistic padding, d_model 512, 4+4 layers, d_ff 512, 8 heads, vocabularies 14,000/15,500,
   dropout 0.1, Adam): ``Transformer.train_step`` against the same architecture in ``torch.nn``
   (:mod:`transformer_cpp.torch_reference`) with ``torch.optim.Adam``, started from the same
   weights and fed the same batches, alternating step by step. Non-padding target tokens per
   second, the ratio, achieved model GFLOP/s (see :func:`forward_matmul_flops`) and the fraction
   of the GEMM peak. The low-precision peers alternate in the same loop: ours with
   ``precision="bf16"`` and PyTorch under ``torch.autocast("cpu", dtype=torch.bfloat16)``, both
   from the same weights (their fraction of the bf16 peak is reported).
3. **Greedy decoding** of random source sentences at batch 1 and 32: ``Transformer.greedy_decode``
   (C++, key/value cache) against the PyTorch-tutorial loop (encode once, re-run the decoder on
   the growing prefix at every step) and CTranslate2 on the same weights (converted by
   :func:`transformer_cpp.export.convert_to_ctranslate2`, the converter of ``transformer-cpp export``;
   the conversion is checked to give identical outputs first). The low-precision peers run in the
   same rotation on the same batches: ours with ``compute_type="int8"`` and ``"bf16"``, and
   CTranslate2 with ``compute_type="int8"`` (its CPU recommendation; the same converted model,
   quantised when loaded).
4. **Peak memory** of training steps, ours and PyTorch's, each in a child process
   (``python -m transformer_cpp.bench --child-memory ours|torch``; peak RSS from ``VmHWM``, see
   :func:`_peak_rss`), and **thread scaling** of the
   training step (1 thread against all threads).
5. **Serving**: requests per second and p50/p99 latency of the HTTP server
   (:mod:`transformer_cpp.serve`) at 32 concurrent clients (in a child process) on a random model
   of the ``tiny`` preset, with request batching against ``--max-batch 1`` (see
   :func:`bench_serving`; needs the ``serve`` extra, else skipped with a note; ``--serving-only``
   runs just this section).

Thread control: ``--threads N`` calls ``transformer_cpp.set_num_threads(N)`` and
``torch.set_num_threads(N)``, sets ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``/... for child
processes and limits NumPy's BLAS through ``threadpoolctl`` when it is installed, else through
OpenBLAS' own ``*_set_num_threads`` entry point found with ``ctypes`` (NumPy is already imported
by ``transformer_cpp`` before the bench can run, so the environment variables come too late for
it). If neither works, the GEMM peak runs with NumPy's default thread count and the report
says so.

Use it as ``transformer-cpp bench`` or ``python -m transformer_cpp.bench`` (``--quick`` for tiny
shapes, ``--json [PATH]`` for machine-readable results). Nothing here asserts timings; the
issue's targets are printed next to each figure with whether they are met.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import itertools
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import __version__, build_info, set_num_threads
from .export import convert_to_ctranslate2, import_ctranslate2
from .model import Transformer

__all__ = [
    "BenchShapes",
    "QUICK_SHAPES",
    "TUTORIAL_SHAPES",
    "add_bench_parser",
    "bench_serving",
    "check_ctranslate2_exact",
    "convert_to_ctranslate2",
    "forward_matmul_flops",
    "useful_forward_flops",
    "main",
    "make_batches",
    "random_sentences",
    "run_bench",
    "torch_tutorial_greedy",
]

START_ID, END_ID = 1, 2  # special token ids of the synthetic vocabularies; 0 is padding
_FIRST_WORD_ID = 3
JSON_SCHEMA_VERSION = 1

# The targets (met by optimisation work on the core, measured here).
TARGET_TRAIN_RATIO = 1.5  # training tokens/s, ours / PyTorch
TARGET_TRAIN_PEAK = 0.60  # achieved model GFLOP/s / GEMM peak
TARGET_DECODE_VS_TORCH = 5.0  # greedy sentences/s at batch 32, ours / PyTorch tutorial loop
TARGET_DECODE_VS_CT2 = 1.0  # greedy sentences/s at batch 32, ours / CTranslate2 float32
TARGET_TRAIN_VS_TORCH_BF16 = 1.5  # training tokens/s, best precision of ours / PyTorch bf16 autocast
TARGET_DECODE_VS_CT2_INT8 = {"32": 1.5, "1": 2.0}  # greedy sentences/s, best of ours / CTranslate2 int8
TARGET_MEMORY_RATIO = 1.0  # training peak memory (delta over imports), ours / PyTorch, at most
TARGET_SCALING_PER_THREAD = 0.9  # speed-up from 1 to N threads >= 0.9 N (the target: 2 threads >= 1.8x)


# ----------------------------------------------------------------------------------------------
# shapes and synthetic data
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchShapes:
    """Model and batch shapes of one benchmark configuration."""

    name: str
    batch: int = 64  # sentences per training batch
    min_length: int = 4  # shortest sentence, start and end tokens included
    max_length: int = 15  # longest sentence (and the model's positional table)
    d_model: int = 512
    n_layers: int = 4  # encoder layers = decoder layers
    d_ff: int = 512
    n_heads: int = 8
    src_vocab: int = 14_000
    tgt_vocab: int = 15_500
    dropout: float = 0.1
    gemm_n: int = 2048  # GEMM peak matrix size
    gemm_repeats: int = 5
    warmup: int = 2  # training steps per implementation, not timed
    steps: int = 5  # timed training steps per implementation
    scaling_steps: int = 2  # timed steps per thread count in the scaling section
    busy_settle: int = 12  # busy-machine section: untimed steps (the governor finds its count)
    busy_steps: int = 24  # busy-machine section: units after settling (the first of each block untimed)
    sentences: int = 256  # greedy decoding: sentences translated per batch size
    decode_batches: Tuple[int, ...] = (1, 32)
    memory_steps: int = 3  # training steps in each memory child (the first ones warm up)

    def model_config(self, seed: int = 0) -> Dict[str, Any]:
        """Keyword arguments of :class:`transformer_cpp.Transformer` for these shapes."""
        return dict(
            src_vocab_size=self.src_vocab,
            tgt_vocab_size=self.tgt_vocab,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            max_length=self.max_length,
            seed=seed,
        )


# The ``tutorial`` preset (model.PRESETS) with the tutorial's vocabularies and batch size.
TUTORIAL_SHAPES = BenchShapes(name="tutorial")
# Tiny shapes for CI smoke runs: seconds, not minutes. Numbers mean little.
QUICK_SHAPES = BenchShapes(
    name="quick",
    batch=8,
    max_length=10,
    d_model=64,
    n_layers=2,
    d_ff=128,
    n_heads=4,
    src_vocab=300,
    tgt_vocab=320,
    gemm_n=256,
    gemm_repeats=3,
    warmup=1,
    steps=2,
    scaling_steps=1,
    sentences=8,
    decode_batches=(1, 4),
    memory_steps=2,
    busy_settle=8,
    busy_steps=3,
)


def random_sentences(
    rng: np.random.Generator, count: int, vocab: int, min_length: int, max_length: int
) -> List[np.ndarray]:
    """``count`` sentences ``[START, w..., END]`` with lengths uniform in ``[min_length, max_length]``
    (start and end tokens included) and words uniform in ``[3, vocab)``."""
    lengths = rng.integers(min_length, max_length + 1, size=count)
    return [
        np.concatenate(([START_ID], rng.integers(_FIRST_WORD_ID, vocab, size=n - 2), [END_ID])).astype(np.int64)
        for n in lengths
    ]


def pad(sentences: Sequence[np.ndarray]) -> np.ndarray:
    """Right-pad int sentences with 0 to the longest one: (B, max length) int64."""
    out = np.zeros((len(sentences), max(len(s) for s in sentences)), np.int64)
    for i, s in enumerate(sentences):
        out[i, : len(s)] = s
    return out


@dataclass
class Batch:
    """One training batch with teacher forcing: ``tgt_in = tgt[:, :-1]``, ``tgt_out = tgt[:, 1:]``."""

    src: np.ndarray  # (B, S) int64, 0-padded
    tgt_in: np.ndarray  # (B, T) int64
    tgt_out: np.ndarray  # (B, T) int64
    tokens: int  # non-padding target tokens (what the loss averages over)


def make_batches(shapes: BenchShapes, count: int, seed: int = 0) -> List[Batch]:
    """``count`` random batches of ``shapes.batch`` sentence pairs, source and target lengths drawn
    independently and uniformly in ``[min_length, max_length]``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        src = pad(random_sentences(rng, shapes.batch, shapes.src_vocab, shapes.min_length, shapes.max_length))
        tgt = pad(random_sentences(rng, shapes.batch, shapes.tgt_vocab, shapes.min_length, shapes.max_length))
        tgt_in, tgt_out = np.ascontiguousarray(tgt[:, :-1]), np.ascontiguousarray(tgt[:, 1:])
        out.append(Batch(src, tgt_in, tgt_out, int(np.count_nonzero(tgt_out))))
    return out


def forward_matmul_flops(shapes: BenchShapes, batch_size: int, src_len: int, tgt_len: int) -> int:
    """Floating-point operations of the matrix products of one forward pass (2 per multiply-add).

    With batch ``B``, padded source length ``S``, padded decoder-input length ``T``, width ``d``,
    feed-forward width ``f``, ``L`` layers per stack and target vocabulary ``V``:

    * encoder layer: Q, K, V and output projections ``4 * 2BSd^2``; attention scores ``Q K^T``
      and weighted sums ``P V`` over all heads ``2 * 2BS^2 d``; feed-forward ``2 * 2BSdf``;
    * decoder layer: self-attention ``4 * 2BTd^2 + 2 * 2BT^2 d``; cross-attention Q and output
      projections ``2 * 2BTd^2``, K and V of the memory ``2 * 2BSd^2``, scores and weighted sums
      ``2 * 2BTSd``; feed-forward ``2 * 2BTdf``;
    * output projection ``2BTdV``.

    Attention is counted on the padded lengths (what both implementations compute). Embedding
    look-ups, softmax, LayerNorm, dropout, the loss and Adam are not matrix products and are left
    out. A training step costs ``3x`` this (forward; backward = gradients of inputs and weights).
    """
    b, s, t = batch_size, src_len, tgt_len
    d, f, n_layers, v = shapes.d_model, shapes.d_ff, shapes.n_layers, shapes.tgt_vocab
    encoder_layer = 4 * 2 * b * s * d * d + 2 * 2 * b * s * s * d + 2 * 2 * b * s * d * f
    decoder_layer = (
        4 * 2 * b * t * d * d
        + 2 * 2 * b * t * t * d
        + 2 * 2 * b * t * d * d
        + 2 * 2 * b * s * d * d
        + 2 * 2 * b * t * s * d
        + 2 * 2 * b * t * d * f
    )
    return n_layers * (encoder_layer + decoder_layer) + 2 * b * t * d * v


def useful_forward_flops(shapes: BenchShapes, batch: Batch) -> int:
    """Matrix-product FLOPs of one forward pass counted on the real tokens only.

    :func:`forward_matmul_flops` counts the padded shapes (what a padded implementation such as
    the PyTorch reference executes). Ours removes padding rows from the position-wise work in
    ``train_step``, so the "model GFLOP/s" of the padded count credits it with work it skipped.
    This count is the honest one for ours: projections, feed-forward and output layer per real
    source token ``s_b`` / decoder position ``t_b`` (positions with an input or a target), and
    attention per real query-key pair, sentence by sentence.
    """
    d, f, n_layers, v = shapes.d_model, shapes.d_ff, shapes.n_layers, shapes.tgt_vocab
    s = np.count_nonzero(batch.src, axis=1).astype(np.int64)
    t = np.count_nonzero((batch.tgt_in != 0) | (batch.tgt_out != 0), axis=1).astype(np.int64)
    ns, nt = int(s.sum()), int(t.sum())
    encoder_layer = 4 * 2 * ns * d * d + 2 * 2 * int((s * s).sum()) * d + 2 * 2 * ns * d * f
    decoder_layer = (
        4 * 2 * nt * d * d
        + 2 * 2 * int((t * t).sum()) * d
        + 2 * 2 * nt * d * d
        + 2 * 2 * ns * d * d
        + 2 * 2 * int((t * s).sum()) * d
        + 2 * 2 * nt * d * f
    )
    return n_layers * (encoder_layer + decoder_layer) + 2 * nt * d * v


def training_step_flops(shapes: BenchShapes, batch: Batch) -> int:
    """Matrix-product FLOPs of one training step: ``3 *`` :func:`forward_matmul_flops`."""
    return 3 * forward_matmul_flops(shapes, batch.src.shape[0], batch.src.shape[1], batch.tgt_in.shape[1])


# ----------------------------------------------------------------------------------------------
# threads, machine facts
# ----------------------------------------------------------------------------------------------


def available_cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


_THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def _openblas_set_threads(n: int) -> Optional[str]:
    """Call ``openblas_set_num_threads`` (any symbol prefix/suffix) in every OpenBLAS loaded here."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    done = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in (
            "scipy_openblas_set_num_threads64_",
            "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_",
            "openblas_set_num_threads",
        ):
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn.restype = None
                fn(int(n))
                done.append(f"{os.path.basename(path)}:{symbol}")
                break
    return ", ".join(done) or None


def set_all_threads(n: int, torch_module: Any = None) -> Dict[str, str]:
    """Use ``n`` threads in our core, NumPy's BLAS and (if given) PyTorch; returns how each was set."""
    for key in _THREAD_ENV:
        os.environ[key] = str(n)  # for child processes
    how = {"transformer_cpp": "set_num_threads"}
    set_num_threads(n)
    blas = None
    try:
        from threadpoolctl import threadpool_limits  # type: ignore

        threadpool_limits(limits=n, user_api="blas")
        blas = "threadpoolctl"
    except ImportError:
        found = _openblas_set_threads(n)
        if found:
            blas = f"ctypes {found}"
    how["numpy_blas"] = blas or "not controlled (install threadpoolctl); NumPy's default thread count"
    if torch_module is not None:
        torch_module.set_num_threads(n)
        how["torch"] = "torch.set_num_threads"
    return how


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts() -> Dict[str, Any]:
    """CPU, cores, load and library versions, for the report header."""
    facts: Dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": available_cores(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "transformer_cpp": __version__,
        "build": {k: v for k, v in build_info().items() if k in ("compiler", "flags", "openmp", "simd")},
    }
    try:
        facts["load_average_start"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        pass
    return facts


def _import_torch() -> Tuple[Any, Optional[str]]:
    """``(torch, None)`` or ``(None, reason)``."""
    try:
        import torch  # noqa: F401

        from . import torch_reference  # noqa: F401
    except ImportError as exc:
        return None, f"PyTorch not available ({exc}); install transformer-cpp[torch]"
    return torch, None


def _import_ctranslate2() -> Tuple[Any, Optional[str]]:
    """``(ctranslate2, None)`` or ``(None, reason)``; loaded by :func:`transformer_cpp.export.import_ctranslate2`
    (which keeps CTranslate2's OpenMP runtime apart from ours and PyTorch's)."""
    try:
        return import_ctranslate2(), None
    except ImportError as exc:
        return None, str(exc)


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# 1. GEMM peak
# ----------------------------------------------------------------------------------------------


def gemm_peak(n: int = 2048, repeats: int = 5, seed: int = 0) -> Dict[str, Any]:
    """Best float32 ``n x n`` NumPy matrix-product throughput over ``repeats`` products (after one
    untimed product): ``2 n^3`` FLOPs each."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    np.matmul(a, b, out=c)
    times = []
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
    (oneDNN's AVX512_BF16 / AMX kernels where the CPU has them) and our AVX512_BF16 kernel
    (:func:`transformer_cpp.kernels.bf16_matmul`, float32 inputs rounded while packing). The peak
    is the faster of the two; each is reported. Empty when neither can run."""
    from . import kernels

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out: Dict[str, Any] = {"n": n, "repeats": max(1, repeats)}

    def best_of(fn: Callable[[], Any]) -> float:
        fn()
        times = []
        for _ in range(max(1, repeats)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 2.0 * n**3 / min(times) / 1e9

    if torch_module is not None:
        ta = torch_module.from_numpy(a).to(torch_module.bfloat16)
        tb = torch_module.from_numpy(b).to(torch_module.bfloat16)
        out["torch_gflops"] = best_of(lambda: torch_module.matmul(ta, tb))
    if kernels.have_bf16():
        out["ours_gflops"] = best_of(lambda: kernels.bf16_matmul(a, b))
    found = [out[k] for k in ("torch_gflops", "ours_gflops") if k in out]
    out["gflops"] = max(found) if found else None
    return out


# ----------------------------------------------------------------------------------------------
# 2. training step
# ----------------------------------------------------------------------------------------------


def build_ours(shapes: BenchShapes, seed: int = 0) -> Transformer:
    """Our model at ``shapes`` with Adam (beta2 0.98, eps 1e-9, the warm-up schedule)."""
    model = Transformer(**shapes.model_config(seed))
    model.configure_optimizer()
    return model


class TorchTrainer:
    """The reference model of :mod:`transformer_cpp.torch_reference` with ``torch.optim.Adam``
    (same betas, eps and learning rate as ours), weights copied from ``model`` when given."""

    def __init__(
        self, shapes: BenchShapes, model: Optional[Transformer] = None, seed: int = 0, autocast: bool = False
    ) -> None:
        import torch

        self.autocast = bool(autocast)  # forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)
        from .torch_reference import build_reference, copy_weights_to_reference

        self.torch = torch
        config = model.config if model is not None else dict(shapes.model_config(seed), dtype="float32")
        self.ref = build_reference(config)
        if model is not None:
            copy_weights_to_reference(model, self.ref)
        lr = model.learning_rate(1) if model is not None else shapes.d_model**-0.5 * 4000**-1.5
        self.optimizer = torch.optim.Adam(self.ref.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)

    def tensors(self, batch: Batch) -> Tuple[Any, Any, Any]:
        """The batch as int64 tensors (converted outside the timed region)."""
        t = self.torch
        return t.from_numpy(batch.src), t.from_numpy(batch.tgt_in), t.from_numpy(batch.tgt_out)

    def train_step(self, src: Any, tgt_in: Any, tgt_out: Any) -> Tuple[float, float]:
        """zero_grad, forward, masked loss (and accuracy, as ours computes it), backward, Adam."""
        self.ref.train()
        self.optimizer.zero_grad(set_to_none=True)
        with self.torch.autocast("cpu", dtype=self.torch.bfloat16, enabled=self.autocast):
            logits = self.ref(src, tgt_in)
            loss = self.ref.loss(logits, tgt_out)
        loss.backward()
        self.optimizer.step()
        with self.torch.no_grad():
            keep = tgt_out != 0
            acc = ((logits.argmax(-1) == tgt_out) & keep).sum() / keep.sum()
        return float(loss.detach()), float(acc)


def _median_rate(amounts: Sequence[float], seconds: Sequence[float]) -> float:
    return statistics.median(a / s for a, s in zip(amounts, seconds))


def _summarise_steps(
    batches: Sequence[Batch],
    seconds: Sequence[float],
    flops: Sequence[int],
    peak_gflops: Optional[float],
    losses: Sequence[float],
) -> Dict[str, Any]:
    gflops = _median_rate(flops, seconds) / 1e9
    out = {
        "tokens_per_s": _median_rate([b.tokens for b in batches], seconds),
        "step_s_median": statistics.median(seconds),
        "step_s": list(seconds),
        "gflops": gflops,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
    }
    out["peak_fraction"] = gflops / peak_gflops if peak_gflops else None
    return out


def _bf16_trainers(
    shapes: BenchShapes, model: Transformer, with_torch: bool, seed: int = 0
) -> Tuple[Dict[str, Callable[[Batch], Tuple[float, float]]], List[str]]:
    """The low-precision training peers, started from ``model``'s weights (call before it trains):
    ours with ``precision="bf16"`` (when the CPU has AVX512_BF16) and PyTorch under bf16 autocast
    (when ``with_torch``). Returns ``{name: step function}`` (a step returns ``(seconds, loss)``)
    and notes on what was left out."""
    from . import kernels

    steps: Dict[str, Callable[[Batch], Tuple[float, float]]] = {}
    notes: List[str] = []
    if kernels.have_bf16():
        ours = Transformer(**dict(shapes.model_config(seed), precision="bf16"))
        for name, p in ours.parameters().items():
            p.value[...] = model.parameters()[name].value
        ours.configure_optimizer()

        def run_ours(b: Batch) -> Tuple[float, float]:
            t0 = time.perf_counter()
            loss, _ = ours.train_step(b.src, b.tgt_in, b.tgt_out)
            return time.perf_counter() - t0, loss

        steps["ours_bf16"] = run_ours
    else:
        notes.append(f"ours bf16 training skipped: {kernels.bf16_unsupported_reason()}")
    if with_torch:
        trainer = TorchTrainer(shapes, model, autocast=True)

        def run_torch(b: Batch) -> Tuple[float, float]:
            src, tgt_in, tgt_out = trainer.tensors(b)
            t0 = time.perf_counter()
            loss, _ = trainer.train_step(src, tgt_in, tgt_out)
            return time.perf_counter() - t0, loss

        steps["torch_bf16"] = run_torch
    return steps, notes


def bench_training(
    shapes: BenchShapes,
    peak_gflops: Optional[float],
    with_torch: bool,
    seed: int = 0,
    bf16_peak_gflops: Optional[float] = None,
    low_precision: bool = True,
) -> Dict[str, Any]:
    """Ours and (if ``with_torch``) PyTorch on the same batches, alternating step by step (who goes
    first alternates too); the first ``shapes.warmup`` steps of each are not timed. With
    ``low_precision``, ours in bf16 and PyTorch under bf16 autocast take their turns too (see
    :func:`_bf16_trainers`); their fractions are of ``bf16_peak_gflops``."""
    model = build_ours(shapes, seed)
    low, low_notes = _bf16_trainers(shapes, model, with_torch, seed) if low_precision else ({}, [])
    trainer = TorchTrainer(shapes, model) if with_torch else None
    batches = make_batches(shapes, shapes.warmup + shapes.steps, seed=seed + 1)
    flops = [training_step_flops(shapes, b) for b in batches]
    useful = [3 * useful_forward_flops(shapes, b) for b in batches]
    times: Dict[str, List[float]] = {name: [] for name in ["ours", "torch", *low]}
    losses: Dict[str, List[float]] = {name: [] for name in ["ours", "torch", *low]}

    def run_ours(b: Batch) -> Tuple[float, float]:
        t0 = time.perf_counter()
        loss, _ = model.train_step(b.src, b.tgt_in, b.tgt_out)
        return time.perf_counter() - t0, loss

    def run_torch(b: Batch) -> Tuple[float, float]:
        assert trainer is not None
        src, tgt_in, tgt_out = trainer.tensors(b)
        t0 = time.perf_counter()
        loss, _ = trainer.train_step(src, tgt_in, tgt_out)
        return time.perf_counter() - t0, loss

    runners: List[Tuple[str, Callable[[Batch], Tuple[float, float]]]] = [("ours", run_ours)]
    if trainer is not None:
        runners.append(("torch", run_torch))
    runners += list(low.items())
    # One GEMM probe per timed step: what the machine gives *while* the steps run (shared machines
    # drift), reported next to the best-of peak measured up front.
    probe = gemm_probe(shapes.gemm_n, seed)
    probes: List[float] = []
    for i, b in enumerate(batches):
        order = runners if i % 2 == 0 else runners[::-1]
        for name, run in order:
            seconds, loss = run(b)
            losses[name].append(loss)
            if i >= shapes.warmup:
                times[name].append(seconds)
        if i >= shapes.warmup:
            probes.append(probe())
        _log(
            f"training step {i + 1}/{len(batches)}"
            + ("" if i >= shapes.warmup else " (warm-up)")
            + "".join(f"  {n} {times[n][-1]:.3f}s" for n, _ in runners if i >= shapes.warmup)
        )
    timed = batches[shapes.warmup :]
    tflops = flops[shapes.warmup :]
    result: Dict[str, Any] = {
        "shapes": asdict(shapes),
        "warmup": shapes.warmup,
        "steps": shapes.steps,
        "mean_target_tokens": statistics.mean(b.tokens for b in timed),
        "mean_src_len": statistics.mean(b.src.shape[1] for b in timed),
        "mean_tgt_len": statistics.mean(b.tgt_in.shape[1] for b in timed),
        "flops_per_step_mean": statistics.mean(tflops),
        "num_parameters": model.num_parameters(),
        "ours": _summarise_steps(timed, times["ours"], tflops, peak_gflops, losses["ours"]),
        "useful_flops_per_step_mean": statistics.mean(useful[shapes.warmup :]),
        "torch": None,
        "ratio": None,
        "gemm_during_steps_gflops": statistics.median(probes),
    }
    result["ours"]["fraction_of_gemm_during_steps"] = result["ours"]["gflops"] / result["gemm_during_steps_gflops"]
    # the same steps measured on the work actually needed (real tokens): see useful_forward_flops
    result["ours"]["useful_gflops"] = _median_rate(useful[shapes.warmup :], times["ours"]) / 1e9
    result["ours"]["useful_peak_fraction"] = (result["ours"]["useful_gflops"] / peak_gflops) if peak_gflops else None
    if trainer is not None:
        result["torch"] = _summarise_steps(timed, times["torch"], tflops, peak_gflops, losses["torch"])
        result["ratio"] = result["ours"]["tokens_per_s"] / result["torch"]["tokens_per_s"]
        result["torch"]["fraction_of_gemm_during_steps"] = (
            result["torch"]["gflops"] / result["gemm_during_steps_gflops"]
        )
    result.update(_low_precision_training_summary(result, low, timed, times, losses, tflops, bf16_peak_gflops))
    result["low_precision_notes"] = low_notes
    return result


def _low_precision_training_summary(
    result: Dict[str, Any],
    low: Dict[str, Any],
    timed: Sequence[Batch],
    times: Dict[str, List[float]],
    losses: Dict[str, List[float]],
    flops: Sequence[int],
    bf16_peak_gflops: Optional[float],
) -> Dict[str, Any]:
    """The bf16 peers' rows and the ratios of the best precision of ours against each PyTorch."""
    out: Dict[str, Any] = {}
    for name in low:
        out[name] = _summarise_steps(timed, times[name], flops, bf16_peak_gflops, losses[name])
    rates = {
        name: (result.get(name) or out.get(name) or {}).get("tokens_per_s")
        for name in ("ours", "ours_bf16", "torch", "torch_bf16")
    }
    ours = {k: v for k, v in rates.items() if k.startswith("ours") and v}
    if ours:
        best = max(ours, key=lambda k: ours[k])
        out["best_ours"] = best
        for peer in ("torch", "torch_bf16"):
            if rates.get(peer):
                out[f"best_ours_vs_{peer}"] = ours[best] / rates[peer]
        torch_rates = [rates[k] for k in ("torch", "torch_bf16") if rates.get(k)]
        if torch_rates:
            out["best_ours_vs_best_torch"] = ours[best] / max(torch_rates)
    return out


# ----------------------------------------------------------------------------------------------
# 3. greedy decoding
# ----------------------------------------------------------------------------------------------


def trim_outputs(out: np.ndarray, end_id: int = END_ID) -> List[Tuple[int, ...]]:
    """Rows of a (B, L) id matrix as tuples up to and including ``end_id``, padding dropped."""
    rows = []
    for row in np.asarray(out):
        ids = []
        for x in row:
            x = int(x)
            if x == 0:
                break
            ids.append(x)
            if x == end_id:
                break
        rows.append(tuple(ids))
    return rows


def python_loop_greedy(model: Transformer, src: np.ndarray, start_id: int, end_id: int, max_length: int) -> np.ndarray:
    """Greedy decoding as a Python loop over ``model.forward`` on the growing prefix (no cache):
    the fallback when the core has no ``greedy_decode``. Same output convention."""
    b = src.shape[0]
    ys = np.full((b, 1), start_id, np.int64)
    finished = np.zeros(b, bool)
    for _ in range(max_length):
        logits = model.forward(src, ys)[:, -1]
        logits[:, 0] = -np.inf
        nxt = np.where(finished, 0, logits.argmax(-1)).astype(np.int64)
        ys = np.concatenate([ys, nxt[:, None]], axis=1)
        finished |= nxt == end_id
        if finished.all():
            break
    return ys[:, 1:]


def ours_greedy_function(model: Transformer) -> Tuple[Callable[..., np.ndarray], str]:
    """Our greedy decoder and its label: the C++ KV-cached ``greedy_decode`` if the core has it."""
    if hasattr(model._core, "greedy_decode"):
        return model.greedy_decode, "C++ greedy_decode (KV cache)"
    return (
        lambda src, s, e, n: python_loop_greedy(model, src, s, e, n),
        "Python loop over Transformer.forward (no greedy_decode in this build)",
    )


def torch_tutorial_greedy(ref: Any, src: np.ndarray, start_id: int, end_id: int, max_length: int) -> np.ndarray:
    """The PyTorch tutorial's greedy loop on the reference model: encode once, then at every step
    re-run the whole decoder on the growing prefix and project its last position (eval mode, no
    grad). The padding id 0 is never chosen (as in ours); finished rows are fed 0. Returns the
    generated ids (B, L) with 0 after the end token."""
    import torch

    with torch.no_grad():
        src_t = torch.from_numpy(np.ascontiguousarray(src, dtype=np.int64))
        memory = ref.encoder(src_t)
        src_pad = src_t == 0
        b = src_t.shape[0]
        ys = torch.full((b, 1), start_id, dtype=torch.long)
        finished = torch.zeros(b, dtype=torch.bool)
        for _ in range(max_length):
            y = ref.decoder(ys, memory, source_padding=src_pad)
            logits = ref.output(y[:, -1], ref.decoder.embedding.weight)
            logits[:, 0] = -math.inf
            nxt = torch.where(finished, torch.zeros_like(finished, dtype=torch.long), logits.argmax(-1))
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            finished |= nxt == end_id
            if bool(finished.all()):
                break
    return ys[:, 1:].numpy()


class CTranslate2Greedy:
    """Greedy decoding with CTranslate2 on a model converted by :func:`convert_to_ctranslate2`.

    ``decode(src)`` takes the same 0-padded (B, S) ids as ours and returns (B, L) ids with 0 after
    the end token; :meth:`prepare` converts ids to token strings outside any timed region."""

    def __init__(self, model: Transformer, threads: int, workdir: str, compute_type: str = "float32") -> None:
        ctranslate2, why = _import_ctranslate2()
        if ctranslate2 is None:
            raise RuntimeError(why)
        self.source_vocab, self.target_vocab = convert_to_ctranslate2(model, workdir)
        self.target_ids = {t: i for i, t in enumerate(self.target_vocab)}
        # the model is converted in float32; "int8" quantises it when loading (CTranslate2's CPU advice)
        self.compute_type = compute_type
        self.translator = ctranslate2.Translator(
            workdir, device="cpu", compute_type=compute_type, inter_threads=1, intra_threads=threads
        )

    def prepare(self, src: np.ndarray) -> List[List[str]]:
        """Token strings of every 0-padded row (padding removed)."""
        return [[self.source_vocab[int(x)] for x in row if x != 0] for row in np.asarray(src)]

    def translate(self, tokens: List[List[str]], max_length: int) -> List[Any]:
        """The timed call: greedy search, the padding/unknown id 0 never generated, the end token
        allowed at the first step (CTranslate2's default ``min_decoding_length`` is 1, ours 0) and
        kept in the output."""
        return self.translator.translate_batch(
            tokens,
            beam_size=1,
            max_decoding_length=max_length,
            min_decoding_length=0,
            disable_unk=True,
            return_end_token=True,
            max_batch_size=0,
        )

    def to_ids(self, results: List[Any]) -> np.ndarray:
        rows = [[self.target_ids[t] for t in r.hypotheses[0]] for r in results]
        out = np.zeros((len(rows), max([len(r) for r in rows] + [1])), np.int64)
        for i, r in enumerate(rows):
            out[i, : len(r)] = r
        return out

    def decode(self, src: np.ndarray, max_length: int) -> np.ndarray:
        return self.to_ids(self.translate(self.prepare(src), max_length))


def _max_log_prob_difference(
    model: Transformer, ct: "CTranslate2Greedy", src: np.ndarray, outputs: List[Tuple[int, ...]]
) -> float:
    """Largest |log p(token)| difference between CTranslate2's ``score_batch`` and our forward pass
    along our greedy outputs (teacher-forced), over every sentence and position."""
    targets = [[ct.target_vocab[i] for i in (row[:-1] if row and row[-1] == END_ID else row)] for row in outputs]
    scored = ct.translator.score_batch(ct.prepare(src), targets)
    worst = 0.0
    for i, (row, res) in enumerate(zip(outputs, scored)):
        if not row:
            continue
        logits = model.forward(src[i : i + 1], np.array([(START_ID,) + row[:-1]], np.int64))[0].astype(np.float64)
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        ours = log_probs[np.arange(len(row)), list(row)]
        worst = max(worst, float(np.max(np.abs(np.asarray(res.log_probs[: len(row)], np.float64) - ours))))
    return worst


def check_ctranslate2_exact(
    threads: int = 1, seed: int = 7, sentences: int = 24, layout: str = "interleaved", share_embeddings: bool = False
) -> Tuple[bool, str]:
    """Is the CTranslate2 conversion exact? On a small random float32 model whose end-token bias
    makes some sentences stop early, CTranslate2's greedy outputs must equal ours token for token
    (at batch 1 and padded in one batch), its token log-probabilities (``score_batch``) must agree
    with our forward pass to 1e-4, and the PyTorch tutorial loop's outputs must equal ours too when
    PyTorch is installed. Returns ``(exact, explanation)``."""
    ct2, why = _import_ctranslate2()
    if ct2 is None:
        return False, why or "CTranslate2 not available"
    model = Transformer(
        37,
        41,
        d_model=32,
        n_layers=2,
        n_heads=4,
        d_ff=48,
        dropout=0.1,
        max_length=12,
        layout=layout,
        share_embeddings=share_embeddings,
        seed=seed,
    )
    bias = model.parameters()["output.bias"].value
    bias[END_ID] = 1.5  # some sentences end at once, some run to max_length, some in between
    rng = np.random.default_rng(seed)
    srcs = random_sentences(rng, sentences, 37, 3, 12)
    padded = pad(srcs)
    max_len = 12
    ours_batch = trim_outputs(
        model.greedy_decode(padded, START_ID, END_ID, max_len)
        if hasattr(model._core, "greedy_decode")
        else python_loop_greedy(model, padded, START_ID, END_ID, max_len)
    )
    with tempfile.TemporaryDirectory(prefix="tcpp-ct2-check-") as tmp:
        try:
            ct = CTranslate2Greedy(model, threads, tmp)
            ct_batch = trim_outputs(ct.decode(padded, max_len))
            ct_single = [trim_outputs(ct.decode(s[None], max_len))[0] for s in srcs]
            worst = _max_log_prob_difference(model, ct, padded, ours_batch)
        except Exception as exc:  # conversion or runtime refusal: report, do not crash the bench
            return False, f"conversion failed: {type(exc).__name__}: {exc}"
        finally:
            ct = None  # release the translator before the directory goes
    lengths = sorted({len(r) for r in ours_batch})
    if ct_batch != ours_batch or ct_single != ours_batch:
        bad = sum(a != b for a, b in zip(ct_batch, ours_batch)) + sum(a != b for a, b in zip(ct_single, ours_batch))
        return False, f"greedy outputs differ from ours on {bad} of {2 * len(srcs)} decodes of a small random model"
    if not worst < 1e-4:
        return False, f"token log-probabilities differ from ours by up to {worst:.2g} (float32 rounding is ~1e-6)"
    note = (
        f"identical greedy outputs on {len(srcs)} sentences (output lengths {lengths}) at batch 1 and padded, "
        f"token log-probs within {worst:.1g} of ours"
    )
    torch, _ = _import_torch()
    if torch is not None:
        from .torch_reference import build_reference, copy_weights_to_reference

        ref = build_reference(model.config)
        copy_weights_to_reference(model, ref)
        ref.eval()
        if trim_outputs(torch_tutorial_greedy(ref, padded, START_ID, END_ID, max_len)) != ours_batch:
            return False, "the PyTorch reference loop disagrees with ours on the check model (not a CTranslate2 issue)"
        note += "; PyTorch tutorial loop identical too"
    return True, note


def _low_precision_decoders(
    model: Transformer, threads: int, max_len: int, ct2_dir: Optional[str]
) -> Tuple[Dict[str, Tuple[str, Callable[[Any], np.ndarray], Callable[[np.ndarray], Any]]], List[str]]:
    """The low-precision decoding peers on ``model``'s weights: ours with ``compute_type`` int8 and
    bf16 (where the CPU has VNNI / AVX512_BF16) and, with ``ct2_dir`` (a directory for a second
    conversion; None when the float32 conversion was not exact), CTranslate2 int8. Returns
    ``{name: (method, run, prepare)}`` and notes on what was left out."""
    from . import kernels

    out: Dict[str, Tuple[str, Callable[[Any], np.ndarray], Callable[[np.ndarray], Any]]] = {}
    notes: List[str] = []
    for ct in ("int8", "bf16"):
        if kernels.have_compute_type(ct):
            out[f"ours_{ct}"] = (
                f"C++ greedy_decode, compute_type {ct}",
                lambda src, ct=ct: model.greedy_decode(src, START_ID, END_ID, max_len, compute_type=ct),
                lambda src: src,
            )
        else:
            notes.append(f"ours {ct} decoding skipped: {kernels.compute_type_unsupported_reason(ct)}")
    if ct2_dir is not None:
        os.makedirs(os.path.join(ct2_dir, "int8"), exist_ok=True)
        ct8 = CTranslate2Greedy(model, threads, os.path.join(ct2_dir, "int8"), compute_type="int8")
        out["ctranslate2_int8"] = (
            "CTranslate2 translate_batch, int8 (quantised when loaded), beam 1",
            lambda tokens: ct8.to_ids(ct8.translate(tokens, max_len)),
            ct8.prepare,
        )
    else:
        notes.append("CTranslate2 int8 skipped: no exact float32 conversion")
    return out, notes


def bench_decoding(
    shapes: BenchShapes,
    threads: int,
    with_torch: bool,
    with_ct2: bool,
    ct2_reason: Optional[str],
    seed: int = 0,
    low_precision: bool = True,
) -> Dict[str, Any]:
    """Greedy decoding of ``shapes.sentences`` random sentences at each batch size in
    ``shapes.decode_batches``; per batch the implementations run in rotating order and each
    batch's time is added to that implementation's total (one untimed batch first). With
    ``low_precision`` the int8 / bf16 peers join the rotation (:func:`_low_precision_decoders`)."""
    model = Transformer(**shapes.model_config(seed))
    rng = np.random.default_rng(seed + 2)
    sentences = random_sentences(rng, shapes.sentences, shapes.src_vocab, shapes.min_length, shapes.max_length)
    max_len = shapes.max_length
    ours_fn, ours_label = ours_greedy_function(model)
    impls: Dict[str, Dict[str, Any]] = {"ours": {"method": ours_label}}
    result: Dict[str, Any] = {
        "sentences": len(sentences),
        "max_length": max_len,
        "batches": {},
        "ctranslate2": {"status": "not run", "reason": ct2_reason},
    }
    runners: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "ours": lambda src: ours_fn(src, START_ID, END_ID, max_len)
    }
    prepare: Dict[str, Callable[[np.ndarray], Any]] = {"ours": lambda src: src}
    ref = None
    if with_torch:
        from .torch_reference import build_reference, copy_weights_to_reference

        ref = build_reference(model.config)
        copy_weights_to_reference(model, ref)
        ref.eval()
        impls["torch"] = {"method": "PyTorch tutorial loop (re-runs the decoder on the prefix, no cache)"}
        runners["torch"] = lambda src: torch_tutorial_greedy(ref, src, START_ID, END_ID, max_len)
        prepare["torch"] = lambda src: src
    tmp = None
    ct = None
    if with_ct2:
        exact, why = check_ctranslate2_exact(threads)
        result["ctranslate2"] = {"status": "exact" if exact else "not comparable", "reason": why}
        if exact:
            tmp = tempfile.mkdtemp(prefix="tcpp-ct2-")
            _log("converting the benchmark model to CTranslate2")
            ct = CTranslate2Greedy(model, threads, tmp)
            impls["ctranslate2"] = {"method": "CTranslate2 translate_batch, float32, beam 1"}
            runners["ctranslate2"] = lambda tokens: ct.to_ids(ct.translate(tokens, max_len))
            prepare["ctranslate2"] = ct.prepare
    if low_precision:
        extra, notes = _low_precision_decoders(model, threads, max_len, tmp if ct is not None else None)
        result["low_precision_notes"] = notes
        for name, (method, run, prep) in extra.items():
            impls[name] = {"method": method}
            runners[name] = run
            prepare[name] = prep
    try:
        for bs in shapes.decode_batches:
            chunks = [pad(sentences[i : i + bs]) for i in range(0, len(sentences), bs)]
            inputs = {name: [prepare[name](c) for c in chunks] for name in runners}
            totals = {name: 0.0 for name in runners}
            outputs: Dict[str, List[Tuple[int, ...]]] = {name: [] for name in runners}
            names = list(runners)
            for name in names:  # untimed warm-up batch
                runners[name](inputs[name][0])
            t_start = time.perf_counter()
            for k in range(len(chunks)):
                order = names[k % len(names) :] + names[: k % len(names)]
                for name in order:
                    t0 = time.perf_counter()
                    out = runners[name](inputs[name][k])
                    totals[name] += time.perf_counter() - t0
                    outputs[name].extend(trim_outputs(out))
            _log(
                f"greedy decoding batch {bs}: {time.perf_counter() - t_start:.1f}s "
                + "  ".join(f"{n} {totals[n]:.2f}s" for n in names)
            )
            entry: Dict[str, Any] = {}
            for name in names:
                entry[name] = {
                    "sentences_per_s": len(sentences) / totals[name],
                    "seconds": totals[name],
                    "mean_output_tokens": statistics.mean(len(o) for o in outputs[name]),
                    "method": impls[name]["method"],
                }
                if name != "ours":
                    same = sum(a == b for a, b in zip(outputs[name], outputs["ours"]))
                    entry[name]["identical_to_ours"] = f"{same}/{len(sentences)}"
            mine = [n for n in names if n == "ours" or n.startswith("ours_")]
            for name in names:
                if name not in mine:
                    entry[f"ratio_vs_{name}"] = entry["ours"]["sentences_per_s"] / entry[name]["sentences_per_s"]
            best = max(mine, key=lambda n: entry[n]["sentences_per_s"])
            entry["best_ours"] = best
            for name in names:
                if name not in mine:
                    entry[f"best_ours_vs_{name}"] = entry[best]["sentences_per_s"] / entry[name]["sentences_per_s"]
            result["batches"][str(bs)] = entry
    finally:
        ct = None
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return result


# ----------------------------------------------------------------------------------------------
# 4. memory (child processes) and thread scaling
# ----------------------------------------------------------------------------------------------


def _peak_rss() -> Tuple[int, str]:
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
        from . import torch_reference  # noqa: F401
    baseline, source = _peak_rss()
    batches = make_batches(shapes, shapes.memory_steps, seed=seed + 1)
    if which == "ours":
        model = build_ours(shapes, seed)
        for b in batches:
            model.train_step(b.src, b.tgt_in, b.tgt_out)
    elif which == "torch":
        trainer = TorchTrainer(shapes, None, seed)
        for b in batches:
            trainer.train_step(*trainer.tensors(b))
    else:
        raise ValueError(f"--child-memory: expected 'ours' or 'torch', got {which!r}")
    peak, _ = _peak_rss()
    return {
        "which": which,
        "baseline_mb": baseline / 2**20,
        "raw_mb": peak / 2**20,
        "delta_mb": (peak - baseline) / 2**20,
        "steps": len(batches),
        "source": source,
    }


def measure_memory(shapes: BenchShapes, threads: int, with_torch: bool, quick: bool, seed: int = 0) -> Dict[str, Any]:
    """Peak memory of training steps, ours and PyTorch's, each in its own child process."""
    out: Dict[str, Any] = {
        "method": "peak RSS (VmHWM, else ru_maxrss) of a child process after its training "
        "steps; delta = that peak - the peak after imports"
    }
    env = dict(os.environ)
    for key in _THREAD_ENV:
        env[key] = str(threads)
    for which in ["ours", "torch"] if with_torch else ["ours"]:
        cmd = [
            sys.executable,
            "-m",
            "transformer_cpp.bench",
            "--child-memory",
            which,
            "--threads",
            str(threads),
            "--seed",
            str(seed),
        ] + (["--quick"] if quick else [])
        _log(f"memory: {which} in a child process")
        for attempt in (1, 2):  # once more if the child fails (e.g. an editable rebuild raced a source edit)
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            if proc.returncode == 0 and lines:
                out[which] = json.loads(lines[-1])
                break
            last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
            out[which] = {"error": f"child exited with {proc.returncode}: {last[:300]}"}
            _log(f"memory child ({which}) failed, attempt {attempt}: {last[:300]}")
    ours_delta = out.get("ours", {}).get("delta_mb")
    torch_delta = (out.get("torch") or {}).get("delta_mb")
    # a tiny (quick) model may fit in memory the imports already touched: no ratio then
    out["ratio_delta"] = ours_delta / torch_delta if ours_delta is not None and torch_delta else None
    return out


def bench_scaling(shapes: BenchShapes, threads: int, with_torch: bool, seed: int = 0) -> Dict[str, Any]:
    """Training tokens/s at 1 thread and at ``threads``, interleaved step by step (ours; PyTorch for
    reference), one untimed step per setting first; plus the NumPy GEMM peak at both thread counts,
    the machine's own scaling ceiling (two vCPUs of a busy or SMT host scale less than 2x)."""
    torch_module = None
    if with_torch:
        import torch as torch_module

    def use(n: int) -> None:
        set_all_threads(n, torch_module)

    model = build_ours(shapes, seed)
    trainer = TorchTrainer(shapes, model) if with_torch else None
    batches = make_batches(shapes, 1 + shapes.scaling_steps, seed=seed + 3)
    times: Dict[Tuple[str, int], List[float]] = {}
    settings = [1, threads]
    gemm: Dict[int, List[float]] = {n: [] for n in settings}
    try:
        for n in settings:
            use(n)
            gemm[n].append(gemm_peak(shapes.gemm_n, shapes.gemm_repeats, seed)["gflops"])
        for i, b in enumerate(batches):
            for n in settings:
                use(n)
                t0 = time.perf_counter()
                model.train_step(b.src, b.tgt_in, b.tgt_out)
                t1 = time.perf_counter()
                if i:
                    times.setdefault(("ours", n), []).append(t1 - t0)
                if trainer is not None:
                    src, tgt_in, tgt_out = trainer.tensors(b)
                    t0 = time.perf_counter()
                    trainer.train_step(src, tgt_in, tgt_out)
                    t1 = time.perf_counter()
                    if i:
                        times.setdefault(("torch", n), []).append(t1 - t0)
            _log(
                f"scaling step {i + 1}/{len(batches)}"
                + (" (warm-up)" if not i else "")
                + "".join(f"  {k[0]}@{k[1]} {v[-1]:.3f}s" for k, v in times.items() if i)
            )
        for n in settings:
            use(n)
            gemm[n].append(gemm_peak(shapes.gemm_n, shapes.gemm_repeats, seed)["gflops"])
    finally:
        use(threads)
    timed = batches[1:]
    flops = [training_step_flops(shapes, b) for b in timed]
    gemm_1, gemm_n = max(gemm[1]), max(gemm[threads])
    out: Dict[str, Any] = {
        "threads": threads,
        "steps": shapes.scaling_steps,
        "gemm": {"gflops_1": gemm_1, "gflops_n": gemm_n, "speedup": gemm_n / gemm_1},
    }
    for name in ["ours", "torch"] if with_torch else ["ours"]:
        one = _median_rate([b.tokens for b in timed], times[(name, 1)])
        many = _median_rate([b.tokens for b in timed], times[(name, threads)])
        gflops_1 = _median_rate(flops, times[(name, 1)]) / 1e9
        out[name] = {
            "tokens_per_s_1": one,
            f"tokens_per_s_{threads}": many,
            "tokens_per_s_n": many,
            "speedup": many / one,
            "gflops_1": gflops_1,
            "peak_fraction_1": gflops_1 / gemm_1,
            "step_s_1": list(times[(name, 1)]),
            "step_s_n": list(times[(name, threads)]),
        }
    return out


# ----------------------------------------------------------------------------------------------
# 4b. a busy machine: one core taken by another program
# ----------------------------------------------------------------------------------------------

BUSY_BLOCK = 4  # busy-machine section: units per setting before the next setting takes over
HOG_SOURCE = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"


def start_hog(seconds: float) -> "subprocess.Popen[bytes]":
    """A busy loop in another process that ends by itself after ``seconds`` (and is killed by the
    caller when the measurement ends first): one core taken, like a build or a browser tab."""
    import subprocess

    return subprocess.Popen([sys.executable, "-c", HOG_SOURCE.format(seconds=float(seconds))])


def bench_busy(shapes: BenchShapes, threads: int, seed: int = 0) -> Dict[str, Any]:
    """Training steps and greedy-decoding batches (32 sentences) with a CPU hog holding one core:
    1 thread, ``threads`` fixed (every loop split in equal shares, so all wait for the thread that
    shares the hog's core) and ``threads`` governed (:class:`ThreadGovernor`, what ``train`` and
    ``Translator`` do). The three take turns in blocks of ``BUSY_BLOCK`` units; the first
    ``busy_settle`` units of each, and the first unit of every block, are not timed (the governor
    finds its count in the settling ones; a real run has thousands)."""
    from ._runtime import ThreadGovernor

    model = build_ours(shapes, seed)
    batches = make_batches(shapes, shapes.busy_settle + shapes.busy_steps, seed=seed + 5)
    rng = np.random.default_rng(seed + 6)
    count = shapes.busy_settle + shapes.busy_steps
    sources = [
        pad(random_sentences(rng, 32, shapes.src_vocab, shapes.min_length, shapes.max_length)) for _ in range(count)
    ]
    greedy, _ = ours_greedy_function(model)
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
                            unit: Callable[[], Any] = lambda b=b: model.train_step(b.src, b.tgt_in, b.tgt_out)
                        else:
                            src = sources[i]
                            work = float(src.size)
                            unit = lambda src=src: greedy(src, START_ID, END_ID, shapes.max_length)
                        n = {"1": 1, "fixed": threads, "governed": governor.threads}[name]
                        set_num_threads(n)
                        t0 = time.perf_counter()
                        unit()
                        seconds = time.perf_counter() - t0
                        if name == "governed":
                            chosen.append(n)
                            governor.record(seconds, work)
                        if i >= shapes.busy_settle and i > start:
                            times[name].append(seconds)
                _log(
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


# ----------------------------------------------------------------------------------------------
# 5. serving: HTTP requests per second with and without request batching
# ----------------------------------------------------------------------------------------------

TARGET_BUSY_RATIO = 1.0  # busy machine: all threads (governed) at least as fast as 1 thread
SERVING_CLIENTS = 32  # concurrent HTTP clients
TARGET_SERVING_RATIO = 3.0  # requests/s with batching (--max-batch 32) / one at a time (--max-batch 1)


def serving_translator(
    seed: int = 0, vocab_size: int = 8000, words: int = 8000, corpus: int = 12000
) -> Tuple[Any, List[str]]:
    """A randomly initialised model of the ``tiny`` preset (its architecture with dropout off,
    and its recipe's 8,000-token vocabularies) with a subword vocabulary learnt from ``corpus``
    synthetic sentences over ``words`` made-up words, as a ``Translator``; and 256 synthetic
    input sentences of 4-10 words (about 18 tokens). A random model rarely emits the end token,
    so every sentence runs to its output limit (``1.5 * source tokens + 10``): the worst case
    for the server."""
    import logging

    from .model import preset_config
    from .tokenizer import SubwordTokenizer
    from .translate import Translator

    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    vocabulary = ["".join(rng.choice(letters, size=int(rng.integers(2, 9)))) for _ in range(words)]

    def sentence(lo: int, hi: int) -> str:
        return " ".join(rng.choice(vocabulary, size=int(rng.integers(lo, hi + 1)))) + "."

    log = logging.getLogger(f"{__package__}.tokenizer")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        tok = SubwordTokenizer.build_from_corpus([sentence(3, 12) for _ in range(corpus)], vocab_size)
    finally:
        log.setLevel(level)
    config = dict(preset_config("tiny"), dropout=0.0)
    model = Transformer(tok.vocab_size, tok.vocab_size, seed=seed, **config)
    return Translator(model, tok, tok, src_lang="en"), [sentence(4, 10) for _ in range(256)]


async def _http_client(host: str, port: int, bodies: Sequence[bytes], latencies: List[float]) -> None:
    """One keep-alive HTTP/1.1 connection posting ``bodies`` to /translate one after the other
    (a minimal client: the load generator should cost little next to the server)."""
    import asyncio

    reader, writer = await asyncio.open_connection(host, port)
    try:
        for body in bodies:
            started = time.perf_counter()
            writer.write(
                b"POST /translate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(body), body)
            )
            status = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            answer = await reader.readexactly(length)
            if b" 200 " not in status:
                raise RuntimeError(f"serving bench: {status.decode().strip()}: {answer[:200]!r}")
            latencies.append(time.perf_counter() - started)
    finally:
        writer.close()


def _client_loop() -> Tuple[Callable[[], Any], str]:
    """The load generator's event loop: uvloop's when it is installed (a cheaper client leaves more
    of the shared cores to the server), else asyncio's."""
    import asyncio

    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop, "asyncio"
    return uvloop.new_event_loop, "uvloop"


def _serving_load(
    host: str, port: int, per_client: Sequence[Sequence[bytes]], new_loop: Optional[Callable[[], Any]] = None
) -> Tuple[float, List[float]]:
    """Run one client per entry of ``per_client`` at once; (seconds, latencies)."""
    import asyncio

    latencies: List[float] = []

    async def main() -> None:
        await asyncio.gather(*(_http_client(host, port, bodies, latencies) for bodies in per_client))

    loop = (new_loop or asyncio.new_event_loop)()
    try:
        started = time.perf_counter()
        loop.run_until_complete(main())
        return time.perf_counter() - started, latencies
    finally:
        loop.close()


def _serving_client_process() -> None:
    """The load generator of :func:`bench_serving`, run in its own process (a real client is not in
    the server's process, and would not share its GIL). Says ``{"loop": ...}`` on one line of
    standard output, then for every job (one JSON line on standard input: ``host``, ``port`` and
    ``clients``, one list of request bodies per client) answers one line: ``seconds`` and
    ``latencies``, or ``error``. Ends at the end of its input."""
    new_loop, name = _client_loop()
    out = sys.stdout
    out.write(json.dumps({"loop": name}) + "\n")
    out.flush()
    for line in sys.stdin:
        job = json.loads(line)
        try:
            seconds, latencies = _serving_load(
                job["host"], int(job["port"]), [[b.encode() for b in bodies] for bodies in job["clients"]], new_loop
            )
            answer: Dict[str, Any] = {"seconds": seconds, "latencies": latencies}
        except Exception as exc:  # reported to the bench, which raises it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


class _LoadGenerator:
    """The parent's handle on :func:`_serving_client_process` (``python -c``; started once,
    before anything is timed, and used for every job)."""

    def __init__(self, timeout: float = 600.0) -> None:
        import queue
        import threading

        self.timeout = timeout
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from transformer_cpp.bench import _serving_client_process; _serving_client_process()",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._read, name="load-generator-reader", daemon=True).start()
        self.loop = self._answer("start")["loop"]

    def _read(self) -> None:
        """Hand the child's answers to :meth:`_answer` (which waits with a timeout); "" at the end."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def _answer(self, what: str) -> Dict[str, Any]:
        import queue

        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            raise RuntimeError(
                f"serving bench: the load generator gave no answer ({what}) in {self.timeout:g} s"
            ) from None
        if not line:
            raise RuntimeError(f"serving bench: the load generator exited ({what}) with status {self.proc.wait()}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"serving bench: load generator: {answer['error']}")
        return answer

    def run(self, url: str, per_client: Sequence[Sequence[bytes]]) -> Tuple[float, List[float]]:
        """Run one client per entry of ``per_client`` at once against ``url``; (seconds, latencies)."""
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        job = {
            "host": parts.hostname or "127.0.0.1",
            "port": parts.port or 80,
            "clients": [[b.decode() for b in bodies] for bodies in per_client],
        }
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        answer = self._answer("load")
        return float(answer["seconds"]), [float(x) for x in answer["latencies"]]

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def bench_serving(
    threads: int,
    quick: bool = False,
    seed: int = 0,
    clients: int = SERVING_CLIENTS,
    requests_per_client: Optional[int] = None,
) -> Dict[str, Any]:
    """Requests per second and latency of ``transformer-cpp serve`` (the app of
    :func:`transformer_cpp.serve.create_app` under uvicorn, with the HTTP parser and event loop of
    :func:`transformer_cpp.serve.uvicorn_choices`, in a thread of this process, on 127.0.0.1)
    with request batching (``--max-batch 32 --max-wait-ms 5``) and one sentence at a time
    (``--max-batch 1``): ``clients`` concurrent keep-alive connections, each posting
    ``{"text": ...}`` requests of one sentence one after the other (16 each; 2 with ``quick``).
    The clients run in a separate process (:func:`_serving_client_process`), as real clients
    would: they do not share the server's GIL. Both runs send the same requests, after one
    untimed warm-up request per client. The model is :func:`serving_translator`'s."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401

        from .serve import background_server, create_app, uvicorn_choices
    except ImportError as exc:
        return {"skipped": f"FastAPI/uvicorn not installed ({exc}); pip install 'transformer-cpp[serve]'"}
    set_num_threads(threads)
    # --quick: a small vocabulary, learnt in a fraction of a second (the numbers then mean little)
    translator, sentences = serving_translator(seed, *((1000, 1000, 3000) if quick else ()))
    per = requests_per_client or (2 if quick else 16)
    order = np.random.default_rng(seed).permutation(len(sentences))
    bodies = [json.dumps({"text": sentences[int(i)]}).encode() for i in order]
    timed = [[bodies[(c * per + k) % len(bodies)] for k in range(per)] for c in range(clients)]
    warm = [[bodies[(c * 7 + 3) % len(bodies)]] for c in range(clients)]
    out: Dict[str, Any] = {
        "clients": clients,
        "requests": clients * per,
        "threads": threads,
        "model": {
            k: v
            for k, v in translator.model.config.items()
            if k in ("d_model", "n_layers", "n_heads", "d_ff", "src_vocab_size")
        },
        "mean_output_limit": float(
            np.mean([int(1.5 * len(translator.src_tokenizer.encode(s))) + 10 for s in sentences])
        ),
        "server": uvicorn_choices(),
        "modes": {},
    }
    load = _LoadGenerator()
    out["client"] = {"process": "separate", "loop": load.loop}
    try:
        for name, max_batch in (("batching", 32), ("one_at_a_time", 1)):
            _log(f"serving: {clients} clients x {per} requests, --max-batch {max_batch}")
            app = create_app(translator, max_batch=max_batch, max_wait_ms=5.0, max_queue=100_000, threads=threads)
            with background_server(app) as url:
                load.run(url, warm)
                before = dict(app.state.batcher.stats)
                seconds, latencies = load.run(url, timed)
                stats = app.state.batcher.stats
            batches = stats["batches"] - before["batches"]
            ms = np.asarray(latencies) * 1000.0
            out["modes"][name] = {
                "max_batch": max_batch,
                "max_wait_ms": 5.0,
                "seconds": seconds,
                "requests_per_s": len(latencies) / seconds,
                "latency_ms_p50": float(np.percentile(ms, 50)),
                "latency_ms_p99": float(np.percentile(ms, 99)),
                "mean_batch": (stats["sentences"] - before["sentences"]) / batches if batches else None,
            }
    finally:
        load.close()
    out["ratio"] = out["modes"]["batching"]["requests_per_s"] / out["modes"]["one_at_a_time"]["requests_per_s"]
    return out


# ----------------------------------------------------------------------------------------------
# targets, report
# ----------------------------------------------------------------------------------------------


def evaluate_targets(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The issue's targets with the measured value and whether each is met (None: not measured)."""
    targets: List[Dict[str, Any]] = []

    def add(key: str, name: str, value: Optional[float], target: float, at_most: bool = False, unit: str = "x") -> None:
        met = None if value is None else (value <= target if at_most else value >= target)
        targets.append(
            {
                "key": key,
                "name": name,
                "value": value,
                "target": target,
                "comparison": "<=" if at_most else ">=",
                "unit": unit,
                "met": met,
            }
        )

    tr = results.get("training") or {}
    add("train_vs_torch", "training tokens/s, ours / PyTorch", tr.get("ratio"), TARGET_TRAIN_RATIO)
    add(
        "train_peak_fraction",
        "training model GFLOP/s / GEMM peak",
        (tr.get("ours") or {}).get("peak_fraction"),
        TARGET_TRAIN_PEAK,
        unit="%",
    )
    dec = (results.get("decoding") or {}).get("batches", {})
    big = str(max((int(k) for k in dec), default=0))
    d = dec.get(big, {})
    add("decode_vs_torch", f"greedy batch {big}, ours / PyTorch loop", d.get("ratio_vs_torch"), TARGET_DECODE_VS_TORCH)
    add(
        "decode_vs_ctranslate2",
        f"greedy batch {big}, ours / CTranslate2",
        d.get("ratio_vs_ctranslate2"),
        TARGET_DECODE_VS_CT2,
    )
    mem = results.get("memory") or {}
    add(
        "memory_vs_torch",
        "training peak memory (delta), ours / PyTorch",
        mem.get("ratio_delta"),
        TARGET_MEMORY_RATIO,
        at_most=True,
    )
    targets += _low_precision_targets(results)
    sc = results.get("scaling") or {}
    n = int(sc.get("threads", results.get("threads", 1)))
    if n > 1:
        add(
            "thread_scaling",
            f"training speed-up 1 -> {n} threads (ours)",
            (sc.get("ours") or {}).get("speedup"),
            round(TARGET_SCALING_PER_THREAD * n, 3),
        )
    bm = results.get("busy_machine") or {}
    for kind in ("training", "decoding"):
        if bm.get(kind):
            add(
                f"busy_{kind}",
                f"busy machine (one core hogged), {kind}: {bm['threads']} threads (governed) / 1 thread",
                bm[kind]["governed_vs_1"],
                TARGET_BUSY_RATIO,
            )
    sv = results.get("serving") or {}
    if sv:
        add(
            "serving_batching",
            f"serving requests/s at {sv.get('clients', SERVING_CLIENTS)} clients, batching / one at a time",
            sv.get("ratio"),
            TARGET_SERVING_RATIO,
        )
    return targets


def _low_precision_targets(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The issue's low-precision targets: training (best precision of ours) against PyTorch bf16
    autocast, greedy decoding (best compute type of ours) against CTranslate2 int8 at each batch."""
    out: List[Dict[str, Any]] = []

    def add(key: str, name: str, value: Optional[float], target: float) -> None:
        out.append(
            {
                "key": key,
                "name": name,
                "value": value,
                "target": target,
                "comparison": ">=",
                "unit": "x",
                "met": None if value is None else value >= target,
            }
        )

    tr = results.get("training") or {}
    if "torch_bf16" in tr:
        add(
            "train_vs_torch_bf16",
            "training tokens/s, best of ours / PyTorch bf16 autocast",
            tr.get("best_ours_vs_torch_bf16"),
            TARGET_TRAIN_VS_TORCH_BF16,
        )
    for bs, entry in ((results.get("decoding") or {}).get("batches") or {}).items():
        if bs in TARGET_DECODE_VS_CT2_INT8 and "ctranslate2_int8" in entry:
            add(
                f"decode_vs_ctranslate2_int8_b{bs}",
                f"greedy batch {bs}, best of ours / CTranslate2 int8",
                entry.get("best_ours_vs_ctranslate2_int8"),
                TARGET_DECODE_VS_CT2_INT8[bs],
            )
    return out


def _format_low_precision(results: Dict[str, Any], targets: Dict[str, Dict[str, Any]]) -> List[str]:
    """The low-precision peers' lines of the report: training in float32 and bf16 (ours, PyTorch),
    the bf16 GEMM peak, greedy decoding in float32 / int8 / bf16 against CTranslate2."""
    lines: List[str] = []

    def met(key: str) -> str:
        t = targets.get(key)
        if not t:
            return ""
        return f"   target {t['comparison']} {_fmt(t['target'], t['unit'])}: {({True: 'yes', False: 'NO', None: 'n/a'})[t['met']]}"

    g = results.get("gemm_bf16") or {}
    tr = results.get("training") or {}
    if g or any(k in tr for k in ("ours_bf16", "torch_bf16")):
        lines.append("3b. Low-precision peers (same weights, same batches, alternating in the runs of 2 and 3)")
    if g:
        parts = [
            f"{label} {g[k]:.0f}"
            for label, k in (("PyTorch bf16 matmul", "torch_gflops"), ("ours AVX512_BF16", "ours_gflops"))
            if g.get(k)
        ]
        lines.append(f"   bf16 GEMM peak {g['n']}^2 (GFLOP/s): {_fmt(g.get('gflops'))}  ({', '.join(parts) or 'none'})")
    if any(k in tr for k in ("ours_bf16", "torch_bf16")):
        lines.append(
            f"   {'training, target tokens/s':42}{'float32':>12}{'bf16':>12}{'GFLOP/s':>10}{'% bf16 peak':>13}"
        )
        for who, f32, b16 in (("ours", "ours", "ours_bf16"), ("PyTorch (bf16 = autocast)", "torch", "torch_bf16")):
            a, b = tr.get(f32) or {}, tr.get(b16) or {}
            lines.append(
                f"   {'  ' + who:42}{_fmt(a.get('tokens_per_s')):>12}{_fmt(b.get('tokens_per_s')):>12}"
                f"{_fmt(b.get('gflops')):>10}{_fmt(b.get('peak_fraction'), '%'):>13}"
            )
        if tr.get("best_ours"):
            lines.append(
                f"     best of ours ({tr['best_ours']}) / PyTorch float32 {_fmt(tr.get('best_ours_vs_torch'), 'x')}, "
                f"/ PyTorch bf16 autocast {_fmt(tr.get('best_ours_vs_torch_bf16'), 'x')}" + met("train_vs_torch_bf16")
            )
    for note in tr.get("low_precision_notes") or []:
        lines.append(f"   note: {note}")
    dec = results.get("decoding") or {}
    batches = dec.get("batches") or {}
    names = [
        n
        for n in ("ours", "ours_int8", "ours_bf16", "ctranslate2", "ctranslate2_int8")
        if any(n in e for e in batches.values())
    ]
    if any(n.endswith(("int8", "bf16")) for n in names):
        labels = {
            "ours": "ours f32",
            "ours_int8": "ours int8",
            "ours_bf16": "ours bf16",
            "ctranslate2": "CT2 f32",
            "ctranslate2_int8": "CT2 int8",
        }
        lines.append("   greedy decoding, sentences/s" + " " * 12 + "".join(f"{labels[n]:>11}" for n in names))
        for bs in sorted(batches, key=int):
            e = batches[bs]
            lines.append(
                f"   {'  batch ' + bs:42}"
                + "".join(f"{_fmt((e.get(n) or {}).get('sentences_per_s')):>11}" for n in names)
            )
            if "ctranslate2_int8" in e:
                lines.append(
                    f"     best of ours ({e['best_ours']}) / CTranslate2 int8 "
                    f"{_fmt(e.get('best_ours_vs_ctranslate2_int8'), 'x')}, / CTranslate2 float32 "
                    f"{_fmt(e.get('best_ours_vs_ctranslate2'), 'x')}" + met(f"decode_vs_ctranslate2_int8_b{bs}")
                )
            lengths = ", ".join(f"{labels[n]} {e[n]['mean_output_tokens']:.1f}" for n in names if n in e)
            lines.append(f"     mean output tokens: {lengths}")
        for note in dec.get("low_precision_notes") or []:
            lines.append(f"   note: {note}")
    return lines


def _fmt(value: Optional[float], kind: str = "num") -> str:
    if value is None:
        return "-"
    if kind == "x":
        return f"{value:.2f}x"
    if kind == "%":
        return f"{100 * value:.0f}%"
    if kind == "s":
        return f"{value:.3f} s"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def format_report(results: Dict[str, Any]) -> str:
    """The human-readable table."""
    m = results["machine"]
    lines = [
        f"transformer-cpp bench ({'quick' if results['quick'] else 'full'}): {results['threads']} thread(s), "
        f"{m['cpu']}, {m['cores']} core(s) available",
        f"load average {m.get('load_average_start', '?')} at start, {m.get('load_average_end', '?')} at end"
        + ("  (machine busy: timings are noisy)" if results.get("busy") else ""),
    ]
    for note in results.get("notes", []):
        lines.append(f"note: {note}")
    targets = {t["key"]: t for t in results.get("targets", [])}
    header = f"{'':44}{'ours':>12}{'PyTorch':>12}{'CTranslate2':>13}{'ratio':>9}   target     met"
    lines += ["", header, "-" * len(header)]

    def row(
        label: str, ours: str = "", torch: str = "", ct2: str = "", ratio: str = "", key: Optional[str] = None
    ) -> None:
        tgt = met = ""
        if key and key in targets:
            t = targets[key]
            tgt = f"{t['comparison']} {_fmt(t['target'], t['unit'])}"
            met = {True: "yes", False: "NO", None: "n/a"}[t["met"]]
        lines.append(f"{label:44}{ours:>12}{torch:>12}{ct2:>13}{ratio:>9}   {tgt:<10} {met}")

    g = results.get("gemm")
    if g:
        row(f"1. GEMM peak, NumPy fp32 {g['n']}^2 (GFLOP/s)", _fmt(g["gflops"]))
    tr = results.get("training")
    if tr:
        s = tr["shapes"]
        lines.append(
            f"2. Training step: batch {s['batch']}, lengths {s['min_length']}-{s['max_length']}, "
            f"d_model {s['d_model']}, {s['n_layers']}+{s['n_layers']} layers, d_ff {s['d_ff']}, "
            f"vocab {s['src_vocab']:,}/{s['tgt_vocab']:,}; median of {tr['steps']} steps"
        )
        o, t = tr["ours"], tr.get("torch") or {}
        row(
            "   target tokens/s",
            _fmt(o["tokens_per_s"]),
            _fmt(t.get("tokens_per_s")),
            "",
            _fmt(tr.get("ratio"), "x"),
            "train_vs_torch",
        )
        row("   model GFLOP/s (matmuls, fwd+bwd = 3x fwd)", _fmt(o["gflops"]), _fmt(t.get("gflops")))
        row(
            "   % of GEMM peak",
            _fmt(o.get("peak_fraction"), "%"),
            _fmt(t.get("peak_fraction"), "%"),
            "",
            "",
            "train_peak_fraction",
        )
        if o.get("useful_gflops") is not None:
            row("   useful GFLOP/s (real tokens)", _fmt(o["useful_gflops"]))
            row("   useful % of GEMM peak", _fmt(o.get("useful_peak_fraction"), "%"))
        row(
            f"   % of GEMM during the steps ({tr['gemm_during_steps_gflops']:.0f} GFLOP/s)",
            _fmt(o.get("fraction_of_gemm_during_steps"), "%"),
            _fmt(t.get("fraction_of_gemm_during_steps"), "%"),
        )
        row("   median step time", _fmt(o["step_s_median"], "s"), _fmt(t.get("step_s_median"), "s"))
        row(
            "   fastest / slowest step (s)",
            f"{min(o['step_s']):.2f}/{max(o['step_s']):.2f}",
            f"{min(t['step_s']):.2f}/{max(t['step_s']):.2f}" if t else "",
        )
    dec = results.get("decoding")
    if dec:
        lines.append(
            f"3. Greedy decoding: {dec['sentences']} sentences, up to {dec['max_length']} tokens "
            f"(sentences/s; CTranslate2 conversion: {dec['ctranslate2']['status']})"
        )
        keys = sorted(dec["batches"], key=int)
        for k in keys:
            e = dec["batches"][k]
            last = k == keys[-1]
            row(
                f"   batch {k}",
                _fmt(e["ours"]["sentences_per_s"]),
                _fmt((e.get("torch") or {}).get("sentences_per_s")),
                _fmt((e.get("ctranslate2") or {}).get("sentences_per_s")),
                _fmt(e.get("ratio_vs_torch"), "x"),
                "decode_vs_torch" if last else None,
            )
            if "ratio_vs_ctranslate2" in e:
                row(
                    "     ours / CTranslate2",
                    ratio=_fmt(e["ratio_vs_ctranslate2"], "x"),
                    key="decode_vs_ctranslate2" if last else None,
                )
        if dec["ctranslate2"].get("reason"):
            lines.append(f"   CTranslate2: {dec['ctranslate2']['reason']}")
        agree = []
        for k in keys:
            for n in ("torch", "ctranslate2"):
                if n in dec["batches"][k]:
                    agree.append(f"{n} b{k} {dec['batches'][k][n]['identical_to_ours']}")
        if agree:
            lines.append("   outputs identical to ours: " + ", ".join(agree))
        first = dec["batches"][keys[0]]["ours"]
        lines.append(
            f"   ours: {first['method']}; mean output length {first['mean_output_tokens']:.1f} tokens "
            "(a random model rarely emits the end token: near worst-case lengths)"
        )
    mem = results.get("memory")
    if mem:
        o, t = mem.get("ours", {}), mem.get("torch") or {}
        if "error" in o or "error" in t:
            lines.append(f"4. Peak memory: error: {o.get('error') or t.get('error')}")
        else:
            lines.append(
                f"4. Peak memory of {o.get('steps', '?')} training steps (child processes, "
                f"{o.get('source', 'peak RSS')})"
            )
            row(
                "   delta over imports (MB)",
                _fmt(o.get("delta_mb")),
                _fmt(t.get("delta_mb")),
                "",
                _fmt(mem.get("ratio_delta"), "x"),
                "memory_vs_torch",
            )
            row("   raw peak RSS (MB)", _fmt(o.get("raw_mb")), _fmt(t.get("raw_mb")))
    sc = results.get("scaling")
    if sc:
        n = sc["threads"]
        lines.append(f"   Thread scaling: training tokens/s at 1 and {n} threads")
        o, t = sc["ours"], sc.get("torch") or {}
        row("   1 thread", _fmt(o["tokens_per_s_1"]), _fmt(t.get("tokens_per_s_1")))
        row(f"   {n} threads", _fmt(o["tokens_per_s_n"]), _fmt(t.get("tokens_per_s_n")))
        row("   speed-up", _fmt(o["speedup"], "x"), _fmt(t.get("speedup"), "x"), "", "", "thread_scaling")
        g = sc.get("gemm") or {}
        if g:
            row(
                f"   machine: NumPy GEMM GFLOP/s 1 -> {n} threads",
                f"{g['gflops_1']:.0f}->{g['gflops_n']:.0f}",
                "",
                "",
                _fmt(g["speedup"], "x"),
            )
        row(
            "   1-thread model GFLOP/s (% of 1-thread GEMM)",
            f"{o['gflops_1']:.0f} ({100 * o['peak_fraction_1']:.0f}%)",
            f"{t['gflops_1']:.0f} ({100 * t['peak_fraction_1']:.0f}%)" if t else "",
        )
    bm = results.get("busy_machine")
    if bm:
        n = bm["threads"]
        lines.append(
            f"   Busy machine: a CPU hog holds one core; median of {bm['steps']} units after {bm['settle']} "
            "settling ones, alternating"
        )
        for kind in ("training", "decoding"):
            k = bm[kind]
            lines.append(
                f"   {k['unit']}: 1 thread {_fmt(k['seconds_1'], 's')}, {n} fixed {_fmt(k['seconds_fixed'], 's')} "
                f"({_fmt(k['fixed_vs_1'], 'x')} of 1 thread), {n} governed {_fmt(k['seconds_governed'], 's')} "
                f"({_fmt(k['governed_vs_1'], 'x')}; threads used {''.join(map(str, k['governed_threads']))})"
            )
    lines += _format_low_precision(results, targets)
    sv = results.get("serving")
    if sv:
        if "skipped" in sv:
            lines.append(f"5. Serving: skipped: {sv['skipped']}")
        else:
            m = sv["model"]
            server, client = sv.get("server") or {}, sv.get("client") or {}
            stack = f"uvicorn with {server['http']} and {server['loop']}" if server else "uvicorn"
            where = f"; clients in a separate process ({client['loop']})" if client.get("process") == "separate" else ""
            lines.append(
                f"5. Serving over HTTP ({stack}, 127.0.0.1{where}): {sv['clients']} concurrent clients, "
                f"{sv['requests']} one-sentence requests, {sv['threads']} C++ thread(s)"
            )
            lines.append(
                f"   random model of the tiny preset (d_model {m['d_model']}, {m['n_layers']}+{m['n_layers']} "
                f"layers, vocabularies {m['src_vocab_size']:,}): every output runs to its limit, "
                f"{sv['mean_output_limit']:.0f} tokens on average"
            )
            for name, label in (("batching", "batching"), ("one_at_a_time", "one at a time")):
                e = sv["modes"][name]
                row(f"   {label} (--max-batch {e['max_batch']}): requests/s", _fmt(e["requests_per_s"]))
                lines.append(
                    f"{'':6}latency p50 {e['latency_ms_p50']:.1f} ms, p99 {e['latency_ms_p99']:.1f} ms; "
                    f"{e['mean_batch']:.1f} sentences per decode call"
                )
            row("   batching / one at a time", ratio=_fmt(sv["ratio"], "x"), key="serving_batching")
    if results.get("mpi_scaling"):  # bench_mpi.py
        from .bench_mpi import format_mpi_scaling

        lines.extend(
            "6. " + line if i == 0 else "   " + line
            for i, line in enumerate(format_mpi_scaling(results["mpi_scaling"]))
        )
    lines.append("")
    return "\n".join(lines)


def _jsonable(obj: Any) -> Any:
    """Plain floats/ints (NumPy scalars converted); non-finite floats become None."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(float(obj)) else None
    return obj


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------


_DESCRIPTION = (
    "Benchmark the C++ core against PyTorch (and CTranslate2) in one run: machine GEMM peak, "
    "training step, greedy decoding, peak memory and thread scaling, and the HTTP server's throughput "
    "with and without request batching, with the project's targets."
)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for every library (default: all cores available to the process)",
    )
    p.add_argument("--quick", action="store_true", help="tiny shapes and few steps: a smoke test for CI")
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help="machine-readable results: to stdout (the table then goes to stderr) or to PATH",
    )
    p.add_argument("--steps", type=int, default=None, help="timed training steps per implementation")
    p.add_argument("--warmup", type=int, default=None, help="untimed training steps per implementation")
    p.add_argument("--sentences", type=int, default=None, help="sentences per greedy-decoding batch size")
    p.add_argument("--skip-memory", action="store_true", help="skip the peak-memory child processes")
    p.add_argument("--skip-decode", action="store_true", help="skip greedy decoding")
    p.add_argument("--skip-scaling", action="store_true", help="skip the thread-scaling measurement")
    p.add_argument(
        "--skip-busy",
        action="store_true",
        help="skip the busy-machine measurement (a CPU hog on one core: 1 thread against all)",
    )
    p.add_argument("--skip-serving", action="store_true", help="skip the HTTP serving measurement")
    p.add_argument(
        "--skip-mpi",
        action="store_true",
        help="skip the MPI scaling section (1 process of N threads against N ranks; bench_mpi.py)",
    )
    p.add_argument(
        "--serving-only",
        action="store_true",
        help="run only the HTTP serving measurement (batching against one at a time)",
    )
    p.add_argument("--no-torch", action="store_true", help="report ours alone even if PyTorch is installed")
    p.add_argument("--no-ctranslate2", action="store_true", help="leave CTranslate2 out")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and synthetic batches")
    p.add_argument("--child-memory", choices=("ours", "torch"), default=None, help=argparse.SUPPRESS)


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``bench`` subcommand on an ``argparse`` subparsers object; sets ``func``."""
    p = subparsers.add_parser(
        "bench", help="benchmark the C++ core against PyTorch (and CTranslate2)", description=_DESCRIPTION
    )
    _add_arguments(p)
    p.set_defaults(func=run_bench)
    return p


def _shapes_from_args(args: argparse.Namespace) -> BenchShapes:
    shapes = QUICK_SHAPES if args.quick else TUTORIAL_SHAPES
    changes = {k: getattr(args, k) for k in ("steps", "warmup", "sentences") if getattr(args, k, None) is not None}
    for k, v in changes.items():
        if v < (0 if k == "warmup" else 1):
            raise ValueError(f"--{k} must be {'>= 0' if k == 'warmup' else '>= 1'}, got {v}")
    return replace(shapes, **changes)


def run_bench(args: argparse.Namespace) -> int:
    """Run the benchmark described by parsed ``args``; print the table (and JSON). Returns 0."""
    threads = args.threads if args.threads is not None else available_cores()
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    shapes = _shapes_from_args(args)
    if args.child_memory:
        print(json.dumps(_jsonable(child_memory(args.child_memory, shapes, threads, args.seed))), flush=True)
        return 0

    serving_only = bool(getattr(args, "serving_only", False))
    if serving_only:  # nothing compares with PyTorch or CTranslate2: leave them out
        args.no_torch = args.no_ctranslate2 = True
    torch, torch_reason = (None, "disabled with --no-torch") if args.no_torch else _import_torch()
    ct2, ct2_reason = (None, "disabled with --no-ctranslate2") if args.no_ctranslate2 else _import_ctranslate2()
    how = set_all_threads(threads, torch)
    results: Dict[str, Any] = {
        "schema": JSON_SCHEMA_VERSION,
        "quick": bool(args.quick),
        "threads": threads,
        "threads_set_by": how,
        "machine": machine_facts(),
        "notes": [],
        "torch_version": getattr(torch, "__version__", None),
        "ctranslate2_version": getattr(ct2, "__version__", None),
    }
    if torch is None:
        results["notes"].append(f"PyTorch comparisons skipped: {torch_reason}")
    if ct2 is None:
        results["notes"].append(f"CTranslate2 comparison skipped: {ct2_reason}")
    elif getattr(os, "RTLD_DEEPBIND", 0):
        results["notes"].append(
            "CTranslate2 imported with RTLD_DEEPBIND: it keeps its own OpenMP runtime instead of "
            "sharing (and throttling) the one PyTorch and this package use"
        )
    if "not controlled" in how["numpy_blas"]:
        results["notes"].append("NumPy BLAS threads not controlled: the GEMM peak uses NumPy's default")
    t_start = time.perf_counter()

    if not serving_only:
        _log(f"GEMM peak ({shapes.gemm_n}^2 float32)")
        results["gemm"] = gemm_peak(shapes.gemm_n, shapes.gemm_repeats, args.seed)
        _log(f"bf16 GEMM peak ({shapes.gemm_n}^2)")
        results["gemm_bf16"] = bf16_gemm_peak(shapes.gemm_n, shapes.gemm_repeats, args.seed, torch)
        _log(f"training step ({shapes.name} shapes)")
        results["training"] = bench_training(
            shapes,
            results["gemm"]["gflops"],
            torch is not None,
            args.seed,
            bf16_peak_gflops=results["gemm_bf16"]["gflops"],
        )
    if not args.skip_decode and not serving_only:
        results["decoding"] = bench_decoding(shapes, threads, torch is not None, ct2 is not None, ct2_reason, args.seed)
    if not args.skip_memory and not serving_only:
        results["memory"] = measure_memory(shapes, threads, torch is not None, bool(args.quick), args.seed)
    if not args.skip_scaling and threads > 1 and not serving_only:
        results["scaling"] = bench_scaling(shapes, threads, torch is not None, args.seed)
    elif not args.skip_scaling and not serving_only:
        results["notes"].append("thread scaling skipped: only 1 thread")
    if not getattr(args, "skip_busy", False) and threads > 1 and not serving_only:
        results["busy_machine"] = bench_busy(shapes, threads, args.seed)
    if not getattr(args, "skip_serving", False):
        results["serving"] = bench_serving(threads, bool(args.quick), args.seed)
        if "skipped" in results["serving"]:
            results["notes"].append(f"serving skipped: {results['serving']['skipped']}")

    if not getattr(args, "skip_mpi", False) and not serving_only:  # bench_mpi.py
        from .bench_mpi import bench_mpi_scaling

        results["mpi_scaling"] = bench_mpi_scaling(
            bool(args.quick), ranks=max(threads, 2), rounds=1 if args.quick else 2, seed=args.seed
        )
        if "skipped" in results["mpi_scaling"]:
            results["notes"].append(f"MPI scaling skipped: {results['mpi_scaling']['skipped']}")
    results["elapsed_s"] = time.perf_counter() - t_start
    try:
        results["machine"]["load_average_end"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        pass
    # Busy: other work was running (the 1-minute load at the end includes our own threads).
    cores = results["machine"]["cores"]
    results["busy"] = bool(
        results["machine"].get("load_average_start", 0) > 0.5 * cores
        or results["machine"].get("load_average_end", 0) > threads + 0.5 * cores
    )
    results["targets"] = evaluate_targets(results)
    results = _jsonable(results)

    table = format_report(results)
    if args.json == "-":
        print(table, file=sys.stderr)
        print(json.dumps(results, indent=2))
    else:
        print(table)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(results, f, indent=2)
                f.write("\n")
            print(f"results written to {args.json}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m transformer_cpp.bench [options]`` (the options of ``transformer-cpp bench``)."""
    parser = argparse.ArgumentParser(prog="python -m transformer_cpp.bench", description=_DESCRIPTION)
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_bench(args)
    except ValueError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
