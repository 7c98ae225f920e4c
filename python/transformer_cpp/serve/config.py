"""What the server accepts: its settings (:class:`ServeConfig`), the error a refused request gets
(:class:`ServeError`), and the checks of a request, from its body's bytes (:func:`read_json_body`)
to its fields (:func:`parse_request`).

Every refusal is a :class:`ServeError` with the HTTP status and a message that says what was wrong
and what is allowed; the app turns it into ``{"error": message, "status": code}``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .._checks import integer, number
from ..translate import DecodeOptions

__all__ = [
    "SERVE_EXTRA_HINT",
    "ServeConfig",
    "ServeError",
    "api_models",
    "field_name",
    "is_json",
    "parse_request",
    "read_json_body",
]

#: What to install when FastAPI or uvicorn cannot be imported.
SERVE_EXTRA_HINT = 'the server needs FastAPI and uvicorn: pip install "transformer-cpp[serve]"'


@dataclass(frozen=True)
class ServeConfig:
    """Batching, decoding defaults and request limits of the server.

    Attributes:
        max_batch: most sentences in one decode call (1 = no batching).
        max_wait_ms: how long a batch may wait for more sentences after its oldest one arrived.
        beam_size: beam size of a request that does not give one (1 = greedy decoding).
        max_beam_size: the largest beam size (and ``n_best``) a request may ask for.
        length_penalty: GNMT length-penalty exponent of beam search.
        max_request_bytes: largest request body.
        max_texts: most texts in one request.
        max_chars: most characters in one text.
        max_queue: most sentences waiting for a decode; a request that would exceed it gets 503.

    The decoding settings default to :class:`~transformer_cpp.translate.DecodeOptions`' and are
    checked against its limits, so that every request the server accepts can be decoded.
    """

    max_batch: int = 32
    max_wait_ms: float = 5.0
    beam_size: int = DecodeOptions.beam_size
    max_beam_size: int = 8
    length_penalty: float = DecodeOptions.length_penalty
    max_request_bytes: int = 64 * 1024
    max_texts: int = 64
    max_chars: int = 1000
    max_queue: int = 1024

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_request_bytes", "max_texts", "max_chars", "max_queue"):
            object.__setattr__(self, name, integer("ServeConfig", name, getattr(self, name), 1))
        object.__setattr__(self, "max_wait_ms", number("ServeConfig", "max_wait_ms", self.max_wait_ms, 0))
        limits = DecodeOptions.LIMITS
        for name, limit in (
            ("beam_size", limits["beam_size"]),
            ("max_beam_size", limits["beam_size"]),
            ("length_penalty", limits["length_penalty"]),
        ):
            object.__setattr__(self, name, limit.check("ServeConfig", name, getattr(self, name)))
        if self.beam_size > self.max_beam_size:
            raise ValueError(
                f"ServeConfig: beam_size {self.beam_size} is larger than max_beam_size {self.max_beam_size}"
            )


class ServeError(Exception):
    """A request the server refuses: ``status`` (4xx/5xx) and a message for the JSON error body."""

    def __init__(
        self,
        status: int,
        message: str,
        details: Optional[List[Dict[str, Any]]] = None,
        headers: Optional[Dict[str, str]] = None,
    ) -> None:
        super().__init__(message)
        self.status = int(status)
        self.message = message
        self.details = details
        self.headers = headers


def field_name(loc: Sequence[Any]) -> str:
    """A pydantic error location as a dotted field name (``texts.1``), ``body`` for the whole."""
    return ".".join(str(p) for p in loc) or "body"


@functools.lru_cache(maxsize=None)
def api_models() -> Dict[str, Any]:
    """The pydantic models of the API: ``request``, ``response`` and ``error`` (built on first use:
    pydantic comes with FastAPI, an optional dependency)."""
    from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

    class TranslateRequest(BaseModel):
        """Give ``text`` or ``texts``."""

        model_config = ConfigDict(extra="forbid")
        text: Optional[StrictStr] = Field(None, description="one sentence to translate")
        texts: Optional[List[StrictStr]] = Field(None, description="several sentences, translated in order")
        beam_size: Optional[StrictInt] = Field(None, description="1 = greedy decoding; default: the server's")
        n_best: StrictInt = Field(1, description="hypotheses per text (at most beam_size)")
        return_attention: StrictBool = Field(False, description="include the cross-attention map of each translation")

    class Attention(BaseModel):
        layer: str
        source_pieces: List[str]
        target_pieces: List[str]
        weights: List[List[float]] = Field(description="rows: output tokens; columns: source tokens; mean over heads")

    class Hypothesis(BaseModel):
        text: str
        score: Optional[float]
        finished: bool

    class TranslationResult(BaseModel):
        text: str
        source: str = Field(description="the input as cleaned for the model")
        finished: bool = Field(description="whether the end token was produced (else the output limit was hit)")
        score: Optional[float] = Field(description="beam search's length-normalised log-probability; null when greedy")
        hypotheses: Optional[List[Hypothesis]] = Field(None, description="with n_best > 1, best first")
        attention: Optional[Attention] = None
        warning: Optional[str] = None

    class TranslateResponse(BaseModel):
        translations: List[TranslationResult]
        beam_size: int
        n_best: int

    class ErrorResponse(BaseModel):
        error: str
        status: int
        details: Optional[List[Dict[str, Any]]] = None

    return {"request": TranslateRequest, "response": TranslateResponse, "error": ErrorResponse}


def is_json(content_type: Optional[str]) -> bool:
    """Whether a Content-Type header names JSON (``application/json`` or ``application/*+json``)."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def _drain(request: Any, cap: int) -> None:
    """Read and drop up to ``cap`` more body bytes, so the client can read the error response."""
    seen = 0
    try:
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > cap:
                return
    except Exception:  # the client went away, or the body was already read
        return


async def read_json_body(request: Any, config: ServeConfig) -> Any:
    """The parsed JSON body of ``request``, or :class:`ServeError` 415 / 413 / 400."""
    drain_cap = max(16 * config.max_request_bytes, 4 << 20)
    if not is_json(request.headers.get("content-type")):
        await _drain(request, drain_cap)
        raise ServeError(
            415,
            f"send the request as JSON (Content-Type: application/json), got "
            f"{request.headers.get('content-type') or 'no content type'}",
        )
    length = request.headers.get("content-length")
    if length is not None:
        try:
            declared = int(length)
        except ValueError:
            raise ServeError(400, f"bad Content-Length header {length!r}") from None
        if declared > config.max_request_bytes:
            await _drain(request, drain_cap)
            raise ServeError(
                413, f"the request body has {declared:,} bytes; at most {config.max_request_bytes:,} are accepted"
            )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > config.max_request_bytes:
            await _drain(request, drain_cap)
            raise ServeError(413, f"the request body is over {config.max_request_bytes:,} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    if not body.strip():
        raise ServeError(400, 'the request body is empty; send a JSON object such as {"text": "..."}')
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ServeError(
            400,
            f"the request body is not valid JSON: {exc}"
            if not isinstance(exc, RecursionError)
            else "the request body nests too deeply",
        ) from None


def parse_request(body: Any, config: ServeConfig) -> Tuple[List[str], int, int, bool]:
    """``(texts, beam_size, n_best, return_attention)`` of a parsed JSON body, or
    :class:`ServeError` 422 saying what is wrong and where."""
    from pydantic import ValidationError

    try:
        req = api_models()["request"].model_validate(body)
    except ValidationError as exc:
        details = [
            {"field": field_name(e.get("loc", ())), "message": e.get("msg", "")}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        first = details[0] if details else {"field": "body", "message": "invalid"}
        more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
        raise ServeError(422, f"invalid request: {first['field']}: {first['message']}{more}", details) from None
    if (req.text is None) == (req.texts is None):
        raise ServeError(
            422,
            'give either "text" (one sentence) or "texts" (a list of sentences)'
            + (", not both" if req.text is not None else ""),
        )
    texts = [req.text] if req.text is not None else list(req.texts or [])
    where: Callable[[int], str] = (lambda i: "text") if req.text is not None else (lambda i: f"texts[{i}]")
    if not texts:
        raise ServeError(422, '"texts" is empty; give at least one sentence')
    if len(texts) > config.max_texts:
        raise ServeError(422, f"{len(texts):,} texts in one request; at most {config.max_texts} are accepted")
    for i, t in enumerate(texts):
        if len(t) > config.max_chars:
            raise ServeError(422, f"{where(i)} has {len(t):,} characters; at most {config.max_chars:,} are accepted")
        if not t.strip():
            raise ServeError(422, f"{where(i)} is empty")
    beam_size = config.beam_size if req.beam_size is None else req.beam_size
    if not 1 <= beam_size <= config.max_beam_size:
        raise ServeError(422, f"beam_size must be between 1 and {config.max_beam_size}, got {beam_size}")
    if not 1 <= req.n_best <= beam_size:
        raise ServeError(422, f"n_best must be between 1 and beam_size ({beam_size}), got {req.n_best}")
    return texts, beam_size, req.n_best, req.return_attention
