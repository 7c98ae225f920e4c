"""The model's and the optimiser's configuration: defined once, in the C++ core, and derived here.

Each configuration is a C++ struct with a table of its fields (``ConfigTable``, beside its struct
in ``cpp/src/models/``): name, what it allows (a :class:`~transformer_cpp._checks.Limit`),
default, a line of help and its option, the name of the training setting and of the command-line
option that set it (``None``: a field the program sets, such as the vocabulary sizes). The core
binds the structs as :class:`TransformerConfig` and :class:`OptimizerConfig`, whose constructors
check every field with one message format (``"Transformer: d_model must be an integer in [1,
16384], got 0"``). From :data:`MODEL_FIELDS` and :data:`OPTIMIZER_FIELDS` come:

- the keyword arguments, signature and docstring of :class:`~transformer_cpp.Transformer` and of
  :meth:`~transformer_cpp.Transformer.configure_optimizer`, and their ``config`` dicts (which
  checkpoints store as JSON);
- :class:`~transformer_cpp.TrainConfig`'s optimiser settings (``warmup``, ``lr_scale``, ...,
  ``adam_eps``: the fields that have an option);
- the command line's architecture and optimisation options (``--d-model``, ``--n-layers``,
  ``--warmup``, ...: the model's field names and TrainConfig's setting names, with dashes), with
  the ranges in their help and the same checks.

Adding a field is one row (and one member) in the core plus its use.

The Python settings (:class:`~transformer_cpp.TrainConfig`, ``DecodeOptions``, ``DataRecord``,
``ServeConfig``, the server's and the benchmark's settings) are declared the same way: each
dataclass field once, with :func:`setting` -- its default, its limit (a
:class:`~transformer_cpp._checks.Limit`), a line of help and its command-line option (the
field's name with dashes unless ``option`` says otherwise: ``steps`` is ``--steps``)::

    @dataclass
    class Settings:
        steps: int = setting(10, limit=Limit(True, 1, 1000), help="timed steps")

:func:`settings_of` gives the declarations (:class:`Setting` records, which read like the core's
rows: ``name``, ``default``, ``limit``, ``help``, ``option``), :func:`check_settings` checks an
instance field by field (the ``__post_init__`` of such a class) and :func:`setting_limits` the
``LIMITS`` mapping of the fields that their limit alone checks. The command line turns the
declarations into options (:func:`transformer_cpp.cli.options.add_settings`).

The attention kinds are a table of the core too (``cpp/include/transformer/attention/kinds.hpp``):
:func:`attention_kinds` gives one read-only :class:`AttentionKind` record per kind (its name, a
summary, and what it supports: ``memory``, ``has_cached_step``, ``reversible``,
``cross_attention``, ...), which the package and the command line query rather than naming kinds.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _core
from ._checks import Limit

__all__ = [
    "AttentionKind",
    "LM_FIELDS",
    "MODEL_FIELDS",
    "OPTIMIZER_FIELDS",
    "ConfigField",
    "LanguageModelConfig",
    "OptimizerConfig",
    "Setting",
    "TransformerConfig",
    "check_setting",
    "check_settings",
    "choice_setting",
    "core_setting",
    "attention_help",
    "attention_kind",
    "attention_kinds",
    "defaults",
    "describe_fields",
    "describe_settings",
    "flag_setting",
    "keyword_parameters",
    "option_fields",
    "python_type",
    "setting",
    "setting_limits",
    "settings_of",
    "quoted_kinds",
]

TransformerConfig = _core.TransformerConfig
AttentionKind = _core.AttentionKind
attention_kind = _core.attention_kind
attention_kinds = _core.attention_kinds


def quoted_kinds(supports: Callable[[Any], bool]) -> str:
    """The names of the attention kinds for which ``supports(kind)`` holds, quoted for a message:
    ``"'softmax', 'linear' or 'lsh'"``."""
    names = [repr(k.name) for k in attention_kinds() if supports(k)]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def attention_help() -> str:
    """Each attention kind with its summary, for a help text: ``"'softmax' (exact ...); 'linear' (...)"``."""
    return "; ".join(f"{k.name!r} ({k.summary})" for k in attention_kinds())


OptimizerConfig = _core.OptimizerConfig
ConfigField = _core.ConfigField

#: The model's fields (``TransformerConfig``), in the table's order.
MODEL_FIELDS: Tuple[Any, ...] = tuple(TransformerConfig.fields())
#: The optimiser's fields (``OptimizerConfig``), in the table's order.
OPTIMIZER_FIELDS: Tuple[Any, ...] = tuple(OptimizerConfig.fields())
LanguageModelConfig = _core.LanguageModelConfig
#: The language model's fields (``LanguageModelConfig``), in the table's order.
LM_FIELDS: Tuple[Any, ...] = tuple(LanguageModelConfig.fields())

_TYPES = {"integer": int, "number": float, "flag": bool, "choice": str}


def python_type(field: Any) -> type:
    """The Python type of a field's values: ``int``, ``float``, ``bool`` or ``str``."""
    return _TYPES[field.limit.kind]


def defaults(fields: Sequence[Any]) -> Dict[str, Any]:
    """``{name: default}`` of the fields."""
    return {f.name: f.default for f in fields}


def option_fields(fields: Sequence[Any]) -> List[Any]:
    """The fields that the training settings and the command line set (those with an option)."""
    return [f for f in fields if f.option is not None]


def keyword_parameters(fields: Sequence[Any]) -> List[inspect.Parameter]:
    """The fields as keyword-only parameters with their defaults and types (for ``__signature__``)."""
    return [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=python_type(f).__name__)
        for f in fields
    ]


def describe_fields(fields: Sequence[Any], indent: str = "    ") -> str:
    """A docstring's argument list: ``name: help (allowed values; default ...)``, one per field."""
    lines = []
    for f in fields:
        default = f"default {f.default!r}" if _allowed(f, f.default) else "required"
        lines.append(f"{indent}{f.name}: {f.help} ({f.limit.describe()}; {default}).")
    return "\n".join(lines)


def _allowed(field: Any, value: Any) -> bool:
    try:
        field.limit.check("", field.name, value)
    except (TypeError, ValueError):
        return False
    return True


# ------------------------------------------------------------------------------ Python settings


@dataclasses.dataclass(frozen=True)
class Setting:
    """The declaration of one Python setting (a dataclass field made by :func:`setting`): what a
    core table row says of a field, and what its command-line option needs beyond that.

    Attributes:
        name: the field's name.
        default: its default; ``None`` as the default means that ``None`` is allowed too.
        limit: the values it allows, or ``None`` (free text, or what ``check`` allows).
        help: one line for ``--help`` and the class's docstring; ``{default}`` (with any format
            spec, ``{default:,}``) stands for the default.
        option: the option strings, ``()`` for a field the command line does not set (by
            default ``--name``, the field's name with dashes). A flag's ``--name`` sets True,
            ``--no-name`` False, both together make ``--name/--no-name``.
        zero: what 0 means when it is allowed besides the limit (``"automatic"``), else "".
        check: ``check(owner, name, value) -> value``, as ``Limit.check``: a check of its own,
            used instead of the limit's by the Python API (raising ``TypeError`` / ``ValueError``).
        option_check: ``option_check(value) -> value``: the command line's check of the option's
            value (its text, or the number it reads as when the limit is numeric), instead of the
            limit's (raising ``ValueError`` / ``TypeError`` with the message the option shows).
        option_limit: a narrower range for the option than for the setting (or ``None``).
        const: the value of the option given without one (``--json`` alone), else ``None``.
        metavar: the option's value's name in ``--help``.
        hidden: an option left out of ``--help`` (an internal one).
    """

    name: str
    default: Any
    limit: Optional[Any]
    help: str
    option: Tuple[str, ...] = ()
    zero: str = ""
    check: Optional[Callable[[str, str, Any], Any]] = None
    option_check: Optional[Callable[[Any], Any]] = None
    option_limit: Optional[Any] = None
    const: Any = None
    metavar: Optional[str] = None
    hidden: bool = False


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    limit: Optional[Any] = None,
    option: Union[str, Sequence[str], None] = None,
    default_factory: Any = dataclasses.MISSING,
    **more: Any,
) -> Any:
    """A dataclass field declared once: its default, limit, help and option (the other
    attributes of :class:`Setting` as keywords). Use it as a field's default::

        batch_size: int = setting(64, limit=Limit(True, 1, 10**6), help="pairs per step")

    ``option``: the option strings; ``None`` (the default) gives the field's name with dashes
    (``--batch-size``), ``()`` no option."""
    options = (option,) if isinstance(option, str) else tuple(option or ())
    shown = None if default is dataclasses.MISSING else default
    declared = Setting("", shown, limit, help, options, **more)
    metadata = {"setting": declared, "named_option": option is None}
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def choice_setting(default: Any, choices: Iterable[str], help: str, **more: Any) -> Any:
    """A setting whose value is one of the names ``choices`` (:func:`setting` with ``Limit.one_of``)."""
    return setting(default, limit=Limit.one_of(list(choices)), help=help, **more)


def flag_setting(help: str, default: bool = False, **more: Any) -> Any:
    """A True / False setting (:func:`setting` with ``Limit.flag()``), off unless ``default``
    says otherwise: its option ``--name`` turns it on."""
    return setting(default, limit=Limit.flag(), help=help, **more)


def core_setting(field: Any) -> Any:
    """A dataclass field declared by a row of the core's table (``ConfigField``): its default,
    limit and help; the field is named by the row's option name (``eps`` is ``adam_eps``), which
    names its option too."""
    return setting(field.default, limit=field.limit, help=field.help)


def _named(f: Any) -> Setting:
    """The setting of dataclass field ``f`` with its name, and its option where that is named by it."""
    declared: Setting = f.metadata["setting"]
    option = ("--" + f.name.replace("_", "-"),) if f.metadata["named_option"] else declared.option
    return dataclasses.replace(declared, name=f.name, option=option)


@functools.lru_cache(maxsize=None)
def _declared(cls: Any) -> Tuple[Setting, ...]:
    return tuple(_named(f) for f in dataclasses.fields(cls) if "setting" in f.metadata)


def settings_of(cls: Any) -> Dict[str, Setting]:
    """The settings a dataclass (or an instance of one) declares, by field name, in field order."""
    return {s.name: s for s in _declared(cls if isinstance(cls, type) else type(cls))}


def setting_limits(cls: Any) -> Dict[str, Any]:
    """``{name: limit}`` of the settings that their limit alone checks (a class's ``LIMITS``)."""
    return {s.name: s.limit for s in _declared(cls) if s.limit is not None and s.check is None and not s.zero}


def check_setting(owner: str, declared: Setting, value: Any) -> Any:
    """``value`` as setting ``declared`` allows it: ``None`` where the default is ``None``, 0
    where ``zero`` says what it means, else what its ``check`` or its limit returns (which raise
    ``TypeError`` / ``ValueError`` naming ``owner``, the setting and what it allows)."""
    if value is None and declared.default is None:
        return None
    if declared.zero and value == 0 and type(value) is int:
        return 0
    if declared.check is not None:
        return declared.check(owner, declared.name, value)
    if declared.limit is None:
        return value
    return declared.limit.check(owner, declared.name, value)


def check_settings(instance: Any, owner: str = "") -> None:
    """Check every declared setting of a dataclass instance and store it as allowed (its
    ``__post_init__``; frozen instances too). ``owner``: the name in messages (its class's)."""
    cls: Any = type(instance)
    owner = owner or cls.__name__
    for s in _declared(cls):
        object.__setattr__(instance, s.name, check_setting(owner, s, getattr(instance, s.name)))


def describe_settings(cls: type, indent: str = "    ") -> str:
    """A docstring's list of a dataclass's settings: ``name: help (allowed values; default ...)``."""
    lines = []
    for s in _declared(cls):
        text = s.help.format(default=s.default) if "{default" in s.help else s.help
        allowed = f"{s.limit.describe()}; " if s.limit is not None else ""
        lines.append(f"{indent}{s.name}: {text} ({allowed}default {s.default!r}).")
    return "\n".join(lines)
