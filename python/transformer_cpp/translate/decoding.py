"""The one decode path: pad a batch of token rows and decode it (greedy or beam, any compute type),
each sentence stopping at its own output limit inside the C++ search.

:func:`decode_rows` is what :class:`~transformer_cpp.translate.Translator` (and through it the
server's batcher) and the trainer's validation BLEU call, with one :class:`DecodeOptions` record
that holds the decoding settings and their one set of defaults. :func:`greedy_reference` is the
plain greedy loop every greedy decoder is checked against.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union, cast

import numpy as np

from .._checks import Limit, choice, integer
from ..config import check_settings, choice_setting, flag_setting, setting, setting_limits
from ..kernels import COMPUTE_TYPES, compute_type_unsupported_reason, have_compute_type
from ..model import DEFAULT_LENGTH_PENALTY

# the names transformer_cpp.translate exports; the rules of the settings (BEAM_RULES, DEFAULTABLE,
# EARLY_STOPPING, LENGTH_PENALTY_MODES, call_options, checked_defaults, resolved_rules) are the
# package's own, for the translator, the command line and the server
__all__ = [
    "COMPUTE_TYPES",
    "DecodeOptions",
    "Hypothesis",
    "check_compute_type",
    "decode_rows",
    "greedy_decode",
    "greedy_decode_reference",
    "greedy_reference",
    "one_line",
    "output_limit",
    "pad_rows",
]

_WHITESPACE = re.compile(r"\s+")
#: How beam search scores hypotheses (DecodeOptions.length_penalty_mode).
LENGTH_PENALTY_MODES = ("gnmt", "hf")
#: When a sentence's beam search stops under the "hf" mode, by generate's early_stopping:
#: False, True, "never".
EARLY_STOPPING = ("heuristic", "first", "never")


def check_compute_type(who: str, value: Any) -> str:
    """``value`` if it names a compute type this machine can run, else ``ValueError`` (``TypeError``
    for a non-str) naming what is allowed or what the CPU lacks."""
    name = choice(who, "compute_type", value, COMPUTE_TYPES)
    if not have_compute_type(name):
        raise ValueError(
            f"{who}: compute_type {name!r} is not available: "
            f"{compute_type_unsupported_reason(name)}; use compute_type 'float32'"
        )
    return name


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (line breaks included) as one space, stripped: what
    the training targets look like after cleaning, and one output line per translation."""
    return _WHITESPACE.sub(" ", text).strip()


def output_limit(source_tokens: int) -> int:
    """Most tokens to generate for a source of ``source_tokens`` tokens: ``1.5 * source + 10``."""
    source_tokens = integer("output_limit", "source_tokens", source_tokens, 0)
    return int(1.5 * source_tokens) + 10


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode a batch: the settings of every decoder in the package, with one default each.

    Checked when made (``TypeError`` for a value of the wrong type, ``ValueError`` out of range,
    naming the option and what it allows).
    """

    beam_size: int = setting(1, limit=Limit(True, 1, 1024), help="1 = greedy decoding (default), more = beam search")
    length_penalty: float = setting(
        DEFAULT_LENGTH_PENALTY,
        limit=Limit(False, 0, 10),
        help="beam search length-penalty exponent (default {default})",  # GNMT's: scores / ((5 + length) / 6) ** it
    )
    length_penalty_mode: str = choice_setting(
        "gnmt",
        LENGTH_PENALTY_MODES,
        "beam scores: gnmt (log-prob / ((5 + length) / 6) ** penalty, the default) or hf (Hugging Face "
        "generate's: log-prob / length ** penalty, its candidate and stopping rules)",
    )
    early_stopping: str = choice_setting(
        "heuristic",
        EARLY_STOPPING,
        "with --length-penalty-mode hf, when a sentence stops: heuristic (generate's early_stopping=False, "
        "the default), first (True) or never ('never')",
    )
    force_end: bool = flag_setting(
        "a hypothesis (of beam search, greedy decoding or sampling) that reaches the output limit ends with "
        "the end token (generate's forced_eos_token_id)",
        option=("--force-end", "--no-force-end"),
    )
    n_best: int = setting(
        1, limit=Limit(True, 1, 1024), help="hypotheses kept per sentence (at most beam_size)", option=()
    )
    max_output_tokens: Optional[int] = setting(
        None,
        limit=Limit(True, 1, 100_000),
        help="most tokens to generate per sentence (default: 1.5 x its source tokens + 10)",
    )
    compute_type: str = choice_setting(
        "float32",
        COMPUTE_TYPES,
        check=lambda owner, name, value: check_compute_type(owner, value),  # and the CPU must have it
        help="precision of the decoder's matrix products: float32 (default), int8 (int8 weights and "
        "activations; AVX2 + FMA or ARM sdot) or bf16 (AVX512_BF16); the model file is not changed",
    )
    sampling_topk: int = setting(
        1,
        limit=Limit(True, 1, 1_000_000),
        help="draw each token among the K most likely (default 1: the most likely, no draw; "
        "K at least the vocabulary size: all tokens); greedy decoding only",
    )
    sampling_topp: float = setting(
        1.0,
        limit=Limit(False, 0, 1, low_open=True),
        help="then among the fewest of those whose probability reaches P (default {default})",
    )
    sampling_temperature: float = setting(
        1.0,
        limit=Limit(False, 0, low_open=True),
        help="logits divided by T before drawing (default {default})",
    )
    seed: int = setting(
        0,
        limit=Limit(True, 0, 2**63 - 1),
        help="seed of the draws: the same seed gives the same output (default {default})",
    )

    #: The allowed values of the numeric options, from the declarations.
    LIMITS: ClassVar[Dict[str, Any]]

    def __post_init__(self) -> None:
        check_settings(self)
        if self.length_penalty_mode == "gnmt" and self.early_stopping != "heuristic":
            raise ValueError(
                f"DecodeOptions: early_stopping {self.early_stopping!r} is a rule of length_penalty_mode 'hf'"
            )
        if self.n_best > self.beam_size:
            raise ValueError(f"DecodeOptions: n_best {self.n_best} is larger than beam_size {self.beam_size}")
        if self.sampling_topk > 1 and self.beam_size > 1:
            raise ValueError(
                f"DecodeOptions: sampling_topk {self.sampling_topk} needs beam_size 1 (sampling replaces greedy "
                f"decoding's choice), got beam_size {self.beam_size}"
            )

    def limit(self, source_tokens: int) -> int:
        """Most tokens to generate for a source of ``source_tokens`` tokens."""
        return output_limit(source_tokens) if self.max_output_tokens is None else self.max_output_tokens


DecodeOptions.LIMITS = setting_limits(DecodeOptions)

#: The beam settings a call leaves out (None) to take the model's decoding defaults.
BEAM_RULES = ("beam_size", "length_penalty", "length_penalty_mode", "early_stopping", "force_end")
#: The decoding settings a model may carry defaults for (an imported model's generation rules).
DEFAULTABLE = (*BEAM_RULES, "max_output_tokens")


def checked_defaults(defaults: Any, who: str) -> Dict[str, Any]:
    """``defaults`` (``{setting: value}`` of :data:`DEFAULTABLE`) checked as :class:`DecodeOptions`
    checks them; ``ValueError`` / ``TypeError`` naming the first that is not allowed."""
    if not isinstance(defaults, dict):
        raise TypeError(f"{who}: expected a dict of decoding settings, got {type(defaults).__name__}")
    unknown = sorted(str(k) for k in defaults if k not in DEFAULTABLE)
    if unknown:
        raise ValueError(f"{who}: unknown decoding setting(s) {', '.join(unknown)} (allowed: {', '.join(DEFAULTABLE)})")
    DecodeOptions(**defaults)  # checks each
    return dict(defaults)


def resolved_rules(defaults: Dict[str, Any], **given: Any) -> Dict[str, Any]:
    """Each of ``given`` (beam settings) as given, else from ``defaults``, else DecodeOptions' default."""
    declared = {f.name: f.default for f in fields(DecodeOptions)}
    return {k: v if v is not None else defaults.get(k, declared[k]) for k, v in given.items()}


def call_options(
    owner: str,
    defaults: Dict[str, Any],
    default_limit: Optional[int],
    compute_type: str,
    *,
    max_output_tokens: Optional[int],
    n_best: Optional[int],
    **given: Any,
) -> DecodeOptions:
    """The :class:`DecodeOptions` of one call of ``owner`` (``"Translator"``): each of the
    :data:`BEAM_RULES` in ``given`` left out (None) taken from ``defaults``, else the default;
    ``max_output_tokens`` left out, ``default_limit``; ``n_best`` left out, one hypothesis; the
    sampling settings in ``given`` as they are. Each value is checked, the messages naming ``owner``."""
    rules = resolved_rules(defaults, **{name: given.pop(name) for name in BEAM_RULES})
    beam = DecodeOptions.LIMITS["beam_size"].check(owner, "beam_size", rules.pop("beam_size"))
    penalty = DecodeOptions.LIMITS["length_penalty"].check(owner, "length_penalty", rules.pop("length_penalty"))
    limit = default_limit
    if max_output_tokens is not None:
        limit = DecodeOptions.LIMITS["max_output_tokens"].check(owner, "max_output_tokens", max_output_tokens)
    return DecodeOptions(
        beam_size=beam,
        length_penalty=penalty,
        n_best=1 if n_best is None else _checked_n_best(owner, n_best, beam),
        max_output_tokens=limit,
        compute_type=compute_type,
        **given,
        **rules,
    )


def _checked_n_best(owner: str, n_best: Any, beam_size: int) -> int:
    """``n_best`` if it is an allowed count no larger than ``beam_size``, else ``TypeError`` or
    ``ValueError`` naming both."""
    kept = cast(int, DecodeOptions.LIMITS["n_best"].check(owner, "n_best", n_best))
    if kept > beam_size:
        raise ValueError(
            f"{owner}: n_best {kept} needs beam_size {kept} or more (beam search keeps that many "
            f"hypotheses), got beam_size {beam_size}"
        )
    return kept


class Hypothesis(NamedTuple):
    """One decoded output: its token ids (after the start token; the end token included when the
    sentence finished), its beam-search score (``None`` for greedy decoding), whether it ended
    with the end token rather than at the output limit, and (when asked for) the cross-attention
    weights recorded while decoding it: decoder layer name -> (heads, len(ids), source tokens),
    row ``t`` the query that produced token ``t``."""

    ids: List[int]
    score: Optional[float]
    finished: bool
    attention: Optional[Dict[str, np.ndarray]] = None
    #: lexical constraints the output does not hold (above 0 only when cut at the output limit)
    constraints_missing: int = 0


def _check_src(src: Any, who: str) -> np.ndarray:
    src = np.asarray(src)
    if src.ndim != 2 or src.dtype.kind not in "iu":
        raise ValueError(f"{who}: src must be an integer (batch, length) array, got {src.dtype} {src.shape}")
    return np.ascontiguousarray(src, dtype=np.int64)


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int = 0) -> np.ndarray:
    """int64 (len(rows), longest row): each row of token ids, padded on the right with pad_id."""
    width = max((len(r) for r in rows), default=0)
    src = np.full((len(rows), width), pad_id, dtype=np.int64)
    for i, ids in enumerate(rows):
        src[i, : len(ids)] = ids
    return src


def decode_rows(
    model: Any,
    rows: Sequence[Sequence[int]],
    start_id: int,
    end_id: int,
    options: Optional[DecodeOptions] = None,
    return_attention: bool = False,
    target_prefix: Optional[Sequence[Sequence[int]]] = None,
    constraints: Optional[Sequence[Sequence[Sequence[int]]]] = None,
) -> List[List[Hypothesis]]:
    """Decode a batch of source token rows in one call: the hypotheses of each sentence, best first
    (``options.n_best`` of them; one for greedy decoding).

    The rows are padded into one batch; each sentence stops at its own limit
    (``options.max_output_tokens``, else :func:`output_limit` of its own length) inside the search,
    so a sentence translates the same alone or in a batch. With ``return_attention`` each
    hypothesis carries the cross-attention weights its decoding step recorded.

    ``target_prefix``: per row, the ids its output starts with; ``constraints``: per row, id
    sequences every output must hold (beam search, fewer than ``beam_size`` per row).
    """
    options = options or DecodeOptions()
    if not rows:
        return []
    pad = int(getattr(model, "config", {}).get("pad_id", 0))  # the model's padding id (0 unless imported)
    src = pad_rows(rows, pad)
    limits = np.array([options.limit(len(r)) for r in rows], dtype=np.int64)
    _check_prefixes(target_prefix, limits)
    steps = int(limits.max())
    found: List[List[Tuple[List[int], Optional[float], Optional[np.ndarray], int]]]
    has_constraints = constraints is not None and any(len(c) for c in constraints)
    if has_constraints and options.beam_size == 1:
        raise ValueError("decode_rows: constraints need beam search: beam_size must be at least 2")
    if options.beam_size > 1:
        found = _beam(
            model, src, start_id, end_id, steps, options, limits, return_attention, target_prefix, constraints
        )
    elif target_prefix is not None or options.sampling_topk > 1 or not hasattr(model, "greedy_decode"):
        out = model.greedy_decode(
            src,
            start_id,
            end_id,
            steps,
            options.compute_type,
            limits,
            return_attention,
            target_prefix,
            options.sampling_topk,
            options.sampling_topp,
            options.sampling_temperature,
            options.seed,
        )
        ids, weights = out if return_attention else (out, [None] * len(src))
        found = [[([int(v) for v in row if v != pad], None, w, 0)] for row, w in zip(np.asarray(ids), weights)]
    else:
        out, weights = _greedy(model, src, start_id, end_id, steps, options.compute_type, limits, return_attention)
        found = [[([int(v) for v in row if v != pad], None, w, 0)] for row, w in zip(out, weights)]
    if options.beam_size == 1 and options.force_end:
        _end_at_the_limit(found, limits, end_id, target_prefix)
    return [
        [Hypothesis(ids, score, bool(ids) and ids[-1] == end_id, _by_layer(w), miss) for ids, score, w, miss in hs]
        for hs in found
    ]


def _end_at_the_limit(
    found: List[List[Tuple[List[int], Optional[float], Optional[np.ndarray], int]]],
    limits: np.ndarray,
    end_id: int,
    target_prefix: Optional[Sequence[Sequence[int]]],
) -> None:
    """``force_end`` for greedy decoding and sampling, as generate's forced-EOS rule has it: a
    sentence that reaches its limit without the end token gets the end token as its last token
    (the choice at the last position; every earlier token and that position's attention row are
    the same whichever token is chosen there). A prefix that fills the limit is kept as given."""
    for i, hyps in enumerate(found):
        ids = hyps[0][0]
        given = len(target_prefix[i]) if target_prefix is not None else 0
        if len(ids) == int(limits[i]) and len(ids) > given and ids[-1] != end_id:
            ids[-1] = end_id


def _beam(
    model: Any,
    src: np.ndarray,
    start_id: int,
    end_id: int,
    steps: int,
    options: DecodeOptions,
    limits: np.ndarray,
    return_attention: bool,
    target_prefix: Optional[Sequence[Sequence[int]]],
    constraints: Optional[Sequence[Sequence[Sequence[int]]]],
) -> List[List[Tuple[List[int], Optional[float], Optional[np.ndarray], int]]]:
    """Beam search of ``src``: per row, (ids, score, attention or None, constraints missing) best first."""
    has_constraints = constraints is not None and any(len(c) for c in constraints)
    raw = model.beam_search(
        src,
        start_id,
        end_id,
        steps,
        options.beam_size,
        options.length_penalty,
        options.n_best,
        options.compute_type,
        limits,
        return_attention,
        target_prefix,
        constraints if has_constraints else None,
        **_rules(options),
    )
    return [
        [
            (
                [int(v) for v in h[0]],
                float(h[1]),
                h[4] if return_attention else None,
                int(h[-1]) if has_constraints else 0,
            )
            for h in hs
        ]
        for hs in raw
    ]


def _rules(options: DecodeOptions) -> Dict[str, Any]:
    """The beam rules that differ from the defaults (a model without them is still called alike)."""
    rules: Dict[str, Any] = {}
    if options.length_penalty_mode != "gnmt":
        rules.update(length_penalty_mode=options.length_penalty_mode, early_stopping=options.early_stopping)
    if options.force_end:
        rules["force_end"] = True
    return rules


def _check_prefixes(target_prefix: Optional[Sequence[Sequence[int]]], limits: np.ndarray) -> None:
    """``ValueError`` for a prefix longer than its row's output limit."""
    if target_prefix is None:
        return
    if len(target_prefix) != len(limits):
        raise ValueError(f"decode_rows: target_prefix has {len(target_prefix)} entries for {len(limits)} rows")
    for i, (prefix, limit) in enumerate(zip(target_prefix, limits)):
        if len(prefix) > int(limit):
            raise ValueError(
                f"target_prefix: the prefix of sentence {i + 1} has {len(prefix)} tokens, more than its output "
                f"limit of {int(limit)} (max_output_tokens, else 1.5 x its source tokens + 10)"
            )


def _greedy(
    model: Any,
    src: np.ndarray,
    start_id: int,
    end_id: int,
    steps: int,
    compute_type: str,
    limits: np.ndarray,
    return_attention: bool,
) -> Tuple[np.ndarray, List[Optional[np.ndarray]]]:
    """Greedy decoding of ``src`` with per-row ``limits``: the ids and, with ``return_attention``,
    each row's recorded cross-attention (layers, heads, tokens, source)."""
    if return_attention:
        if not hasattr(model, "greedy_decode"):
            raise ValueError("decode_rows: return_attention needs a model with a C++ greedy_decode")
        ids, weights = model.greedy_decode(src, start_id, end_id, steps, compute_type, limits, True)
        return np.asarray(ids, dtype=np.int64), list(weights)
    return greedy_decode(model, src, start_id, end_id, steps, compute_type, limits), [None] * len(src)


def _by_layer(weights: Optional[np.ndarray]) -> Optional[Dict[str, np.ndarray]]:
    """(layers, heads, tokens, source) weights as ``{decoder layer name: (heads, tokens, source)}``."""
    if weights is None:
        return None
    return {f"decoder.layers.{i}.cross_attention": np.asarray(w) for i, w in enumerate(weights)}


# ------------------------------------------------------------------------------------ greedy


def greedy_reference(
    next_logits: Callable[[np.ndarray], Any],
    batch_size: int,
    start_id: int,
    end_id: int,
    max_length: int,
    max_lengths: Optional[Union[Sequence[int], np.ndarray]] = None,
) -> np.ndarray:
    """Greedy decoding written plainly: the one reference loop every greedy decoder of this
    package is checked against (the C++ ``Transformer.greedy_decode`` in the tests, CTranslate2
    and the PyTorch tutorial loop in the benchmark).

    ``next_logits(prefix)`` gets the int64 (B, t+1) prefixes ``[start, y_1, ..., y_t]`` of the
    ``batch_size`` sentences and returns the logits (B, V) of the token after each (a NumPy array
    or anything ``np.asarray`` takes). ``y_{t+1}`` is the argmax over every token except padding
    (id 0, which a model must never output; ties go to the lowest id). A sentence is finished
    once it has produced ``end_id`` or ``max_lengths[b]`` tokens (default: ``max_length`` each);
    its later positions are padding (0). Stops when every sentence is finished or after
    ``max_length`` tokens.

    Returns:
        int64 (B, L): the generated ids after the start token, up to and including the end token,
        padded with 0; ``L`` is the longest row.
    """
    out = np.zeros((batch_size, 0), dtype=np.int64)
    done = np.zeros(batch_size, dtype=bool)
    start = np.full((batch_size, 1), int(start_id), dtype=np.int64)
    limits = np.full(batch_size, int(max_length)) if max_lengths is None else np.asarray(max_lengths)
    for t in range(int(max_length)):
        logits = np.asarray(next_logits(np.concatenate([start, out], axis=1)))  # (B, V)
        nxt = logits[:, 1:].argmax(axis=-1).astype(np.int64) + 1  # never the padding id 0
        nxt[done] = 0
        out = np.concatenate([out, nxt[:, None]], axis=1)
        done |= (nxt == int(end_id)) | (t + 1 >= limits)
        if done.all():
            break
    return out


def greedy_decode_reference(
    model: Any,
    src: np.ndarray,
    start_id: int,
    end_id: int,
    max_length: int,
    max_lengths: Optional[Union[Sequence[int], np.ndarray]] = None,
) -> np.ndarray:
    """Greedy decoding in plain Python: the readable definition of ``Transformer.greedy_decode``.

    :func:`greedy_reference` with the whole prefix ``[start, y_1, ..., y_t]`` run through
    ``model.forward(src, prefix)`` at every step (no cache) and the last position's logits taken.

    Args:
        model: a :class:`~transformer_cpp.model.Transformer`.
        src: int (B, S) source ids, padded with 0.
        start_id, end_id: the target tokenizer's start and end ids.
        max_length: the most tokens to generate per sentence (the end token included).
        max_lengths: each sentence's own limit (default: ``max_length`` each).

    Returns:
        int64 (B, L): the generated ids after the start token, up to and including the end token,
        padded with 0; ``L`` is the longest row.
    """
    src = _check_src(src, "greedy_decode_reference")
    return greedy_reference(
        lambda prefix: model.forward(src, prefix, training=False)[:, -1],
        src.shape[0],
        start_id,
        end_id,
        max_length,
        max_lengths,
    )


def greedy_decode(
    model: Any,
    src: np.ndarray,
    start_id: int,
    end_id: int,
    max_length: int,
    compute_type: str = "float32",
    max_lengths: Optional[Union[Sequence[int], np.ndarray]] = None,
) -> np.ndarray:
    """Greedy decoding: ``model.greedy_decode`` (C++, key/value cache) when the model has it, else
    :func:`greedy_decode_reference` on its ``forward`` (float32 only). Same arguments and result."""
    src = _check_src(src, "greedy_decode")
    if hasattr(model, "greedy_decode"):
        return np.asarray(
            model.greedy_decode(src, int(start_id), int(end_id), int(max_length), compute_type, max_lengths),
            dtype=np.int64,
        )
    if compute_type != "float32":
        raise ValueError(f"greedy_decode: compute_type {compute_type!r} needs a model with a C++ greedy_decode")
    return greedy_decode_reference(model, src, start_id, end_id, max_length, max_lengths)
