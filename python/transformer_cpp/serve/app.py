"""The ASGI app (:func:`create_app`: FastAPI routes over a :class:`~transformer_cpp.serve.Batcher`)
and the ways to run it with uvicorn: :func:`serve` in the foreground until a signal,
:func:`background_server` in a thread.

uvicorn runs with the C HTTP parser ``httptools`` and the ``uvloop`` event loop when they are
importable (the ``serve`` extra installs both), else with the pure-Python ``h11`` parser and
asyncio's loop (:func:`uvicorn_choices`); either parser runs inside :func:`guarded_protocol`,
which bounds how long a client may take to send a request, how large its headers may be and how
many connections may be open.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import html
import http
import importlib
import ipaddress
import json
import logging
import signal
import socket
import threading
import time
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from .._version import __version__
from ..text import language_name
from ..translate import EncodedSource, Translator, encode_source
from .batcher import Batcher
from .config import (
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEADER_BYTES,
    SERVE_EXTRA_HINT,
    ClientGone,
    ServeConfig,
    ServeError,
    api_models,
    check_work,
    field_name,
    is_form,
    parse_request,
    read_json_body,
)
from .libretranslate import is_libre_request, language_list, libre_answer, parse_libre_request

__all__ = [
    "DEFAULT_KEEP_ALIVE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_HEADER_BYTES",
    "PAGE_HTML",
    "background_server",
    "create_app",
    "guarded_protocol",
    "host_refusal",
    "serve",
    "uvicorn_choices",
]

#: The web page served at ``/``: a text box, the translation and the cross-attention map of the
#: last translation as an SVG heat map (``page.html``, package data).
PAGE_HTML = resources.files("transformer_cpp.serve").joinpath("page.html").read_text(encoding="utf-8")

# uvicorn's logger: its lines look like uvicorn's own and follow --log-level
_log = logging.getLogger("uvicorn.error")


def uvicorn_choices() -> Dict[str, str]:
    """uvicorn's ``http`` and ``loop`` settings: ``httptools`` (a C HTTP parser) and ``uvloop``
    when they can be imported (the ``serve`` extra installs both), else the pure-Python ``h11``
    and asyncio's own loop. Chosen here rather than left to uvicorn's ``auto`` so that the
    command line can say what it runs and the bench can record it."""

    def importable(name: str) -> bool:
        try:
            importlib.import_module(name)
        except Exception:  # ImportError, or a broken build of the module
            return False
        return True

    return {
        "http": "httptools" if importable("httptools") else "h11",
        "loop": "uvloop" if importable("uvloop") else "asyncio",
    }


def _checkpoint_name(path: Any) -> Optional[str]:
    """The checkpoint as ``/info`` shows it: its run directory's name and its own
    (``quick/epoch-0003``), not the absolute path, which would tell clients about the machine."""
    if path is None:
        return None
    p = Path(path)
    return f"{p.parent.name}/{p.name}" if p.parent.name else p.name


def _languages(translator: Translator) -> Optional[str]:
    """``"English -> Spanish"``: the model's direction as a person reads it (None when unknown)."""
    if translator.src_lang is None or translator.tgt_lang is None:
        return None
    return f"{language_name(translator.src_lang)} -> {language_name(translator.tgt_lang)}"


def _info(translator: Translator, config: ServeConfig, threads: int) -> Dict[str, Any]:
    """The answer of ``GET /info``."""
    return {
        "name": "transformer-cpp",
        "version": __version__,
        "checkpoint": _checkpoint_name(translator.checkpoint),
        "model": dict(translator.model.config),
        "vocab_sizes": {
            "source": int(translator.src_tokenizer.vocab_size),
            "target": int(translator.tgt_tokenizer.vocab_size),
        },
        "source_language": translator.src_lang,
        "target_language": translator.tgt_lang,
        "languages": _languages(translator),
        "trained_length": translator.trained_length,
        "max_output_tokens": translator.max_output_tokens,
        "compute_type": translator.compute_type,
        "threads": threads,
        "batching": {
            "max_batch": config.max_batch,
            "max_wait_ms": config.max_wait_ms,
            "max_batch_tokens": config.max_batch_tokens,
            "batch_seconds": config.batch_seconds,
        },
        "defaults": {"beam_size": config.beam_size, "length_penalty": config.length_penalty},
        "limits": {
            "max_request_bytes": config.max_request_bytes,
            "max_texts": config.max_texts,
            "max_chars": config.max_chars,
            "max_beam_size": config.max_beam_size,
            "max_queue": config.max_queue,
            "max_source_tokens": config.max_source_tokens,
            "max_request_tokens": config.max_request_tokens,
            "max_attention_weights": config.max_attention_weights,
            "read_timeout": config.read_timeout,
        },
    }


# ------------------------------------------------------------------------------------ the boundary


def _host_name(header: str) -> str:
    """The host of a ``Host`` header, lower case, without its port and final dot."""
    value = header.strip().lower()
    if value.startswith("["):  # [::1]:8000
        end = value.find("]")
        name = value[: end + 1] if end > 0 else value
    else:
        name = value.rsplit(":", 1)[0] if value.count(":") == 1 else value
    return name.rstrip(".")


def _is_loopback(name: str) -> bool:
    """Whether a host name or address (``[::1]`` bracketed or not) names this machine."""
    if name == "localhost":
        return True
    address = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(
        p == "*" or p == name or (p.startswith("*.") and (name == p[2:] or name.endswith(p[1:]))) for p in patterns
    )


def host_refusal(scope: Dict[str, Any], allowed_hosts: Optional[Tuple[str, ...]]) -> Optional[str]:
    """Why a request's ``Host`` header is refused, or ``None`` when it is accepted.

    With ``allowed_hosts=None`` the check applies when the connection arrived on a loopback
    address (``scope["server"]``): only ``localhost`` and loopback addresses are accepted, so that
    a web page whose own domain name resolves to 127.0.0.1 (DNS rebinding) cannot call the server.
    With ``allowed_hosts``, those names are accepted besides the loopback ones, on any address
    (``"*"``: any name)."""
    if allowed_hosts is None:
        server = scope.get("server")
        if not server or not isinstance(server[0], str) or not _is_loopback(server[0]):
            return None
        patterns: Tuple[str, ...] = ()
    elif "*" in allowed_hosts:
        return None
    else:
        patterns = allowed_hosts
    values = [v for k, v in scope.get("headers", ()) if k == b"host"]
    accepted = "localhost, 127.0.0.1 or [::1]" + (f" or {', '.join(patterns)}" if patterns else "")
    hint = f"this server answers requests for {accepted} (allowed_hosts; --allowed-hosts on the command line)"
    if len(values) != 1:
        return f"the request has {'no' if not values else 'several'} Host header{'s' if values else ''}; {hint}"
    header = values[0].decode("latin-1")
    name = _host_name(header)
    if _is_loopback(name) or _matches(name, patterns):
        return None
    return f"the Host header {header[:100]!r} is not a name of this server; {hint}"


async def _send_json(
    send: Callable[..., Any], status: int, message: str, headers: Sequence[Tuple[str, str]] = ()
) -> None:
    body = json.dumps({"error": message, "status": status}).encode("utf-8")
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("ascii"))]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _who(scope: Dict[str, Any]) -> str:
    client = scope.get("client")
    where = f"{client[0]}:{client[1]}" if client else "a client"
    return f"{where} - {scope.get('method', '')} {scope.get('path', '')}"


class _Boundary:
    """The app's outermost layer of its own (inside Starlette's error middleware): the ``Host``
    check (:func:`host_refusal`), and everything a request can raise answered as JSON with one
    log line, never a traceback. A client that left is logged (``disconnected``); a request
    cancelled by the server's shutdown gets 503; anything else, an ``Exception`` or not (the
    ``tokenizers`` library panics with a ``BaseException``), gets 500."""

    def __init__(self, app: Any, allowed_hosts: Optional[Tuple[str, ...]] = None) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = host_refusal(scope, self.allowed_hosts)
        if refused is not None:
            _log.warning("%s: refused: %s", _who(scope), refused)
            await _send_json(send, 400, refused)
            return
        started = False

        async def tracked(message: Dict[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()  # the answer below is this task's last work
            _log.info("%s: cancelled: the server is shutting down", _who(scope))
            if not started:
                await _send_json(
                    send, 503, "the server shut down before answering this request", [("Retry-After", "1")]
                )
        except ClientGone as exc:
            _log.info("%s: %s", _who(scope), exc)
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            if type(exc).__name__ == "ClientDisconnect":  # Starlette's, raised while reading a body
                _log.info("%s: the client disconnected while sending its request", _who(scope))
                return
            message = " ".join(f"{type(exc).__name__}: {exc}".split())[:1000]
            _log.error("%s: internal error: %s", _who(scope), message)
            _log.debug("the internal error's traceback", exc_info=exc)
            if not started:
                await _send_json(send, 500, f"internal error: {message}")


# ------------------------------------------------------------------------------------ the app


def _encode_texts(translator: Translator, texts: Sequence[str], where: Callable[[int], str]) -> List[EncodedSource]:
    """Every text cleaned and encoded (in a worker thread, off the event loop), or
    :class:`ServeError`: 422 for a text that cannot be translated, 500 when the model's tokenizer
    fails (a tokenizer file that raises or panics)."""
    encoded: List[EncodedSource] = []
    for i, text in enumerate(texts):
        try:
            enc = encode_source(translator, text)
        except (TypeError, ValueError) as exc:  # e.g. a lone surrogate ("\\ud800" in the JSON)
            raise ServeError(422, f"{where(i)} cannot be translated: {exc}") from None
        except BaseException as exc:  # the tokenizers library panics with a BaseException
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            detail = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
            raise ServeError(500, f"the model's source tokenizer failed on {where(i)}: {detail}") from None
        if not enc.source:
            raise ServeError(422, f"{where(i)} has nothing to translate once cleaned")
        encoded.append(enc)
    return encoded


def _render(payload: Dict[str, Any]) -> bytes:
    """A JSON answer as bytes, as Starlette's ``JSONResponse`` writes it (run off the event loop:
    an answer with attention maps is megabytes)."""
    return json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


async def _client_left(receive: Callable[[], Any]) -> None:
    """Returns when the client disconnects (called once the request's body has been read: the
    server's next message is then ``http.disconnect``; a server that says anything else is not
    watched further)."""
    message = await receive()
    if message.get("type") != "http.disconnect":
        await asyncio.get_running_loop().create_future()  # never set: cancelled with the request


def _docs_page(schema: Dict[str, Any]) -> str:
    """``GET /docs``: the routes and the OpenAPI schema as one page with no script and nothing
    loaded from elsewhere."""
    rows = []
    for path, operations in schema.get("paths", {}).items():
        for method, op in operations.items():
            rows.append(
                f"<tr><td>{html.escape(method.upper())}</td><td><code>{html.escape(path)}</code></td>"
                f"<td>{html.escape(str(op.get('summary', '')))}</td></tr>"
            )
    info = schema.get("info", {})
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(str(info.get('title', '')))} - API</title>"
        "<style>body{font:15px/1.4 system-ui,sans-serif;margin:2em;max-width:70em}"
        "td{padding:.2em .8em;border-bottom:1px solid #ddd}pre{background:#f6f6f6;padding:1em;overflow:auto}"
        "</style></head><body>"
        f"<h1>{html.escape(str(info.get('title', '')))} {html.escape(str(info.get('version', '')))}</h1>"
        f"<p>{html.escape(str(info.get('description', '')))}</p>"
        f"<table>{''.join(rows)}</table>"
        '<p>The OpenAPI schema: <a href="openapi.json">openapi.json</a></p>'
        f"<pre>{html.escape(json.dumps(schema, indent=2))}</pre></body></html>"
    )


def create_app(
    translator: Translator, config: Optional[ServeConfig] = None, *, threads: Optional[int] = None, **options: Any
) -> Any:
    """The ASGI app (FastAPI) serving ``translator``; see :mod:`transformer_cpp.serve` for the API.

    Args:
        translator: a :class:`~transformer_cpp.translate.Translator`. The app's batcher owns it:
            do not use its model elsewhere while the app runs.
        config: a :class:`ServeConfig`, or its fields as keyword ``options``
            (``max_batch=32, max_wait_ms=5, ...``).
        threads: C++ threads of the decoding (default: the count of the calling thread,
            :func:`transformer_cpp.get_num_threads`).

    The batcher starts with the app's lifespan (or on the first request when the host does not
    run lifespans) and is closed at lifespan shutdown (requests still queued then get 503). It is
    ``app.state.batcher``.
    """
    try:
        from fastapi import FastAPI, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import HTMLResponse, JSONResponse, Response
        from starlette.exceptions import HTTPException as StarletteHTTPException
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(f"{SERVE_EXTRA_HINT} ({exc})") from exc

    if config is None:
        config = ServeConfig(**options)
    elif options:
        config = ServeConfig(**{**asdict(config), **options})
    batcher = Batcher(translator, config, threads)
    models = api_models()

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):  # type: ignore[no-untyped-def]
        batcher.start()
        try:
            yield
        finally:
            await batcher.close()

    description = "Translate with a trained transformer-cpp model. Concurrent requests are batched."
    # no Swagger UI or ReDoc: both load their scripts from a CDN; /docs is a page of its own
    app = FastAPI(
        title="transformer-cpp translator",
        version=__version__,
        lifespan=lifespan,
        description=description,
        docs_url=None,
        redoc_url=None,
    )
    app.state.batcher = batcher
    app.state.translator = translator
    app.state.config = config
    app.add_middleware(_Boundary, allowed_hosts=config.allowed_hosts)

    def error_response(status: int, message: str, details: Any = None, headers: Optional[Dict[str, str]] = None) -> Any:
        body: Dict[str, Any] = {"error": message, "status": status}
        if details:
            body["details"] = details
        return JSONResponse(body, status_code=status, headers=headers)

    @app.exception_handler(ServeError)
    async def _serve_error(request: Any, exc: ServeError) -> Any:
        return error_response(exc.status, exc.message, exc.details, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Any, exc: Any) -> Any:
        return error_response(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Any, exc: Any) -> Any:
        details = [{"field": field_name(e.get("loc", ())), "message": e.get("msg", "")} for e in exc.errors()]
        return error_response(422, "invalid request", details)

    @app.exception_handler(Exception)
    async def _internal_error(request: Any, exc: Exception) -> Any:
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}")

    error_doc = {"model": models["error"]}

    # The body is read and checked here (not by FastAPI) to answer each kind of bad request with
    # its own status; openapi_extra documents it.
    async def decode(
        request: Request, texts: List[str], beam_size: int, n_best: int, attention: bool, where: Callable[[int], str]
    ) -> List[Dict[str, Any]]:
        """Encode (off the loop), check the work, queue in the batcher and wait for the results;
        a client that disconnects meanwhile has its waiting sentences dropped."""
        loop = asyncio.get_running_loop()
        encoded = await loop.run_in_executor(None, _encode_texts, translator, texts, where)
        options = batcher.decode_options(beam_size, n_best)
        lengths = [len(e.ids) for e in encoded]
        work = check_work(lengths, [options.limit(n) for n in lengths], beam_size, attention, config, where)
        job = batcher.enqueue(encoded, beam_size=beam_size, n_best=n_best, return_attention=attention, work=work)
        watch: asyncio.Future[None] = asyncio.ensure_future(_client_left(request.receive))
        try:
            waiting: List[asyncio.Future[Any]] = [job.future, watch]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if not job.future.done():
                raise ClientGone(f"the client disconnected; its {len(encoded)} sentences were not all decoded")
            results: List[Dict[str, Any]] = job.future.result()
            return results
        finally:
            watch.cancel()
            job.cancel()  # nothing when it is answered; else its waiting sentences are dropped

    source_lang = getattr(translator, "src_lang", None)
    target_lang = getattr(translator, "tgt_lang", None)

    async def translate(request: Request) -> Any:
        body = await read_json_body(request, config, forms=True)
        loop = asyncio.get_running_loop()
        if is_libre_request(body):  # LibreTranslate's fields (q, source, target, ...)
            req = parse_libre_request(body, config, source_lang, target_lang)
            where: Callable[[int], str] = (lambda i: f"q[{i}]") if req.as_list else (lambda i: "q")
            results = await decode(request, req.texts, req.beam_size, req.n_best, False, where)
            answer = libre_answer(req, results, str(source_lang))
            return Response(await loop.run_in_executor(None, _render, answer), media_type="application/json")
        if is_form(request.headers.get("content-type")):
            raise ServeError(
                415,
                "send the request as JSON (Content-Type: application/json); forms are accepted only with "
                "LibreTranslate's fields (q, source, target)",
            )
        texts, beam_size, n_best, attention = parse_request(body, config)
        single = isinstance(body, dict) and body.get("text") is not None
        where = (lambda i: "text") if single else (lambda i: f"texts[{i}]")
        results = await decode(request, texts, beam_size, n_best, attention, where)
        payload = {"translations": results, "beam_size": beam_size, "n_best": n_best}
        return Response(await loop.run_in_executor(None, _render, payload), media_type="application/json")

    translate.__annotations__["request"] = Request  # a class, not the string of the postponed annotation
    app.post(
        "/translate",
        summary="Translate one or more sentences",
        responses={
            200: {"model": models["response"]},
            400: error_doc,
            408: error_doc,
            413: error_doc,
            415: error_doc,
            422: error_doc,
            503: error_doc,
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": models["request"].model_json_schema(),
                        "example": {"text": "you should pay for it.", "beam_size": 4},
                    }
                },
            }
        },
    )(translate)

    @app.get("/languages", summary="The model's languages, in LibreTranslate's form")
    async def languages() -> Any:
        return language_list(source_lang, target_lang)

    @app.get("/health", summary="Liveness, with the batcher's counters")
    async def health() -> Any:
        stats: Dict[str, Any] = dict(batcher.stats, queued=batcher.queued)
        stats["mean_batch"] = round(stats["sentences"] / stats["batches"], 3) if stats["batches"] else None
        if batcher.closing:
            return JSONResponse({"status": "shutting down", "batcher": stats}, status_code=503)
        return {
            "status": "ok",
            "source_language": source_lang,
            "target_language": target_lang,
            "batcher": stats,
        }

    @app.get("/info", summary="The model, its checkpoint, the package version and the server's limits")
    async def info() -> Any:
        return _info(translator, config, batcher.threads)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> Any:
        return HTMLResponse(PAGE_HTML)

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs() -> Any:
        return HTMLResponse(
            _docs_page(app.openapi()),
            headers={"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"},
        )

    return app


# ------------------------------------------------------------------------------------ HTTP layer


def _raw_json_response(status: int, message: str) -> bytes:
    """A whole HTTP/1.1 response with a JSON error body, for the protocol to write itself."""
    body = json.dumps({"error": message, "status": status}).encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def guarded_protocol(
    http_protocol: Any = None,
    *,
    read_timeout: float = ServeConfig.read_timeout,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
) -> type:
    """uvicorn's HTTP protocol ``http_protocol`` (``"httptools"``, ``"h11"`` or a protocol class;
    default: :func:`uvicorn_choices`'s) with three guards uvicorn lacks, as a class for
    ``uvicorn.Config(http=...)``:

    * a client has ``read_timeout`` seconds from its request's first byte (or from connecting)
      to send the request line and headers, else it gets 408 and the connection is closed; its
      body has as long again (the app answers 408 when it reads a body that does not arrive in
      time, see :func:`~transformer_cpp.serve.read_json_body`; a body nobody reads is cut off);
    * request line and headers over ``max_header_bytes`` get 431 and the connection is closed;
    * a connection beyond ``max_connections`` open ones gets 503 to its request and is closed.

    Idle keep-alive connections are uvicorn's (``timeout_keep_alive``). The errors are JSON, as
    the app's are.
    """
    from uvicorn.config import HTTP_PROTOCOLS
    from uvicorn.importer import import_from_string

    if http_protocol is None:
        http_protocol = uvicorn_choices()["http"]
    base = import_from_string(HTTP_PROTOCOLS[http_protocol]) if isinstance(http_protocol, str) else http_protocol
    overloaded = (
        503,
        f"the server has {max_connections} connections open, the most it keeps (max_connections); retry later",
    )
    too_large = (431, f"the request line and headers are over {max_header_bytes:,} bytes (max_header_bytes)")

    async def guard(inner: Any, over_capacity: bool, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        """The app behind a connection: 503 over the connection cap, 431 for headers over the
        limit (they arrived whole in one read), else ``inner``."""
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        size += sum(len(k) + len(v) + 4 for k, v in scope.get("headers", ()))
        refusal = overloaded if over_capacity else too_large if size > max_header_bytes else None
        if refusal is None:
            await inner(scope, receive, send)
            return
        _log.info("%s: %s", _who(scope), refusal[1])
        headers = [("Connection", "close")] + ([("Retry-After", "1")] if refusal[0] == 503 else [])
        await _send_json(send, refusal[0], refusal[1], headers)

    class GuardedProtocol(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._deadline: Optional[asyncio.TimerHandle] = None
            self._partial = 0  # bytes of request line and headers received so far
            over_capacity = len(self.connections) > max_connections
            if over_capacity:
                _log.warning("%s: over %d connections open (max_connections)", self._peer(), max_connections)
            inner: Any = getattr(self, "app")  # uvicorn's app, set by the base class
            self.app = functools.partial(guard, inner, over_capacity)
            self._arm()

        def _peer(self) -> str:
            client = getattr(self, "client", None)
            return f"{client[0]}:{client[1]}" if client else "a client"

        def _between_requests(self) -> bool:
            cycle = getattr(self, "cycle", None)
            return cycle is None or bool(cycle.response_complete)

        def _arm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
            self._deadline = self.loop.call_later(read_timeout, self._expired)

        def data_received(self, data: bytes) -> None:
            if self._between_requests() and self._partial == 0:
                self._arm()  # the first bytes of a request: its clock starts
            super().data_received(data)
            if self.transport.is_closing():
                return
            if self._between_requests():
                self._partial += len(data)
                if self._partial > max_header_bytes:
                    self._refuse(*too_large)
            else:
                self._partial = 0

        def _expired(self) -> None:
            self._deadline = None
            if self.transport is None or self.transport.is_closing():
                return
            if self._between_requests():
                if getattr(self, "cycle", None) is None or self._partial:
                    self._refuse(408, f"the request did not arrive within {read_timeout:g} seconds (read_timeout)")
                # else an idle keep-alive connection, which uvicorn closes after timeout_keep_alive
            elif self.cycle.more_body:  # the body is still coming: the app times it out; else cut it off
                self._deadline = self.loop.call_later(read_timeout, self._cut)

        def _cut(self) -> None:
            self._deadline = None
            cycle = getattr(self, "cycle", None)
            if (
                cycle is not None
                and cycle.more_body
                and not cycle.response_complete
                and not self.transport.is_closing()
            ):
                _log.info("%s: connection closed: its request body did not arrive in time (read_timeout)", self._peer())
                self.transport.close()

        def _refuse(self, status: int, message: str) -> None:
            _log.info("%s: %s", self._peer(), message)
            self.transport.write(_raw_json_response(status, message))
            self.transport.close()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            deadline = getattr(self, "_deadline", None)
            if deadline is not None:
                deadline.cancel()
                self._deadline = None
            super().connection_lost(exc)

    GuardedProtocol.__name__ = GuardedProtocol.__qualname__ = f"Guarded{base.__name__}"
    return GuardedProtocol


def _raise_open_files_limit(needed: int) -> None:
    """Raise this process's soft limit of open files towards ``needed`` (at most to the hard
    limit), so that ``max_connections`` connections do not run out of file descriptors."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (OSError, ValueError):
        pass


def serve(
    translator: Translator,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    config: Optional[ServeConfig] = None,
    graceful_timeout: Optional[float] = 30.0,
    log_level: str = "info",
    access_log: bool = False,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
) -> int:
    """Run the app with uvicorn until SIGTERM or Ctrl-C; returns 0 after a graceful shutdown.

    On a signal uvicorn stops accepting connections and waits up to ``graceful_timeout`` seconds
    (0: not at all; ``None``: until they end) for the requests in flight; requests still running
    then get 503, requests still queued too, and the decode in progress is finished. The HTTP
    guards (``config.read_timeout``, ``max_connections``, ``max_header_bytes``) are
    :func:`guarded_protocol`'s; ``keep_alive_timeout`` is uvicorn's ``timeout_keep_alive``. The
    process's soft limit of open files is raised (up to its hard limit) to leave room for
    ``max_connections`` connections.
    """
    try:
        import uvicorn
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(f"{SERVE_EXTRA_HINT} ({exc})") from exc

    config = config or ServeConfig()
    app = create_app(translator, config)
    choices = uvicorn_choices()
    _raise_open_files_limit(max_connections + 256)
    # uvicorn annotates the timeouts as int but waits with asyncio (seconds as float)
    options: Dict[str, Any] = dict(
        host=host,
        port=port,
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=graceful_timeout,
        timeout_keep_alive=keep_alive_timeout,
        h11_max_incomplete_event_size=max_header_bytes,
        lifespan="on",
        ws="none",
        loop=choices["loop"],
        http=guarded_protocol(
            choices["http"],
            read_timeout=config.read_timeout,
            max_connections=max_connections,
            max_header_bytes=max_header_bytes,
        ),
    )
    server = uvicorn.Server(uvicorn.Config(app, **options))
    # uvicorn re-raises the signal it shut down on after restoring the previous handlers; make
    # those handlers no-ops while serving, so that a graceful shutdown ends with status 0.
    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[sig] = signal.signal(sig, lambda *_: None)
        except ValueError:  # not the main thread: uvicorn does not install handlers either
            pass
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if server.started else 1


@contextlib.contextmanager
def background_server(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    log_level: str = "warning",
    start_timeout: float = 60.0,
    **uvicorn_options: Any,
) -> Iterator[str]:
    """Run ``app`` with uvicorn in a background thread (for tests, benchmarks and notebooks);
    yields its base URL, ``http://host:port`` (``port=0``: a free port). The server is stopped
    gracefully when the block ends. ``uvicorn_options`` go to ``uvicorn.Config`` (e.g.
    ``timeout_keep_alive``, or ``http`` and ``loop`` instead of :func:`uvicorn_choices`); the
    parser runs inside :func:`guarded_protocol` with the app's ``read_timeout`` unless ``http``
    is a protocol class."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio's loop turns Nagle's algorithm off (TCP_NODELAY) only
    # on connections of a socket whose protocol says TCP (uvloop does it on any). With Nagle on,
    # uvicorn's response (headers, then body: two writes) would wait for the client's delayed ACK,
    # up to 40 ms per request on Linux. The listening socket gets TCP_NODELAY too (Linux hands it
    # on to accepted connections).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    bound = sock.getsockname()[1]
    options = dict(dict(lifespan="on", timeout_graceful_shutdown=30, ws="none", **uvicorn_choices()), **uvicorn_options)
    if isinstance(options["http"], str):
        config = getattr(getattr(app, "state", None), "config", None)
        read_timeout = config.read_timeout if isinstance(config, ServeConfig) else ServeConfig.read_timeout
        options["http"] = guarded_protocol(options["http"], read_timeout=read_timeout)
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, **options))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    try:
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("background_server: the server did not start")
            time.sleep(0.01)
        yield f"http://{'[' + host + ']' if ':' in host else host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()
