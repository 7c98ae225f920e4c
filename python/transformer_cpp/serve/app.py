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
import html
import json
import signal
import socket
import threading
import time
from dataclasses import asdict
from importlib import resources
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .._version import __version__
from ..translate import EncodedSource, Translator, encode_source
from .config import (
    DEFAULT_KEEP_ALIVE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HEADER_BYTES,
    SERVE_EXTRA_HINT,
    ClientGone,
    ServeConfig,
    ServeError,
    api_models,
    check_texts,
    check_work,
    field_name,
    is_form,
    parse_request,
    read_json_body,
)
from .detect import LanguageDetector
from .libretranslate import is_libre_request, libre_answer, parse_libre_request
from .protocol import Boundary, guarded_protocol, host_refusal, uvicorn_choices
from .registry import ModelRegistry, ServedModel
from .search import SearchFields, encode_search, parse_search

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = [
    "DEFAULT_KEEP_ALIVE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_HEADER_BYTES",
    "PAGE_HTML",
    "ModelRegistry",
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


def _error_handlers(app: FastAPI) -> None:
    """Every error answered as ``{"error": message, "status": code}``."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

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


async def _decode(
    request: Any,
    model: ServedModel,
    config: ServeConfig,
    texts: List[str],
    decoding: Tuple[int, int, bool],
    where: Callable[[int], str],
    search: SearchFields = SearchFields(),
) -> List[Dict[str, Any]]:
    """Encode (off the loop), check the work, queue in the model's batcher and wait for the
    results; a client that disconnects meanwhile has its waiting sentences dropped. ``search``:
    the request's prefix, constraints and sampling (:func:`parse_search`)."""
    beam_size, n_best, attention = decoding
    batcher = model.batcher
    loop = asyncio.get_running_loop()
    encoded = await loop.run_in_executor(None, _encode_texts, model.translator, texts, where)
    options = batcher.decode_options(beam_size, n_best, **search.sampling)
    lengths = [len(e.ids) for e in encoded]
    limits = [options.limit(n) for n in lengths]
    work = check_work(lengths, limits, beam_size, attention, config, where)
    prefixes, constraints = await loop.run_in_executor(None, encode_search, model.translator, search, limits, where)
    job = batcher.enqueue(
        encoded,
        beam_size=beam_size,
        n_best=n_best,
        return_attention=attention,
        work=work,
        sampling=search.sampling,
        target_prefix=prefixes,
        constraints=constraints,
    )
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


def _libre_model(
    registry: ModelRegistry, detector: LanguageDetector, req: Any
) -> Tuple[ServedModel, Optional[Dict[str, Any]]]:
    """The model of a LibreTranslate request, and for ``source: "auto"`` the language found."""
    if req.source is not None:
        return registry.pick(req.source, req.target), None
    candidates = registry.sources(req.target)
    if len(candidates) <= 1:  # one source to choose: taken, not detected
        return registry.pick(candidates[0] if candidates else "auto", req.target), (
            {"language": candidates[0], "confidence": 0.0} if candidates else None
        )
    found = detector.detect(" ".join(req.texts), among=candidates)
    return registry.pick(found[0]["language"], req.target), found[0]


async def _answer(payload: Dict[str, Any]) -> Any:
    from fastapi.responses import Response

    body = await asyncio.get_running_loop().run_in_executor(None, _render, payload)
    return Response(body, media_type="application/json")


def _translate_route(app: FastAPI, registry: ModelRegistry, detector: LanguageDetector, config: ServeConfig) -> None:
    """``POST /translate``: the server's JSON API and LibreTranslate's. The body is read and
    checked here (not by FastAPI) to answer each kind of bad request with its own status;
    openapi_extra documents it."""
    from fastapi import Request

    models = api_models()

    async def translate(request: Request) -> Any:
        body = await read_json_body(request, config, forms=True)
        if is_libre_request(body):  # LibreTranslate's fields (q, source, target, ...)
            req = parse_libre_request(body, config, registry.pairs())
            model, detected = _libre_model(registry, detector, req)
            where: Callable[[int], str] = (lambda i: f"q[{i}]") if req.as_list else (lambda i: "q")
            results = await _decode(request, model, config, req.texts, (req.beam_size, req.n_best, False), where)
            return await _answer(libre_answer(req, results, detected))
        if is_form(request.headers.get("content-type")):
            raise ServeError(
                415,
                "send the request as JSON (Content-Type: application/json); forms are accepted only with "
                "LibreTranslate's fields (q, source, target)",
            )
        texts, beam_size, n_best, attention = parse_request(body, config)
        search = parse_search(body, len(texts), beam_size, config)
        model = registry.pick(body.get("source"), body.get("target"))
        where = (lambda i: "text") if body.get("text") is not None else (lambda i: f"texts[{i}]")
        results = await _decode(request, model, config, texts, (beam_size, n_best, attention), where, search)
        return await _answer({"translations": results, "beam_size": beam_size, "n_best": n_best})

    translate.__annotations__["request"] = Request  # a class, not the string of the postponed annotation
    error_doc = {"model": models["error"]}
    example = {"text": "you should pay for it.", "beam_size": 4}
    app.post(
        "/translate",
        summary="Translate one or more sentences",
        responses={200: {"model": models["response"]}, **{code: error_doc for code in (400, 408, 413, 415, 422, 503)}},
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": models["request"].model_json_schema(), "example": example}},
            }
        },
    )(translate)


def _detect_route(app: FastAPI, detector: LanguageDetector, config: ServeConfig) -> None:
    """``POST /detect``: LibreTranslate's language detection among the served source languages."""
    from fastapi import Request

    async def detect(request: Request) -> Any:
        body = await read_json_body(request, config, forms=True)
        if not isinstance(body, dict) or "q" not in body:
            raise ServeError(400, "q is missing: give the text to detect as q (a string or a list of strings)")
        unknown = sorted(k for k in body if k not in ("q", "api_key"))
        if unknown:
            raise ServeError(400, f"unknown field(s) {', '.join(map(repr, unknown))}; a detect request has q, api_key")
        q = body["q"]
        texts = q if isinstance(q, list) else [q]
        if not texts or not all(isinstance(t, str) for t in texts):
            raise ServeError(400, "q must be a string or a non-empty list of strings")
        check_texts(texts, config, lambda i: f"q[{i}]" if isinstance(q, list) else "q", status=400)
        loop = asyncio.get_running_loop()
        found = [await loop.run_in_executor(None, detector.detect, t) for t in texts]
        return found if isinstance(q, list) else found[0]

    detect.__annotations__["request"] = Request
    app.post("/detect", summary="Detect the language of a text (LibreTranslate's form)")(detect)


def _info_routes(app: FastAPI, registry: ModelRegistry, config: ServeConfig) -> None:
    """``/languages``, ``/health``, ``/info``, the page and ``/docs``."""
    from fastapi.responses import HTMLResponse, JSONResponse

    @app.get("/languages", summary="The models' languages, in LibreTranslate's form")
    async def languages() -> Any:
        return registry.language_list()

    @app.get("/health", summary="Liveness, with the batchers' counters")
    async def health() -> Any:
        per_model = []
        for m in registry.models:
            stats: Dict[str, Any] = dict(m.batcher.stats, queued=m.batcher.queued)
            stats["mean_batch"] = round(stats["sentences"] / stats["batches"], 3) if stats["batches"] else None
            per_model.append({"source_language": m.source, "target_language": m.target, "batcher": stats})
        if any(m.batcher.closing for m in registry.models):
            return JSONResponse({"status": "shutting down", "batcher": per_model[0]["batcher"]}, status_code=503)
        return {"status": "ok", **per_model[0], "models": per_model}

    @app.get("/info", summary="The models, their checkpoints, the package version and the server's limits")
    async def info() -> Any:
        return registry.info(config)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> Any:
        return HTMLResponse(PAGE_HTML)

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs() -> Any:
        return HTMLResponse(
            _docs_page(app.openapi()),
            headers={"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'"},
        )


def create_app(
    translator: Union[Translator, Sequence[Translator]],
    config: Optional[ServeConfig] = None,
    *,
    threads: Optional[int] = None,
    **options: Any,
) -> Any:
    """The ASGI app (FastAPI) serving ``translator``; see :mod:`transformer_cpp.serve` for the API.

    Args:
        translator: a :class:`~transformer_cpp.translate.Translator`, or several, one per language
            pair (two of the same pair: ``ValueError``). The app's batchers own them: do not use
            their models elsewhere while the app runs.
        config: a :class:`ServeConfig`, or its fields as keyword ``options``
            (``max_batch=32, max_wait_ms=5, ...``).
        threads: C++ threads of the decoding (default: the count of the calling thread,
            :func:`transformer_cpp.get_num_threads`).

    Each model has its own batcher, started with the app's lifespan (or on the first request when
    the host does not run lifespans) and closed at lifespan shutdown (requests still queued then
    get 503). ``app.state.batcher`` is the first model's, ``app.state.registry`` has them all.
    """
    try:
        from fastapi import FastAPI
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(f"{SERVE_EXTRA_HINT} ({exc})") from exc

    if config is None:
        config = ServeConfig(**options)
    elif options:
        config = ServeConfig(**{**asdict(config), **options})
    translators = [translator] if isinstance(translator, Translator) else list(translator)
    registry = ModelRegistry(translators, config, threads)
    detector = LanguageDetector(registry.sources())

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):  # type: ignore[no-untyped-def]
        for m in registry.models:
            m.batcher.start()
        try:
            yield
        finally:
            for m in registry.models:
                await m.batcher.close()

    description = "Translate with trained transformer-cpp models. Concurrent requests are batched."
    # no Swagger UI or ReDoc: both load their scripts from a CDN; /docs is a page of its own
    app = FastAPI(
        title="transformer-cpp translator",
        version=__version__,
        lifespan=lifespan,
        description=description,
        docs_url=None,
        redoc_url=None,
    )
    app.state.registry = registry
    app.state.batcher = registry.models[0].batcher
    app.state.translator = registry.models[0].translator
    app.state.config = config
    app.add_middleware(Boundary, allowed_hosts=config.allowed_hosts)
    _error_handlers(app)
    _translate_route(app, registry, detector, config)
    _detect_route(app, detector, config)
    _info_routes(app, registry, config)
    return app


# ------------------------------------------------------------------------------------ uvicorn


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
    translator: Union[Translator, Sequence[Translator]],
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
