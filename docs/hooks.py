"""MkDocs hooks of the documentation site (``mkdocs.yml``: ``hooks``).

- ``ARCHITECTURE.md`` and ``CHANGELOG.md`` live at the repository root, where people browsing the
  source look for them; the site shows them as the pages ``architecture.md`` and ``changelog.md``.
- ``<!-- train-options -->`` in a page becomes the table of ``transformer-cpp train``'s options and
  the Python argument each one sets. The table is made from the command line itself: every option
  is given on its own to ``transformer_cpp.cli.train.request_from_args`` and the request compared
  with the one without it, so the table cannot drift from the code. An option that reaches no
  Python argument and is not described below fails the build.
"""

from __future__ import annotations

import argparse
import copy
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
ROOT_PAGES = {"architecture.md": "ARCHITECTURE.md", "changelog.md": "CHANGELOG.md"}
MARKER = "<!-- train-options -->"

# Options that set no field of the request: where they go in Python.
_OUTSIDE_REQUEST = {
    "out": "the run directory: `task.new_trainer(request, out, report)`",
    "resume": "`task.resume_trainer(request, out, report)` instead of `new_trainer`",
    "mpi_timeout": "`distributed.from_environment(timeout=...)`",
}


def on_files(files: Any, config: Any) -> Any:
    for page, source in ROOT_PAGES.items():
        text = (ROOT / source).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, train_options_table())
    return markdown


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

    parser = _train_parser()
    defaults = parser.parse_args([])
    base = _request_fields(request_from_args(defaults))
    rows: List[str] = ["| option | Python | what it sets |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        flag = action.nargs == 0
        probe: Any = True if flag else object()
        if isinstance(action, argparse.BooleanOptionalAction):
            probe = True
        elif isinstance(action, argparse._StoreConstAction):
            probe = action.const
        args = copy.copy(defaults)
        setattr(args, action.dest, probe)
        changed = _request_fields(request_from_args(args))
        targets = [
            _python_name(section, name, value, flag)
            for (section, name), value in changed.items()
            if (section, name) not in base or base[(section, name)] is not value and base[(section, name)] != value
        ]
        if not targets:
            if action.dest not in _OUTSIDE_REQUEST:
                raise RuntimeError(f"docs/hooks.py: train option {action.option_strings} reaches no Python argument")
            targets = [_OUTSIDE_REQUEST[action.dest]]
        options = ", ".join(f"`{o}`" for o in action.option_strings)
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
