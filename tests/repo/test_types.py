"""``mypy --strict`` on the whole package (pyproject.toml's ``[tool.mypy]``: its ``files`` and
``strict``): every module is clean, and a new one is clean from its first commit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_passes_mypy_strict():
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"],
        cwd=ROOT,  # pyproject.toml's [tool.mypy]: files = the package, strict = true
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
