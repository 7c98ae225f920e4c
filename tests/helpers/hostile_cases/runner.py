"""Running a hostile case and classifying what came of it.

Every case runs in a process of its own under an address-space limit (``RLIMIT_AS``; under
AddressSanitizer, whose shadow memory needs terabytes of address space, the same amount is given
as ``TRANSFORMER_CPP_MEMORY_LIMIT`` instead) and a time limit, and is classified:

``clear-error``
    a non-zero exit (command line: one ``error`` line, no traceback) or an exception of a
    user-facing type (ValueError, TypeError, OSError, RuntimeError and their subclasses) whose
    message names what was wrong (every fragment of the case's ``match``);
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
    an error of a user-facing type whose message does not name the problem (fragments missing),
    of another type than the case asks for, pybind11's list of signatures, more than one error
    line, or an error for input that should have worked;
``silent-wrong``
    success (exit 0, no exception) with a wrong or non-finite result, lost data, or input that
    had to be refused; or a check after a clear error that failed (something was left behind);
``hang``
    the time limit passed.

API cases and most command-line cases run in a child forked from a process that has imported
``transformer_cpp`` once, with what the commands import later (``warm_up``): milliseconds per case
instead of an interpreter start. A command line runs as ``transformer_cpp.cli.main(argv)`` with
standard input, output and error on files. That process never runs the core itself (a case's
prepare step and checks run in forked children too), so no child inherits OpenMP threads.
``serve()`` is such a process for the test suite (``tests/properties/test_hostile.py``), which also has the
server and the API cases' children measure line coverage under pytest-cov;
``tools/hostile_campaign.py`` is one itself.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import transformer_cpp.cli  # noqa: F401  (imported once here, not in every forked command)

from .base import Case, Context, Result, ServerError, cli_env, found, setup

CLASSES = ("clear-error", "handled", "crash", "traceback", "unclear-error", "silent-wrong", "hang")
FAILING = ("crash", "traceback", "unclear-error", "silent-wrong", "hang")
PASSING = ("clear-error", "handled")
USER_ERRORS = (ValueError, TypeError, OSError, RuntimeError)  # FloatingPointError is an ArithmeticError
COVERAGE_VARIABLE = "HOSTILE_CASES_COVERAGE"  # the server measures into this data file (pytest-cov's)
DEFAULT_MEMORY = 2 << 30  # bytes of address space per case
DEFAULT_TIMEOUT = 180.0  # seconds per case


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


def under_address_sanitizer() -> bool:
    """Whether the AddressSanitizer runtime is loaded (``.ci/sanitize`` preloads it)."""
    try:
        with open("/proc/self/maps") as f:
            return "libasan" in f.read()
    except OSError:
        return False


ASAN = under_address_sanitizer()


def _limit(memory: int, fsize: int = 0) -> None:
    """The limits of a case's process (called in that process)."""
    if ASAN:
        os.environ.setdefault("TRANSFORMER_CPP_MEMORY_LIMIT", str(memory))
    else:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if fsize:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))


def _describe(exc: BaseException) -> Dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "mro": [c.__name__ for c in type(exc).__mro__],
        "message": str(exc)[:2000],
        "user": isinstance(exc, USER_ERRORS) and not isinstance(exc, INTERNAL_ERRORS),
        "where": "".join(traceback.format_tb(exc.__traceback__)[-2:])[-1500:],
    }


def _kill(pid: int) -> None:
    for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill()


# The peak resident memory (bytes) of the children forked since the last reset_child_peak(). A
# case's child starts as a copy of this process, so its peak over this process's resident memory
# is what the case itself took.
_child_peak = 0


def reset_child_peak() -> None:
    global _child_peak
    _child_peak = 0


def child_peak_bytes() -> int:
    return _child_peak


def resident_bytes() -> int:
    """This process's resident memory now (Linux ``/proc/self/statm``; 0 elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def _reap(pid: int, options: int) -> Tuple[int, int]:
    """os.waitpid that also records the child's peak resident memory (``ru_maxrss``, KiB on Linux)."""
    global _child_peak
    done, status, usage = os.wait4(pid, options)
    if done:
        _child_peak = max(_child_peak, usage.ru_maxrss * 1024)
    return done, status


def _fork(child: Any, timeout: float) -> Any:
    """Run ``child(write_fd)`` in a forked child (its own process group); returns (wait status or
    None after a timeout, the bytes it wrote). The child never returns into this process."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.close(r)
        code = 3
        try:
            os.setpgid(0, 0)
            code = child(w)
        finally:
            os._exit(code)
    os.close(w)
    exit_fd = _pidfd(pid)  # readable when the child exits (Linux); else polled
    chunks: List[bytes] = []
    deadline = time.monotonic() + timeout
    exited = None
    open_pipe, pause = True, 0.001
    while exited is None:
        left = deadline - time.monotonic()
        if left <= 0:
            _kill(pid)
            _reap(pid, 0)
            os.close(r)
            if exit_fd is not None:
                os.close(exit_fd)
            return None, b""
        waiting = ([r] if open_pipe else []) + ([exit_fd] if exit_fd is not None else [])
        if waiting:
            ready, _, _ = select.select(waiting, [], [], min(left, 0.2 if exit_fd is not None else pause))
            if r in ready:
                chunk = os.read(r, 1 << 16)
                if chunk:
                    chunks.append(chunk)
                    continue
                open_pipe = False
        else:
            time.sleep(min(left, pause))
        pause = min(2 * pause, 0.05)
        done, status = _reap(pid, os.WNOHANG)
        if done:
            exited = status
    if exit_fd is not None:
        os.close(exit_fd)
    os.set_blocking(r, False)  # what is left; a descendant holding the pipe open must not block us
    while open_pipe:
        try:
            chunk = os.read(r, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    _kill(pid)  # what the case left running in its process group
    return exited, b"".join(chunks)


def _pidfd(pid: int) -> Optional[int]:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _save_coverage(save: bool = True) -> None:
    """Under the test suite's coverage measurement, stop measuring and write what this process
    measured to a data file of its own (coverage names it after the process, so a forked child does
    not overwrite its parent's); or, with ``save=False``, only stop."""
    if os.environ.get(COVERAGE_VARIABLE):
        import coverage

        cov = coverage.Coverage.current()
        if cov is not None:
            cov.stop()
            if save:
                cov.save()


def _io_dir(ctx: Context) -> Path:
    """Where a case's captured output goes: next to its work directory, never inside it."""
    path = ctx.work.parent / f"{ctx.work.name}.io"
    path.mkdir(exist_ok=True)
    return path


def _redirect(fd: int, path: Path, flags: int) -> None:
    new = os.open(path, flags, 0o644)
    os.dup2(new, fd)
    os.close(new)


def _isolated(fn: Any, timeout: float = 120.0) -> Optional[str]:
    """Run ``fn()`` (a case's prepare step or its checks) in a forked child, so that this process
    never runs the core; None when it returned, else what went wrong (an AssertionError's message
    for a failed check, ``RuntimeError`` for anything else)."""

    def child(w: int) -> int:
        _save_coverage(save=False)
        try:
            fn()
            report = {"ok": True}
        except AssertionError as exc:
            report = {"ok": False, "message": str(exc)}
        except BaseException as exc:  # noqa: BLE001
            report = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "where": traceback.format_exc()[-1500:]}
        os.write(w, json.dumps(report).encode("utf-8", "replace"))
        return 0

    exited, data = _fork(child, timeout)
    if exited is None or not data:
        raise RuntimeError("a prepare step or check died or hung")
    report = json.loads(data.decode("utf-8"))
    if "error" in report:
        raise RuntimeError(f"{report['error']}\n{report['where']}")
    return None if report["ok"] else report["message"]


# --------------------------------------------------------------------------------------- API cases


def run_api(case: Case, ctx: Context, memory: int, timeout: float) -> Dict[str, Any]:
    out_path = _io_dir(ctx) / "output.txt"

    def child(w: int) -> int:
        try:
            _redirect(1, out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(1, 2)
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
            return 3
        _save_coverage()
        return 0

    reset_child_peak()
    exited, data = _fork(child, timeout)
    peak = child_peak_bytes()
    if exited is None:
        return {"class": "hang", "detail": f"no result after {timeout:.0f} s"}
    output = out_path.read_text(errors="replace")[-1500:] if out_path.exists() else ""
    if os.WIFSIGNALED(exited):
        name = signal.Signals(os.WTERMSIG(exited)).name
        return {"class": "crash", "detail": f"killed by signal {name}", "output": output}
    if not data:
        return {
            "class": "crash",
            "detail": f"exited with status {os.WEXITSTATUS(exited)} without a result",
            "output": output,
        }
    report = json.loads(data.decode("utf-8"))
    return classify_api(case, report) | {"report": report, "peak_bytes": peak}


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
    if case.raises and not any(t.__name__ in report["mro"] for t in case.raises):
        wanted = " or ".join(t.__name__ for t in case.raises)
        return {"class": "unclear-error", "detail": f"{detail}  [expected {wanted}]"}
    missing = [_show(m) for m in case.match if not found(m, message)]
    if not message.strip() or "Invoked with" in message or missing:
        return {"class": "unclear-error", "detail": detail + (f"  [missing {missing}]" if missing else "")}
    return {"class": "clear-error", "detail": detail}


def _show(fragment: Any) -> str:
    return fragment if isinstance(fragment, str) else f"/{fragment.pattern}/"


# --------------------------------------------------------------------------------------- command-line cases


def _cli_forked(case: Case, argv: List[str], stdin: bytes, ctx: Context, memory: int, timeout: float) -> Any:
    """``transformer_cpp.cli.main(argv)`` in a forked child, as ``python -m transformer_cpp`` would
    run it: standard streams on files, the exit status from its return value or SystemExit, a
    traceback for an exception that escapes, exit-time flushing and handlers."""
    io_dir = _io_dir(ctx)
    paths = {name: io_dir / name for name in ("stdin", "stdout", "stderr")}
    paths["stdin"].write_bytes(stdin)

    def child(w: int) -> int:
        os.close(w)
        _save_coverage(save=False)  # command lines are not measured (as elsewhere in the suite)
        _redirect(0, paths["stdin"], os.O_RDONLY)
        _redirect(1, paths["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        _redirect(2, paths["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        # the interpreter's own stream objects, now on the files (their buffers were flushed)
        sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__
        code: Any = 1
        try:
            os.environ.update(case.env or {})  # variables read when used (the core reads its memory limit so)
            _limit(memory, case.fsize)
            os.chdir(ctx.work)
            from transformer_cpp.cli import main

            code = main(argv)
        except SystemExit as exc:
            code = exc.code
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001  (what the interpreter would print)
            traceback.print_exc()
            code = 1
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        try:
            sys.stdout.flush()
        except Exception as exc:  # noqa: BLE001
            print(f"Exception ignored while flushing sys.stdout:\n{type(exc).__name__}: {exc}", file=sys.stderr)
            code = 120
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        return (code or 0) & 0xFF

    started = time.monotonic()
    exited, _ = _fork(child, timeout)
    if exited is None:
        return None
    rc = -os.WTERMSIG(exited) if os.WIFSIGNALED(exited) else os.WEXITSTATUS(exited)
    read = lambda name: paths[name].read_bytes().decode("utf-8", "replace") if paths[name].exists() else ""  # noqa: E731
    return Result(rc, read("stdout"), read("stderr")), time.monotonic() - started


def _cli_fresh(case: Case, argv: List[str], stdin: bytes, ctx: Context, memory: int, timeout: float) -> Any:
    """``python -m transformer_cpp argv`` in a fresh interpreter."""
    cmd = [sys.executable, "-m", "transformer_cpp", *argv]
    stdout: Any = subprocess.PIPE
    if case.stdout == "devfull":
        stdout = open("/dev/full", "wb")
    env = cli_env(case.env)
    if ASAN:
        env.setdefault("TRANSFORMER_CPP_MEMORY_LIMIT", str(memory))
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=subprocess.PIPE,
            cwd=ctx.work,
            env=env,
            preexec_fn=lambda: (_limit(memory, case.fsize), os.setpgid(0, 0)),
        )
        if case.stdout == "closed":
            proc.stdout.close()
        try:
            out, errb = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill(proc.pid)
            proc.communicate()
            return None
    finally:
        if case.stdout == "devfull":
            stdout.close()
    res = Result(proc.returncode, (out or b"").decode("utf-8", "replace"), errb.decode("utf-8", "replace"))
    return res, time.monotonic() - started


def run_cli(case: Case, ctx: Context, memory: int, timeout: float) -> Dict[str, Any]:
    if case.prepare is not None:
        failed = _isolated(lambda: case.prepare(ctx))
        if failed is not None:
            raise RuntimeError(f"the prepare step failed: {failed}")
    argv = case.fn(ctx)
    stdin = case.stdin(ctx) if callable(case.stdin) else case.stdin
    run = _cli_fresh if case.in_fresh_interpreter() else _cli_forked
    reset_child_peak()
    got = run(case, argv, stdin, ctx, memory, timeout)
    peak = child_peak_bytes() if run is _cli_forked else 0  # a fresh interpreter is no copy of this one
    if got is None:
        return {"class": "hang", "detail": f"no exit after {timeout:.0f} s"}
    res, seconds = got
    return (
        classify_cli(case, ctx, res)
        | {
            "rc": res.rc,
            "stderr": res.err[-2000:],
            "stdout": res.out[-500:],
            "command_seconds": round(seconds, 2),
        }
        | ({"peak_bytes": peak} if peak else {})
    )


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
            failed = _isolated(lambda: case.check(ctx, res))
            if failed is not None:
                return {"class": "silent-wrong", "detail": f"check failed: {failed}"[:600]}
        return {"class": "handled", "detail": ""}
    error_lines = [l for l in err_text.splitlines() if "error" in l]
    detail = error_lines[0][:400] if error_lines else (err_text.strip().splitlines() or ["(no message)"])[-1][:400]
    if case.expect == "ok":
        return {"class": "unclear-error", "detail": f"exit {res.rc} for input that should work: {detail}"}
    if case.check is not None and case.partial:  # a partial success (translate with some bad lines)
        failed = _isolated(lambda: case.check(ctx, res))
        if failed is not None:
            return {"class": "silent-wrong", "detail": f"check failed: {failed}"[:600]}
        return {"class": "clear-error", "detail": detail}
    missing = [_show(m) for m in case.match if not found(m, " ".join(error_lines))]
    if len(error_lines) != 1 or missing:
        why = f"{len(error_lines)} error lines" if len(error_lines) != 1 else f"missing {missing}"
        return {"class": "unclear-error", "detail": f"{detail}  [{why}]"}
    if case.status is not None and res.rc != case.status:
        return {"class": "unclear-error", "detail": f"{detail}  [exit status {res.rc}, expected {case.status}]"}
    if case.after is not None:
        failed = _isolated(lambda: case.after(ctx, res))
        if failed is not None:
            return {"class": "silent-wrong", "detail": f"after the error: {failed}"[:600]}
    return {"class": "clear-error", "detail": detail}


# --------------------------------------------------------------------------------------- scripts


def run_script(case: Case, ctx: Context, memory: int, timeout: float) -> Dict[str, Any]:
    """Python source in a fresh interpreter; it asserts what it must and prints OK last."""
    env = cli_env(case.env)
    if ASAN:
        env.setdefault("TRANSFORMER_CPP_MEMORY_LIMIT", str(memory))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", case.fn],
            capture_output=True,
            text=True,
            cwd=ctx.work,
            env=env,
            timeout=timeout,
            preexec_fn=lambda: (_limit(memory), os.setpgid(0, 0)),
        )
    except subprocess.TimeoutExpired:
        return {"class": "hang", "detail": f"no exit after {timeout:.0f} s"}
    tail = (proc.stderr.strip().splitlines() or ["(nothing on standard error)"])[-1][:400]
    info = {"rc": proc.returncode, "stdout": proc.stdout[-1000:], "stderr": proc.stderr[-2000:]}
    if proc.returncode < 0:
        return {"class": "crash", "detail": f"killed by signal {signal.Signals(-proc.returncode).name}"} | info
    if proc.returncode != 0:
        kind = "silent-wrong" if "AssertionError" in proc.stderr else "traceback"
        return {"class": kind, "detail": tail} | info
    if proc.stdout.strip().splitlines()[-1:] != ["OK"]:
        return {"class": "silent-wrong", "detail": "the script did not finish (no OK)"} | info
    return {"class": "handled", "detail": ""} | info


# --------------------------------------------------------------------------------------- one case


def warm_up() -> None:
    """Import here, once, what the cases' children would each import again: sentence cleaning's
    Moses tables (seconds of regular expressions), the HTTP app's framework, the scoring and
    checkpoint-file libraries. Pure Python: the core does not run in this process."""
    import fastapi.testclient  # noqa: F401
    import sacrebleu  # noqa: F401
    import safetensors.numpy  # noqa: F401

    import transformer_cpp as tc
    import transformer_cpp.bench  # noqa: F401  (the command line's parser names its sections)
    import transformer_cpp.serve  # noqa: F401

    for lang in ("en", "es"):
        tc.clean_sentence("Warm up.", lang)


def run_case(
    case: Case, ctx: Context, work: Path, memory: int = DEFAULT_MEMORY, timeout: float = 0.0
) -> Dict[str, Any]:
    """Run ``case`` in the fresh directory ``work``; its outcome, with its class and duration."""
    work.mkdir(parents=True)
    ctx.work = work
    timeout = case.timeout or timeout or DEFAULT_TIMEOUT
    started = time.monotonic()
    run = {"api": run_api, "cli": run_cli, "script": run_script}[case.kind]
    try:
        outcome = run(case, ctx, memory, timeout)
    except Exception as exc:  # noqa: BLE001  (a bug of the runner itself, or of a prepare step)
        outcome = {
            "class": "traceback",
            "detail": f"runner: {type(exc).__name__}: {exc}",
            "where": traceback.format_exc()[-1500:],
        }
    outcome["seconds"] = round(time.monotonic() - started, 2)
    return outcome


# --------------------------------------------------------------------------------------- the test suite's server


def serve() -> None:
    """Run cases for a test process: build the fixtures, say ``ready``, then read one case name per
    line (JSON) and answer one outcome per line (JSON), until end of input."""
    from . import CASES

    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the cases' children inherit nothing of the protocol
    os.dup2(2, 1)
    by_name = {c.name: c for c in CASES}
    root = Path(tempfile.mkdtemp(prefix="hostile-"))
    try:
        started = time.monotonic()
        warm_up()
        ctx = setup(root)
        ready = {"ready": round(time.monotonic() - started, 1), "idle_bytes": resident_bytes()}
        answers.write(json.dumps(ready) + "\n")
        for n, line in enumerate(iter(requests.readline, b"")):
            name = json.loads(line)
            work = root / "cases" / f"{n:04d}"
            outcome = run_case(by_name[name], ctx, work)
            answers.write(json.dumps(outcome, default=str) + "\n")
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(_io_dir(ctx), ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        _save_coverage()


class Server:
    """The test process's end of ``serve()``: one fresh interpreter that runs every case."""

    def __init__(self, log: Any, env: Optional[Dict[str, str]] = None) -> None:
        self.log, self.env = log, env
        self._start()

    def _start(self) -> None:
        tests = Path(__file__).resolve().parents[2]
        boot = (
            "import os, sys\n"
            f"if os.environ.get({COVERAGE_VARIABLE!r}):\n"  # measured from before the package's import
            f"    import coverage; coverage.Coverage(data_file=os.environ[{COVERAGE_VARIABLE!r}], data_suffix=True).start()\n"
            f"sys.path.insert(0, {str(tests)!r})\n"
            "from helpers.hostile_cases.runner import serve\n"
            "serve()\n"
        )
        env = dict(cli_env(), **(self.env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", boot], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env
        )
        answer = self._answer(900)
        self.ready = answer["ready"]
        self.idle_bytes = answer["idle_bytes"]  # resident memory of the process each case forks from

    def _answer(self, timeout: float) -> Dict[str, Any]:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            self.close(kill=True)
            self.log.seek(0)
            raise RuntimeError(f"the hostile-case server stopped answering:\n{self.log.read()[-3000:]!r}")
        return json.loads(line)

    def run(self, case: Case) -> Dict[str, Any]:
        if self.proc.poll() is not None:  # stopped after an earlier failure: the next case starts one
            self._start()
        self.proc.stdin.write((json.dumps(case.name) + "\n").encode())
        self.proc.stdin.flush()
        return self._answer((case.timeout or DEFAULT_TIMEOUT) + 120)

    def close(self, kill: bool = False) -> None:
        if self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.stdin.close()
            self.proc.wait(timeout=120)
