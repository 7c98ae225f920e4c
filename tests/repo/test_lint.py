"""The linters as tests: ``ruff check`` (rules in pyproject.toml) and ``ruff format --check`` find
nothing in the package, the tests, the tools and the docs scripts; clang-format (``.clang-format``)
and clang-tidy (``.clang-tidy``) find nothing in the C++ (``tools/lint_cpp.py``)."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PYTHON_TREES = ["python", "tests", "tools", "docs"]


def test_ruff_finds_nothing():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--output-format", "concise", *PYTHON_TREES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_python_is_formatted():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *PYTHON_TREES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (
        "run `ruff format python tests tools docs`:\n" + proc.stdout[-4000:] + proc.stderr[-2000:]
    )


@pytest.mark.slow  # clang-tidy over every C++ file
def test_cpp_is_formatted_and_clang_tidy_finds_nothing():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "lint_cpp.py")], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 finding(s)" in proc.stdout
