"""Choosing the training precision by measuring it: ``precision="auto"``.

bf16 mixed precision (``Transformer(..., precision="bf16")``) is faster than float32 only where the
CPU's ``vdpbf16ps`` does more multiply-adds per cycle than its float32 FMAs: measured 1.35x float32
at the quick preset's shapes on an AMD Zen 4, 0.84x on a Xeon with AVX512_BF16 at half rate
(README, "bfloat16 mixed precision"). Nothing in CPUID tells the two apart, so ``auto`` times a
few training steps of the run's own model in both precisions, on a synthetic batch of the run's
size, taking turns, and keeps bf16 only if it is clearly faster (:data:`BF16_MARGIN`). The
losses of the two agree (README: 3 epochs of the tiny preset end at the same loss to 4 digits);
the choice is printed and recorded in the checkpoint like any precision, and ``--resume`` keeps
what the run chose.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from . import kernels

__all__ = ["AUTO", "BF16_MARGIN", "choose_precision", "measure_precisions", "pick_precision"]

AUTO = "auto"

# bf16 is kept when a step runs at least this much faster: below it the gain is within the noise
# of a short measurement on a shared machine, and float32 is the reference precision.
BF16_MARGIN = 1.10

# the synthetic batch: sentences of this many tokens, as many as fit the token budget
_SENTENCE_TOKENS = 12


def pick_precision(rates: Mapping[str, float], margin: float = BF16_MARGIN) -> str:
    """``"bf16"`` if its rate (target tokens/s) is at least ``margin`` times float32's, else
    ``"float32"``; float32 when bf16 was not measured."""
    f32, bf16 = rates.get("float32"), rates.get("bf16")
    if bf16 is None or f32 is None or not f32 > 0:
        return "float32"
    return "bf16" if bf16 >= margin * f32 else "float32"


def measure_precisions(
    arch: Mapping[str, Any],
    src_vocab: int,
    tgt_vocab: int,
    max_tokens: int,
    rounds: int = 3,
    steps: int = 2,
    seed: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> Dict[str, float]:
    """Target tokens per second of a training step of the model ``arch`` (the run's architecture,
    ``precision`` ignored) in float32 and in bf16: the median over ``rounds`` of ``steps`` steps
    each, the two taking turns, after one untimed step each. Both models are thrown away."""
    from .model import Transformer

    cfg = {k: v for k, v in arch.items() if k != "precision"}
    rows = max(1, int(max_tokens) // _SENTENCE_TOKENS)
    rng = np.random.default_rng(seed)
    src = rng.integers(4, src_vocab, size=(rows, _SENTENCE_TOKENS), dtype=np.int64)
    tgt = rng.integers(4, tgt_vocab, size=(rows, _SENTENCE_TOKENS + 1), dtype=np.int64)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    models = {}
    for precision in ("float32", "bf16"):
        model = Transformer(src_vocab, tgt_vocab, seed=seed, **dict(cfg, precision=precision))
        model.configure_optimizer()
        model.train_step(src, tgt_in, tgt_out)  # untimed: workspaces, packing buffers
        models[precision] = model
    tokens = float(tgt_out.size * steps)
    rates: Dict[str, List[float]] = {name: [] for name in models}
    for r in range(rounds):
        order = list(models) if r % 2 == 0 else list(reversed(list(models)))
        for name in order:
            t0 = clock()
            for _ in range(steps):
                models[name].train_step(src, tgt_in, tgt_out)
            rates[name].append(tokens / max(clock() - t0, 1e-9))
    return {name: statistics.median(values) for name, values in rates.items()}


def choose_precision(
    arch: Mapping[str, Any],
    src_vocab: int,
    tgt_vocab: int,
    max_tokens: int,
    seed: int = 0,
    measure: Optional[Callable[..., Dict[str, float]]] = None,
) -> Tuple[str, str]:
    """Resolve ``precision="auto"`` for a training run: ``(precision, why)``. float32 without
    measuring where bf16 cannot run (no AVX512_BF16, or a float64 model); otherwise
    :func:`measure_precisions` (or ``measure``) decides through :func:`pick_precision`."""
    if arch.get("dtype", "float32") != "float32":
        return "float32", f"precision auto: float32 (bf16 mixed precision needs a float32 model, not {arch['dtype']})"
    if not kernels.have_bf16():
        return "float32", f"precision auto: float32 (bf16 cannot run here: {kernels.bf16_unsupported_reason()})"
    rates = (measure or measure_precisions)(arch, src_vocab, tgt_vocab, max(int(max_tokens), 256), seed=seed)
    chosen = pick_precision(rates)
    ratio = rates["bf16"] / rates["float32"] if rates.get("float32") else float("nan")
    return chosen, (
        f"precision auto: {chosen} (a training step of this model: bf16 {rates['bf16']:,.0f} against "
        f"float32 {rates['float32']:,.0f} target tokens/s, {ratio:.2f}x; bf16 is kept from {BF16_MARGIN:.2f}x)"
    )
