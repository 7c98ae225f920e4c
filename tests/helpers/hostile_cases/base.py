"""The case table's vocabulary: the fixtures every case may use, the ``Case`` record, the functions
that register cases, and helpers shared by the sections.

A case is a hostile input and what must come of it:

* ``api``: a function of the :class:`Context`, run in a child forked from a process that has
  imported ``transformer_cpp`` (a crash kills the child, not the run). It fails clearly when
  ``expect="error"`` (an exception of a user-facing type, of ``raises`` when given, whose message
  holds every fragment of ``match``), or returns after its own assertions when ``expect="ok"``.
* ``cli``: a command line (argv, standard input, prepared files, environment); it fails with one
  ``error`` line naming ``match`` (and exit status ``status`` when given; then ``after`` checks
  what it left behind), or succeeds and ``check`` passes. It runs as ``transformer_cpp.cli.main``
  in a forked child, or as ``python -m transformer_cpp`` in a fresh interpreter when what it tests
  happens at interpreter start or exit (OpenMP's or the locale's variables, a closed or full
  standard output, ``fresh=True``).
* ``script``: Python source run in a fresh interpreter (settings read at import, such as
  ``OMP_NUM_THREADS`` under an address-space limit); it prints ``OK`` last after its assertions.

``expect="either"`` accepts a clear error or a correct result. A fragment of ``match`` is a string
(found case-insensitively) or a compiled regular expression (searched as compiled).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Type, Union

import numpy as np

import transformer_cpp as tc

from ..cli import SMALLEST

Fragment = Union[str, "re.Pattern[str]"]

# --------------------------------------------------------------------------------------- context


@dataclass
class Context:
    root: Path  # the run's temporary directory
    data: Path  # a tiny Tatoeba-format file (300 pairs)
    run: Path  # a run directory trained on it for 2 epochs (checkpoints epoch-0001, epoch-0002)
    work: Path = Path()  # a fresh directory for the current case


def cli_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The environment of a command: this one without the package's variables (the data set's
    location among them: cases never read the real data) and coverage's (a fresh interpreter is
    not measured), one OpenMP thread, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRANSFORMER_CPP_", "COVERAGE_"))}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra or {})
    return env


def setup(root: Path) -> Context:
    """Write the tiny data file and train the fixture run (in a subprocess: the process that forks
    the cases never runs the core itself, so its children start without OpenMP threads)."""
    from ..toy_task import write_tatoeba_file

    data = write_tatoeba_file(root / "pairs.txt", n=300)
    run = root / "run"
    argv = ["train", *SMALLEST, "--data", str(data), "--epochs", "2", "--out", str(run)]
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_cpp", *argv], capture_output=True, text=True, env=cli_env(), timeout=600
    )
    if proc.returncode != 0:
        raise RuntimeError(f"training the fixture run failed:\n{proc.stderr}")
    return Context(root=root, data=data, run=run)


# --------------------------------------------------------------------------------------- cases


class ServerError(Exception):
    """An HTTP 500 from the serving app (a bug there), raised by the serve cases."""


@dataclass
class Result:
    """What a command did: its exit status and its decoded standard output and error."""

    rc: int
    out: str
    err: str


@dataclass
class Case:
    name: str
    kind: str  # "api", "cli" or "script"
    expect: str  # "error": must fail clearly; "ok": must succeed (assertions decide); "either"
    match: Tuple[Fragment, ...] = ()  # what the error message must hold
    fn: Any = None  # api: the case, a function of the Context; cli: builds the argv; script: the source
    raises: Tuple[Type[BaseException], ...] = ()  # api: the exception must be one of these (empty: any user error)
    stdin: Any = b""  # cli: bytes, or a callable(ctx) -> bytes
    env: Optional[Dict[str, str]] = None  # cli, script: extra environment
    prepare: Optional[Callable[[Context], Any]] = None  # cli: runs before the command (files to read)
    check: Optional[Callable[[Context, Result], Any]] = None  # cli: assertions on a successful run
    after: Optional[Callable[[Context, Result], Any]] = None  # cli: assertions after a clear error
    status: Optional[int] = None  # cli: the exit status an error must have (None: any non-zero)
    stdout: str = "pipe"  # cli: "pipe", "devfull" or "closed"
    partial: bool = False  # cli: a non-zero exit is a partial success that ``check`` judges (translate)
    fsize: int = 0  # cli: RLIMIT_FSIZE in bytes (0: none), a disk that fills up
    fresh: bool = False  # cli: run in a fresh interpreter even without an environment of its own
    timeout: float = 0.0  # 0: the runner's default
    needs_rlimit: bool = False  # tests the address-space limit itself (impossible under AddressSanitizer)
    extra: bool = False  # campaign-only: too slow for the test suite
    note: str = ""

    def in_fresh_interpreter(self) -> bool:
        """Whether what the case tests happens at interpreter start or exit: OpenMP's variables
        (read when the core loads), the locale and Python's own variables, standard output's state."""
        at_start = any(k.startswith(("OMP_", "LC_", "LANG", "PYTHON")) for k in self.env or {})
        return self.kind == "script" or (self.kind == "cli" and (self.fresh or at_start or self.stdout != "pipe"))


CASES: List[Case] = []
_EXTRA = [False]


@contextlib.contextmanager
def campaign_only() -> Iterator[None]:
    """Cases registered inside this block run in the campaign only (``tools/hostile_campaign.py``)."""
    _EXTRA.append(True)
    try:
        yield
    finally:
        _EXTRA.pop()


def _add(case: Case) -> Case:
    case.extra = case.extra or _EXTRA[-1]
    CASES.append(case)
    return case


def _types(raises: Any) -> Tuple[Type[BaseException], ...]:
    if raises is None:
        return ()
    return tuple(raises) if isinstance(raises, (tuple, list)) else (raises,)


def api(
    name: str,
    expect: str = "ok",
    match: Sequence[Fragment] = (),
    *,
    raises: Any = None,
    timeout: float = 0.0,
    note: str = "",
) -> Callable[[Callable[[Context], Any]], Callable[[Context], Any]]:
    """Register an API case: a function of the context, run in a forked child."""

    def register(fn: Callable[[Context], Any]) -> Callable[[Context], Any]:
        _add(Case(name, "api", expect, tuple(match), fn, raises=_types(raises), timeout=timeout, note=note))
        return fn

    return register


def err(name: str, call: Callable[[Context], Any], *match: Fragment, raises: Any = None, note: str = "") -> None:
    """An API call that must raise a user-facing exception (of ``raises``) naming ``match``."""
    _add(Case(name, "api", "error", tuple(match), call, raises=_types(raises), note=note))


def cli(
    name: str,
    argv: Callable[[Context], List[str]],
    expect: str = "error",
    match: Sequence[Fragment] = (),
    *,
    stdin: Any = b"",
    env: Optional[Dict[str, str]] = None,
    prepare: Optional[Callable[[Context], Any]] = None,
    check: Optional[Callable[[Context, Result], Any]] = None,
    after: Optional[Callable[[Context, Result], Any]] = None,
    status: Optional[int] = None,
    stdout: str = "pipe",
    timeout: float = 0.0,
    partial: bool = False,
    fsize: int = 0,
    fresh: bool = False,
    needs_rlimit: bool = False,
    note: str = "",
) -> None:
    """Register a command-line case: ``argv(ctx)`` after ``prepare(ctx)``."""
    _add(
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
            after=after,
            status=status,
            stdout=stdout,
            timeout=timeout,
            partial=partial,
            fsize=fsize,
            fresh=fresh,
            needs_rlimit=needs_rlimit,
            note=note,
        )
    )


def script(
    name: str, source: str, *, env: Optional[Dict[str, str]] = None, timeout: float = 0.0, needs_rlimit: bool = False
) -> None:
    """Register Python source run in a fresh interpreter; it asserts, then prints OK."""
    _add(Case(name, "script", "ok", (), source, env=env, timeout=timeout, needs_rlimit=needs_rlimit))


def case_named(name: str) -> Case:
    for case in CASES:
        if case.name == name:
            return case
    raise KeyError(name)


# --------------------------------------------------------------------------------------- helpers for cases

V = 13
HUGE = 2**70  # beyond 64 bits


def small(**kw: Any) -> Any:
    """A float64 model of width 8 over a 13-token vocabulary."""
    args = dict(d_model=8, n_layers=1, n_heads=2, d_ff=12, dropout=0.0, max_length=8, dtype="float64")
    args.update(kw)
    return tc.Transformer(V, V, **args)


def batch(seed: int = 0, b: int = 2, s: int = 4, t: int = 3) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, V, (b, s)), rng.integers(1, V, (b, t)), rng.integers(1, V, (b, t))


def rtok() -> Any:
    from ..toy_task import reversal_tokenizer

    return reversal_tokenizer()


def translator(c: Context) -> Any:
    return tc.Translator.from_checkpoint(c.run)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def weights(model: Any) -> Dict[str, np.ndarray]:
    return {n: p.value.copy() for n, p in model.parameters().items()}


def assert_unchanged(model: Any, before: Dict[str, np.ndarray]) -> None:
    for n, p in model.parameters().items():
        np.testing.assert_array_equal(p.value, before[n], err_msg=n)


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
    """A file of ``size`` bytes that uses no disk."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def write_pairs(path: Path, lines: Sequence[str], encoding: str = "utf-8", newline: str = "\n") -> Path:
    path.write_bytes((newline.join(lines) + newline).encode(encoding))
    return path


def toy_lines(n: int = 60, seed: int = 1) -> List[str]:
    from ..toy_task import write_tatoeba_file

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


def found(fragment: Fragment, text: str) -> bool:
    """Whether ``fragment`` (a string, case-insensitive, or a compiled pattern) is in ``text``."""
    if isinstance(fragment, str):
        return fragment.lower() in text.lower()
    return fragment.search(text) is not None


def raises(call: Callable[[], Any], types: Any, *fragments: Fragment) -> BaseException:
    """Call ``call``; it must raise one of ``types`` whose message holds every fragment."""
    try:
        value = call()
    except BaseException as exc:  # noqa: BLE001
        if not isinstance(exc, _types(types)):
            raise AssertionError(f"raised {type(exc).__name__}, expected {types}: {exc}") from exc
        missing = [f for f in fragments if not found(f, str(exc))]
        assert not missing, f"{type(exc).__name__}: {exc}  [missing {missing}]"
        return exc
    raise AssertionError(f"accepted: returned {value!r:.200}")


def lines_of(res: Result) -> List[str]:
    return res.out.split("\n")[:-1] if res.out.endswith("\n") else res.out.split("\n")


def error_lines(res: Result) -> List[str]:
    return [line for line in res.err.splitlines() if "error" in line]


def one_line_error(res: Result, *fragments: Fragment, status: int = 1) -> str:
    """``res`` failed with exit status ``status`` and one error line holding every fragment."""
    assert res.rc == status, (res.rc, res.err[-1000:])
    assert "Traceback" not in res.err and "internal error" not in res.err, res.err[-1000:]
    lines = error_lines(res)
    assert len(lines) == 1, res.err[-1000:]
    missing = [f for f in fragments if not found(f, lines[0])]
    assert not missing, f"{lines[0]}  [missing {missing}]"
    return lines[0]


def command(c: Context, *argv: str, stdin: bytes = b"", env: Optional[Dict[str, str]] = None) -> Result:
    """Run the command line from inside a case (a case that needs several commands), in a fresh
    interpreter with the runner's environment and limits inherited."""
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_cpp", *argv],
        input=stdin,
        capture_output=True,
        env=cli_env(env),
        cwd=c.work,
        timeout=300,
    )
    return Result(proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"))


def fail(message: str) -> None:
    raise AssertionError(message)


def parse_error(argv: List[str]) -> str:
    """Run the command line in this process up to its argument check: it must exit with status 2
    and one line on standard error, which is returned."""
    import io

    from transformer_cpp.cli import main

    err_text = io.StringIO()
    with contextlib.redirect_stderr(err_text), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code
        else:
            raise AssertionError(f"{argv}: no argument error")
    text = err_text.getvalue().strip()
    assert code == 2 and "Traceback" not in text and len(text.splitlines()) == 1, (code, text)
    return text


SENT = "The cat and the dog."


def linear_ref(lin: Any, x: np.ndarray) -> np.ndarray:
    p = lin.parameters()
    out = np.asarray(x, dtype=np.float64) @ p["weight"].value.T.astype(np.float64)
    return out + p["bias"].value if "bias" in p else out


def assert_close(a: Any, b: Any, tol: float = 1e-5) -> None:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, f"shape {a.shape}, expected {b.shape}"
    assert np.all(np.isfinite(a)), "non-finite values"
    assert np.allclose(a, b, rtol=tol, atol=tol), f"max difference {np.max(np.abs(a - b)):.3g}"


CORPUS = ["the cat sat on the mat", "¿qué tal? ¡muy bien!", "árbol y pájaro", "a dog, a house; water."] * 3


def ctok() -> Any:
    return tc.SubwordTokenizer.build_from_corpus(CORPUS, 300, min_frequency=1)


PAIRS = [f"The cat number {i}.\tEl gato número {i}.\tCC-BY 2.0 (France) #{i}" for i in range(12)]


def zip_file(c: Context, members: Dict[str, bytes], name: str = "spa-eng.zip") -> Path:
    path = c.work / name
    with zipfile.ZipFile(path, "w") as z:
        for member, payload in members.items():
            z.writestr(member, payload)
    return path


def encoded(n: int = 50) -> Any:
    from ..toy_task import reversal_pairs

    tok = rtok()
    src, tgt = reversal_pairs(n, seed=2)
    return tc.encode_pairs(src, tgt, tok, tok, None)
