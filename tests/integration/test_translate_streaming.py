"""``transformer-cpp translate`` on a stream and on files: each line's translation arrives before
the next line is written, ``--input`` / ``--output`` (written atomically), ``--n-best``, the
warning about empty translations; on the reversal model, which translates exactly."""

from __future__ import annotations

import io
import os
import selectors
import subprocess
import sys

import pytest

from transformer_cpp.checkpoint import save_checkpoint
from transformer_cpp.cli.translate_io import StreamReader, atomic_output, progress_bar, split_lines
from transformer_cpp.translate import Translator

from helpers.cli import cli_env, interrupt, run_cli
from helpers.toy_task import reversal_pairs, tiny_model, trained_reversal_model
from helpers.toy_task import one_thread, tok  # noqa: F401  (shared fixtures)

SOURCES, TARGETS = reversal_pairs(40, seed=77)


@pytest.fixture(scope="module")
def run(tok, tmp_path_factory):
    """A checkpoint of the reversal model (it translates every sentence of the toy language)."""
    root = tmp_path_factory.mktemp("reversal")
    save_checkpoint(root, trained_reversal_model(tok), tok, tok, data={"src_lang": "en"}, optimizer=False)
    return root


def _translating(run, *args: str, **popen) -> subprocess.Popen:
    """``transformer-cpp translate --model RUN ARGS`` started, its three standard streams piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "transformer_cpp", "translate", "--model", str(run), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
        **popen,
    )


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    """The next line of the process's standard output, or a failure after ``timeout`` seconds."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout), f"no output line within {timeout} s"
    return proc.stdout.readline()


def test_each_line_is_translated_before_the_next_arrives(run):
    proc = _translating(run, "--threads", "1", text=True, bufsize=1)
    try:
        for source, target in zip(SOURCES[:3], TARGETS[:3]):
            proc.stdin.write(source + "\n")
            proc.stdin.flush()
            assert _readline(proc, 120) == target + "\n"  # while its standard input is still open
        rest, stderr = proc.communicate(timeout=60)  # closes its standard input
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and rest == "", stderr


def test_stream_reader_batches_what_is_ready():
    """A file fills every batch; lines that arrive apart are batches of their own."""
    data = "".join(f"{s}\n" for s in SOURCES[:10]).encode()
    batches = list(StreamReader(io.BufferedReader(io.BytesIO(data))).batches(4))
    assert [len(b) for b in batches] == [4, 4, 2]
    assert [line.text for b in batches for line in b] == SOURCES[:10]
    assert sum(line.size for b in batches for line in b) == len(data)
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream, os.fdopen(write, "wb", buffering=0) as feed:
        batches = StreamReader(stream).batches(64, wait=0.05)
        feed.write(b"a b\nc\n")
        assert [line.text for line in next(batches)] == ["a b", "c"]
        feed.write(b"d\r")  # a lone carriage return ends a line at once
        assert [line.text for line in next(batches)] == ["d"]
        feed.write(b"\ne\xff\n")  # ... and the line feed after it is not one more line
        feed.close()
        (bad,) = next(batches)
        assert bad.number == 4 and bad.text is None and "invalid start byte" in bad.problem
        assert next(batches, None) is None


def test_split_lines_keeps_every_line_end_across_chunks():
    text = b"one\r\ntwo\rthree\n\nlast"
    for cut in range(len(text) + 1):
        lines = list(split_lines([text[:cut], text[cut:]]))
        assert [raw for raw, _ in lines] == [b"one", b"two", b"three", b"", b"last"], cut
        assert sum(size for _, size in lines) == len(text), cut


def test_input_and_output_files(run, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{s}\n" for s in SOURCES[:30]) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    result = run_cli(
        "translate", "--model", str(run), "--input", str(source), "--output", str(out), "--batch-size", "8"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and "B/s" not in result.stderr  # no progress bar: standard error is no terminal
    assert out.read_text(encoding="utf-8") == "".join(f"{t}\n" for t in TARGETS[:30]) + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out.txt"]
    # the input is never overwritten, and arguments do not go with --input
    result = run_cli("translate", "--model", str(run), "--input", str(source), "--output", str(source))
    assert result.returncode == 1 and "is the --input file" in result.stderr
    result = run_cli("translate", "--model", str(run), "--input", str(source), "a b")
    assert result.returncode == 1 and "not both" in result.stderr
    result = run_cli("translate", "--model", str(run), "--input", str(tmp_path / "none.txt"))
    assert result.returncode == 1 and "--input" in result.stderr and "cannot be read" in result.stderr


def test_an_interrupted_translation_leaves_no_output_file(run, tmp_path):
    out = tmp_path / "out.txt"

    def being_written():
        return any(p.name.startswith(".out.txt.") for p in tmp_path.iterdir())

    proc = _translating(run, "--output", str(out))
    stderr = interrupt(proc, being_written, "output file being written", 120, feed=b"a b c\n", settle=1.0)
    assert proc.returncode == 130, stderr
    assert list(tmp_path.iterdir()) == [], "a partial output file is left"


def test_atomic_output_keeps_the_old_file_on_an_error(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("before\n")
    with pytest.raises(RuntimeError):
        with atomic_output(str(out)) as f:
            f.write("half\n")
            raise RuntimeError("stop")
    assert out.read_text() == "before\n" and [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_progress_bar_only_for_a_file_on_a_terminal(tmp_path):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    source = tmp_path / "in.txt"
    source.write_text("a\nb c\n")
    assert progress_bar(str(source), io.StringIO()) is None  # redirected standard error
    assert progress_bar(None, Terminal()) is None  # standard input
    bar = progress_bar(str(source), Terminal())
    assert bar is not None and bar.total == 6
    bar.close()


def test_n_best(run):
    result = run_cli("translate", "--model", str(run), "--beam-size", "4", "--n-best", "3", stdin="c a f\n\nb d\n")
    assert result.returncode == 0, result.stderr
    lines = [line.split(" ||| ") for line in result.stdout.splitlines()]
    assert [int(i) for i, _, _ in lines] == [0, 0, 0, 2, 2, 2]  # the blank line 1 has none
    assert lines[0][1] == "f a c" and lines[3][1] == "d b"
    for group in (lines[:3], lines[3:]):
        scores = [float(s) for _, _, s in group]
        assert scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)
        assert len({t for _, t, _ in group}) == 3
    for beam in ("2", "1"):
        result = run_cli("translate", "--model", str(run), "--beam-size", beam, "--n-best", "3", "a")
        assert result.returncode == 1 and "--n-best 3 needs" in result.stderr and "--beam-size 3" in result.stderr


def test_translate_batch_n_best_gives_the_hypotheses_with_scores(run):
    translator = Translator.from_checkpoint(run)
    (best,) = translator.translate_batch(["c a f"], beam_size=4, n_best=3)
    assert best.text == "f a c" and len(best.hypotheses) == 3
    assert best.hypotheses[0].text == best.text and best.hypotheses[0].score == pytest.approx(best.score, abs=0)
    scores = [h.score for h in best.hypotheses]
    assert scores == sorted(scores, reverse=True)
    (one,) = translator.translate_batch(["c a f"], beam_size=2, n_best=1)
    assert [h.text for h in one.hypotheses] == ["f a c"]
    with pytest.raises(ValueError, match="Translator: n_best 3 needs beam_size 3 or more"):
        translator.translate_batch(["a"], beam_size=2, n_best=3)
    with pytest.raises(ValueError, match=r"n_best must be an integer in \[1, 1024\]"):
        translator.translate_batch(["a"], beam_size=2, n_best=0)


def test_empty_translations_are_named_once(run, tok, tmp_path):
    """A model that ends every output at once (its end token forced by the output bias): each
    translation is empty, its line kept, and one warning line says how many and why."""
    model = tiny_model(tok)
    model.parameters()["output.bias"].value[tok.end_id] = 1e3
    save_checkpoint(tmp_path, model, tok, tok, data={"src_lang": "en"}, optimizer=False)
    result = run_cli("translate", "--model", str(tmp_path), "--batch-size", "2", stdin="a\n\nb c\nd\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "\n\n\n\n"
    (warning,) = [line for line in result.stderr.splitlines() if "warning" in line]
    assert "3 of 3 translated lines gave an empty translation" in warning
    assert "undertrained" in warning and "--max-output-tokens" in warning and "the model ended them at once" in warning
    good = run_cli("translate", "--model", str(run), stdin="a b\n\n")
    assert good.returncode == 0 and good.stdout == "b a\n\n" and "warning" not in good.stderr


def test_a_reader_that_leaves_ends_the_stream_quietly(run):
    """``translate | head -1``: once the output's reader has gone, the command stops without an error."""
    proc = _translating(run, "--threads", "1")
    try:
        proc.stdin.write(b"a b\n")
        proc.stdin.flush()
        assert _readline(proc, 120) == b"b a\n"
        proc.stdout.close()
        proc.stdin.write(b"c d\n")
        proc.stdin.close()
        proc.wait(timeout=60)
        stderr = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "error" not in stderr and "Traceback" not in stderr, stderr
