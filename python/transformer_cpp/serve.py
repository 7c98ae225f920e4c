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
* ``GET /openapi.json`` and ``GET /docs``: the OpenAPI schema FastAPI generates.

**Batching.** One :class:`Batcher` owns the translator (a model refuses calls from two threads at
once). Requests are split into sentences and queued; the batcher takes the oldest sentence and
up to ``max_batch - 1`` more with the same decoding options (``beam_size``, ``n_best``), waiting
at most ``max_wait_ms`` after the oldest one arrived for the batch to fill, and runs one batched
C++ decode (:meth:`Transformer.greedy_decode` or :meth:`Transformer.beam_search`) in its single
worker thread, off the event loop (the binding releases the GIL). Each request's future gets
exactly its own sentences' results, in its order. Sentences that waited during the previous
decode are taken at once, so a busy server batches without waiting at all. The decoding mirrors
:meth:`Translator.translate_batch` (same cleaning, encoding, output limit ``1.5 * source + 10``
and cut), so a server answer equals the offline translation of the same text.

**Bad requests.** Every error is a JSON object ``{"error": message, "status": code}``: 415 when
the content type is not JSON, 413 for a body over ``max_request_bytes``, 400 for a body that is
not valid JSON, 422 for a missing, unknown or wrong-typed field, an empty text, a text over
``max_chars`` characters, more than ``max_texts`` texts, or a beam size / ``n_best`` out of
range, and 503 (with ``Retry-After``) when more than ``max_queue`` sentences would wait. No field
names a file. The server binds 127.0.0.1 unless told otherwise.

**HTTP stack.** :func:`serve` and :func:`background_server` run uvicorn with its C HTTP parser
``httptools`` and the ``uvloop`` event loop when they are importable (the ``serve`` extra
installs both), else with the pure-Python ``h11`` parser and asyncio's loop
(:func:`uvicorn_choices`). On this project's 2-core machine, with a no-op decoder, httptools and
uvloop took the server's CPU per request from about 0.39 ms to 0.28 ms.

**Shutdown.** On SIGTERM (or Ctrl-C) uvicorn stops accepting connections and lets the requests
in flight finish (their sentences are still decoded), then the batcher is closed and
``transformer-cpp serve`` exits with status 0.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import json
import signal
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ._runtime import get_num_threads, set_num_threads
from ._version import __version__
from .options import (
    add_compute_type_option,
    count_option,
    limits_of,
    non_negative_number,
    path_option,
    setting,
    threads_option,
)

from ._checks import integer as _integer, number as _number

__all__ = [
    "ServeConfig",
    "ServeError",
    "Batcher",
    "create_app",
    "background_server",
    "uvicorn_choices",
    "add_serve_parser",
    "serve",
    "main",
]

_SERVE_EXTRA_HINT = 'the server needs FastAPI and uvicorn: pip install "transformer-cpp[serve]"'


def uvicorn_choices() -> Dict[str, str]:
    """uvicorn's ``http`` and ``loop`` settings: ``httptools`` (a C HTTP parser) and ``uvloop``
    when they can be imported (the ``serve`` extra installs both), else the pure-Python ``h11``
    and asyncio's own loop. Chosen here rather than left to uvicorn's ``auto`` so that the
    command line can say what it runs and the bench can record it."""
    import importlib

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


# ------------------------------------------------------------------------------------ settings


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
    """

    max_batch: int = 32
    max_wait_ms: float = 5.0
    beam_size: int = 1
    max_beam_size: int = 8
    length_penalty: float = 1.0
    max_request_bytes: int = 64 * 1024
    max_texts: int = 64
    max_chars: int = 1000
    max_queue: int = 1024

    def __post_init__(self) -> None:
        for name in (
            "max_batch",
            "beam_size",
            "max_beam_size",
            "max_request_bytes",
            "max_texts",
            "max_chars",
            "max_queue",
        ):
            object.__setattr__(self, name, _integer("ServeConfig", name, getattr(self, name), 1))
        for name in ("max_wait_ms", "length_penalty"):
            object.__setattr__(self, name, _number("ServeConfig", name, getattr(self, name), 0))
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


# ------------------------------------------------------------------------------------ decoding


@dataclass
class _Item:
    """One sentence of one request, encoded, waiting for the batcher."""

    source: str  # the cleaned input
    ids: List[int]  # encoder input [start, ..., end]
    limit: int  # most tokens to generate
    return_attention: bool
    job: "_Job"
    index: int  # position in the request
    warning: Optional[str] = None


class _Job:
    """The sentences of one request and the future its handler waits on."""

    def __init__(self, count: int, loop: asyncio.AbstractEventLoop) -> None:
        self.results: List[Optional[Dict[str, Any]]] = [None] * count
        self.remaining = count
        self.future: asyncio.Future[List[Dict[str, Any]]] = loop.create_future()

    def done(self, index: int, result: Dict[str, Any]) -> None:
        self.results[index] = result
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            self.future.set_result([r for r in self.results if r is not None])  # all set by now

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


def encode_text(translator: Any, text: str) -> Tuple[str, List[int], int, Optional[str]]:
    """``(cleaned, ids, output limit, warning)`` for one input, exactly as
    :meth:`Translator.translate_batch` encodes it (the warning replaces its ``LongInputWarning``).
    """
    from .training import output_limit

    cleaned = translator.clean(text)
    ids = list(translator.src_tokenizer.encode(cleaned))
    limit = translator.max_length if translator.max_length is not None else output_limit(len(ids))
    warning = None
    trained = translator.trained_length
    if trained is not None and len(ids) > trained:
        warning = (
            f"the input has {len(ids)} tokens, more than any training pair ({trained}); it is translated "
            "whole, but the translation may be poorer"
        )
    return cleaned, ids, int(limit), warning


def decode_items(
    translator: Any, items: Sequence[_Item], beam_size: int, n_best: int, length_penalty: float
) -> List[Dict[str, Any]]:
    """Translate ``items`` with one batched decode call; one result dict per item (see the module
    docstring). Runs in the batcher's worker thread: the only thread that uses the model."""
    from .translate import greedy_decode, token_piece as _piece

    model, tgt = translator.model, translator.tgt_tokenizer
    width = max(len(it.ids) for it in items)
    src = np.zeros((len(items), width), dtype=np.int64)
    for i, it in enumerate(items):
        src[i, : len(it.ids)] = it.ids
    limits = [it.limit for it in items]
    steps = max(limits)
    # hypotheses per item, best first: (ids, score); cut to each sentence's own limit
    compute_type = getattr(translator, "compute_type", "float32")
    if beam_size == 1:
        out = greedy_decode(model, src, tgt.start_id, tgt.end_id, steps, compute_type)
        hyps: List[List[Tuple[List[int], Optional[float]]]] = [
            [([int(v) for v in row if v != 0][:n], None)] for row, n in zip(out, limits)
        ]
    elif compute_type == "float32":
        raw = model.beam_search(src, tgt.start_id, tgt.end_id, steps, beam_size, length_penalty, n_best)
    else:
        raw = model.beam_search(src, tgt.start_id, tgt.end_id, steps, beam_size, length_penalty, n_best, compute_type)
    if beam_size != 1:
        hyps = [[([int(v) for v in h[0]][:n], float(h[1])) for h in hs] for hs, n in zip(raw, limits)]

    results = []
    for it, hs in zip(items, hyps):
        gen, score = hs[0]
        res: Dict[str, Any] = {
            "text": tgt.decode(gen),
            "source": it.source,
            "finished": bool(gen) and gen[-1] == tgt.end_id,
            "score": score,
        }
        if n_best > 1:
            res["hypotheses"] = [
                {"text": tgt.decode(g), "score": s, "finished": bool(g) and g[-1] == tgt.end_id} for g, s in hs
            ]
        if it.warning:
            res["warning"] = it.warning
        results.append(res)

    wanted = [i for i, it in enumerate(items) if it.return_attention]
    if wanted:
        # as Translator does: one teacher-forced pass on [start] + output[:-1] of the best hypothesis
        best = [hyps[i][0][0] for i in wanted]
        tgt_in = np.zeros((len(wanted), max(max(len(g) for g in best), 1)), dtype=np.int64)
        for r, g in enumerate(best):
            row = [tgt.start_id] + g[:-1]
            tgt_in[r, : len(row)] = row
        sub = np.ascontiguousarray(src[wanted])
        model.forward(sub, tgt_in, training=False)
        cross = {n: w for n, w in model.attention_weights().items() if n.endswith("cross_attention")}
        layer = sorted(cross, key=lambda n: int(n.split(".")[2]))[-1]
        weights = cross[layer]
        for r, i in enumerate(wanted):
            it, gen = items[i], best[r]
            t, s = max(len(gen), 1), len(it.ids)
            mean = np.asarray(weights[r, :, :t, :s], dtype=np.float64).mean(axis=0)
            results[i]["attention"] = {
                "layer": layer,
                "source_pieces": [_piece(translator.src_tokenizer, v) for v in it.ids],
                "target_pieces": [_piece(tgt, v) for v in gen],
                "weights": np.round(mean, 4).tolist(),
            }
    return results


# ------------------------------------------------------------------------------------ batcher


class QueueFull(ServeError):
    def __init__(self, message: str) -> None:
        super().__init__(503, message, headers={"Retry-After": "1"})


class Batcher:
    """Gathers the sentences of concurrent requests into batched decode calls.

    The batcher owns ``translator``: its model is only used from the batcher's one worker thread.
    :meth:`submit` queues a request's sentences and returns their results in order; the loop
    task (started on first use or by :meth:`start`) takes up to ``max_batch`` sentences with the
    same options, oldest first, waiting up to ``max_wait_ms`` after the oldest one arrived, and
    runs :func:`decode_items` in the worker thread. :meth:`close` decodes what is queued, then
    stops.
    """

    def __init__(self, translator: Any, config: ServeConfig, threads: Optional[int] = None) -> None:
        self.translator = translator
        self.config = config
        # OpenMP's thread count belongs to the thread that sets it: the worker thread gets the
        # count of the thread that made the batcher (or ``threads``), not the library default.
        self.threads = int(threads) if threads is not None else get_num_threads()
        self._pending: Deque[Tuple[Tuple[int, int], float, _Item]] = collections.deque()
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._task: Optional[asyncio.Task[None]] = None
        self._wakeup: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self.closing = False
        self.stats = {
            "requests": 0,
            "sentences": 0,
            "batches": 0,
            "largest_batch": 0,
            "rejected_queue_full": 0,
            "decode_seconds": 0.0,
        }

    # --- life cycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Start the loop task on the running event loop (idempotent)."""
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done() and self._loop is loop:
            return
        if self._pending and self._loop is not loop:
            raise RuntimeError("Batcher.start: sentences of another event loop are still queued")
        self._loop = loop
        self.closing = False
        self._wakeup = asyncio.Event()
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="translator", initializer=set_num_threads, initargs=(self.threads,)
            )
        self._task = loop.create_task(self._run(), name="transformer-cpp-batcher")

    async def close(self) -> None:
        """Decode the sentences still queued, then stop the loop task and the worker thread."""
        self.closing = True
        if self._task is not None:
            assert self._wakeup is not None
            self._wakeup.set()
            await self._task
            self._task = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    @property
    def queued(self) -> int:
        """Sentences waiting for a decode."""
        return len(self._pending)

    # --- requests --------------------------------------------------------------------------
    async def submit(
        self,
        encoded: Sequence[Tuple[str, List[int], int, Optional[str]]],
        *,
        beam_size: int = 1,
        n_best: int = 1,
        return_attention: bool = False,
    ) -> List[Dict[str, Any]]:
        """Queue one request's sentences (from :func:`encode_text`) and wait for their results."""
        if self.closing:
            raise ServeError(503, "the server is shutting down", headers={"Retry-After": "1"})
        self.start()
        if len(self._pending) + len(encoded) > self.config.max_queue:
            self.stats["rejected_queue_full"] += 1
            raise QueueFull(
                f"the server is busy: {len(self._pending)} sentences are waiting (at most "
                f"{self.config.max_queue}); retry later"
            )
        assert self._loop is not None and self._wakeup is not None
        job = _Job(len(encoded), self._loop)
        now = self._loop.time()
        key = (int(beam_size), int(n_best))
        for i, (source, ids, limit, warning) in enumerate(encoded):
            self._pending.append((key, now, _Item(source, ids, limit, bool(return_attention), job, i, warning)))
        self.stats["requests"] += 1
        self._wakeup.set()
        return await job.future

    # --- the loop --------------------------------------------------------------------------
    def _take(self) -> Tuple[Tuple[int, int], List[_Item]]:
        """The oldest live sentence's options and up to ``max_batch`` live sentences with them."""
        key = None
        batch: List[_Item] = []
        kept: Deque[Tuple[Tuple[int, int], float, _Item]] = collections.deque()
        while self._pending and len(batch) < self.config.max_batch:
            entry = self._pending.popleft()
            k, _, item = entry
            if item.job.future.done():  # the request is gone (cancelled or failed)
                continue
            if key is None:
                key = k
            if k == key:
                batch.append(item)
            else:
                kept.append(entry)
        self._pending.extendleft(reversed(kept))
        return key or (1, 1), batch

    async def _run(self) -> None:
        assert self._loop is not None and self._wakeup is not None
        loop, wakeup, cfg = self._loop, self._wakeup, self.config
        max_wait = cfg.max_wait_ms / 1000.0
        while True:
            if not self._pending:
                if self.closing:
                    return
                wakeup.clear()
                await wakeup.wait()
                continue
            # wait for the batch to fill, at most max_wait after its oldest sentence arrived
            while len(self._pending) < cfg.max_batch and not self.closing:
                remaining = self._pending[0][1] + max_wait - loop.time()
                if remaining <= 0:
                    break
                wakeup.clear()
                try:
                    await asyncio.wait_for(wakeup.wait(), remaining)
                except asyncio.TimeoutError:
                    break
            key, batch = self._take()
            if not batch:
                continue
            beam_size, n_best = key
            self.stats["batches"] += 1
            self.stats["sentences"] += len(batch)
            self.stats["largest_batch"] = max(self.stats["largest_batch"], len(batch))
            started = time.perf_counter()
            try:
                results = await loop.run_in_executor(
                    self._executor, decode_items, self.translator, batch, beam_size, n_best, cfg.length_penalty
                )
            except Exception as exc:  # a failed decode fails its requests, not the server
                for item in batch:
                    item.job.fail(exc)
                continue
            finally:
                self.stats["decode_seconds"] += time.perf_counter() - started
            for item, result in zip(batch, results):
                item.job.done(item.index, result)


# ------------------------------------------------------------------------------------ requests


def _field_name(loc: Sequence[Any]) -> str:
    return ".".join(str(p) for p in loc) or "body"


@functools.lru_cache(maxsize=None)
def _models() -> Dict[str, Any]:
    """The pydantic models of the API (built on first use: pydantic is an optional dependency)."""
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


_JSON_TYPES = ("application/json",)


def _is_json(content_type: Optional[str]) -> bool:
    if not content_type:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media in _JSON_TYPES or (media.startswith("application/") and media.endswith("+json"))


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
    if not _is_json(request.headers.get("content-type")):
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
        req = _models()["request"].model_validate(body)
    except ValidationError as exc:
        details = [
            {"field": _field_name(e.get("loc", ())), "message": e.get("msg", "")}
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


# ------------------------------------------------------------------------------------ the app


def _info(translator: Any, config: ServeConfig, threads: int) -> Dict[str, Any]:
    model_cfg = dict(translator.model.config)
    return {
        "name": "transformer-cpp",
        "version": __version__,
        "checkpoint": None if getattr(translator, "checkpoint", None) is None else str(translator.checkpoint),
        "model": model_cfg,
        "vocab_sizes": {
            "source": int(translator.src_tokenizer.vocab_size),
            "target": int(translator.tgt_tokenizer.vocab_size),
        },
        "source_language": translator.src_lang,
        "trained_length": translator.trained_length,
        "max_output_tokens": translator.max_length,
        "compute_type": getattr(translator, "compute_type", "float32"),
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
    translator: Any, config: Optional[ServeConfig] = None, *, threads: Optional[int] = None, **options: Any
) -> Any:
    """The ASGI app (FastAPI) serving ``translator``; see the module docstring for the API.

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
        raise ImportError(f"{_SERVE_EXTRA_HINT} ({exc})") from exc
    from contextlib import asynccontextmanager

    if config is None:
        config = ServeConfig(**options)
    elif options:
        config = ServeConfig(**{**asdict(config), **options})
    batcher = Batcher(translator, config, threads)
    models = _models()

    @asynccontextmanager
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
        details = [{"field": _field_name(e.get("loc", ())), "message": e.get("msg", "")} for e in exc.errors()]
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
        encoded = []
        for i, text in enumerate(texts):
            try:
                enc = encode_text(translator, text)
            except (TypeError, ValueError) as exc:  # e.g. a lone surrogate ("\\ud800" in the JSON)
                where = "text" if body.get("text") is not None else f"texts[{i}]"
                raise ServeError(422, f"{where} cannot be translated: {exc}") from None
            if not enc[0]:
                where = "text" if body.get("text") is not None else f"texts[{i}]"
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


# ------------------------------------------------------------------------------------ the page

PAGE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>transformer-cpp translator</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #1f2328; }
  main { max-width: 880px; margin: 0 auto; padding: 1.5rem; }
  h1 { font-size: 1.4rem; margin: 0 0 .2rem; }
  h2 { font-size: 1rem; margin: 1.4rem 0 .4rem; color: #57606a; }
  #model-info, .note { color: #57606a; font-size: .85rem; margin: 0; }
  textarea { width: 100%; box-sizing: border-box; font: inherit; font-size: 1.05rem; padding: .6rem;
             border: 1px solid #d0d7de; border-radius: 6px; resize: vertical; }
  .controls { display: flex; gap: 1rem; align-items: center; margin-top: .6rem; }
  button { font: inherit; padding: .45rem 1.2rem; border: 0; border-radius: 6px; background: #1f6feb;
           color: white; cursor: pointer; }
  button:disabled { background: #8c959f; cursor: default; }
  #output { font-size: 1.25rem; min-height: 1.6rem; background: white; border: 1px solid #d0d7de;
            border-radius: 6px; padding: .6rem; margin: 0; }
  #details, #status { color: #57606a; font-size: .85rem; }
  #error { color: #cf222e; }
  #attention { overflow-x: auto; background: white; border: 1px solid #d0d7de; border-radius: 6px;
               padding: .5rem; min-height: 2rem; }
  #attention text { font-size: 12px; fill: #1f2328; font-family: ui-monospace, monospace; }
</style>
</head>
<body>
<main>
  <h1>transformer-cpp translator</h1>
  <p id="model-info">loading model information&hellip;</p>
  <form id="form">
    <h2><label for="source">Source sentence</label></h2>
    <textarea id="source" rows="3" maxlength="1000" autofocus
              placeholder="you should pay for it."></textarea>
    <div class="controls">
      <label>Beam size <select id="beam-size"><option value="1">1 (greedy)</option></select></label>
      <button id="translate" type="submit">Translate</button>
      <span id="status"></span>
    </div>
  </form>
  <h2>Translation</h2>
  <p id="output" aria-live="polite"></p>
  <p id="details"></p>
  <p id="error" role="alert"></p>
  <h2>Cross-attention of the last translation</h2>
  <p class="note">Rows: output tokens; columns: source tokens; the last decoder layer, averaged over the heads.
    Darker = more attention.</p>
  <div id="attention"></div>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

fetch("/info").then((r) => r.json()).then((info) => {
  const m = info.model || {};
  $("model-info").textContent = `model d_model ${m.d_model}, ${m.n_layers}+${m.n_layers} layers, vocabularies ` +
    `${info.vocab_sizes.source}/${info.vocab_sizes.target}` + (info.checkpoint ? ` \\u2014 ${info.checkpoint}` : "") +
    ` \\u2014 transformer-cpp ${info.version}`;
  $("source").maxLength = info.limits.max_chars;
  const select = $("beam-size");
  select.textContent = "";
  for (let b = 1; b <= info.limits.max_beam_size; b++) {
    const o = document.createElement("option");
    o.value = String(b);
    o.textContent = b === 1 ? "1 (greedy)" : String(b);
    if (b === info.defaults.beam_size) o.selected = true;
    select.appendChild(o);
  }
}).catch(() => { $("model-info").textContent = ""; });

function el(name, attrs, text) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

function drawAttention(att) {
  const box = $("attention");
  box.textContent = "";
  if (!att) return;
  const src = att.source_pieces, tgt = att.target_pieces, w = att.weights;
  const cell = 26;
  const longest = (xs) => xs.reduce((n, s) => Math.max(n, s.length), 1);
  const left = 10 + 7.5 * longest(tgt), top = 10 + 6 * longest(src);
  const svg = el("svg", {id: "attention-map", width: left + cell * src.length + 10,
                         height: top + cell * w.length + 10, role: "img",
                         "aria-label": "cross-attention map", "data-rows": w.length, "data-cols": src.length});
  src.forEach((p, j) => {
    const x = left + j * cell + cell / 2, y = top - 6;
    svg.appendChild(el("text", {x, y, transform: `rotate(-60 ${x} ${y})`, class: "source-label"}, p));
  });
  w.forEach((row, i) => {
    svg.appendChild(el("text", {x: left - 6, y: top + i * cell + cell / 2 + 4, "text-anchor": "end",
                                class: "target-label"}, tgt[i] === undefined ? "" : tgt[i]));
    row.forEach((v, j) => {
      const r = el("rect", {x: left + j * cell, y: top + i * cell, width: cell - 1, height: cell - 1,
                            fill: "#0b3d91", "fill-opacity": Math.max(0.03, Math.min(1, v)), class: "cell"});
      r.appendChild(el("title", {}, `${tgt[i]} \\u2190 ${src[j]}: ${v.toFixed(3)}`));
      svg.appendChild(r);
    });
  });
  box.appendChild(svg);
}

$("form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = $("source").value;
  $("error").textContent = "";
  if (!text.trim()) { $("error").textContent = "Type a sentence first."; return; }
  const button = $("translate");
  button.disabled = true;
  $("status").textContent = "translating\\u2026";
  const started = performance.now();
  try {
    const response = await fetch("/translate", {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify({text, beam_size: Number($("beam-size").value), return_attention: true}),
    });
    const data = await response.json();
    if (!response.ok) throw new Error(data.error || response.statusText);
    const t = data.translations[0];
    $("output").textContent = t.text;
    const parts = [`${Math.round(performance.now() - started)} ms`, `beam size ${data.beam_size}`];
    if (t.score !== null) parts.push(`score ${t.score.toFixed(3)}`);
    if (!t.finished) parts.push("stopped at the output limit");
    if (t.warning) parts.push(t.warning);
    $("details").textContent = parts.join(" \\u00b7 ");
    drawAttention(t.attention);
  } catch (err) {
    $("error").textContent = String(err.message || err);
  } finally {
    button.disabled = false;
    $("status").textContent = "";
  }
});

$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); $("form").requestSubmit(); }
});
</script>
</body>
</html>
"""


# ------------------------------------------------------------------------------------ running


def serve(
    translator: Any,
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
        raise ImportError(f"{_SERVE_EXTRA_HINT} ({exc})") from exc

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
    import socket
    import threading

    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio's loop turns Nagle's algorithm off (TCP_NODELAY) only
    # on connections of a socket whose protocol says TCP (uvloop does it on any). With Nagle on,
    # uvicorn's response (headers, then body: two writes) waited for the client's delayed ACK,
    # about 40 ms per request on Linux. The listening socket gets TCP_NODELAY too (Linux hands it
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


def _add_arguments(p: argparse.ArgumentParser) -> None:

    _port = count_option("port", 0, 65535)
    d = ServeConfig()
    p.add_argument(
        "--model", type=path_option, required=True, help="run directory (its best checkpoint) or checkpoint directory"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0 = any free port)")
    p.add_argument(
        "--threads",
        type=threads_option(),
        default=None,
        help=f"C++ threads (default: all cores; {limits_of('TrainConfig')['threads'].describe()})",
    )
    g = p.add_argument_group("batching and decoding")
    g.add_argument(
        "--max-batch",
        type=count_option("max_batch", 1),
        default=d.max_batch,
        help=f"most sentences per decode call (default {d.max_batch}; 1 = one at a time)",
    )
    g.add_argument(
        "--max-wait-ms",
        type=non_negative_number,
        default=d.max_wait_ms,
        help=f"how long a batch waits to fill after its first sentence (default {d.max_wait_ms:g} ms)",
    )
    g.add_argument(
        "--beam-size",
        type=setting("Translator", "beam_size"),
        default=d.beam_size,
        help=f"beam size of requests that do not give one (default {d.beam_size} = greedy)",
    )
    g.add_argument(
        "--length-penalty",
        type=setting("Translator", "length_penalty"),
        default=d.length_penalty,
        help=f"beam search length-penalty exponent (default {d.length_penalty})",
    )
    g.add_argument(
        "--max-length",
        type=count_option("max_length", 1),
        default=None,
        help="most tokens to generate per sentence (default: 1.5 x its source tokens + 10)",
    )
    add_compute_type_option(g)
    g = p.add_argument_group("limits (a request over one gets a 4xx JSON error; a full queue 503)")
    g.add_argument(
        "--max-beam-size",
        type=count_option("max_beam_size", 1),
        default=None,
        help=f"largest beam size (and n_best) a request may ask for (default {d.max_beam_size}, "
        "or --beam-size if larger)",
    )
    g.add_argument(
        "--max-request-bytes",
        type=count_option("max_request_bytes", 1),
        default=d.max_request_bytes,
        help=f"largest request body (default {d.max_request_bytes:,})",
    )
    g.add_argument(
        "--max-texts",
        type=count_option("max_texts", 1),
        default=d.max_texts,
        help=f"most texts per request (default {d.max_texts})",
    )
    g.add_argument(
        "--max-chars",
        type=count_option("max_chars", 1),
        default=d.max_chars,
        help=f"most characters per text (default {d.max_chars:,})",
    )
    g.add_argument(
        "--max-queue",
        type=count_option("max_queue", 1),
        default=d.max_queue,
        help=f"most sentences waiting for a decode (default {d.max_queue:,})",
    )
    g = p.add_argument_group("server")
    g.add_argument(
        "--graceful-timeout",
        type=non_negative_number,
        default=30.0,
        help="on SIGTERM, wait this many seconds for requests in flight (default 30)",
    )
    g.add_argument(
        "--log-level",
        choices=("critical", "error", "warning", "info", "debug"),
        default="info",
        help="uvicorn's log level (default info)",
    )
    g.add_argument("--access-log", action="store_true", help="log every request")


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    """The :class:`ServeConfig` of parsed ``serve`` options."""
    max_beam = args.max_beam_size if args.max_beam_size is not None else max(ServeConfig.max_beam_size, args.beam_size)
    return ServeConfig(
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        beam_size=args.beam_size,
        max_beam_size=max_beam,
        length_penalty=args.length_penalty,
        max_request_bytes=args.max_request_bytes,
        max_texts=args.max_texts,
        max_chars=args.max_chars,
        max_queue=args.max_queue,
    )


def run_from_args(args: argparse.Namespace) -> int:
    """``transformer-cpp serve``: load the checkpoint once and serve it until SIGTERM."""
    from .translate import Translator

    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        print(f"transformer-cpp serve: error: {_SERVE_EXTRA_HINT} ({exc})", file=sys.stderr)
        return 1
    config = config_from_args(args)
    if args.threads is not None:
        set_num_threads(args.threads)
    translator = Translator.from_checkpoint(args.model, max_length=args.max_length, compute_type=args.compute_type)
    where = f"http://{'[' + args.host + ']' if ':' in args.host else args.host}:{args.port}"
    stack = uvicorn_choices()
    print(
        f"transformer-cpp serve: {translator.checkpoint} on {where}/ (page), POST /translate, GET /health, "
        f"/info, /docs; batches of up to {config.max_batch} sentences, waiting up to {config.max_wait_ms:g} ms; "
        f"uvicorn with {stack['http']} and {stack['loop']}",
        file=sys.stderr,
        flush=True,
    )
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"transformer-cpp serve: warning: listening on {args.host}, reachable from other machines; the "
            "server has no authentication",
            file=sys.stderr,
            flush=True,
        )
    return serve(
        translator,
        host=args.host,
        port=args.port,
        config=config,
        graceful_timeout=args.graceful_timeout or None,
        log_level=args.log_level,
        access_log=args.access_log,
    )


_DESCRIPTION = (
    "Serve a trained model over HTTP (FastAPI on uvicorn): POST /translate (JSON), GET /health, "
    "GET /info, a web page at / with the cross-attention map, the OpenAPI schema at /docs. "
    "Concurrent requests are batched into one decode call. SIGTERM finishes the requests in flight, "
    'then exits 0. Needs the serve extra: pip install "transformer-cpp[serve]".'
)


def add_serve_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``serve`` subcommand on an ``argparse`` subparsers object; sets ``func``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve", help="serve a trained model over HTTP (API, batching, web page)", description=_DESCRIPTION
    )
    _add_arguments(p)
    p.set_defaults(func=run_from_args)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m transformer_cpp.serve --model DIR [options]`` (the options of ``transformer-cpp serve``)."""
    parser = argparse.ArgumentParser(prog="python -m transformer_cpp.serve", description=_DESCRIPTION)
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except (OSError, ValueError) as exc:
        print(f"transformer-cpp serve: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
