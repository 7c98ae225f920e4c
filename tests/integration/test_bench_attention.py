"""``transformer-cpp bench --attention``: a ``--quick --json`` run in a subprocess (every kind at
every quick length, positive times and memory, the table's shape; the generation, depth and
Transformer-XL sections' fields and tables), the crossover helper, the table of kinds, and the pure
functions of the other sections (per-position times, flatness, growth, the tables on made-up
results). No timing assertions."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import asdict

import numpy as np
import pytest

from transformer_cpp.bench import attention as bench_attention
from transformer_cpp.bench import per_token, reversible


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench_attention") / "attention.json"
    command = ["-m", "transformer_cpp", "bench", "--attention", "--quick", "--threads", "1", "--json", str(path)]
    proc = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(path.read_text()), proc.stdout


@pytest.mark.slow  # the quick_run fixture runs the quick benchmark
@pytest.mark.torch
def test_quick_results_cover_every_kind_and_length(quick_run):
    results, _ = quick_run
    r = results["attention"]
    lengths = list(bench_attention.QUICK_ATTENTION.lengths)
    assert results["quick"] is True and r["threads"] == 1
    assert r["shapes"]["lengths"] == lengths
    assert set(r["results"]) == set(bench_attention.KINDS)  # PyTorch is in the test extra
    for kind, cells in r["results"].items():
        assert sorted(int(n) for n in cells) == sorted(lengths), kind
        for n, c in cells.items():
            assert math.isfinite(c["ms"]) and c["ms"] > 0, (kind, n, c)
            assert math.isfinite(c["peak_mb"]) and c["peak_mb"] >= 0, (kind, n, c)
            assert c["baseline_mb"] > 0 and c["length"] == int(n) and c["kind"] == kind
            ratio = r["ratios"][kind][n]
            assert ratio["memory"] > 0 and ratio["time"] > 0
            if r["kinds"][kind]["exact"]:  # no exact kind beats the best exact kind
                assert ratio["time"] >= 1.0 - 1e-12
    exact = [k for k in r["results"] if r["kinds"][k]["exact"]]
    assert {"softmax_plain", "softmax_tiled", "torch_sdpa"} == set(exact)
    assert not r["kinds"]["linear"]["exact"] and not r["kinds"]["lsh"]["exact"]
    for n in map(str, lengths):  # the best exact kind has ratio 1
        assert min(r["ratios"][k][n]["time"] for k in exact) == pytest.approx(1.0)


@pytest.mark.slow  # the quick_run fixture runs the quick benchmark
def test_quick_table_has_a_row_per_length_and_a_column_per_kind(quick_run):
    _, stdout = quick_run
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("length"))
    for kind in bench_attention.KINDS.values():
        assert kind.label in lines[header]
    rows = lines[header + 1 : header + 1 + len(bench_attention.QUICK_ATTENTION.lengths)]
    for n, row in zip(bench_attention.QUICK_ATTENTION.lengths, rows):
        assert row.split()[0] == str(n)
        assert row.count(" ms ") == len(bench_attention.KINDS)


def test_crossover():
    a = {512: 5.0, 1024: 6.0, 2048: 7.0, 4096: 9.0}
    b = {512: 1.0, 1024: 8.0, 2048: 6.0, 4096: 20.0}
    assert bench_attention.crossover(a, b) == 4096  # faster at 1024, slower again at 2048
    b[2048] = 7.5
    assert bench_attention.crossover(a, b) == 1024
    assert bench_attention.crossover(b, a) is None  # b is slower at the longest length
    assert bench_attention.crossover({1: 1.0}, {2: 1.0}) is None


def test_a_kind_is_one_entry():
    for name, kind in bench_attention.KINDS.items():
        assert kind.name == name and kind.label and callable(kind.setup)
        # a column names the software that ran it
        assert kind.label.startswith("PyTorch " if kind.needs_torch else "transformer-cpp "), kind.label
        assert "ours" not in kind.label.lower().split(), kind.label
        assert kind.memory_bytes(bench_attention.FULL_ATTENTION, 1024) > 0
    plain = bench_attention.KINDS["softmax_plain"].memory_bytes
    tiled = bench_attention.KINDS["softmax_tiled"].memory_bytes
    s = bench_attention.FULL_ATTENTION
    assert plain(s, 16384) / plain(s, 8192) > 3.5 and tiled(s, 16384) / tiled(s, 8192) == pytest.approx(2.0)


@pytest.mark.slow  # the quick_run fixture runs the quick benchmark
def test_quick_run_has_the_generation_section(quick_run):
    results, stdout = quick_run
    g = results["generation"]
    s = per_token.QUICK_GENERATION
    assert g["shapes"]["positions"] == list(s.positions) and g["threads"] == 1
    assert set(g["results"]) == set(per_token.GENERATION_KINDS) == {"softmax", "linear"}
    for kind, c in g["results"].items():
        assert "error" not in c, c
        assert sorted(int(p) for p in c["us_per_token"]) == sorted(s.positions), kind
        assert all(math.isfinite(t) and t > 0 for t in c["us_per_token"].values()), c
        assert c["flatness"] == pytest.approx(per_token.flatness(c["us_per_token"]))
        assert c["partner_us"] > 0 and sorted(c["fastest_us_per_token"]) == sorted(c["us_per_token"])
        assert c["total_ms"] > 0 and c["total_ms"] == min(c["total_ms_all"])
        curve = c["curve_us"]
        assert curve[0][0] == 1 and curve[-1][0] == max(s.positions) and len(curve) <= s.curve_points
    assert g["speedup"] == pytest.approx(g["results"]["softmax"]["total_ms"] / g["results"]["linear"]["total_ms"])
    assert "Generation per token" in stdout and f"total, {s.total_steps} steps" in stdout


@pytest.mark.slow  # the quick_run fixture runs the quick benchmark
def test_quick_run_has_the_depth_section(quick_run):
    results, stdout = quick_run
    d = results["depth"]
    layers = list(reversible.QUICK_DEPTH.layers)
    assert "error" not in d, d
    assert sorted((r["mode"], r["layers"]) for r in d["rows"]) == sorted(
        (m, n) for m in reversible.MODES for n in layers
    )
    for r in d["rows"]:
        assert math.isfinite(r["peak_mb"]) and r["activation_bytes_mb"] >= 0
    assert set(d["growth"]) == set(reversible.MODES)
    # the ordinary stack holds every block's activations: twice the blocks, about twice the bytes
    assert d["growth_held"]["ordinary"] == pytest.approx(2.0, rel=0.2)
    assert d["growth_held"]["reversible"] == pytest.approx(1.0, rel=0.2)
    assert f"growth from {layers[0]} to {layers[-1]} layers" in stdout


@pytest.mark.slow  # the quick_run fixture runs the quick benchmark
def test_quick_run_has_the_xl_section(quick_run):
    results, stdout = quick_run
    x = results["xl"]
    assert "error" not in x, x
    assert x["shapes"]["length"] == per_token.QUICK_XL.length
    assert x["recompute_ms"] > 0 and x["reuse_ms"] > 0
    assert x["speedup"] == pytest.approx(x["recompute_ms"] / x["reuse_ms"])
    assert "Transformer-XL evaluation per token" in stdout and "state reuse is" in stdout


@pytest.mark.slow  # the quick_run fixture runs the quick benchmark
def test_quick_run_names_the_machine_and_date(quick_run):
    results, stdout = quick_run
    assert results["machine"]["cpu"] and results["date"].endswith("UTC")
    assert stdout.splitlines()[0].startswith(results["machine"]["cpu"])


def test_per_position_takes_the_fastest_step_of_a_window_inside_the_run():
    steps = [10.0, 1.0, 2.0, 3.0, 4.0, 50.0, 6.0, 7.0]  # position i + 1
    got = per_token.per_position(steps, [1, 4, 8], window=3)
    assert got == {1: 1.0, 4: 2.0, 8: 6.0}  # [10, 1, 2], [2, 3, 4], [50, 6, 7]
    assert per_token.per_position(steps, [5], window=1) == {5: 4.0}
    assert per_token.per_position(steps, [6], window=1) == {6: 50.0}
    assert per_token.per_position(steps, [2], window=100) == {2: 1.0}  # the whole run
    with pytest.raises(ValueError, match="outside the run"):
        per_token.per_position(steps, [9], window=3)
    with pytest.raises(ValueError, match="window"):
        per_token.per_position(steps, [1], window=0)


def test_paired_per_position_divides_out_what_slows_both_steps():
    # three runs of 8 steps; the own steps grow with the position, and in run 1 a slow spell
    # doubles every step of the second half, own and partner alike
    own = np.tile(np.arange(1.0, 9.0) * 10, (3, 1))
    partner = np.full((3, 8), 5.0)
    own[1, 4:] *= 2
    partner[1, 4:] *= 2
    partner[2, 0] = 4.0  # the partners' fastest step of all
    got = per_token.paired_per_position(own, partner, [1, 8], window=2)
    # position 1: windows [10, 20] over [5, 5] (run 2: [4, 5]) -> ratios 2, 2, 2.5, median 2; x 4
    # position 8: windows [70, 80] over [5, 5], in run 1 [140, 160] over [10, 10] -> 14 in every run
    assert got == {1: pytest.approx(8.0), 8: pytest.approx(56.0)}
    with pytest.raises(ValueError, match="one shape"):
        per_token.paired_per_position(own, partner[:2], [1], window=2)


def test_flatness():
    assert per_token.flatness({1: 50.0, 64: 55.0, 4096: 52.0}) == pytest.approx(1.1)
    assert per_token.flatness({"1": 2.0}) == 1.0
    assert per_token.flatness({}) is None and per_token.flatness({1: 0.0, 2: 1.0}) is None


def test_depth_growth_is_deepest_over_shallowest_per_stack():
    rows = [
        {"mode": "reversible", "layers": 12, "peak_mb": 11.0},
        {"mode": "reversible", "layers": 2, "peak_mb": 10.0},
        {"mode": "ordinary", "layers": 2, "peak_mb": 10.0},
        {"mode": "ordinary", "layers": 4, "peak_mb": 18.0},
        {"mode": "ordinary", "layers": 12, "peak_mb": 60.0},
    ]
    assert reversible.depth_growth(rows) == {"reversible": pytest.approx(1.1), "ordinary": pytest.approx(6.0)}
    assert reversible.depth_growth([{"mode": "ordinary", "layers": 2, "peak_mb": 0.0}]) == {"ordinary": None}


def _generation_section(softmax_us, linear_us, totals):
    positions = sorted(softmax_us)
    results = {
        k: {"us_per_token": {str(p): t for p, t in us.items()}, "flatness": per_token.flatness(us), "total_ms": total}
        for k, us, total in (("softmax", softmax_us, totals[0]), ("linear", linear_us, totals[1]))
    }
    return {
        "shapes": asdict(per_token.GenerationShapes(positions=positions, total_steps=3072)),
        "d_head": 64,
        "threads": 2,
        "dtype": "float32",
        "kinds": dict(per_token.GENERATION_KINDS),
        "results": results,
        "speedup": totals[0] / totals[1],
    }


def test_generation_table_shows_times_ratios_flatness_and_totals():
    r = _generation_section({1: 80.0, 4096: 800.0}, {1: 50.0, 4096: 52.0}, (1200.0, 400.0))
    lines = per_token.format_generation_table(r).splitlines()
    assert "d_head 64" in lines[0] and "2 threads" in lines[0]
    assert lines[2].split() == ["1", "80.0", "us", "50.0", "us", "1.60x"]
    assert lines[3].split() == ["4096", "800.0", "us", "52.0", "us", "15.38x"]
    assert lines[4].split()[:3] == ["flatness", "10.00x", "1.04x"]
    assert lines[5].split() == ["total,", "3072", "steps", "1200.0", "ms", "400.0", "ms", "3.00x"]
    r["results"]["linear"] = {"error": "generation linear: child exited with 1: boom"}
    r["speedup"] = None
    text = per_token.format_generation_table(r)
    assert "failed" in text and "boom" in text


def test_xl_and_depth_tables():
    x = {"shapes": asdict(per_token.FULL_XL), "d_head": 64, "dtype": "float32", "threads": 1}
    text = per_token.format_xl_table({**x, "recompute_ms": 40.0, "reuse_ms": 0.25, "speedup": 160.0})
    assert "attention length 512" in text and "40.000 ms" in text and "state reuse is 160x faster" in text
    assert "boom" in per_token.format_xl_table({**x, "error": "xl: boom"})
    rows = [
        {"mode": m, "layers": n, "activation_bytes_mb": 1.0, "forward_peak_mb": 2.0, "peak_mb": p, "seconds": 0.1}
        for m, n, p in (
            ("reversible", 2, 10.0),
            ("reversible", 12, 10.5),
            ("ordinary", 2, 10.0),
            ("ordinary", 12, 58.0),
        )
    ]
    for r in rows:
        r["growth"] = None
    d = {"shapes": asdict(reversible.FULL_DEPTH), "threads": 1, "dtype": "float32", "rows": rows}
    d["growth"] = reversible.depth_growth(rows)
    d["growth_held"] = reversible.depth_growth(rows, "activation_bytes_mb")
    text = reversible.format_depth_table(d)
    assert text.count("| reversible |") == 2 and text.count("| ordinary |") == 2
    assert (
        text.splitlines()[-1]
        == "growth from 2 to 12 layers: reversible 1.05x (held 1.00x), ordinary 5.80x (held 1.00x)"
    )
    failed = reversible.format_depth_table({**d, "error": "reversible memory child (2 layers, reversible): boom"})
    assert failed.splitlines()[1:] == ["  reversible memory child (2 layers, reversible): boom"]


def test_report_has_one_table_per_section():
    r = {
        "date": "2026-01-01 00:00 UTC",
        "machine": {"cpu": "Some CPU", "cores": 2},
        "notes": ["PyTorch SDPA skipped"],
        "generation": _generation_section({1: 80.0}, {1: 50.0}, (10.0, 5.0)),
    }
    text = bench_attention.format_attention_report(r)
    assert text.splitlines()[0] == "Some CPU, 2 cores, 2026-01-01 00:00 UTC"
    assert "Generation per token" in text and "Transformer-XL" not in text and "Attention forward" not in text
    assert text.endswith("note: PyTorch SDPA skipped")
