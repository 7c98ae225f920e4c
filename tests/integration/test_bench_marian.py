"""``transformer-cpp bench --marian`` at tiny shapes: one ``--quick --json`` run in a subprocess,
its JSON's structure (every engine, every ratio, the same number of generated tokens from every
engine, the same loss from both trainers, the memory children), its table's words, and the
``--marian-shapes`` option. No timing assertions."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from transformer_cpp import bench, kernels
from transformer_cpp.bench.marian import QUICK_MARIAN, parse_marian_shapes

pytestmark = pytest.mark.torch  # the section builds its model with Transformers and PyTorch


def _positive(value, what):
    assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{what}: {value!r} is not a number"
    assert math.isfinite(value) and value > 0, f"{what}: {value!r} is not positive and finite"


@pytest.fixture(scope="module")
def marian_run():
    """One ``python -m transformer_cpp.bench --marian --quick --json`` run (table on stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_cpp.bench", "--marian", "--quick", "--threads", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr


def _ours():
    return ["ours"] + [f"ours_{c}" for c in ("int8", "bf16") if kernels.have_compute_type(c)]


def test_every_engine_decodes_the_same_number_of_tokens(marian_run):
    r, _ = marian_run
    assert r["schema"] == bench.JSON_SCHEMA_VERSION == 3 and r["quick"] is True and r["threads"] == 1
    m = r["marian"]
    assert m["shapes"]["d_model"] == QUICK_MARIAN.d_model and m["shapes"]["vocab"] == QUICK_MARIAN.vocab
    dec = m["decoding"]
    expected = _ours() + ["ctranslate2_int8", "ctranslate2", "torch"] + (["torch_bf16"] if kernels.have_bf16() else [])
    assert set(dec["runs"]) == {"beam4_batch4", "greedy_batch1", "greedy_batch4"}
    for name, run in dec["runs"].items():
        assert set(run["engines"]) == set(expected), name
        tokens = {n: e["tokens"] for n, e in run["engines"].items()}
        # the end id is suppressed: every engine generates exactly `steps` tokens per sentence
        assert set(tokens.values()) == {run["sentences"] * QUICK_MARIAN.steps}, (name, tokens)
        for n, e in run["engines"].items():
            assert e["min_output_tokens"] == e["max_output_tokens"] == QUICK_MARIAN.steps, (name, n)
            _positive(e["tokens_per_s"], f"{name}.{n}.tokens_per_s")
            assert e["tokens_per_s"] == pytest.approx(e["tokens"] / e["seconds"])
        # float32 engines on the same weights find the same tokens
        for n in ("torch", "ctranslate2"):
            assert run["engines"][n]["identical_to_float32"] == f"{run['sentences']}/{run['sentences']}", (name, n)
        rate = {n: e["tokens_per_s"] for n, e in run["engines"].items()}
        best = run["best_ours"]
        assert best in _ours() and rate[best] == max(rate[n] for n in _ours())
        assert run["best_ours_vs_ctranslate2_int8"] == pytest.approx(rate[best] / rate["ctranslate2_int8"])
        assert run["best_ours_vs_torch"] == pytest.approx(rate[best] / rate["torch"])
        top = max(rate[n] for n in rate if n.startswith("torch"))
        assert run["best_ours_vs_best_torch"] == pytest.approx(rate[best] / top)


def test_fine_tuning_import_and_memory(marian_run):
    r, _ = marian_run
    m = r["marian"]
    tr = m["training"]
    expected = ["ours", "torch"] + (["ours_bf16", "torch_bf16"] if kernels.have_bf16() else [])
    assert set(tr["engines"]) == set(expected)
    for n, e in tr["engines"].items():
        _positive(e["tokens_per_s"], f"training.{n}.tokens_per_s")
        assert len(e["step_s"]) == QUICK_MARIAN.train_steps
        _positive(e["first_loss"], f"training.{n}.first_loss")
    # the same model and the same label-smoothed loss: both evaluate the first batch alike
    check = tr["eval_loss_first_batch"]
    assert check["difference"] < 1e-5 * check["torch"], check
    assert tr["best_ours_vs_torch"] == pytest.approx(
        tr["engines"][tr["best_ours"]]["tokens_per_s"] / tr["engines"]["torch"]["tokens_per_s"]
    )
    mem = tr["memory"]
    for n in expected:
        assert "error" not in mem[n], mem[n]
        assert mem[n]["steps"] == QUICK_MARIAN.memory_steps and mem[n]["delta_mb"] >= 0
        _positive(mem[n]["raw_mb"], f"memory.{n}.raw_mb")
    imp = m["import"]
    _positive(imp["checkpoint_mb"], "import.checkpoint_mb")
    assert imp["checkpoint_mb"] == pytest.approx(m["model"]["checkpoint_mb"])
    for which in ("load_marian", "import_pretrained"):
        assert "error" not in imp[which], imp[which]
        _positive(imp[which]["seconds"], f"import.{which}.seconds")
        assert imp[which]["delta_over_checkpoint"] == pytest.approx(imp[which]["delta_mb"] / imp["checkpoint_mb"])
    assert m["model"]["parameters"] > 0


def test_table_names_the_engines_and_no_goals(marian_run):
    r, stderr = marian_run
    table = "\n".join(line for line in stderr.splitlines() if not line.startswith("[bench]"))  # progress lines out
    for words in ("transformer-cpp float32", "CTranslate2 int8", "CTranslate2 float32", "PyTorch float32"):
        assert words in table
    for title in ("1. Import", "2. Decoding", "3. Fine-tuning step"):
        assert title in table
    assert "transformer-cpp fastest / CTranslate2 int8" in table
    run = r["marian"]["decoding"]["runs"]["greedy_batch1"]
    assert f"{run['best_ours_vs_ctranslate2_int8']:.2f}x" in table
    words = set(re.findall(r"[a-z]+", table.lower()))
    assert not {"ours", "target", "targets", "met", "yes", "no"} & words


def test_marian_shapes_option():
    s = parse_marian_shapes("d_model=64, layers=2,vocab=300", QUICK_MARIAN)
    assert (s.d_model, s.layers, s.vocab, s.heads) == (64, 2, 300, QUICK_MARIAN.heads)
    assert parse_marian_shapes(None, QUICK_MARIAN) is QUICK_MARIAN
    with pytest.raises(ValueError, match=r"--marian-shapes: 'depth=2' is not key=value with a key among vocab, "):
        parse_marian_shapes("depth=2", QUICK_MARIAN)
    with pytest.raises(ValueError, match=r"--marian-shapes: layers must be an integer >= 1, got '0'"):
        parse_marian_shapes("layers=0", QUICK_MARIAN)
    with pytest.raises(ValueError, match=r"--marian-shapes: heads must be an integer >= 1, got 'x'"):
        parse_marian_shapes("heads=x", QUICK_MARIAN)
    with pytest.raises(ValueError, match=r"d_model \(30\) must be even and divisible by heads \(4\)"):
        parse_marian_shapes("d_model=30", QUICK_MARIAN)
    with pytest.raises(ValueError, match=r"max_positions \(64\) must be >= 71, the longest sequence"):
        parse_marian_shapes("steps=70", QUICK_MARIAN)
    assert parse_marian_shapes("beam_sentences=0", QUICK_MARIAN).decode_runs()[0][0] == "greedy_batch1"


def test_bad_marian_shapes_is_one_line_on_the_command_line():
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_cpp.bench", "--marian", "--quick", "--marian-shapes", "layers=0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].endswith("--marian-shapes: layers must be an integer >= 1, got '0'")
    assert "Traceback" not in proc.stderr


def test_without_peers_reports_transformer_cpp_alone(tmp_path):
    out = tmp_path / "marian.json"
    command = ["-m", "transformer_cpp.bench", "--marian", "--quick", "--no-torch", "--no-ctranslate2"]
    command += ["--skip-memory", "--marian-shapes", "beam_sentences=0,greedy1_sentences=2", "--json", str(out)]
    proc = subprocess.run([sys.executable, *command, "--threads", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "CTranslate2 comparison skipped: disabled with --no-ctranslate2" in proc.stdout
    m = json.loads(out.read_text())["marian"]
    assert set(m["decoding"]["runs"]) == {"greedy_batch1", "greedy_batch4"}
    for run in m["decoding"]["runs"].values():
        assert set(run["engines"]) == set(_ours())
        assert not [k for k in run if k.startswith("best_ours_vs_")]
    assert set(m["training"]["engines"]) == {"ours"} | ({"ours_bf16"} if kernels.have_bf16() else set())
    assert "memory" not in m["training"] and "torch" not in m["training"]["eval_loss_first_batch"]
