"""Execute the notebooks in ``notebooks/`` and save them with their outputs, so that a visitor
sees the figures on GitHub without running anything.

    python tools/execute_notebooks.py            # all notebooks, small settings (TRANSFORMER_CPP_QUICK=1)
    python tools/execute_notebooks.py --full --threads 2 notebooks/03_train_and_translate.ipynb

The notebooks run as ``tests/integration/test_notebooks.py`` runs them (a kernel on this interpreter, a
temporary working directory), so the committed outputs have the structure of a fresh test run,
which that test checks. By default they run with ``TRANSFORMER_CPP_QUICK=1`` (small settings, as
in the test). ``--full`` runs them with their own default settings instead: notebook 03 then
trains the ``quick`` recipe for its 10-minute budget, so that the saved outputs show a model
that translates (the test's quick run has the same cells and kinds of output); without a time
limit per cell. ``--threads N`` gives the kernel ``OMP_NUM_THREADS=N``. The data file is found as
the notebooks find it (``TRANSFORMER_CPP_DATA``, else the cache, else the download).

Outputs are kept small: progress-bar redraws are reduced to their last state and long text is
cut; absolute paths of the machine that ran them (its Python, the data folder, the repository,
the working directory) are made relative.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import sys
import tempfile
from typing import Any, Dict, List, Optional, Set

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
KERNEL_NAME = "transformer-cpp-notebooks"
CELL_TIMEOUT = 600  # seconds per cell, with small settings (None with --full: training runs for its budget)
MAX_STREAM_CHARS = 6000  # text kept per stream output (a training run's epoch lines fit)
MAX_IMAGE_WIDTH = 720  # pixels; wider figures are scaled down and stored with a 256-colour palette


def kernel_manager(kernel_dir: pathlib.Path, env: Dict[str, str]) -> Any:
    """A Jupyter kernel running ``sys.executable`` (whatever kernels the machine has registered)."""
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


def execute(path: pathlib.Path, scratch: pathlib.Path, *, full: bool = False, threads: Optional[int] = None) -> Any:
    """The notebook at ``path`` executed in ``scratch / "work"`` (raises on a cell error): with small
    settings (``TRANSFORMER_CPP_QUICK=1``), or with ``full`` its own default settings; ``threads``:
    the kernel's ``OMP_NUM_THREADS``."""
    nb = nbformat.read(path, as_version=4)
    work = scratch / "work"
    work.mkdir(parents=True)
    # "0", not unset, with full: the kernel inherits this process's environment
    env = {"TRANSFORMER_CPP_QUICK": "0" if full else "1"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    km = kernel_manager(scratch / "kernels", env)
    NotebookClient(
        nb,
        km=km,
        timeout=None if full else CELL_TIMEOUT,
        allow_errors=False,
        resources={"metadata": {"path": str(work)}},
    ).execute()
    return nb


def output_kinds(nb: Any) -> List[Set[str]]:
    """Per code cell, what kinds of output it made: ``stream:stdout``, ``display_data:image/png``,
    ``execute_result:text/plain``, ... (the structure, not the content, which changes run to run)."""
    kinds = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        found = set()
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                found.add(f"stream:{out['name']}")
            elif out["output_type"] in ("display_data", "execute_result"):
                found.update(f"{out['output_type']}:{mime}" for mime in out.get("data", {}))
            else:
                found.add(out["output_type"])
        kinds.append(found)
    return kinds


def _last_redraw(text: str) -> str:
    """What a terminal would show: of each line, the part after its last carriage return."""
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def _small_png(data: str) -> str:
    """A base64 PNG at most MAX_IMAGE_WIDTH wide, with a 256-colour palette (heat maps and
    line plots lose nothing visible)."""
    import base64
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")
    if image.width > MAX_IMAGE_WIDTH:
        image = image.resize((MAX_IMAGE_WIDTH, round(image.height * MAX_IMAGE_WIDTH / image.width)), Image.LANCZOS)
    buffer = io.BytesIO()
    image.quantize(256).save(buffer, format="PNG", optimize=True)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _machine_paths(work: Optional[pathlib.Path] = None) -> List[tuple]:
    """(absolute prefix, what a reader sees instead) for the paths of the machine that runs the
    notebooks: its Python environment, the data file's folder, the repository, the notebook's
    working directory ``work``, and the home directory (where the data cache is by default)."""
    pairs = [(sys.prefix.rstrip("/") + "/", "<python>/"), (str(ROOT) + "/", "")]
    home = os.path.expanduser("~")
    if home not in ("", "/", "~"):
        pairs.append((home.rstrip("/") + "/", "~/"))
    if work is not None:
        for form in {str(work), os.path.realpath(work)}:
            pairs.append((form.rstrip("/") + "/", ""))
    data = os.environ.get("TRANSFORMER_CPP_DATA")
    if data:
        pairs.insert(0, (os.path.dirname(os.path.dirname(os.path.abspath(data))) + "/", ""))
    return sorted(pairs, key=lambda p: -len(p[0]))


def without_machine_paths(text: str, work: Optional[pathlib.Path] = None) -> str:
    """``text`` with the absolute paths of this machine (and of the working directory ``work``) made
    relative (outputs are read elsewhere)."""
    for prefix, shown in _machine_paths(work):
        text = text.replace(prefix, shown)
    # a warning raised in a cell names the kernel's temporary file for it
    return re.sub(r"/[^\s:]*/ipykernel_\d+/\d+\.py", "<cell>", text)


def shrink(nb: Any, work: Optional[pathlib.Path] = None) -> Any:
    """Progress-bar redraws reduced to their final state, long streams cut, images made smaller,
    timings dropped, this machine's absolute paths (and those of the working directory ``work``)
    made relative."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.metadata.pop("execution", None)
        merged: List[Any] = []  # consecutive writes to one stream become one output
        for out in cell.get("outputs", []):
            if (
                out["output_type"] == "stream"
                and merged
                and merged[-1]["output_type"] == "stream"
                and merged[-1]["name"] == out["name"]
            ):
                merged[-1]["text"] += out["text"]
            else:
                merged.append(out)
        cell.outputs = merged
        for out in cell.outputs:
            if out["output_type"] == "stream":
                text = without_machine_paths(_last_redraw(out["text"]), work)
                if len(text) > MAX_STREAM_CHARS:
                    text = text[:MAX_STREAM_CHARS] + f"\n[... {len(text) - MAX_STREAM_CHARS} characters cut]\n"
                out["text"] = text
            elif "text/plain" in out.get("data", {}):
                out["data"]["text/plain"] = without_machine_paths(out["data"]["text/plain"], work)
            if "image/png" in out.get("data", {}):
                out["data"]["image/png"] = _small_png(out["data"]["image/png"])
    return nb


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path, help="default: every notebook in notebooks/")
    parser.add_argument(
        "--full", action="store_true", help="the notebooks' own settings, not TRANSFORMER_CPP_QUICK=1 (long runs)"
    )
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS of the kernel")
    args = parser.parse_args(argv)
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    paths = args.notebooks or sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    for path in paths:
        if not path.is_file():
            parser.error(f"no notebook at '{path}'")
    for path in paths:
        with tempfile.TemporaryDirectory() as scratch:
            work = pathlib.Path(scratch) / "work"
            nb = shrink(execute(path, pathlib.Path(scratch), full=args.full, threads=args.threads), work)
        nbformat.write(nb, path)
        print(f"{path}: {path.stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
