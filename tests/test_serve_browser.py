"""The server's web page, end to end in a real headless browser: type a sentence, read the
translation and find the cross-attention map drawn (Chromium driven by Selenium through
chromedriver, both found on PATH; `.ci/run` installs Debian's `chromium` and `chromium-driver`).

Nothing is downloaded: Selenium is given the driver and the browser, so Selenium Manager stays
offline. Without a browser the test fails with what to install (it does not skip).
"""

from __future__ import annotations

import os
import shutil

import pytest

from test_serve import running  # the uvicorn-in-a-thread helper
from test_serve import translator  # noqa: F401  (the trained toy translator fixture)
from toy_task import one_thread, tok  # noqa: F401  (shared fixtures)

_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _find(names, env):
    path = os.environ.get(env)
    if path:
        return path
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:  # pragma: no cover - depends on the installation
        pytest.fail("the browser test needs Selenium: pip install '.[test]'")
    chrome = _find(_BROWSERS, "CHROME_BINARY")
    driver_path = _find(("chromedriver",), "CHROMEDRIVER")
    if chrome is None or driver_path is None:
        pytest.fail(
            "the browser test needs Chromium and chromedriver on PATH (Debian: apt-get install chromium "
            "chromium-driver; or set CHROME_BINARY and CHROMEDRIVER)"
        )
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download anything
    options = webdriver.ChromeOptions()
    options.binary_location = chrome
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--no-first-run",
        "--window-size=1200,900",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def test_page_translates_a_typed_sentence_and_draws_the_attention_map(translator, browser):  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from transformer_cpp import serve

    with running(serve.create_app(translator)) as url:
        browser.get(url + "/")
        wait = WebDriverWait(browser, 30)
        # /info filled the beam-size choices and the model line
        wait.until(lambda d: len(Select(d.find_element(By.ID, "beam-size")).options) == 8)
        assert "d_model 32" in browser.find_element(By.ID, "model-info").text

        box = browser.find_element(By.ID, "source")
        box.send_keys("a b c d")
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_element(By.ID, "output").text == "d c b a")
        svg = wait.until(lambda d: d.find_element(By.ID, "attention-map"))
        cells = svg.find_elements(By.CSS_SELECTOR, "rect.cell")
        # rows: "d c b a <end>" (5 output tokens); columns: "<start> a b c d <end>" (6 source tokens)
        assert (svg.get_attribute("data-rows"), svg.get_attribute("data-cols")) == ("5", "6")
        assert len(cells) == 30
        labels = [e.text for e in svg.find_elements(By.CSS_SELECTOR, "text.source-label")]
        assert labels == ["<start>", "\u2581a", "\u2581b", "\u2581c", "\u2581d", "<end>"]
        # the reversal model attends to the mirrored source token: the darkest cell of row 0 is "d"
        opacities = [float(c.get_attribute("fill-opacity")) for c in cells[:6]]
        assert max(range(6), key=opacities.__getitem__) == 4

        # a second sentence with beam search and the Enter key replaces translation and map
        Select(browser.find_element(By.ID, "beam-size")).select_by_value("3")
        box.clear()
        box.send_keys("f e\n")
        wait.until(lambda d: d.find_element(By.ID, "output").text == "e f")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#attention-map rect.cell")) == 3 * 4)
        assert "beam size 3" in browser.find_element(By.ID, "details").text

        # an error is shown, not thrown
        box.clear()
        box.send_keys("   ")
        browser.find_element(By.ID, "translate").click()
        wait.until(lambda d: d.find_element(By.ID, "error").text != "")
        assert browser.find_element(By.ID, "output").text == "e f"
