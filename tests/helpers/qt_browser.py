"""A headless Chromium for the tests, from PyPI: Qt WebEngine (the ``PyQt6-WebEngine`` wheel of the
test extra carries its own Chromium build), run in a child process and driven line by line.

No system browser, no driver, nothing downloaded at run time: ``pip install ".[test]"`` is the
whole set-up, on Linux, macOS and Windows. The child renders offscreen (``QT_QPA_PLATFORM=offscreen``,
no display needed) and answers one JSON request per line on its standard input:

- ``{"op": "load", "url": ...}``: load a page and wait until it has loaded;
- ``{"op": "js", "expr": ...}``: the value of a JavaScript expression in the page;
- ``{"op": "wait", "expr": ..., "timeout": s}``: run the page until the expression is truthy;
- ``{"op": "click", "selector": ...}``: a real mouse click (press and release) at the element's centre;
- ``{"op": "type", "text": ...}``: real key presses into the focused element (``"\\n"`` is Enter).

Mouse and keys go through Qt's input events, as a person's would, so the page's own listeners see
trusted events. The child runs in its own process so that the browser's threads and helper
processes never share the test process (which forks and runs OpenMP).

Parent side: ``with QtBrowser() as b: b.load(url); b.click("#translate"); b.wait("...")``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

_CHROMIUM_FLAGS = "--no-sandbox --disable-gpu --disable-extensions --no-first-run"


class BrowserError(RuntimeError):
    """The page did not do what a request waited for, or the browser could not start."""


class QtBrowser:
    """The parent's handle on the child browser (a context manager)."""

    def __init__(self, width: int = 1200, height: int = 900, timeout: float = 120.0) -> None:
        self.timeout = timeout
        env = dict(os.environ)
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
        # the Chromium sandbox cannot start as root (CI runs as root) and needs user namespaces
        env.setdefault("QTWEBENGINE_DISABLE_SANDBOX", "1")
        env["QTWEBENGINE_CHROMIUM_FLAGS"] = (env.get("QTWEBENGINE_CHROMIUM_FLAGS", "") + " " + _CHROMIUM_FLAGS).strip()
        # the browser's own log goes to a file (a pipe nobody reads would fill and block it)
        self._log = tempfile.TemporaryFile(mode="w+")
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(width), str(height)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
        )
        ready = self._read()
        if ready.get("ready") is not True:
            raise BrowserError(f"the browser did not start: {ready}")

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait(timeout=30)
            self._log.seek(0)
            err = self._log.read()
            raise BrowserError(f"the browser process ended (exit {self._proc.returncode}): {err[-3000:]}")
        return dict(json.loads(line))

    def _call(self, **request: Any) -> Any:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        answer = self._read()
        if "error" in answer:
            raise BrowserError(f"{request['op']}: {answer['error']}")
        return answer.get("value")

    def load(self, url: str) -> None:
        self._call(op="load", url=url, timeout=self.timeout)

    def js(self, expr: str) -> Any:
        return self._call(op="js", expr=expr, timeout=self.timeout)

    def wait(self, expr: str, timeout: float | None = None) -> Any:
        """Wait until ``expr`` is truthy in the page; its value. ``BrowserError`` on a timeout."""
        return self._call(op="wait", expr=expr, timeout=self.timeout if timeout is None else timeout)

    def click(self, selector: str) -> None:
        self._call(op="click", selector=selector, timeout=self.timeout)

    def type(self, text: str) -> None:
        self._call(op="type", text=text, timeout=self.timeout)

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.close()
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._log.close()

    def __enter__(self) -> QtBrowser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------ the child process


def _child(width: int, height: int) -> None:  # pragma: no cover - runs in the child process
    import time

    from PyQt6.QtCore import QEventLoop, QPoint, Qt, QTimer, QUrl
    from PyQt6.QtTest import QTest
    from PyQt6.QtWebEngineWidgets import QWebEngineView
    from PyQt6.QtWidgets import QApplication

    app = QApplication([sys.argv[0]])
    view = QWebEngineView()
    view.resize(width, height)
    view.show()
    page = view.page()

    def spin(ms: int) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def run_js(expr: str, timeout: float) -> Any:
        box: dict[str, Any] = {}
        loop = QEventLoop()
        # JSON round trip: the page's value as the JSON it would serialise to (DOM nodes excluded)
        script = f"(() => {{ const v = ({expr}); return JSON.stringify(v === undefined ? null : v); }})()"

        def done(result: Any) -> None:
            box["value"] = result
            loop.quit()

        page.runJavaScript(script, done)
        QTimer.singleShot(int(timeout * 1000), loop.quit)
        loop.exec()
        if "value" not in box:
            raise TimeoutError(f"no answer from the page within {timeout} s")
        if box["value"] is None:
            raise ValueError(f"the expression raised or gave no JSON value: {expr}")
        return json.loads(box["value"])

    def load(url: str, timeout: float) -> None:
        box: dict[str, bool] = {}
        loop = QEventLoop()

        def finished(ok: bool) -> None:
            box["ok"] = ok
            loop.quit()

        page.loadFinished.connect(finished)
        view.load(QUrl(url))
        QTimer.singleShot(int(timeout * 1000), loop.quit)
        loop.exec()
        page.loadFinished.disconnect(finished)
        if not box.get("ok"):
            raise RuntimeError(f"could not load {url}")

    def target() -> Any:
        # the widget that receives the page's input events
        return view.focusProxy() or view

    def click(selector: str, timeout: float) -> None:
        rect = run_js(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return false; "
            "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); "
            "return [r.left + r.width / 2, r.top + r.height / 2, window.devicePixelRatio]; })()",
            timeout,
        )
        if rect is False:
            raise LookupError(f"no element matches {selector!r}")
        x, y, _ = rect
        zoom = view.zoomFactor()
        point = QPoint(round(x * zoom), round(y * zoom))
        widget = target()
        QTest.mouseMove(widget, point)
        spin(20)
        QTest.mouseClick(widget, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, point)
        spin(50)

    def type_text(text: str) -> None:
        widget = target()
        for ch in text:
            if ch == "\n":
                QTest.keyClick(widget, Qt.Key.Key_Return)
            else:
                QTest.keyClicks(widget, ch)
            spin(5)
        spin(50)

    def wait(expr: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = run_js(expr, max(1.0, deadline - time.monotonic()))
            except ValueError:
                last = None
            if last:
                return last
            if time.monotonic() > deadline:
                raise TimeoutError(f"still falsy after {timeout} s ({last!r}): {expr}")
            spin(50)

    def answer(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    answer({"ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op, timeout = request["op"], float(request.get("timeout", 60))
        try:
            if op == "load":
                load(request["url"], timeout)
                answer({"value": None})
            elif op == "js":
                answer({"value": run_js(request["expr"], timeout)})
            elif op == "wait":
                answer({"value": wait(request["expr"], timeout)})
            elif op == "click":
                click(request["selector"], timeout)
                answer({"value": None})
            elif op == "type":
                type_text(request["text"])
                answer({"value": None})
            else:
                answer({"error": f"unknown op {op!r}"})
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises
            answer({"error": f"{type(exc).__name__}: {exc}"})
    view.close()
    app.quit()


if __name__ == "__main__":  # pragma: no cover - the child process
    _child(int(sys.argv[1]), int(sys.argv[2]))
