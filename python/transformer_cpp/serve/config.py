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
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .._checks import Limit
from ..config import check_settings, choice_setting, describe_settings, flag_setting, setting
from ..text import is_blank
from ..translate import DecodeOptions

__all__ = [
    "DEFAULT_KEEP_ALIVE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_HEADER_BYTES",
    "FORM",
    "SERVE_EXTRA_HINT",
    "ClientGone",
    "ServeConfig",
    "ServeError",
    "ServerOptions",
    "api_models",
    "check_texts",
    "check_work",
    "field_name",
    "host_list",
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


_COUNT = Limit(True, 1)  # Python compares them: any size
_WAIT = Limit(False, 0)  # finite seconds (or ms) >= 0
_BEAMS = DecodeOptions.LIMITS["beam_size"]


def _count(default: int, help: str) -> Any:
    """A setting of how many (sentences, tokens, bytes, connections ...) the server takes at most:
    any positive integer."""
    return setting(default, limit=_COUNT, help=help)


def _hosts(owner: str, name: str, value: Any) -> Tuple[str, ...]:
    return host_patterns(value)


def host_list(text: str) -> Tuple[str, ...]:
    """The ``--allowed-hosts`` option's text, comma-separated host names, as :func:`host_patterns` gives them."""
    try:
        return host_patterns([h for h in text.split(",") if h.strip()] or [text])
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc).replace("ServeConfig: allowed_hosts", "--allowed-hosts")) from None


@dataclass(frozen=True)
class ServeConfig:
    """Batching, decoding defaults, request limits and the HTTP guards of the server; each setting
    with its ``transformer-cpp serve`` option.

    The decoding settings default to :class:`~transformer_cpp.translate.DecodeOptions`' and are
    checked against its limits, so that every request the server accepts can be decoded. The
    settings:

    {settings}
    """

    max_batch: int = _count(32, "most sentences per decode call (default {default}; 1 = one at a time)")
    max_wait_ms: float = setting(
        5.0,
        limit=_WAIT,
        help="how long a batch waits to fill after its first sentence (default {default:g} ms)",
    )
    max_batch_tokens: int = _count(
        16 * 1024,
        "most decoding work per decode call, in tokens: beam size x (source + most output tokens) summed "
        "over its sentences (default {default:,}); a decode call cannot be interrupted, so this bounds how long "
        "a request waits behind a large one (a larger sentence is decoded alone)",
    )
    batch_seconds: float = setting(
        1.0,
        limit=_WAIT,
        help="how long one decode call should take (default {default:g} s): batches hold at most the work the "
        "last ones decoded in that time, so a request waits about that long behind a large one on a slow or "
        "busy machine too (0 = by --max-batch-tokens alone)",
    )
    beam_size: int = setting(
        DecodeOptions.beam_size,
        limit=_BEAMS,
        help="beam size of requests that do not give one (default {default} = greedy)",
    )
    length_penalty: float = setting(
        DecodeOptions.length_penalty,
        limit=DecodeOptions.LIMITS["length_penalty"],
        help="beam search length-penalty exponent (default {default})",
    )
    max_beam_size: int = setting(
        8,
        limit=_BEAMS,
        help="largest beam size (and n_best) a request may ask for (default {default}, or --beam-size if larger)",
    )
    max_request_bytes: int = _count(64 * 1024, "largest request body (default {default:,})")
    max_texts: int = _count(64, "most texts per request (default {default})")
    max_chars: int = _count(1000, "most characters per text (default {default:,})")
    max_queue: int = _count(
        1024, "most sentences waiting for a decode (default {default:,}); a request that would exceed it gets 503"
    )
    max_source_tokens: int = _count(
        256, "most tokens per text once encoded (default {default:,}; an emoji is up to 4 tokens)"
    )
    max_request_tokens: int = _count(
        128 * 1024,
        "most decoding work per request, in tokens: beam size x (source tokens + most output tokens, "
        "1.5 x source + 10 or --max-output-tokens) summed over its texts (default {default:,})",
    )
    max_attention_weights: int = _count(
        256 * 1024,
        "most attention weights per answer with return_attention: source tokens x most output tokens "
        "summed over its texts (default {default:,}, a few megabytes of JSON)",
    )
    read_timeout: float = setting(
        10.0,
        limit=Limit(False, 0, low_open=True),
        help="seconds a client has to send its request line and headers, and as long for its body "
        "(default {default:g}); a slower client gets 408 and is disconnected",
    )
    allowed_hosts: Optional[Tuple[str, ...]] = setting(
        None,
        check=_hosts,
        option_check=host_list,
        help="comma-separated names accepted in the Host header besides localhost and loopback addresses "
        "(*.example.org: a domain and its subdomains; *: any). By default, requests that arrive on a loopback "
        "address must name localhost, 127.0.0.1 or [::1], so that a web page cannot reach the server by "
        "pointing its own domain at 127.0.0.1 (DNS rebinding); on other addresses any name is accepted",
        metavar="NAMES",
    )

    def __post_init__(self) -> None:
        check_settings(self)
        if self.beam_size > self.max_beam_size:
            raise ValueError(
                f"ServeConfig: beam_size {self.beam_size} is larger than max_beam_size {self.max_beam_size}"
            )


ServeConfig.__doc__ = (ServeConfig.__doc__ or "").replace("    {settings}", describe_settings(ServeConfig))

#: Most connections open at once; a connection over it gets 503 to its request and is closed.
DEFAULT_MAX_CONNECTIONS = 256
#: Seconds an idle keep-alive connection stays open (uvicorn's ``timeout_keep_alive``).
DEFAULT_KEEP_ALIVE_TIMEOUT = 5.0
#: Largest request line and headers of one request, in bytes; larger ones get 431.
DEFAULT_MAX_HEADER_BYTES = 16 * 1024


@dataclass(frozen=True)
class ServerOptions:
    """How ``transformer-cpp serve`` runs the server (:func:`~transformer_cpp.serve.serve`'s
    keywords): where it listens, its connection limits, shutdown and logs."""

    host: str = setting("127.0.0.1", help="address to listen on (default {default}: this machine only)")
    port: int = setting(8000, limit=Limit(True, 0, 65535), help="port (default {default}; 0 = any free port)")
    graceful_timeout: float = setting(
        30.0,
        limit=_WAIT,
        help="on SIGTERM, wait this many seconds for the requests in flight (default {default:g}; 0 = no wait); "
        "requests still unanswered then get 503",
    )
    keep_alive_timeout: float = setting(
        DEFAULT_KEEP_ALIVE_TIMEOUT,
        limit=Limit(False, 0, low_open=True),
        help="seconds an idle keep-alive connection stays open (default {default:g})",
    )
    max_connections: int = _count(
        DEFAULT_MAX_CONNECTIONS, "most connections open at once (default {default}); a connection over it gets 503"
    )
    max_header_bytes: int = setting(
        DEFAULT_MAX_HEADER_BYTES,
        limit=Limit(True, 256),
        help="largest request line and headers (default {default:,} bytes); larger get 431",
    )
    log_level: str = choice_setting(
        "info", ["critical", "error", "warning", "info", "debug"], "uvicorn's log level (default {default})"
    )
    access_log: bool = flag_setting("log every request")

    def __post_init__(self) -> None:
        check_settings(self)


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
    from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

    class TranslateRequest(BaseModel):
        """Give ``text`` or ``texts``."""

        model_config = ConfigDict(extra="forbid")
        text: Optional[StrictStr] = Field(None, description="one sentence to translate")
        texts: Optional[List[StrictStr]] = Field(None, description="several sentences, translated in order")
        beam_size: Optional[StrictInt] = Field(None, description="1 = greedy decoding; default: the server's")
        n_best: StrictInt = Field(1, description="hypotheses per text (at most beam_size)")
        return_attention: StrictBool = Field(False, description="include the cross-attention map of each translation")
        source: Optional[StrictStr] = Field(None, description="source language code; needed with several models")
        target: Optional[StrictStr] = Field(None, description="target language code; needed with several models")
        target_prefix: Optional[Union[StrictStr, List[StrictStr]]] = Field(
            None, description="text every translation starts with: one for all texts, or one per text"
        )
        constraints: Optional[Union[List[StrictStr], List[List[StrictStr]]]] = Field(
            None,
            description="texts every translation must contain: one list for all texts, or one per text "
            "(beam search, beam_size above the number of constraints)",
        )
        sampling_topk: Optional[StrictInt] = Field(None, description="above 1: draw each token among the k most likely")
        sampling_topp: Optional[Union[StrictInt, StrictFloat]] = Field(None, description="nucleus in (0, 1]")
        sampling_temperature: Optional[Union[StrictInt, StrictFloat]] = Field(None, description="above 0")
        seed: Optional[StrictInt] = Field(None, description="seed of the draws (the same seed, the same output)")

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
        constraints_missing: Optional[int] = Field(None, description="with constraints: how many it lacks")

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
