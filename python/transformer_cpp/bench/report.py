"""The benchmark's report: the human-readable table (:func:`format_report`) of the results
dictionary that ``transformer-cpp bench --json`` writes, with each measured figure and its ratio
to the same figure of PyTorch or CTranslate2.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .machine import SOFTWARE, machine_facts, set_all_threads
from .mpi import format_mpi_scaling

__all__ = ["JSON_SCHEMA_VERSION", "format_report", "jsonable"]

#: Version 2: the results no longer carry a "targets" list; the ratios are in their sections.
#: Version 3: ``bench --marian`` writes a "marian" section (:mod:`.marian`) and "transformers_version".
JSON_SCHEMA_VERSION = 3

#: What the table calls this package's column and rows.
US = SOFTWARE


#: How the report names this package's compute types (the JSON keeps the keys).
_COMPUTE = {"ours": "float32", "ours_int8": "int8", "ours_bf16": "bf16"}


def _format_low_precision(results: Dict[str, Any]) -> List[str]:
    """The low-precision peers' lines of the report: training in float32 and bf16 (this package,
    PyTorch), the bf16 GEMM peak, greedy decoding in float32 / int8 / bf16 against CTranslate2."""
    lines: List[str] = []

    g = results.get("gemm_bf16") or {}
    tr = results.get("training") or {}
    if g or any(k in tr for k in ("ours_bf16", "torch_bf16")):
        lines.append("3b. Low-precision peers (same weights, same batches, alternating in the runs of 2 and 3)")
    if g:
        parts = [
            f"{label} {g[k]:.0f}"
            for label, k in (
                ("PyTorch bf16 matmul", "torch_gflops"),
                (f"{US} {g.get('kernel', 'avx512_bf16')}", "ours_gflops"),
            )
            if g.get(k)
        ]
        lines.append(f"   bf16 GEMM peak {g['n']}^2 (GFLOP/s): {_fmt(g.get('gflops'))}  ({', '.join(parts) or 'none'})")
    if any(k in tr for k in ("ours_bf16", "torch_bf16")):
        lines.append(
            f"   {'training, target tokens/s':42}{'float32':>12}{'bf16':>12}{'GFLOP/s':>10}{'% bf16 peak':>13}"
        )
        for who, f32, b16 in ((US, "ours", "ours_bf16"), ("PyTorch (bf16 = autocast)", "torch", "torch_bf16")):
            a, b = tr.get(f32) or {}, tr.get(b16) or {}
            lines.append(
                f"   {'  ' + who:42}{_fmt(a.get('tokens_per_s')):>12}{_fmt(b.get('tokens_per_s')):>12}"
                f"{_fmt(b.get('gflops')):>10}{_fmt(b.get('peak_fraction'), '%'):>13}"
            )
        if tr.get("best_ours"):
            lines.append(
                f"     {US} at its best ({_COMPUTE[tr['best_ours']]}) / PyTorch float32 {_fmt(tr.get('best_ours_vs_torch'), 'x')}, "
                f"/ PyTorch bf16 autocast {_fmt(tr.get('best_ours_vs_torch_bf16'), 'x')}"
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
            "ours": "f32",
            "ours_int8": "int8",
            "ours_bf16": "bf16",
            "ctranslate2": "CT2 f32",
            "ctranslate2_int8": "CT2 int8",
        }
        lines.append(
            f"   greedy decoding, sentences/s ({US}; CT2)" + " " * 12 + "".join(f"{labels[n]:>11}" for n in names)
        )
        for bs in sorted(batches, key=int):
            e = batches[bs]
            lines.append(
                f"   {'  batch ' + bs:42}"
                + "".join(f"{_fmt((e.get(n) or {}).get('sentences_per_s')):>11}" for n in names)
            )
            if "ctranslate2_int8" in e:
                lines.append(
                    f"     {US} at its best ({_COMPUTE[e['best_ours']]}) / CTranslate2 int8 "
                    f"{_fmt(e.get('best_ours_vs_ctranslate2_int8'), 'x')}, / CTranslate2 float32 "
                    f"{_fmt(e.get('best_ours_vs_ctranslate2'), 'x')}"
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


def _row(label: str, ours: str = "", torch: str = "", ct2: str = "", ratio: str = "") -> str:
    """One line of the table: a label and the figures of this package, PyTorch, CTranslate2 and their ratio."""
    return f"{label:44}{ours:>16}{torch:>12}{ct2:>13}{ratio:>9}"


def _ours_and_torch(
    label: str, fmt: Callable[[Dict[str, Any]], str], ours: Dict[str, Any], torch: Dict[str, Any]
) -> str:
    """A :func:`_row` of one figure written by ``fmt`` from this package's result and PyTorch's (blank
    when there is no PyTorch result)."""
    return _row(label, fmt(ours), fmt(torch) if torch else "")


def _format_header(results: Dict[str, Any]) -> List[str]:
    """The lines above the table: the run, the machine and its load, the instruction-set level and
    kernels, the notes, then the column headings."""
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
    header = f"{'':44}{US:>16}{'PyTorch':>12}{'CTranslate2':>13}{'ratio':>9}"
    lines += ["", header, "-" * len(header)]
    return lines


def _format_gemm(g: Dict[str, Any]) -> List[str]:
    """Section 1: the machine's float32 GEMM peak (NumPy)."""
    return [_row(f"1. GEMM peak, NumPy fp32 {g['n']}^2 (GFLOP/s)", _fmt(g["gflops"]))]


def _format_training(tr: Dict[str, Any]) -> List[str]:
    """Section 2: the training step's shapes, throughput, GFLOP/s, share of the GEMM peak and step
    times, this package beside PyTorch."""
    s = tr["shapes"]
    lines = [
        f"2. Training step: batch {s['batch']}, lengths {s['min_length']}-{s['max_length']}, "
        f"d_model {s['d_model']}, {s['n_layers']}+{s['n_layers']} layers, d_ff {s['d_ff']}, "
        f"vocab {s['src_vocab']:,}/{s['tgt_vocab']:,}; median of {tr['steps']} steps"
    ]
    o, t = tr["ours"], tr.get("torch") or {}
    lines.append(
        _row(
            "   target tokens/s",
            _fmt(o["tokens_per_s"]),
            _fmt(t.get("tokens_per_s")),
            "",
            _fmt(tr.get("ratio"), "x"),
        )
    )
    lines.append(_row("   model GFLOP/s (matmuls, fwd+bwd = 3x fwd)", _fmt(o["gflops"]), _fmt(t.get("gflops"))))
    lines.append(
        _row(
            "   % of GEMM peak",
            _fmt(o.get("peak_fraction"), "%"),
            _fmt(t.get("peak_fraction"), "%"),
            "",
            "",
        )
    )
    if o.get("useful_gflops") is not None:
        lines.append(_row("   useful GFLOP/s (real tokens)", _fmt(o["useful_gflops"])))
        lines.append(_row("   useful % of GEMM peak", _fmt(o.get("useful_peak_fraction"), "%")))
    lines.append(
        _row(
            f"   % of GEMM during the steps ({tr['gemm_during_steps_gflops']:.0f} GFLOP/s)",
            _fmt(o.get("fraction_of_gemm_during_steps"), "%"),
            _fmt(t.get("fraction_of_gemm_during_steps"), "%"),
        )
    )
    lines.append(_row("   median step time", _fmt(o["step_s_median"], "s"), _fmt(t.get("step_s_median"), "s")))
    fastest_slowest = lambda r: f"{min(r['step_s']):.2f}/{max(r['step_s']):.2f}"
    lines.append(_ours_and_torch("   fastest / slowest step (s)", fastest_slowest, o, t))
    return lines


def _format_decoding(dec: Dict[str, Any]) -> List[str]:
    """Section 3: greedy decoding's sentences/s at each batch size against PyTorch and CTranslate2,
    whether their outputs are ours, and our decoder's method and output length."""
    lines = [
        f"3. Greedy decoding: {dec['sentences']} sentences, up to {dec['max_length']} tokens "
        f"(sentences/s; CTranslate2 conversion: {dec['ctranslate2']['status']})"
    ]
    keys = sorted(dec["batches"], key=int)
    for k in keys:
        e = dec["batches"][k]
        lines.append(
            _row(
                f"   batch {k}",
                _fmt(e["ours"]["sentences_per_s"]),
                _fmt((e.get("torch") or {}).get("sentences_per_s")),
                _fmt((e.get("ctranslate2") or {}).get("sentences_per_s")),
                _fmt(e.get("ratio_vs_torch"), "x"),
            )
        )
        if "ratio_vs_ctranslate2" in e:
            lines.append(
                _row(
                    f"     {US} / CTranslate2",
                    ratio=_fmt(e["ratio_vs_ctranslate2"], "x"),
                )
            )
    if dec["ctranslate2"].get("reason"):
        lines.append(f"   CTranslate2: {dec['ctranslate2']['reason']}")
    agree = []
    for k in keys:
        for n in ("torch", "ctranslate2"):
            if n in dec["batches"][k]:
                agree.append(f"{n} b{k} {dec['batches'][k][n]['identical_to_ours']}")
    if agree:
        lines.append(f"   outputs identical to {US}'s: " + ", ".join(agree))
    first = dec["batches"][keys[0]]["ours"]
    lines.append(
        f"   {US}: {first['method']}; mean output length {first['mean_output_tokens']:.1f} tokens "
        "(a random model rarely emits the end token: near worst-case lengths)"
    )
    return lines


def _format_memory(mem: Dict[str, Any]) -> List[str]:
    """Section 4: the peak memory of the training steps (the child processes' measurements), float32
    against PyTorch and bf16 against float32, or the error that stopped it."""
    o, t = mem.get("ours", {}), mem.get("torch") or {}
    if "error" in o or "error" in t:
        return [f"4. Peak memory: error: {o.get('error') or t.get('error')}"]
    lines = [f"4. Peak memory of {o.get('steps', '?')} training steps (child processes, {o.get('source', 'peak RSS')})"]
    lines.append(
        _row(
            "   delta over imports (MB)",
            _fmt(o.get("delta_mb")),
            _fmt(t.get("delta_mb")),
            "",
            _fmt(mem.get("ratio_delta"), "x"),
        )
    )
    lines.append(_row("   raw peak RSS (MB)", _fmt(o.get("raw_mb")), _fmt(t.get("raw_mb"))))
    b = mem.get("ours_bf16") or {}
    if "error" in b:
        lines.append(f"   {US} bf16: error: {b['error']}")
    elif b:
        lines.append(
            _row(
                "   bf16: delta (MB), / float32",
                _fmt(b.get("delta_mb")),
                "",
                "",
                _fmt(mem.get("ratio_bf16_delta"), "x"),
            )
        )
    return lines


def _format_scaling(sc: Dict[str, Any]) -> List[str]:
    """Thread scaling: training tokens/s at 1 and N threads and the speed-up, beside the machine's
    NumPy GEMM speed-up and the 1-thread model GFLOP/s."""
    n = sc["threads"]
    lines = [f"   Thread scaling: training tokens/s at 1 and {n} threads"]
    o, t = sc["ours"], sc.get("torch") or {}
    lines.append(_row("   1 thread", _fmt(o["tokens_per_s_1"]), _fmt(t.get("tokens_per_s_1"))))
    lines.append(_row(f"   {n} threads", _fmt(o["tokens_per_s_n"]), _fmt(t.get("tokens_per_s_n"))))
    lines.append(_row("   speed-up", _fmt(o["speedup"], "x"), _fmt(t.get("speedup"), "x")))
    g = sc.get("gemm") or {}
    if g:
        lines.append(
            _row(
                f"   machine: NumPy GEMM GFLOP/s 1 -> {n} threads",
                f"{g['gflops_1']:.0f}->{g['gflops_n']:.0f}",
                "",
                "",
                _fmt(g["speedup"], "x"),
            )
        )
    of_gemm = lambda r: f"{r['gflops_1']:.0f} ({100 * r['peak_fraction_1']:.0f}%)"
    lines.append(_ours_and_torch("   1-thread model GFLOP/s (% of 1-thread GEMM)", of_gemm, o, t))
    return lines


def _format_busy_machine(bm: Dict[str, Any]) -> List[str]:
    """The busy machine: training and decoding with a CPU hog on one core, at 1 thread, at a fixed N
    and with the thread governor."""
    n = bm["threads"]
    lines = [
        f"   Busy machine: a CPU hog holds one core; median of {bm['steps']} units after {bm['settle']} "
        "settling ones, alternating"
    ]
    for kind in ("training", "decoding"):
        k = bm[kind]
        lines.append(
            f"   {k['unit']}: 1 thread {_fmt(k['seconds_1'], 's')}, {n} fixed {_fmt(k['seconds_fixed'], 's')} "
            f"({_fmt(k['fixed_vs_1'], 'x')} of 1 thread), {n} governed {_fmt(k['seconds_governed'], 's')} "
            f"({_fmt(k['governed_vs_1'], 'x')}; threads used {''.join(map(str, k['governed_threads']))})"
        )
    return lines


def _format_serving(sv: Dict[str, Any]) -> List[str]:
    """Section 5: HTTP serving, requests/s and latencies with request batching and one request at a
    time, and their ratio (or why it was skipped)."""
    if "skipped" in sv:
        return [f"5. Serving: skipped: {sv['skipped']}"]
    m = sv["model"]
    server, client = sv.get("server") or {}, sv.get("client") or {}
    stack = f"uvicorn with {server['http']} and {server['loop']}" if server else "uvicorn"
    where = f"; clients in a separate process ({client['loop']})" if client.get("process") == "separate" else ""
    lines = [
        f"5. Serving over HTTP ({stack}, 127.0.0.1{where}): {sv['clients']} concurrent clients, "
        f"{sv['requests']} one-sentence requests, {sv['threads']} C++ thread(s)",
        f"   random model of the tiny preset (d_model {m['d_model']}, {m['n_layers']}+{m['n_layers']} "
        f"layers, vocabularies {m['src_vocab_size']:,}): every output runs to its limit, "
        f"{sv['mean_output_limit']:.0f} tokens on average",
    ]
    for name, label in (("batching", "batching"), ("one_at_a_time", "one at a time")):
        e = sv["modes"][name]
        lines.append(_row(f"   {label} (--max-batch {e['max_batch']}): requests/s", _fmt(e["requests_per_s"])))
        lines.append(
            f"{'':6}latency p50 {e['latency_ms_p50']:.1f} ms, p99 {e['latency_ms_p99']:.1f} ms; "
            f"{e['mean_batch']:.1f} sentences per decode call"
        )
    lines.append(_row("   batching / one at a time", ratio=_fmt(sv["ratio"], "x")))
    return lines


def _format_mpi(mpi: Dict[str, Any]) -> List[str]:
    """Section 6: MPI scaling, one process of N threads against N ranks (:mod:`.mpi`'s lines)."""
    return ["6. " + line if i == 0 else "   " + line for i, line in enumerate(format_mpi_scaling(mpi))]


#: The report's sections after its header, in their order: the key of the results' entry each
#: writes, and its lines of that entry (shown when the entry is there and not empty); the
#: low-precision section (key None) reads several entries.
_SECTIONS: Tuple[Tuple[Optional[str], Callable[[Dict[str, Any]], List[str]]], ...] = (
    ("gemm", _format_gemm),
    ("training", _format_training),
    ("decoding", _format_decoding),
    ("memory", _format_memory),
    ("scaling", _format_scaling),
    ("busy_machine", _format_busy_machine),
    (None, _format_low_precision),
    ("serving", _format_serving),
    ("mpi_scaling", _format_mpi),
)


def format_report(results: Dict[str, Any]) -> str:
    """The human-readable table."""
    lines = _format_header(results)
    for key, section in _SECTIONS:
        if key is None:
            lines += section(results)
        elif results.get(key):
            lines += section(results[key])
    lines.append("")
    return "\n".join(lines)


def section(head: str, r: Mapping[str, Any], body: Callable[[], Sequence[str]]) -> str:
    """A section of a report: its heading, then the lines of ``body``, or the error that stopped the
    section (``r["error"]``)."""
    if "error" in r:
        return head + "\n  " + str(r["error"])
    return "\n".join([head, *body()])


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


def open_results(quick: bool, threads: int, torch: Any, ct2: Any) -> Dict[str, Any]:
    """Set every library's threads and return the opening entries of a run's results: the schema,
    the run's settings, how the threads were set, the machine, an empty list of notes and the
    versions of PyTorch and CTranslate2 (None for one not imported)."""
    return {
        "schema": JSON_SCHEMA_VERSION,
        "quick": bool(quick),
        "threads": threads,
        "threads_set_by": set_all_threads(threads, torch),
        "machine": machine_facts(),
        "notes": [],
        "torch_version": getattr(torch, "__version__", None),
        "ctranslate2_version": getattr(ct2, "__version__", None),
    }


def emit(results: Dict[str, Any], table: str, json_path: Optional[str]) -> None:
    """Print a section's table, and its JSON to standard output (``json_path`` "-": the table then
    goes to standard error) or to the file ``json_path``."""
    if json_path == "-":
        print(table, file=sys.stderr)
        print(json.dumps(results, indent=2))
        return
    print(table)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
            f.write("\n")
        print(f"results written to {json_path}")
