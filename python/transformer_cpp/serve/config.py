"""What the server accepts: its settings (:class:`ServeConfig`), the error a refused request gets
(:class:`ServeError`), and the checks of a request, from its body's bytes (:func:`read_json_body`)
to its fields (:func:`parse_request`) and the work its encoded texts would cost
(:func:`check_work`).

Every refusal is a :class:`ServeError` with the HTTP status and a message that says what was wrong
and what is allowed (naming the setting that allows it); the app turns it into
``{"error": message, "status": code}``.
"""

from __future__ import annotations

import asyncio
import functools
import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .._checks import integer, number
from ..text import is_blank
from ..translate import DecodeOptions

__all__ = [
    "FORM",
    "SERVE_EXTRA_HINT",
    "ClientGone",
    "ServeConfig",
    "ServeError",
    "api_models",
    "check_texts",
    "check_work",
    "field_name",
    "host_patterns",
    "is_form",
    "is_json",
    "parse_form",
    "parse_request",
    "read_json_body",
    "text_work",
]

#: What to install when FastAPI or uvicorn cannot be imported.
SERVE_EXTRA_HINT = 'the server needs FastAPI and uvicorn: pip install "transformer-cpp[serve]"'


@dataclass(frozen=True)
class ServeConfig:
    """Batching, decoding defaults, request limits and the HTTP guards of the server.

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
        max_source_tokens: most tokens in one text once encoded (a character can be several
            tokens: an emoji is four bytes, so up to four byte-level tokens).
        max_request_tokens: most decoding work in one request, counted in tokens: the sum over
            its texts of beam size x (source tokens + most output tokens), the output limit being
            ``1.5 x source + 10`` tokens or the translator's ``max_output_tokens``.
        max_attention_weights: most attention weights one answer may hold with
            ``return_attention``: the sum over its texts of source tokens x most output tokens.
        max_batch_tokens: most decoding work, in the same tokens, in one decode call. The
            decoder cannot be interrupted, so this bounds how long a request that arrives while
            a large one is decoded waits for its turn (a sentence over it is decoded alone).
        batch_seconds: how long one decode call should take: the batcher measures how much work
            it decodes per second and makes batches of at most that much work times
            ``batch_seconds`` (and at most ``max_batch_tokens``), so that on a slow or busy
            machine a request still waits about this long behind a large one; 0 = by
            ``max_batch_tokens`` alone.
        read_timeout: seconds a client has to send a whole request (its headers, then its body);
            a slower one gets 408 and its connection is closed.
        allowed_hosts: names accepted in the ``Host`` header besides ``localhost`` and loopback
            addresses (``"*.example.org"`` for a domain and its subdomains, ``"*"`` for any).
            ``None``: when the server listens on a loopback address only loopback names are
            accepted (a web page that points its own domain name at 127.0.0.1, DNS rebinding,
            cannot reach the server), on any other address every name.

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
    max_source_tokens: int = 256
    max_request_tokens: int = 128 * 1024
    max_attention_weights: int = 256 * 1024
    max_batch_tokens: int = 16 * 1024
    batch_seconds: float = 1.0
    read_timeout: float = 10.0
    allowed_hosts: Optional[Tuple[str, ...]] = None

    def __post_init__(self) -> None:
        for name in (
            "max_batch",
            "max_request_bytes",
            "max_texts",
            "max_chars",
            "max_queue",
            "max_source_tokens",
            "max_request_tokens",
            "max_attention_weights",
            "max_batch_tokens",
        ):
            object.__setattr__(self, name, integer("ServeConfig", name, getattr(self, name), 1))
        object.__setattr__(self, "max_wait_ms", number("ServeConfig", "max_wait_ms", self.max_wait_ms, 0))
        object.__setattr__(self, "batch_seconds", number("ServeConfig", "batch_seconds", self.batch_seconds, 0))
        object.__setattr__(
            self, "read_timeout", number("ServeConfig", "read_timeout", self.read_timeout, 0, low_open=True)
        )
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
        if self.allowed_hosts is not None:
            object.__setattr__(self, "allowed_hosts", host_patterns(self.allowed_hosts))


def host_patterns(hosts: Any) -> Tuple[str, ...]:
    """``hosts`` (host names, ``*.domain`` or ``*``) as a tuple of lower-case names, or
    ``TypeError`` / ``ValueError`` naming the bad entry."""
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple, set, frozenset)):
        raise TypeError(
            f"ServeConfig: allowed_hosts must be a list of host names, got {type(hosts).__name__}"
            + (f" {hosts!r} (write [{hosts!r}] for one name)" if isinstance(hosts, str) else "")
        )
    names = []
    for host in hosts:
        if not isinstance(host, str):
            raise TypeError(f"ServeConfig: allowed_hosts must hold host names (str), got {type(host).__name__}")
        name = host.strip().lower()
        name = (name.split(":")[0] if name.count(":") == 1 else name).rstrip(".")  # any port matches
        rest = name[2:] if name.startswith("*.") else name
        if not name or (name != "*" and (not rest or any(c in rest for c in " \t/,*@[]") or rest.startswith("."))):
            raise ValueError(
                f"ServeConfig: allowed_hosts entry {host!r} is not a host name; give names such as "
                "'example.org', '*.example.org' (a domain and its subdomains) or '*' (any)"
            )
        names.append(name)
    return tuple(names)


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


class ClientGone(Exception):
    """The client closed its connection before its request was answered (nothing can be sent)."""


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


#: The media type of HTML forms, which LibreTranslate clients send.
FORM = "application/x-www-form-urlencoded"


def is_form(content_type: Optional[str]) -> bool:
    """Whether a Content-Type header names a URL-encoded form."""
    return bool(content_type) and str(content_type).split(";", 1)[0].strip().lower() == FORM


def parse_form(body: bytes, config: ServeConfig) -> Dict[str, Any]:
    """A URL-encoded form as a dict: a field given once is a string, one given several times a
    list; :class:`ServeError` 400 when it is not UTF-8 or has too many fields."""
    from urllib.parse import parse_qs

    try:
        fields = parse_qs(
            body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=config.max_texts + 16
        )
    except UnicodeDecodeError:
        raise ServeError(400, "the form is not UTF-8") from None
    except ValueError as exc:  # too many fields
        raise ServeError(400, f"the form has too many fields: {exc}") from None
    return {k: v[0] if len(v) == 1 else v for k, v in fields.items()}


def is_json(content_type: Optional[str]) -> bool:
    """Whether a Content-Type header names JSON (``application/json`` or ``application/*+json``)."""
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def _drain(request: Any, cap: int, seconds: float) -> None:
    """Read and drop up to ``cap`` more body bytes for at most ``seconds``, so the client can read
    the error response."""

    async def drop() -> None:
        seen = 0
        async for chunk in request.stream():
            seen += len(chunk)
            if seen > cap:
                return

    try:
        await asyncio.wait_for(drop(), seconds)
    except Exception:  # the client went away or is too slow, or the body was already read
        return


def _timed_out(config: ServeConfig) -> ServeError:
    return ServeError(
        408,
        f"the request body did not arrive within {config.read_timeout:g} seconds (read_timeout)",
        headers={"Connection": "close"},
    )


async def read_json_body(request: Any, config: ServeConfig, forms: bool = False) -> Any:
    """The parsed JSON body of ``request`` (with ``forms``, a URL-encoded form too, as
    :func:`parse_form` gives it), or :class:`ServeError` 415 / 413 / 400, or 408 when the body does
    not arrive within ``config.read_timeout`` seconds; :class:`ClientGone` when the client
    disconnects while sending it."""
    from starlette.requests import ClientDisconnect

    drain_cap = max(16 * config.max_request_bytes, 4 << 20)
    drain_time = config.read_timeout
    form = forms and is_form(request.headers.get("content-type"))
    if not form and not is_json(request.headers.get("content-type")):
        await _drain(request, drain_cap, drain_time)
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
            await _drain(request, drain_cap, drain_time)
            raise ServeError(
                413,
                f"the request body has {declared:,} bytes; at most {config.max_request_bytes:,} are accepted "
                "(max_request_bytes)",
            )

    async def read() -> Optional[bytes]:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > config.max_request_bytes:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        body = await asyncio.wait_for(read(), config.read_timeout)
    except asyncio.TimeoutError:
        raise _timed_out(config) from None
    except ClientDisconnect:
        raise ClientGone("the client disconnected while sending its request") from None
    if body is None:
        await _drain(request, drain_cap, drain_time)
        raise ServeError(413, f"the request body is over {config.max_request_bytes:,} bytes (max_request_bytes)")
    if form:
        return parse_form(body, config)
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


def check_texts(texts: Sequence[str], config: ServeConfig, where: Callable[[int], str], status: int = 422) -> None:
    """:class:`ServeError` ``status`` when there are more than ``max_texts`` texts, or one is over
    ``max_chars`` characters or empty once whitespace and invisible characters are removed
    (``where(i)`` names text ``i`` in the message)."""
    if len(texts) > config.max_texts:
        raise ServeError(
            status, f"{len(texts):,} texts in one request; at most {config.max_texts} are accepted (max_texts)"
        )
    for i, t in enumerate(texts):
        if len(t) > config.max_chars:
            raise ServeError(
                status, f"{where(i)} has {len(t):,} characters; at most {config.max_chars:,} are accepted (max_chars)"
            )
        if is_blank(t):
            raise ServeError(
                status,
                f"{where(i)} is empty"
                + (" (it holds only invisible characters such as zero-width spaces)" if t.strip() else ""),
            )


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
    check_texts(texts, config, where)
    beam_size = config.beam_size if req.beam_size is None else req.beam_size
    if not 1 <= beam_size <= config.max_beam_size:
        raise ServeError(422, f"beam_size must be between 1 and {config.max_beam_size}, got {beam_size}")
    if not 1 <= req.n_best <= beam_size:
        raise ServeError(422, f"n_best must be between 1 and beam_size ({beam_size}), got {req.n_best}")
    return texts, beam_size, req.n_best, req.return_attention


def text_work(source_tokens: int, output_limit: int, beam_size: int) -> int:
    """The decoding work of one text, in tokens: ``beam_size x (source tokens + most output
    tokens)`` (the unit of ``max_request_tokens`` and ``max_batch_tokens``)."""
    return int(beam_size) * (int(source_tokens) + int(output_limit))


def check_work(
    source_tokens: Sequence[int],
    output_limits: Sequence[int],
    beam_size: int,
    return_attention: bool,
    config: ServeConfig,
    where: Callable[[int], str],
) -> List[int]:
    """The work of each text (:func:`text_work`), or :class:`ServeError` 422 when a text has more
    than ``max_source_tokens`` tokens, the request more work than ``max_request_tokens`` or, with
    ``return_attention``, more attention weights than ``max_attention_weights``. ``where(i)``
    names text ``i`` in the message."""
    for i, n in enumerate(source_tokens):
        if n > config.max_source_tokens:
            raise ServeError(
                422,
                f"{where(i)} has {n:,} tokens once encoded; at most {config.max_source_tokens:,} are accepted "
                "(max_source_tokens): split it into shorter sentences",
            )
    work = [text_work(n, out, beam_size) for n, out in zip(source_tokens, output_limits)]
    if sum(work) > config.max_request_tokens:
        raise ServeError(
            422,
            f"the request would decode {sum(work):,} tokens (beam size {beam_size} x (source tokens + most "
            f"output tokens), over its {len(work)} texts); at most {config.max_request_tokens:,} are accepted "
            "(max_request_tokens): send fewer or shorter texts, or a smaller beam_size",
        )
    if return_attention:
        weights = sum(n * out for n, out in zip(source_tokens, output_limits))
        if weights > config.max_attention_weights:
            raise ServeError(
                422,
                f"return_attention would answer up to {weights:,} attention weights (source tokens x most output "
                f"tokens, over the texts); at most {config.max_attention_weights:,} are accepted "
                "(max_attention_weights): ask for the attention of fewer or shorter texts",
            )
    return work
