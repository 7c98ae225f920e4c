"""Execute every notebook in ``notebooks/`` headless; any cell error fails the test. The notebooks
are committed executed (``tools/execute_notebooks.py``), and the committed outputs must have the
structure of the fresh run: the same kinds of output (text, PNG figure, ...) in every code cell.

Each notebook is its own test. The kernel is started from a kernelspec written for this test that
runs ``sys.executable -m ipykernel_launcher``, so the notebooks see exactly the interpreter (and the
installed ``transformer_cpp``) that runs pytest, whatever kernels the machine has registered.
``TRANSFORMER_CPP_QUICK=1`` asks notebooks for small settings; the working directory is a fresh
temporary directory so that files a notebook writes do not land in the repository.
"""

from __future__ import annotations

import pathlib
import sys

import pytest

# Plain imports on purpose: without the test extras this module must fail, not skip.
import nbformat
from nbclient.exceptions import CellExecutionError

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import execute_notebooks  # noqa: E402  (tools/: how the committed outputs were made)

NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
MAX_NOTEBOOK_BYTES = 600 * 1024  # outputs kept small: figures downscaled, progress bars collapsed


def test_notebooks_exist() -> None:
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRANSFORMER_CPP_QUICK", "1")
    monkeypatch.chdir(tmp_path)
    try:
        nb = execute_notebooks.execute(path, tmp_path)
    except CellExecutionError as exc:
        pytest.fail(f"{path.name}: a cell raised an error\n{exc}", pytrace=False)

    # Every code cell ran, and none produced an error output.
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        assert cell.get("execution_count") is not None, f"{path.name}: a code cell did not run"
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", f"{path.name}: {output.get('ename')}: {output.get('evalue')}"

    # The committed outputs are those of such a run: same cells, same kinds of output in each
    # (content differs: timings, random draws). Rerun tools/execute_notebooks.py after editing.
    committed = nbformat.read(path, as_version=4)
    fresh, saved = execute_notebooks.output_kinds(nb), execute_notebooks.output_kinds(committed)
    assert len(saved) == len(fresh), (
        f"{path.name}: committed with {len(saved)} code cells, the notebook has {len(fresh)}"
    )
    for i, (want, got) in enumerate(zip(fresh, saved)):
        # stderr (warnings, text progress bars) and widgets (progress bars with ipywidgets
        # installed) depend on the environment, not on the notebook
        want = {k for k in want if k != "stream:stderr" and "widget" not in k}
        got = {k for k in got if k != "stream:stderr" and "widget" not in k}
        assert got == want, (
            f"{path.name}: code cell {i + 1} was committed with outputs {sorted(got)}, a fresh run "
            f"gives {sorted(want)}; run python tools/execute_notebooks.py"
        )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebooks_are_committed_executed_and_small(path: pathlib.Path) -> None:
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") is not None for c in code), f"{path.name}: committed without its outputs"
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs), f"{path.name}: no figure saved"
    assert path.stat().st_size <= MAX_NOTEBOOK_BYTES, f"{path.name}: {path.stat().st_size} bytes of outputs"
