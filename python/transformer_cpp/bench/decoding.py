"""Section 3 of the benchmark: greedy decoding, ours against PyTorch and CTranslate2.

Random source sentences are decoded at each batch size by ``Transformer.greedy_decode`` (C++,
key/value cache), the PyTorch tutorial loop on the same weights
(:func:`transformer_cpp.torch_reference.tutorial_greedy_decode`) and CTranslate2 on the same
weights converted by ``transformer-cpp export``'s converter (checked exact first, see
:func:`~transformer_cpp.bench.peers.check_ctranslate2_exact`), in rotating order. The
low-precision peers join the rotation: ours with ``compute_type="int8"`` and ``"bf16"``,
CTranslate2 int8.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .. import kernels
from ..model import Transformer
from .machine import SOFTWARE, log
from .peers import CTranslate2Greedy, check_ctranslate2_exact, trim_outputs
from .shapes import END_ID, START_ID, BenchShapes, pad, random_sentences

__all__ = ["bench_decoding"]

# what each decoder is, in the report
OURS_METHOD = "C++ greedy_decode (KV cache)"


def _low_precision_decoders(
    model: Transformer, threads: int, max_len: int, ct2_dir: Optional[str]
) -> Tuple[Dict[str, Tuple[str, Callable[[Any], np.ndarray], Callable[[np.ndarray], Any]]], List[str]]:
    """The low-precision decoding peers on ``model``'s weights: ours with ``compute_type`` int8 and
    bf16 (where the CPU has VNNI / AVX512_BF16) and, with ``ct2_dir`` (a directory for a second
    conversion; None when the float32 conversion was not exact), CTranslate2 int8. Returns
    ``{name: (method, run, prepare)}`` and notes on what was left out."""
    out: Dict[str, Tuple[str, Callable[[Any], np.ndarray], Callable[[np.ndarray], Any]]] = {}
    notes: List[str] = []

    def ours(compute_type: str) -> Callable[[Any], np.ndarray]:
        return lambda src: model.greedy_decode(src, START_ID, END_ID, max_len, compute_type=compute_type)

    for ct in ("int8", "bf16"):
        if kernels.have_compute_type(ct):
            out[f"ours_{ct}"] = (f"C++ greedy_decode, compute_type {ct}", ours(ct), lambda src: src)
        else:
            notes.append(f"{SOFTWARE} {ct} decoding skipped: {kernels.compute_type_unsupported_reason(ct)}")
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


#: A decoder of the rotation: ``(method, run, prepare)``, what it is in the report, a function from a
#: prepared batch to its output ids and one from a padded batch of ids to its input.
_Decoder = Tuple[str, Callable[[Any], np.ndarray], Callable[[np.ndarray], Any]]


def _torch_decoder(model: Transformer, max_len: int) -> _Decoder:
    """The PyTorch tutorial's greedy loop on a copy of ``model``'s weights (no key/value cache)."""
    from ..torch_reference import build_reference, copy_weights_to_reference, tutorial_greedy_decode

    ref = build_reference(model.config)
    copy_weights_to_reference(model, ref)
    ref.eval()
    return (
        "PyTorch tutorial loop (re-runs the decoder on the prefix, no cache)",
        lambda src: tutorial_greedy_decode(ref, src, START_ID, END_ID, max_len),
        lambda src: src,
    )


def _ctranslate2_decoder(
    model: Transformer, threads: int, max_len: int, workdir: str
) -> Tuple[CTranslate2Greedy, _Decoder]:
    """CTranslate2's float32 greedy decoding of ``model`` converted into ``workdir``: the converted
    model and its decoder."""
    log("converting the benchmark model to CTranslate2")
    ct = CTranslate2Greedy(model, threads, workdir)
    return ct, (
        "CTranslate2 translate_batch, float32, beam 1",
        lambda tokens: ct.to_ids(ct.translate(tokens, max_len)),
        ct.prepare,
    )


def _time_decoders(
    bs: int,
    sentences: List[np.ndarray],
    runners: Dict[str, Callable[[np.ndarray], np.ndarray]],
    prepare: Dict[str, Callable[[np.ndarray], Any]],
) -> Tuple[Dict[str, float], Dict[str, List[Tuple[int, ...]]]]:
    """Decode ``sentences`` in batches of ``bs`` with every decoder: one untimed batch each, then
    each batch by all of them in rotating order. Returns each decoder's total seconds and its
    outputs (trimmed token tuples, in sentence order)."""
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
    log(
        f"greedy decoding batch {bs}: {time.perf_counter() - t_start:.1f}s "
        + "  ".join(f"{n} {totals[n]:.2f}s" for n in names)
    )
    return totals, outputs


def _batch_entry(
    totals: Dict[str, float],
    outputs: Dict[str, List[Tuple[int, ...]]],
    impls: Dict[str, Dict[str, Any]],
    n_sentences: int,
) -> Dict[str, Any]:
    """One batch size's results: each decoder's sentences/s, seconds, mean output length and method
    (and how many outputs are ours), our decoders' ratios to each peer, our fastest and its ratios."""
    names = list(totals)
    entry: Dict[str, Any] = {}
    for name in names:
        entry[name] = {
            "sentences_per_s": n_sentences / totals[name],
            "seconds": totals[name],
            "mean_output_tokens": statistics.mean(len(o) for o in outputs[name]),
            "method": impls[name]["method"],
        }
        if name != "ours":
            same = sum(a == b for a, b in zip(outputs[name], outputs["ours"]))
            entry[name]["identical_to_ours"] = f"{same}/{n_sentences}"
    mine = [n for n in names if n == "ours" or n.startswith("ours_")]
    for name in names:
        if name not in mine:
            entry[f"ratio_vs_{name}"] = entry["ours"]["sentences_per_s"] / entry[name]["sentences_per_s"]
    best = max(mine, key=lambda n: entry[n]["sentences_per_s"])
    entry["best_ours"] = best
    for name in names:
        if name not in mine:
            entry[f"best_ours_vs_{name}"] = entry[best]["sentences_per_s"] / entry[name]["sentences_per_s"]
    return entry


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
    impls: Dict[str, Dict[str, Any]] = {"ours": {"method": OURS_METHOD}}
    result: Dict[str, Any] = {
        "sentences": len(sentences),
        "max_length": max_len,
        "batches": {},
        "ctranslate2": {"status": "not run", "reason": ct2_reason},
    }
    runners: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "ours": lambda src: model.greedy_decode(src, START_ID, END_ID, max_len)
    }
    prepare: Dict[str, Callable[[np.ndarray], Any]] = {"ours": lambda src: src}
    extra: Dict[str, _Decoder] = {}
    if with_torch:
        extra["torch"] = _torch_decoder(model, max_len)
    tmp = None
    ct = None
    if with_ct2:
        exact, why = check_ctranslate2_exact(threads)
        result["ctranslate2"] = {"status": "exact" if exact else "not comparable", "reason": why}
        if exact:
            tmp = tempfile.mkdtemp(prefix="tcpp-ct2-")
            ct, extra["ctranslate2"] = _ctranslate2_decoder(model, threads, max_len, tmp)
    if low_precision:
        lower, notes = _low_precision_decoders(model, threads, max_len, tmp if ct is not None else None)
        result["low_precision_notes"] = notes
        extra.update(lower)
    for name, (method, run, prep) in extra.items():
        impls[name] = {"method": method}
        runners[name] = run
        prepare[name] = prep
    try:
        for bs in shapes.decode_batches:
            totals, outputs = _time_decoders(bs, sentences, runners, prepare)
            result["batches"][str(bs)] = _batch_entry(totals, outputs, impls, len(sentences))
    finally:
        ct = None
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return result
