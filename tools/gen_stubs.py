"""Write ``python/transformer_cpp/_core.pyi``, the type stubs of the compiled extension, from the
extension itself.

    python tools/gen_stubs.py            # rewrite the stub from the built module
    python tools/gen_stubs.py --check    # exit 1 when the committed stub differs

Everything comes from what pybind11 puts in the module: each function's signature (the first line
of its ``__doc__``: argument names, types as the bindings declare them, defaults, return type) and
the rest of its docstring, each class's docstring, methods, static methods and properties (read-only
or settable), and exceptions with their bases. A class bound for both scalar types
(``Linear_float32`` and ``Linear_float64``) gets one generic stub, ``_Linear[_F]``, that both
derive from, when the two agree once ``numpy.float32`` / ``numpy.float64`` are read as ``_F``;
otherwise each is written on its own. ``tests/test_stubs.py`` regenerates the stub in memory and
fails when the committed file differs.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import sys
import types
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from transformer_cpp import _signatures
from transformer_cpp._signatures import BoundSignature, Param

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "python" / "transformer_cpp" / "_core.pyi"
MODULE = "transformer_cpp._core"
DTYPES = ("float32", "float64")
COMMAND = "python tools/gen_stubs.py"

HEADER = f"""\
# Type stubs of the compiled extension for editors and type checkers, generated from the bindings
# by tools/gen_stubs.py (signatures, types and docstrings as pybind11 reports them): do not edit.
# After changing a binding, rebuild and run `{COMMAND}`; tests/test_stubs.py fails while
# this file and the compiled module differ.
"""

# what pybind11 puts in every class, not part of the binding
_INTERNALS = {"__doc__", "__module__", "__dict__", "__weakref__", "_pybind11_conduit_v1_"}
# Python's generic builtins as pybind11 names them without their parameters (a py::tuple, py::dict,
# py::list result): written with Any parameters, which is what they are
_BARE_GENERICS = {
    "tuple": "tuple[typing.Any, ...]",
    "list": "list[typing.Any]",
    "dict": "dict[typing.Any, typing.Any]",
    "set": "set[typing.Any]",
}
_MODULES = ("collections.abc", "collections", "numpy.typing", "numpy", "os", "pathlib", "typing")


class StubError(RuntimeError):
    """The module holds something this generator does not know how to write."""


def _clean_type(text: str) -> str:
    text = text.strip().replace(MODULE + ".", "")
    for bare, full in _BARE_GENERICS.items():
        text = re.sub(rf"(?<![\w.]){bare}(?![\w\[.])", full, text)
    try:
        ast.parse(text, mode="eval")
    except SyntaxError:
        # a C++ type pybind11 could not name: give the binding a Python type (a py::typing:: type)
        raise StubError(f"the type {text!r} is not a Python expression") from None
    return text


def _default(text: str) -> str:
    """A default as written in the stub: the literal when it is one, else ``...``."""
    return text if _signatures.literal(text) is not ... else "..."


def parse_signature(name: str, doc: Optional[str], method: bool) -> BoundSignature:
    """The bound function's signature with its types written for the stub."""
    try:
        sig = _signatures.parse(name, doc, method)
    except ValueError as exc:
        raise StubError(str(exc)) from None
    params = []
    for p in sig.params:
        star = p.name.startswith("*")
        try:
            annotation = "typing.Any" if star else _clean_type(p.annotation) if p.annotation else ""
        except StubError as exc:
            raise StubError(f"{name}: {exc}") from None
        params.append(Param(p.name, annotation, p.default))
    try:
        returns = _clean_type(sig.returns)
    except StubError as exc:
        raise StubError(f"{name}: {exc}") from None
    return BoundSignature(params, returns, sig.doc, sig.has_self)


def _docstring(doc: str, indent: str) -> List[str]:
    if not doc:
        return []
    body = doc.replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    lines = [indent + '"""'] + [(indent + line).rstrip() for line in body.splitlines()] + [indent + '"""']
    return lines


def _def(name: str, sig: BoundSignature, indent: str, decorators: Sequence[str] = ()) -> List[str]:
    args = ["self"] if sig.has_self else []
    for p in sig.params:
        text = f"{p.name}: {p.annotation}" if p.annotation else p.name
        if p.default is not None:
            text += f" = {_default(p.default)}"
        args.append(text)
    head = [f"{indent}@{d}" for d in decorators]
    doc = _docstring(sig.doc, indent + "    ")
    line = f"{indent}def {name}({', '.join(args)}) -> {sig.returns}:"
    return head + ([line] + doc if doc else [line + " ..."])


def _property(cls_name: str, name: str, prop: property, indent: str) -> List[str]:
    getter = parse_signature("", prop.fget.__doc__ if prop.fget else None, True)
    sig = BoundSignature([], getter.returns, (prop.__doc__ or "").strip(), True)
    lines = _def(name, sig, indent, ["property"])
    if prop.fset is not None:
        setter = parse_signature("", prop.fset.__doc__, True)
        if len(setter.params) != 1:
            raise StubError(f"{cls_name}.{name}: a setter of {len(setter.params)} arguments")
        value = BoundSignature([Param("value", setter.params[0].annotation, None)], "None", "", True)
        lines += _def(name, value, indent, [f"{name}.setter"])
    return lines


def _members(cls: type) -> List[Tuple[str, object]]:
    out = []
    for name, value in vars(cls).items():
        if name in _INTERNALS or isinstance(value, types.WrapperDescriptorType):
            continue  # a class without constructor gets a C slot __init__ that raises
        out.append((name, value))
    return out


def class_body(cls: type, indent: str = "    ") -> List[str]:
    """The stub lines of a class's members (docstring first)."""
    lines = _docstring((cls.__doc__ or "").strip(), indent)
    for name, value in _members(cls):
        if value is None:  # __hash__ = None: a class with __eq__ cannot be hashed
            lines.append(f"{indent}{name}: typing.ClassVar[None]  # type: ignore[assignment]")
        elif isinstance(value, property):
            lines += _property(cls.__name__, name, value, indent)
        elif isinstance(value, staticmethod):
            sig = parse_signature(name, value.__func__.__doc__, method=False)
            lines += _def(name, sig, indent, ["staticmethod"])
        elif callable(value):
            lines += _def(name, parse_signature(name, value.__doc__, method=True), indent)
        else:
            raise StubError(f"{cls.__name__}.{name}: a {type(value).__name__}, not a method or property")
    return lines


def _function(name: str, fn: object) -> List[str]:
    return _def(name, parse_signature(name, getattr(fn, "__doc__", None), method=False), "")


def _pairs(names: Sequence[str], module: types.ModuleType) -> List[str]:
    """Base names bound as classes for both scalar types."""
    bases = []
    for name in names:
        base, _, dt = name.rpartition("_")
        if (
            dt == DTYPES[0]
            and isinstance(getattr(module, name), type)
            and isinstance(getattr(module, f"{base}_{DTYPES[1]}", None), type)
        ):
            bases.append(base)
    return bases


def _generic_lines(lines: List[str], dt: str, paired: Sequence[str]) -> List[str]:
    """Lines of one scalar type's class with its scalar and paired classes written generically."""
    out = []
    for line in lines:
        line = re.sub(rf"\bnumpy\.{dt}\b", "_F", line)
        for base in paired:
            line = re.sub(rf"\b{base}_{dt}\b", f"_{base}[_F]", line)
        out.append(line)
    return out


def _exception(name: str, cls: type) -> List[str]:
    bases = ", ".join(
        b.__name__ if b.__module__ == "builtins" else f"{b.__module__}.{b.__name__}" for b in cls.__bases__
    )
    return [f"class {name}({bases}): ..."]


def generate(module: Optional[types.ModuleType] = None) -> str:
    """The text of the stub for the compiled module."""
    module = module or importlib.import_module(MODULE)
    names = sorted(n for n in dir(module) if not (n.startswith("__") and n.endswith("__")))
    paired = _pairs(names, module)
    blocks: List[List[str]] = []
    generic: Dict[str, bool] = {}
    for base in paired:  # one generic base where the two agree
        bodies = [_generic_lines(class_body(getattr(module, f"{base}_{dt}")), dt, paired) for dt in DTYPES]
        generic[base] = bodies[0] == bodies[1]
        if generic[base]:
            blocks.append([f"class _{base}(typing.Generic[_F]):"] + (bodies[0] or ["    ..."]))
    for name in names:
        obj = getattr(module, name)
        base, _, dt = name.rpartition("_")
        if isinstance(obj, type) and issubclass(obj, BaseException):
            blocks.append(_exception(name, obj))
        elif isinstance(obj, type) and dt in DTYPES and generic.get(base):
            blocks.append([f"class {name}(_{base}[numpy.{dt}]): ..."])
        elif isinstance(obj, type):
            body = class_body(obj)
            blocks.append([f"class {name}:"] + (body or ["    ..."]))
        elif isinstance(obj, types.BuiltinFunctionType) or callable(obj):
            blocks.append(_function(name, obj))
        elif not isinstance(obj, types.ModuleType):
            raise StubError(f"{name}: a {type(obj).__name__}, not a class or function")
    text = "\n\n".join("\n".join(block) for block in blocks)
    imports = sorted({m for m in _MODULES if re.search(rf"(?<![\w.]){re.escape(m)}\.", text)} | {"typing"})
    head = [
        '"""' + (module.__doc__ or "").strip() + '"""',
        "",
        HEADER.rstrip(),
        "from __future__ import annotations",
        "",
        *[f"import {m}" for m in imports],
        "",
        '_F = typing.TypeVar("_F", numpy.float32, numpy.float64)',
        "",
    ]
    return "\n".join(head) + "\n" + text + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="tools/gen_stubs.py")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed stub is stale")
    parser.add_argument("--output", type=Path, default=STUB, help="where to write (default: the package's)")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.is_file() else ""
        if current != text:
            print(f"{args.output} is stale: run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
