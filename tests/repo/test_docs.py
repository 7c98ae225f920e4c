"""The documentation: the MkDocs site builds in strict mode, the Python API guide's example runs,
the README is the product page it says it is, CI runs README command 2 and nothing else, and no
page narrates how the project was made or names a build machine's paths."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------ site


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site built by ``mkdocs build --strict`` (a warning, such as a broken link, a page
    missing from the navigation or an API name that does not resolve, fails the build)."""
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return out


def _text(page: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", page)))


def test_the_site_builds_strict_with_every_page(site):
    config = _read(ROOT / "mkdocs.yml")
    pages = re.findall(r":\s*([\w/-]+)\.md\s*$", config, re.M)
    assert len(pages) >= 15
    for page in pages:
        built = site / ("index.html" if page == "index" else f"{page}/index.html")
        assert built.is_file(), f"{page}.md did not become {built}"
    # every page in docs/ is in the navigation (mkdocs only warns about the others as info)
    listed = {f"{p}.md" for p in pages}
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert on_disk <= listed, f"pages missing from mkdocs.yml's nav: {sorted(on_disk - listed)}"


def test_the_api_reference_comes_from_the_docstrings(site):
    layers = _read(site / "reference" / "layers" / "index.html")
    for name in ("MultiHeadAttention", "EncoderLayer", "masked_cross_entropy", "look_ahead_mask"):
        assert name in layers
    model = _text(_read(site / "reference" / "model" / "index.html"))
    # the model's signature and argument list are made from the core's table at import time
    assert "d_model=512" in model and "model width" in model
    assert "{args}" not in model
    assert "Adam" in _read(site / "reference" / "model" / "index.html")


def test_the_training_page_has_the_option_table_made_from_the_command_line(site):
    from transformer_cpp.cli import build_parser

    page = _text(_read(site / "training" / "index.html"))
    train = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction").choices["train"]
    options = [o for a in train._actions for o in a.option_strings if o.startswith("--") and o != "--help"]
    assert len(options) > 40
    missing = [o for o in options if o not in page]
    assert not missing, f"train options missing from the docs' table: {missing}"
    assert "TrainConfig(warmup=" in page and "Transformer(d_model=" in page
    assert "<!-- train-options -->" not in _read(site / "training" / "index.html")


def _docs_tables():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_tables
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return docs_tables


def test_the_training_tables_are_in_the_page_and_current(tmp_path):
    # the tables are Markdown in the repository (a code host shows them), written from the code
    docs_tables = _docs_tables()
    page = _read(DOCS / "training.md")
    assert docs_tables.fill(page) == page, f"docs/training.md's tables are stale: run `{docs_tables.COMMAND}`"
    for name, header in (("presets", "| preset | architecture"), ("train-options", "| option | Python |")):
        table = page.split(f"<!-- {name}: made by", 1)[1].split(f"<!-- /{name} -->", 1)[0]
        assert header in table and table.count("\n|") > 4, name
    assert "`--d-model`" in page and "`quick`" in page
    # a stale copy is found and rewritten
    stale = tmp_path / "training.md"
    stale.write_text(page.replace("| `--d-model`", "| `--d-mode`"), encoding="utf-8")
    assert docs_tables.main(["--check", "--page", str(stale)]) == 1
    assert docs_tables.main(["--page", str(stale)]) == 0 and _read(stale) == page


def test_docs_pages_link_only_files_of_the_repository():
    # a link must work on a code host too, not only on the built site
    for path in sorted(DOCS.rglob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", _read(path)):
            if "://" not in target and not target.startswith("mailto:"):
                assert (path.parent / target).exists(), f"{path.relative_to(ROOT)} links to a missing file: {target}"


def test_architecture_and_changelog_are_pages_of_the_site(site):
    assert "code map" in _read(site / "architecture" / "index.html")
    changelog = _read(site / "changelog" / "index.html")
    assert "Unreleased" in changelog and "0.1.0" in changelog


def test_architecture_is_a_map_with_the_import_order_and_the_two_traces():
    text = _read(ROOT / "ARCHITECTURE.md")
    # a map, not the detail: that is docs/internals.md, which it links
    assert len(text.encode("utf-8")) <= 15_000, len(text.encode("utf-8"))
    long = [n for n, line in enumerate(text.splitlines(), 1) if len(line) > 200]
    assert not long, f"ARCHITECTURE.md lines over 200 characters: {long}"
    assert "](docs/internals.md" in text and (DOCS / "internals.md").is_file()
    for heading in (
        "### Import order",
        "A training step, from the command line down",
        "A translation request, from the HTTP",
    ):
        assert heading in text, heading
    # the picture names every unit of the order the import test holds
    source = _read(next(ROOT.glob("tests/**/test_import_layers.py")))
    order = re.search(r"LAYER_ORDER = \[(.*?)\n\]", source, re.S)
    assert order, "LAYER_ORDER not found"
    units = [u for u in re.findall(r'"(\w+)"', order.group(1)) if not u.startswith("__")]
    picture = text.split("### Import order", 1)[1].split("```")[1]
    words = set(re.findall(r"[\w]+", picture))
    assert len(units) > 20 and not [u for u in units if u not in words], [u for u in units if u not in words]
    # the C++ folders in the order that no header includes upwards
    cpp = text.split("## The C++ core", 1)[1].split("\n## ", 1)[0]
    folders = ["core/", "kernels/", "layers/", "attention/", "models/", "inference/"]
    assert [cpp.index(f"  {f}") for f in folders] == sorted(cpp.index(f"  {f}") for f in folders)


# -------------------------------------------------------------------------------- the examples


def _python_blocks(path: Path):
    """The fenced python blocks of a page, each with the line before it."""
    return re.findall(r"(?:^|\n)([^\n]*)\n```python\n(.*?)```", _read(path), re.S)


def test_the_api_guide_example_builds_a_model_from_the_layers_and_trains_it():
    tested = [code for before, code in _python_blocks(DOCS / "python-api.md") if "tested" in before]
    assert len(tested) == 1
    code = tested[0]
    for uses in ("EncoderLayer", ".backward(", "Adam(", "adam.step"):
        assert uses in code
    namespace: dict = {"__name__": "docs_example"}
    exec(compile(code, "docs/python-api.md", "exec"), namespace)
    # predicting each token's left neighbour needs attention and the positional encoding: an
    # untrained model gets about 1 / 11 of them
    assert namespace["accuracy"] > 0.95


# ------------------------------------------------------------------------------- README and CI


def _readme_commands():
    readme = _read(ROOT / "README.md")
    block = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert block, "README.md has no bash block"
    lines = block.group(1).splitlines()
    commands = {}
    for i, line in enumerate(lines):
        m = re.match(r"# ([12])\. ", line)
        if m:
            commands[m.group(1)] = lines[i + 1].strip()
    return readme, block.start(), commands


def test_the_readme_begins_with_the_two_commands():
    readme, start, commands = _readme_commands()
    assert set(commands) == {"1", "2"}
    # the commands come first: before them only the title, one sentence, the picture and a heading
    assert start < 1500
    assert "transformer-cpp train" in commands["1"] and "transformer-cpp translate" in commands["1"]
    assert commands["2"].startswith("python3 -m venv .venv && . .venv/bin/activate && pip install ")
    assert "pytest" in commands["2"]


def test_ci_runs_readme_command_2_and_nothing_else():
    _, _, commands = _readme_commands()
    script = _read(ROOT / ".ci" / "run").splitlines()
    assert script[0].startswith("#!")
    body = [line.strip() for line in script[1:] if line.strip() and not line.strip().startswith("#")]
    allowed = {"set -euo pipefail", 'cd "$(dirname "$0")/.."'}
    steps = [line for line in body if line not in allowed]
    assert steps == [commands["2"]], f".ci/run must run exactly README command 2, runs: {steps}"


def test_the_readme_is_a_product_page():
    readme = _read(ROOT / "README.md")
    assert len(readme.splitlines()) <= 220
    for heading in ("## Install", "## Quickstart", "## Results", "## Speed", "## Serving", "## Export", "## License"):
        assert heading in readme
    # every local link and image exists
    for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to a missing file: {target}"
    # a measurement names its CPU and its date
    for table in ("## Results", "## Speed"):
        section = readme.split(table, 1)[1].split("\n## ", 1)[0]
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", section), f"{table}: no date"
        assert re.search(r"AMD EPYC|Intel Xeon", section), f"{table}: no CPU"


def test_license_citation_and_project_metadata():
    assert "MIT License" in _read(ROOT / "LICENSE") and "the transformer-cpp authors" in _read(ROOT / "LICENSE")
    cff = _read(ROOT / "CITATION.cff")
    assert cff.startswith("cff-version: 1.2.0") and "title:" in cff and "license: MIT" in cff
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python < 3.11
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads(_read(ROOT / "pyproject.toml"))["project"]
    assert "License :: OSI Approved :: MIT License" in project["classifiers"]
    assert {"docs", "test", "torch", "serve"} <= set(project["optional-dependencies"])
    assert any(d.startswith("mkdocs") for d in project["optional-dependencies"]["docs"])
    # the version is one number: the project's, the citation's and the changelog's latest release
    version = project["version"]
    assert re.search(rf"(?m)^version: {re.escape(version)}$", cff), "CITATION.cff has another version"
    released = re.findall(r"(?m)^## (\d+\.\d+\.\d+) — (20\d\d-\d\d-\d\d)$", _read(ROOT / "CHANGELOG.md"))
    assert released and released[0][0] == version, f"CHANGELOG.md's latest release is not {version}: {released[:1]}"
    assert re.search(rf'(?m)^date-released: "{released[0][1]}"$', cff), "CITATION.cff's date is not the release's"


def test_the_package_index_description_has_no_link_into_the_source_tree(monkeypatch):
    # An index shows the description without the repository: an image or a link to a file of
    # the tree would be broken there. The description is README.md through the substitutions of
    # pyproject.toml (hatch-fancy-pypi-readme, the provider scikit-build-core is told to use).
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python < 3.11
        tomllib = pytest.importorskip("tomli")
    from hatch_fancy_pypi_readme._builder import build_text
    from hatch_fancy_pypi_readme._config import load_and_validate_config
    from readme_renderer.markdown import render

    pyproject = tomllib.loads(_read(ROOT / "pyproject.toml"))
    assert "readme" in pyproject["project"]["dynamic"] and "readme" not in pyproject["project"]
    assert pyproject["tool"]["scikit-build"]["metadata"]["readme"]["provider"].endswith("fancy_pypi_readme")
    config = load_and_validate_config(pyproject["tool"]["hatch"]["metadata"]["hooks"]["fancy-pypi-readme"])
    readme = _read(ROOT / "README.md")
    # the README itself does link into the tree (on a repository host those links work) ...
    assert re.search(r"!\[[^\]]*\]\(docs/", readme) and re.search(r"\]\(docs/[^)]*\.md", readme)
    monkeypatch.chdir(ROOT)  # the fragments' paths are relative to the project
    text = build_text(config.fragments, config.substitutions, version="0", package_name="transformer-cpp")
    # ... the description keeps every line, the image's description and the web links
    assert len(text.splitlines()) == len(readme.splitlines())
    assert "*Cross-attention of a model trained for ten minutes" in text
    assert "](https://" in text
    # and renders, as the index renders it, with no image or link that is not a web address
    page = render(text, variant="GFM")
    assert page and "<h2" in page
    assert re.findall(r'(?:src|href)="(?!https?://|mailto:|#)[^"]*"', page) == []
    assert "<img" not in page


# ------------------------------------------------------------------------ the experiment plot


def test_the_experiment_plot_has_small_panels_of_one_cpu_and_one_scale(tmp_path):
    sys.path.insert(0, str(DOCS))
    try:
        import plot_experiments
    finally:
        sys.path.remove(str(DOCS))
    runs = json.loads(_read(DOCS / "experiments.json"))
    for name, run in runs.items():
        assert {"name", "cpu", "date", "threads", "panels", "validation_pairs", "epoch"} <= set(run), name
        assert re.fullmatch(r"20\d\d-\d\d-\d\d", run["date"]), name
        assert len(run["epoch"]["minutes"]) == len(run["epoch"]["val_bleu"]) > 0, name
    per_panel: dict = {}
    for run in runs.values():
        for p in run["panels"]:
            per_panel.setdefault(p, []).append(run)
    assert set(per_panel) == set(plot_experiments.PANELS)
    assert max(len(v) for v in per_panel.values()) <= 8  # a legend one can read
    out = tmp_path / "experiments.png"
    plot_experiments.draw(runs, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a panel that mixes CPUs is refused
    mixed = {k: dict(v) for k, v in runs.items()}
    first = next(iter(mixed.values()))
    first["cpu"] = "another CPU"
    with pytest.raises(ValueError, match="mixes"):
        plot_experiments.draw(mixed, tmp_path / "mixed.png")


# ------------------------------------------------------------------- the product, not its making

# Phrases that narrate the project's making or point at a build machine. "target" alone is
# legitimate (target language, target tokens, "target: column 2" in what train reports); the
# project's targets are not, nor a "Targets:" heading or label at the start of a line.
_HISTORY = [
    r"\bsessions? \d",
    r"\bissue\b",
    r"\bour run",
    r"\bthe (zen ?\d|xeon|epyc) machine",
    r"\bthis (project's )?(machine|session)\b",
    r"\bmain job\b",
    r"\bstage \d",
    r"project's targets?",
    r"issue's targets?",
    r"(?m)^[#*\s-]*targets?:",
    r"/work/",
    r"/tmp/",
    r"/root/",
    r"/home/\w",
    r"\.\./shared/DESIGN",
    r"DESIGN\.md",
    r"\bclean clone\b",
    r"\bat (commit )?[0-9a-f]{7,40}\b",
    r"\bcommit [0-9a-f]{7,40}\b",
]


def _product_texts():
    yield "README.md", _read(ROOT / "README.md")
    yield "ARCHITECTURE.md", _read(ROOT / "ARCHITECTURE.md")
    for page in sorted(DOCS.rglob("*.md")):
        yield str(page.relative_to(ROOT)), _read(page)
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(_read(nb))["cells"]
        for i, cell in enumerate(cells):
            texts = [] if cell["cell_type"] != "markdown" else ["".join(cell["source"])]
            for output in cell.get("outputs", []):
                texts.append("".join(output.get("text", "")))
                for value in output.get("data", {}).values():
                    if isinstance(value, (list, str)) and not str(value).startswith("iVBOR"):
                        texts.append("".join(value))
            yield f"{nb.relative_to(ROOT)} cell {i}", "\n".join(texts)


def test_no_page_narrates_the_projects_making():
    found = []
    for where, text in _product_texts():
        for pattern in _HISTORY:
            for m in re.finditer(pattern, text, re.I):
                found.append(f"{where}: {text[max(0, m.start() - 40) : m.end() + 40]!r}")
    # README command 1's own comment names the job it does; that line is the command itself
    found = [f for f in found if "# 1. the main job: install, train" not in f and "the main job: install" not in f]
    assert not found, "\n".join(found[:30])


# A machine's own paths: what a tool or CI script takes from the machine comes from an argument,
# an environment variable or a path relative to the repository.
_MACHINE_PATHS = [r"/work/", r"(?<![\w}])/tmp/", r"/root/", r"/home/\w", r"\.\./shared/"]


def test_no_tool_or_ci_script_names_a_machine_path():
    found = []
    for path in sorted([*(ROOT / "tools").rglob("*"), *(ROOT / ".ci").rglob("*")]):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        for n, line in enumerate(_read(path).splitlines(), 1):
            if any(re.search(p, line) for p in _MACHINE_PATHS):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
    for sample in ('default="/work/shared/data/spa.txt"', "-o /tmp/bench", "../shared/data/spa.txt", "/home/me/x"):
        assert any(re.search(p, sample) for p in _MACHINE_PATHS), sample
    assert not any(re.search(p, 'mktemp "${TMPDIR:-/tmp}/emulated.XXXXXX"') for p in _MACHINE_PATHS)


def test_the_history_check_finds_what_it_looks_for():
    samples = [
        "as measured in session 11",
        "the Zen 5 machine",
        "see issue 30",
        "built at 43193f1",
        "scratch files in /work/clean7/runs",
        "the project's target",
        "our run took 10 minutes",
        "## Targets: 45 BLEU",
        "intro\n**Targets:** 45 BLEU",
    ]
    for sample in samples:
        assert any(re.search(p, sample, re.I) for p in _HISTORY), sample
    for fine in (
        "21,300 target tokens/s",
        "the target language",
        "CPU issues one instruction every 2 cycles",
        "source: column 1, English (en); target: column 2, Spanish (es)",
    ):
        assert not any(re.search(p, fine, re.I) for p in _HISTORY), fine


def test_the_readme_names_every_command_notebook_and_extra():
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python < 3.11
        tomllib = pytest.importorskip("tomli")
    from transformer_cpp.cli import build_parser

    readme = _read(ROOT / "README.md")
    commands = build_parser()._subparsers._group_actions[0].choices
    missing = [c for c in commands if f"`{c}`" not in readme and f"transformer-cpp {c}" not in readme]
    assert not missing, f"commands of transformer-cpp --help missing from README.md: {missing}"
    notebooks = [nb.name for nb in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    assert len(notebooks) >= 4 and not [n for n in notebooks if n not in readme]
    extras = tomllib.loads(_read(ROOT / "pyproject.toml"))["project"]["optional-dependencies"]
    table = readme.split("| extra | adds |", 1)[1].split("\n\n", 1)[0]
    assert not [e for e in extras if f"| `{e}` |" not in table], "extras missing from README.md's table"
    first_screen = readme.split("## Highlights", 1)[0]
    assert ".ci/" not in first_screen and "WebEngine" not in first_screen and "CI" not in first_screen
