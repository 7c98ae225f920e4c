"""The command line: every subcommand, its options, files, standard input and output, environment."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, List, Optional

import numpy as np

import transformer_cpp as tc
from transformer_cpp import checkpoint as ck

from ..cli import SMALLEST, run_locked_elsewhere
from .base import (
    PAIRS,
    zip_file,
    SENT,
    Context,
    Result,
    api,
    cli,
    command,
    copy_run,
    edit_config,
    edit_json_file,
    edit_tensors,
    err,
    fail,
    latest,
    lines_of,
    one_line_error,
    parse_error,
    raises,
    rtok,
    sparse,
    toy_lines,
    translator,
)


# --- the command line ----------------------------------------------------------------------------

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
    "translate: best and latest are 10 GB sparse files",
    _tr(SENT),
    match=("checkpoint pointer", "best", "is damaged"),
    prepare=_prep_run(lambda r: (sparse(r / "latest", 10 << 30), sparse(r / "best", 10 << 30))),
    timeout=60,
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
# (what translating reads of config.json; the optimiser step is only read to resume)
cli(
    "translate: data section is a list",
    _tr(SENT),
    match=("the 'data' section of 'config.json' must be an object or null, got list",),
    prepare=_prep_run(lambda r: [edit_config(k, lambda g: g.update(data=[1, 2])) for k in ck.list_checkpoints(r)]),
)
cli(
    "translate: train_config section is a string",
    _tr(SENT),
    match=("the 'train_config' section",),
    prepare=_prep_run(
        lambda r: [edit_config(k, lambda g: g.update(train_config="fast")) for k in ck.list_checkpoints(r)]
    ),
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
# under the 2 GB address-space limit, 1024 threads' stacks do not fit: refused in one line
cli(
    "translate: --threads 1024",
    _tr("--threads", "1024", SENT, model="fixture"),
    match=("set_num_threads: 1024 threads need", "ulimit -v"),
    needs_rlimit=True,
)
cli(
    "translate: --max-output-tokens 1",
    _tr("--max-output-tokens", "1", SENT, SENT, model="fixture"),
    expect="ok",
    check=_n_lines(2),
)


def _same_as_max_output_tokens_1_with_a_deprecation_line(c: Context, res: Result) -> None:
    assert len(lines_of(res)) == 2, res.out
    assert "translate: warning: --max-length is deprecated and will be removed; use --max-output-tokens" in res.err
    assert res.err.count("deprecated") == 1, res.err


cli(
    "translate: --max-length 1, the old spelling of --max-output-tokens",
    _tr("--max-length", "1", SENT, SENT, model="fixture"),
    expect="ok",
    check=_same_as_max_output_tokens_1_with_a_deprecation_line,
)
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
# every line end is one on standard input (old Mac ones too): one translation per sentence
for _what, _stdin in (
    ("lone carriage returns", b"The cat.\rThe dog.\r"),
    ("CR LF and no final line end", b"The cat.\r\nThe dog."),
    ("LF and a final carriage return", b"The cat.\nThe dog.\r"),
):
    cli(
        f"translate: {_what} on standard input",
        _tr(model="fixture"),
        expect="ok",
        stdin=_stdin,
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

# standard input in other forms than one sentence a line, each line ending with "\n"
for _what, _stdin, _lines in (
    ("Windows line endings", b"The cat.\r\nThe dog.\r\n", ("The cat.", "The dog.")),
    ("a byte-order mark", b"\xef\xbb\xbf" + SENT.encode() + b"\n", (SENT,)),
    ("no final newline", b"The cat.\nThe dog.", ("The cat.", "The dog.")),
):
    cli(f"translate: {_what}", _tr(model="fixture"), expect="ok", stdin=_stdin, check=_same_as_alone(*_lines))
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
    "translate: a 600-word line",
    _tr(model="fixture"),
    expect="either",
    partial=True,
    stdin=(("the cat " * 300) + "\nThe dog.\n").encode(),
    check=_n_lines(2),
    timeout=240,
)
cli("translate: stdout is /dev/full", _tr(SENT, model="fixture"), match=("space",), stdout="devfull")
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


def _lowered_with_a_warning(c: Context, res: Result) -> None:
    _same_as_alone(SENT)(c, res)
    assert "OMP_NUM_THREADS asks for 100000 threads" in res.err, res.err[-500:]


# under the 2 GB address-space limit the count is lowered (with a warning) instead of OpenMP killing
# the process at the first parallel loop
cli(
    "translate: OMP_NUM_THREADS=100000",
    _tr(SENT, model="fixture"),
    env={"OMP_NUM_THREADS": "100000"},
    expect="ok",
    check=_lowered_with_a_warning,
    needs_rlimit=True,
)
cli(
    "translate: best names a deleted average",
    _tr(SENT),
    match=("averaged",),
    prepare=_prep_run(lambda r: (r / "best").write_text("averaged\n")),
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


# a split rebuilt from whatever the recorded file holds by now is compared with the digest of the
# split the run held out
for _split in ("test", "valid"):
    cli(
        f"evaluate: the data file changed since training (--split {_split})",
        _ev("--split", _split, model="run"),
        prepare=_changed_data,
        match=(
            re.compile(f"the {_split} split rebuilt from '.*other.txt' differs from the one the run held out"),
            "500 pairs loaded now, 300 when the run was trained",
            "--pairs",
        ),
    )


def _moved_data(c: Context) -> None:
    run = copy_run(c)
    moved = c.work / "moved.txt"
    shutil.copyfile(c.data, moved)
    for ckpt in ck.list_checkpoints(run):
        edit_config(ckpt, lambda g: g["data"].update(path=str(moved)))


cli(
    "evaluate: the data file moved since training",
    _ev("--limit", "2", model="run"),
    expect="ok",
    prepare=_moved_data,
    check=_in_out("2 sentence pairs"),
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


def _averaged_not_utf8(c: Context, res: Result) -> None:
    run = c.work / os.fsdecode(b"r\xe9")  # Python keeps the byte as a lone surrogate
    assert (run / "averaged" / "model.safetensors").is_file(), "no average"
    assert tc.load_checkpoint(run).model.step >= 1


cli(
    "average: a run path that is not UTF-8",
    lambda c: ["average", "--model", str(c.work / os.fsdecode(b"r\xe9"))],
    expect="ok",
    prepare=lambda c: shutil.copytree(c.run, c.work / os.fsdecode(b"r\xe9")),
    check=_averaged_not_utf8,
)


def _another_runs_checkpoint(c: Context) -> None:
    run = copy_run(c)
    shutil.copytree(run / "epoch-0001", run / "epoch-0003")
    edit_config(run / "epoch-0003", lambda g: g.update(run_id="another-run"))


cli(
    "average: --last 3 over a checkpoint of another run",
    _av("--last", "3"),
    match=("belongs to another run",),
    prepare=_another_runs_checkpoint,
)

# figures
cli(
    "figures: --out is a file",
    lambda c: ["figures", "--out", str(c.work / "f")],
    match=("f",),
    prepare=lambda c: (c.work / "f").write_text("x"),
)
cli("figures: --out under /dev/null", lambda c: ["figures", "--out", "/dev/null/figs"], match=("/dev/null",))


# train
def _trn(*args: str, data: str = "fixture", out: str = "out") -> Callable[[Context], List[str]]:
    def argv(c: Context) -> List[str]:
        d = str(c.data if data == "fixture" else (c.work / data if not data.startswith("/") else data))
        return ["train", *SMALLEST, "--data", d, "--epochs", "1", "--out", str(c.work / out), *args]

    return argv


def _resume_run(*args: str) -> Callable[[Context], List[str]]:
    """``train --resume`` of the run in ``work/run`` with ``args``, without a progress bar."""
    return lambda c: ["train", "--out", str(c.work / "run"), "--resume", *args, "--no-progress"]


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
    match=("line 1 is longer than 4 MB",),
    prepare=lambda c: sparse(c.work / "huge.txt", 10 << 30),
)
cli(
    "train: --resume after latest was deleted",
    _resume_run("--epochs", "3"),
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
cli("train: --n-heads 3 with --d-model 16", _trn("--n-heads", "3"), match=("divisible",))
cli("train: --dropout nan", _trn("--dropout", "nan"), match=("dropout",))
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
    _resume_run("--d-model", "32"),
    match=("--d-model",),
    prepare=_prep_run(lambda r: None),
)
cli(
    "train: --resume with a damaged latest",
    _resume_run("--epochs", "3"),
    match=("model.safetensors",),
    prepare=_prep_run(lambda r: (latest(r) / "model.safetensors").write_bytes(b"x")),
)
cli(
    "train: --resume with a negative epoch in the trainer state",
    _resume_run("--epochs", "3"),
    match=("epoch",),
    prepare=_prep_run(lambda r: edit_json_file(latest(r), "trainer_state.json", lambda s: s.update(epoch=-3))),
)
cli(
    "train: --resume with a batch position beyond the epoch",
    _resume_run("--epochs", "3"),
    match=("batch",),
    prepare=_prep_run(
        lambda r: edit_json_file(latest(r), "trainer_state.json", lambda s: s.update(batch_in_epoch=10**6))
    ),
)
cli(
    "train: --resume with string sums in the trainer state",
    _resume_run("--epochs", "3"),
    match=("trainer",),
    prepare=_prep_run(
        lambda r: edit_json_file(
            latest(r), "trainer_state.json", lambda s: s.update(epoch_sums={"loss": "x", "correct": "y", "tokens": "z"})
        )
    ),
)
cli(
    "train: --resume to 3 epochs",
    _resume_run("--epochs", "3"),
    expect="ok",
    prepare=_prep_run(lambda r: None),
    check=lambda c, r: (
        None
        if latest(c.work / "run").name == "epoch-0003"
        else (_ for _ in ()).throw(AssertionError(latest(c.work / "run").name))
    ),
)


def _no_half_checkpoint(c: Context, res: Result) -> None:
    out = c.work / "out"
    left = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert not [n for n in left if n.startswith(".tmp-") or n.startswith("epoch-")], f"left behind: {left}"
    lines = [line for line in res.err.splitlines() if "error" in line]
    assert len(lines) == 1 and "writing checkpoint" in lines[0], res.err[-500:]


# RLIMIT_FSIZE makes a write fail as a full disk does: one line naming the checkpoint, and the run
# directory as it was (the weights alone are larger than the limit)
cli(
    "train: the disk fills up at the first checkpoint",
    _trn(),
    fsize=60_000,
    match=(
        re.compile(r"save_checkpoint: writing checkpoint '.*/out/epoch-0001' failed: File too large"),
        "is as it was",
    ),
    after=_no_half_checkpoint,
)
cli("train: --lr-scale 1e308", _trn("--lr-scale", "1e308"), match=("diverged",))
cli(
    "train: --precision bf16 on --resume of a float32 run",
    _resume_run("--precision", "bf16"),
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


def _nothing_written(name: str) -> Callable[[Context, Result], None]:
    def after(c: Context, res: Result) -> None:
        assert not (c.work / name).exists(), f"{name} was created"

    return after


def _quick(data: Callable[[Context], str], *args: str, out: str = "run") -> Callable[[Context], List[str]]:
    return lambda c: [
        "train",
        "--preset",
        "quick",
        "--data",
        data(c),
        "--no-progress",
        *args,
        "--out",
        str(c.work / out),
    ]


cli(
    "train: --batch-size that the quick preset's token budget would ignore",
    _quick(lambda c: str(c.data), "--batch-size", "16"),
    match=(
        "--batch-size 16 would be ignored: the quick preset cuts batches by tokens (max_tokens 1500); "
        "add --max-tokens 0",
    ),
    after=_nothing_written("run"),
)
# given with --max-tokens, it sizes the validation batches: accepted
cli(
    "train: --batch-size with --max-tokens in the quick preset",
    _quick(
        lambda c: str(c.data),
        *("--batch-size", "16", "--max-tokens", "300", "--time-budget", "0", "--epochs", "1"),
        *("--d-model", "16", "--d-ff", "32", "--n-layers", "1", "--n-heads", "2", "--threads", "1"),
        *("--num-samples", "50"),
    ),
    expect="ok",
    check=lambda c, r: None if tc.load_checkpoint(c.work / "run").model.step >= 1 else fail("no checkpoint"),
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
    prepare=lambda c: zip_file(c, {"a.txt": c.data.read_bytes(), "b.txt": c.data.read_bytes()}, "d.zip"),
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
    _quick(lambda c: str(c.data), "--drop-remainder"),
    match=("drop_remainder applies to batches of batch_size pairs",),
    after=_nothing_written("run"),
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


# --- options: bounded before any work, in the same words as the Python API ---------------------------

for _argv, _fragment in [
    (
        ["train", "--d-model", "1000000"],
        "argument --d-model: Transformer: d_model must be an integer in [1, 16384], got 1000000",
    ),
    (["train", "--n-layers", "100000"], "argument --n-layers: Transformer: n_layers must be an integer in [1, 256]"),
    (["train", "--dropout", "1"], "argument --dropout: Transformer: dropout must be a number in [0, 1), got 1.0"),
    (
        ["train", "--max-length", "1000000000"],
        "max_length must be 0 (automatic) or an integer in [2, 100000], got 1000000000",
    ),
    (["train", "--vocab-size", "5"], "argument --vocab-size: vocab_size must be an integer in [260, 1048576], got 5"),
    (
        ["train", "--num-samples", "-3"],
        "argument --num-samples: num_samples must be an integer in [0, 9223372036854775807]",
    ),
    (["train", "--split-seed", "99999999999999999999999"], "an integer in [0, 9223372036854775807]"),
    (["train", "--warmup", "1e3"], "argument --warmup: expected an integer, got '1e3'"),
    (["train", "--epochs", "0"], "argument --epochs: TrainConfig: epochs must be an integer in [1, 1000000], got 0"),
    (
        ["train", "--valid-fraction", "1.5"],
        "argument --valid-fraction: split_by_source: valid_fraction must be a number in [0, 1), got 1.5",
    ),
    (
        ["train", "--precision", "fp16"],
        "argument --precision: precision must be 'auto' or 'float32' or 'bf16', got 'fp16'",
    ),
    (["train", "--encoding", "klingon"], "argument --encoding: --encoding: unknown text encoding 'klingon'"),
    (["train", "--encoding", "utf-16"], "is not supported: lines must end with the byte 0x0A"),
    (["translate", "--model", "m", "--threads", "99999999999999999999"], "threads must be an integer in [1, 1024]"),
    (["evaluate", "--model", "m", "--limit", "-1"], "argument --limit: limit must be an integer in [0, "),
    (["average", "--model", "m", "--last", "0"], "argument --last: last must be an integer in [1, "),
]:
    cli(f"{_argv[0]}: {' '.join(_argv[-2:])}", (lambda a: lambda c: a)(_argv), match=(_fragment,), status=2)

# an empty path (an unset shell variable) is refused, never taken for the current directory
for _argv in [
    ["train", "--out", ""],
    ["train", "--data", ""],
    ["translate", "--model", ""],
    ["evaluate", "--model", ""],
    ["evaluate", "--model", "m", "--pairs", ""],
    ["evaluate", "--model", "m", "--output", ""],
    ["evaluate", "--model", "m", "--data", ""],
    ["average", "--model", ""],
    ["export", "--model", "m", "--to", "torch", ""],
    ["export", "--model", "", "--to", "torch", "x"],
    ["figures", "--out", ""],
    ["serve", "--model", ""],
]:
    _where = next(i for i, a in enumerate(_argv) if a == "")
    cli(
        f"{_argv[0]}: an empty {_argv[_where - 1] if _argv[_where - 1].startswith('--') else 'OUT'}",
        (lambda a: lambda c: a)(_argv),
        match=("expected a path, got an empty string (an unset variable?)",),
        status=2,
    )


def _train_option_says_the_same(flag: str, text: str, api_call: Callable[[], Any]) -> None:
    message = str(raises(api_call, ValueError))
    assert message.startswith("TrainConfig: "), message
    line = parse_error(["train", flag, text])
    assert f"argument {flag}: {message}" in line, line


for _flag, _text, _api in [
    ("--seed", "99999999999999999999999", lambda: tc.TrainConfig(seed=99999999999999999999999)),
    ("--epochs", "99999999999999999999", lambda: tc.TrainConfig(epochs=99999999999999999999)),
    ("--fixed-lr", "nan", lambda: tc.TrainConfig(fixed_lr=float("nan"))),
    ("--fixed-lr", "-1", lambda: tc.TrainConfig(fixed_lr=-1.0)),
    ("--lr-scale", "0", lambda: tc.TrainConfig(lr_scale=0.0)),
    ("--clip-norm", "-0.5", lambda: tc.TrainConfig(clip_norm=-0.5)),
    ("--clip-norm", "inf", lambda: tc.TrainConfig(clip_norm=float("inf"))),
    ("--label-smoothing", "1", lambda: tc.TrainConfig(label_smoothing=1.0)),
    ("--label-smoothing", "-0.1", lambda: tc.TrainConfig(label_smoothing=-0.1)),
    ("--batch-size", "0", lambda: tc.TrainConfig(batch_size=0)),
    ("--max-tokens", "1000000000000", lambda: tc.TrainConfig(max_tokens=10**12)),
    ("--time-budget", "1e300", lambda: tc.TrainConfig(time_budget=1e300)),
    ("--threads", "100000", lambda: tc.TrainConfig(threads=100000)),
    ("--keep-checkpoints", "-1", lambda: tc.TrainConfig(keep_checkpoints=-1)),
]:
    api(f"train {_flag} {_text} and TrainConfig say the same")(
        (lambda f, t, a: lambda c: _train_option_says_the_same(f, t, a))(_flag, _text, _api)
    )


def _rtranslator() -> Any:
    from ..toy_task import tiny_model

    tok = rtok()
    return tc.Translator(tiny_model(tok), tok, tok, src_lang=None)


def _decoding_option_says_the_same(flag: str, text: str, option: str, value: Any) -> None:
    translator = _rtranslator()
    tok = translator.src_tokenizer
    if option == "max_output_tokens":
        call = lambda: tc.Translator(translator.model, tok, tok, max_output_tokens=value)  # noqa: E731
    else:
        call = lambda: translator.translate_batch(["a b"], **{option: value})  # noqa: E731
    message = str(raises(call, ValueError))
    assert message.startswith(f"Translator: {option} must be "), message
    for command_ in ("translate", "evaluate"):
        if command_ == "evaluate" and option == "max_output_tokens":
            continue
        line = parse_error([command_, "--model", "m", flag, text])
        assert f"argument {flag}: {message}" in line, line


for _flag, _text, _option, _value in [
    ("--beam-size", "1000000", "beam_size", 1000000),
    ("--beam-size", "0", "beam_size", 0),
    ("--length-penalty", "inf", "length_penalty", float("inf")),
    ("--length-penalty", "nan", "length_penalty", float("nan")),
    ("--length-penalty", "-1", "length_penalty", -1.0),
    ("--batch-size", "0", "batch_size", 0),
    ("--max-output-tokens", "1000000000", "max_output_tokens", 1000000000),
]:
    api(f"translate and evaluate {_flag} {_text} and Translator say the same")(
        (lambda f, t, o, v: lambda c: _decoding_option_says_the_same(f, t, o, v))(_flag, _text, _option, _value)
    )
err(
    "translator: a per-call max_output_tokens 0",
    lambda c: _rtranslator().translate("a b", max_output_tokens=0),
    "Translator: max_output_tokens must be",
    raises=ValueError,
)


# --- sizes beyond the memory, runs that cannot train or diverge ---------------------------------------


def _nothing_read(name: str) -> Callable[[Context, Result], None]:
    def after(c: Context, res: Result) -> None:
        assert "loaded" not in res.err, "the data was read"
        assert not (c.work / name).exists(), f"{name} was created"

    return after


# refused by the core's memory check before anything is allocated, before the data is read
cli(
    "train: --d-model 16384 --n-layers 256",
    lambda c: (
        ["train", "--preset", "tiny", "--data", str(c.data), "--no-progress", "--threads", "1"]
        + ["--d-model", "16384", "--n-layers", "256", "--out", str(c.work / "a")]
    ),
    match=("needs", "more than"),
    after=_nothing_read("a"),
)


def _last_good_state_saved(c: Context, res: Result) -> None:
    line = [line for line in res.err.splitlines() if "error" in line][0]
    saved = line.split("the state before it is saved in ")[1].split(";")[0]
    ckpt = tc.load_checkpoint(saved)
    out = c.work / "out"
    assert ckpt.path == out / (out / "latest").read_text().strip(), (ckpt.path, saved)
    assert not ckpt.model.nonfinite_parameters() and ckpt.model.step >= 1


cli(
    "train: a diverging run stops with a checkpoint of the last good state",
    _trn("--epochs", "2", "--fixed-lr", "1e30"),
    match=("training diverged at step", "the state before it is saved in"),
    after=_last_good_state_saved,
)


def _no_loss_of_nothing(c: Context, res: Result) -> None:
    assert "loss 0.0000" not in res.err
    assert not (c.work / "out").exists()


cli(
    "train: --drop-remainder with a batch larger than the data",
    _trn("--drop-remainder", "--batch-size", "100000"),
    match=("no training batch", "drop_remainder"),
    after=_no_loss_of_nothing,
)
cli(
    "train: --max-length 2 leaves no usable pair",
    _trn("--max-length", "2"),
    match=("the train split has no usable pair", "longer than max_length=2", "raise --max-length"),
)
cli(
    "train: --out under a file is refused before the data is read",
    lambda c: ["train", *SMALLEST, "--data", str(c.work / "missing.txt"), "--out", str(c.work / "file" / "run")],
    match=("--out", "cannot be written"),  # not the missing data: nothing was read
    prepare=lambda c: (c.work / "file").write_text("x"),
    after=lambda c, r: None if "loaded" not in r.err else fail("the data was read"),
)


# --- damaged checkpoints -------------------------------------------------------------------------------


def _nan_bias(run: Path) -> None:
    for k in ck.list_checkpoints(run):  # checksums updated: only the values are wrong
        edit_tensors(k, "model.safetensors", lambda t: t["decoder.layers.0.norm2.bias"].__setitem__(3, np.nan))


cli(
    "translate: a NaN weight with its checksum updated",
    _tr("The cat."),
    match=("'decoder.layers.0.norm2.bias' (1 NaN",),
    prepare=_prep_run(_nan_bias),
)
# an architecture no memory holds: refused before allocation, not killed by the kernel
for _key, _value in (("max_length", 10**12), ("d_model", 10**7), ("src_vocab_size", 2**62)):
    cli(
        f"translate: {_key} {_value} in config.json",
        _tr("The cat."),
        match=("config.json' is invalid",),
        prepare=_prep_run(
            (
                lambda k, v: (
                    lambda r: [edit_config(p, lambda g: g["model"].update({k: v})) for p in ck.list_checkpoints(r)]
                )
            )(_key, _value)
        ),
    )


@api("train: a second writer of a run fails at once")
def _(c):
    run_dir = copy_run(c)
    shutil.rmtree(run_dir / "epoch-0002")  # a run of one epoch
    for pointer in ("latest", "best"):
        (run_dir / pointer).write_text("epoch-0001\n")
    (run_dir / ".tmp-latest-4242-0123abcd").write_text("epoch-00")  # a pointer write killed half-way
    with run_locked_elsewhere(run_dir) as holder:
        started = time.monotonic()
        res = command(c, "train", "--out", str(run_dir), "--resume", "--epochs", "2", "--no-progress")
        one_line_error(res, f"run directory '{run_dir}' is in use by another process (process {holder.pid})")
        assert time.monotonic() - started < 60 and "loaded" not in res.err
        one_line_error(command(c, "average", "--model", str(run_dir), "--last", "1"), "holds 1 checkpoint")
    res = command(c, "train", "--out", str(run_dir), "--resume", "--epochs", "2", "--no-progress")
    assert res.rc == 0, res.err
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".tmp-")]


# --- text in, text out: undecodable bytes and other encodings ------------------------------------------


def _translated_alone(c: Context) -> str:
    return translator(c).translate(SENT)


def _fails_only_its_own_lines(c: Context, res: Result) -> None:
    expected = _translated_alone(c)
    assert res.rc == 1, res.rc
    assert res.out.split("\n") == [expected, "", "", expected, "", ""], res.out  # aligned with the input lines
    assert "line 2 is not valid UTF-8 (invalid continuation byte at byte 8 (b'\\xe9'))" in res.err, res.err
    assert "line 5 is not valid UTF-8 (unexpected end of data at byte 1" in res.err, res.err
    assert "2 of 5 lines not translated (see above)" in res.err and "line 3 " not in res.err, res.err


cli(
    "translate: lines that are not UTF-8 on standard input fail alone",
    _tr(model="fixture"),
    stdin=b"The cat and the dog.\nThe caf\xe9 and \xff.\n\nThe cat and the dog.\r\n\xc3\n",
    partial=True,
    check=_fails_only_its_own_lines,
)


def _too_long_fails_alone(c: Context, res: Result) -> None:
    expected = _translated_alone(c)
    assert res.rc == 1, res.rc
    assert res.out.split("\n") == [expected, "", expected, ""], res.out
    assert "line 2 cannot be translated: greedy_decode: max_length" in res.err, res.err[-1000:]
    assert "1 of 3 lines not translated" in res.err and res.err.count("has 100002 tokens") == 1, res.err[-1000:]


# a sentence too long for the memory fails alone too (its batch is retried sentence by sentence)
cli(
    "translate: a sentence too long for the memory fails alone",
    _tr(model="fixture"),
    stdin=b"The cat and the dog.\n" + b"the cat and the dog " * 20000 + b"\nThe cat and the dog.\n",
    partial=True,
    check=_too_long_fails_alone,
    timeout=120,
)


def _argument_fails_alone(c: Context, res: Result) -> None:
    assert res.rc == 1 and res.out.split("\n") == ["", _translated_alone(c), ""], (res.rc, res.out)
    assert "argument 1 is not valid UTF-8" in res.err, res.err


# Python keeps undecodable bytes of an argument as lone surrogates
cli(
    "translate: an argument that is not UTF-8 fails alone",
    _tr(os.fsdecode(b"bad \xff"), SENT, model="fixture"),
    partial=True,
    check=_argument_fails_alone,
)


def _latin1_pairs(path: Path, n: int = 120) -> Path:
    """A pairs file in Latin-1: every third Spanish sentence has an accented letter."""
    lines = []
    for i in range(n):
        es = f"El {'árbol' if i % 3 == 0 else 'perro'} y el gato {i}."
        lines.append(f"The {'tree' if i % 3 == 0 else 'dog'} and the cat number {i}.\t{es}")
    path.write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    return path


def _latin1_scored(kept: int, *err_fragments: str) -> Callable[[Context, Result], None]:
    def check(c: Context, res: Result) -> None:
        assert f"latin1.txt: {kept} sentence pairs" in res.out, res.out[-500:]
        for f in err_fragments:
            assert f in res.err, (f, res.err[-1000:])

    return check


cli(
    "evaluate: --pairs in Latin-1 reports its undecodable lines and scores the rest",
    _ev("--pairs", "latin1.txt"),
    expect="ok",
    prepare=lambda c: _latin1_pairs(c.work / "latin1.txt", 12),
    check=_latin1_scored(
        8,
        "left out 4 of 12 lines (0 empty, 0 without a tab, 0 with an empty side, 4 not valid utf-8)",
        "not valid utf-8, left out: lines 1, 4, 7 and 10",
    ),
)
cli(
    "evaluate: --pairs in Latin-1 with --encoding latin-1",
    _ev("--pairs", "latin1.txt", "--encoding", "latin-1"),
    expect="ok",
    prepare=lambda c: _latin1_pairs(c.work / "latin1.txt", 12),
    check=_latin1_scored(12),
)
cli(
    "evaluate: --output in a missing directory is refused before the model is read",
    _ev("--pairs", "latin1.txt", "--output", "no/h"),
    match=("--output", "cannot be written"),
    prepare=lambda c: _latin1_pairs(c.work / "latin1.txt", 12),
    after=lambda c, r: None if "loaded" not in r.err else fail("the model was read"),
)
cli(
    "train: data in Latin-1 is refused, naming the line and --encoding",
    _trn(data="latin1.txt"),
    match=(re.compile(r"'.*latin1\.txt' line 1 is not valid utf-8: invalid continuation byte"), "--encoding"),
    prepare=lambda c: _latin1_pairs(c.work / "latin1.txt"),
)


def _trained_from_latin1(c: Context, res: Result) -> None:
    assert f"loaded 120 sentence pairs from {c.work / 'latin1.txt'}\n" in res.err, res.err[-1000:]
    info = json.loads((c.work / "out" / "epoch-0001" / "config.json").read_text())["data"]
    assert info["encoding"] == "iso8859-1" and info["decode_errors"] == "strict", info
    again = command(c, "evaluate", "--model", str(c.work / "out"), "--split", "valid")  # rebuilt with the encoding
    assert again.rc == 0, again.err[-1000:]


cli(
    "train: data in Latin-1 with --encoding latin-1",
    _trn("--encoding", "latin-1", data="latin1.txt"),
    expect="ok",
    prepare=lambda c: _latin1_pairs(c.work / "latin1.txt"),
    check=_trained_from_latin1,
)
cli(
    "train: data in Latin-1 with --decode-errors skip",
    _trn("--decode-errors", "skip", data="latin1.txt"),
    expect="ok",
    prepare=lambda c: _latin1_pairs(c.work / "latin1.txt"),
    check=lambda c, r: (
        None if "left out 40 of 120 lines" in r.err and "lines 1, 4, 7" in r.err else fail(r.err[-1000:])
    ),
)


# --- what the user owns: never replaced, overwritten or deleted -----------------------------------


def _users_dir(where: str, name: str = "notes.txt") -> Callable[[Context], None]:
    """A prepare step: a directory of the user's, ``<work>/<where>``, holding one note."""

    def prepare(c: Context) -> None:
        (c.work / where).mkdir(parents=True)
        (c.work / where / name).write_text("mine")

    return prepare


def _still_there(*paths: str, text: str = "mine") -> Callable[[Context, Result], None]:
    def after(c: Context, res: Result) -> None:
        for path in paths:
            assert (c.work / path).read_text() == text, f"{path} was changed"

    return after


cli(
    "train: --out holds a directory of the user's named like a checkpoint",
    _trn(),
    prepare=_users_dir("out/epoch-0001"),
    match=("out/epoch-0001'", "transformer-cpp did not write", "no checkpoint manifest"),
    after=_still_there("out/epoch-0001/notes.txt"),
)
cli(
    "train: --out holds a file of the user's named like a pointer",
    _trn(),
    prepare=lambda c: ((c.work / "out").mkdir(), (c.work / "out" / "best").write_text("mine")),
    match=("out/best'", "does not hold one checkpoint name"),
    after=_still_there("out/best"),
)
cli(
    "train: --out holds other files of the user's",
    _trn("--keep-checkpoints", "1"),
    prepare=lambda c: ((c.work / "out").mkdir(), (c.work / "out" / ".tmp-notes").write_text("mine")),
    expect="ok",
    check=lambda c, r: _still_there("out/.tmp-notes")(c, r),
)
cli(
    "train --resume: a directory of the user's where the next checkpoint goes",
    _resume_run("--epochs", "3", "--threads", "1"),
    prepare=lambda c: (copy_run(c), _users_dir("run/epoch-0003")(c)),
    match=("run/epoch-0003'", "did not write"),
    after=_still_there("run/epoch-0003/notes.txt"),
)
cli(
    "average: a file of the user's named averaged",
    _av(),
    prepare=lambda c: (copy_run(c), (c.work / "run" / "averaged").write_text("mine")),
    match=("run/averaged' was not written by transformer-cpp",),
    after=_still_there("run/averaged"),
)
cli(
    "average: a directory of the user's named averaged",
    _av(),
    prepare=lambda c: (copy_run(c), _users_dir("run/averaged")(c)),
    match=("run/averaged' was not written by transformer-cpp", "no checkpoint manifest"),
    after=_still_there("run/averaged/notes.txt"),
)
cli(
    "average: a checkpoint's directory holding a note of the user's",
    _av("--last", "2"),
    prepare=lambda c: (
        copy_run(c),
        command(c, "average", "--model", str(c.work / "run")),
        (c.work / "run" / "averaged" / "notes.txt").write_text("mine"),
    ),
    match=("holds 'notes.txt', which its manifest does not list",),
    after=_still_there("run/averaged/notes.txt"),
)
cli(
    "average --mark-best: a best of the user's",
    _av("--mark-best"),
    prepare=lambda c: (copy_run(c), (c.work / "run" / "best").write_text("mine")),
    match=("run/best' was not written by transformer-cpp",),
    after=lambda c, r: (
        _still_there("run/best")(c, r) if not (c.work / "run" / "averaged").exists() else fail("averaged")
    ),
)
cli(
    "evaluate: --output is the --pairs file",
    lambda c: _ev("--pairs", str(c.work / "p.txt"), "--output", str(c.work / "p.txt"))(c),
    prepare=_pairs_file("p.txt", "\n".join(PAIRS).encode()),
    match=("is the --pairs file",),
    after=lambda c, r: None if (c.work / "p.txt").read_bytes() == "\n".join(PAIRS).encode() else fail("overwritten"),
)
cli(
    "evaluate: --output is a link to the data file",
    lambda c: _ev("--output", str(c.work / "link.txt"))(c),
    prepare=lambda c: (c.work / "link.txt").symlink_to(c.data),
    match=("is the data file",),
)
cli(
    "evaluate: --output is the checkpoint's config.json",
    lambda c: _ev("--output", str(latest(c.work / "run") / "config.json"), model="run")(c),
    prepare=_prep_run(lambda r: None),
    match=("a file of the checkpoint",),
)


def _one_line_skipped(c: Context, res: Result) -> None:
    assert f"line 2 of {c.work / 'p.txt'} cannot be scored here, left out" in res.err, res.err[-1000:]
    assert "11 sentence pairs (1 left out" in res.out, res.out[-500:]
    outputs = (c.work / "h.txt").read_text().split("\n")[:-1]
    assert len(outputs) == 12 and outputs[1] == "" and all(o for i, o in enumerate(outputs) if i != 1)


cli(
    "evaluate: one pair too long to translate here",
    lambda c: _ev("--pairs", str(c.work / "p.txt"), "--output", str(c.work / "h.txt"))(c),
    prepare=_pairs_file(
        "p.txt",
        "\n".join(PAIRS[:1] + [f"{' '.join(['The cat and the dog'] * 20_000)}.\tEl gato."] + PAIRS[1:11]).encode(),
    ),
    expect="ok",
    check=_one_line_skipped,
)


def _resumed_newest_and_best(newest: str) -> Callable[[Context, Result], None]:
    """Pruning keeps the newest checkpoint and the best one (which the run may have moved to the
    newest): nothing else, and never the checkpoint `best` names."""

    def check(c: Context, res: Result) -> None:
        best = (c.work / "run" / "best").read_text().strip()
        have = sorted(p.name for p in ck.list_checkpoints(c.work / "run"))
        assert have == sorted({newest, best}), (have, best)

    return check


def _resume(*args: str) -> Callable[[Context], List[str]]:
    return _resume_run("--threads", "1", *args)


cli(
    "train --resume --keep-checkpoints 1",
    _resume("--epochs", "3", "--keep-checkpoints", "1"),
    prepare=_prep_run(lambda r: (r / "best").write_text("epoch-0002\n")),
    expect="ok",
    check=_resumed_newest_and_best("epoch-0003"),
)
cli(
    "train --resume --average-last 3",
    _resume("--epochs", "3", "--average-last", "3"),
    prepare=_prep_run(lambda r: None),
    expect="ok",
    check=lambda c, r: (
        None
        if json.loads((c.work / "run" / "averaged" / "config.json").read_text())["data"]["averaged_from"]
        == ["epoch-0001", "epoch-0002", "epoch-0003"]
        else fail("not averaged")
    ),
)


def _enormous_line(c: Context) -> None:
    lines = c.data.read_text(encoding="utf-8").splitlines()
    huge = " ".join(["the cat and the dog"] * 40_000)
    lines.insert(100, f"{huge}.\t{huge}.\tCC-BY")
    (c.work / "big.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


cli(
    "train: one enormous line with --num-samples 0",
    _trn("--num-samples", "0", data="big.txt"),
    prepare=_enormous_line,
    expect="ok",
    check=lambda c, r: (
        None
        if "data file line 101 (at least 200,00" in r.err and "left out of training" in r.err
        else fail(r.err[-1500:])
    ),
)


def _tokenizer_with_a_regex(run: Path) -> None:
    def edit(doc: Any) -> None:
        split = {"type": "Split", "pattern": {"Regex": r"(\w+\s?)*$"}, "behavior": "Isolated", "invert": False}
        tokenizer = doc["tokenizer"]
        tokenizer["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, tokenizer["pre_tokenizer"]]}

    for ckpt in ck.list_checkpoints(run):
        edit_json_file(ckpt, "src_tokenizer.json", edit)


cli(
    "translate: a tokenizer file with a pathological regular expression",
    _tr("a" * 5000 + "!"),
    prepare=_prep_run(_tokenizer_with_a_regex),
    match=("src_tokenizer.json", "not a tokenizer this program writes", "pre_tokenizer.type"),
)
