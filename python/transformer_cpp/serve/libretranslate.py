"""The LibreTranslate-compatible part of the API, so that existing LibreTranslate clients
(browser extensions, apps, the ``libretranslatepy`` package) work with a transformer-cpp server
unchanged.

* ``POST /translate`` with LibreTranslate's fields: ``q`` (a string, or a list of strings),
  ``source``, ``target``, optional ``format`` (``"text"``), ``alternatives`` (more hypotheses per
  text, from beam search) and ``api_key`` (accepted and ignored: the server has no keys). The body
  is JSON or a form (``application/x-www-form-urlencoded``, what ``libretranslatepy`` sends). The
  answer is ``{"translatedText": ...}``: a string for a string, a list for a list.
* ``GET /languages``: the languages of the models served, each source listing its targets.
* ``POST /detect`` with ``q``: the languages the text may be in, most likely first.

A model translates one direction only, recorded in its checkpoint; ``source`` and ``target``
choose the model. ``source: "auto"`` is detected among the sources of the models that translate
to ``target`` (when there is one such source, it is taken without detection, and the answer's
``detectedLanguage`` says so with a confidence of 0).
Requests go through the same limits and the same batcher as the server's own API; refusals are
LibreTranslate's 400 with ``{"error": ...}`` (plus the server's ``status`` field).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from .config import ServeConfig, ServeError, check_texts

__all__ = ["FIELDS", "LibreRequest", "is_libre_request", "libre_answer", "parse_libre_request"]

#: The fields a LibreTranslate ``/translate`` request may carry.
FIELDS = ("q", "source", "target", "format", "alternatives", "api_key")


@dataclass(frozen=True)
class LibreRequest:
    """A checked LibreTranslate request: the texts, whether ``q`` was a list, the decoding's beam
    size and hypotheses per text, the source language (``None`` for ``"auto"``) and the target."""

    texts: List[str]
    as_list: bool
    beam_size: int
    n_best: int
    source: Optional[str]  # None: "auto"
    target: str


def is_libre_request(body: Any) -> bool:
    """Whether a parsed body is a LibreTranslate request (it has ``q``) rather than the server's
    own (``text`` / ``texts``)."""
    return isinstance(body, dict) and "q" in body


def _code(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ServeError(400, f"{field} must be a language code such as 'en', got {value!r}")
    return value.strip().lower()


def parse_libre_request(body: Dict[str, Any], config: ServeConfig, pairs: str) -> LibreRequest:
    """Check a LibreTranslate request against the server's limits (``pairs``: the language pairs
    served, for the messages); :class:`ServeError` 400 says what is wrong and what is allowed. The
    pair is the caller's to find."""
    unknown = sorted(k for k in body if k not in FIELDS)
    if unknown:
        raise ServeError(
            400, f"unknown field(s) {', '.join(map(repr, unknown))}; a LibreTranslate request has {', '.join(FIELDS)}"
        )
    q = body["q"]
    as_list = isinstance(q, list)
    texts = q if as_list else [q]
    if not all(isinstance(t, str) for t in texts):
        raise ServeError(400, "q must be a string or a list of strings")
    if not texts:
        raise ServeError(400, "q is an empty list; give at least one text")
    for field in ("source", "target"):
        if field not in body:
            raise ServeError(400, f"{field} is missing: this server translates {pairs} (source-target)")
    source, target = _code(body["source"], "source"), _code(body["target"], "target")
    fmt = body.get("format", "text")
    if fmt != "text":
        raise ServeError(400, f"format must be 'text' (HTML is not translated), got {fmt!r}")
    alternatives = body.get("alternatives", 0)
    if isinstance(alternatives, str) and alternatives.strip().isdigit():  # forms send numbers as text
        alternatives = int(alternatives)
    if (
        isinstance(alternatives, bool)
        or not isinstance(alternatives, int)
        or not 0 <= alternatives < config.max_beam_size
    ):
        raise ServeError(
            400, f"alternatives must be a whole number from 0 to {config.max_beam_size - 1}, got {alternatives!r}"
        )
    check_texts(texts, config, lambda i: f"q[{i}]" if as_list else "q", status=400)
    n_best = alternatives + 1
    return LibreRequest(
        texts=list(texts),
        as_list=as_list,
        beam_size=max(config.beam_size, n_best),
        n_best=n_best,
        source=None if source == "auto" else source,
        target=target,
    )


def libre_answer(
    req: LibreRequest, results: List[Dict[str, Any]], detected: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """LibreTranslate's answer for the server's ``results`` (one per text, in order); ``detected``:
    the language found for ``source: "auto"``."""
    texts = [r["text"] for r in results]
    answer: Dict[str, Any] = {"translatedText": texts if req.as_list else texts[0]}
    if req.n_best > 1:
        alternatives = [[h["text"] for h in r.get("hypotheses", [])[1:]] for r in results]
        answer["alternatives"] = alternatives if req.as_list else alternatives[0]
    if detected is not None:
        answer["detectedLanguage"] = [detected] * len(texts) if req.as_list else detected
    return answer
