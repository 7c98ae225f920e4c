"""Choosing the training precision, and the quick preset's model size, by measuring them:
``precision="auto"`` and model size auto (:func:`choose_size`, further down).

bf16 mixed precision (``Transformer(..., precision="bf16")``) is faster than float32 where the CPU
has AMX tiles (Intel Xeon since Sapphire Rapids: about twice as fast per step) or where its
``vdpbf16ps`` does more multiply-adds per cycle than its float32 FMAs, which some CPUs with
AVX512_BF16 run at half rate (docs/experiments.md has measurements, with their CPUs). Nothing in
CPUID tells the last two kinds apart, so ``auto`` times a
few training steps of the run's own model in both precisions, on a synthetic batch of the run's
size, taking turns, and keeps bf16 only if it is clearly faster (:data:`BF16_MARGIN`). The
two precisions train to the same losses (tests/unit/test_bf16.py compares them); the choice is printed and recorded in the checkpoint like any precision, and ``--resume`` keeps
what the run chose.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from . import kernels
from .model import Transformer

__all__ = [
    "AUTO",
    "BF16_MARGIN",
    "LOOP_EFFICIENCY",
    "choose_precision",
    "choose_size",
    "measure_models",
    "measure_precisions",
    "pick_precision",
    "pick_size",
]

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


def measure_models(
    models: Mapping[str, Mapping[str, Any]],
    src_vocab: int,
    tgt_vocab: int,
    max_tokens: int,
    rounds: int = 3,
    steps: int = 2,
    seed: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> Dict[str, float]:
    """Target tokens per second of a training step of each architecture in ``models`` (name ->
    Transformer arguments): the median over ``rounds`` of ``steps`` steps each on one synthetic
    batch of about ``max_tokens`` target tokens, the models taking turns (the order reversed every
    other round), after one untimed step each. The models are thrown away."""
    rows = max(1, int(max_tokens) // _SENTENCE_TOKENS)
    rng = np.random.default_rng(seed)
    src = rng.integers(4, src_vocab, size=(rows, _SENTENCE_TOKENS), dtype=np.int64)
    tgt = rng.integers(4, tgt_vocab, size=(rows, _SENTENCE_TOKENS + 1), dtype=np.int64)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    built = {}
    for name, cfg in models.items():
        model = Transformer(src_vocab, tgt_vocab, seed=seed, **cfg)
        model.configure_optimizer()
        model.train_step(src, tgt_in, tgt_out)  # untimed: workspaces, packing buffers
        built[name] = model
    tokens = float(tgt_out.size * steps)
    rates: Dict[str, List[float]] = {name: [] for name in built}
    for r in range(rounds):
        order = list(built) if r % 2 == 0 else list(reversed(list(built)))
        for name in order:
            t0 = clock()
            for _ in range(steps):
                built[name].train_step(src, tgt_in, tgt_out)
            rates[name].append(tokens / max(clock() - t0, 1e-9))
    return {name: statistics.median(values) for name, values in rates.items()}


def measure_precisions(
    arch: Mapping[str, Any], src_vocab: int, tgt_vocab: int, max_tokens: int, **timing: Any
) -> Dict[str, float]:
    """Target tokens per second of a training step of the model ``arch`` (the run's architecture,
    ``precision`` ignored) in float32 and in bf16 (:func:`measure_models`, which ``timing`` gives
    its ``rounds``, ``steps``, ``seed`` and ``clock``)."""
    cfg = {k: v for k, v in arch.items() if k != "precision"}
    models = {name: dict(cfg, precision=name) for name in ("float32", "bf16")}
    return measure_models(models, src_vocab, tgt_vocab, max_tokens, **timing)


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


# Choosing the model's size by measuring: a preset with a "grow" section (the quick preset) trains
# a larger architecture when the machine is fast enough to give it enough epochs in the run's time
# budget. Which model is best in ten minutes depends on how much the CPU does in ten minutes
# (docs/experiments.md): where the quick model gets about 9 epochs it has stopped improving, and a
# wider model given the same minutes ends ahead once it gets about 8 epochs of its own; with 5-6 it
# is still behind.

# the share of the synthetic step rate (:func:`measure_models`) that a training epoch reaches:
# validation after each epoch, batches of every length, the data pipeline (docs/experiments.md: the
# main job's epochs ran at about 0.8 of the rate measured when it started)
LOOP_EFFICIENCY = 0.8


def pick_size(
    rates: Mapping[str, float],
    tokens_per_epoch: float,
    budget_seconds: float,
    min_epochs: float,
    efficiency: float = LOOP_EFFICIENCY,
) -> Tuple[str, Dict[str, float]]:
    """``("larger" | "base", expected epochs of each)``: ``"larger"`` when the larger model's
    expected epochs in ``budget_seconds`` (its rate, ``rates["larger"]`` target tokens/s, times
    ``efficiency``) reach ``min_epochs``."""
    per_epoch = max(float(tokens_per_epoch), 1.0)
    epochs = {
        name: efficiency * max(float(rate), 0.0) * float(budget_seconds) / per_epoch for name, rate in rates.items()
    }
    return ("larger" if epochs.get("larger", 0.0) >= min_epochs else "base"), epochs


def _describe(arch: Mapping[str, Any], keys: Any) -> str:
    return ", ".join(f"{k} {arch[k]:g}" if isinstance(arch[k], float) else f"{k} {arch[k]}" for k in keys)


def choose_size(
    arch: Mapping[str, Any],
    larger: Mapping[str, Any],
    min_epochs: float,
    src_vocab: int,
    tgt_vocab: int,
    max_tokens: int,
    tokens_per_epoch: float,
    budget_seconds: float,
    seed: int = 0,
    measure: Optional[Callable[..., Dict[str, float]]] = None,
) -> Tuple[Dict[str, Any], str]:
    """``(architecture, why)``: ``arch`` updated with ``larger`` when a training step of that model,
    timed against ``arch``'s (:func:`measure_models`, in the run's concrete precision), says it
    gets at least ``min_epochs`` epochs of ``tokens_per_epoch`` target tokens in
    ``budget_seconds``; ``arch`` unchanged otherwise."""
    base = dict(arch)
    big = dict(arch, **larger)
    rates = (measure or measure_models)(
        {"base": base, "larger": big}, src_vocab, tgt_vocab, max(int(max_tokens), 256), seed=seed
    )
    choice, epochs = pick_size(rates, tokens_per_epoch, budget_seconds, min_epochs)
    keys = list(larger)
    chosen = big if choice == "larger" else base
    return chosen, (
        f"model size auto: {_describe(chosen, keys)} (in the {budget_seconds / 60:g}-minute budget about "
        f"{epochs['larger']:.1f} epochs of {_describe(big, keys)} at {rates['larger']:,.0f} target tokens/s, "
        f"{epochs['base']:.1f} of {_describe(base, keys)} at {rates['base']:,.0f}; the larger model is "
        f"trained from {min_epochs:g} epochs)"
    )
