"""The campaign-only cases: slow ones (seconds each: long inputs, exports through other runtimes,
figures, a fresh interpreter per environment) that ``tools/hostile_campaign.py`` runs besides the
table the test suite runs. The package imports this module under ``campaign_only()``."""

from __future__ import annotations

import os

import transformer_cpp as tc

from .base import SENT, api, cli, ctok, script, sparse
from .command_line import _ev, _ex, _exported, _n_lines, _run_ok, _tr, _trn

# --- long inputs ----------------------------------------------------------------------------------


@api("tokenizer: a 1 MB sentence")
def _(c):
    tok = ctok()
    text = "the cat sat on the mat " * 45_000
    ids = tok.encode(text)
    assert tok.decode(ids) == text


@api("text: a 2 MB sentence")
def _(c):
    out = tc.clean_sentence("Mr. Smith went to Washington. " * 70_000)
    assert out.count("Mr.") == 70_000


cli(
    "translate: --beam-size 1024",
    _tr("--beam-size", "1024", SENT, model="fixture"),
    expect="ok",
    check=_n_lines(1),
    timeout=180,
)

cli(
    "translate: 2000 lines",
    _tr("--batch-size", "100", model="fixture"),
    expect="ok",
    stdin=("The cat.\nThe dog and the tree.\n" * 1000).encode(),
    check=_n_lines(2000),
    timeout=240,
)

cli("translate: stdout closed", _tr(SENT, model="fixture"), expect="either", stdout="closed", check=lambda c, r: None)

cli(
    "translate: OMP_STACKSIZE=1G and --threads 2",
    _tr("--threads", "2", SENT, model="fixture"),
    env={"OMP_STACKSIZE": "1G"},
    expect="either",
    match=("stacks",),
    check=_n_lines(1),
)

# OpenMP settings the command runs with as they are
for _env in ({"OMP_STACKSIZE": "1G", "OMP_NUM_THREADS": "4"}, {"OMP_NUM_THREADS": "abc"}, {"OMP_NUM_THREADS": "0"}):
    cli(
        "translate: " + " and ".join(f"{k}={v}" for k, v in _env.items()),
        _tr(SENT, model="fixture"),
        env=_env,
        expect="ok",
        check=_n_lines(1),
    )

cli(
    "evaluate: --pairs is a 10 GB sparse file",
    _ev("--pairs", "huge.txt"),
    match=("longer than",),
    prepare=lambda c: sparse(c.work / "huge.txt", 10 << 30),
)

cli(
    "figures: --out that is not UTF-8",
    lambda c: ["figures", "--out", str(c.work / os.fsdecode(b"fig\xe9"))],
    expect="ok",
    check=lambda c, r: (
        None
        if list((c.work / os.fsdecode(b"fig\xe9")).glob("*.png"))
        else (_ for _ in ()).throw(AssertionError("no figure written"))
    ),
    timeout=240,
)

cli(
    "train: C locale",
    _trn(),
    env={"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii"},
    expect="ok",
    check=_run_ok(),
)

cli("export: to CTranslate2", _ex("--to", "ctranslate2"), expect="either", check=_exported("model.bin"), timeout=300)

cli(
    "export: to CTranslate2 in int8",
    _ex("--to", "ctranslate2", "--quantization", "int8"),
    expect="either",
    check=_exported("model.bin"),
    timeout=300,
)


# --- a real server (transformer-cpp serve on 127.0.0.1) ------------------------------------------

script(
    "serve: slow and vanishing clients, then SIGTERM with --graceful-timeout 0, against a real server",
    r"""
import json, re, signal, socket, subprocess, sys, threading, time
import transformer_cpp as tc
from transformer_cpp.checkpoint import save_checkpoint

tok = tc.SubwordTokenizer.build_from_corpus(["the cat sat on the mat", "a dog and a tree"] * 20, 300, min_frequency=1)
model = tc.Transformer(tok.vocab_size, tok.vocab_size, d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0)
save_checkpoint("run", model, tok, tok, optimizer=False)
argv = [sys.executable, "-m", "transformer_cpp", "serve", "--model", "run", "--port", "0", "--threads", "1",
        "--read-timeout", "1", "--graceful-timeout", "0", "--max-wait-ms", "20000"]
proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
lines = []
port = None
while port is None:
    line = proc.stdout.readline()
    assert line, "".join(lines)
    lines.append(line)
    m = re.search(r"Uvicorn running on http://127.0.0.1:(\d+)", line)
    port = m and int(m.group(1))
threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()

def connect():
    return socket.create_connection(("127.0.0.1", port), timeout=15)

def answer(sock):
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return data

def post(body, host="127.0.0.1"):
    return (f"POST /translate HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body

try:
    silent, half = connect(), connect()
    half.sendall(post(b'{"text": "the cat"}' + b" " * 50)[:-30])
    for sock in (silent, half):
        data = answer(sock)
        assert data.startswith(b"HTTP/1.1 408") and b"read_timeout" in data, data[:200]
    leaving = connect()
    leaving.sendall(post(b'{"text": "the cat"}' + b" " * 50)[:-30])
    time.sleep(0.2)
    leaving.close()
    rebound = connect()
    rebound.sendall(b"GET /info HTTP/1.1\r\nHost: rebound.example\r\n\r\n")
    data = answer(rebound)
    assert data.startswith(b"HTTP/1.1 400") and b"Host" in data and b"checkpoint" not in data, data[:300]
    stalled = connect()
    stalled.sendall(b"POST /translate HTTP/1.1\r\n")
    waiting = connect()
    waiting.sendall(post(b'{"text": "the cat"}'))
    time.sleep(1.0)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    data = answer(waiting)
    assert data.startswith(b"HTTP/1.1 503") and b"application/json" in data, data[:300]
    assert proc.wait(20) == 0
    assert time.monotonic() - started < 10
    time.sleep(0.2)
    log = "".join(lines)
    assert "Traceback" not in log, log[-3000:]
    assert sum("disconnected" in line for line in lines) == 1, log[-3000:]
finally:
    if proc.poll() is None:
        proc.kill()
print("OK")
""",
    timeout=120,
)


# --- what the user owns --------------------------------------------------------------------------


def _users_picture(c):
    from matplotlib.figure import Figure

    (c.work / "figs").mkdir()
    fig = Figure()
    fig.add_subplot().plot([0, 1])
    fig.savefig(c.work / "figs" / "pe_tokens_50x256.png")


cli(
    "figures: a picture of the user's under a figure's name",
    lambda c: ["figures", "--out", str(c.work / "figs")],
    prepare=_users_picture,
    match=("pe_tokens_50x256.png' was not written by transformer-cpp", "PNG file that transformer-cpp did not make"),
    after=lambda c, r: None if len(os.listdir(c.work / "figs")) == 1 else (_ for _ in ()).throw(AssertionError("drew")),
)


def _killed_export(c):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    stale = c.work / f".export-exported-{proc.pid}-0123abcd"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")


def _no_staging_left(c, res):
    _exported("model.safetensors")(c, res)
    left = [p.name for p in c.work.iterdir() if p.name.startswith(".export-")]
    assert not left, left


cli(
    "export: what an export killed before left beside the output",
    _ex("--to", "torch"),
    prepare=_killed_export,
    expect="ok",
    check=_no_staging_left,
)
