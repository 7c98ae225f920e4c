"""The option types of every command (``transformer-cpp train``, ``translate``, ``evaluate``,
``serve``, ``bench``): argparse types checked by the one validator, :class:`~transformer_cpp._checks.Limit`.

Each type turns an option's text into the value its setting allows, with the message the Python
API gives for the same value (``"<owner>: <name> must be <what is allowed>, got <value>"``), so an
option is refused when the command line is read, before any work. Settings of a class
(``TrainConfig``, ``Translator``) are checked with that class's limits; counts that belong to no
class get their range here. Each range is part of the option's help.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Dict, Optional, Sequence, Tuple

from ._checks import EMPTY_PATH, Limit
from .config import option_fields
from .data import DataRecord, check_encoding, check_fractions, choose_columns
from .text import language_code
from .training import TrainConfig
from .translate import COMPUTE_TYPES, DecodeOptions, Translator

__all__ = [
    "MAX_COUNT",
    "MAX_LENGTH_RANGE",
    "VOCAB_RANGE",
    "add_compute_type_option",
    "add_decoding_options",
    "checked",
    "columns_option",
    "config_options",
    "count_option",
    "encoding_option",
    "fraction_option",
    "language_option",
    "limits_of",
    "non_negative_number",
    "or_value",
    "parse_number",
    "path_option",
    "seconds_option",
    "setting",
    "threads_option",
]

MAX_COUNT = 2**63 - 1
#: The ranges of train's --vocab-size and --max-length (0 = automatic): the data record's.
VOCAB_RANGE = (int(DataRecord.LIMITS["vocab_size"].low), int(DataRecord.LIMITS["vocab_size"].high))
MAX_LENGTH_RANGE = (int(DataRecord.LIMITS["max_length_option"].low), int(DataRecord.LIMITS["max_length_option"].high))


def parse_number(text: str, integer: bool) -> Any:
    try:
        return int(text) if integer else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if integer else 'a number'}, got {text!r}") from None


def checked(limit: Any, owner: str, name: str, *, zero: str = "") -> Any:
    """An argparse type: the option's text as the value ``limit`` allows (a number, or a name),
    checked by the one validator (:class:`~transformer_cpp._checks.Limit`), so the message is the one
    the Python API gives for the same value: ``"<owner>: <name> must be <what is allowed>, got
    <value>"``. With ``zero``, 0 is accepted too and means ``zero``."""

    def convert(text: str) -> Any:
        value = text if limit.kind == "choice" else parse_number(text, limit.integer)
        if zero and value == 0:
            return 0
        try:
            return limit.check(owner, name, value)
        except (TypeError, ValueError) as exc:
            if zero:  # the same format, with 0 among what is allowed
                raise argparse.ArgumentTypeError(
                    f"{name} must be 0 ({zero}) or {limit.describe()}, got {value!r}"
                ) from None
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def setting(owner: str, name: str, *, minimum: Optional[int] = None) -> Any:
    """An argparse type for setting ``name`` of ``owner`` ("TrainConfig" or "Translator"), checked
    with that class's limit; ``minimum``: a higher lower bound for the command line."""
    limit = limits_of(owner)[name]
    convert = checked(limit, owner, name)
    if minimum is None:
        return convert
    stricter = Limit(True, minimum, limit.high)

    def convert_at_least(text: str) -> Any:
        value = convert(text)  # the class's message for a value it refuses ...
        if value < minimum:  # ... and the command line's, with its bound, for one it takes
            raise argparse.ArgumentTypeError(stricter.message(owner, name, value))
        return value

    return convert_at_least


def limits_of(owner: str) -> Dict[str, Any]:
    """The limits of the settings of ``owner``: "TrainConfig" or "Translator"."""
    return dict((TrainConfig if owner == "TrainConfig" else Translator).LIMITS)


def count_option(name: str, low: int, high: int = MAX_COUNT, *, zero: str = "") -> Any:
    """An argparse type for a count that belongs to no class's settings: an integer in [low, high]
    (by default at most 2**63 - 1: counts and seeds that Python holds but that must never overflow
    elsewhere)."""
    return checked(Limit(True, low, high), "", name, zero=zero)


def config_options(
    group: Any, fields: Sequence[Any], owner: str, extra: Optional[Dict[str, Tuple[str, str]]] = None
) -> None:
    """An option for every field of a configuration table that has one (``--`` + its option name):
    flags as --name / --no-name, the others checked by the field's limit, its range in the help.
    Messages name the value as ``owner`` does: the Transformer by the field's name, TrainConfig by
    the option's (``adam_eps``). ``extra``: {field: (value, what it means)}, one more choice the
    command resolves itself (``--precision auto``)."""
    for f in option_fields(fields):
        flag, text = "--" + f.option.replace("_", "-"), f.help.replace("%", "%%")
        if f.limit.kind == "flag":
            group.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=text)
            continue
        name = f.option if owner == "TrainConfig" else f.name
        convert, described = checked(f.limit, owner, name), f.limit.describe()
        choices = list(f.limit.choices) if f.limit.kind == "choice" else []
        if extra and f.name in extra:
            convert, described = or_value(convert, extra[f.name][0], name, described)
            choices.append(extra[f.name][0])
            text += " " + extra[f.name][1].replace("%", "%%")
        group.add_argument(
            flag,
            type=convert,
            default=None,
            metavar="{" + ",".join(choices) + "}" if choices else None,
            help=f"{text} ({described})",
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


def fraction_option(name: str) -> Any:
    def convert(text: str) -> float:
        value = parse_number(text, False)
        try:
            return check_fractions(value, 0.0)[0] if name == "valid_fraction" else check_fractions(0.0, value)[1]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def encoding_option(text: str) -> str:
    try:
        return check_encoding(text, "--encoding")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def language_option(text: str) -> str:
    """A language code or English name (``es``, ``fra``, ``japanese``), as its code."""
    try:
        return language_code(text, "language")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[1]) from None


def columns_option(text: str) -> str:
    """``--columns``: two column numbers, source then target (``2,1``), or the languages of a
    file's columns in order (``en,es``); its form is checked here, its fit to the languages when
    the data is read."""
    try:
        numbers = [x.strip() for x in text.split(",")]
        if all(x.isdigit() for x in numbers):
            choose_columns(text, "en", "es", caller="--columns")
            return ",".join(numbers)
        langs = [language_code(x, "--columns") for x in numbers]
        if len(langs) < 2 or len(set(langs)) != len(langs):
            raise ValueError("--columns: name the language of each column once, in order, such as en,es")
        return ",".join(langs)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def path_option(text: str) -> str:
    """An argparse type for a file or directory option: any path but an empty one, which would
    mean the current directory (an unset shell variable: ``--out "$RUN"``). The Python API refuses
    it with the same words (``_checks.path``)."""
    if not text:
        raise argparse.ArgumentTypeError(EMPTY_PATH)
    return text


def threads_option() -> Any:
    """The --threads option's type: TrainConfig's limit (the core's)."""
    return setting("TrainConfig", "threads")


def add_decoding_options(p: Any) -> None:
    """The decoding options of ``translate``, ``evaluate`` and ``serve``: beam size, length
    penalty, batch size, threads and compute type."""
    p.add_argument(
        "--beam-size",
        type=setting("Translator", "beam_size"),
        default=1,
        help="1 = greedy decoding (default), more = beam search ("
        + limits_of("Translator")["beam_size"].describe()
        + ")",
    )
    p.add_argument(
        "--length-penalty",
        type=setting("Translator", "length_penalty"),
        default=DecodeOptions.length_penalty,
        help=f"beam search length-penalty exponent (default {DecodeOptions.length_penalty}; "
        + limits_of("Translator")["length_penalty"].describe()
        + ")",
    )
    p.add_argument(
        "--batch-size",
        type=setting("Translator", "batch_size"),
        default=64,
        help="sentences decoded together (default 64)",
    )
    p.add_argument(
        "--threads",
        type=threads_option(),
        default=None,
        help=f"C++ threads (default: all cores; {limits_of('TrainConfig')['threads'].describe()})",
    )
    add_compute_type_option(p)


def add_compute_type_option(p: Any) -> None:
    """``--compute-type``: the precision of the decoder's matrix products."""
    p.add_argument(
        "--compute-type",
        choices=COMPUTE_TYPES,
        default="float32",
        help="precision of the decoder's matrix products: float32 (default), int8 (int8 weights and "
        "activations, AVX512_VNNI) or bf16 (AVX512_BF16); the model file is not changed",
    )


def non_negative_number(text: str) -> float:
    """An argparse type for a finite number >= 0 (seconds to wait, for instance)."""
    value = parse_number(text, False)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return float(value)
