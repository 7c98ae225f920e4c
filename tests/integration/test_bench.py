"""The benchmark harness: a ``--quick --json`` smoke run in a subprocess, the FLOP formula, the
synthetic batches, the PyTorch tutorial loop against the greedy reference, the exactness of the
CTranslate2 conversion and what importing the bench imports. No timing assertions."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from transformer_cpp import bench, kernels
from transformer_cpp import build_info as tc_build_info
from transformer_cpp.bench import machine as bench_machine
from transformer_cpp.cli import bench as cli_bench

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:  # pragma: no cover
    HAVE_TORCH = False

try:
    import ctranslate2  # noqa: F401

    HAVE_CT2 = True
except ImportError:  # pragma: no cover
    HAVE_CT2 = False


def _positive(value, what):
    assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{what}: {value!r} is not a number"
    assert math.isfinite(value) and value > 0, f"{what}: {value!r} is not positive and finite"


@pytest.fixture(scope="module")
def quick_results(tmp_path_factory):
    """One ``python -m transformer_cpp.bench --quick --json`` run (JSON on stdout, table on stderr)."""
    out = tmp_path_factory.mktemp("bench") / "results.json"
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_cpp.bench", "--quick", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    out.write_text(proc.stdout)
    return results, proc.stderr


@pytest.mark.slow  # the quick_results fixture runs the quick benchmark
def test_quick_json_structure(quick_results):
    r, stderr = quick_results
    assert r["schema"] == bench.JSON_SCHEMA_VERSION and r["quick"] is True
    assert r["threads"] >= 1 and r["machine"]["cores"] >= 1
    _positive(r["gemm"]["gflops"], "gemm.gflops")
    tr = r["training"]
    for key in ("tokens_per_s", "gflops", "peak_fraction", "step_s_median", "first_loss"):
        _positive(tr["ours"][key], f"training.ours.{key}")
    _positive(tr["flops_per_step_mean"], "training.flops_per_step_mean")
    assert len(tr["ours"]["step_s"]) == tr["steps"]
    if HAVE_TORCH:
        for key in ("tokens_per_s", "gflops", "step_s_median"):
            _positive(tr["torch"][key], f"training.torch.{key}")
        _positive(tr["ratio"], "training.ratio")
    else:
        assert tr["torch"] is None and any("PyTorch" in n for n in r["notes"])
    # the table went to stderr with every section
    for title in ("GEMM peak", "Training step", "Greedy decoding", "Peak memory"):
        assert title in stderr
    # and names the software and its compute types, never "ours" (the JSON keys' word)
    assert "ours" not in stderr.replace("transformer-cpp", ""), [l for l in stderr.splitlines() if "ours" in l]


@pytest.mark.slow  # the quick_results fixture runs the quick benchmark
def test_quick_decoding_and_memory(quick_results):
    r, _ = quick_results
    dec = r["decoding"]
    assert dec["sentences"] > 0
    assert set(dec["batches"]) == {str(b) for b in bench.QUICK_SHAPES.decode_batches}
    for bs, entry in dec["batches"].items():
        _positive(entry["ours"]["sentences_per_s"], f"decoding[{bs}].ours")
        if HAVE_TORCH:
            _positive(entry["torch"]["sentences_per_s"], f"decoding[{bs}].torch")
            _positive(entry["ratio_vs_torch"], f"decoding[{bs}].ratio_vs_torch")
            assert entry["torch"]["identical_to_ours"] == f"{dec['sentences']}/{dec['sentences']}"
    if HAVE_CT2:
        assert dec["ctranslate2"]["status"] in ("exact", "not comparable")
        if dec["ctranslate2"]["status"] == "exact":
            for bs, entry in dec["batches"].items():
                _positive(entry["ctranslate2"]["sentences_per_s"], f"decoding[{bs}].ctranslate2")
    mem = r["memory"]
    # our bf16 step is measured wherever the CPU can run it, and compared with our float32 step
    assert ("ours_bf16" in mem) == kernels.have_bf16()
    if "ours_bf16" in mem and mem["ours"]["delta_mb"] > 0:
        assert mem["ratio_bf16_delta"] == pytest.approx(mem["ours_bf16"]["delta_mb"] / mem["ours"]["delta_mb"])
    children = ["ours"] + (["ours_bf16"] if kernels.have_bf16() else []) + (["torch"] if HAVE_TORCH else [])
    for which in children:
        assert "error" not in mem[which], mem[which]
        _positive(mem[which]["raw_mb"], f"memory.{which}.raw_mb")
        _positive(mem[which]["baseline_mb"], f"memory.{which}.baseline_mb")
        assert mem[which]["delta_mb"] >= 0
    if r["threads"] > 1:
        _positive(r["scaling"]["ours"]["speedup"], "scaling.ours.speedup")
        bm = r["busy_machine"]
        for kind in ("training", "decoding"):
            for key in ("seconds_1", "seconds_fixed", "seconds_governed", "fixed_vs_1", "governed_vs_1"):
                _positive(bm[kind][key], f"busy_machine.{kind}.{key}")
            used = bm[kind]["governed_threads"]
            assert len(used) == bm["settle"] + bm["steps"] and set(used) <= {1, r["threads"]}
        assert "targets" not in r


@pytest.mark.slow  # the quick_results fixture runs the quick benchmark
def test_quick_table_shows_figures_and_ratios_to_the_peers(quick_results):
    r, stderr = quick_results
    # the columns: the figures of each implementation and their ratio, nothing else
    assert ["transformer-cpp", "PyTorch", "CTranslate2", "ratio"] in [line.split() for line in stderr.splitlines()]
    assert "targets" not in r
    if HAVE_TORCH:
        # the training ratio is the measured one, printed in the training row
        row = next(line for line in stderr.splitlines() if line.startswith("   target tokens/s"))
        assert row.rstrip().endswith(f"{r['training']['ratio']:.2f}x")


def _table_words(text):
    return set(re.findall(r"[a-z]+", text.lower()))


def test_the_table_has_no_goal_columns():
    """The report gives measured figures and ratios; nothing in it is a goal or its verdict."""
    serving = {
        "clients": 2,
        "requests": 4,
        "threads": 1,
        "model": {"d_model": 8, "n_layers": 1, "src_vocab_size": 20},
        "mean_output_limit": 10.0,
        "modes": {
            name: {
                "max_batch": b,
                "requests_per_s": rate,
                "latency_ms_p50": 1.0,
                "latency_ms_p99": 2.0,
                "mean_batch": 1.0,
            }
            for name, b, rate in (("batching", 32, 30.0), ("one_at_a_time", 1, 10.0))
        },
        "ratio": 3.0,
    }
    results = {"machine": {"cpu": "x", "cores": 2}, "quick": True, "threads": 1, "serving": serving}
    table = bench.format_report(results)
    assert "batching / one at a time" in table and "3.00x" in table
    assert not {"target", "met", "yes", "no", "ours"} & _table_words(table), table
    assert not hasattr(bench, "evaluate_targets")


def test_forward_matmul_flops_counts_each_product():
    s = bench.BenchShapes(name="t", d_model=8, n_layers=1, d_ff=16, n_heads=2, tgt_vocab=10)
    b, S, T, d, f, V = 2, 3, 4, 8, 16, 10
    enc = 2 * b * S * d * d * 4 + 2 * b * S * S * d * 2 + 2 * b * S * d * f * 2
    dec_self = 2 * b * T * d * d * 4 + 2 * b * T * T * d * 2
    dec_cross = 2 * b * T * d * d * 2 + 2 * b * S * d * d * 2 + 2 * b * T * S * d * 2
    dec_ffn = 2 * b * T * d * f * 2
    assert bench.forward_matmul_flops(s, b, S, T) == enc + dec_self + dec_cross + dec_ffn + 2 * b * T * d * V
    # linear in layers and batch
    s2 = bench.BenchShapes(name="t", d_model=8, n_layers=3, d_ff=16, n_heads=2, tgt_vocab=10)
    out = 2 * b * T * d * V
    assert bench.forward_matmul_flops(s2, b, S, T) - out == 3 * (bench.forward_matmul_flops(s, b, S, T) - out)
    assert bench.forward_matmul_flops(s, 2 * b, S, T) == 2 * bench.forward_matmul_flops(s, b, S, T)


def test_batches_teacher_forcing_and_lengths():
    shapes = bench.QUICK_SHAPES
    for b in bench.make_batches(shapes, 3, seed=5):
        assert b.src.dtype == np.int64 and b.src.shape[0] == shapes.batch
        assert b.src.shape[1] <= shapes.max_length and b.tgt_in.shape[1] <= shapes.max_length - 1
        assert (b.src[:, 0] == bench.START_ID).all() and (b.tgt_in[:, 0] == bench.START_ID).all()
        lengths = (b.src != 0).sum(1)
        assert lengths.min() >= shapes.min_length and lengths.max() <= shapes.max_length
        assert ((b.src == bench.END_ID).sum(1) == 1).all()
        assert b.tokens == int((b.tgt_out != 0).sum())
        # tgt_out is tgt_in shifted by one: the end token appears in tgt_out once per sentence
        assert ((b.tgt_out == bench.END_ID).sum(1) == 1).all()
        np.testing.assert_array_equal(b.tgt_in[:, 1:], b.tgt_out[:, :-1])
        # padding is at the end only
        for row in b.src:
            n = int((row != 0).sum())
            assert (row[:n] != 0).all() and (row[n:] == 0).all()


def test_main_rejects_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli_bench.main(["--steps", "0", "--skip-memory", "--skip-decode", "--skip-scaling", "--quick"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--steps" in err and "steps must be an integer in [1, " in err and "got 0" in err


def test_add_bench_parser_registers_subcommand():
    import argparse

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    p = cli_bench.add_bench_parser(sub)
    assert isinstance(p, argparse.ArgumentParser)
    args = parser.parse_args(["bench", "--quick", "--threads", "1", "--json", "--skip-memory"])
    assert args.func is bench.run_bench and args.quick and args.threads == 1 and args.json == "-"
    assert args.skip_memory and not args.skip_decode


@pytest.mark.torch
@pytest.mark.skipif(not HAVE_TORCH, reason="needs PyTorch")
def test_torch_tutorial_loop_and_ours_equal_the_greedy_reference():
    import transformer_cpp as tc
    from transformer_cpp.torch_reference import build_reference, copy_weights_to_reference, tutorial_greedy_decode
    from transformer_cpp.translate import greedy_decode_reference

    model = tc.Transformer(29, 31, d_model=16, n_layers=2, n_heads=2, d_ff=24, max_length=10, seed=4)
    model.parameters()["output.bias"].value[bench.END_ID] = 1.0  # some sentences stop early, some run to the limit
    src = bench.pad(bench.random_sentences(np.random.default_rng(1), 12, 29, 3, 10))
    ref = build_reference(model.config)
    copy_weights_to_reference(model, ref)
    ref.eval()
    reference = greedy_decode_reference(model, src, bench.START_ID, bench.END_ID, 10)
    assert 1 < len({len(r) for r in bench.trim_outputs(reference)})
    np.testing.assert_array_equal(model.greedy_decode(src, bench.START_ID, bench.END_ID, 10), reference)
    np.testing.assert_array_equal(tutorial_greedy_decode(ref, src, bench.START_ID, bench.END_ID, 10), reference)


def test_importing_the_package_and_the_bench_imports_neither_torch_nor_ctranslate2():
    """PyTorch (and the reference, which needs it) and CTranslate2 are imported when a section runs,
    not by ``import transformer_cpp``, ``import transformer_cpp.bench`` or the command line's parser."""
    code = (
        "import sys, transformer_cpp, transformer_cpp.bench, transformer_cpp.cli; "
        "transformer_cpp.cli.build_parser(); "
        "print(sorted(m for m in ('torch', 'ctranslate2', 'transformer_cpp.torch_reference') if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"


@pytest.mark.skipif(not HAVE_CT2, reason="needs ctranslate2")
@pytest.mark.parametrize("layout, tied", [("interleaved", False), ("concatenated", False), ("interleaved", True)])
def test_ctranslate2_conversion_is_exact(layout, tied):
    exact, why = bench.check_ctranslate2_exact(threads=1, layout=layout, share_embeddings=tied)
    assert exact, why


@pytest.mark.skipif(not HAVE_CT2, reason="needs ctranslate2")
def test_ctranslate2_converts_pre_norm(tmp_path):
    # CTranslate2's spec.validate() refuses a pre-norm spec whose stacks' final LayerNorms are
    # unset, so a written model means they were mapped; tests/integration/test_export.py compares the tokens
    import transformer_cpp as tc

    model = tc.Transformer(20, 20, d_model=16, n_layers=1, n_heads=2, d_ff=16, max_length=8, pre_norm=True)
    bench.convert_to_ctranslate2(model, str(tmp_path))
    assert (tmp_path / "model.bin").stat().st_size > 0


def test_quick_without_torch_reports_ours_alone(tmp_path):
    out = tmp_path / "ours.json"
    peers = ["--no-torch", "--no-ctranslate2", "--skip-scaling"]
    command = ["-m", "transformer_cpp.bench", "--quick", *peers, "--threads", "1", "--json", str(out)]
    proc = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PyTorch comparisons skipped" in proc.stdout  # the table says so
    r = json.loads(out.read_text())
    assert r["threads"] == 1 and r["training"]["torch"] is None and r["training"]["ratio"] is None
    _positive(r["training"]["ours"]["tokens_per_s"], "training.ours.tokens_per_s")
    for bs, entry in r["decoding"]["batches"].items():
        # ours in each compute type this CPU runs, and which of them was fastest; no peer
        mine = ["ours"] + [f"ours_{c}" for c in ("int8", "bf16") if kernels.have_compute_type(c)]
        assert set(entry) == {*mine, "best_ours"} and entry["best_ours"] in mine
        for name in mine:
            _positive(entry[name]["sentences_per_s"], f"decoding[{bs}].{name}")
    assert "torch" not in r["memory"] and "error" not in r["memory"]["ours"]
    assert "targets" not in r


def test_useful_flops_count_only_real_tokens():
    """Without padding the useful count equals the padded model count; padding lowers it."""
    shapes = bench.QUICK_SHAPES
    full = bench.make_batches(shapes, 1, seed=0)[0]
    dense = full.__class__(
        np.where(full.src == 0, 5, full.src),
        np.where(full.tgt_in == 0, 5, full.tgt_in),
        np.where(full.tgt_out == 0, 5, full.tgt_out),
        full.tokens,
    )
    s, t = dense.src.shape[1], dense.tgt_in.shape[1]
    padded = bench.forward_matmul_flops(shapes, dense.src.shape[0], s, t)
    assert bench.useful_forward_flops(shapes, dense) == padded
    assert 0 < bench.useful_forward_flops(shapes, full) < padded


def test_isa_restarts_with_every_library_held_to_the_level(tmp_path):
    # generic runs on any CPU: the bench restarts itself with the variables of that level, and the
    # report says which level ran and which kernels
    out = tmp_path / "generic.json"
    env = {k: v for k, v in os.environ.items() if k not in bench_machine.ISA_VARIABLES}
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_cpp.bench", "--quick", "--isa", "generic", "--no-torch", "--no-ctranslate2"]
        + ["--skip-scaling", "--skip-memory", "--skip-busy", "--skip-serving", "--skip-mpi", "--skip-decode"]
        + ["--threads", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "restarting with every library held to generic" in proc.stderr
    assert "instruction-set level generic (every library held to it)" in proc.stdout
    r = json.loads(out.read_text())
    assert r["machine"]["build"]["isa"] == "generic"
    assert r["machine"]["isa_environment"] == bench_machine.ISA_LEVELS["generic"]
    assert r["machine"]["build"]["kernels"]["decode_float32"] == "eigen"  # no SIMD kernel of our own


def test_isa_above_the_cpu_is_refused_by_name():
    order = ["generic", "avx2", "avx512"]
    cpu = tc_build_info()["isa_cpu"]
    if cpu == "avx512":
        with pytest.raises(ValueError, match="isa must be one of avx512, avx2, generic, got 'avx9'"):
            bench_machine.isa_environment("avx9")
        return
    above = order[order.index(cpu) + 1]
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_cpp.bench", "--quick", "--isa", above],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert f"--isa {above}: this CPU's highest level is {cpu}; choose {cpu} or lower" in proc.stderr
