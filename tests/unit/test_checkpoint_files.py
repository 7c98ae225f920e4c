"""The tensor files of a checkpoint, written a tensor at a time straight from the model
(``TensorFile``): the bytes of ``tensor_bytes`` (the safetensors package's, kept as the
reference), the sizes and checksums the manifest records, nothing left behind by a write that
fails half-way; a checkpoint of a model that never trained loads and trains as the model does; a
checkpoint whose tensors were written by the package loads."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

import transformer_cpp as tc
import transformer_cpp.checkpoint as ck
from transformer_cpp.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from transformer_cpp.checkpoint.layout import FORMAT_NAME, MODEL_FILE, OPTIMIZER_FILE
from transformer_cpp.checkpoint.saving import TensorFile, tensor_bytes

from helpers.toy_task import reversal_pairs, tiny_model
from helpers.toy_task import one_thread, tok  # noqa: F401  (shared fixtures)


def _streamed(tensors, kind: str) -> bytes:
    f = io.BytesIO()
    size, digest = TensorFile(tensors, kind).write(f)
    data = f.getvalue()
    assert size == len(data) == TensorFile(tensors, kind).size
    assert digest == hashlib.sha256(data).hexdigest()
    return data


def _same_file(mine: bytes, reference: bytes, kind: str) -> bool:
    """Equal bytes; the safetensors package writes its two metadata entries in either order (a hash
    map's), so its file with them the other way round (the same length) is the same file too."""
    ours = f'"format":"{FORMAT_NAME}","content":"{kind}"'.encode()
    theirs = f'"content":"{kind}","format":"{FORMAT_NAME}"'.encode()
    return mine in (reference, reference.replace(theirs, ours, 1))


class _Value:
    def __init__(self, value: np.ndarray) -> None:
        self.value = value


def test_a_tensor_file_is_the_bytes_of_tensor_bytes() -> None:
    rng = np.random.default_rng(0)
    tensors = {
        "b.weight": rng.standard_normal((3, 4)).astype(np.float32),
        "a": rng.standard_normal(5),
        "counts": np.arange(4, dtype=np.int64),
        "half": rng.standard_normal(3).astype(np.float16),
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.array(2.5, np.float32),  # stored as shape [1], as the package stores it
        "strided": rng.standard_normal((4, 6)).astype(np.float32)[:, ::2],
        "état": np.ones(2, np.float32),
    }
    wrapped = {name: _Value(v) for name, v in tensors.items()}
    for kind in ("weights", "adam"):
        assert _same_file(_streamed(wrapped, kind), tensor_bytes(wrapped, kind), kind)
    assert _same_file(_streamed({}, "weights"), tensor_bytes({}, "weights"), "weights")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_model_and_its_moments_stream_to_the_bytes_of_tensor_bytes(tok, dtype: str) -> None:
    model = tiny_model(tok, dtype=dtype, seed=2)
    model.configure_optimizer(warmup=10)
    enc = tc.encode_pairs(*reversal_pairs(16, seed=1), tok, tok, 8)
    b = next(tc.batches(enc, 16, seed=0))
    model.train_step(b.src, b.tgt_in, b.tgt_out)
    assert _same_file(_streamed(model.parameters(), "weights"), tensor_bytes(model.parameters(), "weights"), "weights")
    assert _same_file(_streamed(model.optimizer_state(), "adam"), tensor_bytes(model.optimizer_state(), "adam"), "adam")


def test_the_saved_files_and_their_manifest(tmp_path: Path, tok) -> None:
    model = tiny_model(tok, seed=4)
    model.configure_optimizer(warmup=10)
    path = save_checkpoint(tmp_path, model, tok, tok)
    for fname, tensors, kind in (
        (MODEL_FILE, model.parameters(), "weights"),
        (OPTIMIZER_FILE, model.optimizer_state(), "adam"),
    ):
        assert _same_file((path / fname).read_bytes(), tensor_bytes(tensors, kind), kind), fname
    recorded = json.loads((path / "config.json").read_text())["files"]
    assert sorted(recorded) == sorted(p.name for p in path.iterdir() if p.name != "config.json")
    for fname, entry in recorded.items():
        data = (path / fname).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, fname


def test_a_write_failing_half_way_through_a_tensor_file_leaves_the_run_as_it_was(
    tmp_path: Path, tok, monkeypatch
) -> None:
    model = tiny_model(tok, seed=5)
    first = save_checkpoint(tmp_path, model, tok, tok, name="epoch-0001")
    real_chunks = TensorFile.chunks

    def failing(self):
        for i, chunk in enumerate(real_chunks(self)):
            if i == 3:
                raise OSError(28, "No space left on device")
            yield chunk

    monkeypatch.setattr(TensorFile, "chunks", failing)
    with pytest.raises(OSError, match="writing checkpoint .*epoch-0002.* failed: No space left on device"):
        save_checkpoint(tmp_path, model, tok, tok, name="epoch-0002")
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path) == first and list_checkpoints(tmp_path) == [first]
    assert not any(p.name.startswith(".tmp") for p in tmp_path.iterdir())


@pytest.mark.parametrize("optimizer", [False, True])
def test_a_model_that_never_trained_saves_loads_and_trains_the_same(tmp_path: Path, tok, optimizer: bool) -> None:
    model = tiny_model(tok, seed=6)
    model.configure_optimizer(warmup=10, clip_norm=1.0)
    path = save_checkpoint(tmp_path, model, tok, tok, optimizer=optimizer)
    loaded = load_checkpoint(path, optimizer=optimizer)
    assert loaded.optimizer_loaded == optimizer and loaded.model.step == 0
    again = loaded.model
    for name, p in model.parameters().items():
        np.testing.assert_array_equal(again.parameters()[name].value, p.value, err_msg=name)
        assert not again.parameters()[name].grad.any(), name
    enc = tc.encode_pairs(*reversal_pairs(32, seed=2), tok, tok, 8)
    for b in tc.batches(enc, 16, seed=3):
        assert again.train_step(b.src, b.tgt_in, b.tgt_out) == model.train_step(b.src, b.tgt_in, b.tgt_out)
    for name, p in model.parameters().items():
        np.testing.assert_array_equal(again.parameters()[name].value, p.value, err_msg=name)


def test_a_checkpoint_of_tensor_bytes_loads(tmp_path: Path, tok) -> None:
    """A checkpoint whose tensor files hold the safetensors package's bytes (as checkpoints were
    written before tensors were streamed) loads and resumes."""
    model = tiny_model(tok, seed=7)
    model.configure_optimizer(warmup=10)
    enc = tc.encode_pairs(*reversal_pairs(32, seed=4), tok, tok, 8)
    batches = list(tc.batches(enc, 16, seed=5))
    model.train_step(batches[0].src, batches[0].tgt_in, batches[0].tgt_out)
    files, config = ck.saving._serialised(model, tok, tok, {"epoch": 1}, None, None, True)
    tensors = {MODEL_FILE: (model.parameters(), "weights"), OPTIMIZER_FILE: (model.optimizer_state(), "adam")}
    files = {fname: tensor_bytes(*tensors[fname]) if fname in tensors else data for fname, data in files.items()}
    path = ck.write_checkpoint(tmp_path, "epoch-0001", files, config, keep=None, run_id=None)
    assert (path / MODEL_FILE).read_bytes() == files[MODEL_FILE]
    restored = load_checkpoint(path)
    assert restored.optimizer_loaded and restored.model.step == 1
    b = batches[1]
    assert restored.model.train_step(b.src, b.tgt_in, b.tgt_out) == model.train_step(b.src, b.tgt_in, b.tgt_out)
    assert (
        os.path.getsize(path / MODEL_FILE)
        == json.loads((path / "config.json").read_text())["files"][MODEL_FILE]["bytes"]
    )
