"""Modules stay small enough to read in one sitting: no module of the package holds more than
MAX_MODULE_LINES lines (the generated ``_core.pyi`` stub aside). A module that grows past it is
split by what its parts do, as ``task/prepare.py`` was out of ``task/translation.py``."""

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "transformer_cpp"
MAX_MODULE_LINES = 600


def module_lines(package: pathlib.Path) -> dict:
    """Lines of each ``.py`` file below ``package``, by its path relative to the package."""
    return {
        str(path.relative_to(package)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(package.rglob("*.py"))
    }


def test_no_module_is_longer_than_the_limit():
    sizes = module_lines(PACKAGE)
    assert len(sizes) > 50, f"found only {len(sizes)} modules below {PACKAGE}"
    long = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by what their parts do): {long}"


def test_the_count_sees_a_long_module(tmp_path):
    """The check counts lines as a reader does and sees a file in a subpackage."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    (tmp_path / "short.py").write_text("x = 1\n", encoding="utf-8")
    (tmp_path / "stub.pyi").write_text("x: int\n" * 5000, encoding="utf-8")
    assert module_lines(tmp_path) == {"short.py": 1, "sub/long.py": MAX_MODULE_LINES + 1}
