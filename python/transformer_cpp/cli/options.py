"""The options of every command, generated from the settings' declarations, and the option
types the commands share; all checked by the one validator, :class:`~transformer_cpp._checks.Limit`.

:func:`add_settings` turns a dataclass whose fields are declared with
:func:`transformer_cpp.config.setting` into argparse options: for each field that has an option,
its option strings, its type (the text read as the limit's kind, then checked by the limit, the
setting's own ``option_check`` or its ``option_limit``), its default (or ``None`` with ``unset``:
the command fills in what is left out, as ``train`` does from its preset), its help with the
allowed values, and the field's name as the destination. A flag's option ``--name`` sets True,
``--no-name`` False, and both make ``--name/--no-name``. :func:`config_options` does the same for
the core's configuration tables (``--d-model``, ``--warmup``, ...). A command adds the options of
a class, or of some of its fields, in one call::

    add_settings(parser.add_argument_group("optimisation"), TrainConfig, only=["batch_size", "seed"], unset=True)
    train_config = TrainConfig(**given(args, TrainConfig))  # the options given, by field

Each type turns an option's text into the value its setting allows, with the message the Python
API gives for the same value (``"<owner>: <name> must be <what is allowed>, got <value>"``), so an
option is refused when the command line is read, before any work.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Collection, Dict, List, Optional, Sequence, Tuple, Union

from .._checks import EMPTY_PATH, Limit
from ..config import Setting, option_fields, settings_of

__all__ = [
    "DeprecatedAlias",
    "MAX_COUNT",
    "add_model_option",
    "add_option",
    "add_settings",
    "as_type",
    "config_options",
    "count_option",
    "deprecated_alias",
    "given",
    "option_name",
    "or_value",
    "parse_number",
    "path_option",
    "seconds_option",
    "setting_type",
]

MAX_COUNT = 2**63 - 1


def parse_number(text: str, integer: bool) -> Any:
    try:
        return int(text) if integer else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if integer else 'a number'}, got {text!r}") from None


def as_type(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """An argparse type from a check that raises ``ValueError`` / ``TypeError``: the same message."""

    def convert(value: Any) -> Any:
        try:
            return check(value)
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _option_type(s: Setting, owner: str, name: str) -> Callable[[str], Any]:
    """The argparse type of setting ``s``: the text read as its limit's kind (a number, or a name),
    checked by its ``option_check``, else by its limit (the message the Python API gives for the
    same value) and its ``option_limit``. 0 is taken as such where ``s.zero`` says what it means."""
    limit = s.limit
    integer = limit is not None and limit.kind == "integer"
    numeric = integer or (limit is not None and limit.kind == "number")
    check = as_type(s.option_check) if s.option_check is not None else None

    def convert(text: str) -> Any:
        value = parse_number(text, integer) if numeric else text
        if s.zero and value == 0:
            return 0
        if check is not None:
            return check(value)
        if limit is None:
            return value
        try:
            value = limit.check(owner, name, value)
            return value if s.option_limit is None else s.option_limit.check(owner, name, value)
        except (TypeError, ValueError) as exc:
            if s.zero:  # the same format, with 0 among what is allowed
                raise argparse.ArgumentTypeError(
                    f"{name} must be 0 ({s.zero}) or {limit.describe()}, got {value!r}"
                ) from None
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def option_name(s: Setting) -> str:
    """The name the command line gives setting ``s`` in its messages: its option's, with
    underscores (``--max-length`` sets DataRecord's ``max_length_option``: ``max_length``)."""
    return s.option[0][2:].replace("-", "_") if s.option else s.name


def add_option(group: Any, s: Setting, owner: str, default: Any, extra: Optional[Tuple[str, str]] = None) -> None:
    """The option of setting ``s`` (see the module docstring); ``extra``: (value, what it means),
    one more value the command resolves itself (``--precision auto``)."""
    text = s.help.format(default=s.default) if "{default" in s.help else s.help
    text = text.replace("%", "%%")
    if s.limit is not None and s.limit.kind == "flag":
        if len(s.option) == 2:  # --name/--no-name
            group.add_argument(
                s.option[0], action=argparse.BooleanOptionalAction, dest=s.name, default=default, help=text
            )
        else:
            sets = not s.option[0].startswith("--no-" + s.name.replace("_", "-"))
            group.add_argument(s.option[0], action="store_const", const=sets, dest=s.name, default=default, help=text)
        return
    name = option_name(s)
    convert = _option_type(s, owner, name)
    shown = s.option_limit or s.limit
    described = shown.describe() if shown is not None else ""
    choices = list(s.limit.choices) if s.limit is not None and s.limit.kind == "choice" else []
    if extra:
        convert, described = or_value(convert, extra[0], name, described)
        choices.append(extra[0])
        text = text.rstrip(".") + ". " + extra[1].replace("%", "%%")  # a sentence of its own
    how: Dict[str, Any] = {"nargs": "?", "const": s.const} if s.const is not None else {}
    group.add_argument(
        *s.option,
        dest=s.name,
        type=convert,
        default=default,
        metavar=s.metavar or ("{" + ",".join(choices) + "}" if choices else None),
        help=argparse.SUPPRESS if s.hidden else f"{text} ({described})" if described else text,
        **how,
    )


def add_settings(
    group: Any,
    cls: Any,
    *,
    only: Optional[Sequence[str]] = None,
    owner: Optional[str] = None,
    unset: Union[bool, Collection[str]] = False,
    extra: Optional[Dict[str, Tuple[str, str]]] = None,
) -> List[str]:
    """An option for every setting of dataclass ``cls`` that declares one (those of ``only``, in
    that order), on a parser or argument group; returns their fields' names.

    ``owner``: the name messages give (default the class's; "" for none). ``unset``: True, or the
    names of the settings whose option defaults to ``None`` (left out: the command resolves it)
    instead of to the declared default. ``extra``: {field: (value, what it means)}, one more value
    an option takes (see :func:`config_options`)."""
    declared = settings_of(cls)
    names = list(only) if only is not None else [n for n, s in declared.items() if s.option]
    owner = cls.__name__ if owner is None else owner
    for n in names:
        left_out = unset is True or (not isinstance(unset, bool) and n in unset)
        add_option(group, declared[n], owner, None if left_out else declared[n].default, (extra or {}).get(n))
    return names


def setting_type(s: Setting, owner: str) -> Callable[[str], Any]:
    """The argparse type of setting ``s`` on its own, for a command that declares the option itself
    (its own help or default): the text read and checked as :func:`add_settings` reads it."""
    return _option_type(s, owner, option_name(s))


def given(args: argparse.Namespace, names: Any) -> Dict[str, Any]:
    """The options of parsed ``args`` that were given (not None), by setting: ``names`` are field
    names, or a dataclass whose declared settings they are."""
    names = [n for n, s in settings_of(names).items() if s.option] if isinstance(names, type) else names
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def count_option(name: str, low: int, high: int = MAX_COUNT) -> Any:
    """An argparse type for a count that belongs to no class's settings: an integer in [low, high]
    (by default at most 2**63 - 1: counts and seeds that Python holds but that must never overflow
    elsewhere)."""
    return _option_type(Setting(name, None, Limit(True, low, high), ""), "", name)


def config_options(
    group: Any, fields: Sequence[Any], owner: str, extra: Optional[Dict[str, Tuple[str, str]]] = None
) -> None:
    """An option for every field of a core configuration table that has one, named as ``owner``
    names the setting, with dashes: the Transformer by the field's name (``n_layers``: ``--n-layers``),
    TrainConfig by the field's option name (``eps`` is TrainConfig's ``adam_eps``: ``--adam-eps``);
    messages name the value the same way. Flags as --name / --no-name, the others checked by the
    field's limit, its range in the help; every option defaults to ``None`` (the preset's value).
    ``extra``: {field: (value, what it means)}, one more choice the command resolves itself
    (``--precision auto``)."""
    for f in option_fields(fields):
        name = f.option if owner == "TrainConfig" else f.name
        flag = "--" + name.replace("_", "-")
        options = (flag, "--no-" + name.replace("_", "-")) if f.limit.kind == "flag" else (flag,)
        s = Setting(name, f.default, f.limit, f.help, options)
        add_option(group, s, owner, None, (extra or {}).get(f.name))


class DeprecatedAlias(argparse.Action):
    """An old spelling of an option, still accepted so that commands written with it keep working:
    it sets what its replacement sets (the value it is given, or ``const`` for a flag) and prints one
    line to standard error naming the replacement. It is left out of ``--help``."""

    def __init__(self, option_strings: Sequence[str], dest: str, replacement: str = "", **kwargs: Any) -> None:
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.replacement = replacement

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Optional[str] = None) -> None:
        print(
            f"{parser.prog}: warning: {option_string} is deprecated and will be removed; use {self.replacement}",
            file=sys.stderr,
            flush=True,
        )
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def deprecated_alias(parser: Any, old: str, replacement: str, *, value: Any = None) -> None:
    """Accept option ``old`` as a deprecated spelling of ``replacement``, an option ``parser`` (or
    one of its groups) already has: the same destination and type. A flag's alias sets ``value``
    (``--fixed-threads`` sets ``adaptive_threads`` to False, as ``--no-adaptive-threads`` does)."""
    target = parser._option_string_actions[replacement]
    if target.nargs == 0:
        if value is None:
            raise ValueError(f"deprecated_alias: {replacement} is a flag; give the value {old} sets")
        how: Dict[str, Any] = {"nargs": 0, "const": value}
    else:
        how = {"type": target.type, "metavar": target.metavar}
    parser.add_argument(
        old, action=DeprecatedAlias, dest=target.dest, replacement=replacement, default=argparse.SUPPRESS, **how
    )


def or_value(convert: Any, value: str, name: str, described: str) -> Tuple[Any, str]:
    """An argparse type that accepts ``value`` as well as what ``convert`` accepts."""

    def accept(text: str) -> Any:
        if text == value:
            return value
        try:
            return convert(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"{name} must be {value!r} or {described}, got {text!r}") from None

    return accept, f"{value!r} or {described}"


def seconds_option(text: str) -> float:
    value = parse_number(text, False)
    if not (isinstance(value, (int, float)) and 0 < value < 1e9):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return float(value)


def path_option(text: str) -> str:
    """An argparse type for a file or directory option: any path but an empty one, which would
    mean the current directory (an unset shell variable: ``--out "$RUN"``). The Python API refuses
    it with the same words (``_checks.path``)."""
    if not text:
        raise argparse.ArgumentTypeError(EMPTY_PATH)
    return text


def add_model_option(
    p: Any,
    what: str = "run directory (its best checkpoint by validation BLEU, its latest if it "
    "has none) or checkpoint directory",
) -> None:
    """The required ``--model`` option of the commands that read a trained model."""
    p.add_argument("--model", type=path_option, required=True, help=what)
