"""The search fields of the server's JSON API: a target prefix, lexical constraints and sampling.

:func:`parse_search` checks them when a request arrives (422 naming the field and what it
allows, as for the other fields), :func:`encode_search` encodes the prefix and constraint texts
with the model's target tokenizer as :meth:`Translator.translate_batch
<transformer_cpp.translate.Translator.translate_batch>` does. A request with any of them is
decoded by itself (:attr:`SearchFields.separate`): sampling draws each row's tokens from a stream
of its row number, so the request's sentences are decoded in the chunks ``translate_batch``
makes, and the server's answer is the offline translation with the same options.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..text import is_blank
from ..translate import DecodeOptions, Translator
from ..translate.batch import encode_target_text
from .config import ServeConfig, ServeError

__all__ = ["SAMPLING_FIELDS", "SEPARATE_CHUNK", "SearchFields", "encode_search", "parse_search"]

#: The sampling fields of a request, as :class:`~transformer_cpp.translate.DecodeOptions` names them.
SAMPLING_FIELDS = ("sampling_topk", "sampling_topp", "sampling_temperature", "seed")
#: Sentences per decode call of a request decoded by itself: ``translate_batch``'s ``batch_size``.
SEPARATE_CHUNK = 64

_DEFAULTS = DecodeOptions()


@dataclass(frozen=True)
class SearchFields:
    """The search fields of one request: per text, the prefix and the constraints (``None``: not
    given), and the sampling settings given (DecodeOptions fields)."""

    target_prefix: Optional[List[str]] = None
    constraints: Optional[List[List[str]]] = None
    sampling: Dict[str, Any] = field(default_factory=dict)

    @property
    def separate(self) -> bool:
        """Whether the request is decoded by itself, not in the batcher's shared batches."""
        return (
            self.target_prefix is not None or self.constraints is not None or self.sampling.get("sampling_topk", 1) > 1
        )


def _texts(value: Any, count: int, name: str) -> List[Any]:
    """``value`` for each of ``count`` texts: one for all, or a list of one per text."""
    per_text = isinstance(value, list) and (name == "target_prefix" or any(isinstance(v, list) for v in value))
    if not per_text:
        return [value] * count
    if len(value) != count:
        one = "one string" if name == "target_prefix" else "one list of strings"
        raise ServeError(
            422, f"{name} has {len(value)} entries for {count} texts; give {one} for all texts, or one per text"
        )
    return list(value)


def _check_text(text: str, where: str, config: ServeConfig) -> None:
    if len(text) > config.max_chars:
        raise ServeError(
            422, f"{where} has {len(text):,} characters; at most {config.max_chars:,} are accepted (max_chars)"
        )
    if is_blank(text):
        raise ServeError(422, f"{where} is empty; give text the translation should hold")


def _sampling(body: Dict[str, Any], beam_size: int) -> Dict[str, Any]:
    given = {name: body[name] for name in SAMPLING_FIELDS if body.get(name) is not None}
    for name, value in given.items():
        try:
            DecodeOptions.LIMITS[name].check("request", name, value)
        except (TypeError, ValueError) as exc:
            raise ServeError(422, str(exc).replace("request: ", "", 1)) from None
    topk = given.get("sampling_topk", 1)
    if topk > 1 and beam_size > 1:
        raise ServeError(
            422,
            f"sampling_topk {topk} needs beam_size 1 (sampling replaces greedy decoding's choice), "
            f"got beam_size {beam_size}",
        )
    if topk == 1:
        idle = [n for n in SAMPLING_FIELDS[1:] if n in given and given[n] != getattr(_DEFAULTS, n)]
        if idle:
            raise ServeError(
                422,
                f"{', '.join(idle)} {'applies' if len(idle) == 1 else 'apply'} only when sampling: give "
                "sampling_topk above 1 (1, the default, takes the most likely token)",
            )
    return given


def parse_search(body: Dict[str, Any], count: int, beam_size: int, config: ServeConfig) -> SearchFields:
    """The search fields of a request body whose types :func:`~transformer_cpp.serve.parse_request`
    checked, for its ``count`` texts and ``beam_size``; :class:`ServeError` 422 naming the field."""
    prefixes = None
    if body.get("target_prefix") is not None:
        prefixes = _texts(body["target_prefix"], count, "target_prefix")
        listed = isinstance(body["target_prefix"], list)
        for i, text in enumerate(prefixes):
            _check_text(text, f"target_prefix[{i}]" if listed else "target_prefix", config)
    constraints = None
    if body.get("constraints") is not None and body["constraints"] != []:
        constraints = [list(cs) for cs in _texts(body["constraints"], count, "constraints")]
        per_text = len(constraints) == count and any(isinstance(v, list) for v in body["constraints"])
        for i, cs in enumerate(constraints):
            for j, text in enumerate(cs):
                _check_text(text, f"constraints[{i}][{j}]" if per_text else f"constraints[{j}]", config)
        most = max(len(cs) for cs in constraints)
        if most >= beam_size:
            raise ServeError(
                422,
                f"constraints: {most} constraints need beam_size of at least {most + 1} (one more than the "
                f"constraints), got beam_size {beam_size}",
            )
        if most == 0:
            constraints = None
    return SearchFields(prefixes, constraints, _sampling(body, beam_size))


def encode_search(
    translator: Translator, search: SearchFields, limits: Sequence[int], where: Callable[[int], str]
) -> Tuple[Optional[List[List[int]]], Optional[List[List[List[int]]]]]:
    """The target ids of each text's prefix and constraints (``None``: not given), as
    ``translate_batch`` encodes them; :class:`ServeError` 422 for a text that encodes to no token
    or a prefix longer than its text's output limit (``limits``)."""
    prefixes = constraints = None
    try:
        if search.target_prefix is not None:
            prefixes = [encode_target_text(translator, p, "target_prefix") for p in search.target_prefix]
        if search.constraints is not None:
            constraints = [[encode_target_text(translator, c, "constraint") for c in cs] for cs in search.constraints]
    except (TypeError, ValueError) as exc:
        raise ServeError(422, str(exc)) from None
    for i, (ids, limit) in enumerate(zip(prefixes or [], limits)):
        if len(ids) > limit:
            raise ServeError(
                422,
                f"the target_prefix of {where(i)} has {len(ids)} tokens, more than its output limit of {limit} "
                "(the server's --max-output-tokens, else 1.5 x its source tokens + 10): give a shorter prefix",
            )
    return prefixes, constraints
