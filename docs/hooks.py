"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``).

- ``ARCHITECTURE.md`` and ``CHANGELOG.md`` live at the repository root, where people browsing the
  source look for them; the site shows them as the pages ``architecture.md`` and ``changelog.md``.
  Their links into ``docs/`` are written from the root (``docs/internals.md``), so on the site,
  where they sit beside the other pages, ``docs/`` is taken off.
- The API reference imports the package (``force_inspection``: the model's signature and docstring
  are made from the core's tables when the class is created). Importing a ``__main__`` module runs
  its command, so each one is replaced by an empty module before the reference is read.
- ``<!-- train-options -->`` in a page becomes the table of ``transformer-cpp train``'s options and
  the Python argument each one sets. The table is made from the command line itself: every option
  is given on its own to ``transformer_cpp.cli.train.request_from_args`` and the request compared
  with the one without it, so the table cannot drift from the code. An option that reaches no
  Python argument and is not described below fails the build. A deprecated spelling of an option
  (hidden from ``--help``) is named in the row of the option that replaces it.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import types
from pathlib import Path
from typing import Any, Dict, List, Tuple

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
ROOT_PAGES = {"architecture.md": "ARCHITECTURE.md", "changelog.md": "CHANGELOG.md"}
MARKER = "<!-- train-options -->"
PRESETS_MARKER = "<!-- presets -->"

# Options that set no field of the request: where they go in Python.
_OUTSIDE_REQUEST = {
    "out": "the run directory: `task.new_trainer(request, out, report)`",
    "resume": "`task.resume_trainer(request, out, report)` instead of `new_trainer`",
    "mpi_timeout": "`distributed.from_environment(timeout=...)`",
}


def on_config(config: Any) -> Any:
    package = ROOT / "python" / "transformer_cpp"
    for main in package.rglob("__main__.py"):
        name = ".".join(main.relative_to(package.parent).with_suffix("").parts)
        sys.modules.setdefault(name, types.ModuleType(name, "a command (python -m), not documented here"))
    return config


def on_files(files: Any, config: Any) -> Any:
    for page, source in ROOT_PAGES.items():
        text = (ROOT / source).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri in ROOT_PAGES:
        markdown = re.sub(r"\]\(docs/", "](", markdown)
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, train_options_table())
    if PRESETS_MARKER in markdown:
        markdown = markdown.replace(PRESETS_MARKER, presets_table())
    return markdown


def _settings(values: Dict[str, Any]) -> str:
    return ", ".join(
        f"`{k}` {v!r}" if isinstance(v, str) else f"`{k}` {v:g}" if isinstance(v, float) else f"`{k}` {v}"
        for k, v in values.items()
    )


def presets_table() -> str:
    """The presets as the package defines them (``PRESETS``, ``RECIPES``)."""
    from transformer_cpp.task import PRESETS, preset_recipe

    rows = ["| preset | architecture (`Transformer`) | data | training (`TrainConfig`) |", "|---|---|---|---|"]
    for name in PRESETS:
        recipe = preset_recipe(name)
        arch = _settings({**PRESETS[name], **recipe.get("model", {})})
        grow = recipe.get("grow")
        if grow:
            arch += f"; model size auto: {_settings(grow['arch'])} from {grow['min_epochs']:g} epochs in the budget"
        rows.append(f"| `{name}` | {arch} | {_settings(recipe['data'])} | {_settings(recipe['train'])} |")
    return "\n".join(rows)


def _train_parser() -> argparse.ArgumentParser:
    from transformer_cpp.cli import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["train"]
    raise RuntimeError("transformer-cpp has no train command")


def _request_fields(request: Any) -> Dict[Tuple[str, str], Any]:
    fields: Dict[Tuple[str, str], Any] = {}
    for name, value in vars(request).items():
        if isinstance(value, dict):
            for key, inner in value.items():
                fields[(name, key)] = inner
        else:
            fields[("", name)] = value
    return fields


_WHERE = {
    "architecture": "`Transformer({}=…)`",
    "training": "`TrainConfig({}=…)`",
    "data": "`DataRecord({}=…)`",
}


def _python_name(section: str, name: str, value: Any, flag: bool) -> str:
    if section:
        text = _WHERE[section].format(name)
        return text.replace("…", repr(value)) if flag else text
    return f"`TrainRequest({name}={value!r})`" if flag else f"`TrainRequest({name}=…)`"


def train_options_table() -> str:
    from transformer_cpp.cli.train import request_from_args
    from transformer_cpp.cli.options import DeprecatedAlias

    parser = _train_parser()
    defaults = parser.parse_args([])
    base = _request_fields(request_from_args(defaults))
    rows: List[str] = ["| option | Python | what it sets |", "|---|---|---|"]
    old_spellings: Dict[str, List[str]] = {}
    for action in parser._actions:
        if isinstance(action, DeprecatedAlias):
            replaced = parser._option_string_actions[action.replacement]
            old_spellings.setdefault(replaced.dest, []).extend(action.option_strings)

    def targets_of(action: Any, probe: Any, flag: bool) -> List[str]:
        args = copy.copy(defaults)
        setattr(args, action.dest, probe)
        changed = _request_fields(request_from_args(args))
        return [
            _python_name(section, name, value, flag)
            for (section, name), value in changed.items()
            if (section, name) not in base or base[(section, name)] is not value and base[(section, name)] != value
        ]

    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, DeprecatedAlias)):
            continue
        # a flag that sets one value shows it; --x / --no-x sets either
        flag = action.nargs == 0 and not isinstance(action, argparse.BooleanOptionalAction)
        probe: Any = True if action.nargs == 0 else object()
        if isinstance(action, argparse.BooleanOptionalAction):
            probe = True
        elif isinstance(action, argparse._StoreConstAction):
            probe = action.const
        targets = targets_of(action, probe, flag)
        if not targets and isinstance(action, argparse.BooleanOptionalAction):
            targets = targets_of(action, False, flag)  # a flag that is on by default: its --no- form
        if not targets:
            if action.dest not in _OUTSIDE_REQUEST:
                raise RuntimeError(f"docs/hooks.py: train option {action.option_strings} reaches no Python argument")
            targets = [_OUTSIDE_REQUEST[action.dest]]
        options = ", ".join(f"`{o}`" for o in action.option_strings)
        if action.dest in old_spellings:
            options += " (deprecated: " + ", ".join(f"`{o}`" for o in old_spellings[action.dest]) + ")"
        text = " ".join((action.help or "").replace("%%", "%").replace("|", "\\|").split())
        rows.append(f"| {options} | {'; '.join(targets)} | {_summary(text)} |")
    return "\n".join(rows)


def _summary(text: str) -> str:
    """The help text up to its first "; " outside parentheses, without the parenthesised limits
    and defaults at its end."""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and text.startswith("; ", i):
            text = text[:i]
            break
    while re.search(r"\s\([^()]*\)$", text):
        text = re.sub(r"\s\([^()]*\)$", "", text)
    return text
