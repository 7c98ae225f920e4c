"""The command line against hostile input, as a new user might try it.

Every error a user can cause ends as ONE line on standard error and a non-zero exit status, never
a traceback; what the command line refuses, the Python API (``TrainConfig``, ``Translator``)
refuses with the same message; text is text whatever the bytes; nothing is dropped without being
counted; a run directory has one writer. Commands that could crash run in subprocesses, with
their address space limited so that a size that escaped the checks fails instead of eating the
machine's memory.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from transformer_cpp import cli
from transformer_cpp.cli import tools as cli_tools
from transformer_cpp.checkpoint import load_checkpoint, nonfinite_tensors
from transformer_cpp.training import TrainConfig
from transformer_cpp.translate import Translator

from toy_task import reversal_tokenizer, tiny_model, write_tatoeba_file

SMALL = [
    "--preset",
    "tiny",
    "--d-model",
    "32",
    "--d-ff",
    "64",
    "--layers",
    "1",
    "--heads",
    "2",
    "--batch-size",
    "32",
    "--warmup",
    "20",
    "--vocab-size",
    "300",
    "--no-progress",
    "--threads",
    "1",
]
ADDRESS_SPACE = 6 << 30  # bytes a command may map: far more than these tiny runs need


def _limit_memory(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.nice(5)

    return apply


def run(
    *args: str, stdin: bytes = b"", memory: int = ADDRESS_SPACE, env: dict = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``transformer-cpp args`` in a subprocess; stdout and stderr decoded as UTF-8."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("TRANSFORMER_CPP_DATA", "TRANSFORMER_CPP_DEBUG")}
    full_env.update(env or {})
    result = subprocess.run(
        [sys.executable, "-m", "transformer_cpp", *args],
        input=stdin,
        capture_output=True,
        env=full_env,
        timeout=timeout,
        preexec_fn=_limit_memory(memory),
    )
    return subprocess.CompletedProcess(
        result.args,
        result.returncode,
        result.stdout.decode("utf-8", "replace"),
        result.stderr.decode("utf-8", "replace"),
    )


def one_line_error(result: subprocess.CompletedProcess, *fragments: str, status: int = 1) -> str:
    assert result.returncode == status, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def parse_error(argv, capsys) -> str:
    """Run the command line in this process up to its argument check; the one error line."""
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run (1 epoch) to translate and evaluate with."""
    root = tmp_path_factory.mktemp("hostile")
    data = write_tatoeba_file(root / "pairs.txt", n=300)
    result = run("train", *SMALL, "--data", str(data), "--epochs", "1", "--out", str(root / "run"))
    assert result.returncode == 0, result.stderr
    return root, data


# --- options: bounded before any work, the same words as the Python API -----------------------


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (
            ["train", "--d-model", "1000000"],
            "argument --d-model: Transformer: d_model must be an integer in [1, 16384], got 1000000",
        ),
        (["train", "--layers", "100000"], "argument --layers: Transformer: n_layers must be an integer in [1, 256]"),
        (["train", "--dropout", "1"], "argument --dropout: Transformer: dropout must be a number in [0, 1), got 1.0"),
        (
            ["train", "--max-length", "1000000000"],
            "max_length must be 0 (automatic) or an integer in [2, 100000], got 1000000000",
        ),
        (
            ["train", "--vocab-size", "5"],
            "argument --vocab-size: vocab_size must be an integer in [260, 1048576], got 5",
        ),
        (
            ["train", "--num-samples", "-3"],
            "argument --num-samples: num_samples must be an integer in [0, 9223372036854775807]",
        ),
        (["train", "--split-seed", "99999999999999999999999"], "an integer in [0, 9223372036854775807]"),
        (["train", "--warmup", "1e3"], "argument --warmup: expected an integer, got '1e3'"),
        (
            ["train", "--epochs", "0"],
            "argument --epochs: TrainConfig: epochs must be an integer in [1, 1000000], got 0",
        ),
        (
            ["train", "--valid-fraction", "1.5"],
            "argument --valid-fraction: split_by_source: valid_fraction must be a number in [0, 1), got 1.5",
        ),
        (
            ["train", "--precision", "fp16"],
            "argument --precision: precision must be 'auto' or 'float32' or 'bf16', got 'fp16'",
        ),
        (["train", "--encoding", "klingon"], "argument --encoding: --encoding: unknown text encoding 'klingon'"),
        (["train", "--encoding", "utf-16"], "is not supported: lines must end with the byte 0x0A"),
        (["translate", "--model", "m", "--threads", "99999999999999999999"], "threads must be an integer in [1, 1024]"),
        (["evaluate", "--model", "m", "--limit", "-1"], "argument --limit: limit must be an integer in [0, "),
        (["average", "--model", "m", "--last", "0"], "argument --last: last must be an integer in [1, "),
    ],
)
def test_absurd_options_are_refused_with_the_range(argv, fragment, capsys):
    line = parse_error(argv, capsys)
    assert fragment in line, line


@pytest.mark.parametrize(
    "flag, text, api",
    [
        ("--seed", "99999999999999999999999", lambda: TrainConfig(seed=99999999999999999999999)),
        ("--epochs", "99999999999999999999", lambda: TrainConfig(epochs=99999999999999999999)),
        ("--fixed-lr", "nan", lambda: TrainConfig(fixed_lr=float("nan"))),
        ("--fixed-lr", "-1", lambda: TrainConfig(fixed_lr=-1.0)),
        ("--lr-scale", "0", lambda: TrainConfig(lr_scale=0.0)),
        ("--clip-norm", "-0.5", lambda: TrainConfig(clip_norm=-0.5)),
        ("--clip-norm", "inf", lambda: TrainConfig(clip_norm=float("inf"))),
        ("--label-smoothing", "1", lambda: TrainConfig(label_smoothing=1.0)),
        ("--label-smoothing", "-0.1", lambda: TrainConfig(label_smoothing=-0.1)),
        ("--batch-size", "0", lambda: TrainConfig(batch_size=0)),
        ("--max-tokens", "1000000000000", lambda: TrainConfig(max_tokens=10**12)),
        ("--time-budget", "1e300", lambda: TrainConfig(time_budget=1e300)),
        ("--threads", "100000", lambda: TrainConfig(threads=100000)),
        ("--keep-checkpoints", "-1", lambda: TrainConfig(keep_checkpoints=-1)),
    ],
)
def test_train_options_and_train_config_say_the_same(flag, text, api, capsys):
    with pytest.raises(ValueError) as info:
        api()
    message = str(info.value)
    assert message.startswith("TrainConfig: ")
    assert f"argument {flag}: {message}" in parse_error(["train", flag, text], capsys)


@pytest.mark.parametrize(
    "flag, text, option, value",
    [
        ("--beam-size", "1000000", "beam_size", 1000000),
        ("--beam-size", "0", "beam_size", 0),
        ("--length-penalty", "inf", "length_penalty", float("inf")),
        ("--length-penalty", "nan", "length_penalty", float("nan")),
        ("--length-penalty", "-1", "length_penalty", -1.0),
        ("--batch-size", "0", "batch_size", 0),
        ("--max-length", "1000000000", "max_length", 1000000000),
    ],
)
def test_decoding_options_and_translator_say_the_same(flag, text, option, value, capsys):
    tok = reversal_tokenizer()
    translator = Translator(tiny_model(tok), tok, tok, src_lang=None)
    with pytest.raises(ValueError) as info:
        if option == "max_length":
            Translator(translator.model, tok, tok, max_length=value)
        else:
            translator.translate_batch(["a b"], **{option: value})
    message = str(info.value)
    assert message.startswith(f"Translator: {option} must be ")
    for command in ("translate", "evaluate"):
        if command == "evaluate" and option == "max_length":
            continue
        assert f"argument {flag}: {message}" in parse_error([command, "--model", "m", flag, text], capsys)
    with pytest.raises(ValueError, match="Translator: max_length must be"):  # the per-call limit too
        translator.translate("a b", max_length=0)


def test_text_that_is_not_valid_unicode_is_a_clear_error():
    tok = reversal_tokenizer()
    translator = Translator(tiny_model(tok), tok, tok)
    for t in (translator, Translator(translator.model, tok, tok, src_lang=None)):
        with pytest.raises(
            ValueError, match=r"is not valid Unicode: it holds the lone surrogate '\\udcff' at position 2"
        ):
            t.translate("a \udcff b")


# --- sizes beyond the memory, crashes that must not happen --------------------------------------


def test_sizes_beyond_memory_are_one_line(tmp_path, monkeypatch, capsys):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=50)
    # refused by the core's memory check before anything is allocated, before the data is read
    result = run(
        "train",
        "--preset",
        "tiny",
        "--data",
        str(data),
        "--no-progress",
        "--threads",
        "1",
        "--d-model",
        "16384",
        "--layers",
        "256",
        "--out",
        str(tmp_path / "a"),
    )
    one_line_error(result, "needs", "more than")
    assert "loaded" not in result.stderr and not (tmp_path / "a").exists()  # nothing read, nothing left behind

    # an allocation that fails anyway (std::bad_alloc): one line too
    def out_of_memory(args):
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(cli_tools, "run_figures", out_of_memory)
    assert cli.main(["figures"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("transformer-cpp figures: error: out of memory (std::bad_alloc): ") and "\n" not in err


def test_damaged_or_absurd_checkpoints_are_one_line(trained, tmp_path):
    root, _ = trained
    # NaN weights (checksums updated, so only the values are wrong): refused naming the tensor
    nan_run = tmp_path / "nan"
    shutil.copytree(root / "run", nan_run)
    ckpt = nan_run / "epoch-0001"
    weights = load_file(str(ckpt / "model.safetensors"))
    weights["decoder.layers.0.norm2.bias"][3] = np.nan
    save_file(weights, str(ckpt / "model.safetensors"))
    cfg = json.loads((ckpt / "config.json").read_text())
    blob = (ckpt / "model.safetensors").read_bytes()
    import hashlib

    cfg["files"]["model.safetensors"] = {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    one_line_error(run("translate", "--model", str(nan_run), "The cat."), "'decoder.layers.0.norm2.bias' (1 NaN")
    # an architecture no memory holds: refused before allocation, not killed by the kernel
    for key, value in (("max_length", 10**12), ("d_model", 10**7), ("src_vocab_size", 2**62)):
        cfg_big = dict(cfg, model=dict(cfg["model"], **{key: value}))
        (ckpt / "config.json").write_text(json.dumps(cfg_big))
        one_line_error(run("translate", "--model", str(nan_run), "The cat."), "config.json' is invalid")


def test_a_bug_is_one_line_that_says_so():
    code = (
        "import sys, transformer_cpp.cli as cli, transformer_cpp.cli.tools as tools\n"
        "tools.run_figures = lambda args: [][1]\nsys.exit(cli.main(['figures']))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "internal error: IndexError: list index out of range" in lines[0], result.stderr
    assert "TRANSFORMER_CPP_DEBUG=1" in lines[0]
    debug = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TRANSFORMER_CPP_DEBUG="1"),
    )
    assert "Traceback" in debug.stderr and "IndexError" in debug.stderr


# --- training runs that cannot train or diverge ---------------------------------------------------


def test_a_diverging_run_stops_with_a_checkpoint_of_the_last_good_state(tmp_path):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=200)
    out = tmp_path / "run"
    line = one_line_error(
        run("train", *SMALL, "--data", str(data), "--epochs", "2", "--fixed-lr", "1e30", "--out", str(out)),
        "training diverged at step",
        "the state before it is saved in",
    )
    saved = line.split("the state before it is saved in ")[1].split(";")[0]
    ckpt = load_checkpoint(saved)
    assert ckpt.path == out / (out / "latest").read_text().strip()
    assert not nonfinite_tensors(ckpt.model.parameters()) and ckpt.model.step >= 1


def test_runs_that_would_not_train_are_refused_before_training(tmp_path):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=200)
    line = one_line_error(
        run(
            "train",
            *SMALL,
            "--data",
            str(data),
            "--drop-remainder",
            "--batch-size",
            "100000",
            "--out",
            str(tmp_path / "a"),
        ),
        "no training batch",
        "drop_remainder",
    )
    assert "loss 0.0000" not in line and not (tmp_path / "a").exists()
    one_line_error(
        run("train", *SMALL, "--data", str(data), "--max-length", "2", "--out", str(tmp_path / "b")),
        "the train split has no usable pair",
        "longer than max_length=2",
        "raise --max-length",
    )


def test_out_is_checked_writable_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    result = run("train", *SMALL, "--data", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "file" / "run"))
    one_line_error(result, "--out", "cannot be written")  # not the missing data: nothing was read
    assert "loaded" not in result.stderr


def test_a_second_writer_of_a_run_fails_at_once(trained, tmp_path):
    root, _ = trained
    run_dir = tmp_path / "run"
    shutil.copytree(root / "run", run_dir)
    (run_dir / ".tmp-latest-4242-0123abcd").write_text("epoch-00")  # a pointer write killed half-way
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, transformer_cpp.checkpoint as ck\n"
            "with ck.lock_run(sys.argv[1]):\n    print('locked', flush=True); time.sleep(60)",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        result = run("train", "--out", str(run_dir), "--resume", "--epochs", "2", "--no-progress")
        one_line_error(result, f"run directory '{run_dir}' is in use by another process (process {holder.pid})")
        assert time.monotonic() - started < 60 and "loaded" not in result.stderr
        one_line_error(run("average", "--model", str(run_dir), "--last", "1"), "holds 1 checkpoint")
    finally:
        holder.kill()
        holder.wait()
    result = run("train", "--out", str(run_dir), "--resume", "--epochs", "2", "--no-progress")
    assert result.returncode == 0, result.stderr
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".tmp-")]


# --- text in, text out: encodings and undecodable bytes -------------------------------------------


def test_invalid_utf8_on_stdin_fails_only_its_own_lines(trained):
    root, _ = trained
    model = str(root / "run")
    good = run("translate", "--model", model, stdin=b"The cat and the dog.\n")
    assert good.returncode == 0, good.stderr
    expected = good.stdout.strip()
    assert expected
    result = run(
        "translate",
        "--model",
        model,
        stdin=b"The cat and the dog.\nThe caf\xe9 and \xff.\n\nThe cat and the dog.\r\n\xc3\n",
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stdout.split("\n") == [expected, "", "", expected, "", ""]  # aligned with the input lines
    err = result.stderr
    assert "line 2 is not valid UTF-8 (invalid continuation byte at byte 8 (b'\\xe9'))" in err
    assert "line 5 is not valid UTF-8 (unexpected end of data at byte 1" in err
    assert "2 of 5 lines not translated (see above)" in err and "line 3 " not in err
    # a sentence too long for the memory fails alone too (its batch is retried sentence by sentence)
    huge = b"the cat and the dog " * 20000
    result = run("translate", "--model", model, stdin=b"The cat and the dog.\n" + huge + b"\nThe cat and the dog.\n")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stdout.split("\n") == [expected, "", expected, ""]
    assert "line 2 cannot be translated: greedy_decode: max_length" in result.stderr
    assert "1 of 3 lines not translated" in result.stderr and result.stderr.count("has 100002 tokens") == 1
    # arguments with undecodable bytes (Python keeps them as lone surrogates)
    result = run("translate", "--model", model, os.fsdecode(b"bad \xff"), "The cat and the dog.")
    assert result.returncode == 1 and result.stdout.split("\n") == ["", expected, ""]
    assert "argument 1 is not valid UTF-8" in result.stderr and "Traceback" not in result.stderr
    # UTF-8 output whatever the locale
    result = run(
        "translate",
        "--model",
        model,
        "The tree and the bird.",
        env={"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii"},
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr


def _latin1_pairs(path: Path, n: int = 120) -> Path:
    """A pairs file in Latin-1: every third Spanish sentence has an accented letter."""
    lines = []
    for i in range(n):
        es = f"El {'árbol' if i % 3 == 0 else 'perro'} y el gato {i}."
        lines.append(f"The {'tree' if i % 3 == 0 else 'dog'} and the cat number {i}.\t{es}")
    path.write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    return path


def test_evaluate_pairs_reports_undecodable_lines_and_scores_the_rest(trained, tmp_path):
    root, _ = trained
    pairs = _latin1_pairs(tmp_path / "latin1.txt", 12)
    result = run("evaluate", "--model", str(root / "run"), "--pairs", str(pairs))
    assert result.returncode == 0, result.stderr
    assert "left out 4 of 12 lines (0 empty, 0 without a tab, 0 with an empty side, 4 not valid utf-8)" in result.stderr
    assert "not valid utf-8, left out: lines 1, 4, 7 and 10" in result.stderr
    assert f"{pairs}: 8 sentence pairs" in result.stdout
    result = run("evaluate", "--model", str(root / "run"), "--pairs", str(pairs), "--encoding", "latin-1")
    assert result.returncode == 0 and f"{pairs}: 12 sentence pairs" in result.stdout, result.stderr
    result = run(
        "evaluate", "--model", str(root / "run"), "--pairs", str(pairs), "--output", str(tmp_path / "no" / "h")
    )
    assert "loaded" not in one_line_error(result, "--output", "cannot be written") and "loaded" not in result.stderr


def test_training_data_in_another_encoding_is_refused_or_decoded_as_told(tmp_path):
    data = _latin1_pairs(tmp_path / "latin1.txt")
    one_line_error(
        run("train", *SMALL, "--data", str(data), "--out", str(tmp_path / "a")),
        f"'{data}' line 1 is not valid utf-8: invalid continuation byte",
        "--encoding",
    )
    out = tmp_path / "b"
    result = run("train", *SMALL, "--data", str(data), "--encoding", "latin-1", "--epochs", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert f"loaded 120 sentence pairs from {data}\n" in result.stderr
    info = json.loads((out / "epoch-0001" / "config.json").read_text())["data"]
    assert info["encoding"] == "iso8859-1" and info["decode_errors"] == "strict"
    result = run("evaluate", "--model", str(out), "--split", "valid")  # the split is rebuilt with the encoding
    assert result.returncode == 0, result.stderr
    skipped = run(
        "train", *SMALL, "--data", str(data), "--decode-errors", "skip", "--epochs", "1", "--out", str(tmp_path / "c")
    )
    assert skipped.returncode == 0, skipped.stderr
    assert "left out 40 of 120 lines" in skipped.stderr and "lines 1, 4, 7" in skipped.stderr


# --- found by tools/hostile_campaign.py: data, training state, checkpoints, translation -----------


def test_old_mac_line_ends_are_line_ends(tmp_path):
    from transformer_cpp.data import load_tatoeba

    lines = [f"The cat number {i}.\tEl gato número {i}.\tCC-BY 2.0 (France) #{i}" for i in range(12)]
    for end in ("\r", "\r\n", "\n"):
        path = tmp_path / "pairs.txt"
        path.write_bytes((end.join(lines) + end).encode())
        pairs = load_tatoeba(path)
        assert len(pairs) == 12 and pairs.stats.read == 12, (repr(end), len(pairs))
        assert pairs.spanish[11] == "El gato número 11." and all("\r" not in a for a in pairs.attributions)


def test_a_data_file_with_an_endless_line_is_refused_without_reading_it_whole(tmp_path):
    """A sparse 10 GB file (one endless line of NUL bytes) used to be read into memory whole."""
    import zipfile

    from transformer_cpp import data as tdata

    huge = tmp_path / "huge.txt"
    _sparse(huge, 10 << 30)
    started = time.monotonic()
    with pytest.raises(ValueError, match="line 1 is longer than 64 MB: this is not a file of 'English<TAB>Spanish'"):
        tdata.load_tatoeba(huge)
    assert time.monotonic() - started < 30
    bomb = tmp_path / "bomb.zip"  # 100 MB of zeros, compressed to a fraction of a MB
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z, z.open("spa.txt", "w") as f:
        for _ in range(100):
            f.write(bytes(1 << 20))
    with pytest.raises(ValueError, match="longer than 64 MB"):
        tdata.load_tatoeba(bomb)
    one_line_error(
        run("train", *SMALL, "--data", str(huge), "--out", str(tmp_path / "run"), memory=2 << 30),
        "line 1 is longer than 64 MB",
    )


def test_line_ends_across_read_chunks(tmp_path, monkeypatch):
    from transformer_cpp import data as tdata
    from transformer_cpp.data import tatoeba

    monkeypatch.setattr(tatoeba, "_CHUNK", 3)  # every kind of line end falls on a chunk boundary somewhere
    lines = [f"The cat {i}.\tEl gato {i}." for i in range(7)]
    payload = (
        lines[0]
        + "\r\n"
        + lines[1]
        + "\r"
        + lines[2]
        + "\n\r\n"
        + lines[3]
        + "\r\r"
        + lines[4]
        + "\n"
        + lines[5]
        + "\r\n"
        + lines[6]
    ).encode()
    (tmp_path / "p.txt").write_bytes(payload)
    pairs = tdata.load_tatoeba(tmp_path / "p.txt")
    assert pairs.english == [f"The cat {i}." for i in range(7)]
    assert (pairs.stats.read, pairs.stats.empty) == (9, 2)


def test_seeds_flags_and_sentences_are_checked_by_name(tmp_path):
    import transformer_cpp as tc

    data = write_tatoeba_file(tmp_path / "pairs.txt", n=30)
    tok = reversal_tokenizer()
    enc = tc.encode_pairs(["a b", "c"], ["b a", "c"], tok, tok, None)
    for call, fragment in [
        (lambda: tc.load_tatoeba(data, 5, seed=-1), "load_tatoeba: seed must be an integer >= 0, got -1"),
        (lambda: tc.split_by_source(["a", "b"], ["x", "y"], seed=-2), "split_by_source: seed must be an integer >= 0"),
        (lambda: tc.train_val_test_split(10, seed=-3), "train_val_test_split: seed must be an integer >= 0"),
        (lambda: list(tc.batches(enc, 2, seed=-4)), "batches: seed must be an integer >= 0"),
        (lambda: tc.split_by_source(["a", 5], ["x", "y"]), "split_by_source: source 1 is a int, expected a str"),
        (lambda: tc.split_by_source(["a", "b"], ["x", None]), "split_by_source: target 1 is a NoneType"),
        (lambda: list(tc.batches(enc, 2, shuffle="no")), "batches: shuffle must be True or False"),
        (lambda: tc.load_tatoeba(data, 5, seed=2.5), "load_tatoeba: seed must be an integer >= 0, got 2.5"),
    ]:
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        assert fragment in str(info.value), str(info.value)
    with pytest.raises(TypeError, match="TrainConfig.from_dict: expected a mapping"):
        TrainConfig.from_dict(None)


def _toy_trainer(tmp_path, **config):
    import transformer_cpp as tc
    from toy_task import reversal_pairs

    tok = reversal_tokenizer()
    src, tgt = reversal_pairs(40, seed=1)
    enc = tc.encode_pairs(src, tgt, tok, tok, None)
    cfg = dict(epochs=1, batch_size=8, warmup=10, progress=False, val_bleu_sentences=0, log_every=1)
    cfg.update(config)
    return tc.Trainer(
        tiny_model(tok, d_model=16),
        enc,
        None,
        TrainConfig(**cfg),
        src_tokenizer=tok,
        tgt_tokenizer=tok,
        checkpoint_dir=tmp_path / "run",
    )


@pytest.mark.parametrize(
    "change, fragment",
    [
        (dict(epoch=-3), "epoch must be an integer >= 0, got -3"),
        (dict(batch_in_epoch=-1), "batch_in_epoch must be an integer >= 0"),
        (dict(batch_in_epoch=10**6), "batches into an epoch of 5 batches"),
        (
            dict(epoch_sums={"loss": "x", "correct": 0, "tokens": 0}),
            "epoch_sums.loss must be a finite number >= 0, got 'x'",
        ),
        (dict(window={"loss": 1.0, "correct": 0.5}), "it lacks 'window.tokens'"),
        (dict(elapsed=float("nan")), "elapsed must be a finite number >= 0, got nan"),
        (dict(history="none"), "history must be an object"),
        (dict(history={"batch": {"loss": 5}}), "history.batch.loss must be a list"),
        (dict(finished="yes"), "finished must be true or false"),
        (dict(best={"bleu": "high"}), "best.bleu must be a finite number or null"),
    ],
)
def test_a_damaged_trainer_state_is_refused_and_changes_nothing(tmp_path, change, fragment):
    trained = _toy_trainer(tmp_path)
    trained.fit()
    state = dict(trained.state_dict(), **change)
    fresh = _toy_trainer(tmp_path / "b")
    fresh.model.step = trained.model.step
    before = (fresh.epoch, fresh.batch_in_epoch, fresh.state_dict()["epoch_sums"], fresh.elapsed, fresh.history)
    with pytest.raises(ValueError, match="Trainer.load_state_dict") as info:
        fresh.load_state_dict(state)
    assert fragment in str(info.value), str(info.value)
    assert (fresh.epoch, fresh.batch_in_epoch, fresh.state_dict()["epoch_sums"], fresh.elapsed, fresh.history) == before
    fresh.load_state_dict(trained.state_dict())  # the undamaged state loads
    assert fresh.epoch == 1


def test_decay_applies_to_a_fixed_learning_rate(tmp_path):
    trainer = _toy_trainer(tmp_path, epochs=2, fixed_lr=1e-3, decay=True)
    trainer.fit()
    lrs = trainer.history["batch"]["lr"]
    assert len(lrs) == 10 and lrs[0] < 1e-3 and all(a > b for a, b in zip(lrs, lrs[1:])), lrs
    assert lrs[-1] == 0.0  # the run's last step, as with the warm-up schedule
    constant = _toy_trainer(tmp_path / "b", epochs=2, fixed_lr=1e-3)
    constant.fit()
    assert set(constant.history["batch"]["lr"]) == {1e-3}


def _sparse(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)  # no disk used


def _record(ckpt: Path, fname: str, **info) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["files"][fname].update(info)
    (ckpt / "config.json").write_text(json.dumps(cfg))


def test_checkpoint_files_larger_than_they_can_be_are_refused_before_reading(trained, tmp_path):
    """A damaged checkpoint whose files are huge (sparse, so cheap to make) fails at once naming
    the file, instead of reading gigabytes into memory (MemoryError, or the machine's memory)."""
    root, _ = trained
    cases = {
        "latest": lambda run, ck: (_sparse(run / "latest", 10 << 30), _sparse(run / "best", 10 << 30)),
        "config.json": lambda run, ck: _sparse(ck / "config.json", 10 << 30),
        "model.safetensors' has 10737418240 bytes, expected": lambda run, ck: _sparse(
            ck / "model.safetensors", 10 << 30
        ),
        "model.safetensors' has 3,221,225,472 bytes, more than such a file can hold": lambda run, ck: (
            _sparse(ck / "model.safetensors", 3 << 30),
            _record(ck, "model.safetensors", bytes=3 << 30),
        ),
        "src_tokenizer.json' has 3,221,225,472 bytes, more than such a file can hold": lambda run, ck: (
            _sparse(ck / "src_tokenizer.json", 3 << 30),
            _record(ck, "src_tokenizer.json", bytes=3 << 30),
        ),
        "records no valid size and SHA-256 for 'model.safetensors'": lambda run, ck: _record(
            ck, "model.safetensors", bytes="big"
        ),
    }
    for i, (fragment, damage) in enumerate(cases.items()):
        run_dir = tmp_path / f"run{i}"
        shutil.copytree(root / "run", run_dir)
        damage(run_dir, run_dir / (run_dir / "latest").read_text().strip())
        started = time.monotonic()
        with pytest.raises(ValueError) as info:
            load_checkpoint(run_dir, prefer="latest")
        assert fragment in str(info.value), (fragment, str(info.value))
        assert time.monotonic() - started < 20
    result = run("translate", "--model", str(tmp_path / "run0"), "The cat.", memory=2 << 30)
    one_line_error(result, "checkpoint pointer", "best", "is damaged")


@pytest.mark.parametrize(
    "edit, fragment, translating",
    [
        (lambda cfg: cfg["optimizer"].update(step="12"), "step must be an integer >= 0, got '12'", False),
        (
            lambda cfg: cfg.update(data=[1, 2]),
            "the 'data' section of 'config.json' must be an object or null, got list",
            True,
        ),
        (lambda cfg: cfg.update(train_config="fast"), "the 'train_config' section", True),
    ],
)
def test_config_sections_of_the_wrong_kind_are_refused(trained, tmp_path, edit, fragment, translating):
    root, _ = trained
    run_dir = tmp_path / "run"
    shutil.copytree(root / "run", run_dir)
    for ckpt in run_dir.glob("epoch-*"):
        cfg = json.loads((ckpt / "config.json").read_text())
        edit(cfg)
        (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=re.escape(fragment)):
        load_checkpoint(run_dir)
    if translating:  # what translating reads (the optimiser step is only read to resume)
        one_line_error(run("translate", "--model", str(run_dir), "The cat."), fragment)
    with pytest.raises(TypeError, match="load_checkpoint: optimizer must be True or False"):
        load_checkpoint(root / "run", optimizer="no")


def test_checkpoints_in_a_directory_whose_name_is_not_utf8(trained, tmp_path):
    root, _ = trained
    run_dir = tmp_path / os.fsdecode(b"r\xe9n")  # Python keeps the byte as a lone surrogate
    shutil.copytree(root / "run", run_dir)
    shutil.copytree(run_dir / "epoch-0001", run_dir / "epoch-0002")  # a second checkpoint of the run
    assert load_checkpoint(run_dir).model.step >= 1
    result = run("average", "--model", str(run_dir), "--last", "2")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert (run_dir / "averaged" / "model.safetensors").is_file()


def test_best_and_averages_stay_inside_one_run(trained, tmp_path):
    from transformer_cpp.checkpoint import CheckpointError, average_checkpoints, mark_best

    root, _ = trained
    run_dir = tmp_path / "run"
    shutil.copytree(root / "run", run_dir)
    shutil.copytree(run_dir / "epoch-0001", tmp_path / "outside")
    with pytest.raises(CheckpointError, match="name '../outside' is not the name of a checkpoint"):
        mark_best(run_dir, "../outside")
    assert (run_dir / "best").read_text().strip() != "../outside"
    other = run_dir / "epoch-0003"
    shutil.copytree(run_dir / "epoch-0001", other)  # a checkpoint of another run, same architecture
    cfg = json.loads((other / "config.json").read_text())
    cfg["run_id"] = "another-run"
    (other / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="belongs to another run"):
        average_checkpoints([run_dir / "epoch-0001", other])
    one_line_error(run("average", "--model", str(run_dir), "--last", "3"), "belongs to another run")


def test_translator_checks_its_language_and_layers():
    tok = reversal_tokenizer()
    model = tiny_model(tok)
    with pytest.raises(ValueError, match="Translator: src_lang: unsupported language 'klingon'"):
        Translator(model, tok, tok, src_lang="klingon")
    t = Translator(model, tok, tok, src_lang=None).translate("a b", return_attention=True)
    assert t.cross_attention(0).shape == t.cross_attention(-1).shape
    for layer in (1, -2, 0.5):
        with pytest.raises(
            ValueError, match=r"layer must be an integer in \[-1, 1\) \(the model has 1 decoder layer\)"
        ):
            t.cross_attention(layer)
    with pytest.raises(TypeError, match="return_attention must be True or False"):
        Translator(model, tok, tok, src_lang=None).translate("a b", return_attention="no")


def test_thread_counts_beyond_the_address_space(trained):
    """Under a 2 GB address-space limit, OMP_NUM_THREADS=100000 is lowered (with a warning) instead
    of killing the process at the first parallel loop, and --threads 1024 is refused in one line."""
    root, _ = trained
    model = str(root / "run")
    good = run("translate", "--model", model, "The cat.", memory=2 << 30)
    assert good.returncode == 0, good.stderr
    wide = run("translate", "--model", model, "The cat.", memory=2 << 30, env={"OMP_NUM_THREADS": "100000"})
    assert wide.returncode == 0 and wide.stdout == good.stdout, wide.stderr
    assert "OMP_NUM_THREADS asks for 100000 threads" in wide.stderr
    one_line_error(
        run("translate", "--model", model, "--threads", "1024", "The cat.", memory=2 << 30),
        "set_num_threads: 1024 threads need",
        "ulimit -v",
    )


def test_options_that_would_be_ignored_are_refused(tmp_path):
    import transformer_cpp as tc

    for name in ("drop_remainder", "bucket_by_length"):
        with pytest.raises(
            ValueError, match=f"TrainConfig: {name} applies to batches of batch_size pairs; with max_tokens 500"
        ):
            TrainConfig(max_tokens=500, **{name: True})
        TrainConfig(max_tokens=0, **{name: True})
    tok = reversal_tokenizer()
    enc = tc.encode_pairs(["a b", "c"], ["b a", "c"], tok, tok, None)
    with pytest.raises(ValueError, match="batches: drop_remainder applies to batches of batch_size pairs"):
        list(tc.batches(enc, max_tokens=10, drop_remainder=True))
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=50)
    one_line_error(
        run(
            "train",
            "--preset",
            "quick",
            "--data",
            str(data),
            "--drop-remainder",
            "--no-progress",
            "--out",
            str(tmp_path / "run"),
        ),
        "drop_remainder applies to batches of batch_size pairs",
    )
    assert not (tmp_path / "run").exists()


def test_a_trainer_refuses_pairs_encoded_with_other_tokenizers():
    import transformer_cpp as tc
    from toy_task import reversal_pairs

    tok = reversal_tokenizer()
    big = tc.SubwordTokenizer.build_from_corpus(["the cat sat on the mat", "a dog"] * 3, 300, min_frequency=1)
    src, tgt = reversal_pairs(20)
    train = tc.encode_pairs(src, tgt, tok, tok, None)
    valid = tc.encode_pairs(["the cat sat on the mat"], ["the mat"], big, big, None)
    with pytest.raises(
        ValueError,
        match=r"Trainer: valid_data holds source token id \d+, outside the model's "
        r"src_vocab_size",
    ):
        tc.Trainer(tiny_model(tok), train, valid, TrainConfig(epochs=1, progress=False))
    tc.Trainer(tiny_model(tok), train, None, TrainConfig(epochs=1, progress=False))


def test_a_disk_that_fills_up_leaves_no_half_checkpoint(tmp_path):
    """RLIMIT_FSIZE makes a write fail as a full disk does: one line naming the checkpoint, and the
    run directory as it was (here: not created at all)."""
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=100)
    out = tmp_path / "run"

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))  # the weights alone are larger

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMER_CPP_")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_cpp",
            "train",
            *SMALL,
            "--data",
            str(data),
            "--epochs",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        preexec_fn=small_files,
    )
    one_line_error(
        result, f"save_checkpoint: writing checkpoint '{out / 'epoch-0001'}' failed: File too large", "is as it was"
    )
    assert not out.exists() or not [p.name for p in out.iterdir() if p.name != ".lock"]


def test_helpers_of_training_and_checkpoints_name_bad_counts():
    import transformer_cpp as tc
    from transformer_cpp.checkpoint import checkpoint_name
    from transformer_cpp.training import bleu_of_encoded, output_limit

    tok = reversal_tokenizer()
    enc = tc.encode_pairs(["a b", "c"], ["b a", "c"], tok, tok, None)
    for call, fragment in [
        (
            lambda: bleu_of_encoded(tiny_model(tok), enc, tok, limit=-1),
            "bleu_of_encoded: limit must be an integer >= 0",
        ),
        (lambda: bleu_of_encoded(tiny_model(tok), enc, tok, batch_size=0), "batch_size must be an integer >= 1"),
        (lambda: output_limit(-5), "output_limit: source_tokens must be an integer >= 0, got -5"),
        (lambda: checkpoint_name(1.5), "checkpoint_name: epochs_done must be an integer >= 0, got 1.5"),
        (lambda: checkpoint_name(1, -2), "checkpoint_name: batches_into_next_epoch must be an integer >= 0, got -2"),
    ]:
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        assert fragment in str(info.value), str(info.value)
    assert output_limit(4) == 16 and checkpoint_name(3, 17) == "epoch-0004-batch-000017"
    split = tc.split_by_source((s for s in ["a", "b", "c", "d"]), (t for t in ["w", "x", "y", "z"]), 0.25, 0.25)
    assert sorted(np.concatenate(split.parts()).tolist()) == [0, 1, 2, 3]


# --- found by the campaign after the thread governor and the last fixes --------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--out", ""],
        ["train", "--data", ""],
        ["translate", "--model", ""],
        ["evaluate", "--model", ""],
        ["evaluate", "--model", "m", "--pairs", ""],
        ["evaluate", "--model", "m", "--output", ""],
        ["evaluate", "--model", "m", "--data", ""],
        ["average", "--model", ""],
        ["export", "--model", "m", "--to", "torch", ""],
        ["export", "--model", "", "--to", "torch", "x"],
        ["figures", "--out", ""],
        ["serve", "--model", ""],
    ],
)
def test_an_empty_path_is_refused_not_taken_for_the_current_directory(argv, capsys):
    """``--out ''`` (an unset shell variable) trained into the current directory and exit 0."""
    line = parse_error(argv, capsys)
    assert "expected a path, got an empty string (an unset variable?)" in line, line


def test_the_python_api_refuses_an_empty_path_in_the_same_words(trained, tmp_path, monkeypatch):
    import transformer_cpp as tc
    from transformer_cpp.plotting import save_positional_encoding_figures

    root, _ = trained
    monkeypatch.chdir(tmp_path)
    tok = reversal_tokenizer()
    model = tiny_model(tok)
    enc = tc.encode_pairs(["a b"], ["b a"], tok, tok, None)
    for call, who in [
        (
            lambda: tc.Trainer(
                model,
                enc,
                None,
                TrainConfig(epochs=1, progress=False),
                src_tokenizer=tok,
                tgt_tokenizer=tok,
                checkpoint_dir="",
            ),
            "Trainer: checkpoint_dir",
        ),
        (lambda: tc.save_checkpoint("", model, tok, tok), "save_checkpoint: run_dir"),
        (lambda: tc.load_checkpoint(""), "checkpoint path"),
        (lambda: Translator.from_checkpoint(""), "checkpoint path"),
        (lambda: tc.load_tatoeba(""), "load_tatoeba: path"),
        (lambda: tc.export_torch(root / "run", ""), "export: out_dir"),
        (lambda: save_positional_encoding_figures(""), "save_positional_encoding_figures: out_dir"),
    ]:
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value).startswith(f"{who}: expected a path, got an empty string"), str(info.value)
    assert list(tmp_path.iterdir()) == []  # nothing written where the process runs


def test_lone_carriage_returns_on_stdin_are_line_ends(trained):
    """Standard input with old Mac line ends was one line: one translation for two sentences."""
    root, _ = trained
    model = str(root / "run")
    alone = [run("translate", "--model", model, s).stdout for s in ("The cat.", "The dog.")]
    for stdin in (b"The cat.\rThe dog.\r", b"The cat.\r\nThe dog.", b"The cat.\nThe dog.\r"):
        result = run("translate", "--model", model, stdin=stdin)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "".join(alone), (stdin, result.stdout)


def test_evaluate_refuses_a_split_rebuilt_from_a_changed_data_file(trained, tmp_path):
    """The test split was rebuilt from whatever the recorded file held by then and scored as the
    run's test split; now each split's pairs are recorded as a digest and compared."""
    root, data = trained
    lines = data.read_text(encoding="utf-8").splitlines()
    other = write_tatoeba_file(tmp_path / "other.txt", n=200, seed=7).read_text(encoding="utf-8").splitlines()
    changed = tmp_path / "changed.txt"
    changed.write_text("\n".join(lines[:150] + other + lines[150:]) + "\n", encoding="utf-8")
    info = json.loads((root / "run" / "epoch-0001" / "config.json").read_text())["data"]
    assert set(info["split_digests"]) == {"train", "valid", "test"}
    for split in ("test", "valid"):
        one_line_error(
            run("evaluate", "--model", str(root / "run"), "--data", str(changed), "--split", split),
            f"the {split} split rebuilt from '{changed}' differs from the one the run held out",
            "500 pairs loaded now, 300 when the run was trained",
            "--pairs",
        )
    moved = tmp_path / "moved.txt"  # the same text elsewhere (or converted to another encoding) is fine
    shutil.copyfile(data, moved)
    result = run("evaluate", "--model", str(root / "run"), "--data", str(moved), "--limit", "2")
    assert result.returncode == 0, result.stderr


def test_a_batch_size_that_a_token_budget_would_ignore_is_refused(tmp_path):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=50)
    one_line_error(
        run(
            "train",
            "--preset",
            "quick",
            "--batch-size",
            "16",
            "--data",
            str(data),
            "--no-progress",
            "--out",
            str(tmp_path / "run"),
        ),
        "--batch-size 16 would be ignored: the quick preset cuts batches by tokens (max_tokens 1500); "
        "add --max-tokens 0",
    )
    assert not (tmp_path / "run").exists()
    # given with --max-tokens, it sizes the validation batches: accepted
    both = run(
        "train",
        "--preset",
        "quick",
        "--batch-size",
        "16",
        "--max-tokens",
        "300",
        "--time-budget",
        "0",
        "--epochs",
        "1",
        "--d-model",
        "16",
        "--d-ff",
        "32",
        "--layers",
        "1",
        "--heads",
        "2",
        "--data",
        str(data),
        "--no-progress",
        "--threads",
        "1",
        "--out",
        str(tmp_path / "both"),
    )
    assert both.returncode == 0, both.stderr
