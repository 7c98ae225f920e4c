"""The server under abuse (transformer_cpp.serve): requests bounded in tokens and attention weights,
a fair batcher (a small request is answered while a large one is decoded), answers built off the
event loop, slow clients timed out, a connection cap, the Host check, a prompt and honest
shutdown, tokenizers that panic, text of invisible characters, and a /docs page that loads
nothing from elsewhere.

Most cases run a real ``transformer-cpp serve`` in a subprocess on 127.0.0.1, with bounded counts
and times. The model is the reversal task's tiny model with its end token made impossible (the
output bias of the end token is -1e4): every sentence is decoded to its output limit, the most
work and the largest answer a request can cost.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import List, Optional, Tuple

import httpx
import pytest

from transformer_cpp import serve
from transformer_cpp.checkpoint import save_checkpoint
from transformer_cpp.translate import Translator, encode_source

from helpers.toy_task import tiny_model
from helpers.toy_task import one_thread, tok  # noqa: F401  (shared fixtures)

HOST = "127.0.0.1"


@pytest.fixture(scope="module")
def endless(tok):
    """A model that never ends a sentence: every decode runs to its output limit."""
    model = tiny_model(tok, d_model=64)
    model.parameters()["output.bias"].value[tok.end_id] = -1e4
    return Translator(model, tok, tok)


@pytest.fixture(scope="module")
def endless_run(endless, tmp_path_factory):
    run = tmp_path_factory.mktemp("endless") / "run"
    save_checkpoint(run, endless.model, endless.src_tokenizer, endless.tgt_tokenizer, optimizer=False)
    return run


class Server:
    """``transformer-cpp serve --model RUN --port 0 --threads 1 ...`` in a subprocess."""

    def __init__(self, model_dir: Path, *extra: str) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        command = [sys.executable, "-m", "transformer_cpp", "serve", "--model", str(model_dir), "--port", "0"]
        self.proc = subprocess.Popen(
            [*command, "--threads", "1", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self.lines: List[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                self.url = f"http://{HOST}:{self.port}"
                threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()
                return
        self.proc.kill()
        raise AssertionError("the server did not start:\n" + "".join(self.lines))

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture
def start():
    servers: List[Server] = []

    def make(model_dir: Path, *extra: str) -> Server:
        servers.append(Server(model_dir, *extra))
        return servers[-1]

    yield make
    for s in servers:
        s.stop()


def connect(server: Server, timeout: float = 15.0) -> socket.socket:
    return socket.create_connection((HOST, server.port), timeout=timeout)


def read_answer(sock: socket.socket) -> Tuple[Optional[int], bytes]:
    """Everything the server sends until it closes the connection (or the socket's timeout):
    the status of the response (None if there is none) and the raw bytes."""
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    except ConnectionResetError:
        pass
    m = re.match(rb"HTTP/1\.1 (\d{3})", data)
    return (int(m.group(1)) if m else None), data


def json_body(raw: bytes) -> dict:
    return json.loads(raw.split(b"\r\n\r\n", 1)[1])


def post_request(path: str, body: bytes, host: str = HOST) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def assert_no_traceback(server: Server) -> None:
    assert "Traceback" not in server.output, server.output[-4000:]


# ------------------------------------------------------------------------------------ work limits


def test_requests_are_bounded_in_tokens_and_attention_weights(endless):
    """Characters do not bound work (an emoji is four byte-level tokens): texts over
    max_source_tokens, requests over max_request_tokens and attention over max_attention_weights
    get 422 naming the limit and its value; the largest request allowed is answered, its answer
    a bounded size."""
    app = serve.create_app(endless)
    with serve.background_server(app, HOST, 0) as url, httpx.Client(base_url=url, timeout=120) as c:
        long = " ".join("abcdef"[i % 6] for i in range(300))  # 302 tokens with start and end
        r = c.post("/translate", json={"text": long})
        assert r.status_code == 422, r.text[:300]
        assert "max_source_tokens" in r.json()["error"] and "256" in r.json()["error"] and "302" in r.json()["error"]

        text = " ".join("abcdef"[i % 6] for i in range(198))  # 200 tokens: output limit 310
        r = c.post("/translate", json={"texts": [text] * 64, "beam_size": 8})
        assert r.status_code == 422 and "max_request_tokens" in r.json()["error"], r.text[:300]
        assert "131,072" in r.json()["error"] and "{:,}".format(64 * 8 * (200 + 310)) in r.json()["error"]

        r = c.post("/translate", json={"texts": [text] * 10, "return_attention": True})
        assert r.status_code == 422 and "max_attention_weights" in r.json()["error"], r.text[:300]
        assert "262,144" in r.json()["error"] and "{:,}".format(10 * 200 * 310) in r.json()["error"]

        # the largest attention answer allowed: 4 x 200 x 310 = 248,000 weights
        r = c.post("/translate", json={"texts": [text] * 4, "return_attention": True})
        assert r.status_code == 200, r.text[:300]
        maps = [t["attention"]["weights"] for t in r.json()["translations"]]
        assert [(len(m), len(m[0])) for m in maps] == [(310, 200)] * 4  # every sentence at its output limit
        assert len(r.content) < 4 << 20


def test_blank_text_is_refused_whatever_invisible_characters_it_holds(endless):
    """Text of zero-width spaces, joiners, a byte-order mark or other format characters is empty:
    refused as whitespace is, not given an invented translation."""
    app = serve.create_app(endless)
    with serve.background_server(app, HOST, 0) as url, httpx.Client(base_url=url, timeout=60) as c:
        for body, where in (
            ({"text": "\u200b\u200b"}, "text"),
            ({"text": "\ufeff \u2060\u200d"}, "text"),
            ({"texts": ["a b", "\u200c\u180e\u3164"]}, "texts[1]"),
        ):
            r = c.post("/translate", json=body)
            assert r.status_code == 422, r.text[:300]
            assert r.json()["error"].startswith(f"{where} is empty"), r.json()
        r = c.post("/translate", json={"text": "\u200ba\u200b"})  # a visible letter among them
        assert r.status_code == 200


# ------------------------------------------------------------------------------------ fairness


def test_the_batcher_serves_the_least_served_request_first(endless):
    """A request that arrives while a large one waits is in the next batch, with its own options
    (not after every sentence of the large one); a batch holds at most max_batch_tokens of work
    unless one sentence alone is larger."""
    config = serve.ServeConfig(max_batch=4, max_batch_tokens=100, batch_seconds=0, max_beam_size=8)
    enc = encode_source(endless, "a b c d e")  # 7 tokens: beam 2 -> 2 x (7 + 20) = 54 each

    async def main():
        batcher = serve.Batcher(endless, config)
        big = batcher.enqueue([enc] * 10, beam_size=2)
        first = batcher._take()
        small = batcher.enqueue([encode_source(endless, "f")], beam_size=1)
        second = batcher._take()
        third = batcher._take()
        huge = batcher.enqueue([enc], beam_size=8)  # 8 x 27 = 216 > 100: alone
        batches = [first, second, third, batcher._take()]
        for job in (big, small, huge):
            job.cancel()
        await batcher.close()
        return batches

    (o1, b1), (o2, b2), (o3, b3), (o4, b4) = asyncio.run(main())
    assert o1.beam_size == 2 and len(b1) == 1  # 2 x 54 > 100
    assert o2.beam_size == 1 and [it.source for it in b2] == ["f"]  # the small request, next
    assert o3.beam_size == 2 and len(b3) == 1
    assert o4.beam_size == 8 and len(b4) == 1 and b4[0].work == 216  # least served first: the new request


def test_a_small_request_is_answered_while_the_largest_runs(endless_run, start):
    """64 sentences at beam 8 decoded to 1,000 tokens each keep the decoder busy for many decode
    calls; a one-word request sent meanwhile is answered within seconds, before the large one.
    When the large request's client disconnects, its remaining sentences are dropped and the
    server logs one line."""
    server = start(
        endless_run, "--max-output-tokens", "1000", "--max-request-tokens", "100000000", "--batch-seconds", "0.2"
    )
    big = connect(server, timeout=120)
    try:
        big.sendall(post_request("/translate", json.dumps({"texts": ["a b c d e"] * 64, "beam_size": 8}).encode()))
        with httpx.Client(base_url=server.url, timeout=60) as c:
            deadline = time.monotonic() + 60
            while c.get("/health").json()["batcher"]["batches"] < 1:  # the large request is decoding
                assert time.monotonic() < deadline
                time.sleep(0.05)
            started = time.monotonic()
            r = c.post("/translate", json={"text": "f"})
            latency = time.monotonic() - started
            assert r.status_code == 200 and r.json()["translations"][0]["source"] == "f"
            big.setblocking(False)
            with pytest.raises(BlockingIOError):  # the large request is not answered yet
                big.recv(1)
            assert latency < 10, latency
            stats = c.get("/health").json()["batcher"]
            assert stats["queued"] > 0, stats  # sentences of the large request still wait
            big.close()
            deadline = time.monotonic() + 60
            while c.get("/health").json()["batcher"]["queued"] > 0:  # dropped, not decoded
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert c.get("/health").json()["batcher"]["sentences"] < 64 + 1
        time.sleep(0.5)
        gone = [line for line in server.lines if "disconnected" in line]
        assert len(gone) == 1 and "POST /translate" in gone[0], server.output[-3000:]
        assert_no_traceback(server)
    finally:
        big.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the server's RSS from /proc")
def test_attention_answers_leave_memory_within_twice_idle(endless_run, start):
    """An attention-heavy request (32 KB of text with return_attention) is refused by
    max_attention_weights before any work; the largest one allowed, repeated, leaves the server's
    resident memory within twice its idle size."""
    server = start(endless_run)
    text = " ".join("abcdef"[i % 6] for i in range(248))  # 250 tokens: output limit 385
    with httpx.Client(base_url=server.url, timeout=120) as c:
        assert c.post("/translate", json={"text": "a b", "return_attention": True}).status_code == 200
        time.sleep(0.5)
        idle = server.rss_mb()
        started = time.monotonic()
        r = c.post("/translate", json={"texts": [text] * 64, "return_attention": True})
        assert r.status_code == 422 and "max_attention_weights" in r.json()["error"], r.text[:300]
        assert time.monotonic() - started < 10
        for _ in range(5):
            r = c.post("/translate", json={"texts": [text] * 2, "return_attention": True})  # 192,500 weights
            assert r.status_code == 200 and len(r.json()["translations"][1]["attention"]["weights"]) == 385
        time.sleep(0.5)
        after = server.rss_mb()
    assert after < 2 * idle, (idle, after)
    assert_no_traceback(server)


def test_answers_are_rendered_off_the_event_loop(endless, monkeypatch):
    """The JSON of an answer (megabytes with attention maps) is made in a worker thread, not on
    the event loop that every other client waits on."""
    threads = []
    original = serve.app._render

    def recording(payload):
        threads.append(threading.current_thread().name)
        return original(payload)

    monkeypatch.setattr(serve.app, "_render", recording)
    with serve.background_server(serve.create_app(endless), HOST, 0) as url:
        r = httpx.post(url + "/translate", json={"text": "a b", "return_attention": True}, timeout=60)
        assert r.status_code == 200 and r.json()["translations"][0]["attention"]["weights"]
    assert threads and all(name != "uvicorn" for name in threads), threads


# ------------------------------------------------------------------------------------ slow clients


def test_slow_clients_are_timed_out_and_others_served(endless_run, start):
    """With --read-timeout 1: a connection that sends nothing, one that sends half its headers and
    one that sends its headers and half its body each get a JSON 408 and are closed within
    seconds; meanwhile other clients are served. A client that leaves in the middle of its body
    is one log line."""
    server = start(endless_run, "--read-timeout", "1")
    silent, half_headers, half_body = connect(server), connect(server), connect(server)
    half_headers.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
    half_body.sendall(post_request("/translate", b'{"text": "a b c"}' + b" " * 100)[:-60])
    started = time.monotonic()
    assert httpx.post(server.url + "/translate", json={"text": "a b"}, timeout=30).status_code == 200
    for sock in (silent, half_headers, half_body):
        status, raw = read_answer(sock)
        assert status == 408, raw[:300]
        assert "read_timeout" in json_body(raw)["error"]
        sock.close()
    assert time.monotonic() - started < 10
    leaving = connect(server)
    leaving.sendall(post_request("/translate", b'{"text": "a b c"}' + b" " * 100)[:-60])
    time.sleep(0.3)
    leaving.close()
    time.sleep(1.5)
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    lines = [line for line in server.lines if "disconnected" in line]
    assert len(lines) == 1, server.output[-3000:]
    assert_no_traceback(server)


def test_connections_are_capped_and_headers_bounded(endless_run, start):
    """Beyond --max-connections open connections a request gets a JSON 503; headers over
    --max-header-bytes get a JSON 431; both recover."""
    server = start(endless_run, "--max-connections", "3", "--max-header-bytes", "2048", "--read-timeout", "20")
    idle = [connect(server) for _ in range(3)]
    time.sleep(0.2)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        r = c.get("/health")
        assert r.status_code == 503 and "max_connections" in r.json()["error"], r.text
    for sock in idle:
        sock.close()
    time.sleep(0.3)
    sock = connect(server)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"x" * 4000 + b"\r\n\r\n")
    status, raw = read_answer(sock)
    assert status == 431 and "max_header_bytes" in json_body(raw)["error"], raw[:300]
    sock.close()
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    assert_no_traceback(server)


# ------------------------------------------------------------------------------------ shutdown


def test_graceful_timeout_0_stops_at_once_and_answers_503(endless_run, start):
    """--graceful-timeout 0 means no grace period: on SIGTERM, with a stalled client connected and
    a request waiting in the batcher (held by --max-wait-ms), the request gets a JSON 503, the
    server exits 0 within seconds, and the log holds no traceback."""
    server = start(endless_run, "--graceful-timeout", "0", "--max-wait-ms", "20000", "--read-timeout", "60")
    stalled = connect(server)
    stalled.sendall(b"POST /translate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    waiting = connect(server, timeout=30)
    waiting.sendall(post_request("/translate", b'{"text": "a b c"}'))
    with httpx.Client(base_url=server.url, timeout=30) as c:
        deadline = time.monotonic() + 30
        while c.get("/health").json()["batcher"]["queued"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    status, raw = read_answer(waiting)
    assert status == 503, raw[:300]
    assert json_body(raw)["status"] == 503
    assert server.proc.wait(20) == 0
    assert time.monotonic() - started < 10
    stalled.close()
    waiting.close()
    time.sleep(0.2)
    assert_no_traceback(server)


def test_a_request_over_the_grace_period_gets_503(endless_run, start):
    """With --graceful-timeout 0.5, a request still decoding when the grace period ends gets a JSON
    503 (not a text/plain 500) and the server exits 0 without a traceback."""
    server = start(
        endless_run, "--graceful-timeout", "0.5", "--max-output-tokens", "1000", "--max-request-tokens", "100000000"
    )
    sock = connect(server, timeout=60)
    sock.sendall(post_request("/translate", json.dumps({"texts": ["a b c d e"] * 64, "beam_size": 8}).encode()))
    with httpx.Client(base_url=server.url, timeout=30) as c:
        deadline = time.monotonic() + 30
        while c.get("/health").json()["batcher"]["batches"] < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    server.proc.send_signal(signal.SIGTERM)
    status, raw = read_answer(sock)
    sock.close()
    assert status == 503 and b"application/json" in raw, raw[:300]
    assert server.proc.wait(30) == 0
    assert_no_traceback(server)


# ------------------------------------------------------------------------------------ tokenizers


class PanicException(BaseException):
    """What the tokenizers library raises when its Rust code panics: a BaseException, not an
    Exception."""


class Panicking:
    """A tokenizer that panics on demand, otherwise the wrapped one."""

    def __init__(self, inner):
        self.inner = inner
        self.encode_panics = self.decode_panics = False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode(self, *args, **kwargs):
        if self.encode_panics:
            raise PanicException("called `Result::unwrap()` on an `Err` value")
        return self.inner.encode(*args, **kwargs)

    def decode(self, *args, **kwargs):
        if self.decode_panics:
            raise PanicException("index out of bounds")
        return self.inner.decode(*args, **kwargs)


def test_a_tokenizer_that_panics_gets_a_json_error_and_the_server_goes_on(endless, tok):
    src, tgt = Panicking(tok), Panicking(tok)
    translator = Translator(endless.model, src, tgt)
    with (
        serve.background_server(serve.create_app(translator), HOST, 0) as url,
        httpx.Client(base_url=url, timeout=60) as c,
    ):
        src.encode_panics = True
        r = c.post("/translate", json={"texts": ["a", "b"]})
        assert r.status_code == 500 and r.headers["content-type"] == "application/json", r.text[:300]
        assert "tokenizer" in r.json()["error"] and "texts[0]" in r.json()["error"]
        src.encode_panics, tgt.decode_panics = False, True
        r = c.post("/translate", json={"text": "a b"})
        assert r.status_code == 500 and "PanicException" in r.json()["error"], r.text[:300]
        tgt.decode_panics = False
        r = c.post("/translate", json={"text": "a b"})  # the batcher survived
        assert r.status_code == 200 and r.json()["translations"][0]["source"] == "a b"


# ------------------------------------------------------------------------------------ Host, /docs


def test_host_header_must_name_this_machine_on_loopback(endless):
    """On a loopback address a request whose Host header names another machine (DNS rebinding:
    a web page whose domain resolves to 127.0.0.1) is refused with a JSON 400; loopback names with
    any port pass, and allowed_hosts adds names."""
    with (
        serve.background_server(serve.create_app(endless), HOST, 0) as url,
        httpx.Client(base_url=url, timeout=30) as c,
    ):
        port = url.rsplit(":", 1)[1]
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil"):
            r = c.get("/info", headers={"Host": host})
            assert r.status_code == 400 and "Host" in r.json()["error"], (host, r.text[:300])
            assert "checkpoint" not in r.text
        for host in ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", "[::1]:8000", "LOCALHOST."):
            assert c.get("/health", headers={"Host": host}).status_code == 200, host
    app = serve.create_app(endless, allowed_hosts=["translate.example.org", "*.lan"])
    with serve.background_server(app, HOST, 0) as url, httpx.Client(base_url=url, timeout=30) as c:
        for host, status in (
            ("translate.example.org", 200),
            ("box.lan", 200),
            ("example.org", 400),
            ("localhost", 200),
        ):
            assert c.get("/health", headers={"Host": host}).status_code == status, host
    with pytest.raises(TypeError, match="allowed_hosts"):
        serve.ServeConfig(allowed_hosts="example.org")
    with pytest.raises(ValueError, match="allowed_hosts"):
        serve.ServeConfig(allowed_hosts=["exa mple.org"])


def test_docs_page_loads_nothing_from_elsewhere(endless):
    with (
        serve.background_server(serve.create_app(endless), HOST, 0) as url,
        httpx.Client(base_url=url, timeout=30) as c,
    ):
        r = c.get("/docs")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert "<script" not in r.text.lower() and "cdn" not in r.text.lower()
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", r.text), "an external resource"
        assert "default-src 'none'" in r.headers["content-security-policy"]
        assert "/translate" in r.text and 'href="openapi.json"' in r.text
        assert c.get("/redoc").status_code == 404


# ------------------------------------------------------------------------------------ command line


def test_command_line_options_of_the_guards(monkeypatch, tmp_path):
    from transformer_cpp import cli

    args = cli.build_parser().parse_args(
        [
            "serve",
            "--model",
            "m",
            "--max-source-tokens",
            "100",
            "--max-request-tokens",
            "5000",
            "--max-attention-weights",
            "7000",
            "--max-batch-tokens",
            "900",
            "--batch-seconds",
            "0.5",
            "--read-timeout",
            "2.5",
            "--allowed-hosts",
            "example.org,*.lan",
            "--graceful-timeout",
            "0",
        ]
    )
    cfg = cli.serve.config_from_args(args)
    assert (cfg.max_source_tokens, cfg.max_request_tokens, cfg.max_attention_weights) == (100, 5000, 7000)
    assert (cfg.max_batch_tokens, cfg.batch_seconds, cfg.read_timeout) == (900, 0.5, 2.5)
    assert cfg.allowed_hosts == ("example.org", "*.lan")
    assert (args.max_connections, args.keep_alive_timeout, args.max_header_bytes) == (256, 5.0, 16384)
    for bad in (["--read-timeout", "0"], ["--allowed-hosts", "a b"], ["--max-connections", "0"]):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["serve", "--model", "m"] + bad)
    seen = {}
    monkeypatch.setattr(cli.serve, "serve", lambda translator, **kw: seen.update(kw) or 0)
    loaded = types.SimpleNamespace(checkpoint="m/epoch-0001", src_lang="en", tgt_lang="es")
    monkeypatch.setattr(cli.serve.Translator, "from_checkpoint", lambda *a, **k: loaded)
    assert cli.serve.run_from_args(args) == 0
    assert seen["graceful_timeout"] == 0  # no grace period, not "wait forever"
