"""The language model's commands (``train-lm``, ``generate``, ``evaluate-lm``): one writer per run
directory, every option checked at the door, damaged checkpoints and trainer states named by file
and field, characters the model cannot encode, and runs of one task given to the other's commands.

The language-model run the cases use is trained once (a width-16 model, 4 steps on a tiny text)
into the run's temporary directory by the first case that needs it; each case copies it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List

from transformer_cpp import checkpoint as ck

from .base import (
    Context,
    Result,
    api,
    cli,
    command,
    edit_config,
    edit_json_file,
    latest,
    one_line_error,
    parse_error,
    sparse,
)

LM_ARCH = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--d-ff", "32", "--seq-len", "16"]
LM_TRAINING = ["--batch-size", "4", "--eval-chars", "256", "--threads", "1", "--no-progress"]


def lm_text(c: Context) -> Path:
    from ..toy_task import write_tiny_text

    path = c.root / "lm-text.txt"
    if not path.exists():
        write_tiny_text(c.root / "lm-text.tmp", 240).rename(path)
    return path


def lm_run(c: Context) -> Path:
    """The shared language-model run (trained here the first time)."""
    run = c.root / "lm-run"
    if not run.exists():
        tmp = c.root / f"lm-run.tmp-{os.getpid()}"
        res = command(
            c, "train-lm", "--text", str(lm_text(c)), "--out", str(tmp), *LM_ARCH, *LM_TRAINING, "--steps", "4"
        )
        assert res.rc == 0, res.err[-2000:]
        tmp.rename(run)
    return run


def lm_copy(c: Context) -> Path:
    dst = c.work / "lm"
    if not dst.exists():
        shutil.copytree(lm_run(c), dst)
    return dst


def _damaged(damage: Callable[[Path], Any]) -> Callable[[Context], None]:
    """A prepare step: copy the run to <work>/lm and damage its latest checkpoint."""
    return lambda c: damage(latest(lm_copy(c)))


def _resume(c: Context) -> List[str]:
    return ["train-lm", "--out", str(c.work / "lm"), "--resume", "--steps", "8", "--no-progress", "--threads", "1"]


def _generate(c: Context, *more: str) -> List[str]:
    return ["generate", "--model", str(c.work / "lm"), "--max-output-tokens", "5", *more]


def _evaluate(c: Context, *more: str) -> List[str]:
    return ["evaluate-lm", "--model", str(c.work / "lm"), *more]


# --- one writer per run directory ----------------------------------------------------------------


@api("train-lm: a second writer fails at once, before reading the text")
def _(c):
    out = c.work / "lm-new"
    with ck.lock_run(out):
        res = command(c, "train-lm", "--text", str(c.work / "missing.txt"), "--out", str(out), *LM_ARCH, "--steps", "2")
        one_line_error(res, f"run directory '{out}' is in use by another process (process {os.getpid()})")
    assert sorted(p.name for p in out.iterdir()) == [".lock"], list(out.iterdir())


@api("train-lm: a second writer of a run fails at once and leaves it as it was")
def _(c):
    run = lm_copy(c)
    before = sorted(p.name for p in run.iterdir())
    with ck.lock_run(run):
        res = command(c, *_resume(c))
        one_line_error(res, "is in use by another process")
        assert "resuming" not in res.err and "resuming" not in res.out, res.err
    assert sorted(p.name for p in run.iterdir()) == before
    res = command(c, *_resume(c))  # the lock released, the same command continues the run
    assert res.rc == 0 and latest(run).name.endswith("batch-000008"), res.err[-1000:]


# --- options checked at the door ----------------------------------------------------------------

_BAD_OPTIONS: Dict[str, Dict[str, List[str]]] = {
    "train-lm": {
        "--steps": ["0", "-1", "inf", "nan"],
        "--time-budget": ["-1", "inf", "nan"],
        "--epochs": ["0", "-1", "inf", "nan"],
        "--seq-len": ["0", "-1", "inf"],
        "--batch-size": ["0", "-1", "nan"],
        "--warmup": ["-1", "nan"],
        "--lr-scale": ["0", "-1", "inf", "nan"],
        "--clip-norm": ["-1", "inf", "nan"],
        "--eval-every": ["0", "-1", "inf"],
        "--eval-chars": ["1", "0", "-5", "nan"],
        "--keep-checkpoints": ["-1", "nan"],
        "--average-last": ["-1", "inf"],
        "--threads": ["0", "-1", "nan"],
        "--d-model": ["0", "-8", "nan"],
        "--n-layers": ["0", "-1"],
        "--n-heads": ["0", "-2"],
        "--d-ff": ["0", "-1"],
        "--dropout": ["-0.1", "1", "inf", "nan"],
        "--memory-length": ["-1", "inf"],
        "--lsh-hashes": ["0", "-1"],
        "--lsh-chunk": ["0", "-1"],
        "--lsh-buckets": ["-1", "nan"],
        "--encoding": ["klingon", "utf-16"],
        "--checkpoint-every": ["0", "-5", "nan"],
    },
    "generate": {
        "--temperature": ["-1", "-1e-300", "inf", "nan"],
        "--top-k": ["-1", "nan"],
        "--top-p": ["0", "-0.5", "1.5", "inf", "nan"],
        "--seed": ["-1", "inf", "nan", "2.5"],
        "--max-output-tokens": ["-1", "nan"],
        "--threads": ["0", "-1"],
    },
    "evaluate-lm": {
        "--seq-len": ["-3", "0", "nan"],
        "--memory-length": ["-1", "nan", "inf"],
        "--clamp-len": ["-1", "nan"],
        "--threads": ["0", "-1"],
    },
}


def _refused_at_the_door(subcommand: str, option: str, values: List[str]) -> Callable[[Context], None]:
    def case(c: Context) -> None:
        head = [subcommand, "--out" if subcommand == "train-lm" else "--model", str(c.work / "lm")]
        for value in values:
            line = parse_error([*head, f"{option}={value}"])
            assert f"argument {option}" in line, (value, line)
            assert any(w in line for w in ("must be", "expected", "unknown", "not supported")), (value, line)
            assert "invalid" not in line, (value, line)  # argparse's own words name nothing allowed
        assert not (c.work / "lm").exists()

    return case


for _command, _options in _BAD_OPTIONS.items():
    for _option, _values in _options.items():
        api(f"{_command}: {_option} {' '.join(_values)} refused at the door")(
            _refused_at_the_door(_command, _option, _values)
        )


def _one_checkpoint_at_the_end(c: Context, res: Result) -> None:
    run = c.work / "lm-new"
    assert [p.name for p in run.iterdir() if p.name.startswith("epoch-")] == ["epoch-0001-batch-000003"], res.err
    assert "--checkpoint-every is deprecated" in res.err and "use --eval-every" in res.err, res.err
    assert "bits per character on the held-out test text" in res.out, res.out


cli(
    "train-lm: --checkpoint-every inf trains and saves at the end",
    lambda c: (
        ["train-lm", "--text", str(lm_text(c)), "--out", str(c.work / "lm-new"), *LM_ARCH, *LM_TRAINING]
        + ["--steps", "3", "--checkpoint-every", "inf"]
    ),
    expect="ok",
    check=_one_checkpoint_at_the_end,
)


def _as_greedy(c: Context, res: Result) -> None:
    greedy = command(c, *_generate(c, "--prompt", "the ", "--temperature", "0"))
    assert greedy.rc == 0 and res.out == greedy.out, (res.out, greedy.out)


cli(
    "generate: a subnormal --temperature samples as 0 does",
    lambda c: _generate(c, "--prompt", "the ", "--temperature", "1e-310"),
    expect="ok",
    prepare=lm_copy,
    check=_as_greedy,
)
cli(
    "evaluate-lm: --memory-length for a model without a memory",
    lambda c: _evaluate(c, "--memory-length", "4"),
    match=("--memory-length needs a model with attention 'relative'", "'softmax'"),
    prepare=lm_copy,
)


# --- damaged checkpoints and trainer states ------------------------------------------------------

_STATE_FIELDS = (
    "format version epoch batch_in_epoch step dropout_calls epoch_sums epoch_seconds window window_steps "
    "history data_fingerprint elapsed finished best run_id world_size"
).split()


def _without(field: str) -> Callable[[Path], None]:
    return lambda ckpt: edit_json_file(ckpt, "trainer_state.json", lambda s: s.pop(field) and s)


def _set_state(field: str, value: Any) -> Callable[[Path], None]:
    return lambda ckpt: edit_json_file(ckpt, "trainer_state.json", lambda s: s.update({field: value}))


for _field in _STATE_FIELDS:
    cli(
        f"train-lm --resume: trainer_state.json without {_field}",
        _resume,
        match=("trainer_state.json", f"'{_field}'"),
        prepare=_damaged(_without(_field)),
    )
    cli(
        f"train-lm --resume: trainer_state.json with a list for {_field}",
        _resume,
        match=("trainer_state.json", _field),
        prepare=_damaged(_set_state(_field, [1])),
    )
cli(
    "train-lm --resume: trainer_state.json is a list",
    _resume,
    match=("trainer_state.json", "must be a JSON object, got list"),
    prepare=_damaged(lambda ckpt: edit_json_file(ckpt, "trainer_state.json", lambda s: [1, 2])),
)
cli(
    "train-lm --resume: a history of words in trainer_state.json",
    _resume,
    match=("trainer_state.json", "history.epoch.val_bpc must be a list of numbers"),
    prepare=_damaged(
        lambda ckpt: edit_json_file(ckpt, "trainer_state.json", lambda s: s["history"]["epoch"].update(val_bpc=["x"]))
    ),
)
cli(
    "train-lm --resume: a data fingerprint of numbers in trainer_state.json",
    _resume,
    match=("trainer_state.json", "data_fingerprint"),
    prepare=_damaged(_set_state("data_fingerprint", {"train": 5, "valid": 6})),
)


def _edit_request(edit: Callable[[Dict[str, Any]], Any]) -> Callable[[Path], None]:
    return lambda ckpt: edit_config(ckpt, lambda cfg: edit(cfg["data"]["request"]))


def _edit_optimizer(edit: Callable[[Dict[str, Any]], Any]) -> Callable[[Path], None]:
    return lambda ckpt: edit_config(ckpt, lambda cfg: edit(cfg["optimizer"]))


for _name, _argv, _damage, _match in [
    ("generate: junk model.safetensors", _generate, lambda k: _junk(k, "model.safetensors"), ("model.safetensors",)),
    ("evaluate-lm: junk vocabulary.json", _evaluate, lambda k: _junk(k, "vocabulary.json"), ("vocabulary.json",)),
    ("generate: truncated vocabulary.json", _generate, lambda k: _cut(k, "vocabulary.json"), ("vocabulary.json",)),
    ("generate: junk config.json", _generate, lambda k: (k / "config.json").write_bytes(b"{x"), ("config.json",)),
    ("generate: no model.safetensors", _generate, lambda k: (k / "model.safetensors").unlink(), ("model.safetensors",)),
    (
        "train-lm --resume: junk optimizer.safetensors",
        _resume,
        lambda k: _junk(k, "optimizer.safetensors"),
        ("optimizer.safetensors",),
    ),
    (
        "generate: a negative seq_len in the request",
        _generate,
        _edit_request(lambda r: r.update(seq_len=-4)),
        ("config.json", "seq_len must be an integer >= 1, got -4"),
    ),
    (
        "generate: a memory_length of text in the request",
        _generate,
        _edit_request(lambda r: r.update(memory_length="x")),
        ("config.json", "memory_length", "'x'"),
    ),
    (
        "evaluate-lm: a batch_size of text in the request",
        _evaluate,
        _edit_request(lambda r: r.update(batch_size="x")),
        ("config.json", "batch_size", "'x'"),
    ),
    (
        "evaluate-lm: an unknown encoding in the request",
        _evaluate,
        _edit_request(lambda r: r.update(encoding="klingon")),
        ("config.json", "unknown text encoding 'klingon'"),
    ),
    (
        "train-lm --resume: an unknown encoding in the request",
        _resume,
        _edit_request(lambda r: r.update(encoding="klingon")),
        ("config.json", "unknown text encoding 'klingon'"),
    ),
    (
        "train-lm --resume: an optimiser step of text",
        _resume,
        _edit_optimizer(lambda o: o.update(step="x")),
        ("config.json", "step must be an integer >= 0, got 'x'"),
    ),
    (
        "train-lm --resume: 'saved' of the optimiser as a string",
        _resume,
        _edit_optimizer(lambda o: o.update(saved="no")),
        ("config.json", "saved must be True or False"),
    ),
    (
        "train-lm --resume: a run_id that is a number",
        _resume,
        lambda k: edit_config(k, lambda cfg: cfg.update(run_id=5)),
        ("config.json", "run_id"),
    ),
]:
    cli(_name, _argv, match=_match, prepare=_damaged(_damage))


def _junk(ckpt: Path, name: str) -> None:
    from .base import rewrite

    rewrite(ckpt, name, b"junk")


def _cut(ckpt: Path, name: str) -> None:
    data = (ckpt / name).read_bytes()
    (ckpt / name).write_bytes(data[: len(data) // 2])


# --- characters the model cannot encode ---------------------------------------------------------


def _counts_unknown(c: Context, res: Result) -> None:
    line = res.out.strip()
    assert "bits per character on the" in line and "(21 characters; 3 not in the model's vocabulary" in line, line


def _unknown_text(c: Context) -> None:
    lm_copy(c)
    (c.work / "other.txt").write_text("a dog ZZ ran\nthe Qat\n", encoding="utf-8")


cli(
    "evaluate-lm: characters the model cannot encode are counted",
    lambda c: _evaluate(c, "--text", str(c.work / "other.txt")),
    expect="ok",
    prepare=_unknown_text,
    check=_counts_unknown,
)
cli(
    "evaluate-lm: a text of one character",
    lambda c: _evaluate(c, "--text", str(c.work / "one.txt")),
    match=("one.txt", "holds 1 character", "at least 2"),
    prepare=lambda c: (lm_copy(c), (c.work / "one.txt").write_text("a", encoding="utf-8")),
)
cli(
    "generate: a prompt with a character the model cannot encode",
    lambda c: _generate(c, "--prompt", "the Zoo"),
    match=("character 'Z' at position 4 is not in the model's vocabulary",),
    prepare=lm_copy,
)


# --- a run of one task given to the other's commands ---------------------------------------------

_LM_RUN = ("holds a language model (trained by train-lm)", "use it with transformer-cpp generate or evaluate-lm")
_TRANSLATION_RUN = ("holds a translation model (trained by train)", "translate, evaluate or serve")

for _name, _argv in [
    ("translate", lambda c: ["translate", "--model", str(c.work / "lm"), "The cat."]),
    ("evaluate", lambda c: ["evaluate", "--model", str(c.work / "lm"), "--data", str(c.data)]),
    ("serve", lambda c: ["serve", "--model", str(c.work / "lm"), "--port", "0"]),
    ("export --to torch", lambda c: ["export", "--model", str(c.work / "lm"), "--to", "torch", str(c.work / "x")]),
    (
        "export --to ctranslate2",
        lambda c: ["export", "--model", str(c.work / "lm"), "--to", "ctranslate2", str(c.work / "y")],
    ),
]:
    cli(f"{_name}: a language model's run", _argv, match=_LM_RUN[:1], prepare=lm_copy)
for _name, _argv in [
    ("generate", lambda c: ["generate", "--model", str(c.run)]),
    ("evaluate-lm", lambda c: ["evaluate-lm", "--model", str(c.run)]),
    ("train-lm --resume", lambda c: ["train-lm", "--out", str(c.run), "--resume", "--steps", "3"]),
]:
    cli(f"{_name}: a translation model's run", _argv, match=_TRANSLATION_RUN)


def _lm_unchanged(c: Context, res: Result) -> None:
    assert json.loads((latest(c.work / "lm") / "config.json").read_text())["kind"] == "language_model"


cli(
    "translate: a language model's checkpoint names the commands to use",
    lambda c: ["translate", "--model", str(latest(c.work / "lm")), "The cat."],
    match=_LM_RUN,
    prepare=lm_copy,
    after=_lm_unchanged,
)


cli(
    "train --resume: a language model's run is refused before any data is read",
    lambda c: ["train", "--out", str(c.work / "lm"), "--resume", "--data", str(c.work / "no-such-pairs.tsv")],
    match=_LM_RUN,
    prepare=lm_copy,
    after=_lm_unchanged,
)


cli(
    "train-lm: a batch too large for the memory is refused before its windows are built",
    lambda c: (
        ["train-lm", "--text", str(lm_text(c)), "--out", str(c.work / "lm-big"), *LM_ARCH, *LM_TRAINING]
        + ["--d-model", "512", "--d-ff", "2048", "--batch-size", "1000000", "--steps", "1"]
    ),
    match=("a batch of 1000000 sequences of length 17 needs", "more than"),
)


# --- a text file too large to read -----------------------------------------------------------------

_HUGE_TEXT = ("huge.txt' has 3,221,225,472 bytes, more than a language-model text may have (1,073,741,824 at most)",)
cli(
    "train-lm: --text is a 3 GB sparse file, refused before it is read",
    lambda c: [
        "train-lm",
        "--text",
        str(sparse(c.work / "huge.txt", 3 << 30)),
        "--out",
        str(c.work / "lm-new"),
        *LM_ARCH,
    ],
    match=_HUGE_TEXT,
)
cli(
    "evaluate-lm: --text is a 3 GB sparse file, refused before it is read",
    lambda c: _evaluate(c, "--text", str(sparse(c.work / "huge.txt", 3 << 30))),
    match=_HUGE_TEXT,
    prepare=lm_copy,
)
