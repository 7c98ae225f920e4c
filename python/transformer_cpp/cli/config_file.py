"""``--config FILE`` of ``train`` and ``train-lm``: a command's options read from a YAML file, and
the ``config.yaml`` a run writes of the options it ran with.

The file is a mapping of option names to values, the names as on the command line without their
dashes, with ``_`` or ``-`` between words (``d_model: 256`` or ``d-model: 256``; ``decay: true``,
``no_decay: true``; ``no_progress: true``); ``null`` leaves an option to its default. Each value is
checked as the option's text is (the same limits and messages), and its YAML type must fit: a
flag takes ``true`` or ``false``, any other option one number or text. An option given on the
command line overrides the file's value, wherever ``--config`` stands among the options. A
mistake (an unknown key, a value of the wrong type or out of range, a file that is not YAML) is
one line naming the file, the key and what is allowed.

A run of ``train`` or ``train-lm`` writes ``config.yaml`` into its directory: every option as the
run resolved it (the preset's values too, the data file's absolute path, the precision chosen),
so that ``--config RUN/config.yaml --out NEW`` trains the same run again. A resume rewrites it
with the values it continues with. PyYAML reads and writes it (``safe_load`` / ``safe_dump``:
plain values only, nothing in the file is ever run).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml

from ..config import MODEL_FIELDS, option_fields, settings_of
from ..data import DataRecord
from ..task import DEFAULT_PRESET
from ..training import TrainConfig
from ..training.run_dir import CONFIG_FILE
from .options import DeprecatedAlias

__all__ = [
    "CONFIG_FILE",
    "ConfigError",
    "ConfigFile",
    "add_config_option",
    "config_values",
    "read_config",
    "saved_value",
    "settle_exclusive",
    "write_config",
]

#: The options a configuration file never holds (what a run writes leaves them out too).
NOT_IN_FILES = ("config", "resume", "help")


class ConfigError(ValueError):
    """A configuration file that cannot be used: its message is one line."""


def _key(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


def _options(parser: argparse.ArgumentParser) -> Dict[str, argparse.Action]:
    """The options a file may set, by key (``d_model``; a flag's ``--no-`` form too)."""
    found: Dict[str, argparse.Action] = {}
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, ConfigFile, DeprecatedAlias)) or action.dest in NOT_IN_FILES:
            continue
        for option in action.option_strings:
            if option.startswith("--"):
                found[_key(option)] = action
    return found


def _described(action: argparse.Action) -> str:
    """What an option allows, as its help ends: ``(an integer in [1, 16384])``, or ""."""
    text = " ".join((action.help or "").split())
    if text.endswith(")") and "(" in text:
        depth, i = 0, len(text) - 1
        for i in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[i], 0)
            if depth == 0:
                break
        return text[i + 1 : -1].replace("%%", "%")
    if action.choices:
        return "one of " + ", ".join(map(str, action.choices))
    return ""


def _shown(value: Any) -> str:
    """``value`` as the file spells it (``true``, ``[1, 2]``, ``'text'``)."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return repr(value)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _value(action: argparse.Action, key: str, value: Any, where: str) -> Tuple[bool, Any]:
    """(whether the file sets the option, the value it sets) for ``key: value``."""
    if action.nargs == 0:  # a flag
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {key} is a flag: it takes true or false, got {_shown(value)} ({_kind(value)})")
        if isinstance(action, argparse.BooleanOptionalAction):
            return True, value != key.startswith("no_")
        if isinstance(action.const, bool):  # --joint-vocab, --no-progress: false is the other value
            return True, action.const if value else not action.const
        return (True, action.const) if value else (False, None)  # false: the option is not given
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        allowed = _described(action)
        raise ConfigError(
            f"{where}: {key} takes one value{f' ({allowed})' if allowed else ''}, got {_shown(value)} ({_kind(value)})"
        )
    text = value if isinstance(value, str) else repr(value)
    converted: Any = text
    if action.type is not None:
        try:
            converted = action.type(text)  # type: ignore[operator]
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {key}: {exc}") from None
    if action.choices is not None and converted not in action.choices:
        raise ConfigError(f"{where}: {key} must be one of {', '.join(map(str, action.choices))}, got {value!r}")
    return True, converted


def read_config(path: str, parser: argparse.ArgumentParser) -> List[Tuple[argparse.Action, Any]]:
    """The options that the YAML file ``path`` sets for ``parser``'s command, each as ``(its
    action, its value)``; ``ConfigError`` (one line) for a file that cannot be used."""
    where = f"--config '{path}'"
    try:
        with open(path, encoding="utf-8") as f:
            loaded = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: is not UTF-8 text ({exc.reason})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: is not valid YAML{line}: {problem}") from None
    if loaded is None:
        return []
    if not isinstance(loaded, dict):
        raise ConfigError(
            f"{where}: must be a mapping of option names to values (key: value lines), got {_kind(loaded)}"
        )
    options = _options(parser)
    chosen: List[Tuple[argparse.Action, Any]] = []
    seen: Dict[str, str] = {}
    for raw, value in loaded.items():
        key = _key(str(raw))
        action = options.get(key)
        if action is None:
            raise ConfigError(_unknown(where, str(raw), key, options, parser))
        if action.dest in seen:
            raise ConfigError(f"{where}: {seen[action.dest]} and {raw} set the same option; keep one")
        seen[action.dest] = str(raw)
        if value is None:
            continue
        given, converted = _value(action, key, value, where)
        if given:
            chosen.append((action, converted))
    return chosen


def _unknown(where: str, raw: str, key: str, options: Mapping[str, Any], parser: argparse.ArgumentParser) -> str:
    if key in NOT_IN_FILES:
        return f"{where}: {raw} is not an option a configuration file sets; give --{raw.replace('_', '-')} on the command line"
    for action in parser._actions:
        if isinstance(action, DeprecatedAlias) and f"--{key.replace('_', '-')}" in action.option_strings:
            return f"{where}: {raw} is an old spelling; write {_key(action.replacement)}"
    close = difflib.get_close_matches(key, list(options), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    prog = parser.prog.split()[-1]
    return f"{where}: unknown option {raw!r}{hint}; the keys are {prog}'s options: {', '.join(sorted(options))}"


class ConfigFile(argparse.Action):
    """``--config FILE``: the file's options, each unless the command line gives it (before or
    after ``--config``; a later one simply replaces the file's value)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Optional[str] = None) -> None:
        try:
            chosen = read_config(str(values), parser)
        except ConfigError as exc:
            parser.error(str(exc))
        from_file = set()
        for action, value in chosen:
            if getattr(namespace, action.dest, None) == action.default:  # not given before --config
                setattr(namespace, action.dest, value)
                from_file.add(action.dest)
        # options that exclude each other: the file's give way to one given on the command line
        for group in parser._mutually_exclusive_groups:
            dests = [a.dest for a in group._group_actions]
            if any(getattr(namespace, d, None) not in (None, False) and d not in from_file for d in dests):
                for d in dests:
                    if d in from_file:
                        setattr(namespace, d, None)
        setattr(namespace, "config_from_file", sorted(from_file))
        setattr(namespace, self.dest, values)


def add_config_option(parser: Any, command: str) -> None:
    """The ``--config FILE`` option of ``command`` (whose parser is remembered for what its runs write)."""
    register(parser, command)
    parser.add_argument(
        "--config",
        action=ConfigFile,
        default=None,
        metavar="FILE",
        help=f"read options from a YAML file of 'name: value' lines, the names of {command}'s options "
        "(d_model: 256, no_progress: true); options on the command line override it. A run writes "
        f"the options it ran with into --out as {CONFIG_FILE}: --config RUN/{CONFIG_FILE} --out NEW repeats it",
    )


def config_values(parser: argparse.ArgumentParser, resolved: Mapping[str, Any]) -> Dict[str, Any]:
    """What a run writes into ``config.yaml``: ``resolved`` (values by option destination) as the
    file's keys and values, in the order of ``--help``; options without a value (None) left out."""
    values: Dict[str, Any] = {}
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, ConfigFile, DeprecatedAlias)) or action.dest in NOT_IN_FILES:
            continue
        value = resolved.get(action.dest)
        if value is None or not action.option_strings:
            continue
        key = _key(action.option_strings[0])
        if isinstance(action, argparse.BooleanOptionalAction):
            values[key] = bool(value)
        elif action.nargs == 0:
            values[key] = value == action.const
        else:
            values[key] = value
    return values


def write_config(run: Path, command: str, values: Mapping[str, Any]) -> Path:
    """Write ``values`` (:func:`config_values`) as ``run/config.yaml`` (replacing it whole)."""
    path = Path(run) / CONFIG_FILE
    head = (
        f"# the options of 'transformer-cpp {command}' this run ran with, resolved (preset values included);\n"
        f"# 'transformer-cpp {command} --config {CONFIG_FILE} --out NEW' trains it again\n"
    )
    text = head + yaml.safe_dump(dict(values), sort_keys=False, allow_unicode=True, default_flow_style=False)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
    return path


def saved_value(run: Path, key: str) -> Any:
    """``key``'s value in the ``config.yaml`` a run wrote (None without the file, the key, or a
    readable file)."""
    try:
        loaded = yaml.safe_load((Path(run) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return loaded.get(key) if isinstance(loaded, dict) else None


def settle_exclusive(args: argparse.Namespace, dests: Sequence[str]) -> None:
    """Of options that exclude each other, keep the one the command line gave after ``--config``
    (argparse sees only the command line's): the file's others are left out."""
    from_file = set(getattr(args, "config_from_file", ()))
    given = [d for d in dests if getattr(args, d, None) is not None]
    if len(given) > 1 and any(d not in from_file for d in given):
        for d in given:
            if d in from_file:
                setattr(args, d, None)


# ------------------------------------------------------------------------------------ what runs write

_PARSERS: Dict[str, argparse.ArgumentParser] = {}


def register(parser: argparse.ArgumentParser, command: str) -> None:
    """Remember ``command``'s parser: what :func:`save_run_config` names its options by."""
    _PARSERS[command] = parser


def train_values(args: argparse.Namespace, trainer: Any, out: Path) -> Dict[str, Any]:
    """The options of a ``train`` run as it resolved them, by destination: the model's, the
    trainer's and the data record's settings, the preset, the data file, the run directory."""
    model = trainer.model.config
    values: Dict[str, Any] = {f.name: model.get(f.name) for f in option_fields(MODEL_FIELDS)}
    values.update({n: getattr(trainer.config, n) for n, s in settings_of(TrainConfig).items() if s.option})
    record = dict(trainer.data_info or {})
    values.update({n: record.get(n) for n, s in settings_of(DataRecord).items() if s.option})
    preset = args.preset or (saved_value(out, "preset") if args.resume else None)
    values["preset"] = preset or (None if args.resume else DEFAULT_PRESET)
    data = args.data
    if not (isinstance(data, str) and data.startswith("tatoeba:")) and record.get("path"):
        data = str(record["path"]) + (f",{record['target_path']}" if record.get("target_path") else "")
    values.update(data=data, out=str(out), mpi_timeout=args.mpi_timeout)
    return values


def lm_values(trainer: Any, out: Path) -> Dict[str, Any]:
    """The options of a ``train-lm`` run as it resolved them (its request), by destination."""
    request = trainer.task.request
    values = dataclasses.asdict(request)
    values["no_progress"] = not request.progress
    values["out"] = str(out)
    return values


def save_run_config(command: str, values: Mapping[str, Any], out: Path) -> Optional[Path]:
    """Write ``config.yaml`` of a run of ``command`` (see the module docstring) into ``out``."""
    parser = _PARSERS.get(command)
    if parser is None:
        return None
    return write_config(out, command, config_values(parser, values))
