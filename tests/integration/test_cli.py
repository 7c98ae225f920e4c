"""The ``transformer-cpp`` command line, end to end in subprocesses, on a tiny data file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from transformer_cpp import build_info
from transformer_cpp.cli import build_parser

from helpers.cli import SMALL, interrupt, run_cli, train_args
from helpers.toy_task import write_tatoeba_file


def assert_one_line_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """``train`` once for the whole module: 2 epochs on 300 pairs."""
    root = tmp_path_factory.mktemp("cli")
    data = write_tatoeba_file(root / "pairs.txt", n=400)
    result = run_cli(
        "train", *SMALL, "--data", str(data), "--num-samples", "300", "--epochs", "2", "--out", str(root / "run")
    )
    assert result.returncode == 0, result.stderr
    return root, data, result


def test_train_writes_checkpoints(trained_run):
    root, data, result = trained_run
    run_dir = root / "run"
    assert (run_dir / "latest").read_text().strip() == "epoch-0002"
    cfg = json.loads((run_dir / "epoch-0002" / "config.json").read_text())
    assert cfg["model"]["d_model"] == 32 and cfg["model"]["n_layers"] == 1 and cfg["model"]["max_length"] >= 15
    assert cfg["train_config"]["batch_size"] == 32 and cfg["train_config"]["warmup"] == 20
    assert cfg["data"]["num_samples"] == 300 and cfg["data"]["path"] == str(data.resolve())
    assert cfg["data"]["valid_fraction"] == 0.02 and cfg["data"]["test_fraction"] == 0.03
    assert cfg["data"]["split"] == "by-source"
    state = json.loads((run_dir / "epoch-0002" / "trainer_state.json").read_text())
    assert state["epoch"] == 2 and len(state["history"]["epoch"]["val_loss"]) == 2
    assert "loaded 300 sentence pairs" in result.stderr and "done after epoch 2" in result.stderr
    assert "Traceback" not in result.stderr


def test_translate_arguments_and_stdin(trained_run):
    root, _, _ = trained_run
    model = str(root / "run" / "epoch-0002")  # the most trained checkpoint ("best" may be the first)
    result = run_cli("translate", "--model", model, "The cat and the dog.", "The book and the tree.")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all(lines)
    result = run_cli(
        "translate", "--model", model, "--beam-size", "3", stdin="The car and the bird.\n\nThe water and the cat.\n"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")[:-1]
    assert len(lines) == 3 and lines[0] and lines[1] == "" and lines[2]
    long = " ".join(["the cat and the dog"] * 10)
    result = run_cli("translate", "--model", model, long)
    assert result.returncode == 0 and "warning" in result.stderr and "tokens" in result.stderr


def test_translate_prefix_constraints_and_sampling(trained_run):
    root, _, _ = trained_run
    model = str(root / "run" / "epoch-0002")
    result = run_cli("translate", "--model", model, "--prefix", "Mañana", "The cat.", "The dog.")
    assert result.returncode == 0, result.stderr
    assert all(line.lower().startswith("mañana") for line in result.stdout.splitlines()), result.stdout
    result = run_cli("translate", "--model", model, "--beam-size", "3", "--constraint", "perro", "The cat.")
    assert result.returncode == 0, result.stderr
    assert "perro" in result.stdout.lower() or "before 1 of the --constraint texts" in result.stderr
    sampled = [
        run_cli("translate", "--model", model, "--sampling-topk", "20", "--seed", "5", "--threads", str(n), "The cat.")
        for n in (1, 2)
    ]
    assert all(r.returncode == 0 for r in sampled) and sampled[0].stdout == sampled[1].stdout
    for args, fragments in [
        (["--prefix", "   "], ["--prefix", "encodes to no token"]),
        (["--beam-size", "2", "--constraint", "a", "--constraint", "b"], ["--constraint", "--beam-size of at least 3"]),
        (
            ["--prefix", "el gato y el perro", "--max-output-tokens", "2"],
            ["--prefix", "more than --max-output-tokens 2"],
        ),
        (["--sampling-topp", "0"], ["--sampling-topp"]),
        (["--sampling-topk", "5", "--beam-size", "2"], ["--sampling-topk 5 needs --beam-size 1"]),
    ]:
        assert_one_line_error(run_cli("translate", "--model", model, *args, "The cat."), *fragments)


def test_translate_leaves_lines_of_invisible_characters_empty(trained_run):
    """A line of zero-width spaces or other format characters has nothing to translate: its output
    line is empty, as for a blank line, not an invented translation."""
    root, _, _ = trained_run
    model = str(root / "run" / "epoch-0002")
    result = run_cli("translate", "--model", model, stdin="The cat.\n\u200b\u200b\n\ufeff\u2060 \u200d\nThe dog.\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")[:-1]
    assert len(lines) == 4 and lines[0] and lines[1] == "" and lines[2] == "" and lines[3], lines


def test_evaluate(trained_run):
    root, _, _ = trained_run
    result = run_cli("evaluate", "--model", str(root / "run"), "--examples", "1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for label in ("BLEU", "chrF", "loss", "accuracy", "the test split: ", "reference", "tok:13a"):
        assert label in out, out
    result = run_cli("evaluate", "--model", str(root / "run" / "epoch-0001"), "--split", "valid", "--limit", "5")
    assert result.returncode == 0 and "valid split: 5 sentence pairs" in result.stdout


def test_resume_continues_the_run(trained_run, tmp_path):
    root, data, _ = trained_run
    run_dir = tmp_path / "run"
    # a copy of the trained run, so that the other tests keep theirs
    import shutil

    shutil.copytree(root / "run", run_dir)
    result = run_cli("train", "--out", str(run_dir), "--resume", "--epochs", "3", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "resuming" in result.stderr and (run_dir / "latest").read_text().strip() == "epoch-0003"
    state = json.loads((run_dir / "epoch-0003" / "trainer_state.json").read_text())
    assert state["history"]["epoch"]["epoch"] == [1, 2, 3]
    assert_one_line_error(
        run_cli("train", "--out", str(run_dir), "--resume", "--d-model", "64"),
        "--resume continues the run in --out with its own settings",
        "--d-model 64",
    )
    assert_one_line_error(run_cli("train", "--out", str(tmp_path / "empty"), "--resume"), "nothing to resume")


def test_ctrl_c_saves_a_checkpoint(tmp_path):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=200)
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMER_CPP_DATA"}
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformer_cpp", *train_args(data, out, 100000)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    stderr = interrupt(proc, (out / "latest").exists, "checkpoint", 60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "--resume" in stderr
    latest = (out / "latest").read_text().strip()
    assert latest.startswith("epoch-")
    result = run_cli("train", "--out", str(out), "--resume", "--epochs", str(int(latest[6:10]) + 1), "--no-progress")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["train", "--preset", "huge"], ["invalid choice: 'huge'"]),
        (["train", "--bogus-option"], ["unrecognized arguments: --bogus-option"]),
        (["train", "--batch-size", "zero"], ["--batch-size", "expected an integer"]),
        (["translate", "x"], ["--model"]),
        (["nonsense"], ["invalid choice"]),
    ],
)
def test_command_line_mistakes(args, fragments):
    result = run_cli(*args)
    assert result.returncode == 2
    assert_one_line_error(result, *fragments)


def test_user_errors_print_one_line(trained_run, tmp_path):
    root, data, _ = trained_run
    assert_one_line_error(
        run_cli("train", *SMALL, "--data", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "r")),
        "no such file",
        "missing.txt",
    )
    assert_one_line_error(
        run_cli("translate", "--model", str(tmp_path / "nowhere"), "hello"), "no such checkpoint directory"
    )
    assert_one_line_error(
        run_cli("train", *SMALL, "--data", str(data), "--out", str(root / "run")), "already holds a run"
    )
    assert_one_line_error(
        run_cli(
            "train",
            *SMALL,
            "--data",
            str(data),
            "--num-samples",
            "50",
            "--dropout",
            "1.5",
            "--out",
            str(tmp_path / "r2"),
        ),
        "dropout",
    )
    # a damaged checkpoint
    import shutil

    from transformer_cpp.checkpoint import resolve_checkpoint

    broken = tmp_path / "broken"
    shutil.copytree(root / "run", broken)
    used = resolve_checkpoint(broken, "best")  # what translate and evaluate read
    weights = used / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    for command in (["translate", "--model", str(broken), "hello"], ["evaluate", "--model", str(broken)]):
        assert_one_line_error(run_cli(*command), "model.safetensors", "truncated")
    (used / "config.json").write_text("{")
    assert_one_line_error(run_cli("translate", "--model", str(broken), "hello"), "config.json' is not valid JSON")


def test_version_figures_and_help():
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.startswith("transformer-cpp ")
    # the instruction-set level and the kernel of each product, as docs/install.md says
    info = build_info()
    facts = dict(line.split(None, 1) for line in result.stdout.splitlines()[1:])
    assert facts["isa"].split()[0] == info["isa"]
    assert facts["kernels"] == ", ".join(f"{k} {v}" for k, v in sorted(info["kernels"].items()))
    precision = " ".join(run_cli("train", "--help").stdout.split("--precision {", 2)[2].split())
    # one sentence each: what bf16 does, what decoding uses, what auto does
    assert "either way" not in precision and "compute type" in precision
    assert "AVX512_BF16). Decoding" in precision and "int8 or bf16). With auto" in precision
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # the registered subcommands
    assert {"figures", "train", "translate", "evaluate"} <= set(commands)
    help_text = run_cli("train", "--help").stdout
    for option in (
        "--preset",
        "--data",
        "--num-samples",
        "--epochs",
        "--out",
        "--resume",
        "--d-model",
        "--n-layers",
        "--n-heads",
        "--d-ff",
        "--dropout",
        "--max-length",
        "--batch-size",
        "--warmup",
        "--vocab-size",
        "--seed",
        "--threads",
        "--label-smoothing",
    ):
        assert option in help_text, option
