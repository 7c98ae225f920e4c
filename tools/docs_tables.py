"""Write the tables of ``docs/training.md`` from the code, so that the page reads the same in the
repository and on the site:

    python tools/docs_tables.py            # rewrite the tables in docs/training.md
    python tools/docs_tables.py --check    # exit 1 when a table differs from what the code gives

- The **presets** table is made from ``transformer_cpp.PRESETS`` and the recipes
  (``transformer_cpp.task.preset_recipe``).
- The **options** table of ``transformer-cpp train`` gives each option's Python argument. It is
  made from the command line itself: every option is given on its own to
  ``transformer_cpp.cli.train.request_from_args`` and the request compared with the one without it,
  so the table cannot drift from the code. An option that reaches no Python argument and is not
  described in ``_OUTSIDE_REQUEST`` below is an error. A deprecated spelling of an option (hidden
  from ``--help``) is named in the row of the option that replaces it.

Each table sits between a pair of comment lines (``<!-- presets -->`` ... ``<!-- /presets -->``);
``tests/repo/test_docs.py`` fails while the page's tables differ from what this script writes.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "training.md"
COMMAND = "python tools/docs_tables.py"

# Options that set no field of the request: where they go in Python.
_OUTSIDE_REQUEST = {
    "out": "the run directory: `task.new_trainer(request, out, report)`",
    "resume": "`task.resume_trainer(request, out, report)` instead of `new_trainer`",
    "mpi_timeout": "`distributed.from_environment(timeout=...)`",
    "config": "the options of a YAML file (the command line's own; a run's `config.yaml`)",
}


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
                raise RuntimeError(
                    f"tools/docs_tables.py: train option {action.option_strings} reaches no Python argument"
                )
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


#: Each table's name (its comment lines) and what makes it.
TABLES: Dict[str, Callable[[], str]] = {"presets": presets_table, "train-options": train_options_table}


def _span(name: str) -> "re.Pattern[str]":
    return re.compile(
        rf"(<!-- {re.escape(name)}: made by tools/docs_tables.py, do not edit -->\n)(.*?)(<!-- /{re.escape(name)} -->)",
        re.S,
    )


def fill(page: str) -> str:
    """``page`` with every table replaced by what the code gives now."""
    for name, make in TABLES.items():
        span = _span(name)
        if not span.search(page):
            raise ValueError(f"docs/training.md has no {name} table between its comment lines")
        table = make()
        page = span.sub(lambda m: m.group(1) + table + "\n" + m.group(3), page)
    return page


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="Write the tables of docs/training.md from the code.")
    parser.add_argument("--check", action="store_true", help="exit 1 when a table differs, writing nothing")
    parser.add_argument("--page", type=Path, default=PAGE, help="the page (default docs/training.md)")
    args = parser.parse_args(argv)
    current = args.page.read_text(encoding="utf-8")
    wanted = fill(current)
    if args.check:
        if wanted != current:
            print(f"{args.page.name}: the tables are stale; run `{COMMAND}`", file=sys.stderr)
            return 1
        return 0
    if wanted != current:
        args.page.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
