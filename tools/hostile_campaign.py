#!/usr/bin/env python
"""A hostile-input campaign against transformer-cpp (issue 10): the Python API, damaged
checkpoints and every command-line subcommand, fed what a careless or hostile user would feed them.

Each case runs in its own process with a time limit and an address-space limit
(``resource.setrlimit(RLIMIT_AS)``, 2 GB by default) and is classified:

``clear-error``
    a non-zero exit (command line: one ``error`` line, no traceback) or an exception of a
    user-facing type (ValueError, TypeError, OSError, RuntimeError and their subclasses) whose
    message names what was wrong (when the case lists fragments, they must all be in it);
``handled``
    a correct result, checked by the case's own assertions;
``crash``
    the process was killed by a signal (abort, segmentation fault) or died inside a native
    library (``libgomp:``, ``terminate called``);
``traceback``
    the command line printed a Python traceback or its "internal error" line (a bug), or an API
    call raised an internal exception type (IndexError, KeyError, AttributeError,
    ZeroDivisionError, MemoryError from an allocation...) instead of naming the problem;
``unclear-error``
    an error of a user-facing type whose message does not name the problem (the case's fragments
    are missing), pybind11's list of signatures, more than one error line, or an error for input
    that should have worked;
``silent-wrong``
    success (exit 0, no exception) with a wrong or non-finite result, lost data, or input that
    had to be refused;
``hang``
    the time limit passed.

API cases run in a child forked from this process after ``import transformer_cpp`` (so each
costs milliseconds, not an interpreter start); command-line cases run ``python -m
transformer_cpp`` as a user would. Everything works on tiny models and a tiny Tatoeba-format file
written into a temporary directory; the real data set is never read.

Usage (run it niced on a shared machine)::

    OMP_NUM_THREADS=1 nice -n 19 python tools/hostile_campaign.py [--out /tmp/hostile.json]
        [--only SUBSTRING] [--memory-gb 2] [--timeout 60] [--list] [--verbose]

It prints one line per case that is not ``clear-error`` or ``handled``, then a table of the
counts by class, and writes every case's result as JSON to ``--out`` (default
``/tmp/hostile_campaign.json``). The exit status is 1 when any case is in a failing class.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import hashlib
import json
import os
import pickle
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import transformer_cpp as tc  # noqa: E402  (imported once here; API cases fork from this process)
from transformer_cpp import checkpoint as ck  # noqa: E402
from transformer_cpp import data as td  # noqa: E402
from transformer_cpp import training as tr  # noqa: E402
from transformer_cpp import translate as tl  # noqa: E402

CLASSES = ("clear-error", "handled", "crash", "traceback", "unclear-error", "silent-wrong", "hang")
FAILING = ("crash", "traceback", "unclear-error", "silent-wrong", "hang")
USER_ERRORS = (ValueError, TypeError, OSError, RuntimeError)  # FloatingPointError is an ArithmeticError


class ServerError(Exception):
    """An HTTP 500 from the serving app (a bug there), raised by the serve cases."""


INTERNAL_ERRORS = (
    ServerError,
    IndexError,
    KeyError,
    AttributeError,
    ZeroDivisionError,
    UnboundLocalError,
    RecursionError,
    MemoryError,
    NameError,
    AssertionError,
    StopIteration,
)

# --------------------------------------------------------------------------------------- context


@dataclass
class Context:
    root: Path  # the campaign's temporary directory
    data: Path  # a tiny Tatoeba-format file (300 pairs)
    run: Path  # a run directory trained on it for 2 epochs (checkpoints epoch-0001, epoch-0002)
    work: Path = Path()  # a fresh directory for the current case


SMALL_TRAIN = [
    "--preset",
    "tiny",
    "--d-model",
    "16",
    "--d-ff",
    "32",
    "--layers",
    "1",
    "--heads",
    "2",
    "--batch-size",
    "64",
    "--warmup",
    "20",
    "--vocab-size",
    "300",
    "--no-progress",
    "--threads",
    "1",
    "--val-bleu-sentences",
    "20",
]


def cli_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMER_CPP_")}
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def setup(root: Path) -> Context:
    from toy_task import write_tatoeba_file

    data = write_tatoeba_file(root / "pairs.txt", n=300)
    run = root / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_cpp",
            "train",
            *SMALL_TRAIN,
            "--data",
            str(data),
            "--epochs",
            "2",
            "--out",
            str(run),
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"setup: training the fixture run failed:\n{proc.stderr}")
    return Context(root=root, data=data, run=run)


# --------------------------------------------------------------------------------------- cases


@dataclass
class Case:
    name: str
    kind: str  # "api" or "cli"
    expect: str  # "error": must fail clearly; "ok": must succeed (assertions decide); "either"
    match: Sequence[str] = ()  # fragments the error message must hold (case-insensitive)
    fn: Optional[Callable[[Context], Any]] = None  # api: the case; cli: builds the argv
    stdin: Any = b""  # cli: bytes, or a callable(ctx) -> bytes
    env: Optional[Dict[str, str]] = None  # cli: extra environment
    prepare: Optional[Callable[[Context], None]] = None  # cli: runs in this process before the command
    check: Optional[Callable[[Context, "Result"], None]] = None  # cli: assertions on a successful run
    stdout: str = "pipe"  # cli: "pipe", "devfull" or "closed"
    partial: bool = False  # cli: a non-zero exit is a partial success that ``check`` judges (translate)
    fsize: int = 0  # cli: RLIMIT_FSIZE in bytes (0: none), a disk that fills up (the editable install's
    #                  rebuild at import writes files too: keep it above a few tens of KB)
    timeout: float = 0.0  # 0: the campaign's default
    note: str = ""


@dataclass
class Result:
    rc: int
    out: str
    err: str


CASES: List[Case] = []


def api(name: str, expect: str = "ok", match: Sequence[str] = (), timeout: float = 0.0, note: str = ""):
    """Register an API case: a function of the context, run in a forked child."""

    def register(fn: Callable[[Context], Any]) -> Callable[[Context], Any]:
        CASES.append(Case(name, "api", expect, tuple(match), fn, timeout=timeout, note=note))
        return fn

    return register


def err(name: str, call: Callable[[Context], Any], *match: str, note: str = "") -> None:
    """An API call that must raise a user-facing exception naming ``match``."""
    CASES.append(Case(name, "api", "error", tuple(match), call, note=note))


def cli(
    name: str,
    argv: Callable[[Context], List[str]],
    expect: str = "error",
    match: Sequence[str] = (),
    *,
    stdin: Any = b"",
    env: Optional[Dict[str, str]] = None,
    prepare: Optional[Callable[[Context], None]] = None,
    check: Optional[Callable[[Context, Result], None]] = None,
    stdout: str = "pipe",
    timeout: float = 0.0,
    partial: bool = False,
    fsize: int = 0,
    note: str = "",
) -> None:
    CASES.append(
        Case(
            name,
            "cli",
            expect,
            tuple(match),
            argv,
            stdin=stdin,
            env=env,
            prepare=prepare,
            check=check,
            stdout=stdout,
            timeout=timeout,
            partial=partial,
            fsize=fsize,
            note=note,
        )
    )


# --------------------------------------------------------------------------------------- helpers for cases

V = 13


def small(**kw: Any) -> Any:
    """A float64 model of width 8 over a 13-token vocabulary."""
    args = dict(d_model=8, n_layers=1, n_heads=2, d_ff=12, dropout=0.0, max_length=8, dtype="float64")
    args.update(kw)
    return tc.Transformer(V, V, **args)


def batch(seed: int = 0, b: int = 2, s: int = 4, t: int = 3):
    rng = np.random.default_rng(seed)
    return rng.integers(1, V, (b, s)), rng.integers(1, V, (b, t)), rng.integers(1, V, (b, t))


def rtok() -> Any:
    from toy_task import reversal_tokenizer

    return reversal_tokenizer()


def translator(c: Context) -> Any:
    return tc.Translator.from_checkpoint(c.run)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def churn() -> None:
    """Free what can be freed and reuse the memory, so that a dangling view would show garbage."""
    gc.collect()
    junk = [np.full(1 << 16, 7.0) for _ in range(64)]
    del junk


def copy_run(c: Context, name: str = "run") -> Path:
    dst = c.work / name
    shutil.copytree(c.run, dst)
    return dst


def latest(run: Path) -> Path:
    return run / (run / "latest").read_text().strip()


def edit_config(ckpt: Path, edit: Callable[[Dict[str, Any]], Any]) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    edit(cfg)
    (ckpt / "config.json").write_text(json.dumps(cfg))


def rewrite(ckpt: Path, fname: str, payload: bytes) -> None:
    """Replace a checkpoint file and record its new size and checksum, as a buggy writer would:
    only the content is wrong, not its bookkeeping."""
    (ckpt / fname).write_bytes(payload)

    def fix(cfg: Dict[str, Any]) -> None:
        cfg["files"][fname] = {"bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}

    edit_config(ckpt, fix)


def edit_tensors(ckpt: Path, fname: str, edit: Callable[[Dict[str, np.ndarray]], Any]) -> None:
    from safetensors.numpy import load, save

    tensors = dict(load((ckpt / fname).read_bytes()))
    edit(tensors)
    rewrite(ckpt, fname, save(tensors))


def edit_json_file(ckpt: Path, fname: str, edit: Callable[[Any], Any]) -> None:
    obj = json.loads((ckpt / fname).read_text())
    obj = edit(obj) or obj
    rewrite(ckpt, fname, json.dumps(obj).encode())


def sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def write_pairs(path: Path, lines: Sequence[str], encoding: str = "utf-8", newline: str = "\n") -> Path:
    path.write_bytes((newline.join(lines) + newline).encode(encoding))
    return path


def toy_lines(n: int = 60, seed: int = 1) -> List[str]:
    from toy_task import write_tatoeba_file

    p = Path(tempfile.mkdtemp()) / "p.txt"
    write_tatoeba_file(p, n=n, seed=seed)
    lines = p.read_text(encoding="utf-8").splitlines()
    shutil.rmtree(p.parent)
    return lines


def assert_raises(call: Callable[[], Any], what: str = "") -> BaseException:
    try:
        value = call()
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError(f"accepted{f' {what}' if what else ''}: returned {value!r:.200}")


def lines_of(res: Result) -> List[str]:
    return res.out.split("\n")[:-1] if res.out.endswith("\n") else res.out.split("\n")


# --------------------------------------------------------------------------------------- running


def _limit(memory: int, fsize: int = 0) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))


def _describe(exc: BaseException) -> Dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "message": str(exc)[:2000],
        "user": isinstance(exc, USER_ERRORS) and not isinstance(exc, INTERNAL_ERRORS),
        "where": "".join(traceback.format_tb(exc.__traceback__)[-2:])[-1500:],
    }


def run_api(case: Case, ctx: Context, memory: int, timeout: float) -> Dict[str, Any]:
    r, w = os.pipe()
    out_path = ctx.work / "child-output.txt"
    pid = os.fork()
    if pid == 0:  # the child: run the case, report as JSON, never return
        os.close(r)
        status = 0
        try:
            fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.setpgid(0, 0)
            _limit(memory)
            os.chdir(ctx.work)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = case.fn(ctx)
            report = {"status": "returned", "value": repr(value)[:300]}
        except AssertionError as exc:
            report = {"status": "assertion", **_describe(exc)}
        except BaseException as exc:  # noqa: BLE001
            report = {"status": "raised", **_describe(exc)}
        try:
            os.write(w, json.dumps(report).encode("utf-8", "replace"))
        except BaseException:  # noqa: BLE001
            status = 3
        os._exit(status)
    os.close(w)
    chunks: List[bytes] = []
    deadline = time.monotonic() + timeout
    exited = None
    while exited is None:
        left = deadline - time.monotonic()
        if left <= 0:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(r)
            return {"class": "hang", "detail": f"no result after {timeout:.0f} s"}
        ready, _, _ = select.select([r], [], [], min(left, 0.2))
        if ready:
            chunk = os.read(r, 1 << 16)
            if chunk:
                chunks.append(chunk)
                continue
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exited = status
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    output = out_path.read_text(errors="replace")[-1500:] if out_path.exists() else ""
    if os.WIFSIGNALED(exited):
        return {
            "class": "crash",
            "detail": f"killed by signal {signal.Signals(os.WTERMSIG(exited)).name}",
            "output": output,
        }
    if not chunks:
        return {
            "class": "crash",
            "detail": f"exited with status {os.WEXITSTATUS(exited)} without a result",
            "output": output,
        }
    report = json.loads(b"".join(chunks).decode("utf-8"))
    return classify_api(case, report) | {"report": report}


def classify_api(case: Case, report: Dict[str, Any]) -> Dict[str, Any]:
    status = report["status"]
    if status == "assertion":
        return {"class": "silent-wrong", "detail": report["message"]}
    if status == "returned":
        if case.expect == "error":
            return {"class": "silent-wrong", "detail": f"accepted: returned {report['value']}"}
        return {"class": "handled", "detail": ""}
    message = report["message"]
    detail = f"{report['type']}: {message}"
    if not report["user"]:
        return {"class": "traceback", "detail": detail, "where": report.get("where", "")}
    if case.expect == "ok":
        return {"class": "unclear-error", "detail": "refused input that should work: " + detail}
    lowered = message.lower()
    missing = [m for m in case.match if m.lower() not in lowered]
    if not message.strip() or "Invoked with" in message or missing:
        return {"class": "unclear-error", "detail": detail + (f"  [missing {missing}]" if missing else "")}
    return {"class": "clear-error", "detail": detail}


def run_cli(case: Case, ctx: Context, memory: int, timeout: float) -> Dict[str, Any]:
    if case.prepare is not None:
        case.prepare(ctx)
    argv = case.fn(ctx)
    stdin = case.stdin(ctx) if callable(case.stdin) else case.stdin
    cmd = [sys.executable, "-m", "transformer_cpp", *argv]
    stdout: Any = subprocess.PIPE
    if case.stdout == "devfull":
        stdout = open("/dev/full", "wb")
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=subprocess.PIPE,
            cwd=ctx.work,
            env=cli_env(case.env),
            preexec_fn=lambda: (_limit(memory, case.fsize), os.setpgid(0, 0)),
        )
        if case.stdout == "closed":
            proc.stdout.close()
        try:
            out, errb = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return {"class": "hang", "detail": f"no exit after {timeout:.0f} s"}
    finally:
        if case.stdout == "devfull":
            stdout.close()
    res = Result(proc.returncode, (out or b"").decode("utf-8", "replace"), errb.decode("utf-8", "replace"))
    return classify_cli(case, ctx, res) | {
        "rc": res.rc,
        "stderr": res.err[-2000:],
        "stdout": res.out[-500:],
        "seconds": round(time.monotonic() - started, 2),
    }


def classify_cli(case: Case, ctx: Context, res: Result) -> Dict[str, Any]:
    err_text = res.err
    if res.rc < 0:
        return {"class": "crash", "detail": f"killed by signal {signal.Signals(-res.rc).name}"}
    for marker in ("libgomp:", "terminate called", "Segmentation fault", "Aborted", "Fatal Python error"):
        if marker in err_text and (res.rc != 0 or marker != "libgomp:"):  # libgomp also warns, then goes on
            return {"class": "crash", "detail": err_text.strip().splitlines()[-1][:300]}
    if "Traceback (most recent call last)" in err_text or "Exception ignored" in err_text:
        return {"class": "traceback", "detail": err_text.strip().splitlines()[-1][:300]}
    if "internal error" in err_text:
        return {"class": "traceback", "detail": [l for l in err_text.splitlines() if "internal error" in l][0][:300]}
    if res.rc == 0:
        if case.expect == "error":
            return {"class": "silent-wrong", "detail": "exit status 0 for input that had to be refused"}
        if case.check is not None:
            try:
                case.check(ctx, res)
            except AssertionError as exc:
                return {"class": "silent-wrong", "detail": f"check failed: {exc}"[:600]}
        return {"class": "handled", "detail": ""}
    error_lines = [l for l in err_text.splitlines() if "error" in l]
    detail = error_lines[0][:400] if error_lines else (err_text.strip().splitlines() or ["(no message)"])[-1][:400]
    if case.expect == "ok":
        return {"class": "unclear-error", "detail": f"exit {res.rc} for input that should work: {detail}"}
    if case.check is not None and case.partial:  # a partial success (translate with some bad lines)
        try:
            case.check(ctx, res)
            return {"class": "clear-error", "detail": detail}
        except AssertionError as exc:
            return {"class": "silent-wrong", "detail": f"check failed: {exc}"[:600]}
    missing = [m for m in case.match if m.lower() not in " ".join(error_lines).lower()]
    if len(error_lines) != 1 or missing:
        why = f"{len(error_lines)} error lines" if len(error_lines) != 1 else f"missing {missing}"
        return {"class": "unclear-error", "detail": f"{detail}  [{why}]"}
    return {"class": "clear-error", "detail": detail}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="/tmp/hostile_campaign.json", help="where to write the JSON results")
    parser.add_argument("--only", action="append", default=[], help="run only cases whose name holds this")
    parser.add_argument("--memory-gb", type=float, default=2.0, help="address-space limit per case")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per case (default 180)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--verbose", action="store_true", help="print every case")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)

    names = [c.name for c in CASES]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SystemExit(f"duplicate case names: {duplicates}")
    cases = [c for c in CASES if not args.only or any(o in c.name for o in args.only)]
    if args.list:
        for c in cases:
            print(f"{c.kind:4} {c.expect:6} {c.name}")
        print(f"{len(cases)} cases")
        return 0
    memory = int(args.memory_gb * (1 << 30))
    root = Path(tempfile.mkdtemp(prefix="hostile-"))
    started = time.monotonic()
    print(f"setting up in {root} ...", file=sys.stderr, flush=True)
    ctx = setup(root)
    results = []
    counts = {k: 0 for k in CLASSES}
    try:
        for i, case in enumerate(cases, 1):
            work = root / "cases" / f"{i:03d}"
            work.mkdir(parents=True)
            ctx.work = work
            t0 = time.monotonic()
            timeout = case.timeout or args.timeout
            try:
                outcome = (run_api if case.kind == "api" else run_cli)(case, ctx, memory, timeout)
            except Exception as exc:  # noqa: BLE001  (a bug of the campaign itself, or of a prepare step)
                outcome = {
                    "class": "traceback",
                    "detail": f"campaign: {type(exc).__name__}: {exc}",
                    "where": traceback.format_exc()[-1500:],
                }
            outcome["seconds"] = round(time.monotonic() - t0, 2)
            counts[outcome["class"]] += 1
            results.append({"name": case.name, "kind": case.kind, "expect": case.expect, "note": case.note, **outcome})
            if args.verbose or outcome["class"] in FAILING:
                print(
                    f"[{i:3d}/{len(cases)}] {outcome['class']:13} {case.kind:3} {case.name}: "
                    f"{' '.join(str(outcome.get('detail', '')).split())[:300]}",
                    flush=True,
                )
            if not args.keep:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    elapsed = time.monotonic() - started
    print(f"\n{'class':15}{'api':>6}{'cli':>6}{'all':>6}")
    for k in CLASSES:
        a = sum(1 for r in results if r["class"] == k and r["kind"] == "api")
        c = sum(1 for r in results if r["class"] == k and r["kind"] == "cli")
        print(f"{k:15}{a:6}{c:6}{a + c:6}")
    print(
        f"{'total':15}{sum(r['kind'] == 'api' for r in results):6}{sum(r['kind'] == 'cli' for r in results):6}"
        f"{len(results):6}   ({elapsed / 60:.1f} minutes)"
    )
    Path(args.out).write_text(
        json.dumps(
            {"counts": counts, "seconds": round(elapsed, 1), "memory_bytes": memory, "results": results}, indent=1
        )
    )
    print(f"results: {args.out}")
    return 1 if any(counts[k] for k in FAILING) else 0


# ======================================================================================= the cases
# (registered at import; grouped by what they attack)


# --- 1. layers and functions of the core ----------------------------------------------------------


def _linear_ref(lin: Any, x: np.ndarray) -> np.ndarray:
    p = lin.parameters()
    out = np.asarray(x, dtype=np.float64) @ p["weight"].value.T.astype(np.float64)
    return out + p["bias"].value if "bias" in p else out


def _close(a: Any, b: Any, tol: float = 1e-5) -> None:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, f"shape {a.shape}, expected {b.shape}"
    assert np.all(np.isfinite(a)), "non-finite values"
    assert np.allclose(a, b, rtol=tol, atol=tol), f"max difference {np.max(np.abs(a - b)):.3g}"


@api("linear: strided (non-contiguous) input")
def _(c):
    lin = tc.Linear(5, 3, seed=1, dtype="float64")
    x = rand(4, 10)[:, ::2]
    _close(lin.forward(x), _linear_ref(lin, x), 1e-12)


@api("linear: Fortran-order input")
def _(c):
    lin = tc.Linear(5, 3, seed=1, dtype="float64")
    x = np.asfortranarray(rand(6, 5))
    _close(lin.forward(x), _linear_ref(lin, x), 1e-12)


@api("linear: transposed 3-D input")
def _(c):
    lin = tc.Linear(5, 3, seed=1, dtype="float64")
    x = rand(5, 4, 2).transpose(2, 1, 0)  # (2, 4, 5), no axis contiguous
    _close(lin.forward(x), _linear_ref(lin, x), 1e-12)


@api("linear: integer input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = np.arange(6).reshape(2, 3)
    _close(lin.forward(x), _linear_ref(lin, x), 1e-12)


@api("linear: float16 input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1)
    x = np.ones((2, 3), np.float16)
    _close(lin.forward(x), _linear_ref(lin, x.astype(np.float64)), 1e-5)


@api("linear: boolean input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = np.array([[True, False, True]])
    _close(lin.forward(x), _linear_ref(lin, x.astype(np.float64)), 1e-12)


err("linear: complex input", lambda c: tc.Linear(3, 2).forward(np.ones((2, 3), complex)), "complex")
err("linear: object array", lambda c: tc.Linear(3, 2).forward(np.array([[1, "a", None]], dtype=object)), "x")
err("linear: string array", lambda c: tc.Linear(3, 2).forward(np.array([["1", "2", "3"]])), "x")


@api("linear: nested list input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    _close(lin.forward([[1.0, 2.0, 3.0]]), _linear_ref(lin, np.array([[1.0, 2.0, 3.0]])), 1e-12)


@api("linear: 4-D input")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = rand(2, 3, 4, 3)
    _close(lin.forward(x), _linear_ref(lin, x), 1e-12)


@api("linear: 1-D input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = rand(3)
    _close(lin.forward(x), _linear_ref(lin, x), 1e-12)


err("linear: 0-D input", lambda c: tc.Linear(3, 2).forward(np.float32(1.0)), "x")
err("linear: wrong last dimension", lambda c: tc.Linear(3, 2).forward(np.ones((2, 4), np.float32)), "3")
err("linear: backward before forward", lambda c: tc.Linear(3, 2).backward(np.ones((2, 2), np.float32)), "forward")


def _linear_backward_wrong_shape(c):
    lin = tc.Linear(3, 2)
    lin.forward(np.ones((2, 3), np.float32))
    return lin.backward(np.ones((3, 2), np.float32))


err("linear: backward with the wrong dout shape", _linear_backward_wrong_shape, "dout")


@api("linear: two backwards accumulate gradients")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x, d = rand(4, 3), rand(4, 2, seed=1)
    lin.forward(x)
    lin.backward(d)
    g1 = lin.parameters()["weight"].grad.copy()
    lin.backward(d)
    _close(lin.parameters()["weight"].grad, 2 * g1, 1e-12)
    _close(g1, d.T @ x, 1e-12)


err("linear: zero in_features", lambda c: tc.Linear(0, 3), "in_features")
err("linear: negative out_features", lambda c: tc.Linear(3, -1), "out_features")
err("linear: dtype int32", lambda c: tc.Linear(3, 2, dtype="int32"), "dtype")
err("linear: dtype float16", lambda c: tc.Linear(3, 2, dtype="float16"), "dtype")
err("linear: dtype nonsense", lambda c: tc.Linear(3, 2, dtype="banana"), "dtype")


@api("linear: output not overwritten by the next forward")
def _(c):
    lin = tc.Linear(3, 2, seed=1)
    y1 = lin.forward(np.ones((2, 3), np.float32))
    keep = y1.copy()
    lin.forward(np.full((2, 3), 5, np.float32))
    assert np.array_equal(y1, keep), "the first output changed"


@api("linear: dx not overwritten by the next backward")
def _(c):
    lin = tc.Linear(3, 2, seed=1)
    lin.forward(np.ones((2, 3), np.float32))
    d1 = lin.backward(np.ones((2, 2), np.float32))
    keep = d1.copy()
    lin.forward(np.ones((2, 3), np.float32))
    lin.backward(np.full((2, 2), 9, np.float32))
    assert np.array_equal(d1, keep), "the first dx changed"


@api("linear: float64 layer, float32 input", expect="either")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = rand(2, 3).astype(np.float32)
    _close(lin.forward(x), _linear_ref(lin, x), 1e-6)


@api("linear: read-only input")
def _(c):
    lin = tc.Linear(3, 2, seed=1, dtype="float64")
    x = rand(2, 3)
    x.setflags(write=False)
    _close(lin.forward(x), _linear_ref(lin, x), 1e-12)


@api("linear: zero rows", expect="either")
def _(c):
    out = tc.Linear(3, 2).forward(np.zeros((0, 3), np.float32))
    assert out.shape == (0, 2), out.shape


@api("linear: without bias")
def _(c):
    lin = tc.Linear(3, 2, bias=False, seed=2, dtype="float64")
    assert list(lin.parameters()) == ["weight"], list(lin.parameters())
    x = rand(4, 3)
    _close(lin.forward(x), x @ lin.parameters()["weight"].value.T, 1e-12)


@api("linear: parameter outlives its layer")
def _(c):
    p = tc.Linear(64, 64, seed=3).parameters()["weight"]
    keep = np.array(p.value, copy=True)
    churn()
    assert np.array_equal(p.value, keep), "the weight changed after its layer was freed"
    p.value[...] = 1.0  # writing must not corrupt anything
    churn()
    assert np.all(p.value == 1.0)


@api("linear: value view outlives its layer")
def _(c):
    v = tc.Linear(64, 64, seed=3).parameters()["weight"].value
    keep = v.copy()
    churn()
    assert np.array_equal(v, keep), "the view changed after its layer was freed"


@api("adam: steps parameters of a freed layer")
def _(c):
    params = tc.Linear(32, 32, seed=1).parameters()
    opt = tc.Adam(params)
    churn()
    for p in params.values():
        p.grad[...] = 1.0
    opt.step(1e-2)
    assert all(np.isfinite(p.value).all() for p in params.values())


err("embedding: negative id", lambda c: tc.Embedding(10, 4).forward(np.array([[1, -1]])), "-1")
err("embedding: id equal to vocab_size", lambda c: tc.Embedding(10, 4).forward(np.array([[1, 10]])), "10")
err(
    "embedding: uint64 id beyond int64",
    lambda c: tc.Embedding(10, 4).forward(np.array([[2**63 + 5]], np.uint64)),
    "9223372036854775813",
)
err("embedding: float ids", lambda c: tc.Embedding(10, 4).forward(np.array([[1.0, 2.0]])), "integer")


@api("embedding: boolean ids", expect="either")
def _(c):
    emb = tc.Embedding(10, 4, seed=1, dtype="float64")
    out = emb.forward(np.array([[True, False]]))
    _close(out[0], emb.parameters()["weight"].value[[1, 0]], 1e-12)


@api("embedding: 1-D ids", expect="either")
def _(c):
    emb = tc.Embedding(10, 4, seed=1, dtype="float64")
    out = emb.forward(np.array([3, 4]))
    _close(np.reshape(out, (2, 4)), emb.parameters()["weight"].value[[3, 4]], 1e-12)


@api("embedding: repeated ids accumulate gradient, padding row none")
def _(c):
    emb = tc.Embedding(6, 3, seed=1, dtype="float64")
    emb.forward(np.array([[2, 2, 0, 5]]))
    d = rand(1, 4, 3)
    emb.backward(d)
    g = emb.parameters()["weight"].grad
    _close(g[2], d[0, 0] + d[0, 1], 1e-12)
    _close(g[5], d[0, 3], 1e-12)
    assert not g[0].any(), "the padding row got a gradient"


err(
    "embedding: non-finite scale",
    lambda c: tc.Embedding(4, 2).forward(np.ones((1, 2), int), scale=float("nan")),
    "scale",
)


@api("positional embedding: sequence beyond max_length equals a larger table")
def _(c):
    ids = np.array([[1, 2, 3, 4, 5, 6, 7, 1, 2, 3]])
    a = tc.PositionalEmbedding(9, 6, max_length=2, seed=4, dtype="float64").forward(ids)
    b = tc.PositionalEmbedding(9, 6, max_length=64, seed=4, dtype="float64").forward(ids)
    _close(a, b, 1e-12)


err("positional embedding: bad layout", lambda c: tc.PositionalEmbedding(9, 6, layout="spiral"), "layout")
err("positional embedding: max_length 0", lambda c: tc.PositionalEmbedding(9, 6, max_length=0), "max_length")


@api("layernorm: constant rows")
def _(c):
    ln = tc.LayerNorm(4, dtype="float64")
    out = ln.forward(np.full((3, 4), 2.5))
    _close(out, np.zeros((3, 4)), 1e-12)


@api("layernorm: eps 0 and constant rows", expect="either")
def _(c):
    ln = tc.LayerNorm(4, eps=0.0, dtype="float64")
    out = ln.forward(np.full((3, 4), 2.5))
    assert np.all(np.isfinite(out)), f"NaN output: {out}"
    ln.backward(np.ones((3, 4)))
    assert all(np.isfinite(p.grad).all() for p in ln.parameters().values()), "non-finite gradient"


@api("layernorm: width 1")
def _(c):
    out = tc.LayerNorm(1, dtype="float64").forward(rand(5, 1))
    _close(out, np.zeros((5, 1)), 1e-12)


@api("layernorm: subnormal values")
def _(c):
    x = np.full((2, 4), 1e-40, np.float32)
    x[:, 0] = 3e-40
    out = tc.LayerNorm(4).forward(x)
    assert np.all(np.isfinite(out)), out


@api("layernorm: float32 extremes")
def _(c):
    x = np.array([[3.0e38, -3.0e38, 1.0, 0.0]], np.float32)
    out = tc.LayerNorm(4).forward(x)
    assert np.all(np.isfinite(out)), out
    assert abs(float(out.mean())) < 1e-3


err("layernorm: wrong width", lambda c: tc.LayerNorm(4).forward(np.ones((2, 5), np.float32)), "4")
err("layernorm: negative eps", lambda c: tc.LayerNorm(4, eps=-1e-6), "eps")


@api("dropout: training=False is the identity")
def _(c):
    x = rand(4, 5)
    assert np.array_equal(tc.Dropout(0.5, dtype="float64").forward(x, training=False), x)


@api("dropout: kept values are scaled by 1/(1-p)")
def _(c):
    x = np.ones((200, 50))
    out = tc.Dropout(0.25, seed=3, dtype="float64").forward(x, training=True)
    kept = out[out != 0]
    _close(kept, np.full(kept.shape, 1 / 0.75), 1e-12)
    assert 0.2 < 1 - kept.size / out.size < 0.3, kept.size / out.size


@api("dropout: rate 0 is the identity")
def _(c):
    x = rand(4, 5)
    assert np.array_equal(tc.Dropout(0.0, dtype="float64").forward(x, training=True), x)


err("dropout: negative rate", lambda c: tc.Dropout(-0.1), "rate")
err("dropout: rate 1", lambda c: tc.Dropout(1.0), "rate")


@api("relu: negative zero and large values")
def _(c):
    x = np.array([[-0.0, 0.0, 1e308, -1e308]])
    out = tc.ReLU(dtype="float64").forward(x)
    _close(out, np.maximum(x, 0), 0)


@api("softmax: +inf in a row", expect="either")
def _(c):
    out = tc.softmax(np.array([[np.inf, 0.0, 1.0]]))
    _close(out, [[1.0, 0.0, 0.0]], 1e-12)


@api("softmax: a row of -inf gives zeros")
def _(c):
    _close(tc.softmax(np.array([[-np.inf, -np.inf]])), [[0.0, 0.0]], 0)


@api("softmax: huge float64 values")
def _(c):
    out = tc.softmax(np.array([[1e308, -1e308, 1e308]]))
    _close(out, [[0.5, 0.0, 0.5]], 1e-12)


@api("softmax: integer input", expect="either")
def _(c):
    out = tc.softmax(np.array([[1, 2, 3]]))
    e = np.exp([1.0, 2.0, 3.0])
    _close(out, [e / e.sum()], 1e-6)


@api("softmax: 3-D input")
def _(c):
    x = rand(2, 3, 4)
    e = np.exp(x - x.max(-1, keepdims=True))
    _close(tc.softmax(x), e / e.sum(-1, keepdims=True), 1e-12)


err("softmax: 0-D input", lambda c: tc.softmax(np.float64(2.0)), "dimension")
err("softmax_backward: shapes differ", lambda c: tc.softmax_backward(np.ones((2, 3)), np.ones((2, 4))), "shape")


@api("softmax_backward: matches the Jacobian")
def _(c):
    x, dy = rand(3, 4), rand(3, 4, seed=2)
    y = tc.softmax(x)
    want = y * (dy - (dy * y).sum(-1, keepdims=True))
    _close(tc.softmax_backward(y, dy), want, 1e-12)


err(
    "masked_cross_entropy: target beyond the vocabulary",
    lambda c: tc.masked_cross_entropy(np.zeros((2, 4)), np.array([1, 4])),
    "4",
)
err(
    "masked_cross_entropy: negative target",
    lambda c: tc.masked_cross_entropy(np.zeros((2, 4)), np.array([1, -2])),
    "-2",
)
err(
    "masked_cross_entropy: float targets",
    lambda c: tc.masked_cross_entropy(np.zeros((2, 4)), np.array([1.0, 2.0])),
    "target",
)
err(
    "masked_cross_entropy: rows and targets differ",
    lambda c: tc.masked_cross_entropy(np.zeros((2, 4)), np.array([1, 2, 3])),
    "target",
)
err(
    "masked_cross_entropy: negative label smoothing",
    lambda c: tc.masked_cross_entropy(np.zeros((1, 3)), np.ones(1, int), label_smoothing=-0.1),
    "label_smoothing",
)


@api("masked_cross_entropy: all padding", expect="either")
def _(c):
    loss, grad = tc.masked_cross_entropy(rand(2, 4), np.array([0, 0]))
    assert np.isfinite(loss), loss
    assert np.all(np.asarray(grad) == 0), "padding rows got a gradient"


@api("masked_cross_entropy: matches a NumPy reference")
def _(c):
    logits, targets = rand(5, 6), np.array([1, 0, 3, 5, 2])
    loss, grad = tc.masked_cross_entropy(logits, targets)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    keep = targets != 0
    want = -np.log(p[np.arange(5), targets])[keep].mean()
    _close(loss, want, 1e-10)


@api("masked_accuracy: all padding", expect="either")
def _(c):
    acc = tc.masked_accuracy(rand(2, 4), np.array([0, 0]))
    assert np.isfinite(acc) and 0 <= acc <= 1, acc


@api("padding_mask: float ids", expect="either")
def _(c):
    m = tc.padding_mask(np.array([[1.0, 0.0, 2.5]]))
    assert (
        np.asarray(m).astype(bool).ravel().tolist()[-3:] == [False, True, False]
        or np.asarray(m).astype(bool).sum() == 1
    ), m


err("warmup_learning_rate: negative scale", lambda c: tc.warmup_learning_rate(1, 8, scale=-1.0), "scale")
err("warmup_learning_rate: step 0", lambda c: tc.warmup_learning_rate(0, 8), "step")


@api("warmup_learning_rate: step 2**62")
def _(c):
    lr = tc.warmup_learning_rate(2**62, 512)
    assert np.isfinite(lr) and lr > 0, lr
    _close(lr, 512**-0.5 * (2**62) ** -0.5, 1e-9)


err("look_ahead_mask: float size", lambda c: tc.look_ahead_mask(2.5), "size")
err("look_ahead_mask: string size", lambda c: tc.look_ahead_mask("3"), "size")


@api("look_ahead_mask: numpy integer size")
def _(c):
    m = np.asarray(tc.look_ahead_mask(np.int64(3))).astype(bool)
    assert np.array_equal(m, np.triu(np.ones((3, 3), bool), 1)), m


err(
    "decoder_self_attention_mask: 3-D tokens",
    lambda c: tc.decoder_self_attention_mask(np.ones((1, 2, 3), int)),
    "tokens",
)


@api("attention: 0/1 integer mask equals the boolean mask")
def _(c):
    q, k, v = rand(2, 3, 4), rand(2, 5, 4, seed=1), rand(2, 5, 4, seed=2)
    mask = np.random.default_rng(3).integers(0, 2, (2, 3, 5))
    mask[:, :, 0] = 0
    a = tc.scaled_dot_product_attention(q, k, v, mask)[0]
    b = tc.scaled_dot_product_attention(q, k, v, mask.astype(bool))[0]
    _close(a, b, 1e-12)


@api("attention: broadcast mask matches NumPy")
def _(c):
    q, k, v = rand(2, 3, 4), rand(2, 5, 4, seed=1), rand(2, 5, 4, seed=2)
    mask = np.zeros((1, 1, 5), bool)
    mask[..., 3:] = True
    out, w = tc.scaled_dot_product_attention(q, k, v, mask)
    s = q @ k.transpose(0, 2, 1) / 2.0
    s = np.where(mask, -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    _close(out, p @ v, 1e-12)
    _close(w, p, 1e-12)


err(
    "attention: mask that does not broadcast",
    lambda c: tc.scaled_dot_product_attention(rand(2, 3, 4), rand(2, 5, 4), rand(2, 5, 4), np.zeros((3, 3), bool)),
    "mask",
)
err(
    "attention: q and k widths differ",
    lambda c: tc.scaled_dot_product_attention(rand(2, 3, 4), rand(2, 5, 5), rand(2, 5, 4)),
    "q",
)
err(
    "attention: k and v lengths differ",
    lambda c: tc.scaled_dot_product_attention(rand(2, 3, 4), rand(2, 5, 4), rand(2, 6, 4)),
    "k",
)
err("multi-head attention: width not divisible by heads", lambda c: tc.MultiHeadAttention(10, 3), "divisible")
err(
    "multi-head attention: memory of another width",
    lambda c: tc.MultiHeadAttention(8, 2).forward(np.ones((1, 3, 8), np.float32), np.ones((1, 4, 6), np.float32)),
    "memory",
)
err(
    "multi-head attention: memory of another batch",
    lambda c: tc.MultiHeadAttention(8, 2).forward(np.ones((2, 3, 8), np.float32), np.ones((3, 4, 8), np.float32)),
    "memory",
)


@api("multi-head attention: weights before any forward", expect="either")
def _(c):
    w = tc.MultiHeadAttention(8, 2).attention_weights()
    assert np.asarray(w).size == 0, f"weights before any forward: {np.asarray(w).shape}"


@api("multi-head attention: fully masked queries give zeros")
def _(c):
    mha = tc.MultiHeadAttention(8, 2, seed=1, dtype="float64")
    out = mha.forward(rand(1, 3, 8), mask=np.ones((1, 3, 3), bool))
    assert np.all(np.isfinite(out))
    bias = mha.parameters()["output.bias"].value if "output.bias" in mha.parameters() else None
    if bias is not None:
        _close(out, np.broadcast_to(bias, out.shape), 1e-12)


@api("encoder: a batch of padding only", expect="either")
def _(c):
    out = tc.Encoder(V, 8, 1, 2, 16, dropout=0.0, dtype="float64").forward(np.zeros((2, 4), int))
    assert np.all(np.isfinite(out)), "non-finite output"


@api("encoder layer: every key masked")
def _(c):
    out = tc.EncoderLayer(8, 2, 16, dropout=0.0, dtype="float64").forward(rand(1, 3, 8), mask=np.ones((1, 3, 3), bool))
    assert np.all(np.isfinite(out))


err(
    "decoder: memory of another batch",
    lambda c: tc.Decoder(V, 8, 1, 2, 16).forward(np.ones((2, 3), int), np.ones((3, 4, 8), np.float32)),
    "memory",
)
err(
    "decoder: token beyond the vocabulary",
    lambda c: tc.Decoder(V, 8, 1, 2, 16).forward(np.full((1, 3), V), np.ones((1, 4, 8), np.float32)),
    str(V),
)


@api("adam: no parameters", expect="either")
def _(c):
    tc.Adam({}).step(1e-3)


err("adam: not parameters", lambda c: tc.Adam({"w": np.ones(3)}), "Parameter")
err("adam: negative learning rate", lambda c: tc.Adam(tc.Linear(2, 2).parameters()).step(-1e-3), "learning rate")


@api("adam: the same parameter twice", expect="either")
def _(c):
    a, b = tc.Linear(3, 3, seed=1), tc.Linear(3, 3, seed=1)
    pa, pb = a.parameters()["weight"], b.parameters()["weight"]
    pa.grad[...] = 1.0
    pb.grad[...] = 1.0
    tc.Adam({"w": pa}).step(0.1)
    tc.Adam({"w1": pb, "w2": pb}).step(0.1)
    _close(pb.value, pa.value, 1e-6)


@api("adam: clipping zero gradients")
def _(c):
    lin = tc.Linear(3, 3, seed=1)
    opt = tc.Adam(lin.parameters())
    norm = opt.clip_grad_norm(1.0)
    assert np.isfinite(norm) and norm == 0, norm
    assert all(np.isfinite(p.grad).all() for p in lin.parameters().values())


@api("adam: a NaN gradient", expect="either")
def _(c):
    lin = tc.Linear(3, 3, seed=1)
    opt = tc.Adam(lin.parameters())
    lin.parameters()["weight"].grad[0, 0] = np.nan
    try:
        opt.step(1e-3)
    except (ValueError, FloatingPointError, RuntimeError):
        pass
    assert all(np.isfinite(p.value).all() for p in lin.parameters().values()), "a NaN reached the weights"


# --- 2. the Transformer -----------------------------------------------------------------------------


@api("model: logits not overwritten by the next forward")
def _(c):
    m = small()
    a = m.forward(np.ones((1, 3), int), np.ones((1, 2), int))
    keep = a.copy()
    m.forward(np.full((1, 3), 5), np.full((1, 2), 4))
    assert np.array_equal(a, keep), "the first logits changed"


@api("model: attention weights survive the model and the next forward")
def _(c):
    m = small()
    m.forward(np.ones((1, 3), int), np.ones((1, 2), int))
    w = m.attention_weights()
    keep = {k: v.copy() for k, v in w.items()}
    m.forward(np.full((1, 3), 5), np.full((1, 2), 4))
    del m
    churn()
    for k, v in w.items():
        assert np.array_equal(v, keep[k]), f"{k} changed"


@api("model: greedy output not overwritten by the next decode")
def _(c):
    m = small(seed=3)
    a = m.greedy_decode(np.ones((1, 3), int), 1, 2, 5)
    keep = a.copy()
    m.greedy_decode(np.full((2, 4), 7), 1, 2, 6)
    assert np.array_equal(a, keep)


@api("model: parameter views outlive the model")
def _(c):
    m = small()
    v = m.parameters()["output.weight"].value
    keep = v.copy()
    del m
    churn()
    assert np.array_equal(v, keep), "the view changed after the model was freed"


@api("model: train_step on a batch of padding targets", expect="either")
def _(c):
    m = small()
    src, tgt_in, tgt_out = batch()
    m.train_step(src, tgt_in, tgt_out)
    before = {n: p.value.copy() for n, p in m.parameters().items()}
    step = m.step
    m.train_step(src, tgt_in, np.zeros_like(tgt_out))
    assert m.step == step, f"a step with no target token counted (step {step} -> {m.step})"
    for n, p in m.parameters().items():
        assert np.array_equal(p.value, before[n]), f"a step with no target token moved {n}"


@api("model: evaluate on a batch of padding targets", expect="either")
def _(c):
    m = small()
    src, tgt_in, tgt_out = batch()
    loss, acc = m.evaluate(src, tgt_in, np.zeros_like(tgt_out))
    assert m.last_token_count == 0, m.last_token_count
    assert np.isfinite(loss) or np.isnan(loss), loss


err(
    "model: tgt_in and tgt_out shapes differ",
    lambda c: small().train_step(np.ones((2, 4), int), np.ones((2, 3), int), np.ones((2, 2), int)),
    "tgt_out",
)
err(
    "model: target id beyond the vocabulary",
    lambda c: small().train_step(np.ones((2, 4), int), np.ones((2, 3), int), np.full((2, 3), V)),
    str(V),
)
err("model: negative source id", lambda c: small().forward(np.array([[1, -3]]), np.ones((1, 2), int)), "-3")
err("model: 3-D ids", lambda c: small().forward(np.ones((1, 2, 3), int), np.ones((1, 2), int)), "src")
err(
    "model: source and target batches differ",
    lambda c: small().forward(np.ones((2, 3), int), np.ones((3, 2), int)),
    "batch",
)


err("model: backward before forward", lambda c: small().backward(np.ones((1, 2, V))), "forward")


@api("model: float32 dlogits into a float64 model", expect="either")
def _(c):
    a, b = small(seed=1), small(seed=1)
    src, tgt_in, _ = batch()
    d = rand(2, 3, V)
    a.forward(src, tgt_in, training=True)
    b.forward(src, tgt_in, training=True)
    a.backward(d)
    b.backward(d.astype(np.float32))
    for n, p in a.parameters().items():
        _close(b.parameters()[n].grad, p.grad, 1e-5)


@api("model: int32 ids give the same loss as int64")
def _(c):
    src, tgt_in, tgt_out = batch()
    a = small(seed=2).evaluate(src, tgt_in, tgt_out)
    b = small(seed=2).evaluate(src.astype(np.int32), tgt_in.astype(np.int32), tgt_out.astype(np.int32))
    _close(a, b, 1e-12)


@api("model: strided ids give the same loss as contiguous ones")
def _(c):
    src, tgt_in, tgt_out = batch(b=4)
    a = small(seed=2).evaluate(src[::2], tgt_in[::2], tgt_out[::2])
    b = small(seed=2).evaluate(
        np.ascontiguousarray(src[::2]), np.ascontiguousarray(tgt_in[::2]), np.ascontiguousarray(tgt_out[::2])
    )
    _close(a, b, 1e-12)


@api("model: boolean ids", expect="either")
def _(c):
    m = small()
    out = m.forward(np.array([[True, True]]), np.array([[True]]))
    _close(out, m.forward(np.array([[1, 1]]), np.array([[1]])), 1e-12)


@api("model: training flag that is not a bool", expect="either")
def _(c):
    m = small(dropout=0.5)
    a = m.forward(np.ones((1, 3), int), np.ones((1, 2), int), training="no")
    b = m.forward(np.ones((1, 3), int), np.ones((1, 2), int), training=False)
    _close(a, b, 1e-12)  # "no" must not silently mean training


err("model: pre_norm given as a string", lambda c: small(pre_norm="no"), "pre_norm")
err("model: share_embeddings given as a string", lambda c: small(share_embeddings="false"), "share_embeddings")


@api("model: decoding a source of padding only", expect="either")
def _(c):
    out = small(seed=1).greedy_decode(np.zeros((2, 3), int), 1, 2, 4)
    assert np.all(out >= 0) and np.all(out < V)


err("model: decoding float ids", lambda c: small().greedy_decode(np.ones((1, 3)), 1, 2, 4), "src")


@api("model: beam 1 with length penalty 0 equals greedy")
def _(c):
    m = small(seed=5)
    src = np.random.default_rng(1).integers(1, V, (3, 4))
    greedy = m.greedy_decode(src, 1, 2, 6)
    beams = m.beam_search(src, 1, 2, 6, beam_size=1, length_penalty=0.0)
    for row, hyps in zip(greedy, beams):
        want = [int(t) for t in row if t != 0]
        assert [int(t) for t in hyps[0][0]] == want, (hyps[0][0], want)


@api("model: beam wider than the vocabulary")
def _(c):
    hyps = small(seed=5).beam_search(np.ones((1, 3), int), 1, 2, 4, beam_size=50, n_best=3)
    for tokens, score, logp, finished in hyps[0]:
        assert all(0 < t < V for t in tokens), tokens
        assert np.isfinite(score) and np.isfinite(logp)


err("model: n_best 0", lambda c: small().beam_search(np.ones((1, 3), int), 1, 2, 4, n_best=0), "n_best")


@api("model: decoding never emits padding")
def _(c):
    m = small(seed=9)
    m.parameters()["output.bias"].value[0] = 1e3  # padding is by far the most likely token
    out = m.greedy_decode(np.ones((2, 3), int), 1, 2, 5)
    for row in out.tolist():  # padding only after the end token, never generated
        if 0 in row:
            k = row.index(0)
            assert k > 0 and row[k - 1] == 2 and not any(row[k:]), row


err("model: negative step", lambda c: setattr(small(), "step", -1), "step")


def _at_last_step(c):
    m = small()
    src, tgt_in, tgt_out = batch()
    m.step = 2**63 - 1
    return m.train_step(src, tgt_in, tgt_out)


def _adam_at_last_step(c):
    adam = tc.Adam(tc.Linear(2, 2).parameters())
    adam.step_count = 2**63 - 1
    return adam.step(1e-3)


err("model: train_step at step 2**63 - 1", _at_last_step, "maximum")
err("adam: step at step_count 2**63 - 1", _adam_at_last_step, "maximum")
err(
    "model: learning rate of the step after 2**63 - 1",
    lambda c: (lambda m: (setattr(m, "step", 2**63 - 1), m.learning_rate()))(small()),
    "maximum",
)
err("model: float step", lambda c: setattr(small(), "step", 2.5), "step")
err("model: negative dropout_calls", lambda c: setattr(small(), "dropout_calls", -1), "dropout_calls")
err(
    "model: total_steps equal to warmup",
    lambda c: small().configure_optimizer(warmup=10, total_steps=10),
    "total_steps",
)
err("model: warmup given as a string", lambda c: small().configure_optimizer(warmup="10"), "warmup")
err("model: warmup True", lambda c: small().configure_optimizer(warmup=True), "warmup")
err("model: dtype float16", lambda c: tc.Transformer(V, V, d_model=8, n_heads=2, dtype="float16"), "dtype")
err("model: layout nonsense", lambda c: tc.Transformer(V, V, d_model=8, n_heads=2, layout="spiral"), "layout")
err("model: vocabulary of 1", lambda c: tc.Transformer(1, V, d_model=8, n_heads=2), "src_vocab_size")
err(
    "model: from_config with an unknown key",
    lambda c: tc.Transformer.from_config(dict(small().config, colour="red")),
    "colour",
)
err(
    "model: from_config with a string size",
    lambda c: tc.Transformer.from_config(dict(small().config, d_model="8")),
    "d_model",
)
err("model: pickled", lambda c: pickle.dumps(small()), "pickle")


@api("model: deep copy", expect="either")
def _(c):
    m = small(seed=1)
    m2 = copy.deepcopy(m)
    m2.parameters()["output.bias"].value[...] = 5.0
    assert not np.all(m.parameters()["output.bias"].value == 5.0), "the copy shares the original's weights"


@api("model: learning rate at step 2**62")
def _(c):
    lr = small().learning_rate(2**62)
    assert np.isfinite(lr) and lr >= 0, lr


err("set_num_threads: 0", lambda c: tc.set_num_threads(0), "n")
err("set_num_threads: True", lambda c: tc.set_num_threads(True), "n")
err("positional_encoding: bad layout", lambda c: tc.positional_encoding(4, 4, layout="spiral"), "layout")


@api("positional_encoding: odd depth follows the formula")
def _(c):
    pe = np.asarray(tc.positional_encoding(5, 3), dtype=np.float64)
    pos = np.arange(5)[:, None]
    i = np.arange(3)[None, :]
    angle = pos / np.power(10000.0, (2 * (i // 2)) / 3.0)
    want = np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
    _close(pe, want, 1e-6)


@api("threads: one translator from two threads")
def _(c):
    t = translator(c)
    sentences = ["The cat and the dog.", "The tree and the bird.", "The car and the book."]
    want = [t.translate(s) for s in sentences]
    got: Dict[int, Any] = {}
    errors: List[str] = []

    def work(k: int) -> None:
        for j in range(20):
            try:
                got[(k, j)] = t.translate(sentences[(k + j) % 3]), (k + j) % 3
            except RuntimeError as exc:
                if "in use" not in str(exc):
                    errors.append(str(exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    [th.start() for th in threads]
    [th.join() for th in threads]
    assert not errors, errors[0]
    for text, i in got.values():
        assert text == want[i], (text, want[i])


@api("threads: one tokenizer from four threads")
def _(c):
    tok = rtok()
    want = tok.encode("a b c d e f")
    bad: List[Any] = []

    def work() -> None:
        for _ in range(200):
            if tok.encode("a b c d e f") != want:
                bad.append(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    [th.start() for th in threads]
    [th.join() for th in threads]
    assert not bad


@api("threads: reading parameters while another thread trains")
def _(c):
    m = small(dtype="float32")
    src, tgt_in, tgt_out = batch()
    stop = threading.Event()

    def train() -> None:
        for _ in range(200):
            m.train_step(src, tgt_in, tgt_out)
        stop.set()

    th = threading.Thread(target=train)
    th.start()
    while not stop.is_set():
        for p in m.parameters().values():
            float(p.value.sum())
    th.join()
    assert m.step == 200 and not m.nonfinite_parameters()


@api("threads: set_num_threads while another thread works")
def _(c):
    lin = tc.Linear(64, 64, seed=1, dtype="float64")
    x = rand(256, 64)
    want = _linear_ref(lin, x)
    done = threading.Event()
    out: List[Any] = []

    def work() -> None:
        for _ in range(30):
            out.append(lin.forward(x).copy())
        done.set()

    th = threading.Thread(target=work)
    th.start()
    while not done.is_set():
        tc.set_num_threads(2)
        tc.set_num_threads(1)
    th.join()
    for o in out:
        _close(o, want, 1e-12)


@api("memory: TRANSFORMER_CPP_MEMORY_LIMIT set by the program")
def _(c):
    os.environ["TRANSFORMER_CPP_MEMORY_LIMIT"] = "100000"
    e = assert_raises(lambda: tc.Linear(1000, 1000), "a 4 MB layer under a 100 KB limit")
    assert "memory available" in str(e), e
    tc.Linear(10, 10).forward(np.ones((2, 10), np.float32))


@api("memory: a layer larger than the address-space limit", expect="error", match=("memory",))
def _(c):
    return tc.Linear(30000, 30000)  # 3.6 GB of weights (7.2 GB with gradients) under a 2 GB limit


@api("memory: a model larger than the address-space limit", expect="error", match=("memory",))
def _(c):
    return tc.Transformer(32000, 32000, d_model=1024, n_layers=6, n_heads=16, d_ff=4096)


@api("memory: a forward pass larger than the address-space limit", expect="error", match=("memory",))
def _(c):
    m = tc.Transformer(50, 50, d_model=64, n_layers=1, n_heads=4, d_ff=64)
    return m.forward(np.ones((64, 2000), int), np.ones((64, 2000), int))  # ~8 GB of attention weights


@api("memory: a positional table larger than the address-space limit", expect="error", match=("memory",))
def _(c):
    return tc.positional_encoding(400_000, 1024, dtype="float64")  # 3.2 GB


@api("memory: 1024 threads under the address-space limit", expect="either", match=("threads",))
def _(c):
    tc.set_num_threads(1024)
    lin = tc.Linear(256, 256, seed=1)
    x = np.ones((4096, 256), np.float32)
    _close(lin.forward(x), _linear_ref(lin, x), 1e-3)


# --- 3. tokenizer and text -------------------------------------------------------------------------

CORPUS = ["the cat sat on the mat", "¿qué tal? ¡muy bien!", "árbol y pájaro", "a dog, a house; water."] * 3


def ctok() -> Any:
    return tc.SubwordTokenizer.build_from_corpus(CORPUS, 300, min_frequency=1)


@api("tokenizer: corpus from a generator")
def _(c):
    tok = tc.SubwordTokenizer.build_from_corpus((s for s in CORPUS), 300, min_frequency=1)
    assert tok.decode(tok.encode(CORPUS[1])) == CORPUS[1]


err("tokenizer: corpus of whitespace", lambda c: tc.SubwordTokenizer.build_from_corpus([" ", "\t\n", ""], 300), "empty")
err("tokenizer: corpus of bytes", lambda c: tc.SubwordTokenizer.build_from_corpus([b"abc"], 300), "str")
err(
    "tokenizer: float vocabulary size",
    lambda c: tc.SubwordTokenizer.build_from_corpus(CORPUS, 300.0),
    "target_vocab_size",
)
err(
    "tokenizer: lowercase given as a string",
    lambda c: tc.SubwordTokenizer.build_from_corpus(CORPUS, 300, lowercase="no"),
    "lowercase",
)
err(
    "tokenizer: add_special_tokens given as a string",
    lambda c: ctok().encode("the cat", add_special_tokens="no"),
    "add_special_tokens",
)
err(
    "tokenizer: skip_special_tokens given as a string",
    lambda c: ctok().decode([1, 5, 2], skip_special_tokens="no"),
    "skip_special_tokens",
)
err(
    "tokenizer: min_frequency 0",
    lambda c: tc.SubwordTokenizer.build_from_corpus(CORPUS, 300, min_frequency=0),
    "min_frequency",
)


@api("tokenizer: numpy vocabulary size")
def _(c):
    tok = tc.SubwordTokenizer.build_from_corpus(CORPUS, np.int64(300), min_frequency=1)
    assert tok.vocab_size <= 300


@api("tokenizer: control characters, NUL, emoji, right-to-left text round-trip")
def _(c):
    tok = ctok()
    for text in (
        "a\x00b",
        "tab\there",
        "bell\x07",
        "emoji 😀🇪🇸",
        "עברית ومرحبا",
        "zero\u200bwidth",
        "\ufeffbom",
        "  two  spaces ",
        "e\u0301 combining",
    ):
        import unicodedata

        want = unicodedata.normalize("NFC", text)
        assert tok.decode(tok.encode(text)) == want, (text, tok.decode(tok.encode(text)))


@api("tokenizer: lowercase with characters that change length")
def _(c):
    tok = tc.SubwordTokenizer.build_from_corpus(CORPUS, 300, min_frequency=1, lowercase=True)
    import unicodedata

    for text in ("İstanbul ẞ STRASSE", "ΣΊΣΥΦΟΣ"):
        got = tok.decode(tok.encode(text))  # lower case (final sigma or not), the same letters
        assert got == got.lower() and got.casefold() == unicodedata.normalize("NFC", text).casefold(), (text, got)


def _pickled(tok: Any) -> Any:
    return pickle.loads(pickle.dumps(tok))


@api("tokenizer: pickled keeps text that spells a special token ordinary", expect="either")
def _(c):
    tok = ctok()
    again = _pickled(tok)
    for text in ("a <end> b", "<pad>", "<start><unk>"):
        ids = again.encode(text)
        assert ids == tok.encode(text), (text, ids, tok.encode(text))
        assert not set(ids[1:-1]) & tok.special_ids, (text, ids)


@api("tokenizer: deep copy keeps text that spells a special token ordinary", expect="either")
def _(c):
    tok = ctok()
    again = copy.deepcopy(tok)
    ids = again.encode("x <end> y")
    assert ids == tok.encode("x <end> y") and not set(ids[1:-1]) & tok.special_ids, ids


err("tokenizer: decode a 2-D array", lambda c: ctok().decode(np.ones((2, 2), int)), "1-D")
err("tokenizer: decode floats", lambda c: ctok().decode(np.array([1.0, 5.0])), "integer")
err("tokenizer: decode booleans", lambda c: ctok().decode([True, 5]), "int")
err("tokenizer: decode id equal to vocab_size", lambda c: (lambda t: t.decode([5, t.vocab_size]))(ctok()), "range")
err("tokenizer: decode a string", lambda c: ctok().decode("1 2 3"), "string")


@api("tokenizer: decode uint64 and int8 arrays")
def _(c):
    tok = ctok()
    ids = tok.encode("the cat")
    assert tok.decode(np.array(ids, np.uint64)) == "the cat"
    small_ids = [i for i in ids if i < 128]
    assert tok.decode(np.array(small_ids, np.int8)) == tok.decode(small_ids)


@api("tokenizer: decode_batch of ragged lists and of nothing")
def _(c):
    tok = ctok()
    a, b = tok.encode("the cat"), tok.encode("¿qué tal?")
    assert tok.decode_batch([a, b, []]) == ["the cat", "¿qué tal?", ""]
    assert tok.decode_batch([]) == []


err(
    "tokenizer: from_str with a damaged model",
    lambda c: tc.SubwordTokenizer.from_str(json.dumps(dict(json.loads(ctok().to_str()), tokenizer={"model": 5}))),
    "damaged",
)
err(
    "tokenizer: from_str of another version",
    lambda c: tc.SubwordTokenizer.from_str(json.dumps(dict(json.loads(ctok().to_str()), version=99))),
    "version",
)
err("tokenizer: from_str of bytes", lambda c: tc.SubwordTokenizer.from_str(ctok().to_str().encode()), "str")
err("tokenizer: from_str of JSON null", lambda c: tc.SubwordTokenizer.from_str("null"), "SubwordTokenizer")


def _swapped_specials(c):
    doc = json.loads(ctok().to_str())
    vocab = doc["tokenizer"]["model"]["vocab"]
    vocab["<end>"], vocab["<start>"] = vocab["<start>"], vocab["<end>"]
    for added in doc["tokenizer"].get("added_tokens", []):
        if added["content"] == "<end>":
            added["id"] = 1
        elif added["content"] == "<start>":
            added["id"] = 2
    return tc.SubwordTokenizer.from_str(json.dumps(doc))


err("tokenizer: from_str with special ids swapped", _swapped_specials, "<start>")
err(
    "tokenizer: load a directory",
    lambda c: tc.SubwordTokenizer.load(c.work),
    "directory",
    note="the message must not claim that a directory does not exist",
)


def _load_bytes(c, payload: bytes):
    (c.work / "tok.json").write_bytes(payload)
    return tc.SubwordTokenizer.load(c.work / "tok.json")


err("tokenizer: load a binary file", lambda c: _load_bytes(c, b"\x00\xff\xfe" * 100), "tok.json")
err("tokenizer: load an empty file", lambda c: _load_bytes(c, b""), "tok.json")
err(
    "tokenizer: load a 10 GB sparse file",
    lambda c: tc.SubwordTokenizer.load(sparse(c.work / "t.json", 10 << 30)),
    "bytes",
)


@api("tokenizer: save onto a directory leaves nothing behind", expect="either")
def _(c):
    target = c.work / "dir"
    target.mkdir()
    try:
        ctok().save(target)
    except OSError:
        left = [p.name for p in c.work.iterdir() if p.name != "dir" and not p.name.startswith("child-output")]
        assert not left, f"a failed save left {left} behind"
        raise
    raise AssertionError("saving onto a directory succeeded")


@api("tokenizer: saved from two threads at once")
def _(c):
    tok = ctok()
    path = c.work / "t.json"
    errors: List[BaseException] = []

    def save() -> None:
        for _ in range(30):
            try:
                tok.save(path)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

    threads = [threading.Thread(target=save) for _ in range(3)]
    [th.start() for th in threads]
    [th.join() for th in threads]
    assert not errors, f"{type(errors[0]).__name__}: {errors[0]}"
    assert tc.SubwordTokenizer.load(path) == tok


@api("tokenizer: a 1 MB sentence")
def _(c):
    tok = ctok()
    text = "the cat sat on the mat " * 45_000
    ids = tok.encode(text)
    assert tok.decode(ids) == text


@api("tokenizer: encode_batch from a generator")
def _(c):
    tok = ctok()
    assert tok.encode_batch(s for s in ["the cat", "a dog"]) == [tok.encode("the cat"), tok.encode("a dog")]


err("tokenizer: encode_batch with a bytes item", lambda c: ctok().encode_batch(["ok", b"no"]), "text 1")
err("tokenizer: encode None", lambda c: ctok().encode(None), "str")
err("tokenizer: token_to_id of an int", lambda c: ctok().token_to_id(5), "str")
err("tokenizer: id_to_token of -1", lambda c: ctok().id_to_token(-1), "-1")
err(
    "tokenizer: a text with a surrogate pair written as two code points",
    lambda c: ctok().encode("smile \ud83d\ude00"),
    "surrogate",
)
err("tokenizer: constructed from garbage", lambda c: tc.SubwordTokenizer(object()), "SubwordTokenizer")


@api("tokenizer: compared with another type")
def _(c):
    assert (ctok() == "tokenizer") is False


err("text: clean None", lambda c: tc.clean_sentence(None), "str")
err("text: clean bytes", lambda c: tc.clean_sentence(b"Hello."), "str")
err("text: language None", lambda c: tc.clean_sentence("Hello.", None), "lang")
err("text: unknown language", lambda c: tc.clean_sentence("Hello.", "klingon"), "klingon")
err("text: corpus holding an int", lambda c: tc.clean_corpus(["a.", 5]), "sentence 1")
err("text: corpus that is one string", lambda c: tc.clean_corpus("Hello there."), "string")


@api("text: a 2 MB sentence")
def _(c):
    out = tc.clean_sentence("Mr. Smith went to Washington. " * 70_000)
    assert out.count("Mr.") == 70_000


@api("text: only dots, one dot, dots and spaces")
def _(c):
    assert tc.clean_sentence("....") == "...."
    assert tc.clean_sentence(".") == "."
    assert tc.clean_sentence(" . . ") in (".", ". .")


@api("text: NUL and line separators")
def _(c):
    assert tc.clean_sentence("a\x00b") == "a\x00b"
    assert tc.clean_sentence("one\u2028two\u2029three\x85four") == "one two three four"


@api("text: cleaning twice changes nothing")
def _(c):
    for s in (
        "Hello.world , he said. then left.",
        "U.S.A. is big. and so.",
        "x .. y . z",
        "a. b. C. d.",
        "He said no. then left. Then",
        "No. 5 is here.",
        "(e.g. this). and that.",
        "¿Sí. no.?",
        "3.14. pi",
        ".5 . .5",
        "etc.. etc...",
        "A.B.C.d.e. f",
    ):
        once = tc.clean_sentence(s)
        assert tc.clean_sentence(once) == once, (s, once, tc.clean_sentence(once))


@api("text: corpus from a generator")
def _(c):
    assert tc.clean_corpus(s for s in ["Hello.world", "Mr. X."]) == ["Helloworld", "Mr. X."]


# --- 4. data: loading, splitting, encoding, batching ------------------------------------------------


def _load(c, payload: bytes, name: str = "pairs.txt", **kw: Any) -> Any:
    path = c.work / name
    path.write_bytes(payload)
    return tc.load_tatoeba(path, **kw)


PAIRS = [f"The cat number {i}.\tEl gato número {i}.\tCC-BY 2.0 (France) #{i}" for i in range(12)]


@api("data: lines ending in a lone carriage return", expect="either")
def _(c):
    pairs = _load(c, "\r".join(PAIRS).encode() + b"\r")
    assert len(pairs) == 12, f"{len(pairs)} pairs read from 12 lines"
    assert all("\r" not in s for s in pairs.spanish + pairs.english)


@api("data: Windows line endings")
def _(c):
    pairs = _load(c, "\r\n".join(PAIRS).encode() + b"\r\n")
    assert len(pairs) == 12 and all("\r" not in a for a in pairs.attributions)


@api("data: a byte-order mark and no final newline")
def _(c):
    pairs = _load(c, b"\xef\xbb\xbf" + "\n".join(PAIRS).encode())
    assert len(pairs) == 12 and pairs.english[0] == "The cat number 0."


@api("data: NUL bytes inside a line")
def _(c):
    pairs = _load(c, "\n".join(["The\x00cat.\tEl\x00gato."] + PAIRS).encode())
    assert len(pairs) == 13 and pairs.english[0] == "The\x00cat."


@api("data: every line is counted")
def _(c):
    lines = PAIRS + ["", "   ", "no tab here", "\tonly spanish", "only english\t", "\t", "a\tb\tc\td"]
    pairs = _load(c, "\n".join(lines).encode())
    s = pairs.stats
    assert s.read == len(lines) and s.kept == 13, (s.read, s.kept)
    assert s.kept + s.skipped == s.read, s


@api("data: a 5 MB line")
def _(c):
    pairs = _load(c, ("x " * 2_500_000 + "\ty\n").encode() + "\n".join(PAIRS).encode())
    assert len(pairs) == 13


err("data: a 10 GB sparse file", lambda c: tc.load_tatoeba(sparse(c.work / "huge.txt", 10 << 30)), "longer than")


@api("data: a zip whose member is 200 MB of zeros", expect="error", match=("longer than",))
def _(c):
    path = c.work / "bomb.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("spa.txt", "w") as f:
            block = bytes(1 << 20)
            for _ in range(200):
                f.write(block)
    return tc.load_tatoeba(path)


@api("data: a path given as bytes", expect="either")
def _(c):
    path = c.work / "p.txt"
    path.write_bytes("\n".join(PAIRS).encode())
    assert len(tc.load_tatoeba(os.fsencode(path))) == 12


err("data: UTF-16 file", lambda c: _load(c, "\n".join(PAIRS).encode("utf-16")), "UTF-16")
err("data: empty file", lambda c: _load(c, b""), "no valid")
err("data: /dev/null", lambda c: tc.load_tatoeba("/dev/null"), "not a regular file")
err("data: a directory", lambda c: tc.load_tatoeba(c.work), "directory")


@api("data: a named pipe", expect="error", match=("not a regular file",), timeout=30)
def _(c):
    fifo = c.work / "fifo.txt"
    os.mkfifo(fifo)
    return tc.load_tatoeba(fifo)


def _zip(c, members: Dict[str, bytes], name: str = "spa-eng.zip") -> Path:
    path = c.work / name
    with zipfile.ZipFile(path, "w") as z:
        for member, payload in members.items():
            z.writestr(member, payload)
    return path


err(
    "data: zip with two text files",
    lambda c: tc.load_tatoeba(_zip(c, {"a.txt": b"x\ty\n", "b.txt": b"x\ty\n"})),
    "cannot tell",
)
err("data: empty zip", lambda c: tc.load_tatoeba(_zip(c, {})), "no files")
err("data: broken zip with a .zip name", lambda c: _load(c, b"PK\x03\x04 broken", name="x.zip"), "zip")
err(
    "data: gzip file",
    lambda c: _load(c, __import__("gzip").compress("\n".join(PAIRS).encode()), name="spa.txt.gz"),
    "not valid",
)


@api("data: zip with spa.txt and an _about.txt")
def _(c):
    path = _zip(c, {"spa-eng/_about.txt": b"about", "spa-eng/spa.txt": "\n".join(PAIRS).encode()})
    assert len(tc.load_tatoeba(path)) == 12


err("data: num_samples 0", lambda c: tc.load_tatoeba(c.data, 0), "num_samples")
err("data: num_samples 2.5", lambda c: tc.load_tatoeba(c.data, 2.5), "num_samples")
err("data: negative seed", lambda c: tc.load_tatoeba(c.data, 5, seed=-1), "seed")
err("data: unknown encoding", lambda c: tc.load_tatoeba(c.data, encoding="klingon"), "klingon")
err("data: unknown errors policy", lambda c: tc.load_tatoeba(c.data, errors="ignore"), "errors")
err("data: unknown sampling", lambda c: tc.load_tatoeba(c.data, 5, sampling="best"), "sampling")


@api("data: numpy num_samples, random and first")
def _(c):
    a = tc.load_tatoeba(c.data, np.int64(7))
    b = tc.load_tatoeba(c.data, 7, sampling="first")
    assert len(a) == len(b) == 7
    assert b.english == tc.load_tatoeba(c.data).english[:7]


@api("data: a file name that is not UTF-8")
def _(c):
    name = os.fsdecode(b"caf\xe9.txt")
    (c.work / name).write_bytes("\n".join(PAIRS).encode())
    assert len(tc.load_tatoeba(c.work / name)) == 12


err("split_by_source: non-string sources", lambda c: tc.split_by_source([1, 2, 3], ["a", "b", "c"]), "source")
err("split_by_source: lists of different lengths", lambda c: tc.split_by_source(["a", "b"], ["a"]), "targets")
err("split_by_source: negative seed", lambda c: tc.split_by_source(["a", "b", "c"], ["x", "y", "z"], seed=-1), "seed")
err(
    "split_by_source: NaN fraction",
    lambda c: tc.split_by_source(["a", "b"], ["x", "y"], float("nan")),
    "valid_fraction",
)


@api("split_by_source: empty lists", expect="either")
def _(c):
    s = tc.split_by_source([], [])
    assert len(s.train) == len(s.valid) == len(s.test) == 0


@api("split_by_source: no source or reference crosses parts")
def _(c):
    rng = np.random.default_rng(0)
    src = [
        f"Sentence {int(k)}." if rng.random() < 0.5 else f"  SENTENCE   {int(k)}. " for k in rng.integers(0, 40, 400)
    ]
    tgt = [f"Frase {int(k)}." for k in rng.integers(0, 60, 400)]
    s = tc.split_by_source(src, tgt, 0.2, 0.2, seed=3)
    key = lambda t: " ".join(t.casefold().split())  # noqa: E731
    parts = [{key(src[i]) for i in p} for p in (s.train, s.valid, s.test)]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2]), "a source in two parts"
    refs = {key(tgt[i]) for i in np.concatenate([s.valid, s.test])}
    assert not refs & {key(tgt[i]) for i in s.train}, "a reference is a training target"
    assert len(s.train) + len(s.valid) + len(s.test) + s.dropped == 400


err("train_val_test_split: float n", lambda c: tc.train_val_test_split(10.0), "float")
err("train_val_test_split: negative seed", lambda c: tc.train_val_test_split(10, seed=-4), "seed")


@api("train_val_test_split: an array keeps its rows")
def _(c):
    items = np.arange(20) * 10
    a, b, t = tc.train_val_test_split(items, 0.2, 0.1, seed=1)
    assert sorted(np.concatenate([a, b, t]).tolist()) == items.tolist()


err("encode_pairs: strings instead of lists", lambda c: tc.encode_pairs("abc", "def", rtok(), rtok(), None), "string")
err("encode_pairs: max_length 1", lambda c: tc.encode_pairs(["a"], ["a"], rtok(), rtok(), 1), "max_length")
err("encode_pairs: max_length 3.0", lambda c: tc.encode_pairs(["a"], ["a"], rtok(), rtok(), 3.0), "max_length")
err(
    "encode_pairs: lists of different lengths",
    lambda c: tc.encode_pairs(["a", "b"], ["a"], rtok(), rtok(), None),
    "target",
)


class _FakeTok:
    pad_id = 5

    def encode_batch(self, texts, add_special_tokens=True):
        return [[1, 2] for _ in texts]


err(
    "encode_pairs: a tokenizer whose padding id is not 0",
    lambda c: tc.encode_pairs(["a"], ["b"], _FakeTok(), rtok(), None),
    "pad_id",
)


@api("encode_pairs: empty sentences")
def _(c):
    tok = rtok()
    enc = tc.encode_pairs(["", "a"], ["", "b"], tok, tok, None)
    assert len(enc) == 2 and enc.src_lengths.min() >= 2 and enc.tgt_lengths.min() >= 2
    assert enc.src[0, 0] == tok.start_id and tok.decode(enc.src[0]) == "" and tok.decode(enc.src[1]) == "a"


def _encoded(n: int = 50) -> Any:
    from toy_task import reversal_pairs

    tok = rtok()
    src, tgt = reversal_pairs(n, seed=2)
    return tc.encode_pairs(src, tgt, tok, tok, None)


@api("batches: a token budget below the longest pair")
def _(c):
    enc = _encoded()
    seen = []
    for b in tc.batches(enc, max_tokens=1):
        assert len(b) == 1
        seen.extend(b.indices.tolist())
    assert sorted(seen) == list(range(len(enc)))


@api("batches: bucketed batches cover every pair once")
def _(c):
    enc = _encoded(101)
    seen = [i for b in tc.batches(enc, 7, bucket_by_length=True, bucket_pool=2, epoch=3) for i in b.indices.tolist()]
    assert sorted(seen) == list(range(101))
    for b in tc.batches(enc, 7, bucket_by_length=True):
        assert b.tgt_in.shape == b.tgt_out.shape and (b.src[:, 0] == 1).all()


err("batches: float batch_size", lambda c: list(tc.batches(_encoded(), 4.0)), "batch_size")
err("batches: negative max_tokens", lambda c: list(tc.batches(_encoded(), max_tokens=-1)), "max_tokens")
err(
    "batches: bucket_pool 0",
    lambda c: list(tc.batches(_encoded(), bucket_by_length=True, bucket_pool=0)),
    "bucket_pool",
)
err("batches: a list instead of EncodedPairs", lambda c: list(tc.batches([1, 2, 3], 2)), "EncodedPairs")
err("batches: shuffle given as a string", lambda c: list(tc.batches(_encoded(), 4, shuffle="no")), "shuffle")
err(
    "batches: drop_remainder given as a string",
    lambda c: list(tc.batches(_encoded(), 4, drop_remainder="no")),
    "drop_remainder",
)
err("batches: negative seed", lambda c: list(tc.batches(_encoded(), 4, seed=-1)), "seed")
err("num_batches: negative count", lambda c: td.num_batches(-1, 2), "-1")
err("length_limit: coverage 0", lambda c: td.length_limit([1, 2, 3], 0), "coverage")
err("length_limit: NaN coverage", lambda c: td.length_limit([1, 2, 3], float("nan")), "coverage")
err("length_percentiles: no lengths", lambda c: td.length_percentiles([]), "no lengths")
err("TatoebaPairs: columns of different lengths", lambda c: tc.TatoebaPairs(["a"], ["b", "c"], [""]), "same length")


# --- 5. training ------------------------------------------------------------------------------------


def _trainer(c, config: Any = None, ckpt: bool = False, n: int = 40, **kw: Any) -> Any:
    from toy_task import reversal_pairs, tiny_model

    tok = rtok()
    src, tgt = reversal_pairs(n, seed=1)
    enc = tc.encode_pairs(src, tgt, tok, tok, None)
    model = tiny_model(tok, d_model=16)
    cfg = config or tc.TrainConfig(epochs=1, batch_size=8, warmup=10, progress=False, val_bleu_sentences=0)
    return tc.Trainer(
        model,
        enc,
        kw.pop("valid", None),
        cfg,
        src_tokenizer=tok,
        tgt_tokenizer=tok,
        checkpoint_dir=(c.work / "run") if ckpt else None,
        **kw,
    )


err("TrainConfig: float epochs", lambda c: tc.TrainConfig(epochs=2.0), "epochs")
err(
    "TrainConfig: from_dict with an unknown key",
    lambda c: tc.TrainConfig.from_dict({"epochs": 1, "colour": 2}),
    "colour",
)
err("TrainConfig: from_dict(None)", lambda c: tc.TrainConfig.from_dict(None), "TrainConfig")
err("TrainConfig: progress given as a string", lambda c: tc.TrainConfig(progress="no"), "progress")


@api("TrainConfig: decay with a fixed learning rate", expect="either")
def _(c):
    t = _trainer(
        c,
        tc.TrainConfig(
            epochs=2, batch_size=8, fixed_lr=1e-3, decay=True, progress=False, val_bleu_sentences=0, log_every=1
        ),
    )
    t.fit()
    lrs = t.history["batch"]["lr"]
    assert len(lrs) == 10 and all(a > b for a, b in zip(lrs, lrs[1:])), f"decay=True was ignored: {lrs}"


err(
    "TrainConfig: drop_remainder with a token budget",
    lambda c: tc.TrainConfig(max_tokens=500, drop_remainder=True),
    "drop_remainder",
)
err(
    "TrainConfig: bucket_by_length with a token budget",
    lambda c: tc.TrainConfig(max_tokens=500, bucket_by_length=True),
    "bucket_by_length",
)
err("Transformer: precision bf16 with float64", lambda c: small(precision="bf16"), "precision", "float64")
err("Transformer: precision 'BF16'", lambda c: small(dtype="float32", precision="BF16"), "precision")


@api("Transformer: bf16 training with a NaN weight", expect="error", match=("output.bias",))
def _(c):
    m = small(dtype="float32", precision="bf16")
    m.parameters()["output.bias"].value[0] = np.nan
    m.train_step(*batch())


err(
    "TrainConfig: fixed_lr set to NaN after construction",
    lambda c: setattr(tc.TrainConfig(), "fixed_lr", float("nan")),
    "fixed_lr",
)
err(
    "TrainConfig: max_tokens set after drop_remainder",
    lambda c: setattr(tc.TrainConfig(drop_remainder=True), "max_tokens", 500),
    "drop_remainder",
)
err("TrainConfig: adam_eps 10**400", lambda c: tc.TrainConfig(adam_eps=10**400), "adam_eps")
err(
    "Trainer: checkpoint_dir ''",
    lambda c: tc.Trainer(
        small(),
        _encoded(),
        None,
        tc.TrainConfig(progress=False),
        src_tokenizer=rtok(),
        tgt_tokenizer=rtok(),
        checkpoint_dir="",
    ),
    "checkpoint_dir",
    "empty",
)
err("save_checkpoint: run_dir ''", lambda c: tc.save_checkpoint("", small(), rtok(), rtok()), "run_dir", "empty")
err("adam: eps 0", lambda c: tc.Adam(tc.Linear(2, 2).parameters(), eps=0.0), "eps")
err("Translator: adaptive_threads 'no'", lambda c: setattr(translator(c), "adaptive_threads", "no"), "adaptive_threads")
err(
    "Translator: max_length set to 'x' after construction",
    lambda c: setattr(translator(c), "max_length", "x"),
    "max_length",
)
err(
    "batches: drop_remainder with a token budget",
    lambda c: list(tc.batches(_encoded(), max_tokens=20, drop_remainder=True)),
    "drop_remainder",
)


def _other_tokenizer_valid(c):
    big = tc.SubwordTokenizer.build_from_corpus(CORPUS, 300, min_frequency=1)
    valid = tc.encode_pairs(["the cat sat on the mat"] * 3, ["the mat"] * 3, big, big, None)
    return _trainer(c, valid=valid)


err("Trainer: validation pairs encoded with another tokenizer", _other_tokenizer_valid, "valid_data")
err("Trainer: valid_data as a list", lambda c: _trainer(c, valid=[1, 2]), "valid_data")
err("Trainer: config as a dict", lambda c: _trainer(c, config={"epochs": 1}), "TrainConfig")


@api("Trainer: checkpoint_dir that is a file", expect="error", match=("cannot be written",))
def _(c):
    (c.work / "run").write_text("x")
    return _trainer(c, ckpt=True)


def _vocab_mismatch(c):
    from toy_task import reversal_pairs

    tok = rtok()
    src, tgt = reversal_pairs(10)
    return tc.Trainer(
        tc.Transformer(tok.vocab_size + 1, tok.vocab_size, d_model=8, n_heads=2),
        tc.encode_pairs(src, tgt, tok, tok, None),
        src_tokenizer=tok,
        tgt_tokenizer=tok,
    )


err("Trainer: tokenizer and model vocabularies differ", _vocab_mismatch, "src_vocab_size")
err("Trainer: fit(epochs=2.5)", lambda c: _trainer(c).fit(epochs=2.5), "epochs")


@api("Trainer: the run lock is released when a callback raises")
def _(c):
    t = _trainer(c, ckpt=True)

    def boom(trainer: Any) -> None:
        raise KeyError("from the callback")

    try:
        t.fit(on_batch_end=boom)
    except KeyError:
        pass
    with ck.lock_run(c.work / "run"):
        pass
    t.fit()
    assert t.epoch == 1


@api("Trainer: fit in a thread")
def _(c):
    t = _trainer(c, ckpt=True)
    th = threading.Thread(target=t.fit)
    th.start()
    th.join()
    assert t.epoch == 1 and (c.work / "run" / "latest").exists()


@api("Trainer: a time budget of a microsecond")
def _(c):
    t = _trainer(
        c, tc.TrainConfig(epochs=3, batch_size=8, time_budget=1e-8, progress=False, val_bleu_sentences=0), ckpt=True
    )
    t.fit()
    e = t.history["epoch"]
    assert t.model.step >= 1 and e["loss"] and all(np.isfinite(x) and x > 0 for x in e["loss"]), e
    assert ck.latest_checkpoint(c.work / "run") is not None


def _state_with(c, **changes: Any) -> None:
    t = _trainer(c, ckpt=True)
    t.fit()
    state = t.state_dict()
    state.update(changes)
    t2 = _trainer(c)
    t2.model.step = t.model.step
    t2.load_state_dict(state)
    return t2


err("Trainer: state with a negative epoch", lambda c: _state_with(c, epoch=-3), "epoch")
err("Trainer: state with a negative batch position", lambda c: _state_with(c, batch_in_epoch=-1), "batch_in_epoch")
err(
    "Trainer: state whose sums are strings",
    lambda c: _state_with(c, epoch_sums={"loss": "x", "correct": 0, "tokens": 0}),
    "epoch_sums",
)
err("Trainer: state whose history is a string", lambda c: _state_with(c, history="none"), "history")
err("Trainer: state with a NaN clock", lambda c: _state_with(c, elapsed=float("nan")), "elapsed")
err("Trainer: state of another format", lambda c: _trainer(c).load_state_dict({"format": "x"}), "trainer state")


@api("Trainer: resumed from a checkpoint loaded without its optimiser", expect="error", match=("optimiser",))
def _(c):
    t = _trainer(c, ckpt=True)
    t.fit()
    ckpt = tc.load_checkpoint(c.work / "run", optimizer=False)
    return tc.Trainer.from_checkpoint(ckpt, t.train_data)


@api("Trainer: resumed with other data", expect="error", match=("differ",))
def _(c):
    t = _trainer(c, ckpt=True)
    t.fit()
    other = _trainer(c, n=41).train_data
    return tc.Trainer.from_checkpoint(c.work / "run", other)


@api("Trainer: divergence without a run directory", expect="error", match=("diverged",))
def _(c):
    t = _trainer(c, tc.TrainConfig(epochs=3, batch_size=8, fixed_lr=1e30, progress=False, val_bleu_sentences=0))
    t.fit()


err("bleu_of_encoded: limit -1", lambda c: tr.bleu_of_encoded(small(), _encoded(), rtok(), limit=-1), "limit")
err(
    "bleu_of_encoded: batch_size 0",
    lambda c: tr.bleu_of_encoded(small(), _encoded(), rtok(), batch_size=0),
    "batch_size",
)
err("output_limit: negative length", lambda c: tr.output_limit(-5), "source_tokens")
err("checkpoint_name: a float count", lambda c: ck.checkpoint_name(1.5), "integers")
err("checkpoint_name: a string count", lambda c: ck.checkpoint_name("3"), "integers")


@api("split_by_source: generators")
def _(c):
    s = tc.split_by_source((x for x in ["a", "b", "c", "d"]), (y for y in ["w", "x", "y", "z"]), 0.25, 0.25)
    assert len(s.train) + len(s.valid) + len(s.test) + s.dropped == 4


err("evaluate_loss: batch_size 0", lambda c: tr.evaluate_loss(small(), _encoded(), 0), "batch_size")


# --- 6. checkpoints ---------------------------------------------------------------------------------


def _save(c, run: Optional[Path] = None, **kw: Any) -> Path:
    from toy_task import tiny_model

    tok = rtok()
    m = tiny_model(tok, d_model=16)
    return tc.save_checkpoint(run or (c.work / "run"), m, tok, tok, **kw)


err("save: name with a parent directory", lambda c: _save(c, name="../escape"), "name")
err("save: name 'latest'", lambda c: _save(c, name="latest"), "name")
err("save: name '.tmp-x'", lambda c: _save(c, name=".tmp-epoch-0001"), "name")
err("save: keep True", lambda c: _save(c, keep=True), "keep")
err("save: run directory that is a file", lambda c: (c.work / "f").write_text("x") and _save(c, run=c.work / "f"), "f")
err("save: NaN in the trainer state", lambda c: _save(c, trainer_state={"loss": float("nan")}), "JSON")
err(
    "save: tokenizer of another size",
    lambda c: tc.save_checkpoint(c.work / "r", small(), rtok(), rtok()),
    "src_vocab_size",
)
err("save: run_id that is not a string", lambda c: _save(c, run_id=5), "run_id")


@api("save then load: weights, moments and step round-trip")
def _(c):
    from toy_task import tiny_model

    tok = rtok()
    m = tiny_model(tok, d_model=16)
    src = np.array([[1, 4, 5, 2]])
    m.configure_optimizer(warmup=5)
    m.train_step(src, src[:, :-1], src[:, 1:])
    path = tc.save_checkpoint(c.work / "run", m, tok, tok)
    back = tc.load_checkpoint(path)
    assert back.model.step == m.step and back.optimizer_loaded
    for n, p in m.parameters().items():
        assert np.array_equal(back.model.parameters()[n].value, p.value), n
    for n, p in m.optimizer_state().items():
        assert np.array_equal(back.model.optimizer_state()[n].value, p.value), n
    assert back.model.optimizer_config == m.optimizer_config


err("load: optimizer given as a string", lambda c: tc.load_checkpoint(c.run, optimizer="no"), "optimizer")
err("load: missing directory", lambda c: tc.load_checkpoint(c.work / "nope"), "no such")
err("load: a file", lambda c: (c.work / "f").write_text("x") and tc.load_checkpoint(c.work / "f"), "is a file")


def _damaged(c, damage: Callable[[Path], Any], **load_kw: Any) -> Any:
    run = copy_run(c)
    damage(latest(run))
    return tc.load_checkpoint(run, **load_kw)


def _pointer(c, payload: bytes) -> Any:
    run = copy_run(c)
    (run / "latest").write_bytes(payload)
    return tc.load_checkpoint(run)


err("load: latest names a missing checkpoint", lambda c: _pointer(c, b"epoch-0009\n"), "does not exist")
err("load: latest is binary", lambda c: _pointer(c, b"\xff\xfe\x00"), "latest")
err("load: latest names ..", lambda c: _pointer(c, b"..\n"), "damaged")


@api("load: latest is a 10 GB sparse file", expect="error", match=("latest",), timeout=60)
def _(c):
    run = copy_run(c)
    sparse(run / "latest", 10 << 30)
    return tc.load_checkpoint(run)


@api("load: config.json is a 10 GB sparse file", expect="error", match=("config.json",), timeout=60)
def _(c):
    run = copy_run(c)
    sparse(latest(run) / "config.json", 10 << 30)
    return tc.load_checkpoint(run)


@api("load: model.safetensors is a 10 GB sparse file", expect="error", match=("model.safetensors",), timeout=60)
def _(c):
    run = copy_run(c)
    sparse(latest(run) / "model.safetensors", 10 << 30)
    return tc.load_checkpoint(run)


@api("load: a 3 GB model.safetensors recorded as such", expect="error", match=("model.safetensors",), timeout=60)
def _(c):
    run = copy_run(c)
    ckpt = latest(run)
    sparse(ckpt / "model.safetensors", 3 << 30)
    edit_config(ckpt, lambda cfg: cfg["files"]["model.safetensors"].update(bytes=3 << 30))
    return tc.load_checkpoint(run)


@api("load: a 3 GB src_tokenizer.json recorded as such", expect="error", match=("src_tokenizer.json",), timeout=60)
def _(c):
    run = copy_run(c)
    ckpt = latest(run)
    sparse(ckpt / "src_tokenizer.json", 3 << 30)
    edit_config(ckpt, lambda cfg: cfg["files"]["src_tokenizer.json"].update(bytes=3 << 30))
    return tc.load_checkpoint(run, optimizer=False)


err(
    "load: config.json with a byte-order mark",
    lambda c: _damaged(
        c, lambda k: (k / "config.json").write_bytes(b"\xef\xbb\xbf" + (k / "config.json").read_bytes())
    ),
    "config.json",
)
err(
    "load: config.json holding null",
    lambda c: _damaged(c, lambda k: (k / "config.json").write_text("null")),
    "config.json",
)
err(
    "load: config.json holding a list",
    lambda c: _damaged(c, lambda k: (k / "config.json").write_text("[1, 2]")),
    "config.json",
)
err(
    "load: config.json is a directory",
    lambda c: _damaged(c, lambda k: ((k / "config.json").unlink(), (k / "config.json").mkdir())),
    "config.json",
)
err(
    "load: d_model as a string",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g["model"].update(d_model="16"))),
    "d_model",
)
err(
    "load: an unknown architecture key",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g["model"].update(colour="red"))),
    "colour",
)
err(
    "load: dtype float16",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g["model"].update(dtype="float16"))),
    "dtype",
)
err(
    "load: model section is a list",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g.update(model=[1]))),
    "model",
)
err(
    "load: warmup as a string",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g["optimizer"]["config"].update(warmup="x"))),
    "warmup",
)
err(
    "load: an unknown optimiser option",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g["optimizer"]["config"].update(momentum=0.9))),
    "momentum",
)
err(
    "load: negative optimiser step",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g["optimizer"].update(step=-5))),
    "step",
)
err(
    "load: optimiser step 1e30",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g["optimizer"].update(step=1e30))),
    "step",
)
err(
    "load: optimiser step as a string",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g["optimizer"].update(step="12"))),
    "step",
)
err("load: format version 2", lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g.update(version=2))), "version")
err("load: files section missing", lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g.pop("files"))), "files")
err(
    "load: files entry is a string",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g["files"].update({"model.safetensors": "big"}))),
    "model.safetensors",
)
err(
    "load: truncated weights",
    lambda c: _damaged(
        c, lambda k: (k / "model.safetensors").write_bytes((k / "model.safetensors").read_bytes()[:100])
    ),
    "model.safetensors",
)
err(
    "load: one flipped byte in the weights",
    lambda c: _damaged(
        c,
        lambda k: (k / "model.safetensors").write_bytes(
            (lambda b: b[:-5] + bytes([b[-5] ^ 1]) + b[-4:])((k / "model.safetensors").read_bytes())
        ),
    ),
    "damaged",
)
err(
    "load: an extra tensor",
    lambda c: _damaged(
        c, lambda k: edit_tensors(k, "model.safetensors", lambda t: t.update(extra=np.ones(3, np.float32)))
    ),
    "unexpected",
)
err(
    "load: a missing tensor",
    lambda c: _damaged(c, lambda k: edit_tensors(k, "model.safetensors", lambda t: t.pop("output.bias"))),
    "missing",
)
err(
    "load: float64 weights",
    lambda c: _damaged(
        c,
        lambda k: edit_tensors(
            k, "model.safetensors", lambda t: t.update({n: v.astype(np.float64) for n, v in t.items()})
        ),
    ),
    "float64",
)
err(
    "load: a tensor of another shape",
    lambda c: _damaged(
        c, lambda k: edit_tensors(k, "model.safetensors", lambda t: t.update({"output.bias": np.zeros(3, np.float32)}))
    ),
    "shape",
)
err(
    "load: infinity in the weights",
    lambda c: _damaged(
        c, lambda k: edit_tensors(k, "model.safetensors", lambda t: t["output.bias"].__setitem__(0, np.inf))
    ),
    "output.bias",
)
err(
    "load: NaN in the Adam moments",
    lambda c: _damaged(
        c, lambda k: edit_tensors(k, "optimizer.safetensors", lambda t: t[next(iter(t))].flat.__setitem__(0, np.nan))
    ),
    "optimizer.safetensors",
)


@api("load: NaN moments do not stop a load for translation")
def _(c):
    ckpt = _damaged(
        c,
        lambda k: edit_tensors(k, "optimizer.safetensors", lambda t: t[next(iter(t))].flat.__setitem__(0, np.nan)),
        optimizer=False,
    )
    assert not ckpt.model.nonfinite_parameters(optimizer_state=False)


err(
    "load: source and target tokenizers swapped",
    lambda c: _damaged(
        c,
        lambda k: (lambda a, b: (rewrite(k, "src_tokenizer.json", b), rewrite(k, "tgt_tokenizer.json", a)))(
            (k / "src_tokenizer.json").read_bytes(), (k / "tgt_tokenizer.json").read_bytes()
        ),
    ),
    "tokenizer",
)
err(
    "load: a tokenizer that is not one",
    lambda c: _damaged(c, lambda k: rewrite(k, "src_tokenizer.json", b'{"a": 1}')),
    "src_tokenizer.json",
)
err(
    "load: trainer state that is a list",
    lambda c: _damaged(c, lambda k: rewrite(k, "trainer_state.json", b"[1]")),
    "trainer_state.json",
)
err(
    "load: optimiser file missing",
    lambda c: _damaged(c, lambda k: (k / "optimizer.safetensors").unlink()),
    "optimizer.safetensors",
)
err(
    "load: latest is a symlink loop",
    lambda c: (
        lambda run: ((run / "latest").unlink(), (run / "latest").symlink_to(run / "latest"), tc.load_checkpoint(run))
    )(copy_run(c)),
    "latest",
)


@api("list_checkpoints: damaged and foreign directories are not listed")
def _(c):
    run = copy_run(c)
    (run / "epoch-0009").mkdir()
    (run / "epoch-0007").mkdir()
    (run / "epoch-0007" / "config.json").write_text("{}")
    shutil.copytree(run / "epoch-0001", run / "epoch-0005")
    (run / "epoch-0005" / "model.safetensors").write_bytes(b"short")
    names = [p.name for p in ck.list_checkpoints(run)]
    assert names == ["epoch-0001", "epoch-0002"], names


err("average: no checkpoint", lambda c: tc.average_checkpoints([]), "no checkpoint")


@api("average: another architecture", expect="error", match=("architecture",))
def _(c):
    from toy_task import tiny_model

    tok = rtok()
    a = tc.save_checkpoint(c.work / "a", tiny_model(tok, d_model=16), tok, tok)
    b = tc.save_checkpoint(c.work / "b", tiny_model(tok, d_model=32), tok, tok)
    return tc.average_checkpoints([a, b])


@api("average: the mean of two checkpoints, and of one twice")
def _(c):
    a, b = c.run / "epoch-0001", c.run / "epoch-0002"
    _, avg = tc.average_checkpoints([a, b])
    ma, mb = tc.load_checkpoint(a).model, tc.load_checkpoint(b).model
    for n, p in avg.parameters().items():
        want = (ma.parameters()[n].value.astype(np.float64) + mb.parameters()[n].value) / 2
        _close(p.value, want, 1e-6)
    _, same = tc.average_checkpoints([a, a])
    for n, p in same.parameters().items():
        assert np.array_equal(p.value, ma.parameters()[n].value), n


err(
    "average: a name that is not a checkpoint name",
    lambda c: tc.average_checkpoints([c.run / "epoch-0001", c.run / "epoch-0002"], c.work / "r", name="../x"),
    "name",
)


@api("mark_best: a name outside the run", expect="error", match=("name",))
def _(c):
    run = copy_run(c)
    shutil.copytree(run / "epoch-0001", c.work / "outside")
    ck.mark_best(run, "../outside")


err("mark_best: a missing checkpoint", lambda c: ck.mark_best(copy_run(c), "epoch-0042"), "epoch-0042")
err("resolve_checkpoint: prefer nonsense", lambda c: ck.resolve_checkpoint(c.run, prefer="newest"), "prefer")
err("lock_run: a file", lambda c: (c.work / "f").write_text("x") and ck.lock_run(c.work / "f").__enter__(), "f")


@api("save: two threads into one run")
def _(c):
    from toy_task import tiny_model

    tok = rtok()
    errors: List[BaseException] = []

    def save(k: int) -> None:
        m = tiny_model(tok, d_model=16, seed=k)
        for e in range(5):
            try:
                tc.save_checkpoint(
                    c.work / "run", m, tok, tok, name=ck.checkpoint_name(10 * k + e + 1), keep=None, run_id="same"
                )
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

    threads = [threading.Thread(target=save, args=(k,)) for k in range(2)]
    [th.start() for th in threads]
    [th.join() for th in threads]
    assert not errors, f"{type(errors[0]).__name__}: {errors[0]}"
    names = [p.name for p in ck.list_checkpoints(c.work / "run")]
    assert len(names) == 10, names
    for n in names:
        tc.load_checkpoint(c.work / "run" / n)


# --- 7. translation and evaluation ------------------------------------------------------------------


@api("translator: unknown source language", expect="error", match=("klingon",))
def _(c):
    t = translator(c)
    t2 = tc.Translator(t.model, t.src_tokenizer, t.tgt_tokenizer, src_lang="klingon")
    return t2.translate("The cat.")


err(
    "translator: tokenizer of another size",
    lambda c: (lambda t: tc.Translator(t.model, t.tgt_tokenizer, rtok()))(translator(c)),
    "tokens",
)
err("translator: max_length 0", lambda c: tc.Translator.from_checkpoint(c.run, max_length=0), "max_length")
err("translator: max_length True", lambda c: translator(c).translate("The cat.", max_length=True), "max_length")
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
    "return_attention",
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


err(
    "translator: cross_attention of a layer that does not exist",
    lambda c: translator(c).translate("The cat.", return_attention=True).cross_attention(5),
    "layer",
)
err(
    "translator: cross_attention without attention",
    lambda c: tl.Translation("a", "b", [], [], [], [], True).cross_attention(),
    "return_attention",
)


@api("translator: max_length 1")
def _(c):
    r = translator(c).translate("The cat and the dog.", max_length=1, return_attention=True)
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


# --- 8. the HTTP app (serve.create_app through FastAPI's TestClient) ---------------------------------


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
        CASES.append(Case(f"serve: {name}", "api", "ok", (), _refused(status, *fragments, **options)(send)))
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


# --- 9. the command line ----------------------------------------------------------------------------

SENT = "The cat and the dog."


def _n_lines(n: int) -> Callable[[Context, Result], None]:
    def check(c: Context, res: Result) -> None:
        got = lines_of(res)
        assert len(got) == n, f"{len(got)} output lines for {n} input lines"

    return check


def _prep_run(damage: Callable[[Path], Any]) -> Callable[[Context], None]:
    """A prepare step: copy the fixture run to <work>/run and damage its latest checkpoint."""

    def prepare(c: Context) -> None:
        run = copy_run(c)
        damage(run)

    return prepare


def _tr(*args: str, model: str = "run") -> Callable[[Context], List[str]]:
    return lambda c: ["translate", "--model", str(c.run if model == "fixture" else c.work / model), *args]


# translate: the model argument
cli("translate: missing model", _tr(SENT, model="nope"), match=("no such checkpoint",))
cli(
    "translate: model is a file",
    _tr(SENT, model="f"),
    match=("is a file",),
    prepare=lambda c: (c.work / "f").write_text("x"),
)
cli(
    "translate: empty directory",
    _tr(SENT, model="empty"),
    match=("holds no checkpoint",),
    prepare=lambda c: (c.work / "empty").mkdir(),
)
cli(
    "translate: latest names a deleted checkpoint",
    _tr(SENT),
    match=("does not exist",),
    prepare=_prep_run(lambda r: (shutil.rmtree(r / "epoch-0002"), (r / "best").unlink())),
)
cli(
    "translate: best and latest are binary",
    _tr(SENT),
    match=("best",),
    prepare=_prep_run(lambda r: ((r / "best").write_bytes(b"\xff\x00"), (r / "latest").write_bytes(b"\xff"))),
)
cli(
    "translate: best is a 10 GB sparse file",
    _tr(SENT),
    match=("best",),
    prepare=_prep_run(lambda r: sparse(r / "best", 10 << 30)),
)
cli(
    "translate: config.json is garbage",
    _tr(SENT),
    match=("config.json",),
    prepare=_prep_run(lambda r: (latest(r) / "config.json").write_bytes(b"\x00garbage")),
)
cli(
    "translate: truncated weights",
    _tr(SENT),
    match=("model.safetensors",),
    prepare=_prep_run(lambda r: (latest(r) / "model.safetensors").write_bytes(b"12345")),
)
cli(
    "translate: model.safetensors is a 10 GB sparse file",
    _tr(SENT),
    match=("model.safetensors",),
    prepare=_prep_run(lambda r: sparse(latest(r) / "model.safetensors", 10 << 30)),
)
cli(
    "translate: a 3 GB tokenizer recorded as such",
    _tr(SENT),
    match=("src_tokenizer.json",),
    prepare=_prep_run(
        lambda r: (
            sparse(latest(r) / "src_tokenizer.json", 3 << 30),
            edit_config(latest(r), lambda g: g["files"]["src_tokenizer.json"].update(bytes=3 << 30)),
        )
    ),
)
cli(
    "translate: d_model 1e6 in config.json",
    _tr(SENT),
    match=("config.json",),
    prepare=_prep_run(lambda r: edit_config(latest(r), lambda g: g["model"].update(d_model=10**6, n_heads=1))),
)
cli(
    "translate: 2**40 layers in config.json",
    _tr(SENT),
    match=("config.json",),
    prepare=_prep_run(lambda r: edit_config(latest(r), lambda g: g["model"].update(n_layers=2**40))),
)
cli(
    "translate: NaN written as text in config.json",
    _tr(SENT),
    match=("config.json",),
    prepare=_prep_run(
        lambda r: (latest(r) / "config.json").write_text(
            (latest(r) / "config.json").read_text().replace('"dropout": 0.1', '"dropout": NaN')
        )
    ),
)
cli(
    "translate: data section records max_length as a string",
    _tr(SENT),
    expect="ok",
    check=_n_lines(1),
    prepare=_prep_run(lambda r: edit_config(latest(r), lambda g: g["data"].update(max_length="8"))),
)
cli(
    "translate: data section records src_lang klingon",
    _tr(SENT),
    match=("klingon",),
    prepare=_prep_run(lambda r: edit_config(latest(r), lambda g: g["data"].update(src_lang="klingon"))),
)
cli(
    "translate: data section is a list",
    _tr(SENT),
    match=("data",),
    prepare=_prep_run(lambda r: edit_config(latest(r), lambda g: g.update(data=[1, 2]))),
)

# translate: options
cli("translate: --batch-size 10**6", _tr("--batch-size", "1000000", SENT, model="fixture"), match=("--batch-size",))
cli("translate: --threads 0", _tr("--threads", "0", SENT, model="fixture"), match=("--threads",))
cli(
    "translate: --threads 4096",
    _tr("--threads", "4096", SENT, model="fixture"),
    expect="either",
    check=_n_lines(1),
    match=("threads",),
)
cli(
    "translate: --threads 1024",
    _tr("--threads", "1024", SENT, model="fixture"),
    expect="either",
    check=_n_lines(1),
    match=("threads",),
)
cli(
    "translate: --beam-size 1024",
    _tr("--beam-size", "1024", SENT, model="fixture"),
    expect="ok",
    check=_n_lines(1),
    timeout=180,
)
cli("translate: --max-length 1", _tr("--max-length", "1", SENT, SENT, model="fixture"), expect="ok", check=_n_lines(2))
cli(
    "translate: --length-penalty 1e-320",
    _tr("--beam-size", "2", "--length-penalty", "1e-320", SENT, model="fixture"),
    expect="ok",
    check=_n_lines(1),
)
cli("translate: --beam-size 2.0", _tr("--beam-size", "2.0", SENT, model="fixture"), match=("--beam-size",))
cli("translate: --beam-size 0x10", _tr("--beam-size", "0x10", SENT, model="fixture"), match=("--beam-size",))
cli(
    "translate: an unknown option",
    _tr("--colour", "red", SENT, model="fixture"),
    match=("--colour",),
)


# translate: standard input and arguments
def _same_as_alone(*expected_lines: Optional[str]) -> Callable[[Context, Result], None]:
    """Output line i must be the translation of input line i (None: empty)."""

    def check(c: Context, res: Result) -> None:
        got = lines_of(res)
        assert len(got) == len(expected_lines), f"{len(got)} output lines for {len(expected_lines)} inputs: {got}"
        t = translator(c)
        for g, e in zip(got, expected_lines):
            want = "" if e is None else t.translate(e)
            assert g == want, (g, want, e)

    return check


cli(
    "translate: blank lines in",
    _tr(model="fixture"),
    expect="ok",
    stdin=b"\n \n\t\n\n\n",
    check=_same_as_alone(None, None, None, None, None),
)
cli(
    "translate: NUL bytes in a line",
    _tr(model="fixture"),
    expect="ok",
    stdin=b"The cat\x00 and the dog.\n" + SENT.encode(),
    check=lambda c, r: _n_lines(2)(c, r),
)
cli(
    "translate: carriage returns only",
    _tr(model="fixture"),
    expect="either",
    stdin=b"The cat.\rThe dog.\r",
    check=_same_as_alone("The cat.", "The dog."),
)


def _emits_line_breaks(run: Path) -> None:
    """Every checkpoint's output bias makes the newline byte the likeliest token."""
    tok = tc.load_checkpoint(run, optimizer=False).tgt_tokenizer
    newline = [i for i in tok.encode("a\nb", add_special_tokens=False) if tok.id_to_token(i) == "\u010a"][0]
    for k in ck.list_checkpoints(run):
        edit_tensors(k, "model.safetensors", lambda t: t["output.bias"].__setitem__(newline, 1e3))


cli(
    "translate: a model that emits line breaks",
    _tr("The cat.", "The dog."),
    expect="ok",
    prepare=_prep_run(_emits_line_breaks),
    check=_n_lines(2),
)
cli(
    "evaluate: a model that emits line breaks, --output",
    lambda c: ["evaluate", "--model", str(c.work / "run"), "--limit", "3", "--output", "h.txt"],
    expect="ok",
    prepare=_prep_run(_emits_line_breaks),
    check=lambda c, r: (
        None
        if (c.work / "h.txt").read_text().count("\n") == 3
        else (_ for _ in ()).throw(
            AssertionError(f"{(c.work / 'h.txt').read_text().count(chr(10))} lines for 3 hypotheses")
        )
    ),
)

cli(
    "translate: Windows line endings",
    _tr(model="fixture"),
    expect="ok",
    stdin=b"The cat.\r\nThe dog.\r\n",
    check=_same_as_alone("The cat.", "The dog."),
)
cli(
    "translate: a byte-order mark",
    _tr(model="fixture"),
    expect="ok",
    stdin=b"\xef\xbb\xbf" + SENT.encode() + b"\n",
    check=_same_as_alone(SENT),
)
cli(
    "translate: no final newline",
    _tr(model="fixture"),
    expect="ok",
    stdin=b"The cat.\nThe dog.",
    check=_same_as_alone("The cat.", "The dog."),
)
cli(
    "translate: nothing on standard input",
    _tr(model="fixture"),
    expect="ok",
    stdin=b"",
    check=lambda c, r: None if r.out == "" else (_ for _ in ()).throw(AssertionError(repr(r.out))),
)
cli("translate: an empty argument", _tr("", SENT, model="fixture"), expect="ok", check=_same_as_alone(None, SENT))
cli(
    "translate: an argument after --",
    _tr("--", "-The cat-", model="fixture"),
    expect="ok",
    check=_same_as_alone("-The cat-"),
)
cli(
    "translate: an argument with a newline",
    _tr("The cat.\nThe dog.", model="fixture"),
    expect="ok",
    check=_same_as_alone("The cat. The dog."),
)
cli(
    "translate: UTF-16 on standard input",
    _tr(model="fixture"),
    expect="either",
    partial=True,
    stdin="The cat.\nThe dog.\n".encode("utf-16"),
    check=lambda c, r: (
        None
        if "not valid UTF-8" in r.err and r.rc == 1
        else (_ for _ in ()).throw(
            AssertionError("UTF-16 input was translated as if it were text: " + repr(r.out[:80]))
        )
    ),
)
cli(
    "translate: 2000 lines",
    _tr("--batch-size", "100", model="fixture"),
    expect="ok",
    stdin=("The cat.\nThe dog and the tree.\n" * 1000).encode(),
    check=_n_lines(2000),
    timeout=240,
)
cli(
    "translate: a 600-word line",
    _tr(model="fixture"),
    expect="either",
    partial=True,
    stdin=(("the cat " * 300) + "\nThe dog.\n").encode(),
    check=_n_lines(2),
    timeout=240,
)
cli("translate: stdout is /dev/full", _tr(SENT, model="fixture"), match=("space",), stdout="devfull")
cli("translate: stdout closed", _tr(SENT, model="fixture"), expect="either", stdout="closed", check=lambda c, r: None)
cli(
    "translate: a model path that is not UTF-8",
    lambda c: ["translate", "--model", os.fsdecode(b"r\xffun"), SENT],
    match=("no such checkpoint",),
)
cli(
    "translate: a model path with a newline",
    lambda c: ["translate", "--model", "ru\nn", SENT],
    match=("no such checkpoint",),
)
cli(
    "translate: TRANSFORMER_CPP_MEMORY_LIMIT=1000",
    _tr(SENT, model="fixture"),
    env={"TRANSFORMER_CPP_MEMORY_LIMIT": "1000"},
    match=("memory",),
)
cli(
    "translate: TRANSFORMER_CPP_MEMORY_LIMIT=garbage",
    _tr(SENT, model="fixture"),
    env={"TRANSFORMER_CPP_MEMORY_LIMIT": "lots"},
    expect="ok",
    check=_n_lines(1),
)
cli(
    "translate: OMP_NUM_THREADS=100000",
    _tr(SENT, model="fixture"),
    env={"OMP_NUM_THREADS": "100000"},
    expect="either",
    check=_n_lines(1),
)
cli(
    "translate: OMP_STACKSIZE=1G and --threads 2",
    _tr("--threads", "2", SENT, model="fixture"),
    env={"OMP_STACKSIZE": "1G"},
    expect="either",
    match=("stacks",),
    check=_n_lines(1),
)
cli(
    "translate: OMP_STACKSIZE=1G and OMP_NUM_THREADS=4",
    _tr(SENT, model="fixture"),
    env={"OMP_STACKSIZE": "1G", "OMP_NUM_THREADS": "4"},
    expect="ok",
    check=_n_lines(1),
)
cli(
    "translate: best names a deleted average",
    _tr(SENT),
    match=("averaged",),
    prepare=_prep_run(lambda r: (r / "best").write_text("averaged\n")),
)
cli(
    "translate: OMP_NUM_THREADS=abc",
    _tr(SENT, model="fixture"),
    env={"OMP_NUM_THREADS": "abc"},
    expect="ok",
    check=_n_lines(1),
)
cli(
    "translate: OMP_NUM_THREADS=0",
    _tr(SENT, model="fixture"),
    env={"OMP_NUM_THREADS": "0"},
    expect="ok",
    check=_n_lines(1),
)
cli(
    "translate: C locale and ASCII output encoding",
    _tr("El árbol ¿y? 😀", model="fixture"),
    env={"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii"},
    expect="ok",
    check=_n_lines(1),
)
cli("translate: HOME unset", _tr(SENT, model="fixture"), env={"HOME": ""}, expect="ok", check=_n_lines(1))


# evaluate
def _ev(*args: str, model: str = "fixture") -> Callable[[Context], List[str]]:
    return lambda c: ["evaluate", "--model", str(c.run if model == "fixture" else c.work / model), *args]


def _pairs_file(name: str, payload: bytes) -> Callable[[Context], None]:
    return lambda c: (c.work / name).write_bytes(payload)


def _in_out(*fragments: str) -> Callable[[Context, Result], None]:
    def check(c: Context, res: Result) -> None:
        for f in fragments:
            assert f in res.out, f"{f!r} not in the output: {res.out[-300:]!r}"

    return check


cli("evaluate: --pairs missing", lambda c: _ev("--pairs", str(c.work / "nope.txt"))(c), match=("no such file",))
cli("evaluate: --pairs is a directory", lambda c: _ev("--pairs", str(c.work))(c), match=("directory",))
cli(
    "evaluate: --pairs empty",
    lambda c: _ev("--pairs", "p.txt")(c),
    match=("no valid",),
    prepare=_pairs_file("p.txt", b""),
)
cli(
    "evaluate: --pairs is a 10 GB sparse file",
    _ev("--pairs", "huge.txt"),
    match=("longer than",),
    prepare=lambda c: sparse(c.work / "huge.txt", 10 << 30),
)
cli("evaluate: --pairs /dev/null", _ev("--pairs", "/dev/null"), match=("not a regular file",))
cli(
    "evaluate: --pairs without tabs",
    _ev("--pairs", "p.txt"),
    match=("no valid",),
    prepare=_pairs_file("p.txt", b"one\ntwo\nthree\n"),
)
cli("evaluate: --limit 1", _ev("--limit", "1"), expect="ok", check=_in_out("1 sentence pairs"))
cli(
    "evaluate: --examples beyond the pairs",
    _ev("--limit", "2", "--examples", "50"),
    expect="ok",
    check=lambda c, r: None if r.out.count("  source ") == 2 else (_ for _ in ()).throw(AssertionError(r.out[-300:])),
)
cli("evaluate: --output is a directory", lambda c: _ev("--output", str(c.work))(c), match=("--output",))
cli("evaluate: --output is /dev/full", _ev("--limit", "2", "--output", "/dev/full"), match=("space",))
cli(
    "evaluate: --split valid, beam 3",
    _ev("--split", "valid", "--beam-size", "3"),
    expect="ok",
    check=_in_out("beam size 3"),
)
cli(
    "evaluate: --pairs with a name that is not UTF-8",
    lambda c: _ev("--pairs", os.fsdecode(b"p\xe9.txt"))(c),
    expect="ok",
    prepare=lambda c: (c.work / os.fsdecode(b"p\xe9.txt")).write_bytes("\n".join(PAIRS).encode()),
    check=_in_out("12 sentence pairs"),
)
cli(
    "evaluate: --output with a name that is not UTF-8",
    lambda c: _ev("--limit", "2", "--output", os.fsdecode(b"h\xe9.txt"))(c),
    expect="ok",
    check=lambda c, r: (
        None
        if (c.work / os.fsdecode(b"h\xe9.txt")).read_text().count("\n") == 2
        else (_ for _ in ()).throw(AssertionError("hypotheses not written"))
    ),
)
cli(
    "evaluate: the recorded data file is gone",
    _ev(model="run"),
    match=("no such file",),
    prepare=_prep_run(lambda r: edit_config(latest(r), lambda g: g["data"].update(path=str(r / "gone.txt")))),
)


def _changed_data(c: Context) -> None:
    run = copy_run(c)
    changed = c.work / "other.txt"
    lines = c.data.read_text().splitlines()
    changed.write_text("\n".join(lines[:150] + toy_lines(200, seed=7) + lines[150:]) + "\n")
    for ckpt in ck.list_checkpoints(run):
        edit_config(ckpt, lambda g: g["data"].update(path=str(changed)))


cli(
    "evaluate: the data file changed since training",
    _ev(model="run"),
    expect="either",
    prepare=_changed_data,
    check=lambda c, r: (
        None
        if "differ" in r.err.replace(str(c.work), "") or "changed" in r.err.replace(str(c.work), "")
        else (_ for _ in ()).throw(AssertionError("scored a split rebuilt from a different file without a word"))
    ),
)
cli(
    "evaluate: a checkpoint without a data record",
    _ev(model="run"),
    match=("--pairs",),
    prepare=_prep_run(lambda r: [edit_config(k, lambda g: g.update(data=None)) for k in ck.list_checkpoints(r)]),
)
cli(
    "evaluate: a run without a test split",
    _ev(model="run"),
    match=("test",),
    prepare=_prep_run(
        lambda r: [edit_config(k, lambda g: g["data"].update(test_fraction=0.0)) for k in ck.list_checkpoints(r)]
    ),
)
cli("evaluate: --limit -1", _ev("--limit", "-1"), match=("--limit",))
cli("evaluate: --split train", _ev("--split", "train"), match=("--split",))


# average
def _av(*args: str, model: str = "run") -> Callable[[Context], List[str]]:
    return lambda c: ["average", "--model", str(c.work / model), *args]


cli("average: missing run", _av(model="nope"), match=("0 checkpoint",))
cli(
    "average: a run with one checkpoint",
    _av(),
    match=("1 checkpoint",),
    prepare=_prep_run(lambda r: shutil.rmtree(r / "epoch-0001")),
)
cli(
    "average: --last 1", _av("--last", "1"), expect="either", prepare=_prep_run(lambda r: None), check=lambda c, r: None
)
cli(
    "average: a checkpoint directory instead of a run",
    _av(model="run/epoch-0002"),
    match=("checkpoint",),
    prepare=_prep_run(lambda r: None),
)
cli("average: --last 0", _av("--last", "0"), match=("--last",))


def _two_runs(c: Context) -> None:
    run = copy_run(c)
    for src, dst in (("epoch-0001", "epoch-0003"), ("epoch-0002", "epoch-0004")):
        shutil.copytree(run / src, run / dst)
        edit_config(run / dst, lambda g: g.update(run_id="another-run"))
    (run / "latest").write_text("epoch-0002\n")


cli(
    "average: a directory holding two runs",
    _av(),
    expect="either",
    prepare=_two_runs,
    check=lambda c, r: (
        None
        if json.loads((c.work / "run" / "averaged" / "config.json").read_text())["data"]["averaged_from"]
        in (["epoch-0001", "epoch-0002"],)
        else (_ for _ in ()).throw(
            AssertionError(
                "averaged checkpoints of two runs: "
                + str(json.loads((c.work / "run" / "averaged" / "config.json").read_text())["data"]["averaged_from"])
            )
        )
    ),
)
cli(
    "average: another architecture among the checkpoints",
    _av(),
    match=("architecture",),
    prepare=_prep_run(
        lambda r: (
            shutil.copytree(r / "epoch-0002", r / "epoch-0003"),
            edit_tensors(r / "epoch-0003", "model.safetensors", lambda t: None),
            edit_config(r / "epoch-0003", lambda g: g["model"].update(d_ff=48)),
        )
    ),
)
cli(
    "average: --mark-best",
    _av("--mark-best"),
    expect="ok",
    prepare=_prep_run(lambda r: None),
    check=lambda c, r: (
        None
        if (c.work / "run" / "best").read_text().strip() == "averaged"
        else (_ for _ in ()).throw(AssertionError("best does not name the average"))
    ),
)
cli(
    "average: a run path that is not UTF-8",
    lambda c: ["average", "--model", str(c.work / os.fsdecode(b"r\xe9"))],
    expect="ok",
    prepare=lambda c: shutil.copytree(c.run, c.work / os.fsdecode(b"r\xe9")),
    check=lambda c, r: (
        None
        if (c.work / os.fsdecode(b"r\xe9") / "averaged").is_dir()
        else (_ for _ in ()).throw(AssertionError("no average"))
    ),
)

# figures
cli(
    "figures: --out is a file",
    lambda c: ["figures", "--out", str(c.work / "f")],
    match=("f",),
    prepare=lambda c: (c.work / "f").write_text("x"),
)
cli("figures: --out under /dev/null", lambda c: ["figures", "--out", "/dev/null/figs"], match=("/dev/null",))
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


# train
def _trn(*args: str, data: str = "fixture", out: str = "out") -> Callable[[Context], List[str]]:
    def argv(c: Context) -> List[str]:
        d = str(c.data if data == "fixture" else (c.work / data if not data.startswith("/") else data))
        return ["train", *SMALL_TRAIN, "--data", d, "--epochs", "1", "--out", str(c.work / out), *args]

    return argv


def _run_ok(*extra: Callable[[Path], Any]) -> Callable[[Context, Result], None]:
    def check(c: Context, res: Result) -> None:
        ckpt = tc.load_checkpoint(c.work / "out")
        assert ckpt.model.step >= 1 and not ckpt.model.nonfinite_parameters(), "no trained checkpoint"
        for e in extra:
            e(c.work / "out")

    return check


cli("train: --data /dev/zero", _trn(data="/dev/zero"), match=("not a regular file",))
cli(
    "train: --data is a named pipe",
    _trn(data="fifo"),
    match=("not a regular file",),
    prepare=lambda c: os.mkfifo(c.work / "fifo"),
    timeout=60,
)
cli("train: --data is a directory", lambda c: _trn(data=str(c.work))(c), match=("directory",))
cli(
    "train: --data is a 10 GB sparse file",
    _trn(data="huge.txt"),
    match=("longer than",),
    prepare=lambda c: sparse(c.work / "huge.txt", 10 << 30),
)
cli(
    "train: --resume after latest was deleted",
    lambda c: ["train", "--out", str(c.work / "run"), "--resume", "--epochs", "3", "--no-progress"],
    match=("latest",),
    prepare=_prep_run(lambda r: (r / "latest").unlink()),
)
cli("train: --data is empty", _trn(data="e.txt"), match=("no valid",), prepare=_pairs_file("e.txt", b""))
cli(
    "train: data with lone carriage returns",
    _trn(data="cr.txt"),
    expect="either",
    prepare=lambda c: (c.work / "cr.txt").write_bytes(c.data.read_bytes().replace(b"\n", b"\r")),
    check=lambda c, r: (
        None
        if "loaded 300 sentence pairs" in r.err
        else (_ for _ in ()).throw(AssertionError("lines lost: " + [l for l in r.err.splitlines() if "loaded" in l][0]))
    ),
)
cli(
    "train: every line the same",
    _trn(data="same.txt"),
    match=("training",),
    prepare=_pairs_file("same.txt", b"The cat.\tEl gato.\n" * 200),
)
cli("train: --num-samples 1", _trn("--num-samples", "1"), expect="either", check=_run_ok())
cli("train: --num-samples 3", _trn("--num-samples", "3"), expect="either", check=_run_ok())
cli("train: --heads 3 with --d-model 16", _trn("--heads", "3"), match=("divisible",))
cli("train: --dropout nan", _trn("--dropout", "nan"), match=("dropout",))
cli("train: --dropout 1", _trn("--dropout", "1"), match=("dropout",))
cli("train: --dropout -0.1", _trn("--dropout", "-0.1"), match=("dropout",))
cli("train: --time-budget 1e-7", _trn("--time-budget", "1e-7"), expect="ok", check=_run_ok())
cli(
    "train: --keep-checkpoints 1 over 3 epochs",
    _trn("--keep-checkpoints", "1", "--epochs", "3"),
    expect="ok",
    check=_run_ok(
        lambda out: (
            None
            if len(ck.list_checkpoints(out)) <= 2
            else (_ for _ in ()).throw(AssertionError(f"{len(ck.list_checkpoints(out))} checkpoints kept"))
        )
    ),
)
cli(
    "train: --resume with another --d-model",
    lambda c: ["train", "--out", str(c.work / "run"), "--resume", "--d-model", "32", "--no-progress"],
    match=("--d-model",),
    prepare=_prep_run(lambda r: None),
)
cli(
    "train: --resume with a damaged latest",
    lambda c: ["train", "--out", str(c.work / "run"), "--resume", "--epochs", "3", "--no-progress"],
    match=("model.safetensors",),
    prepare=_prep_run(lambda r: (latest(r) / "model.safetensors").write_bytes(b"x")),
)
cli(
    "train: --resume with a negative epoch in the trainer state",
    lambda c: ["train", "--out", str(c.work / "run"), "--resume", "--epochs", "3", "--no-progress"],
    match=("epoch",),
    prepare=_prep_run(lambda r: edit_json_file(latest(r), "trainer_state.json", lambda s: s.update(epoch=-3))),
)
cli(
    "train: --resume with a batch position beyond the epoch",
    lambda c: ["train", "--out", str(c.work / "run"), "--resume", "--epochs", "3", "--no-progress"],
    match=("batch",),
    prepare=_prep_run(
        lambda r: edit_json_file(latest(r), "trainer_state.json", lambda s: s.update(batch_in_epoch=10**6))
    ),
)
cli(
    "train: --resume with string sums in the trainer state",
    lambda c: ["train", "--out", str(c.work / "run"), "--resume", "--epochs", "3", "--no-progress"],
    match=("trainer",),
    prepare=_prep_run(
        lambda r: edit_json_file(
            latest(r), "trainer_state.json", lambda s: s.update(epoch_sums={"loss": "x", "correct": "y", "tokens": "z"})
        )
    ),
)
cli(
    "train: --resume to 3 epochs",
    lambda c: ["train", "--out", str(c.work / "run"), "--resume", "--epochs", "3", "--no-progress"],
    expect="ok",
    prepare=_prep_run(lambda r: None),
    check=lambda c, r: (
        None
        if latest(c.work / "run").name == "epoch-0003"
        else (_ for _ in ()).throw(AssertionError(latest(c.work / "run").name))
    ),
)
cli("train: --out ''", lambda c: _trn()(c)[:-2] + ["--out", ""], match=("--out",))


def _no_half_checkpoint(c: Context, res: Result) -> None:
    out = c.work / "out"
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert not [n for n in left if n.startswith(".tmp-") or n.startswith("epoch-")], f"left behind: {left}"
    lines = [line for line in res.err.splitlines() if "error" in line]
    assert len(lines) == 1 and "writing checkpoint" in lines[0], res.err[-500:]


cli(
    "train: the disk fills up at the first checkpoint",
    _trn(),
    expect="either",
    partial=True,
    fsize=60_000,
    check=_no_half_checkpoint,
)
cli("train: --lr-scale 1e308", _trn("--lr-scale", "1e308"), match=("diverged",))
cli("figures: --out ''", lambda c: ["figures", "--out", ""], match=("--out", "empty"))
cli("average: --model ''", lambda c: ["average", "--model", ""], match=("--model", "empty"))
cli("evaluate: --pairs ''", lambda c: ["evaluate", "--model", str(c.run), "--pairs", ""], match=("--pairs", "empty"))
cli(
    "train: --precision bf16 on --resume of a float32 run",
    lambda c: ["train", "--out", str(c.work / "run"), "--resume", "--precision", "bf16", "--no-progress"],
    match=("--precision",),
    prepare=_prep_run(lambda r: None),
)
cli(
    "translate: a checkpoint whose precision is 'fp8'",
    _tr(SENT),
    match=("precision",),
    prepare=_prep_run(
        lambda r: [edit_config(k, lambda g: g["model"].update(precision="fp8")) for k in ck.list_checkpoints(r)]
    ),
)
cli("train: --out is a file", _trn(out="f"), match=("--out",), prepare=lambda c: (c.work / "f").write_text("x"))
cli("train: --threads 4096", _trn("--threads", "4096"), expect="either", check=_run_ok(), match=("threads",))
cli("train: --threads 1024", _trn("--threads", "1024"), expect="either", check=_run_ok(), match=("threads",))


def _decaying(c: Context, res: Result) -> None:
    state = tc.load_checkpoint(c.work / "out").trainer_state
    lrs = state["history"]["batch"]["lr"]
    assert len(lrs) > 2 and all(a > b for a, b in zip(lrs, lrs[1:])), f"--decay (from the preset) ignored: {lrs}"


cli(
    "train: --fixed-lr with the quick preset's decay",
    lambda c: _trn(
        "--preset",
        "quick",
        "--time-budget",
        "0",
        "--max-tokens",
        "0",
        "--fixed-lr",
        "0.001",
        "--epochs",
        "2",
        "--log-every",
        "1",
    )(c),
    expect="either",
    match=("decay",),
    check=_decaying,
)
cli(
    "train: --batch-size with the quick preset's token budget",
    lambda c: _trn("--preset", "quick", "--time-budget", "0", "--batch-size", "16")(c),
    expect="either",
    check=lambda c, r: (
        None
        if ("about 18 batches" in r.err or "--max-tokens" in r.err)
        else (_ for _ in ()).throw(
            AssertionError("--batch-size 16 ignored: " + [l for l in r.err.splitlines() if "batches" in l][0])
        )
    ),
)
cli("train: --vocab-size 260", _trn("--vocab-size", "260"), expect="ok", check=_run_ok())
cli(
    "train: --seed 2**63-1",
    _trn("--seed", str(2**63 - 1), "--split-seed", str(2**63 - 1)),
    expect="ok",
    check=_run_ok(),
)
cli("train: --seed 2**63", _trn("--seed", str(2**63)), match=("--seed",))
cli(
    "train: data with a byte-order mark",
    _trn(data="bom.txt"),
    expect="ok",
    check=_run_ok(),
    prepare=lambda c: (c.work / "bom.txt").write_bytes(b"\xef\xbb\xbf" + c.data.read_bytes()),
)
cli(
    "train: zip holding two text files",
    _trn(data="d.zip"),
    match=("cannot tell",),
    prepare=lambda c: _zip(c, {"a.txt": c.data.read_bytes(), "b.txt": c.data.read_bytes()}, "d.zip"),
)
cli(
    "train: gzip data",
    _trn(data="d.txt.gz"),
    match=("not valid",),
    prepare=lambda c: (c.work / "d.txt.gz").write_bytes(__import__("gzip").compress(c.data.read_bytes())),
)
cli("train: --label-smoothing 0.999", _trn("--label-smoothing", "0.999"), expect="ok", check=_run_ok())
cli("train: --warmup 1 --lr-scale 50", _trn("--warmup", "1", "--lr-scale", "50"), expect="either", check=_run_ok())
cli(
    "train: TRANSFORMER_CPP_MEMORY_LIMIT=10000",
    _trn(),
    env={"TRANSFORMER_CPP_MEMORY_LIMIT": "10000"},
    match=("memory",),
)
cli(
    "train: --average-last 3 over 3 epochs",
    _trn("--average-last", "3", "--epochs", "3"),
    expect="ok",
    check=_run_ok(
        lambda out: None if (out / "averaged").is_dir() else (_ for _ in ()).throw(AssertionError("no average"))
    ),
)
cli(
    "train: --valid-fraction 0.5 --test-fraction 0.5",
    _trn("--valid-fraction", "0.5", "--test-fraction", "0.5"),
    match=("fraction",),
)
cli("train: --max-tokens 1", _trn("--max-tokens", "1"), expect="ok", check=_run_ok(), timeout=240)
cli(
    "train: --drop-remainder with the quick preset's token budget",
    _trn("--preset", "quick", "--time-budget", "0", "--drop-remainder"),
    match=("drop_remainder",),
)
cli(
    "train: C locale",
    _trn(),
    env={"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii"},
    expect="ok",
    check=_run_ok(),
)
cli("train: --log-every 10**9", _trn("--log-every", str(10**9)), expect="ok", check=_run_ok())
cli("train: --d-model 16384 --d-ff 262144", _trn("--d-model", "16384", "--d-ff", "262144"), match=("memory",))
cli(
    "train: --vocab-size 2**20 on a tiny corpus",
    _trn("--vocab-size", str(2**20)),
    expect="ok",
    check=_run_ok(),
    timeout=240,
)


# export (CTranslate2 and PyTorch, when installed)
def _ex(*args: str, model: str = "fixture", out: str = "exported") -> Callable[[Context], List[str]]:
    return lambda c: [
        "export",
        "--model",
        str(c.run if model == "fixture" else c.work / model),
        *args,
        str(c.work / out) if not out.startswith("/") else out,
    ]


def _exported(*names: str) -> Callable[[Context, Result], None]:
    def check(c: Context, res: Result) -> None:
        files = {p.name for p in (c.work / "exported").iterdir()}
        for n in names:
            assert n in files, f"{n} not written ({sorted(files)})"

    return check


cli("export: missing model", _ex("--to", "torch", model="nope"), match=("no such checkpoint",))
cli(
    "export: OUT is a directory that holds a file",
    _ex("--to", "torch"),
    match=("empty",),
    prepare=lambda c: ((c.work / "exported").mkdir(), (c.work / "exported" / "keep.txt").write_text("mine")),
)
cli(
    "export: OUT is a file",
    _ex("--to", "torch", out="f"),
    match=("f",),
    prepare=lambda c: (c.work / "f").write_text("x"),
)
cli("export: OUT under /dev/null", _ex("--to", "torch", out="/dev/null/x"), match=("/dev/null",))
cli("export: --to onnx", _ex("--to", "onnx"), match=("--to",))
cli("export: --quantization int3", _ex("--to", "ctranslate2", "--quantization", "int3"), match=("--quantization",))
cli(
    "export: infinity in the weights",
    _ex("--to", "torch", model="run"),
    match=("output.bias",),
    prepare=_prep_run(
        lambda r: [
            edit_tensors(k, "model.safetensors", lambda t: t["output.bias"].__setitem__(0, np.inf))
            for k in ck.list_checkpoints(r)
        ]
    ),
)
cli("export: to PyTorch", _ex("--to", "torch"), expect="either", check=_exported("transformer_torch.py"), timeout=300)
cli("export: to CTranslate2", _ex("--to", "ctranslate2"), expect="either", check=_exported("model.bin"), timeout=300)
cli(
    "export: to CTranslate2 in int8",
    _ex("--to", "ctranslate2", "--quantization", "int8"),
    expect="either",
    check=_exported("model.bin"),
    timeout=300,
)
cli(
    "export: OUT that is not UTF-8",
    lambda c: ["export", "--model", str(c.run), "--to", "torch", str(c.work / os.fsdecode(b"ex\xe9"))],
    expect="either",
    check=lambda c, r: (
        None
        if list((c.work / os.fsdecode(b"ex\xe9")).iterdir())
        else (_ for _ in ()).throw(AssertionError("nothing written"))
    ),
    timeout=300,
)

# the program itself
cli(
    "no subcommand",
    lambda c: [],
    expect="either",
    partial=True,
    check=lambda c, r: None if r.rc == 2 and "usage:" in r.out else (_ for _ in ()).throw(AssertionError(r.out[:200])),
)
cli("an unknown subcommand", lambda c: ["fly"], match=("fly",))
cli(
    "--version",
    lambda c: ["--version"],
    expect="ok",
    check=lambda c, r: None if "transformer-cpp" in r.out else (_ for _ in ()).throw(AssertionError(r.out)),
)
for _sub in ("train", "translate", "evaluate", "average", "figures", "serve", "export"):
    cli(
        f"{_sub} --help",
        (lambda s: lambda c: [s, "--help"])(_sub),
        expect="ok",
        check=lambda c, r: None if "usage:" in r.out else (_ for _ in ()).throw(AssertionError(r.out[:200])),
    )
cli("serve: missing model", lambda c: ["serve", "--model", str(c.work / "nope")], match=("nope",))
cli("serve: --port 99999", lambda c: ["serve", "--model", str(c.run), "--port", "99999"], match=("--port",))
cli("serve: --max-batch 0", lambda c: ["serve", "--model", str(c.run), "--max-batch", "0"], match=("--max-batch",))
cli(
    "serve: --max-wait-ms nan",
    lambda c: ["serve", "--model", str(c.run), "--max-wait-ms", "nan"],
    match=("--max-wait-ms",),
)
cli("evaluate: no --model", lambda c: ["evaluate"], match=("--model",))
cli("train: --data without a value", lambda c: ["train", "--data"], match=("--data",))


if __name__ == "__main__":
    sys.exit(main())
