"""``transformer-cpp bench --attention``: a ``--quick --json`` run in a subprocess (every kind at
every quick length, positive times and memory, the table's shape), the crossover helper and the
table of kinds. No timing assertions."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from transformer_cpp.bench import attention as bench_attention


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench_attention") / "attention.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_cpp",
            "bench",
            "--attention",
            "--quick",
            "--threads",
            "1",
            "--json",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(path.read_text()), proc.stdout


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
        assert kind.memory_bytes(bench_attention.FULL_ATTENTION, 1024) > 0
    plain = bench_attention.KINDS["softmax_plain"].memory_bytes
    tiled = bench_attention.KINDS["softmax_tiled"].memory_bytes
    s = bench_attention.FULL_ATTENTION
    assert plain(s, 16384) / plain(s, 8192) > 3.5 and tiled(s, 16384) / tiled(s, 8192) == pytest.approx(2.0)
