"""The C++ core's folders by role, and its includes flowing one way, bottom to top.

Every header under ``cpp/include/transformer`` and every source under ``cpp/src`` lives in one of
the folders of ``FOLDER_ORDER`` (lowest first), a source at the same relative place as its header.
A file may include (``#include "transformer/<folder>/..."``) only headers of its own folder or of
a folder listed before it, and only headers that exist. The bindings (``cpp/bindings``) sit above
all of them and the C++ tests (``cpp/tests``) beside them: neither is checked.
"""

from __future__ import annotations

import pathlib
import re
from typing import Iterable, List

ROOT = pathlib.Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "cpp" / "include"
SOURCE = ROOT / "cpp" / "src"

# Lowest first: a file may include headers of its own folder and of the folders before it.
FOLDER_ORDER = [
    "core",  # tensor, configuration tables, checks, random, tuning, runtime
    "kernels",  # matrix products, decoding kernels, the inference product backend
    "layers",  # embedding, linear, layer norm, dropout, activations, softmax, feed-forward, loss, residual helpers
    "attention",  # the attention kinds and their factory
    "models",  # encoder and decoder stacks, reversible stack, Transformer, language model, optimiser
    "inference",  # search (greedy, beam, sampling)
]

INCLUDE_LINE = re.compile(r'^\s*#\s*include\s+"transformer/([^"]+)"', re.MULTILINE)


def folder_of(path: pathlib.Path, cpp: pathlib.Path) -> str:
    """The role folder of a file of ``<cpp>/include/transformer`` or ``<cpp>/src`` ("" for none)."""
    headers = cpp / "include" / "transformer"
    base = headers if path.is_relative_to(headers) else cpp / "src"
    parts = path.relative_to(base).parts
    return parts[0] if len(parts) > 1 else ""


def core_files() -> List[pathlib.Path]:
    """Every C++ header and source of the core, sorted."""
    found = list((INCLUDE / "transformer").rglob("*.hpp")) + list(SOURCE.rglob("*.cpp"))
    return sorted(found)


def upward_includes(files: Iterable[pathlib.Path], cpp: pathlib.Path = ROOT / "cpp") -> List[str]:
    """One line per include of a header from a folder above the includer's (or from no known
    folder, or of a header that does not exist), naming the file (relative to the folder above
    ``cpp``) and the include."""
    problems = []
    for path in files:
        own = folder_of(path, cpp)
        rank = FOLDER_ORDER.index(own) if own in FOLDER_ORDER else len(FOLDER_ORDER)
        for included in INCLUDE_LINE.findall(path.read_text(encoding="utf-8")):
            where = f'{path.relative_to(cpp.parent)}: #include "transformer/{included}"'
            target = included.split("/")[0] if "/" in included else ""
            if target not in FOLDER_ORDER:
                problems.append(f"{where} names no folder of {FOLDER_ORDER}")
            elif FOLDER_ORDER.index(target) > rank:
                problems.append(f"{where} is from '{target}/', above '{own}/' (order: {' < '.join(FOLDER_ORDER)})")
            elif not (cpp / "include" / "transformer" / included).is_file():
                problems.append(f"{where}: no such header in cpp/include/transformer")
    return problems


def test_every_file_sits_in_a_role_folder():
    misplaced = [str(p.relative_to(ROOT)) for p in core_files() if folder_of(p, ROOT / "cpp") not in FOLDER_ORDER]
    assert not misplaced, f"outside the folders {FOLDER_ORDER}: {misplaced}"


def test_every_source_sits_beside_its_header():
    # one .cpp per header, at the same relative place (cpp/src/<folder>/x.cpp for
    # cpp/include/transformer/<folder>/x.hpp)
    alone = [
        str(p.relative_to(ROOT))
        for p in SOURCE.rglob("*.cpp")
        if not (INCLUDE / "transformer" / p.relative_to(SOURCE).with_suffix(".hpp")).is_file()
    ]
    assert not alone, f"sources without a header at the same relative place: {alone}"


def test_no_include_from_a_folder_above():
    files = core_files()
    assert len(files) > 50, "the core's files were not found"
    problems = upward_includes(files)
    assert not problems, "\n".join(problems)


def test_the_check_sees_an_upward_include(tmp_path):
    # the same check over a small tree of its own: a layer that includes a model is reported with
    # the file and the include; an include from below, and one from its own folder, are not
    cpp = tmp_path / "cpp"
    headers = cpp / "include" / "transformer"
    for folder in ("core", "layers", "models"):
        (headers / folder).mkdir(parents=True)
    (cpp / "src" / "layers").mkdir(parents=True)
    (headers / "core" / "tensor.hpp").write_text("#pragma once\n")
    (headers / "models" / "model.hpp").write_text("#pragma once\n")
    (headers / "layers" / "linear.hpp").write_text('#pragma once\n#include "transformer/core/tensor.hpp"\n')
    bad = cpp / "src" / "layers" / "linear.cpp"
    bad.write_text(
        '#include "transformer/layers/linear.hpp"\n#include <vector>\n  #  include "transformer/models/model.hpp"\n'
    )
    problems = upward_includes(sorted(headers.rglob("*.hpp")) + [bad], cpp)
    assert len(problems) == 1, problems
    assert problems[0].startswith('cpp/src/layers/linear.cpp: #include "transformer/models/model.hpp"'), problems
    assert "from 'models/', above 'layers/'" in problems[0]
    # a header that does not exist, and one outside the folders, are reported too
    bad.write_text('#include "transformer/core/missing.hpp"\n#include "transformer/tensor.hpp"\n')
    problems = upward_includes([bad], cpp)
    assert len(problems) == 2, problems
    assert "no such header" in problems[0] and "names no folder" in problems[1]
