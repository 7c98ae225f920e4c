"""The ASGI app (:func:`create_app`: FastAPI routes over a :class:`~transformer_cpp.serve.Batcher`)
and the ways to run it with uvicorn: :func:`serve` in the foreground until a signal,
:func:`background_server` in a thread.

uvicorn runs with the C HTTP parser ``httptools`` and the ``uvloop`` event loop when they are
importable (the ``serve`` extra installs both), else with the pure-Python ``h11`` parser and
asyncio's loop (:func:`uvicorn_choices`).
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import socket
import threading
import time
from dataclasses import asdict
from importlib import resources
from typing import Any, Dict, Iterator, List, Optional

from .._version import __version__
from ..translate import Translator
from .batcher import Batcher, EncodedText, encode_text
from .config import SERVE_EXTRA_HINT, ServeConfig, ServeError, api_models, field_name, parse_request, read_json_body

__all__ = ["PAGE_HTML", "background_server", "create_app", "serve", "uvicorn_choices"]

#: The web page served at ``/``: a text box, the translation and the cross-attention map of the
#: last translation as an SVG heat map (``page.html``, package data).
PAGE_HTML = resources.files("transformer_cpp.serve").joinpath("page.html").read_text(encoding="utf-8")


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


def _info(translator: Translator, config: ServeConfig, threads: int) -> Dict[str, Any]:
    """The answer of ``GET /info``."""
    return {
        "name": "transformer-cpp",
        "version": __version__,
        "checkpoint": None if translator.checkpoint is None else str(translator.checkpoint),
        "model": dict(translator.model.config),
        "vocab_sizes": {
            "source": int(translator.src_tokenizer.vocab_size),
            "target": int(translator.tgt_tokenizer.vocab_size),
        },
        "source_language": translator.src_lang,
        "trained_length": translator.trained_length,
        "max_output_tokens": translator.max_length,
        "compute_type": translator.compute_type,
        "threads": threads,
        "batching": {"max_batch": config.max_batch, "max_wait_ms": config.max_wait_ms},
        "defaults": {"beam_size": config.beam_size, "length_penalty": config.length_penalty},
        "limits": {
            "max_request_bytes": config.max_request_bytes,
            "max_texts": config.max_texts,
            "max_chars": config.max_chars,
            "max_beam_size": config.max_beam_size,
            "max_queue": config.max_queue,
        },
    }


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
    run lifespans) and is closed, after decoding what is queued, at lifespan shutdown. It is
    ``app.state.batcher``.
    """
    try:
        from fastapi import FastAPI, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import HTMLResponse, JSONResponse
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

    app = FastAPI(
        title="transformer-cpp translator",
        version=__version__,
        lifespan=lifespan,
        description="Translate with a trained transformer-cpp model. Concurrent requests are batched.",
    )
    app.state.batcher = batcher
    app.state.translator = translator
    app.state.config = config

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
    async def translate(request: Request) -> Any:
        body = await read_json_body(request, config)
        texts, beam_size, n_best, attention = parse_request(body, config)
        encoded: List[EncodedText] = []
        for i, text in enumerate(texts):
            where = "text" if body.get("text") is not None else f"texts[{i}]"
            try:
                enc = encode_text(translator, text)
            except (TypeError, ValueError) as exc:  # e.g. a lone surrogate ("\\ud800" in the JSON)
                raise ServeError(422, f"{where} cannot be translated: {exc}") from None
            if not enc.source:
                raise ServeError(422, f"{where} has nothing to translate once cleaned")
            encoded.append(enc)
        results = await batcher.submit(encoded, beam_size=beam_size, n_best=n_best, return_attention=attention)
        return JSONResponse({"translations": results, "beam_size": beam_size, "n_best": n_best})

    translate.__annotations__["request"] = Request  # a class, not the string of the postponed annotation
    app.post(
        "/translate",
        summary="Translate one or more sentences",
        responses={
            200: {"model": models["response"]},
            400: error_doc,
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

    @app.get("/health", summary="Liveness, with the batcher's counters")
    async def health() -> Any:
        stats: Dict[str, Any] = dict(batcher.stats, queued=batcher.queued)
        stats["mean_batch"] = round(stats["sentences"] / stats["batches"], 3) if stats["batches"] else None
        if batcher.closing:
            return JSONResponse({"status": "shutting down", "batcher": stats}, status_code=503)
        return {"status": "ok", "batcher": stats}

    @app.get("/info", summary="The model, its checkpoint, the package version and the server's limits")
    async def info() -> Any:
        return _info(translator, config, batcher.threads)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> Any:
        return HTMLResponse(PAGE_HTML)

    return app


def serve(
    translator: Translator,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    config: Optional[ServeConfig] = None,
    graceful_timeout: Optional[float] = 30.0,
    log_level: str = "info",
    access_log: bool = False,
) -> int:
    """Run the app with uvicorn until SIGTERM or Ctrl-C; returns 0 after a graceful shutdown.

    On a signal uvicorn stops accepting connections, waits (up to ``graceful_timeout`` seconds)
    for the requests in flight, then the lifespan closes the batcher.
    """
    try:
        import uvicorn
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(f"{SERVE_EXTRA_HINT} ({exc})") from exc

    app = create_app(translator, config)
    # uvicorn annotates timeout_graceful_shutdown as int but waits with asyncio (seconds as float)
    options: Dict[str, Any] = dict(
        host=host,
        port=port,
        log_level=log_level,
        access_log=access_log,
        timeout_graceful_shutdown=graceful_timeout,
        lifespan="on",
        **uvicorn_choices(),
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
    ``timeout_keep_alive``, or ``http`` and ``loop`` instead of :func:`uvicorn_choices`)."""
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
    options = dict(dict(lifespan="on", timeout_graceful_shutdown=30, **uvicorn_choices()), **uvicorn_options)
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
