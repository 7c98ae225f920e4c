"""The search fields of the server's JSON API: target_prefix, constraints, sampling_topk,
sampling_topp, sampling_temperature and seed. A request with them answers what
Translator.translate_batch gives with the same options (alone, beside plain requests, and over
more texts than one decode call holds); each bad value gets one 422 naming the field.

The toy reversal model of ``toy_task`` is served on 127.0.0.1.
"""

from __future__ import annotations

import asyncio

import pytest

import httpx

from transformer_cpp import serve
from transformer_cpp.translate import Translator

from helpers.serve import running
from helpers.toy_task import reversal_pairs, trained_reversal_model
from helpers.toy_task import one_thread, tok  # noqa: F401  (shared fixtures)

TEXTS = ["c a f", "a b", "e d c b", "f"]

# (request fields, Translator.translate_batch keywords)
CASES = {
    "one prefix": ({"target_prefix": "a"}, {"target_prefix": "a"}),
    "a prefix per text, beam": (
        {"target_prefix": ["b", "a a", "c", "d"], "beam_size": 3, "n_best": 2},
        {"target_prefix": ["b", "a a", "c", "d"], "beam_size": 3, "n_best": 2},
    ),
    "constraints for all": ({"constraints": ["e"], "beam_size": 3}, {"constraints": ["e"], "beam_size": 3}),
    "constraints per text": (
        {"constraints": [["a"], [], ["f", "e"], ["b"]], "beam_size": 4, "n_best": 2},
        {"constraints": [["a"], [], ["f", "e"], ["b"]], "beam_size": 4, "n_best": 2},
    ),
    "sampling": (
        {"sampling_topk": 6, "sampling_temperature": 8.0, "seed": 11},
        {"sampling_topk": 6, "sampling_temperature": 8.0, "seed": 11},
    ),
    "nucleus sampling": (
        {"sampling_topk": 20, "sampling_topp": 0.9, "sampling_temperature": 4.0, "seed": 3},
        {"sampling_topk": 20, "sampling_topp": 0.9, "sampling_temperature": 4.0, "seed": 3},
    ),
}


@pytest.fixture(scope="module")
def translator(tok):
    return Translator(trained_reversal_model(tok), tok, tok)


def _offline(translator, texts, options):
    """translate_batch's entries, as the server writes them (text, finished, score, hypotheses)."""
    n_best = options.get("n_best", 1)
    found = translator.translate_batch(list(texts), **{**options, "n_best": n_best})
    out = []
    for t in found:
        entry = {"text": t.text, "finished": t.finished, "score": t.score}
        if n_best > 1:
            entry["hypotheses"] = [{"text": h.text, "score": h.score, "finished": h.finished} for h in t.hypotheses]
        if "constraints" in options:
            entry["constraints_missing"] = t.constraints_missing
        out.append(entry)
    return out


def _served(entries):
    keys = ("text", "finished", "score", "hypotheses", "constraints_missing")
    return [{k: e[k] for k in keys if k in e} for e in entries]


def test_search_fields_answer_as_translate_batch(translator):
    """Each option set, alone and sent at the same time as plain requests: the server's entries
    are translate_batch's (texts, scores, hypotheses, constraints missing), and the plain requests
    get their plain translations."""
    expected = {name: _offline(translator, TEXTS, opts) for name, (_, opts) in CASES.items()}
    plain = _offline(translator, TEXTS, {})
    # the options change the outputs, so agreeing with translate_batch says something (sampling at
    # temperature 8 leaves greedy's tokens too unlikely for 4 texts to come out the same at any level)
    assert expected["one prefix"][0]["text"].startswith("a") and plain[0]["text"] == "f a c"
    assert [e["text"] for e in expected["sampling"]] != [e["text"] for e in plain]
    assert all(e["constraints_missing"] == 0 and "e" in e["text"].split() for e in expected["constraints for all"])
    app = serve.create_app(translator, max_batch=8, max_wait_ms=20)
    with running(app) as url:

        async def main():
            async with httpx.AsyncClient(base_url=url, timeout=60) as c:
                jobs = [c.post("/translate", json={"texts": TEXTS, **body}) for body, _ in CASES.values()]
                jobs += [c.post("/translate", json={"texts": TEXTS}) for _ in range(4)]
                return await asyncio.gather(*jobs)

        answers = asyncio.run(main())
    for (name, (body, _)), r in zip(CASES.items(), answers):
        assert r.status_code == 200, (name, r.text)
        got = r.json()
        assert _served(got["translations"]) == expected[name], name
        assert [e["source"] for e in got["translations"]] == TEXTS
        assert (got["beam_size"], got["n_best"]) == (body.get("beam_size", 1), body.get("n_best", 1))
    for r in answers[len(CASES) :]:
        assert r.status_code == 200 and _served(r.json()["translations"]) == plain
        assert all("constraints_missing" not in e for e in r.json()["translations"])


def test_sampling_over_more_texts_than_one_decode_call(translator):
    """70 texts with sampling: decoded in translate_batch's chunks of 64 (a draw depends on the
    row), whatever the server's max_batch; another seed draws otherwise."""
    texts = reversal_pairs(70, seed=8)[0]
    options = {"sampling_topk": 6, "sampling_temperature": 3.0}
    want = {seed: _offline(translator, texts, dict(options, seed=seed)) for seed in (1, 2)}
    assert want[1] != want[2]
    # the rows of the second chunk are drawn as rows 0-5 of their call, not rows 64-69
    assert _offline(translator, texts[64:], dict(options, seed=1)) == want[1][64:]
    app = serve.create_app(translator, max_batch=4, max_texts=70)
    with running(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        for seed in (1, 2):
            r = c.post("/translate", json={"texts": texts, "seed": seed, **options})
            assert r.status_code == 200, r.text
            assert _served(r.json()["translations"]) == want[seed]
        assert app.state.batcher.stats["largest_batch"] == 64


BAD = {
    "prefix count": ({"texts": ["a", "b"], "target_prefix": ["a"]}, "target_prefix has 1 entries for 2 texts"),
    "prefix type": ({"text": "a", "target_prefix": 3}, "invalid request: target_prefix"),
    "blank prefix": ({"text": "a", "target_prefix": " \u200b "}, "target_prefix is empty"),
    "long prefix": ({"text": "a", "target_prefix": "a " * 15}, "the target_prefix of text has 15 tokens, more than"),
    "prefix chars": ({"text": "a", "target_prefix": "a" * 1001}, "target_prefix has 1,001 characters; at most 1,000"),
    "constraints and greedy": ({"text": "a", "constraints": ["a"]}, "1 constraints need beam_size of at least 2"),
    "too many constraints": (
        {"text": "a", "constraints": ["a", "b", "c"], "beam_size": 3},
        "3 constraints need beam_size of at least 4",
    ),
    "constraints count": (
        {"texts": ["a", "b"], "constraints": [["a"]], "beam_size": 2},
        "constraints has 1 entries for 2 texts",
    ),
    "blank constraint": ({"text": "a", "constraints": ["a", ""], "beam_size": 4}, "constraints[1] is empty"),
    "mixed constraints": ({"text": "a", "constraints": ["a", ["b"]], "beam_size": 4}, "invalid request: constraints"),
    "topk with beam": ({"text": "a", "sampling_topk": 3, "beam_size": 2}, "sampling_topk 3 needs beam_size 1"),
    "topk zero": ({"text": "a", "sampling_topk": 0}, "sampling_topk must be an integer in [1, 1000000], got 0"),
    "topk text": ({"text": "a", "sampling_topk": "3"}, "invalid request: sampling_topk"),
    "topp": ({"text": "a", "sampling_topk": 3, "sampling_topp": 1.5}, "sampling_topp must be a number in (0, 1]"),
    "temperature": (
        {"text": "a", "sampling_topk": 3, "sampling_temperature": 0},
        "sampling_temperature must be a finite number > 0",
    ),
    "seed": ({"text": "a", "sampling_topk": 3, "seed": -1}, "seed must be an integer in [0, 9223372036854775807]"),
    "sampling without topk": (
        {"text": "a", "sampling_temperature": 0.5, "seed": 4},
        "sampling_temperature, seed apply only when sampling: give sampling_topk above 1",
    ),
}


@pytest.fixture(scope="module")
def server(translator):
    app = serve.create_app(translator)
    with running(app) as url:
        yield url, app


@pytest.mark.parametrize("name", list(BAD))
def test_bad_search_fields_get_one_422_naming_the_field(server, name):
    body, message = BAD[name]
    url, app = server
    with httpx.Client(base_url=url, timeout=60) as c:
        before = app.state.batcher.stats["requests"]
        r = c.post("/translate", json=body)
        assert r.status_code == 422, r.text
        assert message in r.json()["error"], r.json()
        assert app.state.batcher.stats["requests"] == before  # refused at the door, nothing queued
        assert c.post("/translate", json={"text": "a b"}).json()["translations"][0]["text"] == "b a"


def test_search_requests_count_against_the_request_limits(translator):
    """Constraints and a beam of 4: the work is counted with the beam, as for any request."""
    app = serve.create_app(translator, max_request_tokens=100)
    with running(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        body = {"texts": ["a b c d e"] * 2, "constraints": ["a"], "beam_size": 4}
        r = c.post("/translate", json=body)
        assert r.status_code == 422 and "max_request_tokens" in r.json()["error"], r.text
        r = c.post("/translate", json=dict(body, texts=["a"], beam_size=2))
        assert r.status_code == 200 and "a" in r.json()["translations"][0]["text"].split(), r.text
