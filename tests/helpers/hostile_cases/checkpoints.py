"""Checkpoints: saving, loading damaged or absurd ones, pointers, averaging, the run lock."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any, Callable, List, Optional

import numpy as np

import transformer_cpp as tc
from transformer_cpp import checkpoint as ck

from .base import (
    assert_close,
    api,
    copy_run,
    edit_config,
    edit_tensors,
    err,
    latest,
    raises,
    rewrite,
    rtok,
    small,
    sparse,
)


# --- checkpoints ---------------------------------------------------------------------------------


def _save(c, run: Optional[Path] = None, **kw: Any) -> Path:
    from ..toy_task import tiny_model

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
    from ..toy_task import tiny_model

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


err(
    "load: optimizer given as a string",
    lambda c: tc.load_checkpoint(c.run, optimizer="no"),
    "load_checkpoint: optimizer must be True or False",
    raises=TypeError,
)
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


# A damaged checkpoint whose files are huge (sparse, so cheap to make) fails at once naming the file,
# instead of reading gigabytes into memory (MemoryError, or the machine's memory).
def _huge(c, name: str, size: int, recorded: bool = False, **load_kw: Any) -> Any:
    """Load a copy of the run whose latest checkpoint's ``name`` is a sparse file of ``size`` bytes
    (``recorded``: its config.json records that size, as for a file written so)."""

    def damage(ckpt: Path) -> None:
        sparse(ckpt / name, size)
        if recorded:
            edit_config(ckpt, lambda cfg: cfg["files"][name].update(bytes=size))

    return _damaged(c, damage, **load_kw)


@api("load: latest is a 10 GB sparse file", expect="error", match=("latest",), timeout=30)
def _(c):
    run = copy_run(c)
    sparse(run / "latest", 10 << 30)
    return tc.load_checkpoint(run)


@api("load: config.json is a 10 GB sparse file", expect="error", match=("config.json",), timeout=30)
def _(c):
    return _huge(c, "config.json", 10 << 30)


@api(
    "load: model.safetensors is a 10 GB sparse file",
    expect="error",
    match=("model.safetensors' has 10737418240 bytes, expected",),
    timeout=30,
)
def _(c):
    return _huge(c, "model.safetensors", 10 << 30)


@api(
    "load: a 3 GB model.safetensors recorded as such",
    expect="error",
    match=("model.safetensors' has 3,221,225,472 bytes, more than such a file can hold",),
    timeout=30,
)
def _(c):
    return _huge(c, "model.safetensors", 3 << 30, recorded=True)


@api(
    "load: a 3 GB src_tokenizer.json recorded as such",
    expect="error",
    match=("src_tokenizer.json' has 3,221,225,472 bytes, more than such a file can hold",),
    timeout=30,
)
def _(c):
    return _huge(c, "src_tokenizer.json", 3 << 30, recorded=True, optimizer=False)


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
    "step must be an integer >= 0, got '12'",
)
err("load: format version 2", lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g.update(version=2))), "version")
err("load: files section missing", lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g.pop("files"))), "files")
err(
    "load: files entry is a string",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g["files"].update({"model.safetensors": "big"}))),
    "model.safetensors",
)
err(
    "load: a recorded size that is a string",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g["files"]["model.safetensors"].update(bytes="big"))),
    "records no valid size and SHA-256 for 'model.safetensors'",
)
err(
    "load: the data section is a list",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g.update(data=[1, 2]))),
    "the 'data' section of 'config.json' must be an object or null, got list",
)
err(
    "load: the train_config section is a string",
    lambda c: _damaged(c, lambda k: edit_config(k, lambda g: g.update(train_config="fast"))),
    "the 'train_config' section",
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
    from ..toy_task import tiny_model

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
        assert_close(p.value, want, 1e-6)
    _, same = tc.average_checkpoints([a, a])
    for n, p in same.parameters().items():
        assert np.array_equal(p.value, ma.parameters()[n].value), n


err(
    "average: a name that is not a checkpoint name",
    lambda c: tc.average_checkpoints([c.run / "epoch-0001", c.run / "epoch-0002"], c.work / "r", name="../x"),
    "name",
)


@api("mark_best: a name outside the run is refused, the pointer unchanged")
def _(c):
    run = copy_run(c)
    shutil.copytree(run / "epoch-0001", c.work / "outside")
    raises(
        lambda: ck.mark_best(run, "../outside"), tc.CheckpointError, "name '../outside' is not the name of a checkpoint"
    )
    assert (run / "best").read_text().strip() != "../outside"


@api("average: a checkpoint of another run is refused")
def _(c):
    run = copy_run(c)
    other = run / "epoch-0003"
    shutil.copytree(run / "epoch-0001", other)  # a checkpoint of another run, same architecture
    edit_config(other, lambda g: g.update(run_id="another-run"))
    raises(lambda: tc.average_checkpoints([run / "epoch-0001", other]), tc.CheckpointError, "belongs to another run")


err("mark_best: a missing checkpoint", lambda c: ck.mark_best(copy_run(c), "epoch-0042"), "epoch-0042")
err("resolve_checkpoint: prefer nonsense", lambda c: ck.resolve_checkpoint(c.run, prefer="newest"), "prefer")
err("lock_run: a file", lambda c: (c.work / "f").write_text("x") and ck.lock_run(c.work / "f").__enter__(), "f")


@api("save: two threads into one run")
def _(c):
    from ..toy_task import tiny_model

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


# --- what the user owns in a run directory --------------------------------------------------------


def _users_entry(c, name: str, kind: str) -> Path:
    run = c.work / "run"
    run.mkdir(exist_ok=True)
    if kind == "directory":
        (run / name).mkdir()
        (run / name / "notes.txt").write_text("mine")
    else:
        (run / name).write_text("mine")
    return run


for _name, _kind in (
    ("epoch-0001", "directory"),
    ("epoch-0001", "file"),
    ("averaged", "directory"),
    ("latest", "file"),
):

    @api(
        f"save_checkpoint: over a {_kind} of the user's named {_name}", "error", ("was not written by transformer-cpp",)
    )
    def _(c, name=_name, kind=_kind):
        run = _users_entry(c, name, kind)
        try:
            _save(c, name=None if name in ("latest", "epoch-0001") else name, trainer_state={"epoch": 1})
        finally:
            mine = run / name / "notes.txt" if kind == "directory" else run / name
            assert mine.read_text() == "mine", "the user's file was changed"


@api("lock_run: a .lock of the user's", "error", ("does not hold a process id",))
def _(c):
    run = _users_entry(c, ".lock", "file")
    try:
        with ck.lock_run(run):
            pass
    finally:
        assert (run / ".lock").read_text() == "mine"


@api("save_checkpoint: pruning leaves a checkpoint holding a note of the user's")
def _(c):
    first = _save(c, name="epoch-0001", run_id="r")
    (first / "notes.txt").write_text("mine")
    for epoch in (2, 3):
        _save(c, name=f"epoch-{epoch:04d}", run_id="r", keep=1)
    assert (first / "notes.txt").read_text() == "mine"
    assert [p.name for p in ck.list_checkpoints(c.work / "run")] == ["epoch-0001", "epoch-0003"]
