"""The server's web page, end to end in a real headless browser: type a sentence, read the
translation and find the cross-attention map drawn.

The browser is the Chromium inside Qt WebEngine, installed from PyPI with the test extra
(``PyQt6-WebEngine``), so ``pip install ".[test]"`` is all the set-up: no system browser, no
driver, nothing downloaded when the test runs. ``tests/helpers/qt_browser.py`` runs it offscreen in a
child process; clicks and key presses are real input events, so the page's JavaScript runs as it
does for a person.
"""

from __future__ import annotations

import json

import pytest

from transformer_cpp.translate import Translator

from helpers.qt_browser import BrowserError, QtBrowser
from helpers.serve import running
from helpers.toy_task import one_thread, tok, trained_reversal_model  # noqa: F401  (shared fixtures)


@pytest.fixture(scope="module")
def translator(tok):
    """A model trained to reverse sequences of a-f."""
    return Translator(trained_reversal_model(tok), tok, tok)


@pytest.fixture(scope="module")
def browser():
    try:
        import PyQt6.QtWebEngineWidgets  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installation
        pytest.fail(f"the browser test needs Qt WebEngine from PyPI: pip install '.[test]' ({exc})")
    with QtBrowser() as b:
        yield b


def text_of(element_id: str) -> str:
    return f"document.getElementById({json.dumps(element_id)}).textContent"


def test_page_translates_a_typed_sentence_and_draws_the_attention_map(translator, browser):
    from transformer_cpp import serve

    with running(serve.create_app(translator)) as url:
        browser.load(url + "/")
        # /info filled the beam-size choices and the model line
        browser.wait("document.querySelectorAll('#beam-size option').length === 8")
        assert "d_model 32" in browser.js(text_of("model-info"))

        # a click in the text box, typed keys, a click on the button
        browser.click("#source")
        browser.type("a b c d")
        assert browser.js("document.getElementById('source').value") == "a b c d"
        browser.click("#translate")
        assert browser.wait(f"{text_of('output')} === 'd c b a' && {text_of('output')}") == "d c b a"
        svg = browser.wait(
            "(() => { const s = document.getElementById('attention-map'); if (!s) return null;"
            " return {rows: s.getAttribute('data-rows'), cols: s.getAttribute('data-cols'),"
            " cells: [...s.querySelectorAll('rect.cell')].map((c) => Number(c.getAttribute('fill-opacity'))),"
            " labels: [...s.querySelectorAll('text.source-label')].map((t) => t.textContent)}; })()"
        )
        # rows: "d c b a <end>" (5 output tokens); columns: "<start> a b c d <end>" (6 source tokens)
        assert (svg["rows"], svg["cols"]) == ("5", "6")
        assert len(svg["cells"]) == 30
        assert svg["labels"] == ["<start>", "\u2581a", "\u2581b", "\u2581c", "\u2581d", "<end>"]
        # the reversal model attends to the mirrored source token: the darkest cell of row 0 is "d"
        row0 = svg["cells"][:6]
        assert max(range(6), key=row0.__getitem__) == 4

        # a second sentence with beam search, sent with the Enter key, replaces translation and map
        browser.js(
            "(() => { const s = document.getElementById('beam-size'); s.value = '3';"
            " s.dispatchEvent(new Event('change')); return s.value; })()"
        )
        browser.click("#source")
        browser.js("(() => { document.getElementById('source').value = ''; return true; })()")
        browser.type("f e\n")
        browser.wait(f"{text_of('output')} === 'e f'")
        browser.wait("document.querySelectorAll('#attention-map rect.cell').length === 12")
        assert "beam size 3" in browser.js(text_of("details"))

        # an empty sentence: an error is shown, not thrown, and the last translation stays
        browser.js("(() => { document.getElementById('source').value = '   '; return true; })()")
        browser.click("#translate")
        assert browser.wait(f"{text_of('error')} !== '' && {text_of('error')}") == "Type a sentence first."
        assert browser.js(text_of("output")) == "e f"


def test_a_wait_that_never_comes_true_fails_with_the_expression(browser):
    """The driver reports a page that does not do what the test waits for, rather than hanging."""
    browser.load("data:text/html,<p id='x'>1</p>")
    assert browser.js("document.getElementById('x').textContent") == "1"
    with pytest.raises(BrowserError, match="still falsy"):
        browser.wait("document.getElementById('x').textContent === '2'", timeout=1.0)
