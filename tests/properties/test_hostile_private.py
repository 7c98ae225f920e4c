"""Hostile-input tests that reach private names of the package, kept apart from the case table
(``tests/helpers/hostile_cases``), which uses only the public API and the command line.

* ``cli.tools.run_figures`` is replaced to make a subcommand fail in ways no input can: an allocation
  failing anyway (``std::bad_alloc`` raised as MemoryError) and a bug (an IndexError): each must be
  one line on standard error, the bug saying so and how to get its traceback.
* ``data.lines._CHUNK``, the size of the reads of ``load_tatoeba``, is made tiny so that every kind of line
  end falls on a read boundary somewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys

from transformer_cpp import cli
from transformer_cpp.cli import tools as cli_tools


def test_an_allocation_that_fails_anyway_is_one_line(monkeypatch, capsys):
    def out_of_memory(args):
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(cli_tools, "run_figures", out_of_memory)
    assert cli.main(["figures"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("transformer-cpp figures: error: out of memory (std::bad_alloc): ") and "\n" not in err


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


def test_line_ends_across_read_chunks(tmp_path, monkeypatch):
    from transformer_cpp import data as tdata
    from transformer_cpp.data import lines as line_reading

    monkeypatch.setattr(line_reading, "_CHUNK", 3)  # every kind of line end falls on a chunk boundary somewhere
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
    assert pairs.sources == [f"The cat {i}." for i in range(7)]
    assert (pairs.stats.read, pairs.stats.empty) == (9, 2)
