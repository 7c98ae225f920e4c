"""The server's LibreTranslate-compatible API: ``POST /translate`` with ``q``/``source``/``target``
(JSON or a form), ``GET /languages``, and the ``libretranslatepy`` client against a real
``transformer-cpp serve``.

The model is the toy reversal model of ``toy_task`` (its checkpoint records English to Spanish),
so every translation is known: "a b c" becomes "c b a".
"""

from __future__ import annotations

import httpx
import pytest
from libretranslatepy import LibreTranslateAPI
from helpers.serve import start_server
from helpers.toy_task import one_thread, tok, trained_reversal_model  # noqa: F401  (shared fixtures)

from transformer_cpp import serve
from transformer_cpp.checkpoint import save_checkpoint
from transformer_cpp.translate import Translator


@pytest.fixture(scope="module")
def translator(tok):
    """The reversal model of a-f, as a translator of English to Spanish."""
    return Translator(trained_reversal_model(tok), tok, tok, src_lang="en", tgt_lang="es")


@pytest.fixture(scope="module")
def client(translator):
    app = serve.create_app(translator)
    with serve.background_server(app, "127.0.0.1", 0, timeout_keep_alive=600) as url:
        with httpx.Client(base_url=url, timeout=60) as c:
            yield c


def test_translate_json_string_list_and_auto(client):
    r = client.post("/translate", json={"q": "a b c", "source": "en", "target": "es", "format": "text"})
    assert r.status_code == 200 and r.json() == {"translatedText": "c b a"}
    r = client.post("/translate", json={"q": ["a b c", "f e"], "source": "en", "target": "es"})
    assert r.status_code == 200 and r.json() == {"translatedText": ["c b a", "e f"]}
    # "auto" is the model's source language: the server says so, and that it did not detect it
    r = client.post("/translate", json={"q": "d e", "source": "auto", "target": "es", "api_key": "ignored"})
    assert r.json() == {"translatedText": "e d", "detectedLanguage": {"language": "en", "confidence": 0.0}}


def test_translate_form_and_alternatives(client):
    r = client.post("/translate", data={"q": "a b c", "source": "en", "target": "es", "alternatives": "2"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["translatedText"] == "c b a"
    assert isinstance(body["alternatives"], list) and len(body["alternatives"]) == 2
    assert all(isinstance(a, str) and a != "c b a" for a in body["alternatives"])


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"q": "a", "source": "fr", "target": "es"}, "no model translates"),
        ({"q": "a", "source": "en", "target": "de"}, "no model translates"),
        ({"q": "a", "target": "es"}, "source is missing: this server translates en-es"),
        ({"q": "a", "source": "en", "target": "es", "format": "html"}, "format must be 'text'"),
        ({"q": "a", "source": "en", "target": "es", "alternatives": 99}, "alternatives must be a whole number"),
        ({"q": "a", "source": "en", "target": "es", "colour": "red"}, "unknown field(s) 'colour'"),
        ({"q": [], "source": "en", "target": "es"}, "q is an empty list"),
        ({"q": ["a", 3], "source": "en", "target": "es"}, "q must be a string or a list of strings"),
        ({"q": ["a", "\u200b"], "source": "en", "target": "es"}, "q[1] is empty"),
        ({"q": "a" * 1001, "source": "en", "target": "es"}, "q has 1,001 characters"),
    ],
)
def test_bad_libretranslate_requests_get_400_naming_the_problem(client, fields, message):
    r = client.post("/translate", json=fields)
    assert r.status_code == 400, r.text
    assert message in r.json()["error"]
    # and the server still answers
    assert client.post("/translate", json={"q": "a b", "source": "en", "target": "es"}).json() == {
        "translatedText": "b a"
    }


def test_a_form_without_libretranslate_fields_is_refused(client):
    r = client.post("/translate", data={"text": "a b c"})
    assert r.status_code == 415 and "forms are accepted only with LibreTranslate's fields" in r.json()["error"]


def test_languages(client):
    assert client.get("/languages").json() == [
        {"code": "en", "name": "English", "targets": ["es"]},
        {"code": "es", "name": "Spanish", "targets": []},
    ]


def test_libretranslatepy_against_the_command_line_server(translator, tmp_path):
    run = tmp_path / "run"
    save_checkpoint(run, translator.model, translator.src_tokenizer, translator.tgt_tokenizer, optimizer=False)
    proc, url = start_server(run)
    try:
        lt = LibreTranslateAPI(url)
        assert lt.languages() == [
            {"code": "en", "name": "English", "targets": ["es"]},
            {"code": "es", "name": "Spanish", "targets": []},
        ]
        assert lt.translate("a b c", "en", "es") == "c b a"
        assert lt.translate("f e d", "auto", "es") == "d e f"
        with pytest.raises(Exception, match="400"):
            lt.translate("a b c", "en", "fr")
    finally:
        proc.terminate()
        proc.wait(60)


def test_health_info_and_page_say_the_languages(client):
    health = client.get("/health").json()
    assert (health["source_language"], health["target_language"]) == ("en", "es")
    info = client.get("/info").json()
    assert (info["source_language"], info["target_language"]) == ("en", "es")
    assert info["languages"] == "English -> Spanish"
    assert "info.languages" in client.get("/").text  # the page shows them above the model's shape
