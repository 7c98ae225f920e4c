"""Checkpoints: round trip, damaged or incomplete directories, atomic writes, keeping the newest."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import transformer_cpp as tc
import transformer_cpp.checkpoint as ck
from transformer_cpp.checkpoint import (
    CheckpointError,
    checkpoint_name,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    read_checkpoint_config,
    save_checkpoint,
)

from helpers.toy_task import reversal_pairs, tiny_model
from helpers.toy_task import one_thread, tok  # noqa: F401  (shared fixtures)


@pytest.fixture(scope="module")
def trained(tok):
    """A model after a few Adam steps, so that weights and moments are not at their initial values."""
    model = tiny_model(tok, dropout=0.1, seed=3)
    model.configure_optimizer(warmup=10, clip_norm=2.0, label_smoothing=0.1)
    src, tgt = reversal_pairs(64, seed=5)
    enc = tc.encode_pairs(src, tgt, tok, tok, 8)
    for b in tc.batches(enc, 16, seed=0):
        model.train_step(b.src, b.tgt_in, b.tgt_out)
    return model, enc


def _save(run, model, tok, name="epoch-0001", **kw):
    kw.setdefault("trainer_state", {"epoch": 1, "note": "état"})
    kw.setdefault("train_config", {"batch_size": 16})
    kw.setdefault("data", {"split_seed": 0, "src_lang": "en"})
    return save_checkpoint(run, model, tok, tok, name=name, **kw)


def test_round_trip(tmp_path, tok, trained):
    model, enc = trained
    path = _save(tmp_path, model, tok)
    assert path == tmp_path / "epoch-0001"
    assert sorted(os.listdir(path)) == [
        "config.json",
        "model.safetensors",
        "optimizer.safetensors",
        "src_tokenizer.json",
        "tgt_tokenizer.json",
        "trainer_state.json",
    ]
    assert (tmp_path / "latest").read_text().strip() == "epoch-0001"
    for where in (tmp_path, path):  # run directory (follows latest) or checkpoint directory
        ck_ = load_checkpoint(where)
        assert ck_.path == path and ck_.optimizer_loaded
        m = ck_.model
        assert m.config == model.config and m.optimizer_config == model.optimizer_config
        assert (m.step, m.dropout_calls) == (model.step, model.dropout_calls) and model.step == 4
        for name, p in model.parameters().items():
            np.testing.assert_array_equal(m.parameters()[name].value, p.value, err_msg=name)
        for name, p in model.optimizer_state().items():
            assert np.any(p.value != 0), name
            np.testing.assert_array_equal(m.optimizer_state()[name].value, p.value, err_msg=name)
        assert ck_.src_tokenizer == tok and ck_.tgt_tokenizer == tok
        assert ck_.trainer_state == {"epoch": 1, "note": "état"}
        assert ck_.train_config == {"batch_size": 16} and ck_.data == {"split_seed": 0, "src_lang": "en"}
        np.testing.assert_array_equal(m.forward(enc.src, enc.tgt[:, :-1]), model.forward(enc.src, enc.tgt[:, :-1]))
    # the next training step is the same too (Adam moments, step, dropout counter)
    b = next(tc.batches(enc, 16, seed=1))
    restored = load_checkpoint(path).model
    assert restored.train_step(b.src, b.tgt_in, b.tgt_out) == model.train_step(b.src, b.tgt_in, b.tgt_out)


def test_config_is_plain_json_and_tensors_are_safetensors(tmp_path, tok, trained):
    model, _ = trained
    path = _save(tmp_path, model, tok)
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["format"] == "transformer_cpp.checkpoint" and cfg["model"] == model.config
    assert set(cfg["files"]) == {
        "model.safetensors",
        "optimizer.safetensors",
        "src_tokenizer.json",
        "tgt_tokenizer.json",
        "trainer_state.json",
    }
    from safetensors.numpy import load_file

    weights = load_file(str(path / "model.safetensors"))
    assert set(weights) == set(model.parameters())
    moments = load_file(str(path / "optimizer.safetensors"))
    assert set(moments) == set(model.optimizer_state())
    assert read_checkpoint_config(tmp_path) == (path, cfg)


def test_translation_only_checkpoint(tmp_path, tok, trained):
    model, _ = trained
    path = _save(tmp_path, model, tok, optimizer=False)
    assert not (path / "optimizer.safetensors").exists()
    loaded = load_checkpoint(path, optimizer=False)
    assert not loaded.optimizer_loaded and loaded.model.step == 0
    with pytest.raises(CheckpointError, match="without optimiser state"):
        load_checkpoint(path)


# --- damaged checkpoints ----------------------------------------------------------------------


def _damage_truncate(path):
    f = path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:1000])


def _damage_flip_byte(path):
    f = path / "optimizer.safetensors"
    data = bytearray(f.read_bytes())
    data[-10] ^= 0xFF
    f.write_bytes(bytes(data))


def _damage_bad_json(path):
    (path / "config.json").write_text('{"format": "transformer_cpp.checkpoint", "model": {')


def _damage_state_json(path):
    (path / "trainer_state.json").write_text("{not json")


def _damage_missing(path):
    (path / "tgt_tokenizer.json").unlink()


def _damage_shape(path):
    cfg = json.loads((path / "config.json").read_text())
    cfg["model"]["d_ff"] = 48  # the saved feed-forward weights have 64 rows
    (path / "config.json").write_text(json.dumps(cfg))


def _damage_version(path):
    cfg = json.loads((path / "config.json").read_text())
    cfg["version"] = 99
    (path / "config.json").write_text(json.dumps(cfg))


def _damage_not_a_checkpoint(path):
    (path / "config.json").write_text('{"hello": 1}')


@pytest.mark.parametrize(
    "damage, message",
    [
        (_damage_truncate, r"model.safetensors' has 1000 bytes, expected \d+ \(truncated"),
        (_damage_flip_byte, r"optimizer.safetensors' is damaged"),
        (_damage_bad_json, r"config.json' is not valid JSON"),
        (_damage_state_json, r"trainer_state.json' has 9 bytes, expected"),
        (_damage_missing, r"incomplete: 'tgt_tokenizer.json' is missing"),
        (_damage_shape, r"tensor '.*feed_forward.*' has shape \(\d+, \d+\), the architecture in config.json needs"),
        (_damage_version, r"format version 99 is not supported"),
        (_damage_not_a_checkpoint, r"not a transformer_cpp checkpoint"),
    ],
)
def test_damaged_checkpoint_raises_a_clear_error(tmp_path, tok, trained, damage, message):
    path = _save(tmp_path, trained[0], tok)
    damage(path)
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(tmp_path)
    assert isinstance(info.value, ValueError)
    assert str(path) in str(info.value)


def test_damaged_tensor_file_with_matching_checksum(tmp_path, tok, trained):
    """A well-formed file whose tensors do not fit (checksums updated, so only the content is wrong)."""
    model, _ = trained
    path = _save(tmp_path, model, tok)
    cfg = json.loads((path / "config.json").read_text())

    def rewrite(tensors):
        save_file(tensors, str(path / "model.safetensors"))
        data = (path / "model.safetensors").read_bytes()
        cfg["files"]["model.safetensors"] = {"bytes": len(data), "sha256": ck.files.sha256(data)}
        (path / "config.json").write_text(json.dumps(cfg))

    weights = {k: p.value.copy() for k, p in model.parameters().items()}
    missing = dict(weights)
    missing.pop("decoder.output.weight" if "decoder.output.weight" in missing else next(reversed(missing)))
    rewrite(missing)
    with pytest.raises(CheckpointError, match="missing 1 tensor"):
        load_checkpoint(path)
    wrong_dtype = {k: v.astype(np.float64) for k, v in weights.items()}
    rewrite(wrong_dtype)
    with pytest.raises(CheckpointError, match="is float64, the model is float32"):
        load_checkpoint(path)
    (path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    data = (path / "model.safetensors").read_bytes()
    cfg["files"]["model.safetensors"] = {"bytes": len(data), "sha256": ck.files.sha256(data)}
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_checkpoint(path)


def test_missing_or_wrong_paths(tmp_path, tok, trained):
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        load_checkpoint(tmp_path / "nothing-here")
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        load_checkpoint(tmp_path)
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(CheckpointError, match="is a file"):
        load_checkpoint(tmp_path / "file.txt")
    _save(tmp_path, trained[0], tok)
    (tmp_path / "latest").write_text("epoch-0042\n")
    with pytest.raises(CheckpointError, match="names 'epoch-0042', which does not exist"):
        load_checkpoint(tmp_path)
    (tmp_path / "latest").write_text("../elsewhere\n")
    with pytest.raises(CheckpointError, match="damaged"):
        load_checkpoint(tmp_path)


def test_save_rejects_bad_arguments(tmp_path, tok, trained):
    model, _ = trained
    small = tc.SubwordTokenizer.build_from_corpus(["a b"] * 3, 8, min_frequency=1)
    with pytest.raises(ValueError, match="src_tokenizer has 8 tokens but the model's src_vocab_size is 17"):
        save_checkpoint(tmp_path, model, small, tok)
    with pytest.raises(ValueError, match="not a checkpoint name"):
        save_checkpoint(tmp_path, model, tok, tok, name="my-best")
    with pytest.raises(ValueError, match="JSON"):
        save_checkpoint(tmp_path, model, tok, tok, trainer_state={"x": object()})
    with pytest.raises(ValueError, match="JSON"):
        save_checkpoint(tmp_path, model, tok, tok, trainer_state={"x": float("nan")})
    assert list_checkpoints(tmp_path) == [] and not (tmp_path / "latest").exists()
    assert not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())


# --- atomic writes ----------------------------------------------------------------------------


def test_crash_while_writing_keeps_the_previous_checkpoint(tmp_path, tok, trained, monkeypatch):
    model, enc = trained
    first = _save(tmp_path, model, tok, name="epoch-0001")
    expected = model.forward(enc.src, enc.tgt[:, :-1])
    real_write = ck.saving.write_bytes
    calls = []

    def crash_on_third_file(path, data):
        calls.append(path.name)
        if len(calls) == 3:
            real_write(path, data[: len(data) // 2])  # half a file on disk...
            raise OSError("disk full (simulated)")  # ...then the crash
        real_write(path, data)

    monkeypatch.setattr(ck.saving, "write_bytes", crash_on_third_file)
    model.configure_optimizer(warmup=10, clip_norm=2.0, label_smoothing=0.1)
    with pytest.raises(OSError, match="simulated"):
        _save(tmp_path, model, tok, name="epoch-0002")
    monkeypatch.setattr(ck.saving, "write_bytes", real_write)
    assert latest_checkpoint(tmp_path) == first
    assert list_checkpoints(tmp_path) == [first]
    assert not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())  # the temporary is removed
    np.testing.assert_array_equal(load_checkpoint(tmp_path).model.forward(enc.src, enc.tgt[:, :-1]), expected)


def test_crash_before_the_pointer_moves(tmp_path, tok, trained, monkeypatch):
    model, _ = trained
    first = _save(tmp_path, model, tok, name="epoch-0001")

    def crash(run, name):
        raise KeyboardInterrupt

    monkeypatch.setattr(ck.saving, "write_pointer", crash)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, model, tok, name="epoch-0002")
    monkeypatch.undo()
    # the new directory is complete but `latest` still names the old one, which loads
    assert (tmp_path / "epoch-0002" / "config.json").is_file()
    assert load_checkpoint(tmp_path).path == first


def test_leftover_temporary_directory_is_ignored_and_cleaned(tmp_path, tok, trained):
    model, _ = trained
    _save(tmp_path, model, tok, name="epoch-0001")
    # what a killed process leaves behind: a hidden temporary directory with some files
    stale = tmp_path / ".tmp-epoch-0002-12345-abcdef12"
    shutil.copytree(tmp_path / "epoch-0001", stale)
    (stale / "model.safetensors").write_bytes(b"half")
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0001"]
    assert load_checkpoint(tmp_path).path.name == "epoch-0001"
    _save(tmp_path, model, tok, name="epoch-0002")
    assert not stale.exists()


def test_saving_the_same_name_again_replaces_it(tmp_path, tok, trained):
    model, _ = trained
    _save(tmp_path, model, tok, name="epoch-0001", trainer_state={"run": 1})
    _save(tmp_path, model, tok, name="epoch-0001", trainer_state={"run": 2})
    assert load_checkpoint(tmp_path).trainer_state == {"run": 2}
    assert [p.name for p in tmp_path.iterdir()] and not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())


# --- names and keeping the newest -------------------------------------------------------------


def test_checkpoint_names_and_order():
    assert checkpoint_name(3) == "epoch-0003"
    assert checkpoint_name(3, 17) == "epoch-0004-batch-000017"
    names = ["epoch-0004", "epoch-0002", "epoch-0003-batch-000009", "epoch-0003", "epoch-0003-batch-000010"]
    keys = sorted(names, key=ck.layout.order_key)
    assert keys == ["epoch-0002", "epoch-0003-batch-000009", "epoch-0003-batch-000010", "epoch-0003", "epoch-0004"]
    assert ck.layout.order_key("latest") is None and ck.layout.order_key(".tmp-epoch-0001-1-a") is None
    with pytest.raises(ValueError):
        checkpoint_name(-1)


def test_keeps_the_last_five(tmp_path, tok, trained):
    model, _ = trained
    for epoch in range(1, 8):
        _save(tmp_path, model, tok, name=checkpoint_name(epoch))
        if epoch == 4:
            _save(tmp_path, model, tok, name=checkpoint_name(4, 3))
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["epoch-0004", "epoch-0005-batch-000003", "epoch-0005", "epoch-0006", "epoch-0007"]
    assert latest_checkpoint(tmp_path).name == "epoch-0007"
    _save(tmp_path, model, tok, name=checkpoint_name(8), keep=0)
    assert len(list_checkpoints(tmp_path)) == 6  # 0 keeps everything that is there
    _save(tmp_path, model, tok, name=checkpoint_name(9), keep=1)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0009"]


# --- non-finite values ------------------------------------------------------------------------


def _rewrite_tensors(path, fname, tensors):
    """Write ``tensors`` as ``fname`` and update config.json's size and checksum, so that only the
    values are wrong."""
    save_file(tensors, str(path / fname))
    data = (path / fname).read_bytes()
    cfg = json.loads((path / "config.json").read_text())
    cfg["files"][fname] = {"bytes": len(data), "sha256": ck.files.sha256(data)}
    (path / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize(
    "fname, bad", [("model.safetensors", np.nan), ("model.safetensors", -np.inf), ("optimizer.safetensors", np.inf)]
)
def test_loading_non_finite_values_fails_naming_the_tensor(tmp_path, tok, trained, fname, bad):
    model, _ = trained
    path = _save(tmp_path, model, tok)
    source = model.parameters() if fname == "model.safetensors" else model.optimizer_state()
    tensors = {k: np.array(p.value) for k, p in source.items()}
    name = sorted(tensors)[3]
    tensors[name].flat[1] = bad
    _rewrite_tensors(path, fname, tensors)
    kind = "1 NaN, 0 infinite" if np.isnan(bad) else "0 NaN, 1 infinite"
    with pytest.raises(CheckpointError, match=rf"'{fname}' holds non-finite values, in tensor '{name}' \({kind} of"):
        load_checkpoint(path)
    if fname == "optimizer.safetensors":  # translating does not read the moments
        assert load_checkpoint(path, optimizer=False).model.config == model.config


def test_saving_non_finite_weights_is_refused(tmp_path, tok, trained):
    model, _ = trained
    copy = load_checkpoint(_save(tmp_path / "good", model, tok)).model
    name = "decoder.layers.0.norm1.weight"
    copy.parameters()[name].value[2] = np.nan
    with pytest.raises(ValueError, match=rf"save_checkpoint: the model holds non-finite values, in '{name}' \(1 NaN"):
        save_checkpoint(tmp_path / "bad", copy, tok, tok)
    assert not (tmp_path / "bad").exists() or list_checkpoints(tmp_path / "bad") == []


# --- housekeeping: pruning, temporaries, the lock ---------------------------------------------


def test_pruning_deletes_only_complete_checkpoints_of_this_run(tmp_path, tok, trained):
    model, _ = trained
    first = _save(tmp_path, model, tok, name="epoch-0001", run_id="run-a")
    # a damaged directory with a checkpoint's name (from a crash, or copied in) and a complete
    # checkpoint of another run: neither is counted, kept in place of a good one, or deleted
    damaged = tmp_path / "epoch-0099"
    shutil.copytree(first, damaged)
    (damaged / "model.safetensors").write_bytes(b"half")
    foreign = tmp_path / "epoch-0050"
    shutil.copytree(_save(tmp_path / "other", model, tok, name="epoch-0050", run_id="run-b"), foreign)
    for epoch in range(2, 7):
        _save(tmp_path, model, tok, name=checkpoint_name(epoch), run_id="run-a", keep=3)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0004", "epoch-0005", "epoch-0006", "epoch-0050"]
    assert damaged.is_dir() and [p.name for p in list_checkpoints(tmp_path, complete=False)][-1] == "epoch-0099"
    assert json.loads((foreign / "config.json").read_text())["run_id"] == "run-b"
    assert [p.name for p in list_checkpoints(tmp_path, run_id="run-a")] == ["epoch-0004", "epoch-0005", "epoch-0006"]
    assert load_checkpoint(tmp_path).path.name == "epoch-0006"  # latest: the one just written


def test_pruning_keeps_best_and_the_run_id_carries_on(tmp_path, tok, trained):
    model, _ = trained
    _save(tmp_path, model, tok, name="epoch-0001")
    ck.mark_best(tmp_path, "epoch-0001")
    for epoch in range(2, 5):
        _save(tmp_path, model, tok, name=checkpoint_name(epoch), keep=2)  # run id: the one latest names
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0001", "epoch-0003", "epoch-0004"]
    ids = {json.loads((p / "config.json").read_text())["run_id"] for p in list_checkpoints(tmp_path)}
    assert len(ids) == 1 and load_checkpoint(tmp_path).run_id in ids


def test_a_new_best_moves_best_before_pruning(tmp_path, tok, trained):
    # epoch 1 was best; epoch 4 beats it: with keep=1 only epoch 4 stays (best and newest), the
    # old best is pruned like any other instead of staying behind as neither
    model, _ = trained
    _save(tmp_path, model, tok, name="epoch-0001", best=True)
    for epoch in (2, 3):
        _save(tmp_path, model, tok, name=checkpoint_name(epoch), keep=1)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0001", "epoch-0003"]
    _save(tmp_path, model, tok, name=checkpoint_name(4), keep=1, best=True)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0004"]
    assert ck.best_checkpoint(tmp_path) == tmp_path / "epoch-0004"


def test_a_pointer_file_is_the_checkpoint_it_names(tmp_path, tok, trained):
    model, _ = trained
    _save(tmp_path, model, tok, name="epoch-0001")
    _save(tmp_path, model, tok, name="epoch-0002")
    ck.mark_best(tmp_path, "epoch-0001")
    assert ck.resolve_checkpoint(tmp_path / "best") == tmp_path / "epoch-0001"
    assert ck.resolve_checkpoint(tmp_path / "latest") == tmp_path / "epoch-0002"
    assert load_checkpoint(tmp_path / "best").path.name == "epoch-0001"
    (tmp_path / "best").write_text("epoch-0042\n")
    with pytest.raises(CheckpointError, match="names 'epoch-0042', which does not exist"):
        ck.resolve_checkpoint(tmp_path / "best")
    (tmp_path / "epoch-0003").mkdir()  # a directory that is not a checkpoint
    (tmp_path / "best").write_text("epoch-0003\n")
    with pytest.raises(CheckpointError, match="names 'epoch-0003', which holds no 'config.json'"):
        ck.resolve_checkpoint(tmp_path / "best")
    (tmp_path / "notes").write_text("epoch-0001\n")  # any other file is still refused, naming what is allowed
    with pytest.raises(CheckpointError, match="is a file; expected a run directory .* 'latest' or 'best' pointer"):
        ck.resolve_checkpoint(tmp_path / "notes")


def test_a_half_deleted_checkpoint_is_not_listed_and_leftovers_are_cleaned(tmp_path, tok, trained, monkeypatch):
    model, _ = trained
    _save(tmp_path, model, tok, name="epoch-0001")
    _save(tmp_path, model, tok, name="epoch-0002")
    # a deletion killed half-way: the checkpoint was renamed first, so it is no longer listed
    real_rmtree = shutil.rmtree

    def killed(path, *args, **kwargs):
        (Path(path) / "model.safetensors").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        ck.files.remove_checkpoint(tmp_path / "epoch-0001")
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0002"]
    # what the old code left (files deleted in place) is not listed either
    (tmp_path / "epoch-0002" / "optimizer.safetensors").unlink()
    assert list_checkpoints(tmp_path) == []
    # leftovers of killed writes: a checkpoint directory, a pointer file next to `latest`
    (tmp_path / ".tmp-latest-999999-0123abcd").write_text("epoch-00")
    (tmp_path / ".tmp-epoch-0003-999999-0123abcd").mkdir()
    assert any(p.name.startswith(".tmp-") for p in tmp_path.iterdir())
    _save(tmp_path, model, tok, name="epoch-0003")
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    (tmp_path / ".tmp-best-999999-0123abcd").write_text("x")
    with ck.lock_run(tmp_path):  # taking the lock cleans them too
        assert not (tmp_path / ".tmp-best-999999-0123abcd").exists()


def test_a_second_process_cannot_write_into_a_locked_run(tmp_path, tok, trained):
    import subprocess
    import sys

    model, _ = trained
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time, transformer_cpp.checkpoint as ck\n"
            f"with ck.lock_run({str(run)!r}):\n    print('locked', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(
            ck.RunLockedError,
            match=rf"run directory '{run}' is in use by another process "
            rf"\(process {holder.pid}\)",
        ):
            _save(run, model, tok)
        with pytest.raises(ck.RunLockedError):
            with ck.lock_run(run):
                pass
    finally:
        holder.kill()
        holder.wait()
    with ck.lock_run(run):  # free again once the holder is gone; re-entrant within a process
        assert _save(run, model, tok).name == "epoch-0001"


def test_check_writable(tmp_path):
    assert ck.check_writable(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError, match=rf"--out '{tmp_path / 'file' / 'run'}' cannot be written"):
        ck.check_writable(tmp_path / "file" / "run", "--out")


# --- nothing of the user's is replaced or deleted -------------------------------------------------


@pytest.mark.parametrize("name", ["epoch-0002", "averaged"])
@pytest.mark.parametrize("kind", ["directory", "file", "link"])
def test_saving_never_replaces_what_it_did_not_write(tmp_path, tok, trained, name, kind):
    model, _ = trained
    _save(tmp_path, model, tok, name="epoch-0001")
    theirs = tmp_path / name
    if kind == "directory":
        theirs.mkdir()
        (theirs / "notes.txt").write_text("mine")
    elif kind == "file":
        theirs.write_text("mine")
    else:
        (tmp_path / "elsewhere").mkdir()
        theirs.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError, match=f"'{theirs}' was not written by transformer-cpp"):
        _save(tmp_path, model, tok, name=name)
    if kind == "directory":
        assert (theirs / "notes.txt").read_text() == "mine"
    elif kind == "file":
        assert theirs.read_text() == "mine"
    else:
        assert theirs.is_symlink()
    assert load_checkpoint(tmp_path).path.name == "epoch-0001"  # latest did not move


def test_a_checkpoint_holding_a_file_of_the_user_is_neither_replaced_nor_pruned(tmp_path, tok, trained):
    model, _ = trained
    first = _save(tmp_path, model, tok, name="epoch-0001")
    (first / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="holds 'notes.txt', which its manifest does not list"):
        _save(tmp_path, model, tok, name="epoch-0001")
    for epoch in range(2, 5):
        _save(tmp_path, model, tok, name=checkpoint_name(epoch), keep=1)
    assert (first / "notes.txt").read_text() == "mine"
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0001", "epoch-0004"]


def test_a_damaged_checkpoint_of_this_program_is_replaced(tmp_path, tok, trained):
    model, _ = trained
    first = _save(tmp_path, model, tok, name="epoch-0001", trainer_state={"run": 1})
    (first / "model.safetensors").write_bytes(b"half")  # still listed in its manifest: ours
    _save(tmp_path, model, tok, name="epoch-0001", trainer_state={"run": 2})
    assert load_checkpoint(tmp_path).trainer_state == {"run": 2}


@pytest.mark.parametrize("pointer", ["latest", "best"])
def test_a_file_of_the_user_named_like_a_pointer_is_not_replaced(tmp_path, tok, trained, pointer):
    model, _ = trained
    _save(tmp_path, model, tok, name="epoch-0001")
    (tmp_path / pointer).write_text("my notes\n")
    with pytest.raises(FileExistsError, match=f"'{tmp_path / pointer}' was not written by transformer-cpp"):
        if pointer == "latest":
            _save(tmp_path, model, tok, name="epoch-0002")
        else:
            ck.mark_best(tmp_path, "epoch-0001")
    assert (tmp_path / pointer).read_text() == "my notes\n"
    assert not (tmp_path / "epoch-0002").exists()


def test_the_lock_file_and_temporaries_of_the_user_are_left_alone(tmp_path, tok, trained):
    model, _ = trained
    _save(tmp_path, model, tok, name="epoch-0001")
    theirs = [tmp_path / ".tmp-notes", tmp_path / ".tmp-epoch-0002-12345-not-hex!"]
    for path in theirs:
        path.write_text("mine")
    ours = tmp_path / ".tmp-epoch-0002-12345-abcdef12"
    ours.mkdir()
    _save(tmp_path, model, tok, name="epoch-0002")
    assert not ours.exists() and all(p.read_text() == "mine" for p in theirs)

    other = tmp_path / "other"
    other.mkdir()
    (other / ".lock").write_text("my lock notes")
    with pytest.raises(FileExistsError, match="does not hold a process id"):
        _save(other, model, tok, name="epoch-0001")
    assert (other / ".lock").read_text() == "my lock notes"


def test_foreign_entries_lists_what_a_run_would_write_over(tmp_path, tok, trained):
    model, _ = trained
    _save(tmp_path, model, tok, name="epoch-0001")
    (tmp_path / "epoch-0003").mkdir()
    (tmp_path / "averaged").write_text("x")
    (tmp_path / "epoch-00004").mkdir()  # not a name a run writes (it writes epoch-0004)
    (tmp_path / "notes.txt").write_text("x")  # nor this
    found = ck.foreign_entries(tmp_path)
    assert [(p.name, "config.json" in why or "directory" in why) for p, why in found] == [
        ("averaged", True),
        ("epoch-0003", True),
    ]
