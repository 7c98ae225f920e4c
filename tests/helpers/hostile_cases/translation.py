"""Translation, evaluation and the HTTP app."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, Optional

import numpy as np

import transformer_cpp as tc
from transformer_cpp import translate as tl

from .base import (
    ServerError,
    Context,
    api,
    err,
    raises,
    rtok,
    translator,
)


# --- translation and evaluation ------------------------------------------------------------------


@api(
    "translator: a source language that is no language code",
    expect="error",
    match=("Translator: src_lang: 'klingon!' is not a language code",),
)
def _(c):
    t = translator(c)
    t2 = tc.Translator(t.model, t.src_tokenizer, t.tgt_tokenizer, src_lang="klingon!")
    return t2.translate("The cat.")


err(
    "translator: tokenizer of another size",
    lambda c: (lambda t: tc.Translator(t.model, t.tgt_tokenizer, rtok()))(translator(c)),
    "tokens",
)
err(
    "translator: max_output_tokens 0",
    lambda c: tc.Translator.from_checkpoint(c.run, max_output_tokens=0),
    "max_output_tokens",
)
err(
    "translator: max_output_tokens True",
    lambda c: translator(c).translate("The cat.", max_output_tokens=True),
    "max_output_tokens",
)
err(
    "translator: length_penalty as a string",
    lambda c: translator(c).translate("The cat.", length_penalty="0.6"),
    "length_penalty",
)
err("translator: batch_size 2.0", lambda c: translator(c).translate_batch(["The cat."], batch_size=2.0), "batch_size")
err("translator: beam_size 0", lambda c: translator(c).translate("The cat.", beam_size=0), "beam_size")
err("translator: a None among the sentences", lambda c: translator(c).translate_batch(["The cat.", None]), "str")
err("translator: bytes", lambda c: translator(c).translate(b"The cat."), "str")
err(
    "translator: return_attention given as a string",
    lambda c: translator(c).translate("The cat.", return_attention="no"),
    "return_attention must be True or False",
    raises=TypeError,
)
err("translator: a single string to translate_batch", lambda c: translator(c).translate_batch("The cat."), "string")


@api("translator: an empty sentence and an empty list")
def _(c):
    t = translator(c)
    assert isinstance(t.translate(""), str)
    assert t.translate_batch([]) == []
    assert t.translate_batch(s for s in ["The cat.", "The dog."]) == t.translate_batch(["The cat.", "The dog."])


@api("translator: attention has one row per output token and one column per source token")
def _(c):
    t = translator(c)
    for beam in (1, 3):
        r = t.translate("The cat and the dog.", beam_size=beam, return_attention=True)
        a = r.cross_attention()
        assert a.shape[1:] == (max(len(r.target_ids), 1), len(r.source_ids)), (a.shape, r.target_ids, r.source_ids)
        assert np.all(np.isfinite(a)) and np.allclose(a.sum(-1), 1, atol=1e-4)


@api("translator: cross_attention of a layer that does not exist")
def _(c):
    t = translator(c).translate("The cat.", return_attention=True)
    assert t.cross_attention(0).shape == t.cross_attention(-1).shape
    for layer in (1, -2, 0.5, 5):
        raises(
            lambda: t.cross_attention(layer),
            ValueError,
            "layer must be an integer in [-1, 1) (the model has 1 decoder layer)",
        )


@api("translator: text that is not valid Unicode is a clear error")
def _(c):
    t = translator(c)
    for tr_ in (t, tc.Translator(t.model, t.src_tokenizer, t.tgt_tokenizer, src_lang=None)):
        raises(
            lambda: tr_.translate("a \udcff b"),
            ValueError,
            "is not valid Unicode: it holds the lone surrogate '\\udcff' at position 2",
        )


err(
    "translator: cross_attention without attention",
    lambda c: tl.Translation("a", "b", [], [], [], [], True).cross_attention(),
    "return_attention",
)


@api("translator: max_output_tokens 1")
def _(c):
    r = translator(c).translate("The cat and the dog.", max_output_tokens=1, return_attention=True)
    assert len(r.target_ids) <= 1


@api("translator: a batch translates each sentence as alone")
def _(c):
    t = translator(c)
    sentences = [
        "The cat.",
        "The tree and the bird and the car and the house.",
        "",
        "The dog and the water.",
        "book " * 30,
    ]
    alone = [t.translate(s) for s in sentences]
    assert t.translate_batch(sentences, batch_size=64) == alone
    assert t.translate_batch(sentences, batch_size=2) == alone


@api("translator: beam search in a batch equals one at a time")
def _(c):
    t = translator(c)
    sentences = ["The cat.", "The tree and the bird and the car.", "The dog and the water."]
    alone = [t.translate(s, beam_size=4) for s in sentences]
    assert t.translate_batch(sentences, beam_size=4) == alone


@api("translator: a long input warns and is translated whole")
def _(c):
    t = translator(c)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = t.translate("The cat and the dog. " * 20, return_attention=True)
    assert any(issubclass(w.category, tl.LongInputWarning) for w in caught)
    assert len(r.source_ids) > 100


err(
    "evaluate: lists of different lengths",
    lambda c: tc.evaluate_translation(translator(c), ["a"], ["b", "c"]),
    "references",
)
err("evaluate: nothing to evaluate", lambda c: tc.evaluate_translation(translator(c), [], []), "no sentence")
err("evaluate: a None reference", lambda c: tc.evaluate_translation(translator(c), ["The cat."], [None]), "str")
err(
    "evaluate: unknown target language",
    lambda c: tc.evaluate_translation(translator(c), ["The cat."], ["El gato."], tgt_lang="klingon"),
    "klingon",
)
err(
    "evaluate: batch_size 0",
    lambda c: tc.evaluate_translation(translator(c), ["The cat."], ["El gato."], batch_size=0),
    "batch_size",
)


@api("evaluate: scores and counts")
def _(c):
    pairs = tc.load_tatoeba(c.data, 30, sampling="first")
    r = tc.evaluate_translation(translator(c), pairs.english, pairs.spanish)
    assert len(r.hypotheses) == r.sentences == 30 and r.scored_pairs == 30
    for v in (r.bleu, r.chrf, r.multi_bleu, r.multi_chrf):
        assert np.isfinite(v) and 0 <= v <= 100, v
    assert np.isfinite(r.loss) and r.loss > 0 and 0 <= r.accuracy <= 1


@api("evaluate: empty sources")
def _(c):
    r = tc.evaluate_translation(translator(c), ["", ""], ["El gato.", "El perro."])
    assert r.sentences == 2 and np.isfinite(r.bleu)


@api("greedy decoding: the C++ path equals the plain reference")
def _(c):
    t = translator(c)
    src = np.array([t.encode(s)[1] + [0] * (12 - len(t.encode(s)[1])) for s in ["The cat.", "The dog and the tree."]])
    a = tl.greedy_decode(t.model, src, 1, 2, 12)
    b = tl.greedy_decode_reference(t.model, src, 1, 2, 12)
    assert np.array_equal(a, b), (a, b)


err("greedy decoding: a float source", lambda c: tl.greedy_decode(translator(c).model, np.ones((1, 3)), 1, 2, 4), "src")


# --- the HTTP app (serve.create_app through FastAPI's TestClient) ---------------------------------


def _serve(c: Context, **options: Any) -> Any:
    from fastapi.testclient import TestClient

    from transformer_cpp.serve import create_app

    return TestClient(create_app(translator(c), threads=1, **options))


def _post(
    client: Any, body: Any = None, *, content: Optional[bytes] = None, headers: Optional[Dict[str, str]] = None
) -> Any:
    if content is None:
        r = client.post("/translate", json=body, headers=headers)
    else:
        r = client.post("/translate", content=content, headers=headers or {"content-type": "application/json"})
    if r.status_code >= 500 and r.status_code != 503:
        raise ServerError(f"HTTP {r.status_code}: {r.text[:300]}")
    return r


def _refused(status: int, *fragments: str, **options: Any) -> Callable[..., Callable[[Context], None]]:
    """A serve case: the request must get ``status`` with a JSON error naming ``fragments``."""

    def wrap(send: Callable[[Any], Any]) -> Callable[[Context], None]:
        def case(c: Context) -> None:
            with _serve(c, **options) as client:
                r = send(client)
                assert r.status_code == status, f"HTTP {r.status_code} (expected {status}): {r.text[:200]}"
                text = r.text.lower()
                for f in fragments:
                    assert f.lower() in text, f"{f!r} not in {r.text[:300]}"
                assert client.get("/health").status_code == 200  # and the server goes on

        return case

    return wrap


def serve_case(name: str, status: int, *fragments: str, **options: Any):
    def register(send: Callable[[Any], Any]) -> Callable[[Any], Any]:
        api(f"serve: {name}")(_refused(status, *fragments, **options)(send))
        return send

    return register


serve_case("text/plain body", 415, "json")(
    lambda cl: _post(cl, content=b'{"text": "hi"}', headers={"content-type": "text/plain"})
)
serve_case("body that is not JSON", 400, "json")(lambda cl: _post(cl, content=b"{text: hi"))
serve_case("body that is not UTF-8", 400)(lambda cl: _post(cl, content=b'{"text": "\xff\xfe"}'))
serve_case("JSON null", 422)(lambda cl: _post(cl, content=b"null"))
serve_case("JSON list", 422)(lambda cl: _post(cl, ["The cat."]))
serve_case("no text at all", 422, "text")(lambda cl: _post(cl, {"beam_size": 2}))
serve_case("text and texts both", 422, "text")(lambda cl: _post(cl, {"text": "a", "texts": ["b"]}))
serve_case("a number among the texts", 422, "texts")(lambda cl: _post(cl, {"texts": ["The cat.", 5]}))
serve_case("a text over max_chars", 422, "characters", max_chars=50)(lambda cl: _post(cl, {"text": "cat " * 20}))
serve_case("more texts than max_texts", 422, "texts", max_texts=3)(lambda cl: _post(cl, {"texts": ["a"] * 4}))
serve_case("beam_size 0", 422, "beam_size")(lambda cl: _post(cl, {"text": "The cat.", "beam_size": 0}))
serve_case("beam_size 10**6", 422, "beam_size")(lambda cl: _post(cl, {"text": "The cat.", "beam_size": 10**6}))
serve_case("beam_size 2**70", 422, "beam_size")(lambda cl: _post(cl, {"text": "The cat.", "beam_size": 2**70}))
serve_case("beam_size as a string", 422, "beam_size")(lambda cl: _post(cl, {"text": "The cat.", "beam_size": "4"}))
serve_case("beam_size true", 422, "beam_size")(lambda cl: _post(cl, {"text": "The cat.", "beam_size": True}))
serve_case("beam_size 2.5", 422, "beam_size")(lambda cl: _post(cl, {"text": "The cat.", "beam_size": 2.5}))
serve_case("n_best above beam_size", 422, "n_best")(
    lambda cl: _post(cl, {"text": "The cat.", "beam_size": 2, "n_best": 3})
)
serve_case("return_attention as a string", 422, "return_attention")(
    lambda cl: _post(cl, {"text": "The cat.", "return_attention": "yes"})
)
serve_case("a body over max_request_bytes", 413, "bytes", max_request_bytes=1000)(
    lambda cl: _post(cl, {"text": "x" * 5000})
)
serve_case("a lone surrogate in the JSON", 422, "text")(lambda cl: _post(cl, content=b'{"text": "caf\\udce9"}'))
serve_case("an empty text", 422, "text")(lambda cl: _post(cl, {"text": "   "}))
serve_case("JSON nested 30000 deep", 400, "deeply")(lambda cl: _post(cl, content=b"[" * 30000 + b"]" * 30000))
serve_case("an object nested 30000 deep in text", 400, "deeply")(
    lambda cl: _post(cl, content=b'{"text": ' + b"[" * 30000 + b"]" * 30000 + b"}")
)
serve_case("a number literal 1e999", 422, "beam_size")(
    lambda cl: _post(cl, content=b'{"text": "The cat.", "beam_size": 1e999}')
)
serve_case("a text of zero-width spaces and format characters", 422, "empty")(
    lambda cl: _post(cl, {"text": "\u200b\u200b\ufeff\u2060"})
)
serve_case("1,000 emoji in one text (4 tokens each)", 422, "max_source_tokens")(
    lambda cl: _post(cl, {"text": "\U0001f600" * 1000, "beam_size": 8})
)
serve_case("a request over max_request_tokens", 422, "max_request_tokens", max_request_tokens=1000)(
    lambda cl: _post(cl, {"texts": ["The cat."] * 20, "beam_size": 8})
)
serve_case("return_attention over max_attention_weights", 422, "max_attention_weights", max_attention_weights=5000)(
    lambda cl: _post(cl, {"texts": ["The cat and the dog. " * 8] * 64, "return_attention": True})
)
serve_case("a Host header naming another machine", 400, "host", allowed_hosts=["testserver"])(
    lambda cl: cl.get("/info", headers={"host": "rebound.example"})
)
serve_case("GET /translate", 405)(lambda cl: cl.get("/translate"))
serve_case("an unknown path", 404)(lambda cl: cl.get("/nothing/here"))


@api("serve: translations equal the offline translator's, with attention")
def _(c):
    t = translator(c)
    texts = ["The cat and the dog.", "The tree.", "caf\u00e9 \x00 nul", "😀"]
    with _serve(c) as client:
        r = _post(client, {"texts": texts, "return_attention": True})
        assert r.status_code == 200, r.text[:300]
        got = r.json()["translations"]
        assert [g["text"] for g in got] == t.translate_batch(texts), (got, t.translate_batch(texts))
        for g in got:
            a = g["attention"]
            assert len(a["target_pieces"]) >= 1 and len(a["source_pieces"]) >= 2
        info = client.get("/info").json()
        assert info["limits"]["max_texts"] == 64


@api("serve: /docs loads no script and nothing from elsewhere")
def _(c):
    with _serve(c) as client:
        r = client.get("/docs")
        assert r.status_code == 200 and "<script" not in r.text.lower() and "//cdn" not in r.text.lower(), r.text[:300]
        assert client.get("/redoc").status_code == 404


@api("serve: a tokenizer that panics (a BaseException) gets a JSON 500, and the server goes on")
def _(c):
    from fastapi.testclient import TestClient

    from transformer_cpp.serve import create_app

    class PanicException(BaseException):  # what the tokenizers library raises when its Rust code panics
        pass

    t = translator(c)
    real = t.src_tokenizer

    class Panicking:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def encode(self, text: str, *args: Any, **kwargs: Any) -> Any:
            if "boom" in text:
                raise PanicException("called `Result::unwrap()` on an `Err` value")
            return real.encode(text, *args, **kwargs)

    t.src_tokenizer = Panicking()
    with TestClient(create_app(t, threads=1)) as client:
        r = client.post("/translate", json={"text": "boom"})
        assert r.status_code == 500 and r.headers["content-type"] == "application/json", r.text[:300]
        assert "tokenizer" in r.json()["error"], r.json()
        assert client.post("/translate", json={"text": "The cat."}).status_code == 200
