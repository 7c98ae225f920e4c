"""The batcher: gathers the sentences of concurrent requests into batched decode calls.

One :class:`Batcher` owns the translator (a model refuses calls from two threads at once).
Requests are split into sentences (:func:`encode_text`) and queued; the batcher takes the oldest
sentence and up to ``max_batch - 1`` more with the same decoding options, waiting at most
``max_wait_ms`` after the oldest one arrived for the batch to fill, and decodes the batch in its
single worker thread, off the event loop (the C++ decoders release the GIL). Sentences that waited
during the previous decode are taken at once, so a busy server batches without waiting at all.

A batch is decoded by :func:`decode_items` through the package's one decode path,
:func:`~transformer_cpp.translate.decode_rows` (the attention maps through
:func:`~transformer_cpp.translate.cross_attention`), with the cleaning, encoding and output limit
of :meth:`Translator.translate_batch <transformer_cpp.translate.Translator.translate_batch>`: a
server answer is the offline translation of the same text, alone or in any batch.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import time
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .._runtime import get_num_threads, set_num_threads
from ..translate import DecodeOptions, Translator, cross_attention, decode_rows, one_line, token_piece
from .config import ServeConfig, ServeError

__all__ = ["Batcher", "EncodedText", "QueueFull", "QueuedSentence", "decode_items", "encode_text"]


class EncodedText(NamedTuple):
    """One input as the batcher takes it (see :func:`encode_text`)."""

    source: str  # the input as cleaned for the model
    ids: List[int]  # encoder input [start, ..., end]
    warning: Optional[str]  # the input is longer than every training pair


def encode_text(translator: Translator, text: str) -> EncodedText:
    """One input cleaned and encoded exactly as :meth:`Translator.translate_batch` encodes it; the
    ``warning`` says what its ``LongInputWarning`` says.

    Raises:
        TypeError, ValueError: ``text`` is not valid text (:meth:`Translator.clean`).
    """
    cleaned = translator.clean(text)
    ids = list(translator.src_tokenizer.encode(cleaned))
    warning = None
    trained = translator.trained_length
    if trained is not None and len(ids) > trained:
        warning = (
            f"the input has {len(ids)} tokens, more than any training pair ({trained}); it is translated "
            "whole, but the translation may be poorer"
        )
    return EncodedText(cleaned, ids, warning)


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


@dataclass
class QueuedSentence:
    """One sentence of one request, encoded, waiting for the batcher."""

    source: str  # the cleaned input
    ids: List[int]  # encoder input [start, ..., end]
    return_attention: bool
    job: _Job  # the request it belongs to
    index: int  # position in the request
    warning: Optional[str] = None


def decode_items(
    translator: Translator, items: Sequence[QueuedSentence], options: DecodeOptions
) -> List[Dict[str, Any]]:
    """Translate ``items`` with one batched decode call; one result dict per item (the entries of
    the ``/translate`` answer). Runs in the batcher's worker thread: the only thread that uses the
    model."""
    model, tgt = translator.model, translator.tgt_tokenizer
    rows = [it.ids for it in items]
    found = decode_rows(model, rows, tgt.start_id, tgt.end_id, options)
    results = []
    for it, hyps in zip(items, found):
        best = hyps[0]
        res: Dict[str, Any] = {
            "text": one_line(tgt.decode(best.ids)),
            "source": it.source,
            "finished": best.finished,
            "score": best.score,
        }
        if options.n_best > 1:
            res["hypotheses"] = [
                {"text": one_line(tgt.decode(h.ids)), "score": h.score, "finished": h.finished} for h in hyps
            ]
        if it.warning:
            res["warning"] = it.warning
        results.append(res)

    wanted = [i for i, it in enumerate(items) if it.return_attention]
    if wanted:
        outputs = [found[i][0].ids for i in wanted]
        maps = cross_attention(model, [rows[i] for i in wanted], outputs, tgt.start_id)
        for i, gen, layers in zip(wanted, outputs, maps):
            layer = max(layers, key=lambda name: int(name.split(".")[2]))  # the last decoder layer
            mean = np.asarray(layers[layer], dtype=np.float64).mean(axis=0)  # (output tokens, source tokens)
            results[i]["attention"] = {
                "layer": layer,
                "source_pieces": [token_piece(translator.src_tokenizer, v) for v in rows[i]],
                "target_pieces": [token_piece(tgt, v) for v in gen],
                "weights": np.round(mean, 4).tolist(),
            }
    return results


class QueueFull(ServeError):
    """More sentences would wait than ``max_queue``: 503 with ``Retry-After``."""

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

    def __init__(self, translator: Translator, config: ServeConfig, threads: Optional[int] = None) -> None:
        self.translator = translator
        self.config = config
        # OpenMP's thread count belongs to the thread that sets it: the worker thread gets the
        # count of the thread that made the batcher (or ``threads``), not the library default.
        self.threads = int(threads) if threads is not None else get_num_threads()
        self._pending: Deque[Tuple[DecodeOptions, float, QueuedSentence]] = collections.deque()
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
    def decode_options(self, beam_size: int, n_best: int) -> DecodeOptions:
        """How a request is decoded: its beam size and ``n_best``, the server's length penalty, and
        the translator's output limit and compute type."""
        return DecodeOptions(
            beam_size=beam_size,
            length_penalty=self.config.length_penalty,
            n_best=n_best,
            max_length=self.translator.max_length,
            compute_type=self.translator.compute_type,
        )

    async def submit(
        self,
        encoded: Sequence[EncodedText],
        *,
        beam_size: int = 1,
        n_best: int = 1,
        return_attention: bool = False,
    ) -> List[Dict[str, Any]]:
        """Queue one request's sentences (from :func:`encode_text`) and wait for their results."""
        if self.closing:
            raise ServeError(503, "the server is shutting down", headers={"Retry-After": "1"})
        options = self.decode_options(beam_size, n_best)
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
        for i, (source, ids, warning) in enumerate(encoded):
            self._pending.append((options, now, QueuedSentence(source, ids, bool(return_attention), job, i, warning)))
        self.stats["requests"] += 1
        self._wakeup.set()
        return await job.future

    # --- the loop --------------------------------------------------------------------------
    def _take(self) -> Tuple[Optional[DecodeOptions], List[QueuedSentence]]:
        """The oldest live sentence's options and up to ``max_batch`` live sentences with them."""
        options = None
        batch: List[QueuedSentence] = []
        kept: Deque[Tuple[DecodeOptions, float, QueuedSentence]] = collections.deque()
        while self._pending and len(batch) < self.config.max_batch:
            entry = self._pending.popleft()
            o, _, item = entry
            if item.job.future.done():  # the request is gone (cancelled or failed)
                continue
            if options is None:
                options = o
            if o == options:
                batch.append(item)
            else:
                kept.append(entry)
        self._pending.extendleft(reversed(kept))
        return options, batch

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
            options, batch = self._take()
            if options is None or not batch:
                continue
            self.stats["batches"] += 1
            self.stats["sentences"] += len(batch)
            self.stats["largest_batch"] = max(self.stats["largest_batch"], len(batch))
            started = time.perf_counter()
            try:
                results = await loop.run_in_executor(self._executor, decode_items, self.translator, batch, options)
            except Exception as exc:  # a failed decode fails its requests, not the server
                for item in batch:
                    item.job.fail(exc)
                continue
            finally:
                self.stats["decode_seconds"] += time.perf_counter() - started
            for item, result in zip(batch, results):
                item.job.done(item.index, result)
