"""Every case of the hostile-input table (``tests/helpers/hostile_cases``) that is not campaign-only: bad
input to the layers, the model, the tokenizer, data files, training, checkpoints, translation, the
HTTP app and every command-line subcommand must end in a clear error naming the problem (one error
line on the command line) or in a correct result, never in a crash, a traceback, a hang or a
silent wrong answer.

The cases run one at a time in a server process (``helpers.hostile_cases.runner.serve``) that imports the
package once, builds the fixtures once (a tiny data file, a run trained on it for two epochs) and
forks a child per case, under a 2 GB address-space limit and the case's time limit (180 s unless
the case says less); a crash fails that case only.
"""

from __future__ import annotations

import os
import tempfile

import pytest

from helpers.hostile_cases import CASES, shared_cases
from helpers.hostile_cases.runner import ASAN, COVERAGE_VARIABLE, PASSING, Server

SHARED = shared_cases()


def _coverage_environment() -> dict:
    """Under pytest-cov, the server and the API cases' children measure the package as this process
    does (their data files are combined with its own at the end): API calls count for line
    coverage wherever they run."""
    try:
        import coverage
    except ImportError:
        return {}
    cov = coverage.Coverage.current()
    return {} if cov is None else {COVERAGE_VARIABLE: os.path.abspath(cov.config.data_file)}


@pytest.fixture(scope="module")
def server():
    with tempfile.TemporaryFile() as log:
        s = Server(log, _coverage_environment())
        yield s
        s.close()


def test_case_names_are_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            c,
            id=c.name,
            marks=pytest.mark.skipif(
                ASAN and c.needs_rlimit, reason="AddressSanitizer cannot run under an address-space limit (ulimit -v)"
            ),
        )
        for c in SHARED
    ],
)
def test_hostile_case(server, case):
    outcome = server.run(case)
    assert outcome["class"] in PASSING, f"{outcome['class']}: {outcome.get('detail', '')}\n" + "".join(
        f"{k}: {outcome[k]}\n" for k in ("where", "output", "stderr", "stdout") if outcome.get(k)
    )
    if case.expect == "error":
        assert outcome["class"] == "clear-error", outcome
        # refused before memory is taken: the child that ran the case, a copy of the server process,
        # peaked below 1.5x the server's resident memory (partial cases, which also do the work of
        # their good inputs, and AddressSanitizer's shadow memory aside)
        if outcome.get("peak_bytes") and not ASAN and not case.partial:
            assert outcome["peak_bytes"] < 1.5 * server.idle_bytes, (
                f"peak {outcome['peak_bytes'] / 2**20:.0f} MB for a refused input, "
                f"the idle process holds {server.idle_bytes / 2**20:.0f} MB"
            )
    elif case.expect == "ok":
        assert outcome["class"] == "handled", outcome
