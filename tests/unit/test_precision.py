"""precision="auto": the training precision chosen by measuring a few steps (precision.py, and the
quick and standard presets' default in `transformer-cpp train`)."""

from __future__ import annotations

import json

import pytest

import transformer_cpp as tc
from transformer_cpp import kernels, precision

from helpers.cli import SMALL_SAMPLED, run_cli
from helpers.kernels import needs_bf16
from helpers.toy_task import write_tatoeba_file

TINY_ARCH = dict(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, max_length=16)


def test_pick_precision_keeps_bf16_only_from_the_margin():
    assert precision.BF16_MARGIN == 1.10
    assert precision.pick_precision({"float32": 1000.0, "bf16": 1100.0}) == "bf16"
    assert precision.pick_precision({"float32": 1000.0, "bf16": 1099.0}) == "float32"
    assert precision.pick_precision({"float32": 1000.0, "bf16": 800.0}) == "float32"
    assert precision.pick_precision({"float32": 1000.0, "bf16": 1050.0}, margin=1.0) == "bf16"
    # nothing measured, or a float32 rate that cannot be compared with: the reference precision
    assert precision.pick_precision({"float32": 1000.0}) == "float32"
    assert precision.pick_precision({"float32": 0.0, "bf16": 5.0}) == "float32"
    assert precision.pick_precision({}) == "float32"


def test_choose_precision_without_bf16_does_not_measure(monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("measured although bf16 cannot run")

    monkeypatch.setattr(kernels, "have_bf16", lambda: False)
    monkeypatch.setattr(kernels, "bf16_unsupported_reason", lambda: "no AVX512_BF16 (test)")
    chosen, why = precision.choose_precision(TINY_ARCH, 30, 40, 500, measure=must_not_run)
    assert chosen == "float32" and "no AVX512_BF16 (test)" in why
    monkeypatch.setattr(kernels, "have_bf16", lambda: True)
    chosen, why = precision.choose_precision(dict(TINY_ARCH, dtype="float64"), 30, 40, 500, measure=must_not_run)
    assert chosen == "float32" and "float64" in why


def test_choose_precision_follows_the_measurement(monkeypatch):
    monkeypatch.setattr(kernels, "have_bf16", lambda: True)
    seen = {}

    def fake(arch, src_vocab, tgt_vocab, max_tokens, seed=0):
        seen.update(arch=dict(arch), vocab=(src_vocab, tgt_vocab), max_tokens=max_tokens, seed=seed)
        return dict(rates)

    rates = {"float32": 1000.0, "bf16": 1350.0}
    chosen, why = precision.choose_precision(dict(TINY_ARCH, precision="auto"), 30, 40, 1500, seed=3, measure=fake)
    assert chosen == "bf16" and "bf16 1,350 against float32 1,000" in why and "1.35x" in why
    assert seen["vocab"] == (30, 40) and seen["max_tokens"] == 1500 and seen["seed"] == 3
    rates = {"float32": 1000.0, "bf16": 840.0}
    chosen, why = precision.choose_precision(TINY_ARCH, 30, 40, 10, measure=fake)
    assert chosen == "float32" and "0.84x" in why
    assert seen["max_tokens"] == 256  # a batch of at least 256 tokens is timed


@needs_bf16
def test_measure_precisions_times_both_and_leaves_nothing_behind():
    ticks = iter(float(t) for t in range(1000))
    rates = precision.measure_precisions(
        dict(TINY_ARCH, precision="auto"), 30, 40, 240, rounds=3, steps=2, clock=lambda: next(ticks)
    )
    # the fake clock advances by one per reading: every timed block of 2 steps "takes" 1 s, so each
    # rate is the tokens of 2 steps (20 sentences of 12 target tokens each)
    assert rates == {"float32": 480.0, "bf16": 480.0}
    real = precision.measure_precisions(TINY_ARCH, 30, 40, 240, rounds=1, steps=1)
    assert set(real) == {"float32", "bf16"} and all(v > 0 for v in real.values())


def test_presets_ask_for_auto_and_the_python_presets_stay_concrete():
    for name in ("quick", "standard"):
        assert tc.preset_recipe(name)["model"] == {"precision": "auto"}
        # a model made from the architecture alone (the Python API) is float32
        assert "precision" not in tc.preset_config(name)
    assert "model" not in tc.preset_recipe("tutorial")


def test_cli_precision_auto_is_resolved_recorded_and_resumed(tmp_path):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=250)
    run_dir = tmp_path / "run"
    cmd = ["train", *SMALL_SAMPLED, "--data", str(data), "--precision", "auto", "--out", str(run_dir)]
    result = run_cli(*cmd, "--epochs", "1")
    assert result.returncode == 0, result.stderr
    cfg = json.loads((run_dir / "epoch-0001" / "config.json").read_text())
    chosen = cfg["model"]["precision"]
    assert chosen in ("float32", "bf16")
    assert f"precision auto: {chosen} (" in result.stderr
    if kernels.have_bf16():
        assert "target tokens/s" in result.stderr
    # the same command with --resume continues the run with what it chose
    result = run_cli(*cmd, "--epochs", "2", "--resume")
    assert result.returncode == 0, result.stderr
    assert json.loads((run_dir / "epoch-0002" / "config.json").read_text())["model"]["precision"] == chosen
    # where bf16 cannot run, auto is float32, said once, with the reason
    result = run_cli(*cmd[:-1], str(tmp_path / "run2"), "--epochs", "1", env={"TRANSFORMER_CPP_DISABLE_BF16": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("precision auto: float32 (bf16 cannot run here") == 1
    assert json.loads((tmp_path / "run2" / "epoch-0001" / "config.json").read_text())["model"]["precision"] == (
        "float32"
    )
    result = run_cli(*cmd[:-1], str(tmp_path / "run3"), "--precision", "bf17", "--epochs", "1")
    assert result.returncode == 2 and "precision must be 'auto' or" in result.stderr


def test_precision_auto_is_refused_by_the_python_model():
    with pytest.raises(ValueError, match="precision"):
        tc.Transformer(10, 10, **dict(TINY_ARCH, precision="auto"))


# model size auto: the quick preset's "grow" section (precision.choose_size)


def test_pick_size_takes_the_larger_model_from_min_epochs():
    # 0.8 x 1,000 tokens/s x 600 s / 48,000 tokens per epoch = 10 epochs
    choice, epochs = precision.pick_size({"base": 2000.0, "larger": 1000.0}, 48_000, 600, 10.0)
    assert choice == "larger" and epochs == pytest.approx({"base": 20.0, "larger": 10.0})
    choice, epochs = precision.pick_size({"base": 2000.0, "larger": 999.0}, 48_000, 600, 10.0)
    assert choice == "base" and epochs["larger"] == pytest.approx(9.99)
    assert precision.LOOP_EFFICIENCY == 0.8
    assert precision.pick_size({"base": 2000.0, "larger": 1000.0}, 48_000, 600, 10.0, efficiency=0.5)[0] == "base"
    # a zero or negative rate is no epochs, not an error
    assert precision.pick_size({"base": 0.0, "larger": -5.0}, 1000, 600, 1.0) == ("base", {"base": 0.0, "larger": 0.0})


def test_choose_size_times_both_models_and_says_why():
    seen = {}

    def fake(models, src_vocab, tgt_vocab, max_tokens, seed=0):
        seen.update(models={k: dict(v) for k, v in models.items()}, max_tokens=max_tokens, seed=seed)
        return dict(rates)

    base = dict(TINY_ARCH, precision="bf16")
    larger = dict(d_model=24, d_ff=48, dropout=0.1)
    rates = {"base": 20_000.0, "larger": 10_000.0}
    # 0.8 x 10,000 x 600 / 600,000 = 8 epochs of the larger model
    arch, why = precision.choose_size(base, larger, 7.5, 30, 40, 1500, 600_000, 600.0, seed=4, measure=fake)
    assert arch == dict(base, **larger)
    assert seen["models"] == {"base": base, "larger": dict(base, **larger)}
    assert seen["max_tokens"] == 1500 and seen["seed"] == 4
    assert why.startswith("model size auto: d_model 24, d_ff 48, dropout 0.1 (in the 10-minute budget about 8.0 epochs")
    assert "16.0 of d_model 16, d_ff 32, dropout 0 at 20,000" in why and "from 7.5 epochs" in why
    rates = {"base": 20_000.0, "larger": 9_000.0}  # 7.2 epochs: the preset's model
    arch, why = precision.choose_size(base, larger, 7.5, 30, 40, 100, 600_000, 600.0, measure=fake)
    assert arch == base and why.startswith("model size auto: d_model 16, d_ff 32, dropout 0 (")
    assert seen["max_tokens"] == 256  # a batch of at least 256 tokens is timed


def test_measure_models_times_each_architecture():
    ticks = iter(float(t) for t in range(1000))
    models = {"a": TINY_ARCH, "b": dict(TINY_ARCH, d_model=8, d_ff=16)}
    rates = precision.measure_models(models, 30, 40, 120, rounds=3, steps=1, clock=lambda: next(ticks))
    assert rates == {"a": 120.0, "b": 120.0}  # 10 sentences of 12 target tokens, each "taking" 1 s


def test_quick_preset_grows_and_explicit_sizes_do_not():
    grow = tc.preset_recipe("quick")["grow"]
    assert grow == {"arch": {"d_model": 192, "d_ff": 768, "dropout": 0.05}, "min_epochs": 7.5}
    grow["arch"]["d_model"] = 1  # a copy: the preset is unchanged
    assert tc.preset_recipe("quick")["grow"]["arch"]["d_model"] == 192
    assert "grow" not in tc.preset_recipe("standard") and "grow" not in tc.preset_recipe("tiny")


def test_cli_model_size_auto_is_recorded_resumed_and_overridden(tmp_path):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=250)
    run_dir = tmp_path / "run"
    # the quick preset on 250 pairs: any machine gets far more than 7.5 epochs in a minute
    cmd = ["train", "--preset", "quick", "--vocab-size", "300", "--data", str(data), "--time-budget", "1"]
    cmd += ["--precision", "float32", "--threads", "1", "--no-progress", "--out", str(run_dir)]
    result = run_cli(*cmd, "--epochs", "1")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("model size auto: d_model 192, d_ff 768, dropout 0.05 (in the 1-minute budget") == 1
    cfg = json.loads((run_dir / "epoch-0001" / "config.json").read_text())["model"]
    assert (cfg["d_model"], cfg["d_ff"], cfg["dropout"]) == (192, 768, 0.05)
    # the same command resumes the grown run
    result = run_cli(*cmd, "--epochs", "2", "--resume")
    assert result.returncode == 0, result.stderr
    assert json.loads((run_dir / "epoch-0002" / "config.json").read_text())["model"]["d_model"] == 192
    # a size given on the command line is the user's choice: nothing is measured
    result = run_cli(*cmd[:-1], str(tmp_path / "run2"), "--dropout", "0", "--epochs", "1")
    assert result.returncode == 0, result.stderr
    assert "model size auto" not in result.stderr
    cfg = json.loads((tmp_path / "run2" / "epoch-0001" / "config.json").read_text())["model"]
    assert (cfg["d_model"], cfg["dropout"]) == (128, 0.0)
    # resuming the grown run with another size is a conflict, named
    result = run_cli(*cmd, "--epochs", "3", "--resume", "--d-model", "128")
    assert result.returncode != 0 and "--d-model 128 (the run has 192)" in result.stderr
