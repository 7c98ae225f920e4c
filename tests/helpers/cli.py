"""The command line as a user runs it: ``python -m transformer_cpp`` in a fresh interpreter (and
interrupted with Ctrl-C), the training options of the small runs the command-line tests train, and
another process holding a run directory's lock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Union

# A very small model: the point is the plumbing, not the translations.
TINY_MODEL = ["--preset", "tiny", "--d-model", "32", "--d-ff", "64", "--n-layers", "1", "--n-heads", "2"]
# The rest of a quick run: a short warm-up, a small vocabulary, no progress bar, one thread.
QUICK = ["--warmup", "20", "--vocab-size", "300", "--no-progress", "--threads", "1"]
SMALL = [*TINY_MODEL, "--batch-size", "32", *QUICK]
# ... on 200 of the file's pairs
SMALL_SAMPLED = [*SMALL, "--num-samples", "200"]
# Smaller still (width 16, batches of 64, BLEU on 20 validation sentences): the hostile-input
# fixture run and the user-files tests.
SMALLEST = [
    *("--preset", "tiny", "--d-model", "16", "--d-ff", "32", "--n-layers", "1", "--n-heads", "2"),
    *("--batch-size", "64", *QUICK, "--val-bleu-sentences", "20"),
]


def train_args(data: Union[str, Path], out: Union[str, Path], epochs: int, options: Sequence[str] = SMALL) -> List[str]:
    """The arguments of ``transformer-cpp train`` with ``options`` on ``data`` for ``epochs`` epochs into ``out``."""
    return ["train", *options, "--data", str(data), "--epochs", str(epochs), "--out", str(out)]


# Unset for every command: the data set's location (every command names its data) and the debug
# switch (an error is one line, not a traceback).
UNSET = ("TRANSFORMER_CPP_DATA", "TRANSFORMER_CPP_DEBUG")


def cli_env(env: Optional[Dict[str, str]] = None, *, isolated: bool = False) -> Dict[str, str]:
    """This process's environment without ``UNSET`` (with ``isolated``, without any of the
    package's variables and with one OpenMP thread), plus ``env``."""
    if isolated:
        out = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMER_CPP_")}
        out["OMP_NUM_THREADS"] = "1"
    else:
        out = {k: v for k, v in os.environ.items() if k not in UNSET}
    out.update(env or {})
    return out


def run_cli(
    *args: str,
    stdin: str = "",
    cwd: Optional[Union[str, Path]] = None,
    env: Optional[Dict[str, str]] = None,
    isolated: bool = False,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """``python -m transformer_cpp ARGS`` with ``stdin`` as its standard input, in ``cwd``, in
    ``cli_env(env, isolated=isolated)``; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "transformer_cpp", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=cli_env(env, isolated=isolated),
        timeout=timeout,
    )


def run_main(*args: str, blocked: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """The command line's ``main(ARGS)`` in a fresh interpreter (one OpenMP thread, no debug
    switch) where the modules in ``blocked`` cannot be imported."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("TRANSFORMER_CPP_DEBUG", None)
    prelude = "".join(f"sys.modules[{name!r}] = None; " for name in blocked)
    code = f"import sys; {prelude}from transformer_cpp.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)


def interrupt(
    proc: subprocess.Popen, ready: Callable[[], bool], what: str, wait: float, *, feed: bytes = b"", settle: float = 0.0
) -> Union[str, bytes]:
    """Ctrl-C for the running command ``proc`` once ``ready()`` (``feed`` first written to its
    standard input): fails if the command ends before, or if ``what`` is not ready after ``wait``
    seconds; SIGINT ``settle`` seconds after ``ready()``, then its standard error once it has ended
    (within 60 s). A command still running when this returns or fails is killed."""
    try:
        if feed:
            proc.stdin.write(feed)
            proc.stdin.flush()
        deadline = time.monotonic() + wait
        while not ready():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"no {what} after {wait:g} s"
            time.sleep(0.05)
        time.sleep(settle)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return stderr


@contextlib.contextmanager
def run_locked_elsewhere(run_dir: Union[str, Path]) -> Iterator[subprocess.Popen]:
    """Another process holding the lock of the run directory ``run_dir`` (``lock_run``, for 60 s at
    most) through the block: the block starts once it holds it, and it is killed after."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, transformer_cpp.checkpoint as ck\n"
            "with ck.lock_run(sys.argv[1]):\n    print('locked', flush=True); time.sleep(60)",
            str(run_dir),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield holder
    finally:
        holder.kill()
        holder.wait()
