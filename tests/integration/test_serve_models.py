"""Several models in one server: each language pair its own model and batcher, chosen by
``source``/``target`` in both APIs, ``/languages``, ``/detect`` and ``source: "auto"``."""

from __future__ import annotations

import concurrent.futures

import httpx
import pytest
from libretranslatepy import LibreTranslateAPI
from helpers.serve import running, start_server
from helpers.toy_task import one_thread, tok, trained_reversal_model  # noqa: F401  (shared fixtures)

from transformer_cpp import serve
from transformer_cpp.checkpoint import save_checkpoint
from transformer_cpp.translate import Translator


@pytest.fixture(scope="module")
def model(tok):
    return trained_reversal_model(tok)


@pytest.fixture(scope="module")
def load(model, tok, tmp_path_factory):
    """A translator of ``source`` to ``target`` with its own copy of the reversal model (saved and
    loaded: each batcher decodes on its own thread, and a model runs one call at a time)."""

    def make(source, target):
        run = tmp_path_factory.mktemp(f"{source}-{target}")
        save_checkpoint(run, model, tok, tok, optimizer=False, data={"src_lang": source, "tgt_lang": target})
        return Translator.from_checkpoint(run)

    return make


@pytest.fixture(scope="module")
def translators(load):
    """The reversal model as two pairs: English to Spanish and Spanish to English."""
    return [load("en", "es"), load("es", "en")]


@pytest.fixture(scope="module")
def client(translators):
    app = serve.create_app(translators)
    with running(app) as url:
        with httpx.Client(base_url=url, timeout=60) as c:
            yield c


def _sentences(client, pair):
    models = client.get("/health").json()["models"]
    return {(m["source_language"], m["target_language"]): m["batcher"]["sentences"] for m in models}[pair]


def test_languages_list_every_pair(client):
    assert client.get("/languages").json() == [
        {"code": "en", "name": "English", "targets": ["es"]},
        {"code": "es", "name": "Spanish", "targets": ["en"]},
    ]


def test_each_api_reaches_the_model_of_its_pair(client):
    for source, target in (("en", "es"), ("es", "en")):
        before = _sentences(client, (source, target))
        r = client.post("/translate", json={"q": "a b c", "source": source, "target": target})
        assert r.status_code == 200 and r.json() == {"translatedText": "c b a"}
        r = client.post("/translate", json={"text": "d e", "source": source, "target": target})
        assert r.status_code == 200 and r.json()["translations"][0]["text"] == "e d"
        assert _sentences(client, (source, target)) == before + 2


def test_unknown_pair_and_missing_pair_are_400_naming_the_pairs(client):
    r = client.post("/translate", json={"q": "a", "source": "en", "target": "fr"})
    assert r.status_code == 400 and "en-es, es-en" in r.json()["error"]
    r = client.post("/translate", json={"text": "a"})
    assert r.status_code == 400 and "give source and target" in r.json()["error"]
    r = client.post("/translate", json={"text": "a", "source": "de", "target": "en"})
    assert r.status_code == 400 and "no model translates de to en" in r.json()["error"]


def test_concurrent_requests_to_both_pairs(client):
    def one(i):
        source, target = (("en", "es"), ("es", "en"))[i % 2]
        return client.post("/translate", json={"q": "a b c d", "source": source, "target": target}).json()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(16)))
    assert answers == [{"translatedText": "d c b a"}] * 16


def test_info_and_health_list_the_models(client):
    info = client.get("/info").json()
    assert [(m["source_language"], m["target_language"]) for m in info["models"]] == [("en", "es"), ("es", "en")]
    assert len(client.get("/health").json()["models"]) == 2


def test_two_models_of_one_pair_or_one_model_twice_are_refused(model, tok, load):
    a = Translator(model, tok, tok, src_lang="en", tgt_lang="es")
    with pytest.raises(ValueError, match="two models translate en to es"):
        serve.create_app([a, load("en", "es")])
    with pytest.raises(ValueError, match="the same model object"):
        serve.create_app([a, Translator(model, tok, tok, src_lang="es", tgt_lang="en")])


def test_one_model_keeps_todays_requests(model, tok):
    app = serve.create_app(Translator(model, tok, tok, src_lang="en", tgt_lang="es"))
    with running(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        assert c.post("/translate", json={"text": "a b"}).json()["translations"][0]["text"] == "b a"
        r = c.post("/translate", json={"q": "a b", "source": "auto", "target": "es"}).json()
        assert r == {"translatedText": "b a", "detectedLanguage": {"language": "en", "confidence": 0.0}}


def test_detect_and_auto_choose_among_the_sources(load):
    pytest.importorskip("lingua")
    translators = [load("en", "de"), load("es", "de")]
    app = serve.create_app(translators)
    with running(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        found = c.post("/detect", json={"q": "¿Dónde está la estación de tren? Muchas gracias, señora."}).json()
        assert found[0]["language"] == "es" and 50.0 < found[0]["confidence"] <= 100.0
        assert {f["language"] for f in found} <= {"en", "es"}
        found = c.post("/detect", json={"q": "Where is the railway station? Thank you very much."}).json()
        assert found[0]["language"] == "en"
        r = c.post("/translate", json={"q": "Where is the railway station, please?", "source": "auto", "target": "de"})
        assert r.status_code == 200 and r.json()["detectedLanguage"]["language"] == "en"
        assert c.post("/detect", json={"text": "x"}).status_code == 400


def test_detect_without_the_detector_is_501_naming_the_extra(client, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_lingua(name, *args, **kwargs):
        if name == "lingua":
            raise ImportError("no lingua")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_lingua)
    r = client.post("/detect", json={"q": "hola"})
    assert r.status_code == 501 and "transformer-cpp[serve]" in r.json()["error"]


def test_libretranslatepy_against_two_models_on_the_command_line(model, tok, tmp_path):
    runs = []
    for source, target in (("en", "es"), ("es", "en")):
        run = tmp_path / f"{source}-{target}"
        save_checkpoint(run, model, tok, tok, optimizer=False, data={"src_lang": source, "tgt_lang": target})
        runs.append(run)
    proc, url = start_server(runs[0], "--model", str(runs[1]))
    try:
        lt = LibreTranslateAPI(url)
        assert lt.languages() == [
            {"code": "en", "name": "English", "targets": ["es"]},
            {"code": "es", "name": "Spanish", "targets": ["en"]},
        ]
        assert lt.translate("a b c", "en", "es") == "c b a"
        assert lt.translate("f e d", "es", "en") == "d e f"
    finally:
        proc.terminate()
        proc.wait(60)


def test_the_page_has_a_pair_selector_fed_by_info(client):
    page = client.get("/").text
    assert 'id="pair"' in page and "info.models" in page
    # what the page sends for the second pair is answered by that pair's model
    before = _sentences(client, ("es", "en"))
    r = client.post(
        "/translate", json={"text": "a b", "beam_size": 1, "return_attention": True, "source": "es", "target": "en"}
    )
    assert r.status_code == 200 and r.json()["translations"][0]["text"] == "b a"
    assert _sentences(client, ("es", "en")) == before + 1


def test_the_command_line_refuses_two_models_of_one_pair(monkeypatch, capsys):
    import types

    from transformer_cpp import cli

    args = cli.build_parser().parse_args(["serve", "--model", "a", "--model", "b"])
    assert args.model == ["a", "b"]
    loaded = {p: types.SimpleNamespace(checkpoint=f"{p}/epoch-0001", src_lang="en", tgt_lang="es") for p in "ab"}
    monkeypatch.setattr(cli.serve.Translator, "from_checkpoint", lambda path, **k: loaded[path])
    monkeypatch.setattr(cli.serve, "serve", lambda *a, **k: pytest.fail("served two models of one pair"))
    assert cli.serve.run_from_args(args) == 2
    err = capsys.readouterr().err
    assert "--model a/epoch-0001 and --model b/epoch-0001 both translate en to es" in err
