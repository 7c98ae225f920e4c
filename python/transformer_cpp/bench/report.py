"""The benchmark's targets and report: the target the project sets for each figure, whether it is met,
and the human-readable table (:func:`format_report`) of the results dictionary that
``transformer-cpp bench --json`` writes.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import numpy as np

from .serving import SERVING_CLIENTS

__all__ = ["JSON_SCHEMA_VERSION", "evaluate_targets", "format_report", "jsonable"]

JSON_SCHEMA_VERSION = 1

# The ratios the package is built to reach against its peers on a CPU with AVX-512, each reported with the
# value this run measured.
TARGET_TRAIN_RATIO = 1.5  # training tokens/s, ours / PyTorch
TARGET_TRAIN_PEAK = 0.60  # achieved model GFLOP/s / GEMM peak
TARGET_DECODE_VS_TORCH = 5.0  # greedy sentences/s at batch 32, ours / PyTorch tutorial loop
TARGET_DECODE_VS_CT2 = 1.0  # greedy sentences/s at batch 32, ours / CTranslate2 float32
TARGET_TRAIN_VS_TORCH_BF16 = 1.5  # training tokens/s, best precision of ours / PyTorch bf16 autocast
TARGET_DECODE_VS_CT2_INT8 = {"32": 1.5, "1": 2.0}  # greedy sentences/s, best of ours / CTranslate2 int8
TARGET_MEMORY_RATIO = 1.0  # training peak memory (delta over imports), ours / PyTorch, at most
TARGET_SCALING_PER_THREAD = 0.9  # speed-up from 1 to N threads >= 0.9 N (the target: 2 threads >= 1.8x)
TARGET_BUSY_RATIO = 1.0  # busy machine: all threads (governed) at least as fast as 1 thread
TARGET_SERVING_RATIO = 3.0  # requests/s with batching (--max-batch 32) / one at a time (--max-batch 1)


def evaluate_targets(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The target ratios with the measured value and whether each is met (None: not measured)."""
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
    if mem.get("ours_bf16"):
        add(
            "memory_bf16_vs_float32",
            "training peak memory (delta), ours bf16 / ours float32",
            mem.get("ratio_bf16_delta"),
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
    """The low-precision target ratios: training (best precision of ours) against PyTorch bf16
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
    build = m.get("build", {})
    if "isa" in build:
        kernels = ", ".join(f"{k} {v}" for k, v in sorted(build.get("kernels", {}).items()))
        held = m.get("isa_environment", {})
        lines.append(
            f"instruction-set level {build['isa']}"
            + (" (every library held to it)" if held else "")
            + (f"; kernels: {kernels}" if kernels else "")
        )
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
            b = mem.get("ours_bf16") or {}
            if "error" in b:
                lines.append(f"   ours bf16: error: {b['error']}")
            elif b:
                row(
                    "   ours bf16: delta (MB), / ours float32",
                    _fmt(b.get("delta_mb")),
                    "",
                    "",
                    _fmt(mem.get("ratio_bf16_delta"), "x"),
                    "memory_bf16_vs_float32",
                )
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
    if results.get("mpi_scaling"):
        from .mpi import format_mpi_scaling  # imported when needed: `python -m transformer_cpp.bench.mpi` runs it

        lines.extend(
            "6. " + line if i == 0 else "   " + line
            for i, line in enumerate(format_mpi_scaling(results["mpi_scaling"]))
        )
    lines.append("")
    return "\n".join(lines)


def jsonable(obj: Any) -> Any:
    """Plain floats/ints (NumPy scalars converted); non-finite floats become None."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(float(obj)) else None
    return obj
