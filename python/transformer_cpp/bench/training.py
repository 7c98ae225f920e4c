"""Sections 2 and 4 of the benchmark: the training step, and its scaling with threads.

:func:`bench_training` runs ``Transformer.train_step`` and (with PyTorch) the same architecture
in ``torch.nn`` (:class:`~transformer_cpp.bench.peers.TorchTrainer`) from the same weights on the
same batches, alternating step by step; with ``low_precision`` ours in bf16 and PyTorch under
bf16 autocast take their turns too. :func:`bench_scaling` times the step at 1 thread and at all
threads, with the NumPy GEMM at both as the machine's own ceiling.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .. import kernels
from ..model import Transformer
from .gemm import gemm_peak, gemm_probe
from .machine import SOFTWARE, log, set_all_threads
from .peers import TorchTrainer
from .shapes import Batch, BenchShapes, make_batches, training_step_flops, useful_forward_flops

__all__ = ["bench_scaling", "bench_training", "build_ours", "timed_steps"]


def build_ours(shapes: BenchShapes, seed: int = 0, precision: str = "float32") -> Transformer:
    """Our model at ``shapes`` with Adam (beta2 0.98, eps 1e-9, the warm-up schedule), its matrix
    products in ``precision`` ("float32" or "bf16")."""
    model = Transformer(**dict(shapes.model_config(seed), precision=precision))
    model.configure_optimizer()
    return model


def timed_steps(model: Transformer) -> Callable[[Batch], Tuple[float, float]]:
    """A step function for ``model``: one ``train_step`` on a batch, returning ``(seconds, loss)``."""

    def step(b: Batch) -> Tuple[float, float]:
        t0 = time.perf_counter()
        loss, _ = model.train_step(b.src, b.tgt_in, b.tgt_out)
        return time.perf_counter() - t0, loss

    return step


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
    ours with ``precision="bf16"`` and PyTorch under bf16 autocast (when ``with_torch``), both only
    when the CPU has AVX512_BF16. Returns ``{name: step function}`` (a step returns ``(seconds, loss)``)
    and notes on what was left out."""
    steps: Dict[str, Callable[[Batch], Tuple[float, float]]] = {}
    notes: List[str] = []
    if kernels.have_bf16():
        ours = Transformer(**dict(shapes.model_config(seed), precision="bf16"))
        for name, p in ours.parameters().items():
            p.value[...] = model.parameters()[name].value
        ours.configure_optimizer()
        steps["ours_bf16"] = timed_steps(ours)
    else:
        notes.append(f"{SOFTWARE} bf16 training skipped: {kernels.bf16_unsupported_reason()}")
    if with_torch and kernels.have_bf16():
        steps["torch_bf16"] = TorchTrainer(shapes, model, autocast=True).timed_step
    elif with_torch:
        # PyTorch's bf16 autocast runs here too, but with its bf16 products emulated in float32
        # arithmetic: far slower than its own float32 step, so no one's fastest mode.
        notes.append(
            "PyTorch bf16 autocast skipped: without bf16 dot-product instructions it is slower than PyTorch float32"
        )
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
    runners: List[Tuple[str, Callable[[Batch], Tuple[float, float]]]] = [("ours", timed_steps(model))]
    if trainer is not None:
        runners.append(("torch", trainer.timed_step))
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
        log(
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
        torch_rates: List[float] = [r for r in (rates.get("torch"), rates.get("torch_bf16")) if r]
        if torch_rates:
            out["best_ours_vs_best_torch"] = ours[best] / max(torch_rates)
    return out


def bench_scaling(shapes: BenchShapes, threads: int, with_torch: bool, seed: int = 0) -> Dict[str, Any]:
    """Training tokens/s at 1 thread and at ``threads``, interleaved step by step (ours; PyTorch for
    reference), one untimed step per setting first; plus the NumPy GEMM peak at both thread counts,
    the machine's own scaling ceiling (two vCPUs of a busy or SMT host scale less than 2x)."""
    model = build_ours(shapes, seed)
    trainer = TorchTrainer(shapes, model) if with_torch else None
    runners: List[Tuple[str, Callable[[Batch], Tuple[float, float]]]] = [("ours", timed_steps(model))]
    if trainer is not None:
        runners.append(("torch", trainer.timed_step))

    def use(n: int) -> None:
        set_all_threads(n, trainer.torch if trainer is not None else None)

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
                for name, run in runners:
                    seconds, _ = run(b)
                    if i:
                        times.setdefault((name, n), []).append(seconds)
            log(
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
    for name, _ in runners:
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
