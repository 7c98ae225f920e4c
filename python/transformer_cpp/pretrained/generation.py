"""A MarianMT model's generation rules (``generation_config.json``, else the generation fields of
``config.json``, as older models keep them) as the decoding defaults of the imported run.

What ``MarianMTModel.generate`` does by default becomes what ``translate`` and
:class:`~transformer_cpp.Translator` do when the options are left out:

* ``num_beams`` -> ``beam_size``; ``length_penalty`` with Hugging Face's rule (``log_prob /
  length ** length_penalty``, ``length_penalty_mode="hf"``); ``early_stopping`` (False, True,
  ``"never"``) -> ``"heuristic"``, ``"first"``, ``"never"``;
* ``max_length`` (the decoder's start token counted) -> ``max_output_tokens = max_length - 1``,
  ``max_new_tokens`` -> ``max_output_tokens``;
* ``forced_eos_token_id`` (the end id) -> ``force_end``: a hypothesis that reaches the limit ends
  with the end token;
* ``bad_words_ids`` and ``suppress_tokens`` may only ban the padding id, which the decoders never emit;
  ``decoder_start_token_id``, ``eos_token_id`` and ``pad_token_id`` must be the model's.

A field that would make generate's output differ from ours (``do_sample``,
``no_repeat_ngram_size``, ``repetition_penalty``, ``min_length``, beam groups, another banned or
forced token, ...) is refused with a ``ValueError`` naming it: the imported run would otherwise
translate otherwise than the published model without a word.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

__all__ = ["GENERATION_FILE", "generation_defaults"]

#: The file of a model's generation rules.
GENERATION_FILE = "generation_config.json"
# fields whose value, when it is not the neutral one, changes what generate outputs
_NEUTRAL: List[Tuple[str, Any]] = [
    ("do_sample", False),
    ("no_repeat_ngram_size", 0),
    ("encoder_no_repeat_ngram_size", 0),
    ("repetition_penalty", 1.0),
    ("encoder_repetition_penalty", 1.0),
    ("min_length", 0),
    ("min_new_tokens", None),
    ("num_beam_groups", 1),
    ("diversity_penalty", 0.0),
    ("forced_bos_token_id", None),
    ("begin_suppress_tokens", None),
    ("exponential_decay_length_penalty", None),
    ("sequence_bias", None),
    ("renormalize_logits", False),
    ("constraints", None),
    ("force_words_ids", None),
    ("penalty_alpha", None),
    ("guidance_scale", None),
    ("epsilon_cutoff", 0.0),
    ("eta_cutoff", 0.0),
]
_EARLY = {False: "heuristic", True: "first", "never": "never"}


def _refuse(source: str, field: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"import: {source}'s {field} is {value!r}; supported: {allowed}")


def _read(directory: Path) -> Tuple[str, Dict[str, Any]]:
    for name in (GENERATION_FILE, "config.json"):
        path = directory / name
        if path.is_file():
            found = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(found, dict):
                return name, found
    return "config.json", {}


def _ids(value: Any) -> List[Any]:
    return value if isinstance(value, list) else [value]


def _check_neutral(source: str, rules: Dict[str, Any]) -> None:
    for field, neutral in _NEUTRAL:
        value = rules.get(field)
        if value is None or value == [] or value == {}:  # not set: generate's neutral default
            continue
        if value != neutral or type(value) is not type(neutral) and isinstance(neutral, bool):
            raise _refuse(source, field, value, f"{neutral!r} (this package does not implement it)")


def generation_defaults(directory: Path, model: Dict[str, Any]) -> Dict[str, Any]:
    """The decoding defaults of the MarianMT model in ``directory`` (see the module docstring);
    ``model``: the model's keyword arguments (its ``pad_id``, ``start_id``, ``end_id``).
    ``ValueError`` naming the first field this package cannot follow."""
    source, rules = _read(directory)
    _check_neutral(source, rules)
    pad, start, end = int(model["pad_id"]), int(model["start_id"]), int(model["end_id"])
    for field, want in (("decoder_start_token_id", start), ("pad_token_id", pad)):
        if rules.get(field) is not None and rules[field] != want:
            raise _refuse(source, field, rules[field], f"{want} (the model's)")
    if rules.get("eos_token_id") is not None and _ids(rules["eos_token_id"]) != [end]:
        raise _refuse(source, "eos_token_id", rules["eos_token_id"], f"{end} (the model's end id)")
    bad = rules.get("bad_words_ids") or []
    if not isinstance(bad, list) or any(_ids(b) != [pad] for b in bad):
        raise _refuse(source, "bad_words_ids", bad, f"[[{pad}]] (the padding id, never emitted) or none")
    suppressed = rules.get("suppress_tokens") or []
    if not isinstance(suppressed, list) or any(_ids(t) != [pad] for t in suppressed):
        raise _refuse(source, "suppress_tokens", suppressed, f"[{pad}] (the padding id, never emitted) or none")
    defaults: Dict[str, Any] = {"length_penalty_mode": "hf"}
    beams = rules.get("num_beams", 1)
    if isinstance(beams, bool) or not isinstance(beams, int) or not 1 <= beams <= 1024:
        raise _refuse(source, "num_beams", beams, "an integer in [1, 1024]")
    defaults["beam_size"] = beams
    penalty = rules.get("length_penalty", 1.0)
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not 0 <= penalty <= 10:
        raise _refuse(source, "length_penalty", penalty, "a number in [0, 10]")
    defaults["length_penalty"] = float(penalty)
    early = rules.get("early_stopping", False)
    if not (isinstance(early, bool) or early == "never"):
        raise _refuse(source, "early_stopping", early, "false, true or 'never'")
    defaults["early_stopping"] = _EARLY[early]
    forced = rules.get("forced_eos_token_id")
    if forced is not None and _ids(forced) != [end]:
        raise _refuse(source, "forced_eos_token_id", forced, f"{end} (the model's end id) or none")
    defaults["force_end"] = forced is not None
    limit = rules.get("max_new_tokens")
    if limit is None and rules.get("max_length") is not None:
        limit = rules["max_length"] - 1 if isinstance(rules["max_length"], int) else rules["max_length"]
        field = "max_length"
    else:
        field = "max_new_tokens"
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
            raise _refuse(source, field, rules.get(field), "a number of tokens in [1, 100000]")
        defaults["max_output_tokens"] = limit
    return defaults
