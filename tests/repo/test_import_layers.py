"""The package's imports flow one way, bottom to top.

Every module of ``transformer_cpp`` belongs to one *unit*: a top-level module (``model``) or a
subpackage (``serve``, with all its submodules but its ``__main__``: what ``python -m
transformer_cpp.serve`` runs is an entry point like the package's own, at the top of the order,
and nothing imports it). The units are listed in ``LAYER_ORDER``, lowest
first, and a module may import only units listed before its own (and, inside a subpackage, its
siblings, without a cycle). The test reads the source with ``ast``, so it sees every import,
function-local ones included, and fails on:

- an import of a unit at or above the importer's place (an upward import, or a cycle);
- an import cycle between the submodules of one subpackage;
- ``from .x import _name`` that reaches a private name of another unit;
- an import of the package root (``transformer_cpp`` or ``from . import x`` at the top) from
  inside the package;
- a function-local import of the package's own code, unless the imported module needs an
  optional extra at its top (torch, mpi4py, fastapi, ...): those are imported late so that
  ``import transformer_cpp`` stays free of them (``test_import_weight`` checks that too); or
  unless it is a module that ``python -m`` runs (it has ``if __name__ == "__main__"``), which its
  own package must not import before runpy executes it.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
from dataclasses import dataclass

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "transformer_cpp"

# Lowest first. A unit may import only the units listed before it.
LAYER_ORDER = [
    # the compiled extension, then modules that import nothing of the package
    "_core",
    "_version",
    "_exported_torch",
    "_signatures",
    "_delegated",
    # the core, wrapped
    "_checks",
    "_runtime",
    "config",
    "kernels",
    "functional",
    "layers",
    "optim",
    # the model
    "model",
    # text and data
    "text",
    "tokenizer",
    "data",
    "checkpoint",
    # published models read in (MarianMT)
    "pretrained",
    # inference
    "translate",
    # training
    "distributed",
    "precision",
    "training",
    # the translation task: data record, presets, split, vocabularies, new/resume trainer
    "task",
    # travel and pictures
    "torch_reference",
    "export",
    "plotting",
    # front ends (every option, with all argparse code, is in cli)
    "serve",
    "bench",
    "cli",
    # the package facade, and what ``python -m transformer_cpp`` (``.serve``, ``.bench``) runs
    "__init__",
    "__main__",
]

# Third-party packages that are optional extras (or heavy): imported inside functions only.
OPTIONAL_EXTRAS = {
    "torch",
    "mpi4py",
    "fastapi",
    "starlette",
    "uvicorn",
    "httpx",
    "ctranslate2",
    "selenium",
    "tqdm",
    "IPython",
    "ipywidgets",
}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted module name inside the package, e.g. "serve.app"
    target: str  # dotted module name inside the package ("" = the package root)
    names: tuple[str, ...]  # names taken by ``from ... import``, empty for ``import x``
    line: int
    function_local: bool
    type_checking: bool


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def is_package(path: pathlib.Path) -> bool:
    return path.name == "__init__.py"


def unit_of(name: str) -> str:
    if name.endswith(".__main__"):
        return "__main__"  # an entry point of ``python -m``
    return name.split(".")[0] if name else ""


def _resolve(importer_path: pathlib.Path, importer: str, node: ast.ImportFrom) -> str:
    """The dotted package-relative module that a relative ``from`` import names."""
    package = importer.split(".") if importer else []
    if not is_package(importer_path):
        package = package[:-1]
    if importer == "__init__":
        package = []
    up = node.level - 1
    base = package[: len(package) - up] if up else package
    return ".".join(base + ([node.module] if node.module else []))


def _known_modules() -> dict[str, pathlib.Path]:
    found = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    found["_core"] = PACKAGE / "_core.pyi"  # the compiled extension, described by its stub
    return found


def collect_imports() -> tuple[list[Import], dict[str, set[str]]]:
    """Every import of the package's own code, and each module's top-level third-party imports."""
    modules = _known_modules()
    found: list[Import] = []
    external: dict[str, set[str]] = {}
    for name, path in sorted(modules.items()):
        if path.suffix != ".py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        external[name] = set()

        def visit(node: ast.AST, function_local: bool, type_checking: bool) -> None:
            for child in ast.iter_child_nodes(node):
                local = function_local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                checking = type_checking
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    checking = True
                if isinstance(child, ast.ImportFrom):
                    if child.level:
                        target = _resolve(path, name, child)
                        names = []
                        for alias in child.names:
                            sub = f"{target}.{alias.name}" if target else alias.name
                            if sub in modules:  # ``from . import x``: the submodule x
                                found.append(Import(name, sub, (), child.lineno, local, checking))
                            else:
                                names.append(alias.name)
                        if names:
                            found.append(Import(name, target, tuple(names), child.lineno, local, checking))
                    elif child.module and child.module.split(".")[0] == "transformer_cpp":
                        target = child.module.partition(".")[2]
                        found.append(
                            Import(name, target, tuple(a.name for a in child.names), child.lineno, local, checking)
                        )
                    elif child.module and not local and not checking:
                        external[name].add(child.module.split(".")[0])
                elif isinstance(child, ast.Import):
                    for alias in child.names:
                        top = alias.name.split(".")[0]
                        if top == "transformer_cpp":
                            found.append(Import(name, alias.name.partition(".")[2], (), child.lineno, local, checking))
                        elif not local and not checking:
                            external[name].add(top)
                visit(child, local, checking)

        visit(tree, False, False)
    return found, external


IMPORTS, EXTERNAL = collect_imports()
MODULES = _known_modules()


def _heavy_modules() -> set[str]:
    """Package modules that import an optional extra at their top, directly or through another."""
    heavy = {m for m, ext in EXTERNAL.items() if ext & OPTIONAL_EXTRAS}
    changed = True
    while changed:
        changed = False
        for imp in IMPORTS:
            if not imp.function_local and not imp.type_checking and imp.target in heavy and imp.importer not in heavy:
                heavy.add(imp.importer)
                changed = True
    return heavy


def _where(imp: Import) -> str:
    return f"{imp.importer} (line {imp.line})"


def test_every_unit_has_a_place_in_the_order():
    units = {unit_of(m) for m in MODULES}
    missing = sorted(units - set(LAYER_ORDER))
    assert not missing, f"modules with no place in LAYER_ORDER: {missing}"
    assert len(LAYER_ORDER) == len(set(LAYER_ORDER))


def test_imports_flow_downward():
    rank = {u: i for i, u in enumerate(LAYER_ORDER)}
    upward = []
    for imp in IMPORTS:
        if not imp.target:
            continue  # the package root: test_nothing_imports_the_package_root
        a, b = unit_of(imp.importer), unit_of(imp.target)
        if a == b:
            continue
        if rank[b] >= rank[a]:
            upward.append(f"{_where(imp)} imports {imp.target} (a unit at or above its own)")
    assert not upward, "\n".join(upward)


def test_no_cycles_inside_a_subpackage():
    graph: dict[str, set[str]] = {}
    for imp in IMPORTS:
        if imp.target and unit_of(imp.importer) == unit_of(imp.target) and imp.importer != imp.target:
            # a package's __init__ re-exports its submodules: that edge is the package's face
            if imp.target.startswith(imp.importer + ".") and is_package(MODULES[imp.importer]):
                continue
            graph.setdefault(imp.importer, set()).add(imp.target)
    state: dict[str, int] = {}
    cycles = []

    def dfs(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt) :] + [nxt]))
            elif nxt not in state:
                dfs(nxt, path + [nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            dfs(start, [start])
    assert not cycles, "\n".join(cycles)


def test_no_private_names_across_units():
    bad = [
        f"{_where(imp)} imports {', '.join(n for n in imp.names if n.startswith('_'))} from {imp.target}"
        for imp in IMPORTS
        if imp.target
        and unit_of(imp.importer) != unit_of(imp.target)
        and any(n.startswith("_") and not n.startswith("__") for n in imp.names)
        # a private module's public names are its unit's interface (``from ._runtime import build_info``)
    ]
    assert not bad, "\n".join(bad)


def test_nothing_imports_an_entry_point():
    bad = [f"{_where(imp)} imports {imp.target}" for imp in IMPORTS if unit_of(imp.target) == "__main__"]
    assert not bad, "\n".join(bad)


def test_nothing_imports_the_package_root():
    bad = [
        f"{_where(imp)} imports the package root"
        for imp in IMPORTS
        if not imp.target and imp.importer not in ("__init__", "__main__")
    ]
    assert not bad, "\n".join(bad)


def _script_modules() -> set[str]:
    """Modules that ``python -m`` runs: they end with ``if __name__ == "__main__":``."""
    return {
        name
        for name, path in MODULES.items()
        if path.suffix == ".py" and name != "__main__" and '__name__ == "__main__"' in path.read_text(encoding="utf-8")
    }


def test_function_local_imports_are_only_for_optional_extras():
    heavy = _heavy_modules() | _script_modules()
    bad = [
        f"{_where(imp)} imports {imp.target} inside a function"
        for imp in IMPORTS
        if imp.function_local and not imp.type_checking and imp.target not in heavy
    ]
    assert not bad, "\n".join(bad)


def test_the_order_is_checked_by_something_that_can_fail():
    """The scanner sees a planted upward import, a cycle and a private import."""
    planted = ast.parse("from .cli import _main\nfrom transformer_cpp import model\n")
    names = [n for n in ast.walk(planted) if isinstance(n, ast.ImportFrom)]
    fake = pathlib.Path(PACKAGE / "model.py")
    assert _resolve(fake, "model", names[0]) == "cli"
    assert LAYER_ORDER.index("cli") > LAYER_ORDER.index("model")
    assert any(imp.importer == "cli" for imp in IMPORTS), "the scanner found no import of cli"


@pytest.mark.parametrize("module", ["transformer_cpp"])
def test_import_weight(module):
    """``import transformer_cpp`` loads none of the optional extras."""
    code = (
        f"import sys, {module}\n"
        f"bad = sorted(m for m in {sorted(OPTIONAL_EXTRAS)!r} if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "", f"import {module} loaded {out.stdout.strip()}"
