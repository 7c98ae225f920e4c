"""The HTTP server for the tests: an app in a thread (``running``) or ``transformer-cpp serve`` in
a child process (``start_server``), on 127.0.0.1 and a free port."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from transformer_cpp import serve

HOST = "127.0.0.1"


def running(app: Any) -> Any:
    """Serve ``app`` with uvicorn in a thread on a free port of 127.0.0.1; yields the base URL.
    Idle keep-alive connections stay open for minutes (uvicorn's default is 5 s): on a starved
    machine a client may pause that long between requests, and would then race the close."""
    return serve.background_server(app, HOST, 0, timeout_keep_alive=600)


def start_server(model_dir: Path, *extra: str) -> "tuple[subprocess.Popen, str]":
    """``transformer-cpp serve --model MODEL_DIR --port 0 --threads 1 EXTRA...`` in a child process,
    once it says where it listens: the process (its output lines so far in ``proc.output``, the
    rest appended by a thread) and the base URL."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "transformer_cpp", "serve", "--model", str(model_dir), "--port", "0"]
    proc = subprocess.Popen(
        [*command, "--threads", "1", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line)
        if m:
            threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
            proc.output = lines  # type: ignore[attr-defined]
            return proc, m.group(1)
    proc.kill()
    raise AssertionError("the server did not start:\n" + "".join(lines))
