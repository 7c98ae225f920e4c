"""The fine-tuning step, its peak memory and the import of ``bench --marian``
(:mod:`transformer_cpp.bench.marian`).

Training: the saved MarianMT model read by :func:`~transformer_cpp.pretrained.load_marian` and
trained with ``Transformer.train_step`` (Adam, beta2 0.98, eps 1e-9, a fixed learning rate,
label smoothing 0.1), in float32 and (AVX512_BF16) with ``precision="bf16"``, against
``MarianMTModel.from_pretrained`` of the same directory trained with ``torch.optim.Adam`` (the
same settings, ``fused`` where PyTorch has it) on ``F.cross_entropy(..., ignore_index=pad,
label_smoothing=0.1)``, in float32 and under bf16 autocast. Before any step both evaluate the
first batch without dropout: the two losses must agree (the same model, the same loss).

Memory: each engine, ``load_marian`` and ``import_pretrained`` in a fresh process
(the task ``marian`` of :mod:`.child`, :func:`run_marian_child`), the peak
resident set size (:func:`~transformer_cpp.bench.memory.peak_rss`) after the imports and after
the work; the delta is what the work cost.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Tuple

import numpy as np

from .. import kernels
from ..model import Transformer
from ..pretrained import import_pretrained, load_marian
from .machine import log, set_all_threads
from .marian_model import END_ID, UNK_ID, MarianShapes, pad_rows
from .marian_report import NAMES
from .child import run_child
from .memory import peak_rss

__all__ = [
    "FIXED_LR",
    "LABEL_SMOOTHING",
    "MARIAN_CHILDREN",
    "MarianBatch",
    "bench_marian_training",
    "marian_batches",
    "measure_import",
    "measure_training_memory",
    "run_marian_child",
]

#: The fine-tuning settings shared by every engine.
FIXED_LR = 5e-5
LABEL_SMOOTHING = 0.1
BETAS, EPS = (0.9, 0.98), 1e-9
#: What a memory child can run.
MARIAN_CHILDREN = ("ours", "ours_bf16", "torch", "torch_bf16", "load_marian", "import_pretrained")

Step = Callable[["MarianBatch"], Tuple[float, float]]  # a batch -> (seconds, loss)


class MarianBatch(NamedTuple):
    """One teacher-forced batch: ``tgt_in`` starts with the decoder start id (= padding),
    ``tgt_out`` ends each sentence with the end id; padding fills both."""

    src: np.ndarray
    tgt_in: np.ndarray
    tgt_out: np.ndarray
    tokens: int  # non-padding targets


def marian_batches(s: MarianShapes, count: int, seed: int) -> List[MarianBatch]:
    """``count`` random batches of ``s.batch`` pairs: sources of ``s.train_min``-``s.train_max``
    ids (end included), each target 0.8-1.25 times its source's length."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        srcs, tins, touts = [], [], []
        for _ in range(s.batch):
            n = int(rng.integers(s.train_min, s.train_max + 1))
            m = max(2, int(round(n * rng.uniform(0.8, 1.25))))
            words = [int(x) for x in rng.integers(UNK_ID + 1, s.pad, size=m - 1)]
            srcs.append([int(x) for x in rng.integers(UNK_ID + 1, s.pad, size=n - 1)] + [END_ID])
            tins.append([s.pad] + words)
            touts.append(words + [END_ID])
        tgt_out = pad_rows(touts, s.pad)
        out.append(MarianBatch(pad_rows(srcs, s.pad), pad_rows(tins, s.pad), tgt_out, int((tgt_out != s.pad).sum())))
    return out


def _ours(directory: Path, precision: str) -> Any:
    model = load_marian(directory)
    if precision != "float32":
        low = Transformer.from_config(dict(model.config, precision=precision))
        for name, p in low.parameters().items():
            p.value[...] = model.parameters()[name].value
        model = low
    model.configure_optimizer(
        fixed_lr=FIXED_LR, label_smoothing=LABEL_SMOOTHING, beta1=BETAS[0], beta2=BETAS[1], eps=EPS
    )
    return model


def _ours_step(model: Any) -> Step:
    def step(b: MarianBatch) -> Tuple[float, float]:
        t0 = time.perf_counter()
        loss, _ = model.train_step(b.src, b.tgt_in, b.tgt_out)
        return time.perf_counter() - t0, loss

    return step


class TorchMarian:
    """``MarianMTModel`` of a saved directory with ``torch.optim.Adam``, optionally under bf16 autocast."""

    def __init__(self, directory: Path, s: MarianShapes, autocast: bool = False) -> None:
        import torch
        from transformers import MarianMTModel

        self.torch, self.s, self.autocast = torch, s, autocast
        self.model = MarianMTModel.from_pretrained(str(directory), local_files_only=True, dtype=torch.float32)
        params = list(self.model.parameters())
        try:
            self.optimizer = torch.optim.Adam(params, lr=FIXED_LR, betas=BETAS, eps=EPS, fused=True)
        except (RuntimeError, TypeError, ValueError):  # a PyTorch without the fused CPU Adam
            self.optimizer = torch.optim.Adam(params, lr=FIXED_LR, betas=BETAS, eps=EPS)

    def tensors(self, b: MarianBatch) -> Tuple[Any, ...]:
        t = self.torch
        src = t.from_numpy(b.src)
        return src, (src != self.s.pad).long(), t.from_numpy(b.tgt_in), t.from_numpy(b.tgt_out)

    def loss(self, src: Any, mask: Any, tgt_in: Any, tgt_out: Any) -> Any:
        logits = self.model(input_ids=src, attention_mask=mask, decoder_input_ids=tgt_in).logits
        return self.torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            tgt_out.reshape(-1),
            ignore_index=self.s.pad,
            label_smoothing=LABEL_SMOOTHING,
        )

    def train_step(self, *tensors: Any) -> float:
        t = self.torch
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        with t.autocast("cpu", dtype=t.bfloat16, enabled=self.autocast):
            loss = self.loss(*tensors)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    def step(self, b: MarianBatch) -> Tuple[float, float]:
        tensors = self.tensors(b)  # made before the clock starts
        t0 = time.perf_counter()
        loss = self.train_step(*tensors)
        return time.perf_counter() - t0, loss

    def evaluate(self, b: MarianBatch) -> float:
        self.model.eval()  # type: ignore[no-untyped-call]
        with self.torch.no_grad():
            return float(self.loss(*self.tensors(b)))


def _trainers(directory: Path, s: MarianShapes, with_torch: bool) -> Tuple[Dict[str, Any], List[str]]:
    notes: List[str] = []
    found: Dict[str, Any] = {"ours": _ours(directory, "float32")}
    if kernels.have_bf16():
        found["ours_bf16"] = _ours(directory, "bf16")
    else:
        notes.append(f"transformer-cpp bf16 training skipped: {kernels.bf16_unsupported_reason()}")
    if with_torch:
        found["torch"] = TorchMarian(directory, s)
        if kernels.have_bf16():
            found["torch_bf16"] = TorchMarian(directory, s, autocast=True)
        else:
            notes.append("PyTorch bf16 autocast skipped: without AVX512_BF16 it is slower than its float32")
    return found, notes


def bench_marian_training(directory: Path, s: MarianShapes, with_torch: bool, seed: int = 0) -> Dict[str, Any]:
    """Every engine from the same saved weights on the same batches, alternating step by step (the
    order reversed every other step); the first ``s.warmup`` steps of each are not timed."""
    trainers, notes = _trainers(directory, s, with_torch)
    batches = marian_batches(s, s.warmup + s.train_steps, seed + 21)
    result: Dict[str, Any] = {
        "notes": notes,
        "parameters": trainers["ours"].num_parameters(),
        "batch": s.batch,
        "mean_target_tokens": statistics.mean(b.tokens for b in batches[s.warmup :]),
        "settings": f"Adam (betas {BETAS}, eps {EPS:g}), fixed learning rate {FIXED_LR:g}, label smoothing "
        f"{LABEL_SMOOTHING:g}, dropout 0.1, without clipping",
        "engines": {},
    }
    first = batches[0]
    check = {"ours": trainers["ours"].evaluate(first.src, first.tgt_in, first.tgt_out)[0]}
    if "torch" in trainers:
        check["torch"] = trainers["torch"].evaluate(first)
        check["difference"] = abs(check["ours"] - check["torch"])
    result["eval_loss_first_batch"] = check
    steps: Dict[str, Step] = {n: (t.step if isinstance(t, TorchMarian) else _ours_step(t)) for n, t in trainers.items()}
    times: Dict[str, List[float]] = {n: [] for n in steps}
    losses: Dict[str, List[float]] = {n: [] for n in steps}
    order = list(steps)
    for i, b in enumerate(batches):
        for n in order if i % 2 == 0 else order[::-1]:
            seconds, loss = steps[n](b)
            losses[n].append(loss)
            if i >= s.warmup:
                times[n].append(seconds)
        log(f"marian training step {i + 1}/{len(batches)}" + ("" if i >= s.warmup else " (warm-up)"))
    timed = batches[s.warmup :]
    labels = {
        "ours": "transformer-cpp train_step, float32",
        "ours_bf16": "transformer-cpp train_step, bf16",
        "torch": "PyTorch MarianMTModel, float32",
        "torch_bf16": "PyTorch MarianMTModel, bf16 autocast",
    }
    for n in steps:
        rates = [b.tokens / t for b, t in zip(timed, times[n])]
        result["engines"][n] = {
            "label": labels[n],
            "tokens_per_s": statistics.median(rates),
            "step_s": times[n],
            "step_s_median": statistics.median(times[n]),
            "first_loss": losses[n][0],
            "last_loss": losses[n][-1],
        }
    rate = {n: e["tokens_per_s"] for n, e in result["engines"].items()}
    mine = [n for n in rate if n.startswith("ours")]
    best = max(mine, key=lambda n: rate[n])
    result["best_ours"] = best
    for n in rate:
        if n.startswith("torch"):
            result[f"best_ours_vs_{n}"] = rate[best] / rate[n]
    torch_rates = [rate[n] for n in rate if n.startswith("torch")]
    if torch_rates:
        result["best_ours_vs_best_torch"] = rate[best] / max(torch_rates)
    trainers.clear()
    return result


def run_marian_child(which: str, directory: Path, s: MarianShapes, threads: int, seed: int) -> Dict[str, Any]:
    """In a fresh process: import what ``which`` needs, read the peak RSS, do the work (the
    training steps of one engine, ``load_marian`` or ``import_pretrained``), read it again."""
    torch_module: Any = None
    if which.startswith("torch"):
        import torch
        import transformers  # noqa: F401

        torch_module = torch
    set_all_threads(threads, torch_module)
    import safetensors.numpy  # noqa: F401  (what load_marian reads with)

    baseline, source = peak_rss()
    t0 = time.perf_counter()
    steps = 0
    if which == "load_marian":
        load_marian(directory)
    elif which == "import_pretrained":
        with tempfile.TemporaryDirectory(prefix="tcpp-marian-import-") as out:
            import_pretrained(directory, Path(out) / "run")
            seconds = time.perf_counter() - t0
            peak, _ = peak_rss()
    elif which in ("ours", "ours_bf16", "torch", "torch_bf16"):
        batches = marian_batches(s, s.memory_steps, seed + 21)
        if which.startswith("ours"):
            run = _ours_step(_ours(directory, "bf16" if which == "ours_bf16" else "float32"))
        else:
            run = TorchMarian(directory, s, autocast=which == "torch_bf16").step
        for b in batches:
            run(b)
        steps = len(batches)
    else:
        raise ValueError(f"--child: expected one of {', '.join(MARIAN_CHILDREN)}, got {which!r}")
    if which != "import_pretrained":
        seconds = time.perf_counter() - t0
        peak, _ = peak_rss()
    return {
        "which": which,
        "seconds": seconds,
        "baseline_mb": baseline / 2**20,
        "raw_mb": peak / 2**20,
        "delta_mb": (peak - baseline) / 2**20,
        "steps": steps,
        "source": source,
    }


def _child(which: str, directory: Path, s: MarianShapes, threads: int, seed: int) -> Dict[str, Any]:
    log(f"marian: {NAMES.get(which, which)} in a child process")
    found = run_child(
        "marian", threads, attempts=2, timeout=900, which=which, model=str(directory), shapes=asdict(s), seed=seed
    )
    if "error" in found:
        log(f"marian child ({which}) failed: {found['error']}")
    return found


def measure_import(directory: Path, s: MarianShapes, threads: int, seed: int, checkpoint_bytes: int) -> Dict[str, Any]:
    """``load_marian`` and ``import_pretrained`` of the saved model, each in a fresh process: seconds,
    peak memory over the imports and its ratio to the size of ``model.safetensors``."""
    out: Dict[str, Any] = {"checkpoint_mb": checkpoint_bytes / 2**20}
    for which in ("load_marian", "import_pretrained"):
        found = _child(which, directory, s, threads, seed)
        if "delta_mb" in found:
            found["delta_over_checkpoint"] = found["delta_mb"] / out["checkpoint_mb"]
        out[which] = found
    return out


def measure_training_memory(
    directory: Path, s: MarianShapes, threads: int, with_torch: bool, seed: int = 0
) -> Dict[str, Any]:
    """Peak memory of ``s.memory_steps`` fine-tuning steps of each engine, each in a fresh process."""
    out: Dict[str, Any] = {
        "method": "peak RSS (VmHWM, else ru_maxrss) of a child process after reading the model and its "
        "training steps; delta = that peak - the peak after imports"
    }
    children = ["ours"] + (["ours_bf16"] if kernels.have_bf16() else [])
    if with_torch:
        children += ["torch"] + (["torch_bf16"] if kernels.have_bf16() else [])
    for which in children:
        out[which] = _child(which, directory, s, threads, seed)
    ours, theirs = out["ours"].get("delta_mb"), (out.get("torch") or {}).get("delta_mb")
    out["ratio_delta"] = ours / theirs if ours is not None and theirs else None
    return out
