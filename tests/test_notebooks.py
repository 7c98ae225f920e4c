"""Execute every notebook in ``notebooks/`` headless; any cell error fails the test.

Each notebook is its own test. The kernel is started from a kernelspec written for this test that
runs ``sys.executable -m ipykernel_launcher``, so the notebooks see exactly the interpreter (and the
installed ``transformer_cpp``) that runs pytest, whatever kernels the machine has registered.
``TRANSFORMER_CPP_QUICK=1`` asks notebooks for small settings; the working directory is a fresh
temporary directory so that files a notebook writes do not land in the repository.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

# Plain imports on purpose: without the test extras this module must fail, not skip.
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT = 600  # seconds per cell
KERNEL_NAME = "transformer-cpp-test"


def test_notebooks_exist() -> None:
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"


def _kernel_manager(kernel_dir: pathlib.Path, env: dict):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = kernel_dir / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.executable})",
        "language": "python",
        "env": env,
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    ksm = KernelSpecManager(kernel_dirs=[str(kernel_dir)], ensure_native_kernel=False)
    return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRANSFORMER_CPP_QUICK", "1")
    monkeypatch.chdir(tmp_path)
    nb = nbformat.read(path, as_version=4)
    work = tmp_path / "work"
    work.mkdir()
    km = _kernel_manager(tmp_path / "kernels", {"TRANSFORMER_CPP_QUICK": "1"})
    client = NotebookClient(
        nb,
        km=km,
        timeout=CELL_TIMEOUT,
        allow_errors=False,
        resources={"metadata": {"path": str(work)}},
    )
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{path.name}: a cell raised an error\n{exc}", pytrace=False)

    # Every code cell ran, and none produced an error output.
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        assert cell.get("execution_count") is not None, f"{path.name}: a code cell did not run"
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", f"{path.name}: {output.get('ename')}: {output.get('evalue')}"


def test_notebooks_are_saved_without_outputs() -> None:
    """Keep the repository small: notebooks are committed with outputs cleared."""
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.get("outputs"), f"{path.name}: commit the notebook with outputs cleared"
                assert cell.get("execution_count") is None, f"{path.name}: commit the notebook with outputs cleared"
