"""``transformer_cpp/_core.pyi`` against the compiled ``_core``: the checked-in type stubs must
name exactly what the extension holds (functions, classes, their methods and properties, setters,
argument names and which arguments have defaults), and ship with ``py.typed`` in the package.

The only test that looks inside ``_core`` (the others use the public package): the stubs describe it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import types
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

import transformer_cpp

core = importlib.import_module("transformer_cpp._core")
PACKAGE = Path(transformer_cpp.__file__).parent
STUB = PACKAGE / "_core.pyi"
# what pybind11 puts in every class, not part of the binding
_PYBIND_INTERNALS = {"__doc__", "__module__", "__dict__", "__weakref__", "_pybind11_conduit_v1_"}

Signature = List[Tuple[str, bool]]  # (argument name, has a default), in order


def _stub() -> ast.Module:
    return ast.parse(STUB.read_text(encoding="utf-8"), filename=str(STUB))


def _stub_top() -> Dict[str, ast.AST]:
    return {node.name: node for node in _stub().body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}


def _own(name: str) -> bool:
    return not (name.startswith("__") and name.endswith("__"))


def _runtime_top() -> Dict[str, object]:
    return {name: getattr(core, name) for name in dir(core) if _own(name)}


def _decorators(fn: ast.FunctionDef) -> List[str]:
    return [ast.unparse(d) for d in fn.decorator_list]


def _stub_signature(fn: ast.FunctionDef) -> Signature:
    args = fn.args.posonlyargs + fn.args.args
    first_default = len(args) - len(fn.args.defaults)
    signature = [(a.arg, i >= first_default) for i, a in enumerate(args)]
    if fn.args.vararg is not None:  # pybind11 writes py::args and py::kwargs as *args and **kwargs
        signature.append(("*" + fn.args.vararg.arg, False))
    if fn.args.kwarg is not None:
        signature.append(("**" + fn.args.kwarg.arg, False))
    return signature


def _split_top_level(text: str) -> List[str]:
    """Split at commas outside brackets and quotes."""
    parts, depth, quote, current = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += ch
    if current.strip():
        parts.append(current)
    return parts


def _runtime_signature(name: str, fn: object) -> Optional[Signature]:
    """The signature pybind11 writes as the first line of the docstring, or None (overloads)."""
    doc = inspect.getdoc(fn) or ""
    first = doc.splitlines()[0] if doc else ""
    if "Overloaded function" in doc or not first.startswith(name + "("):
        return None
    inner = first[len(name) + 1 : first.rindex(") ->")]
    return [(arg.split(":")[0].split("=")[0].strip(), "=" in arg) for arg in _split_top_level(inner)]


def _check_signature(where: str, fn: object, node: ast.FunctionDef, problems: List[str]) -> None:
    runtime = _runtime_signature(node.name, fn)
    if runtime is None:
        problems.append(f"{where}: the compiled module gives no single signature; check the stub by hand")
    elif runtime != _stub_signature(node):
        problems.append(f"{where}: compiled (argument, has default) {runtime}, stub {_stub_signature(node)}")


def test_stub_and_marker_are_in_the_package():
    """Next to the extension wherever the package is installed (CI installs the wheel)."""
    assert STUB.is_file(), STUB
    assert (PACKAGE / "py.typed").is_file()


def test_module_names_match():
    stub, runtime = _stub_top(), _runtime_top()
    missing = sorted(set(runtime) - set(stub))
    extra = sorted(set(stub) - set(runtime))
    assert not missing and not extra, (
        f"_core.pyi lacks {missing} and names {extra}, which the compiled "
        "module does not have: update the stub with the bindings"
    )
    for name, obj in runtime.items():
        is_class = isinstance(obj, type)
        assert isinstance(stub[name], ast.ClassDef) == is_class, f"{name}: a {'class' if is_class else 'function'}"
        if not is_class:
            assert isinstance(stub[name], ast.FunctionDef)


def test_function_signatures_match():
    problems: List[str] = []
    stub = _stub_top()
    for name, obj in _runtime_top().items():
        if not isinstance(obj, type) and name in stub:  # a missing name fails test_module_names_match
            _check_signature(name, obj, stub[name], problems)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", sorted(n for n, o in _runtime_top().items() if isinstance(o, type)))
def test_class_matches(name):
    cls = getattr(core, name)
    node = _stub_top()[name]
    assert isinstance(node, ast.ClassDef)
    if issubclass(cls, BaseException):  # an exception: its bases are what matters
        assert [ast.unparse(b) for b in node.bases] == [b.__name__ for b in cls.__bases__]
        return
    # a class without constructor gets a C slot __init__ that raises "No constructor defined!"
    members = {
        n: v
        for n, v in vars(cls).items()
        if n not in _PYBIND_INTERNALS and not isinstance(v, types.WrapperDescriptorType)
    }
    # pybind11 sets __hash__ = None in a class that defines __eq__ without __hash__ (it cannot be
    # hashed): the stub says so with an annotation, "__hash__: typing.ClassVar[None]"
    unset = {n for n, v in members.items() if v is None}
    annotated = {item.target.id for item in node.body if isinstance(item, ast.AnnAssign)}
    assert unset == annotated, f"{name}: None in the class {sorted(unset)}, annotated in the stub {sorted(annotated)}"
    members = {n: v for n, v in members.items() if v is not None}
    defs: Dict[str, List[ast.FunctionDef]] = {}
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            defs.setdefault(item.name, []).append(item)
    missing, extra = sorted(set(members) - set(defs)), sorted(set(defs) - set(members))
    assert not missing and not extra, f"{name}: the stub lacks {missing} and has {extra} that the class lacks"
    problems: List[str] = []
    for member, value in members.items():
        decorators = [d for fn in defs[member] for d in _decorators(fn)]
        if isinstance(value, property):
            assert "property" in decorators, f"{name}.{member} is a property"
            settable = value.fset is not None
            assert (f"{member}.setter" in decorators) == settable, (
                f"{name}.{member} is {'settable' if settable else 'read-only'} in the compiled module"
            )
        elif isinstance(value, staticmethod):
            assert decorators == ["staticmethod"] and len(defs[member]) == 1, f"{name}.{member} is a static method"
            _check_signature(f"{name}.{member}", value.__func__, defs[member][0], problems)
        else:
            assert "property" not in decorators and len(defs[member]) == 1, f"{name}.{member} is a method"
            _check_signature(f"{name}.{member}", value, defs[member][0], problems)
    assert not problems, "\n".join(problems)


def test_the_checks_see_a_change():
    """The comparison itself: a renamed argument or a missing method is noticed."""
    node = ast.parse("def forward(self, x, training=False): ...").body[0]
    assert _stub_signature(node) == [("self", False), ("x", False), ("training", True)]
    fn = core.Linear_float32.forward
    assert _runtime_signature("forward", fn) == [("self", False), ("x", False)]
    renamed = ast.parse("def forward(self, inputs): ...").body[0]
    problems: List[str] = []
    _check_signature("Linear_float32.forward", fn, renamed, problems)
    assert problems and "inputs" in problems[0]
    assert _split_top_level("a: dict[str, int] = {'x': 1, 'y': 2}, b: str = 'p,q'") == [
        "a: dict[str, int] = {'x': 1, 'y': 2}",
        " b: str = 'p,q'",
    ]
