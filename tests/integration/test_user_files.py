"""No command replaces or deletes what it did not write: ``train --out`` over a directory of the
user's, ``average`` over a file or directory named ``averaged``, ``evaluate --output`` over one of
its inputs, ``figures`` over a picture of the user's, ``export`` leaving its staging directory
behind when it is killed. Each is refused by name, or cleaned up, and the user's files are intact."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.cli import SMALLEST, run_cli
from helpers.toy_task import write_tatoeba_file

# none of the package's variables, one OpenMP thread
run = functools.partial(run_cli, isolated=True)


def one_error(result: subprocess.CompletedProcess, *fragments: str) -> str:
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    """A tiny data file and a run trained on it for 2 epochs."""
    root = tmp_path_factory.mktemp("files")
    data = write_tatoeba_file(root / "pairs.txt", n=300)
    result = run("train", *SMALLEST, "--data", str(data), "--epochs", "2", "--out", str(root / "run"))
    assert result.returncode == 0, result.stderr
    return root, data


def _copy_run(fixture, tmp_path: Path) -> Path:
    root, _ = fixture
    run_dir = tmp_path / "run"
    shutil.copytree(root / "run", run_dir)
    return run_dir


def test_train_refuses_a_directory_of_the_user_named_like_a_checkpoint(fixture, tmp_path):
    _, data = fixture
    out = tmp_path / "out"
    (out / "epoch-0002").mkdir(parents=True)
    (out / "epoch-0002" / "notes.txt").write_text("mine")
    one_error(
        run("train", *SMALLEST, "--data", str(data), "--epochs", "2", "--out", str(out)),
        f"'{out / 'epoch-0002'}'",
        "no checkpoint manifest",
    )
    assert [p.name for p in out.iterdir()] == ["epoch-0002"]
    assert (out / "epoch-0002" / "notes.txt").read_text() == "mine"


def test_train_in_a_directory_with_other_files_of_the_user_leaves_them(fixture, tmp_path):
    _, data = fixture
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / ".tmp-draft").write_text("mine too")
    result = run("train", *SMALLEST, "--data", str(data), "--epochs", "2", "--keep-checkpoints", "1", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert (out / "notes.txt").read_text() == "mine" and (out / ".tmp-draft").read_text() == "mine too"


def test_resume_refuses_a_directory_of_the_user_where_the_next_checkpoint_goes(fixture, tmp_path):
    run_dir = _copy_run(fixture, tmp_path)
    (run_dir / "epoch-0003").mkdir()
    (run_dir / "epoch-0003" / "notes.txt").write_text("mine")
    one_error(run("train", "--out", str(run_dir), "--resume", "--epochs", "3"), "epoch-0003", "did not write")
    assert (run_dir / "epoch-0003" / "notes.txt").read_text() == "mine"
    assert (run_dir / "latest").read_text().strip() == "epoch-0002"


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_average_refuses_an_averaged_of_the_user(fixture, tmp_path, kind):
    run_dir = _copy_run(fixture, tmp_path)
    theirs = run_dir / "averaged"
    if kind == "file":
        theirs.write_text("mine")
    else:
        theirs.mkdir()
        (theirs / "notes.txt").write_text("mine")
    one_error(run("average", "--model", str(run_dir)), f"'{theirs}' was not written by transformer-cpp")
    assert (theirs.read_text() if kind == "file" else (theirs / "notes.txt").read_text()) == "mine"
    # its own average it writes again
    theirs.unlink() if kind == "file" else shutil.rmtree(theirs)
    for _ in range(2):
        result = run("average", "--model", str(run_dir), "--mark-best")
        assert result.returncode == 0, result.stderr
    assert (run_dir / "best").read_text().strip() == "averaged"


def test_average_mark_best_refuses_a_best_of_the_user(fixture, tmp_path):
    run_dir = _copy_run(fixture, tmp_path)
    (run_dir / "best").write_text("my best guess\n")
    one_error(run("average", "--model", str(run_dir), "--mark-best"), "best' was not written by transformer-cpp")
    assert (run_dir / "best").read_text() == "my best guess\n"
    assert not (run_dir / "averaged").exists()


def test_evaluate_output_never_overwrites_an_input(fixture, tmp_path):
    root, data = fixture
    pairs = tmp_path / "pairs.txt"
    shutil.copyfile(data, pairs)
    before = pairs.read_bytes()
    run_dir = root / "run"
    (tmp_path / "link.txt").symlink_to(pairs)
    cases = [
        (["--pairs", str(pairs), "--output", str(pairs)], "is the --pairs file"),
        (["--pairs", str(pairs), "--output", str(tmp_path / "link.txt")], "is the --pairs file"),
        (["--output", str(data)], "is the data file"),
        (["--data", str(pairs), "--output", str(pairs)], "is the data file"),
        (["--output", str(run_dir / "latest")], "the run's 'latest' pointer"),
        (["--output", str(run_dir / "epoch-0002" / "config.json")], "a file of the checkpoint"),
    ]
    originals = {p: p.read_bytes() for p in (data, run_dir / "latest", run_dir / "epoch-0002" / "config.json")}
    for args, fragment in cases:
        one_error(run("evaluate", "--model", str(run_dir / "epoch-0002"), "--limit", "3", *args), fragment)
    assert pairs.read_bytes() == before
    assert all(p.read_bytes() == b for p, b in originals.items())
    # a new file, or the command's own output again, is written
    out = tmp_path / "hypotheses.txt"
    for _ in range(2):
        result = run("evaluate", "--model", str(run_dir), "--pairs", str(pairs), "--limit", "3", "--output", str(out))
        assert result.returncode == 0, result.stderr
    assert len(out.read_text().splitlines()) == 3


def test_figures_never_replace_a_picture_of_the_user(tmp_path):
    out = tmp_path / "figs"
    result = run("figures", "--out", str(out))
    assert result.returncode == 0, result.stderr
    result = run("figures", "--out", str(out))  # its own figures it draws again
    assert result.returncode == 0, result.stderr
    theirs = out / "pe_tokens_50x256.png"
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot().plot([0, 1])
    fig.savefig(theirs)  # a PNG made by matplotlib, not by transformer-cpp
    mine = theirs.read_bytes()
    one_error(run("figures", "--out", str(out)), f"'{theirs}' was not written by transformer-cpp")
    assert theirs.read_bytes() == mine


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_export_removes_the_staging_directory_of_a_killed_export(fixture, tmp_path):
    root, _ = fixture
    stale = tmp_path / f".export-exported-{_dead_pid()}-0123abcd"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    alive = tmp_path / f".export-exported-{os.getpid()}-0123abcd"  # a running export's: left alone
    alive.mkdir()
    theirs = tmp_path / ".export-exported-notes"  # not a name exports use
    theirs.mkdir()
    result = run("export", "--model", str(root / "run"), "--to", "torch", str(tmp_path / "exported"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "exported" / "model.safetensors").is_file()
    assert not stale.exists() and alive.is_dir() and theirs.is_dir()


def test_export_terminated_removes_its_staging_directory(fixture, tmp_path):
    root, _ = fixture
    code = (
        "import os, signal, sys\n"
        "from transformer_cpp.export import torch as export  # the torch exporter's own reference\n"
        "from transformer_cpp.cli import main\n"
        "write = export._write_tokenizers\n"
        "def write_then_terminated(*args):\n"
        "    write(*args)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "export._write_tokenizers = write_then_terminated\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "export", "--model", str(root / "run"), "--to", "torch", "exported"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 130 and "interrupted" in proc.stderr, (proc.returncode, proc.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], list(tmp_path.iterdir())
    assert signal.SIGTERM  # the signal the command answers
