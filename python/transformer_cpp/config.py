"""The model's and the optimiser's configuration: defined once, in the C++ core, and derived here.

Each configuration is a C++ struct with a table of its fields (``ConfigTable`` in
``cpp/src/models/transformer.cpp``): name, what it allows (a :class:`~transformer_cpp._checks.Limit`),
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

The attention kinds are a table of the core too (``cpp/include/transformer/attention/kinds.hpp``):
:func:`attention_kinds` gives one read-only :class:`AttentionKind` record per kind (its name, a
summary, and what it supports: ``memory``, ``has_cached_step``, ``reversible``,
``cross_attention``, ...), which the package and the command line query rather than naming kinds.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Dict, List, Sequence, Tuple

from . import _core

__all__ = [
    "AttentionKind",
    "LM_FIELDS",
    "MODEL_FIELDS",
    "OPTIMIZER_FIELDS",
    "ConfigField",
    "LanguageModelConfig",
    "OptimizerConfig",
    "TransformerConfig",
    "attention_help",
    "attention_kind",
    "attention_kinds",
    "defaults",
    "describe_fields",
    "keyword_parameters",
    "option_fields",
    "python_type",
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
