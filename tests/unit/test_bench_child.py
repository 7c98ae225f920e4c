"""The benchmark's child processes (transformer_cpp.bench.child starts them, bench.child_main is
their program): a JSON request in, one JSON line out; the thread variables set for the child; a
failing child and a bad request named."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from transformer_cpp.bench import child, child_main

DEPTH = dict(n_layers=1, length=8, d_model=8, n_heads=2, d_ff=16)


def test_a_child_runs_its_task_and_answers_with_one_json_line():
    found = child.run_child("depth", 1, mode="ordinary", **DEPTH)
    assert "error" not in found, found
    assert (found["layers"], found["mode"], found["length"]) == (1, "ordinary", 8)
    assert found["peak_mb"] >= 0


def test_the_child_gets_the_thread_count_in_its_environment():
    cmd = child.child_command("depth", threads=1, mode="ordinary", **DEPTH)
    assert cmd[:3] == [sys.executable, "-m", "transformer_cpp.bench.child_main"]
    assert json.loads(cmd[3]) == {"task": "depth", "threads": 1, "mode": "ordinary", **DEPTH}
    # what the child sees: a launcher that prints the environment instead of running it
    probe = "import os, json; print(json.dumps({'omp': os.environ['OMP_NUM_THREADS']}))"
    found = child.run_child("depth", 3, launcher=[sys.executable, "-c", probe], mode="ordinary", **DEPTH)
    assert found == {"omp": "3"}


def test_a_failing_child_is_reported_with_its_last_line():
    found = child.run_child("depth", 1, mode="sideways", **DEPTH)
    assert found["error"].startswith("child exited with 1: ValueError: mode must be one of")
    assert "'sideways'" in found["error"]


@pytest.mark.parametrize("argv", [[], ["not json"], ['{"task": "nothing"}'], ['["depth"]'], ["{}", "{}"]])
def test_a_bad_request_is_refused_by_name(argv, capsys):
    assert child_main.main(argv) == 2
    err = capsys.readouterr().err
    assert "expected one JSON object" in err and ", ".join(child.TASKS) in err


def test_every_task_has_its_runner():
    assert tuple(child_main.RUNNERS) == child.TASKS


def test_an_unknown_task_is_refused_before_a_process_starts():
    with pytest.raises(ValueError, match=r"child_command: task must be one of attention, .*, got 'nothing'"):
        child.child_command("nothing")


def test_the_module_runs_as_a_program():
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_cpp.bench.child_main", "{}"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "expected one JSON object" in proc.stderr
