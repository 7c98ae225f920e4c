"""A run's config.yaml: every option as the run resolved it, and ``--config RUN/config.yaml``
trains the same run again (``train`` and ``train-lm``)."""

from __future__ import annotations

import json

import pytest
import yaml

from transformer_cpp.cli import build_parser, main
from transformer_cpp.cli.config_file import CONFIG_FILE, _options
from transformer_cpp.training.logs import LOG_FILE, read_log

from helpers.cli import SMALL
from helpers.toy_task import write_tatoeba_file, write_tiny_text

pytestmark = pytest.mark.slow


def _parser(command):
    import argparse

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]
    raise AssertionError(command)


def _checkpoint(run, name):
    cfg = json.loads((run / name / "config.json").read_text())
    return {k: cfg[k] for k in ("model", "train_config", "data")}


def test_train_writes_its_resolved_options_and_repeats_the_run_from_them(tmp_path, capsys):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=400)
    first = tmp_path / "first"
    argv = ["train", *SMALL, "--data", str(data), "--num-samples", "300", "--epochs", "1", "--out", str(first)]
    assert main(argv) == 0
    saved = yaml.safe_load((first / CONFIG_FILE).read_text(encoding="utf-8"))
    options = _options(_parser("train"))
    assert set(saved) <= set(options)  # nothing that is not an option
    # every option with a value, the preset's too (tiny: batches of 64 unless given, warm-up 4000 unless given)
    missing = {k for k in options if not k.startswith("no_")} - set(saved)
    # no value: the file's default columns, one process, a new model
    assert missing == {"columns", "mpi_timeout", "init_from"}
    assert saved["preset"] == "tiny" and saved["d_model"] == 32 and saved["warmup"] == 20 and saved["batch_size"] == 32
    assert saved["data"] == str(data.resolve()) and saved["out"] == str(first) and saved["no_progress"] is True
    assert saved["label_smoothing"] == 0.0 and saved["max_tokens"] == 0 and saved["precision"] == "float32"
    assert saved["vocab_size"] == 300 and saved["num_samples"] == 300 and saved["source_lang"] == "en"

    second = tmp_path / "second"
    assert main(["train", "--config", str(first / CONFIG_FILE), "--out", str(second)]) == 0
    again = yaml.safe_load((second / CONFIG_FILE).read_text(encoding="utf-8"))
    assert again == {**saved, "out": str(second)}
    assert _checkpoint(second, "epoch-0001") == _checkpoint(first, "epoch-0001")
    rows = [(r["kind"], r["step"], r["loss"]) for r in read_log(first / LOG_FILE)]
    assert [(r["kind"], r["step"], r["loss"]) for r in read_log(second / LOG_FILE)] == rows

    # the command line over the file; a resume rewrites the file with what it continues with
    assert main(["train", "--config", str(first / CONFIG_FILE), "--out", str(second), "--resume", "--epochs", "2"]) == 0
    resumed = yaml.safe_load((second / CONFIG_FILE).read_text(encoding="utf-8"))
    assert resumed == {**again, "epochs": 2}
    assert [r["epoch"] for r in read_log(second / LOG_FILE) if r["kind"] == "epoch"] == ["1", "2"]
    capsys.readouterr()


def test_train_lm_writes_its_resolved_options_and_repeats_the_run_from_them(tmp_path, capsys):
    text = write_tiny_text(tmp_path / "text.txt", 300)
    first = tmp_path / "lm"
    tiny = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--d-ff", "32", "--seq-len", "16"]
    argv = ["train-lm", "--text", str(text), "--out", str(first), *tiny, "--batch-size", "4", "--steps", "4"]
    assert main([*argv, "--threads", "1", "--eval-chars", "256", "--no-progress"]) == 0
    saved = yaml.safe_load((first / CONFIG_FILE).read_text(encoding="utf-8"))
    assert set(saved) <= set(_options(_parser("train-lm")))
    assert saved["steps"] == 4 and saved["d_model"] == 16 and saved["warmup"] == 200 and saved["text"] == str(text)
    assert "epochs" not in saved and "time_budget" not in saved  # not given: the run had none
    second = tmp_path / "lm2"
    assert main(["train-lm", "--config", str(first / CONFIG_FILE), "--out", str(second)]) == 0
    assert yaml.safe_load((second / CONFIG_FILE).read_text(encoding="utf-8")) == {**saved, "out": str(second)}
    losses = [r["loss"] for r in read_log(first / LOG_FILE)]
    assert losses and [r["loss"] for r in read_log(second / LOG_FILE)] == losses
    capsys.readouterr()
