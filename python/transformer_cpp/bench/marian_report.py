"""The table of ``bench --marian`` (:mod:`transformer_cpp.bench.marian`): decoding tokens per
second of every engine with the ratios of this package's fastest compute type to CTranslate2
int8 and to PyTorch, the fine-tuning step and its peak memory, the import."""

from __future__ import annotations

from typing import Any, Dict, List

from .report import US, _fmt

__all__ = ["format_marian"]

#: The report's name of each engine.
NAMES = {
    "ours": f"{US} float32",
    "ours_int8": f"{US} int8",
    "ours_bf16": f"{US} bf16",
    "ctranslate2_int8": "CTranslate2 int8",
    "ctranslate2": "CTranslate2 float32",
    "ctranslate2_bfloat16": "CTranslate2 bfloat16",
    "torch": "PyTorch float32",
    "torch_bf16": "PyTorch bf16",
}


def _decoding(dec: Dict[str, Any]) -> List[str]:
    lines = [
        f"2. Decoding, generated tokens/s: every output exactly {dec['steps']} tokens (the end id suppressed); "
        "the engines take turns batch by batch"
    ]
    runs = dec.get("runs") or {}
    names = [n for n in NAMES if any(n in r["engines"] for r in runs.values())]
    titles = [
        f"beam {r['beam']}, batch {r['batch']}" if r["beam"] > 1 else f"greedy, batch {r['batch']}"
        for r in runs.values()
    ]

    def row(label: str, cells: List[str]) -> None:
        lines.append(f"   {label:46}" + "".join(f"{c:>20}" for c in cells))

    row("", titles)
    for n in names:
        row(NAMES[n], [_fmt((r["engines"].get(n) or {}).get("tokens_per_s")) for r in runs.values()])
    row(f"{US} fastest", [NAMES[r["best_ours"]].split()[-1] for r in runs.values()])
    for label, key in (
        ("CTranslate2 int8", "best_ours_vs_ctranslate2_int8"),
        ("fastest CTranslate2", "best_ours_vs_best_ctranslate2"),
        ("PyTorch float32", "best_ours_vs_torch"),
        ("fastest PyTorch", "best_ours_vs_best_torch"),
    ):
        if any(key in r for r in runs.values()):
            row(f"{US} fastest / {label}", [_fmt(r.get(key), "x") for r in runs.values()])
    lines.append(f"   generated tokens (outputs equal to {US} float32's)")
    for n in names:
        cells = []
        for r in runs.values():
            e = r["engines"].get(n) or {}
            cells.append(f"{e['tokens']} ({e['identical_to_float32']})" if e else "-")
        row(f"  {NAMES[n]}", cells)
    return lines


def _training(tr: Dict[str, Any]) -> List[str]:
    lines = [
        f"3. Fine-tuning step, tokens/s of the decoder's non-padding labels: batch {tr['batch']}, "
        f"{tr['mean_target_tokens']:.0f} such tokens on average; {tr['settings']}"
    ]
    mem = tr.get("memory") or {}
    lines.append(f"   {'':40}{'tokens/s':>16}{'median step':>13}{'peak MB over imports':>22}")
    for n, e in tr["engines"].items():
        m = mem.get(n) or {}
        peak = m["error"][:40] if "error" in m else _fmt(m.get("delta_mb"))
        lines.append(f"   {e['label']:40}{_fmt(e['tokens_per_s']):>16}{_fmt(e['step_s_median'], 's'):>13}{peak:>22}")
    if tr.get("best_ours"):
        lines.append(
            f"   {US} at its best ({NAMES[tr['best_ours']]}) / PyTorch float32 {_fmt(tr.get('best_ours_vs_torch'), 'x')}, "
            f"/ PyTorch bf16 autocast {_fmt(tr.get('best_ours_vs_torch_bf16'), 'x')}; peak memory {US} float32 / "
            f"PyTorch float32 {_fmt(mem.get('ratio_delta'), 'x')}"
        )
    check = tr.get("eval_loss_first_batch") or {}
    if "torch" in check:
        lines.append(
            f"   loss of the first batch without dropout: {US} {check['ours']:.6f}, PyTorch {check['torch']:.6f}"
        )
    return lines


def _import(imp: Dict[str, Any]) -> List[str]:
    lines = [f"1. Import of the saved model (model.safetensors {imp['checkpoint_mb']:.1f} MB), each in a fresh process"]
    for which, what in (
        ("load_marian", "load_marian (read into memory)"),
        ("import_pretrained", "import_pretrained (run directory written)"),
    ):
        e = imp.get(which) or {}
        if "error" in e:
            lines.append(f"   {what}: error: {e['error']}")
        elif e:
            lines.append(
                f"   {what:44}{_fmt(e['seconds'], 's'):>12}   peak {_fmt(e['delta_mb'])} MB over imports, "
                f"{_fmt(e.get('delta_over_checkpoint'), 'x')} the checkpoint"
            )
    return lines


def format_marian(results: Dict[str, Any]) -> str:
    """The human-readable report of one ``bench --marian`` run."""
    m, r = results["machine"], results["marian"]
    s, model = r["shapes"], r["model"]
    lines = [
        f"transformer-cpp bench --marian ({'quick' if results['quick'] else 'full'}): {results['threads']} thread(s), "
        f"{m['cpu']}, {m['cores']} core(s) available; load average {m.get('load_average_start', '?')} at start, "
        f"{m.get('load_average_end', '?')} at end",
        f"random MarianMT model of opus-mt-en-es's shapes: d_model {s['d_model']}, {s['layers']}+{s['layers']} layers, "
        f"{s['heads']} heads, d_ff {s['d_ff']}, one vocabulary of {s['vocab']:,}, swish, scaled and tied embeddings, "
        f"{model.get('parameters', 0):,} parameters",
        f"fixed output length: {model['fixed_length']}",
    ]
    lines += [f"note: {n}" for n in results.get("notes", [])]
    lines.append("")
    lines += _import(r["import"])
    if r.get("decoding"):
        lines += _decoding(r["decoding"])
    lines += _training(r["training"])
    lines.append("")
    return "\n".join(lines)
