"""The batcher: gathers the sentences of concurrent requests into batched decode calls.

One :class:`Batcher` owns the translator (a model refuses calls from two threads at once).
Requests are split into sentences (:func:`~transformer_cpp.translate.encode_source`) and queued;
each batch is led by the request that has had the least decoding work so far and filled with
sentences of the same decoding options (and the same wish for attention maps), one per request in turn, up to ``max_batch`` sentences and ``max_batch_tokens``
of work (beam size x (source tokens + most output tokens) each; less when the speed measured on
the last batches says the batch would take longer than ``batch_seconds``), waiting at most
``max_wait_ms`` after the oldest one arrived for the batch to fill. The batch is decoded in the batcher's single
worker thread, off the event loop (the C++ decoders release the GIL). Sentences that waited during
the previous decode are taken at once, so a busy server batches without waiting at all; a small
request that arrives while a large one is decoded waits for one decode call, not for the large
request. A request with a target prefix, constraints or sampling (:mod:`.search`) is decoded by
itself, its sentences in order in chunks of ``SEPARATE_CHUNK``, the chunks
``Translator.translate_batch`` makes (a sampled token depends on its row in the call).

A batch is translated by :func:`decode_items` through
:func:`~transformer_cpp.translate.translate_encoded`, the function
:meth:`Translator.translate_batch <transformer_cpp.translate.Translator.translate_batch>` calls for
each of its chunks, on inputs encoded by :func:`~transformer_cpp.translate.encode_source` as the
Translator encodes them: a server answer is the offline translation of the same text, alone or in
any batch. What is the batcher's own is the queue, the gathering of requests, their fairness and
the answer's JSON entries.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import time
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .._runtime import get_num_threads, set_num_threads
from ..translate import DecodeOptions, EncodedSource, Translation, Translator, translate_encoded
from ..translate.decoding import resolved_rules
from .config import ServeConfig, ServeError, text_work
from .search import SEPARATE_CHUNK

__all__ = ["Batcher", "QueueFull", "QueuedSentence", "decode_items"]


class _Job:
    """The sentences of one request: those still waiting, the work decoded so far, and the future
    its handler waits on."""

    def __init__(
        self,
        count: int,
        options: DecodeOptions,
        attention: bool,
        arrival: float,
        loop: asyncio.AbstractEventLoop,
        separate: bool = False,
    ) -> None:
        self.results: List[Optional[Dict[str, Any]]] = [None] * count
        self.remaining = count
        self.options = options
        self.attention = attention  # a batch holds sentences that all want attention maps, or none
        self.separate = separate  # decoded by itself, in chunks of SEPARATE_CHUNK (a prefix, constraints, sampling)
        self.arrival = arrival
        self.waiting: Deque[QueuedSentence] = collections.deque()
        self.served = 0  # decoding work taken into batches so far (tokens, as text_work counts)
        self.future: asyncio.Future[List[Dict[str, Any]]] = loop.create_future()

    def done(self, index: int, result: Dict[str, Any]) -> None:
        self.results[index] = result
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            self.future.set_result([r for r in self.results if r is not None])  # all set by now

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)

    def cancel(self) -> None:
        """Give the request up (its client left, or it was cancelled): its waiting sentences are
        dropped, not decoded."""
        self.waiting.clear()
        if not self.future.done():
            self.future.cancel()


@dataclass
class QueuedSentence:
    """One sentence of one request, encoded, waiting for the batcher."""

    source: str  # the cleaned input
    ids: List[int]  # encoder input [start, ..., end]
    return_attention: bool
    job: Optional[_Job]  # the request it belongs to
    index: int  # position in the request
    warning: Optional[str] = None
    work: int = 0  # decoding work in tokens (text_work); what a batch may hold is max_batch_tokens
    prefix: Optional[List[int]] = None  # target ids the translation starts with
    constraints: Optional[List[List[int]]] = None  # target id sequences the translation must hold


def decode_items(
    translator: Translator, items: Sequence[QueuedSentence], options: DecodeOptions
) -> List[Dict[str, Any]]:
    """Translate ``items`` with one batched decode call (:func:`translate_encoded`); one result dict
    per item (the entries of the ``/translate`` answer). Runs in the batcher's worker thread: the
    only thread that uses the model. The attention maps are recorded by that decode when any item
    asks for them (the batcher does not mix such items with others)."""
    attention = any(it.return_attention for it in items)
    encoded = [EncodedSource(it.source, it.ids, it.warning) for it in items]
    prefixes = [it.prefix or [] for it in items] if any(it.prefix is not None for it in items) else None
    wanted = [it.constraints or [] for it in items] if any(it.constraints is not None for it in items) else None
    translations = translate_encoded(translator, encoded, options, attention, prefixes, wanted)
    return [_answer(it, t) for it, t in zip(items, translations)]


def _answer(item: QueuedSentence, t: Translation) -> Dict[str, Any]:
    """One ``/translate`` entry: the text, the cleaned source, whether it finished, its score, the
    hypotheses (``n_best > 1``), the last decoder layer's cross-attention averaged over the heads
    (when asked for) and the input's warning."""
    res: Dict[str, Any] = {"text": t.text, "source": t.source, "finished": t.finished, "score": t.score}
    if t.hypotheses:
        res["hypotheses"] = [{"text": h.text, "score": h.score, "finished": h.finished} for h in t.hypotheses]
    if item.constraints is not None:
        res["constraints_missing"] = t.constraints_missing
    if item.warning:
        res["warning"] = item.warning
    if item.return_attention:
        layer = max(t.attention, key=lambda name: int(name.split(".")[2]))  # the last decoder layer
        mean = np.asarray(t.attention[layer], dtype=np.float64).mean(axis=0)  # (output tokens, source tokens)
        res["attention"] = {
            "layer": layer,
            "source_pieces": t.source_pieces,
            "target_pieces": t.target_pieces,
            "weights": np.round(mean, 4).tolist(),
        }
    return res


class QueueFull(ServeError):
    """More sentences would wait than ``max_queue``: 503 with ``Retry-After``."""

    def __init__(self, message: str) -> None:
        super().__init__(503, message, headers={"Retry-After": "1"})


class Batcher:
    """Gathers the sentences of concurrent requests into batched decode calls, fairly.

    The batcher owns ``translator``: its model is only used from the batcher's one worker thread.
    :meth:`submit` (or :meth:`enqueue`, then awaiting the job's future) queues a request's
    sentences and returns their results in order. The loop task (started on first use or by
    :meth:`start`) forms each batch from the request that has had the least decoding work so far
    (the oldest among equals) and fills it with sentences of the same options, one sentence per
    request in turn, up to ``max_batch`` sentences and ``max_batch_tokens`` of work (less when the
    speed of the last batches says that would take longer than ``batch_seconds``), waiting up to
    ``max_wait_ms`` after the oldest one arrived; :func:`decode_items` runs in the worker thread.
    A request that arrives while a large one is decoded is therefore in the next batch: it waits
    for one decode call, not for the whole large request. :meth:`close` answers the requests still
    queued with 503 and stops after the decode in progress.
    """

    def __init__(self, translator: Translator, config: ServeConfig, threads: Optional[int] = None) -> None:
        self.translator = translator
        self.config = config
        # OpenMP's thread count belongs to the thread that sets it: the worker thread gets the
        # count of the thread that made the batcher (or ``threads``), not the library default.
        self.threads = int(threads) if threads is not None else get_num_threads()
        self._jobs: Deque[_Job] = collections.deque()  # requests with waiting sentences, by arrival
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._task: Optional[asyncio.Task[None]] = None
        self._wakeup: Optional[asyncio.Event] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self.closing = False
        self._rate: Optional[float] = None  # decoding work per second, smoothed over the last batches
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
        self._prune()
        if self._jobs and self._loop is not loop:
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
        """Answer the requests still queued with 503 (the server is shutting down), wait for the
        decode in progress, then stop the loop task and the worker thread."""
        self.closing = True
        stopping = ServeError(503, "the server shut down before this request was decoded", headers={"Retry-After": "1"})
        for job in self._jobs:
            job.waiting.clear()
            job.fail(stopping)
        self._jobs.clear()
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
        return sum(len(job.waiting) for job in self._jobs if not job.future.done())

    # --- requests --------------------------------------------------------------------------
    def decode_options(self, beam_size: int, n_best: int, **sampling: Any) -> DecodeOptions:
        """How a request is decoded: its beam size, ``n_best`` and sampling settings
        (``sampling_topk``, ...), the server's length penalty, the translator's output limit and
        compute type, and the beam rules the server has no option for (``length_penalty_mode``,
        ``early_stopping``, ``force_end``) from the translator's :attr:`~Translator.decode_defaults`
        (an imported model's generation rules), so that a request is decoded as
        :meth:`Translator.translate_batch` decodes it with the same beam size and length penalty."""
        rules = resolved_rules(
            self.translator.decode_defaults, length_penalty_mode=None, early_stopping=None, force_end=None
        )
        return DecodeOptions(
            beam_size=beam_size,
            length_penalty=self.config.length_penalty,
            n_best=n_best,
            max_output_tokens=self.translator.max_output_tokens,
            compute_type=self.translator.compute_type,
            **rules,
            **sampling,
        )

    def enqueue(
        self,
        encoded: Sequence[EncodedSource],
        *,
        beam_size: int = 1,
        n_best: int = 1,
        return_attention: bool = False,
        work: Optional[Sequence[int]] = None,
        sampling: Optional[Dict[str, Any]] = None,
        target_prefix: Optional[Sequence[Sequence[int]]] = None,
        constraints: Optional[Sequence[Sequence[Sequence[int]]]] = None,
    ) -> _Job:
        """Queue one request's sentences (from :func:`~transformer_cpp.translate.encode_source`); their
        results come as the returned job's ``future``. ``work``: each sentence's decoding work
        (:func:`text_work`), computed here when not given. Call :meth:`_Job.cancel` on a request given up.

        ``sampling`` (DecodeOptions' ``sampling_topk``, ``sampling_topp``, ``sampling_temperature``,
        ``seed``), ``target_prefix`` and ``constraints`` (per sentence, target ids): a request with a
        prefix, constraints or ``sampling_topk`` above 1 is decoded by itself, its sentences in
        order in chunks of ``SEPARATE_CHUNK`` (as ``Translator.translate_batch`` decodes them).

        Raises:
            ServeError: 503 when the server is shutting down; :class:`QueueFull` when more than
                ``max_queue`` sentences would wait.
        """
        if self.closing:
            raise ServeError(503, "the server is shutting down", headers={"Retry-After": "1"})
        options = self.decode_options(beam_size, n_best, **(sampling or {}))
        separate = target_prefix is not None or constraints is not None or options.sampling_topk > 1
        self.start()
        queued = self.queued
        if queued + len(encoded) > self.config.max_queue:
            self.stats["rejected_queue_full"] += 1
            raise QueueFull(
                f"the server is busy: {queued} sentences are waiting (at most {self.config.max_queue}, "
                "max_queue); retry later"
            )
        if work is None:
            work = [text_work(len(e.ids), options.limit(len(e.ids)), beam_size) for e in encoded]
        assert self._loop is not None and self._wakeup is not None
        job = _Job(len(encoded), options, bool(return_attention), self._loop.time(), self._loop, separate)
        for i, ((source, ids, warning), w) in enumerate(zip(encoded, work)):
            item = QueuedSentence(source, ids, bool(return_attention), job, i, warning, int(w))
            item.prefix = None if target_prefix is None else list(target_prefix[i])
            item.constraints = None if constraints is None else [list(c) for c in constraints[i]]
            job.waiting.append(item)
        if encoded:
            self._jobs.append(job)
        else:
            job.future.set_result([])
        self.stats["requests"] += 1
        self._wakeup.set()
        return job

    async def submit(
        self,
        encoded: Sequence[EncodedSource],
        *,
        beam_size: int = 1,
        n_best: int = 1,
        return_attention: bool = False,
    ) -> List[Dict[str, Any]]:
        """Queue one request's sentences (from :func:`~transformer_cpp.translate.encode_source`) and
        wait for their results; a cancelled wait drops the sentences not decoded yet."""
        job = self.enqueue(encoded, beam_size=beam_size, n_best=n_best, return_attention=return_attention)
        try:
            return await job.future
        finally:
            job.cancel()  # nothing when it is done; else its waiting sentences are dropped

    # --- the loop --------------------------------------------------------------------------
    def _prune(self) -> None:
        """Forget the requests that are answered, given up, or have nothing left to decode."""
        if any(job.future.done() or not job.waiting for job in self._jobs):
            self._jobs = collections.deque(j for j in self._jobs if not j.future.done() and j.waiting)

    def batch_budget(self) -> int:
        """Most work in the next batch: ``max_batch_tokens``, or less when the speed measured on
        the last batches says that much would take longer than ``batch_seconds``."""
        cfg = self.config
        if not cfg.batch_seconds or self._rate is None:
            return cfg.max_batch_tokens
        return max(1, min(cfg.max_batch_tokens, int(self._rate * cfg.batch_seconds)))

    def _take(self) -> Tuple[Optional[DecodeOptions], List[QueuedSentence]]:
        """The next batch: the options of the request with the least work decoded so far (the
        oldest among equals), and sentences with those options, one per request in turn (least
        served first), up to ``max_batch`` sentences and :meth:`batch_budget` of work (at least
        one sentence, however large)."""
        self._prune()
        if not self._jobs:
            return None, []
        order = sorted(range(len(self._jobs)), key=lambda k: (self._jobs[k].served, k))
        lead = self._jobs[order[0]]
        options = lead.options
        candidates = [
            self._jobs[k]
            for k in order
            if self._jobs[k].options == options
            and self._jobs[k].attention == lead.attention
            and not self._jobs[k].separate
        ]
        cfg = self.config
        budget, most = self.batch_budget(), cfg.max_batch
        if lead.separate:  # its next chunk, whatever its work: the chunk translate_batch decodes
            candidates, budget, most = [lead], 2**62, SEPARATE_CHUNK
        batch: List[QueuedSentence] = []
        work = 0
        added = True
        while added and len(batch) < most:
            added = False
            for job in candidates:
                if not job.waiting or len(batch) >= most:
                    continue
                item = job.waiting[0]
                if batch and work + item.work > budget:
                    continue  # a smaller sentence of another request may still fit
                job.waiting.popleft()
                job.served += item.work
                batch.append(item)
                work += item.work
                added = True
        self._prune()
        return options, batch

    async def _run(self) -> None:
        assert self._loop is not None and self._wakeup is not None
        loop, wakeup, cfg = self._loop, self._wakeup, self.config
        max_wait = cfg.max_wait_ms / 1000.0
        while True:
            self._prune()
            if not self._jobs:
                if self.closing:
                    return
                wakeup.clear()
                await wakeup.wait()
                continue
            # wait for the batch to fill, at most max_wait after its oldest sentence arrived
            while self.queued < cfg.max_batch and not self.closing and self._jobs:
                remaining = min(job.arrival for job in self._jobs) + max_wait - loop.time()
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
            except BaseException as exc:  # a failed decode fails its requests, not the server
                if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                    raise
                # the tokenizers library panics with a BaseException that is not an Exception
                failure = ServeError(500, f"decoding failed: {type(exc).__name__}: {exc}")
                for item in batch:
                    if item.job is not None:
                        item.job.fail(failure)
                continue
            finally:
                elapsed = time.perf_counter() - started
                self.stats["decode_seconds"] += elapsed
            rate = sum(item.work for item in batch) / max(elapsed, 1e-4)
            self._rate = rate if self._rate is None else 0.5 * (self._rate + rate)
            for item, result in zip(batch, results):
                if item.job is not None:
                    item.job.done(item.index, result)
