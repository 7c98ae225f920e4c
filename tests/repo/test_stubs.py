"""``transformer_cpp/_core.pyi`` against the compiled ``_core``: the type stubs are generated from
the bindings by ``tools/gen_stubs.py``, the committed file is what the generator writes for the
built module, it names exactly what the extension holds (functions, classes, their methods and
properties, setters, argument names and which arguments have defaults), and it ships with
``py.typed`` in the package.

The only test that looks inside ``_core`` (the others use the public package): the stubs describe it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import types
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

import transformer_cpp
from transformer_cpp._signatures import split_top_level

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import gen_stubs  # noqa: E402  (tools/: the generator of the stub)

core = importlib.import_module("transformer_cpp._core")
PACKAGE = Path(transformer_cpp.__file__).parent
STUB = PACKAGE / "_core.pyi"
# what pybind11 puts in every class, not part of the binding
_PYBIND_INTERNALS = {"__doc__", "__module__", "__dict__", "__weakref__", "_pybind11_conduit_v1_"}

Signature = List[Tuple[str, bool]]  # (argument name, has a default), in order


def _stub() -> ast.Module:
    return ast.parse(STUB.read_text(encoding="utf-8"), filename=str(STUB))


def _is_generic_base(node: ast.AST) -> bool:
    """A class of the stub only, the shared stub of a float32 / float64 pair: ``_Linear(typing.Generic[_F])``."""
    return isinstance(node, ast.ClassDef) and any(ast.unparse(b).startswith("typing.Generic[") for b in node.bases)


def _stub_all() -> Dict[str, ast.AST]:
    return {node.name: node for node in _stub().body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}


def _stub_top() -> Dict[str, ast.AST]:
    return {name: node for name, node in _stub_all().items() if not _is_generic_base(node)}


def _class_items(node: ast.ClassDef) -> List[ast.stmt]:
    """The body of a stub class with that of its generic base (``X_float32(_X[numpy.float32])``)."""
    items = list(node.body)
    everything = _stub_all()
    for base in node.bases:
        name = ast.unparse(base).split("[")[0]
        if name in everything and _is_generic_base(everything[name]):
            items += everything[name].body  # type: ignore[attr-defined]
    return items


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


def _runtime_signature(name: str, fn: object) -> Optional[Signature]:
    """The signature pybind11 writes as the first line of the docstring, or None (overloads)."""
    doc = inspect.getdoc(fn) or ""
    first = doc.splitlines()[0] if doc else ""
    if "Overloaded function" in doc or not first.startswith(name + "("):
        return None
    inner = first[len(name) + 1 : first.rindex(") ->")]
    return [(arg.split(":")[0].split("=")[0].strip(), "=" in arg) for arg in split_top_level(inner)]


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


def test_the_committed_stub_is_the_generated_one():
    """The stub is written by tools/gen_stubs.py from the built module: a binding changed without
    regenerating it fails here."""
    generated = gen_stubs.generate(core)
    committed = STUB.read_text(encoding="utf-8")
    if generated != committed:
        import difflib

        diff = "".join(
            list(
                difflib.unified_diff(committed.splitlines(True), generated.splitlines(True), "committed", "generated")
            )[:60]
        )
        pytest.fail(f"_core.pyi is stale: rebuild the extension, then run `{gen_stubs.COMMAND}`\n{diff}")


def test_the_check_sees_a_stale_stub(tmp_path, capsys):
    stale = tmp_path / "_core.pyi"
    stale.write_text(STUB.read_text(encoding="utf-8").replace("def forward(", "def forwards(", 1), encoding="utf-8")
    assert gen_stubs.main(["--check", "--output", str(stale)]) == 1
    assert gen_stubs.COMMAND in capsys.readouterr().err
    stale.write_text(gen_stubs.generate(core), encoding="utf-8")
    assert gen_stubs.main(["--check", "--output", str(stale)]) == 0


def test_pairs_share_one_generic_stub():
    """A class bound for float32 and float64 with the same signatures has one stub, ``_X[_F]``, and
    its two classes derive from it with their scalar type."""
    everything = _stub_all()
    pairs = [
        n[: -len("_float32")] for n in _runtime_top() if n.endswith("_float32") and isinstance(getattr(core, n), type)
    ]
    assert "Linear" in pairs and "Transformer" in pairs
    for base in pairs:
        if f"_{base}" not in everything:
            continue  # the two differ: each has its own stub
        for dt in ("float32", "float64"):
            node = everything[f"{base}_{dt}"]
            assert [ast.unparse(b) for b in node.bases] == [f"_{base}[numpy.{dt}]"], base
            assert [ast.unparse(item) for item in node.body] == ["..."], base
    shared = [b for b in pairs if f"_{b}" in everything]
    assert len(shared) >= len(pairs) - 2, f"only {shared} of {pairs} share a stub"
    linear = ast.unparse(everything["_Linear"])
    assert "numpy.typing.NDArray[_F]" in linear and "float32" not in linear


def test_the_generator_refuses_what_it_cannot_write():
    with pytest.raises(gen_stubs.StubError, match="shape"):
        gen_stubs.parse_signature("shape", "shape(self: object) -> detail::accessor<str_attr>\n", method=True)
    with pytest.raises(gen_stubs.StubError, match="no pybind11 signature"):
        gen_stubs.parse_signature("f", "A function without its signature.", method=False)
    sig = gen_stubs.parse_signature(
        "f", "f(self: transformer_cpp._core.X, a: object, b: float = inf, c: str = 'x') -> tuple\n\nDoc.\n", True
    )
    assert sig.has_self and sig.doc == "Doc." and sig.returns == "tuple[typing.Any, ...]"
    assert [(p.name, p.default) for p in sig.params] == [("a", None), ("b", "inf"), ("c", "'x'")]


def test_module_names_match():
    stub, runtime = _stub_top(), _runtime_top()
    missing = sorted(set(runtime) - set(stub))
    extra = sorted(set(stub) - set(runtime))
    assert not missing and not extra, (
        f"_core.pyi lacks {missing} and names {extra}, which the compiled "
        f"module does not have: run `{gen_stubs.COMMAND}`"
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
    annotated = {item.target.id for item in _class_items(node) if isinstance(item, ast.AnnAssign)}
    assert unset == annotated, f"{name}: None in the class {sorted(unset)}, annotated in the stub {sorted(annotated)}"
    members = {n: v for n, v in members.items() if v is not None}
    defs: Dict[str, List[ast.FunctionDef]] = {}
    for item in _class_items(node):
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
    assert split_top_level("a: dict[str, int] = {'x': 1, 'y': 2}, b: str = 'p,q'") == [
        "a: dict[str, int] = {'x': 1, 'y': 2}",
        " b: str = 'p,q'",
    ]
