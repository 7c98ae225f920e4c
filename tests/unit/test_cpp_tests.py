"""The C++ tests (``cpp/tests``): configure the project with ``-DTRANSFORMER_CPP_TESTS=ON`` into a
build directory of their own (``build/cpp-tests``; a second run rebuilds only what changed), build
the test programs alone with CMake and Ninja, and run them with ctest. They check the
matrix-product kernels against their readable references, and softmax, layer norm and Linear
against plain loops and float64 finite differences, without Python in the loop."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "build" / "cpp-tests"


def _tool(name):
    """``name`` next to this Python (a wheel's script) or on PATH; None when neither."""
    here = pathlib.Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def _run(args, timeout):
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.mark.slow  # a CMake build of the test programs (minutes from scratch)
def test_cpp_tests_pass():
    import pybind11

    cmake, ctest, ninja = _tool("cmake"), _tool("ctest"), _tool("ninja")
    if cmake is None or ctest is None or ninja is None:
        pytest.skip("the C++ tests need cmake, ctest and ninja (pip install cmake ninja)")
    _run(
        [
            cmake,
            "-S",
            str(ROOT),
            "-B",
            str(BUILD),
            "-G",
            "Ninja",
            f"-DCMAKE_MAKE_PROGRAM={ninja}",
            "-DCMAKE_BUILD_TYPE=Release",
            "-DTRANSFORMER_CPP_TESTS=ON",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        ],
        timeout=300,
    )
    jobs = str(min(2, os.cpu_count() or 1))
    _run([cmake, "--build", str(BUILD), "--target", "transformer_cpp_tests", "-j", jobs], timeout=900)
    out = _run([ctest, "--test-dir", str(BUILD), "--output-on-failure"], timeout=600)
    assert "100% tests passed" in out, out
