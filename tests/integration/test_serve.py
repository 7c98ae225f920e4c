"""The HTTP server (transformer_cpp.serve): the batcher, a load test of 50 concurrent clients,
every bad-request case (invalid JSON, wrong types, sizes, beam sizes, content type), the page,
the command line and a graceful SIGTERM.

Everything runs on 127.0.0.1 with the toy reversal model of ``toy_task``, so translations are
exact and a swapped or lost answer cannot go unnoticed.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sys
import threading
import time
from pathlib import Path
import numpy as np
import pytest

import httpx  # the test extra installs it with FastAPI, uvicorn and Selenium: pip install ".[test]"

import transformer_cpp as tc
from transformer_cpp import kernels, serve
from transformer_cpp.checkpoint import save_checkpoint
from transformer_cpp.translate import Translator, encode_source, translate_encoded

from helpers.serve import HOST, running, start_server
from helpers.toy_task import reversal_pairs, trained_reversal_model
from helpers.toy_task import one_thread, tok  # noqa: F401  (shared fixtures)


@pytest.fixture(scope="module")
def translator(tok):
    """A model trained to reverse sequences of a-f."""
    return Translator(trained_reversal_model(tok), tok, tok)


@pytest.fixture(scope="module")
def server(translator):
    """The app with its default settings (max_batch 32, max_wait 5 ms), running."""
    app = serve.create_app(translator)
    with running(app) as url:
        yield url, app


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server[0], timeout=30) as c:
        yield c


def offline(translator, texts, beam_size=1):
    return translator.translate_batch(list(texts), beam_size=beam_size)


# ------------------------------------------------------------------------------------ the batcher


def test_batcher_gathers_requests_and_answers_each_with_its_own(translator, monkeypatch):
    """Concurrent jobs with two beam sizes: batches never mix options or exceed max_batch, and
    every job gets its own sentences back in order."""
    calls = []
    original = serve.decode_items

    def recording(tr, items, options):
        calls.append((len(items), options.beam_size))
        return original(tr, items, options)

    monkeypatch.setattr(serve.batcher, "decode_items", recording)  # the name the batcher calls
    texts = reversal_pairs(40, seed=5)[0]
    jobs = [(texts[i : i + 1 + i % 3], 1 + i % 2) for i in range(0, 40, 3)]  # 1-3 sentences, beam 1 or 2
    expected = {b: dict(zip(texts, offline(translator, texts, b))) for b in (1, 2)}
    config = serve.ServeConfig(max_batch=4, max_wait_ms=50)

    async def main():
        batcher = serve.Batcher(translator, config)
        batcher.start()
        answers = await asyncio.gather(
            *(batcher.submit([encode_source(translator, t) for t in ts], beam_size=b) for ts, b in jobs)
        )
        await batcher.close()
        return answers, batcher.stats

    answers, stats = asyncio.run(main())
    for (ts, b), got in zip(jobs, answers):
        assert [r["text"] for r in got] == [expected[b][t] for t in ts]
        assert [r["source"] for r in got] == ts
    sentences = sum(len(ts) for ts, _ in jobs)
    assert sum(n for n, _ in calls) == sentences == stats["sentences"]
    assert all(n <= 4 for n, _ in calls) and stats["largest_batch"] == 4
    assert len(calls) < len(jobs)  # requests were gathered, not decoded one by one
    assert {b for _, b in calls} == {1, 2}


COMPUTE_TYPES = [
    pytest.param(c, marks=pytest.mark.skipif(not kernels.have_compute_type(c), reason=f"{c} not on this CPU"))
    for c in ("float32", "int8", "bf16")
]


@pytest.mark.parametrize("compute_type", COMPUTE_TYPES)
@pytest.mark.parametrize("beam_size, n_best", [(1, 1), (3, 1), (3, 3)])
def test_batches_answer_with_the_translators_translations(translator, compute_type, beam_size, n_best):
    """The batcher's entries are the Translator's translations of the same inputs and options
    (both call translate_encoded): texts, scores, finished, hypotheses and attention maps, with the
    translator's compute type and output limit."""
    t = Translator(translator.model, translator.src_tokenizer, translator.tgt_tokenizer, compute_type=compute_type)
    t.max_output_tokens = 3  # cuts "a b c d e" short
    texts = ["a b c d e", "c a", "f"]
    batcher = serve.Batcher(t, serve.ServeConfig(max_beam_size=3))
    options = batcher.decode_options(beam_size, n_best)
    assert (options.compute_type, options.max_output_tokens, options.n_best) == (compute_type, 3, n_best)
    encoded = [encode_source(t, x) for x in texts]
    items = [serve.QueuedSentence(e.source, e.ids, True, None, i, e.warning) for i, e in enumerate(encoded)]
    got = serve.decode_items(t, items, options)
    want = t.translate_batch(texts, beam_size=beam_size, return_attention=True)
    assert [r["text"] for r in got] == [w.text for w in want]
    assert [r["source"] for r in got] == [w.source for w in want] == ["a b c d e", "c a", "f"]
    assert [r["finished"] for r in got] == [w.finished for w in want] and not got[0]["finished"]
    assert [r["score"] for r in got] == [w.score for w in want]
    for r, w in zip(got, want):
        att = r["attention"]
        assert att["source_pieces"] == w.source_pieces and att["target_pieces"] == w.target_pieces
        # the server rounds the head average to 4 decimals: at most 5e-5 off
        np.testing.assert_allclose(att["weights"], w.cross_attention().mean(axis=0), rtol=0, atol=5e-5 + 1e-7)
    if n_best > 1:
        alternatives = translate_encoded(t, encoded, options)
        for r, w in zip(got, alternatives):
            assert len(r["hypotheses"]) == n_best and r["hypotheses"][0]["text"] == r["text"]
            assert r["hypotheses"] == [{"text": h.text, "score": h.score, "finished": h.finished} for h in w.hypotheses]
    else:
        assert all("hypotheses" not in r for r in got)
    if beam_size == 1:
        assert all(r["score"] is None for r in got)


def test_the_batcher_does_not_mix_attention_requests_with_others(translator):
    """Sentences that want attention maps are decoded in batches of their own (the decode then
    records the weights), and only they get an attention entry."""
    enc = [encode_source(translator, x) for x in ("a b", "c d", "e f")]

    async def main():
        batcher = serve.Batcher(translator, serve.ServeConfig(max_batch=8))
        plain = batcher.enqueue(enc[:2])
        maps = batcher.enqueue(enc[2:], return_attention=True)
        first, second = batcher._take(), batcher._take()
        await batcher.close()
        return plain, maps, first, second

    plain, maps, first, second = asyncio.run(main())
    assert [(it.job, it.return_attention) for it in first[1]] == [(plain, False), (plain, False)]
    assert [(it.job, it.return_attention) for it in second[1]] == [(maps, True)]
    answers = serve.decode_items(translator, first[1], first[0]) + serve.decode_items(translator, second[1], second[0])
    assert [("attention" in a) for a in answers] == [False, False, True]
    assert [a["text"] for a in answers] == ["b a", "d c", "f e"]


def test_serve_config_rejects_bad_settings():
    for bad, error in (
        (dict(max_batch=0), ValueError),
        (dict(max_wait_ms=-1), ValueError),
        (dict(max_texts=True), TypeError),  # a value of the wrong type
        (dict(beam_size=9, max_beam_size=8), ValueError),
        (dict(max_wait_ms=float("nan")), ValueError),
        (dict(max_queue=1.5), TypeError),
        (dict(max_beam_size=5000), ValueError),  # more than a decoder takes (DecodeOptions' limit)
        (dict(length_penalty=-0.5), ValueError),
    ):
        with pytest.raises(error, match="ServeConfig"):
            serve.ServeConfig(**bad)


# ------------------------------------------------------------------------------------ load test


def test_load_50_clients_1000_requests(translator, server):
    """50 concurrent clients send 1,000 requests (single texts and lists, greedy and beam 2):
    every answer equals the offline translation of its own texts, and none fails."""
    url, app = server
    rng = random.Random(0)
    pool = sorted(set(reversal_pairs(400, seed=77)[0]))
    requests = []
    for i in range(1000):
        beam = 2 if i % 5 == 0 else 1
        if i % 3 == 0:
            requests.append(({"texts": rng.sample(pool, rng.randint(2, 4)), "beam_size": beam}, beam))
        else:
            requests.append(({"text": rng.choice(pool), "beam_size": beam}, beam))
    expected = {b: dict(zip(pool, offline(translator, pool, b))) for b in (1, 2)}
    before = dict(app.state.batcher.stats)

    async def main():
        queue = list(enumerate(requests))
        answers = [None] * len(requests)

        async def client():  # one client, one keep-alive connection, one request at a time
            async with httpx.AsyncClient(base_url=url, timeout=60) as c:
                while queue:
                    i, (body, _) = queue.pop()
                    r = await c.post("/translate", json=body)
                    answers[i] = (r.status_code, r.json())

        await asyncio.gather(*(client() for _ in range(50)))
        return answers

    started = time.perf_counter()
    answers = asyncio.run(main())
    elapsed = time.perf_counter() - started
    failed = [(i, a) for i, a in enumerate(answers) if a is None or a[0] != 200]
    assert not failed, failed[:3]
    wrong = []
    for (body, beam), (_, answer) in zip(requests, answers):
        texts = body.get("texts") or [body["text"]]
        got = [t["text"] for t in answer["translations"]]
        if got != [expected[beam][t] for t in texts] or [t["source"] for t in answer["translations"]] != texts:
            wrong.append((texts, got))
    assert not wrong, wrong[:3]
    stats = app.state.batcher.stats
    requests_done = stats["requests"] - before["requests"]
    batches = stats["batches"] - before["batches"]
    sentences = stats["sentences"] - before["sentences"]
    assert requests_done == 1000 and sentences == sum(len(b.get("texts") or [1]) for b, _ in requests)
    assert sentences / batches > 2, f"{sentences} sentences in {batches} batches: hardly batched"
    print(f"\n1,000 requests from 50 clients in {elapsed:.1f} s; {sentences} sentences in {batches} batches")


# ------------------------------------------------------------------------------------ bad requests

JSON = {"Content-Type": "application/json"}

# (name, request keyword arguments for httpx, expected status)
BAD_REQUESTS = [
    ("invalid JSON", dict(content=b'{"text": "a b"', headers=JSON), 400),
    ("not UTF-8", dict(content=b'{"text": "\xff\xfe"}', headers=JSON), 400),
    ("empty body", dict(content=b"", headers=JSON), 400),
    ("deeply nested JSON", dict(content=b"[" * 30000 + b"]" * 30000, headers=JSON), 400),
    ("JSON array", dict(json=["a b"]), 422),
    ("JSON null", dict(content=b"null", headers=JSON), 422),
    ("missing fields", dict(json={}), 422),
    ("text and texts", dict(json={"text": "a", "texts": ["b"]}), 422),
    ("text of the wrong type", dict(json={"text": 3}), 422),
    ("texts of the wrong type", dict(json={"texts": "a b"}), 422),
    ("a text in texts of the wrong type", dict(json={"texts": ["a", None]}), 422),
    ("beam_size of the wrong type", dict(json={"text": "a", "beam_size": "4"}), 422),
    ("beam_size a float", dict(json={"text": "a", "beam_size": 2.0}), 422),
    ("return_attention of the wrong type", dict(json={"text": "a", "return_attention": "yes"}), 422),
    ("unknown field", dict(json={"text": "a", "file": "/etc/passwd"}), 422),
    ("empty text", dict(json={"text": ""}), 422),
    ("blank text", dict(json={"text": "  \t "}), 422),
    ("empty texts", dict(json={"texts": []}), 422),
    ("an empty text in texts", dict(json={"texts": ["a", ""]}), 422),
    ("zero-width spaces only", dict(json={"text": "\u200b\u200b"}), 422),
    ("format characters only in texts", dict(json={"texts": ["a", "\ufeff\u2060\u200d"]}), 422),
    ("a lone surrogate", dict(content=b'{"text": "a \\ud800"}', headers=JSON), 422),
    ("1 MB text", dict(json={"text": "a " * 500_000}), 413),
    ("text over max_chars", dict(json={"text": "a" * 1001}), 422),
    ("10,000 texts", dict(json={"texts": ["a"] * 10_000}), 422),
    ("beam size 0", dict(json={"text": "a", "beam_size": 0}), 422),
    ("beam size 1000", dict(json={"text": "a", "beam_size": 1000}), 422),
    ("n_best over beam_size", dict(json={"text": "a", "beam_size": 2, "n_best": 3}), 422),
    ("n_best 0", dict(json={"text": "a", "n_best": 0}), 422),
    ("text/plain", dict(content=b'{"text": "a"}', headers={"Content-Type": "text/plain"}), 415),
    ("form data", dict(data={"text": "a"}), 415),
    ("no content type", dict(content=b'{"text": "a"}'), 415),
]


@pytest.mark.parametrize("name, kwargs, status", BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_request_gets_a_json_error_and_the_next_request_is_served(client, translator, name, kwargs, status):
    r = client.post("/translate", **kwargs)
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["status"] == status and isinstance(body["error"], str) and body["error"]
    ok = client.post("/translate", json={"text": "a b c d"})
    assert ok.status_code == 200 and ok.json()["translations"][0]["text"] == "d c b a"


def test_oversized_body_without_content_length_is_refused(client):
    """A chunked body (no Content-Length) is counted while it is read."""

    def chunks():
        for _ in range(100):
            yield b" " * 4096

    r = client.post("/translate", content=chunks(), headers=JSON)
    assert r.status_code == 413 and "bytes" in r.json()["error"]
    assert client.post("/translate", json={"text": "b a"}).json()["translations"][0]["text"] == "a b"


def test_other_routes_and_methods_give_json_errors(client):
    r = client.get("/translate")
    assert r.status_code == 405 and r.json()["status"] == 405
    r = client.get("/no/such/page")
    assert r.status_code == 404 and r.json()["error"]
    r = client.get("/translate/../../etc/passwd")
    assert r.status_code == 404


def test_full_queue_answers_503_and_recovers(translator):
    """More sentences than max_queue would wait: 503 with Retry-After, then normal service."""
    app = serve.create_app(translator, max_queue=2, max_wait_ms=0)
    with running(app) as url, httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/translate", json={"texts": ["a", "b", "c"]})
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and "busy" in r.json()["error"]
        r = c.post("/translate", json={"texts": ["a b", "c d"]})
        assert r.status_code == 200 and [t["text"] for t in r.json()["translations"]] == ["b a", "d c"]


# ------------------------------------------------------------------------------------ the API


def test_n_best_scores_and_attention_match_the_translator(translator, client):
    want = translator.translate("c a f e", beam_size=3, return_attention=True)  # the server is idle
    r = client.post("/translate", json={"text": "c a f e", "beam_size": 3, "n_best": 3, "return_attention": True})
    assert r.status_code == 200
    body = r.json()
    assert body["beam_size"] == 3 and body["n_best"] == 3
    t = body["translations"][0]
    assert t["text"] == want.text == "e f a c" and t["finished"] is True
    assert t["score"] == pytest.approx(want.score, rel=1e-4, abs=1e-6)
    hyps = t["hypotheses"]
    assert len(hyps) == 3 and hyps[0]["text"] == t["text"] and hyps[0]["score"] == t["score"]
    assert hyps[0]["score"] >= hyps[1]["score"] >= hyps[2]["score"]
    att = t["attention"]
    assert att["source_pieces"] == want.source_pieces and att["target_pieces"] == want.target_pieces
    np.testing.assert_allclose(att["weights"], want.cross_attention().mean(axis=0), atol=1e-3)
    assert att["layer"] == "decoder.layers.0.cross_attention"
    # greedy: no score (as Translator), no hypotheses or attention unless asked
    g = client.post("/translate", json={"texts": ["a b", "  b   c  "]}).json()
    assert [x["text"] for x in g["translations"]] == ["b a", "c b"]
    assert g["translations"][1]["source"] == "b c"
    assert all(x["score"] is None and "attention" not in x and "hypotheses" not in x for x in g["translations"])


def test_health_info_openapi_and_page(client, translator):
    h = client.get("/health").json()
    assert h["status"] == "ok" and h["batcher"]["queued"] == 0
    info = client.get("/info").json()
    assert info["version"] == tc.__version__
    assert info["model"] == translator.model.config
    assert info["vocab_sizes"] == {
        "source": translator.src_tokenizer.vocab_size,
        "target": translator.tgt_tokenizer.vocab_size,
    }
    assert info["limits"] == {
        "max_request_bytes": 65536,
        "max_texts": 64,
        "max_chars": 1000,
        "max_beam_size": 8,
        "max_queue": 1024,
        "max_source_tokens": 256,
        "max_request_tokens": 131072,
        "max_attention_weights": 262144,
        "read_timeout": 10.0,
    }
    assert info["batching"] == {"max_batch": 32, "max_wait_ms": 5.0, "max_batch_tokens": 16384, "batch_seconds": 1.0}
    schema = client.get("/openapi.json").json()
    post = schema["paths"]["/translate"]["post"]
    props = post["requestBody"]["content"]["application/json"]["schema"]["properties"]
    assert set(props) == {"text", "texts", "beam_size", "n_best", "return_attention", "source", "target"} | {
        "target_prefix",
        "constraints",
        "sampling_topk",
        "sampling_topp",
        "sampling_temperature",
        "seed",
    }
    assert {"200", "408", "413", "415", "422", "503"} <= set(post["responses"])
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for needle in ('id="source"', 'id="translate"', 'id="output"', 'id="attention"', "/translate"):
        assert needle in page.text


def test_create_app_options_and_embedding(translator):
    """create_app takes a ServeConfig or its fields; without a lifespan (mounted in another app)
    the batcher starts on the first request."""
    from starlette.applications import Starlette
    from starlette.routing import Mount

    with pytest.raises(ValueError, match="max_batch"):
        serve.create_app(translator, max_batch=0)
    with pytest.raises(TypeError):
        serve.create_app(translator, no_such_option=1)
    inner = serve.create_app(translator, serve.ServeConfig(max_texts=2), beam_size=2)
    assert inner.state.config.max_texts == 2 and inner.state.config.beam_size == 2
    outer = Starlette(routes=[Mount("/mt", app=inner)])  # Starlette does not run a mounted app's lifespan
    with running(outer) as url, httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/mt/translate", json={"texts": ["e d", "a"]})
        assert r.status_code == 200 and r.json()["beam_size"] == 2
        assert [t["text"] for t in r.json()["translations"]] == ["d e", "a"]
        assert c.post("/mt/translate", json={"texts": ["a", "b", "c"]}).status_code == 422


# ------------------------------------------------------------------------------------ HTTP stack


def test_uvicorn_choices_prefer_the_c_parser_and_uvloop_and_fall_back(monkeypatch):
    import importlib.util

    choices = serve.uvicorn_choices()
    assert choices["http"] == ("httptools" if importlib.util.find_spec("httptools") else "h11")
    assert choices["loop"] == ("uvloop" if importlib.util.find_spec("uvloop") else "asyncio")
    monkeypatch.setitem(sys.modules, "httptools", None)  # import raises ImportError
    monkeypatch.setitem(sys.modules, "uvloop", None)
    assert serve.uvicorn_choices() == {"http": "h11", "loop": "asyncio"}


def test_server_without_httptools_and_uvloop_answers(translator, monkeypatch):
    """The fallback (h11, asyncio's loop) serves requests and bad requests alike."""
    monkeypatch.setitem(sys.modules, "httptools", None)
    monkeypatch.setitem(sys.modules, "uvloop", None)
    with running(serve.create_app(translator)) as url, httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/translate", json={"texts": ["a b c", "f e"]})
        assert r.status_code == 200 and [t["text"] for t in r.json()["translations"]] == ["c b a", "e f"]
        r = c.post("/translate", content=b'{"text": "a b"', headers=JSON)
        assert r.status_code == 400 and r.json()["status"] == 400


LOOPS = ["asyncio"] + (["uvloop"] if serve.uvicorn_choices()["loop"] == "uvloop" else [])


@pytest.mark.parametrize("loop", LOOPS)
def test_background_server_connections_have_nagle_off(translator, monkeypatch, loop):
    """Every accepted connection has TCP_NODELAY: with Nagle's algorithm on, a response written
    in two parts (headers, body) waits for the client's delayed ACK, up to 40 ms on Linux
    (asyncio's loop only turns Nagle off for sockets created with IPPROTO_TCP)."""
    import socket

    import uvicorn

    servers = []

    class Recording(uvicorn.Server):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            servers.append(self)

    monkeypatch.setattr(uvicorn, "Server", Recording)
    with (
        serve.background_server(serve.create_app(translator), HOST, 0, loop=loop) as url,
        httpx.Client(base_url=url, timeout=30) as c,
    ):
        assert c.get("/health").status_code == 200  # the keep-alive connection stays open
        connections = list(servers[0].server_state.connections)
        assert connections
        for protocol in connections:
            sock = protocol.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


# ------------------------------------------------------------------------------------ command line


def test_serve_command_line_options():
    from transformer_cpp import cli

    args = cli.build_parser().parse_args(
        [
            "serve",
            "--model",
            "runs/x",
            "--max-batch",
            "1",
            "--max-wait-ms",
            "0",
            "--beam-size",
            "12",
            "--max-chars",
            "50",
        ]
    )
    cfg = cli.serve.config_from_args(args)
    assert (args.host, args.port) == ("127.0.0.1", 8000)
    assert cfg.max_batch == 1 and cfg.max_wait_ms == 0 and cfg.beam_size == 12 and cfg.max_beam_size == 12
    assert cfg.max_chars == 50 and cfg.max_texts == serve.ServeConfig().max_texts
    for bad in (["--max-batch", "0"], ["--port", "70000"], ["--max-wait-ms", "-1"]):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args(["serve", "--model", "m"] + bad)


def translator_checkpoint_name(run: Path) -> str:
    return Path(Translator.from_checkpoint(run).checkpoint).name


def test_command_line_server_finishes_in_flight_requests_on_sigterm(translator, tmp_path):
    """`transformer-cpp serve` loads the checkpoint, answers, and on SIGTERM finishes the request in
    flight (held in the batcher by --max-wait-ms 1500), then exits 0."""
    run = tmp_path / "run"
    save_checkpoint(run, translator.model, translator.src_tokenizer, translator.tgt_tokenizer, optimizer=False)
    proc, url = start_server(run, "--max-wait-ms", "1500")
    try:
        info = httpx.get(url + "/info", timeout=30).json()
        # the run directory's name and the checkpoint's, not the absolute path
        assert info["checkpoint"] == f"run/{translator_checkpoint_name(run)}"
        assert str(tmp_path) not in httpx.get(url + "/info", timeout=30).text
        assert info["batching"]["max_wait_ms"] == 1500 and info["threads"] == 1
        answer = {}

        def request():
            r = httpx.post(url + "/translate", json={"texts": ["a b c", "f e"]}, timeout=60)
            answer["status"], answer["body"] = r.status_code, r.json()

        t = threading.Thread(target=request)
        started = time.monotonic()
        t.start()
        while httpx.get(url + "/health", timeout=30).json()["batcher"]["queued"] < 2:  # it is in the batcher
            assert time.monotonic() - started < 30
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        t.join(60)
        assert proc.wait(60) == 0, "".join(proc.output)
        assert answer["status"] == 200, answer
        assert [x["text"] for x in answer["body"]["translations"]] == ["c b a", "e f"]
        with pytest.raises(httpx.TransportError):  # and nothing listens any more
            httpx.get(url + "/health", timeout=5)
        assert "Shutting down" in "".join(proc.output)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_command_line_errors(tmp_path):
    from transformer_cpp import cli

    assert cli.main(["serve", "--model", str(tmp_path / "nothing")]) == 1


# ------------------------------------------------------------------------------------ bench


def test_bench_serving_section_structure():
    """The bench's serving section on a few requests (numbers are not asserted, only their form)."""
    from transformer_cpp import bench

    r = bench.bench_serving(1, quick=True, clients=4, requests_per_client=2)
    assert r["clients"] == 4 and r["requests"] == 8 and r["threads"] == 1
    assert r["server"] == serve.uvicorn_choices()
    assert r["client"]["process"] == "separate" and r["client"]["loop"] in ("uvloop", "asyncio")
    for name, max_batch in (("batching", 32), ("one_at_a_time", 1)):
        e = r["modes"][name]
        assert e["max_batch"] == max_batch and e["requests_per_s"] > 0
        assert 0 < e["latency_ms_p50"] <= e["latency_ms_p99"]
        assert 1 <= e["mean_batch"] <= max_batch
    assert r["modes"]["one_at_a_time"]["mean_batch"] == 1
    assert r["ratio"] == pytest.approx(
        r["modes"]["batching"]["requests_per_s"] / r["modes"]["one_at_a_time"]["requests_per_s"]
    )
    results = {"machine": {"cpu": "x", "cores": 2}, "quick": True, "threads": 1, "serving": r}
    table = bench.format_report(results)
    assert "5. Serving over HTTP" in table and f"{r['ratio']:.2f}x" in table


def test_requests_follow_the_models_beam_rules(translator):
    """A model with generation rules of its own (an imported MarianMT model's length-penalty mode,
    early stopping and forced end) is served with them: the batcher's options carry the rules the
    server has no option for, and its answers are the Translator's with the same beam size."""
    rules = {"length_penalty_mode": "hf", "early_stopping": "never", "force_end": True}
    t = Translator(translator.model, translator.src_tokenizer, translator.tgt_tokenizer, decode_defaults=rules)
    batcher = serve.Batcher(t, serve.ServeConfig())
    options = batcher.decode_options(3, 1)
    assert {k: getattr(options, k) for k in rules} == rules
    plain = serve.Batcher(translator, serve.ServeConfig()).decode_options(3, 1)
    assert (plain.length_penalty_mode, plain.force_end) == ("gnmt", False)
    texts = ["a b c d e", "c a", "f e d"]
    encoded = [encode_source(t, x) for x in texts]
    items = [serve.QueuedSentence(e.source, e.ids, True, None, i, e.warning) for i, e in enumerate(encoded)]
    got = serve.decode_items(t, items, options)
    want = t.translate_batch(
        texts, beam_size=3, length_penalty=serve.ServeConfig().length_penalty, return_attention=True
    )
    assert [(r["text"], r["score"]) for r in got] == [(w.text, w.score) for w in want]
