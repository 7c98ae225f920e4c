"""Section 5 of the benchmark: the HTTP server's requests per second, with and without batching.

:func:`bench_serving` runs the app of :func:`transformer_cpp.serve.create_app` under uvicorn in a
thread of this process, on a random model of the ``tiny`` preset (:func:`serving_translator`),
with request batching (``--max-batch 32``) and one sentence at a time (``--max-batch 1``); the
load comes from ``SERVING_CLIENTS`` keep-alive clients in a child process
(:func:`serving_client_process`, driven by :class:`LoadGenerator`), as real clients would not
share the server's GIL. Needs the ``serve`` extra; without it the section is skipped with a note.
"""

from __future__ import annotations

import logging

import contextlib
import json
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .._runtime import set_num_threads
from ..task import preset_config
from ..tokenizer import SubwordTokenizer
from ..translate import Translator
from ..model import Transformer
from ..serve.app import background_server, create_app, uvicorn_choices
from .machine import log

__all__ = ["SERVING_CLIENTS", "LoadGenerator", "bench_serving", "serving_client_process", "serving_translator"]

SERVING_CLIENTS = 32  # concurrent HTTP clients


def serving_translator(
    seed: int = 0, vocab_size: int = 8000, words: int = 8000, corpus: int = 12000
) -> Tuple[Any, List[str]]:
    """A randomly initialised model of the ``tiny`` preset (its architecture with dropout off,
    and its recipe's 8,000-token vocabularies) with a subword vocabulary learnt from ``corpus``
    synthetic sentences over ``words`` made-up words, as a ``Translator``; and 256 synthetic
    input sentences of 4-10 words (about 18 tokens). A random model rarely emits the end token,
    so every sentence runs to its output limit (``1.5 * source tokens + 10``): the worst case
    for the server."""
    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    vocabulary = ["".join(rng.choice(letters, size=int(rng.integers(2, 9)))) for _ in range(words)]

    def sentence(lo: int, hi: int) -> str:
        return " ".join(rng.choice(vocabulary, size=int(rng.integers(lo, hi + 1)))) + "."

    quiet = logging.getLogger(SubwordTokenizer.__module__)
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        tok = SubwordTokenizer.build_from_corpus([sentence(3, 12) for _ in range(corpus)], vocab_size)
    finally:
        quiet.setLevel(level)
    config = dict(preset_config("tiny"), dropout=0.0)
    model = Transformer(tok.vocab_size, tok.vocab_size, seed=seed, **config)
    return Translator(model, tok, tok, src_lang="en"), [sentence(4, 10) for _ in range(256)]


async def _http_client(host: str, port: int, bodies: Sequence[bytes], latencies: List[float]) -> None:
    """One keep-alive HTTP/1.1 connection posting ``bodies`` to /translate one after the other
    (a minimal client: the load generator should cost little next to the server)."""
    import asyncio

    reader, writer = await asyncio.open_connection(host, port)
    try:
        for body in bodies:
            started = time.perf_counter()
            writer.write(
                b"POST /translate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(body), body)
            )
            status = await reader.readline()
            length = 0
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b""):
                    break
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            answer = await reader.readexactly(length)
            if b" 200 " not in status:
                raise RuntimeError(f"serving bench: {status.decode().strip()}: {answer[:200]!r}")
            latencies.append(time.perf_counter() - started)
    finally:
        writer.close()


def _client_loop() -> Tuple[Callable[[], Any], str]:
    """The load generator's event loop: uvloop's when it is installed (a cheaper client leaves more
    of the shared cores to the server), else asyncio's."""
    import asyncio

    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop, "asyncio"
    return uvloop.new_event_loop, "uvloop"


def _serving_load(
    host: str, port: int, per_client: Sequence[Sequence[bytes]], new_loop: Callable[[], Any]
) -> Tuple[float, List[float]]:
    """Run one client per entry of ``per_client`` at once; (seconds, latencies)."""
    import asyncio

    latencies: List[float] = []

    async def main() -> None:
        await asyncio.gather(*(_http_client(host, port, bodies, latencies) for bodies in per_client))

    loop = new_loop()
    try:
        started = time.perf_counter()
        loop.run_until_complete(main())
        return time.perf_counter() - started, latencies
    finally:
        loop.close()


def serving_client_process() -> None:
    """The load generator of :func:`bench_serving`, run in its own process (a real client is not in
    the server's process, and would not share its GIL). Says ``{"loop": ...}`` on one line of
    standard output, then for every job (one JSON line on standard input: ``host``, ``port`` and
    ``clients``, one list of request bodies per client) answers one line: ``seconds`` and
    ``latencies``, or ``error``. Ends at the end of its input."""
    new_loop, name = _client_loop()
    out = sys.stdout
    out.write(json.dumps({"loop": name}) + "\n")
    out.flush()
    for line in sys.stdin:
        job = json.loads(line)
        try:
            seconds, latencies = _serving_load(
                job["host"], int(job["port"]), [[b.encode() for b in bodies] for bodies in job["clients"]], new_loop
            )
            answer: Dict[str, Any] = {"seconds": seconds, "latencies": latencies}
        except Exception as exc:  # reported to the bench, which raises it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


class LoadGenerator:
    """The parent's handle on :func:`serving_client_process` (``python -c``; started once,
    before anything is timed, and used for every job)."""

    def __init__(self, timeout: float = 600.0) -> None:
        import queue
        import threading

        self.timeout = timeout
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from transformer_cpp.bench.serving import serving_client_process; serving_client_process()",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._lines: "queue.Queue[str]" = queue.Queue()
        threading.Thread(target=self._read, name="load-generator-reader", daemon=True).start()
        self.loop = self._answer("start")["loop"]

    def _read(self) -> None:
        """Hand the child's answers to :meth:`_answer` (which waits with a timeout); "" at the end."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def _answer(self, what: str) -> Dict[str, Any]:
        import queue

        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            raise RuntimeError(
                f"serving bench: the load generator gave no answer ({what}) in {self.timeout:g} s"
            ) from None
        if not line:
            raise RuntimeError(f"serving bench: the load generator exited ({what}) with status {self.proc.wait()}")
        answer: Dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"serving bench: load generator: {answer['error']}")
        return answer

    def run(self, url: str, per_client: Sequence[Sequence[bytes]]) -> Tuple[float, List[float]]:
        """Run one client per entry of ``per_client`` at once against ``url``; (seconds, latencies)."""
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        job = {
            "host": parts.hostname or "127.0.0.1",
            "port": parts.port or 80,
            "clients": [[b.decode() for b in bodies] for bodies in per_client],
        }
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        answer = self._answer("load")
        return float(answer["seconds"]), [float(x) for x in answer["latencies"]]

    def close(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def bench_serving(
    threads: int,
    quick: bool = False,
    seed: int = 0,
    clients: int = SERVING_CLIENTS,
    requests_per_client: Optional[int] = None,
) -> Dict[str, Any]:
    """Requests per second and latency of ``transformer-cpp serve`` (the app of
    :func:`transformer_cpp.serve.create_app` under uvicorn, with the HTTP parser and event loop of
    :func:`transformer_cpp.serve.uvicorn_choices`, in a thread of this process, on 127.0.0.1)
    with request batching (``--max-batch 32 --max-wait-ms 5``) and one sentence at a time
    (``--max-batch 1``): ``clients`` concurrent keep-alive connections, each posting
    ``{"text": ...}`` requests of one sentence one after the other (16 each; 2 with ``quick``).
    The clients run in a separate process (:func:`serving_client_process`), as real clients
    would: they do not share the server's GIL. Both runs send the same requests, after one
    untimed warm-up request per client. The model is :func:`serving_translator`'s."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        return {"skipped": f"FastAPI/uvicorn not installed ({exc}); pip install 'transformer-cpp[serve]'"}
    set_num_threads(threads)
    # --quick: a small vocabulary, learnt in a fraction of a second (the numbers then mean little)
    translator, sentences = serving_translator(seed, *((1000, 1000, 3000) if quick else ()))
    per = requests_per_client or (2 if quick else 16)
    order = np.random.default_rng(seed).permutation(len(sentences))
    bodies = [json.dumps({"text": sentences[int(i)]}).encode() for i in order]
    timed = [[bodies[(c * per + k) % len(bodies)] for k in range(per)] for c in range(clients)]
    warm = [[bodies[(c * 7 + 3) % len(bodies)]] for c in range(clients)]
    out: Dict[str, Any] = {
        "clients": clients,
        "requests": clients * per,
        "threads": threads,
        "model": {
            k: v
            for k, v in translator.model.config.items()
            if k in ("d_model", "n_layers", "n_heads", "d_ff", "src_vocab_size")
        },
        "mean_output_limit": float(
            np.mean([int(1.5 * len(translator.src_tokenizer.encode(s))) + 10 for s in sentences])
        ),
        "server": uvicorn_choices(),
        "modes": {},
    }
    load = LoadGenerator()
    out["client"] = {"process": "separate", "loop": load.loop}
    try:
        for name, max_batch in (("batching", 32), ("one_at_a_time", 1)):
            log(f"serving: {clients} clients x {per} requests, --max-batch {max_batch}")
            app = create_app(translator, max_batch=max_batch, max_wait_ms=5.0, max_queue=100_000, threads=threads)
            with background_server(app) as url:
                load.run(url, warm)
                before = dict(app.state.batcher.stats)
                seconds, latencies = load.run(url, timed)
                stats = app.state.batcher.stats
            batches = stats["batches"] - before["batches"]
            ms = np.asarray(latencies) * 1000.0
            out["modes"][name] = {
                "max_batch": max_batch,
                "max_wait_ms": 5.0,
                "seconds": seconds,
                "requests_per_s": len(latencies) / seconds,
                "latency_ms_p50": float(np.percentile(ms, 50)),
                "latency_ms_p99": float(np.percentile(ms, 99)),
                "mean_batch": (stats["sentences"] - before["sentences"]) / batches if batches else None,
            }
    finally:
        load.close()
    out["ratio"] = out["modes"]["batching"]["requests_per_s"] / out["modes"]["one_at_a_time"]["requests_per_s"]
    return out
