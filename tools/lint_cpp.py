"""Lint the C++ core: clang-format (the style in ``.clang-format``) and clang-tidy (the checks in
``.clang-tidy``) over ``cpp/``.

    python tools/lint_cpp.py            # check; exit 1 with the findings if any
    python tools/lint_cpp.py --fix      # rewrite the files in the clang-format style
    python tools/lint_cpp.py --format-only

The tools come from the ``clang-format`` and ``clang-tidy`` wheels of the ``test`` extra (their
versions are pinned there: another version formats differently). clang-tidy needs the headers the
build uses: Eigen from the ``cmeel-eigen`` wheel, pybind11, Python's, and ``omp.h`` (the compiler's,
found through ``g++ -print-file-name``, copied alone into a temporary folder so that clang does not
pick up GCC's other intrinsic headers).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("cpp/src", "cpp/include", "cpp/bindings", "cpp/tests")


def cpp_files() -> List[Path]:
    """Every C++ source and header of the core, sorted."""
    found: List[Path] = []
    for folder in SOURCES:
        for suffix in ("*.cpp", "*.hpp"):
            found.extend((ROOT / folder).rglob(suffix))
    return sorted(found)


def tool(name: str) -> str:
    """The executable ``name`` next to this Python (the wheel's script) or on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found is None:
        raise SystemExit(f"lint_cpp: '{name}' not found; install the test extra (pip install '.[test]')")
    return found


def eigen_include() -> str:
    """Eigen's include folder from the cmeel-eigen wheel (the build's own Eigen)."""
    for base in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}:
        path = Path(base) / "cmeel.prefix" / "include" / "eigen3"
        if (path / "Eigen").is_dir():
            return str(path)
    raise SystemExit("lint_cpp: Eigen headers not found; install the test extra (it brings cmeel-eigen)")


def omp_include(into: Path) -> str:
    """A folder holding only the compiler's omp.h."""
    out = subprocess.run(["g++", "-print-file-name=include"], capture_output=True, text=True, check=False)
    header = Path(out.stdout.strip()) / "omp.h"
    if out.returncode != 0 or not header.is_file():
        raise SystemExit("lint_cpp: g++ does not know an omp.h (needed to read the OpenMP code)")
    shutil.copy(header, into / "omp.h")
    return str(into)


def check_format(files: Sequence[Path], fix: bool) -> List[str]:
    """clang-format over ``files``: rewrite them (``fix``) or return one finding per bad file."""
    exe = tool("clang-format")
    if fix:
        subprocess.run([exe, "-i", *map(str, files)], check=True)
        return []
    problems = []
    for f in files:
        out = subprocess.run([exe, "--dry-run", "--Werror", str(f)], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            first = next((line for line in out.stderr.splitlines() if "error" in line), out.stderr.strip())
            problems.append(
                f"clang-format: {f.relative_to(ROOT)} is not formatted ({first.strip()}); "
                f"run python tools/lint_cpp.py --fix"
            )
    return problems


def check_tidy(files: Sequence[Path], jobs: int) -> List[str]:
    """clang-tidy over the translation units among ``files``; one finding per warning."""
    import pybind11

    exe = tool("clang-tidy")
    with tempfile.TemporaryDirectory() as tmp:
        flags = [
            "-std=c++17",
            "-fopenmp",
            f"-I{ROOT / 'cpp' / 'include'}",
            "-isystem",
            eigen_include(),
            "-isystem",
            pybind11.get_include(),
            "-isystem",
            sysconfig.get_paths()["include"],
            "-isystem",
            omp_include(Path(tmp)),
        ]

        def run(unit: Path) -> str:
            out = subprocess.run(
                [exe, "--quiet", f"--config-file={ROOT / '.clang-tidy'}", str(unit), "--", *flags],
                capture_output=True,
                text=True,
                check=False,
                cwd=ROOT,
            )
            return out.stdout if out.returncode != 0 or "warning:" in out.stdout else ""

        units = [f for f in files if f.suffix == ".cpp"]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            reports = list(pool.map(run, units))
    seen, problems = set(), []
    for report in reports:
        for line in report.splitlines():
            if ("warning:" in line or "error:" in line) and line not in seen:
                seen.add(line)
                problems.append(f"clang-tidy: {line}")
    return problems


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fix", action="store_true", help="rewrite the files in the clang-format style")
    parser.add_argument("--format-only", action="store_true", help="skip clang-tidy")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="clang-tidy processes at once")
    args = parser.parse_args(argv)
    files = cpp_files()
    problems = check_format(files, args.fix)
    if not args.format_only:
        problems += check_tidy(files, max(args.jobs, 1))
    for p in problems:
        print(p)
    print(f"lint_cpp: {len(files)} files, {len(problems)} finding(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
