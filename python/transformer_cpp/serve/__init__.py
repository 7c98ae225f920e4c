"""Serve a trained translator over HTTP: a JSON API with request batching, and a web page.

::

    pip install "transformer-cpp[serve]"
    transformer-cpp serve --model runs/quick                 # http://127.0.0.1:8000/
    curl -s localhost:8000/translate -H 'Content-Type: application/json' -d '{"text": "we have no money."}'

or, to embed the app in another ASGI server or application::

    from transformer_cpp.serve import create_app
    app = create_app(Translator.from_checkpoint("runs/quick"), max_batch=32, max_wait_ms=5)

The app (FastAPI on uvicorn) has five routes:

* ``POST /translate`` with ``{"text": "..."}`` or ``{"texts": ["...", ...]}`` and optionally
  ``beam_size`` (default: the server's ``--beam-size``), ``n_best`` (hypotheses per text, at most
  ``beam_size``) and ``return_attention``. The answer is ``{"translations": [...]}``, one entry
  per text in order: ``text``, ``source`` (the input as cleaned for the model), ``finished``
  (the end token was produced), ``score`` (beam search's length-normalised log-probability;
  ``null`` for greedy decoding, as in :class:`~transformer_cpp.translate.Translation`), with
  ``n_best > 1`` a ``hypotheses`` list (``text``, ``score``, ``finished``, best first), with
  ``return_attention`` an ``attention`` object (``source_pieces``, ``target_pieces``, ``layer``
  and ``weights``: the last decoder layer's cross-attention averaged over the heads, one row per
  output token), and a ``warning`` when an input is longer than every training pair.
* ``GET /health``: ``{"status": "ok", ...}`` with the batcher's counters (503 while shutting down).
* ``GET /info``: model configuration, vocabulary sizes, checkpoint, package version, limits.
* ``GET /``: a page with a text box, the translation and the cross-attention map of the last
  translation (an SVG heat map).
* ``GET /openapi.json``: the OpenAPI schema FastAPI generates; ``GET /docs``: the routes and that
  schema as a page with no script and nothing loaded from elsewhere (no Swagger UI or ReDoc,
  which load theirs from a CDN).

**Batching.** One :class:`Batcher` owns the translator and gathers the sentences of concurrent
requests with the same decoding options (``beam_size``, ``n_best``) into one C++ decode call,
waiting at most ``max_wait_ms`` for a batch to fill. A decode call cannot be interrupted, so
batches are bounded in work (``max_batch_tokens``, and the work the last calls decoded in
``batch_seconds``) and each one is led by the request that has had the least decoding so far: a
small request that arrives while a large one is decoded is in the next call. The work of a
sentence is counted in tokens, beam size x (source tokens + most output tokens). A request whose
client disconnects has its waiting sentences dropped. Each batch is translated by
:func:`~transformer_cpp.translate.translate_encoded`, the function :meth:`Translator.translate_batch
<transformer_cpp.translate.Translator.translate_batch>` calls, on inputs cleaned and encoded by
:func:`~transformer_cpp.translate.encode_source` (each sentence stopping at its own output limit,
``1.5 * source + 10``, inside the C++ search), so a server answer is the offline translation of the
same text; attention maps are recorded by that decode, not by a second pass.

**Bad requests.** Every error is a JSON object ``{"error": message, "status": code}``, its
message naming the limit and its value: 415 when the content type is not JSON, 413 for a body
over ``max_request_bytes``, 408 for a body that does not arrive within ``read_timeout``, 400 for
a body that is not valid JSON or a ``Host`` header refused (see below), 422 for a missing, unknown
or wrong-typed field, an empty text (whitespace, or only invisible characters such as zero-width
spaces: :func:`transformer_cpp.text.is_blank`), a text over ``max_chars`` characters or
``max_source_tokens`` tokens, more than ``max_texts`` texts, a beam size / ``n_best`` out of
range, a request over ``max_request_tokens`` of decoding work, or ``return_attention`` over
``max_attention_weights`` weights (source tokens x most output tokens), 500 when the model's
tokenizer fails (a panic of the ``tokenizers`` library included), and 503 (with ``Retry-After``)
when more than ``max_queue`` sentences would wait. No field names a file; ``/info`` shows the
checkpoint as its run directory's name and its own, not its path. Failures are logged as one line
each (a client that disconnects, too), never a traceback.

**Host check.** The server binds 127.0.0.1 unless told otherwise. A request that arrives on a
loopback address must name ``localhost``, ``127.0.0.1`` or ``[::1]`` (any port) in its ``Host``
header, so that a web page whose own domain name resolves to 127.0.0.1 (DNS rebinding) cannot
call the server; ``allowed_hosts`` (``--allowed-hosts``) adds names, ``"*"`` any.

**HTTP stack.** :func:`serve` and :func:`background_server` run uvicorn with its C HTTP parser
``httptools`` and the ``uvloop`` event loop when they are importable (the ``serve`` extra
installs both), else with the pure-Python ``h11`` parser and asyncio's loop
(:func:`uvicorn_choices`), inside :func:`guarded_protocol`: a client has ``read_timeout`` (10 s)
to send its request line and headers and as long for its body, else 408 and the connection is
closed; headers over 16 KiB get 431; beyond 256 open connections a request gets 503; idle
keep-alive connections close after 5 s. The texts are encoded and the answers' JSON written in
worker threads, off the event loop.

**Shutdown.** On SIGTERM (or Ctrl-C) uvicorn stops accepting connections and lets the requests
in flight finish for up to ``--graceful-timeout`` seconds (30; 0: no wait), then answers those
still running or queued with a JSON 503, finishes the decode call in progress and
``transformer-cpp serve`` exits with status 0.

**Several models.** ``create_app`` takes a translator or a list of them, one per language pair,
each with its own batcher; requests choose one with ``source`` and ``target`` (optional with one
model). ``POST /detect`` (LibreTranslate's) detects a text's language among the models' sources.

The modules: :mod:`~transformer_cpp.serve.config` (settings and request checks),
:mod:`~transformer_cpp.serve.batcher`, :mod:`~transformer_cpp.serve.registry` (the models),
:mod:`~transformer_cpp.serve.protocol` (the HTTP guards and the ``Host`` check),
:mod:`~transformer_cpp.serve.detect` (language detection), :mod:`~transformer_cpp.serve.app`
(the routes and uvicorn),
and the page ``page.html``; the command line is :mod:`transformer_cpp.cli.serve`
(``transformer-cpp serve``, ``python -m transformer_cpp.serve``), its options generated from
:class:`ServeConfig` and :class:`ServerOptions`.
"""

# the names of __all__, and, as explicit re-exports, the others that tests and tools import
from .app import PAGE_HTML as PAGE_HTML
from .app import background_server, create_app, guarded_protocol, serve, uvicorn_choices
from .app import host_refusal as host_refusal
from .registry import ModelRegistry as ModelRegistry
from .batcher import Batcher
from .batcher import QueueFull as QueueFull
from .batcher import QueuedSentence as QueuedSentence
from .batcher import decode_items as decode_items
from .config import SERVE_EXTRA_HINT as SERVE_EXTRA_HINT
from .config import ServeConfig, ServeError, ServerOptions
from .config import check_work as check_work
from .config import parse_request as parse_request
from .config import read_json_body as read_json_body

__all__ = [
    "ServeConfig",
    "ServeError",
    "ServerOptions",
    "Batcher",
    "create_app",
    "background_server",
    "guarded_protocol",
    "uvicorn_choices",
    "serve",
]
