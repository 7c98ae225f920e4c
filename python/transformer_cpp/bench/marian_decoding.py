"""The decoding measurement of ``bench --marian`` (:mod:`transformer_cpp.bench.marian`).

Every engine decodes the same random source sentences of one saved MarianMT model with a fixed
output length. An engine is a name, a label, a ``prepare`` (source ids to the engine's input,
outside the timed region) and a ``run`` (that input to the generated ids of every sentence,
timed); the engines of one measurement take turns batch by batch, the order rotating, after one
untimed batch each.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Sequence, Tuple

import numpy as np

from .. import kernels
from ..pretrained import load_marian
from .machine import log
from .marian_model import END_ID, MarianShapes, pad_rows, random_sources
from .marian_report import NAMES

__all__ = ["Engine", "bench_marian_decoding", "trim"]

Ids = Tuple[int, ...]


class Engine(NamedTuple):
    """One decoder: its report label, the input it needs, the timed call."""

    label: str
    prepare: Callable[[np.ndarray], Any]
    run: Callable[[Any, int], List[Ids]]  # (prepared batch, beam) -> generated ids per sentence


def trim(row: Sequence[int], pad: int) -> Ids:
    """Generated ids up to and including the end id, padding dropped."""
    out: List[int] = []
    for v in row:
        v = int(v)
        if v == pad:
            break
        out.append(v)
        if v == END_ID:
            break
    return tuple(out)


def _ours(model: Any, s: MarianShapes, compute_type: str) -> Engine:
    def run(src: np.ndarray, beam: int) -> List[Ids]:
        if beam == 1:
            out = model.greedy_decode(src, s.pad, END_ID, s.steps, compute_type=compute_type)
            return [trim(r, s.pad) for r in out]
        found = model.beam_search(src, s.pad, END_ID, s.steps, beam, 1.0, 1, compute_type=compute_type)
        return [tuple(int(v) for v in hyps[0][0]) for hyps in found]

    return Engine(f"transformer-cpp Transformer.beam_search / greedy_decode, {compute_type}", lambda src: src, run)


def _transformers(directory: Path, s: MarianShapes, dtype: str) -> Engine:
    import torch
    from transformers import MarianMTModel

    model = MarianMTModel.from_pretrained(str(directory), local_files_only=True, dtype=getattr(torch, dtype))
    model.eval()  # type: ignore[no-untyped-call]

    def prepare(src: np.ndarray) -> Tuple[Any, Any]:
        ids = torch.from_numpy(src)
        return ids, (ids != s.pad).long()

    def run(inputs: Tuple[Any, Any], beam: int) -> List[Ids]:
        with torch.inference_mode():
            out = model.generate(
                input_ids=inputs[0],
                attention_mask=inputs[1],
                num_beams=beam,
                do_sample=False,
                max_new_tokens=s.steps,
                length_penalty=1.0,
                use_cache=True,
            )
        return [trim(r[1:], s.pad) for r in out.numpy()]  # without the decoder start token

    return Engine(f"PyTorch: Transformers generate, {dtype} (KV cache)", prepare, run)


def _ctranslate2(converted: str, s: MarianShapes, threads: int, compute_type: str) -> Engine:
    import ctranslate2

    translator = ctranslate2.Translator(
        converted, device="cpu", compute_type=compute_type, inter_threads=1, intra_threads=threads
    )
    names = {i: f"\u2581w{i}" for i in range(2, s.pad)}
    names.update({END_ID: "</s>", 1: "<unk>"})
    ids = {v: k for k, v in names.items()}

    def prepare(src: np.ndarray) -> List[List[str]]:
        return [[names[int(x)] for x in row if x != s.pad] for row in src]

    def run(tokens: List[List[str]], beam: int) -> List[Ids]:
        results = translator.translate_batch(
            tokens, beam_size=beam, max_decoding_length=s.steps, length_penalty=1.0, max_batch_size=0
        )
        return [tuple(ids[t] for t in r.hypotheses[0]) for r in results]

    return Engine(f"CTranslate2 translate_batch, {compute_type}", prepare, run)


def _engines(
    directory: Path, s: MarianShapes, threads: int, with_torch: bool, with_ct2: bool, workdir: str
) -> Tuple[Dict[str, Engine], List[str]]:
    """Every engine that can run here, by name, and notes on those left out."""
    notes: List[str] = []
    ours = load_marian(directory)
    engines: Dict[str, Engine] = {"ours": _ours(ours, s, "float32")}
    for ct in ("int8", "bf16"):
        if kernels.have_compute_type(ct):
            engines[f"ours_{ct}"] = _ours(ours, s, ct)
        else:
            notes.append(f"transformer-cpp {ct} decoding skipped: {kernels.compute_type_unsupported_reason(ct)}")
    if with_ct2:
        import ctranslate2
        from ctranslate2.converters import TransformersConverter

        converted = os.path.join(workdir, "ctranslate2")
        log("converting the model with CTranslate2's TransformersConverter")
        TransformersConverter(str(directory)).convert(converted, force=True)  # float32; int8 when loaded
        supported = ctranslate2.get_supported_compute_types("cpu")
        for ct in ("int8", "float32", "bfloat16"):
            if ct in supported:
                engines["ctranslate2" if ct == "float32" else f"ctranslate2_{ct}"] = _ctranslate2(
                    converted, s, threads, ct
                )
    if with_torch:
        engines["torch"] = _transformers(directory, s, "float32")
        if kernels.have_bf16():
            engines["torch_bf16"] = _transformers(directory, s, "bfloat16")
        else:
            notes.append("PyTorch bfloat16 generate skipped: without AVX512_BF16 it is slower than its float32")
    return engines, notes


def _measure(engines: Dict[str, Engine], chunks: List[np.ndarray], beam: int) -> Dict[str, Any]:
    """One measurement: every engine on every batch, taking turns; totals per engine."""
    names = list(engines)
    inputs = {n: [engines[n].prepare(c) for c in chunks] for n in names}
    for n in names:  # untimed warm-up batch
        engines[n].run(inputs[n][0], beam)
    seconds = {n: 0.0 for n in names}
    outputs: Dict[str, List[Ids]] = {n: [] for n in names}
    for k in range(len(chunks)):
        for n in names[k % len(names) :] + names[: k % len(names)]:
            t0 = time.perf_counter()
            found = engines[n].run(inputs[n][k], beam)
            seconds[n] += time.perf_counter() - t0
            outputs[n].extend(found)
    sentences = sum(len(c) for c in chunks)
    entry: Dict[str, Any] = {}
    for n in names:
        tokens = sum(len(o) for o in outputs[n])
        same = sum(a == b for a, b in zip(outputs[n], outputs["ours"]))
        entry[n] = {
            "label": engines[n].label,
            "tokens": tokens,
            "min_output_tokens": min(len(o) for o in outputs[n]),
            "max_output_tokens": max(len(o) for o in outputs[n]),
            "seconds": seconds[n],
            "tokens_per_s": tokens / seconds[n],
            "sentences_per_s": sentences / seconds[n],
            "identical_to_float32": f"{same}/{sentences}",
        }
    return entry


def _ratios(entry: Dict[str, Any]) -> Dict[str, Any]:
    """The fastest compute type of this package against each peer and against each peer's best."""
    rate = {n: e["tokens_per_s"] for n, e in entry.items()}
    mine = [n for n in rate if n == "ours" or n.startswith("ours_")]
    best = max(mine, key=lambda n: rate[n])
    out: Dict[str, Any] = {"best_ours": best}
    for peer in ("torch", "ctranslate2"):
        theirs = [n for n in rate if n == peer or n.startswith(peer + "_")]
        for n in theirs:
            out[f"best_ours_vs_{n}"] = rate[best] / rate[n]
        if theirs:
            top = max(theirs, key=lambda n: rate[n])
            out[f"best_{peer}"] = top
            out[f"best_ours_vs_best_{peer}"] = rate[best] / rate[top]
    return out


def bench_marian_decoding(
    directory: Path, s: MarianShapes, threads: int, with_torch: bool, with_ct2: bool, seed: int = 0
) -> Dict[str, Any]:
    """Every run of ``s.decode_runs()`` with every engine on the model saved in ``directory``
    (its end id suppressed, so that every output has ``s.steps`` tokens)."""
    rng = np.random.default_rng(seed + 11)
    result: Dict[str, Any] = {"steps": s.steps, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="tcpp-marian-ct2-") as workdir:
        engines, notes = _engines(directory, s, threads, with_torch, with_ct2, workdir)
        result["notes"] = notes
        result["engines"] = {n: e.label for n, e in engines.items()}
        for name, beam, batch, count in s.decode_runs():
            sources = random_sources(rng, s, count)
            chunks = [pad_rows(sources[i : i + batch], s.pad) for i in range(0, count, batch)]
            t0 = time.perf_counter()
            entry = _measure(engines, chunks, beam)
            log(
                f"marian decoding {name}: {time.perf_counter() - t0:.1f}s "
                + ", ".join(f"{NAMES[n]} {e['tokens_per_s']:.0f} tokens/s" for n, e in entry.items())
            )
            result["runs"][name] = {
                "beam": beam,
                "batch": batch,
                "sentences": count,
                "mean_source_tokens": statistics.mean(len(x) for x in sources),
                "engines": entry,
                **_ratios(entry),
            }
        engines.clear()  # the translators go before their directory
    return result
