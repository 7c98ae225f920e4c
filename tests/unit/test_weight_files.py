"""Reading ``model.safetensors`` a tensor at a time (``transformer_cpp.pretrained.weight_files``):
every tensor as the safetensors package reads it, straight into an array or converted on the way,
a run of rows, a damaged header refused; and ``load_marian`` of directories written from our own
models (``convert_to_marian``, no PyTorch needed): the same weights back, in float32 and float64,
from float16 and float64 files, tied where the file's tensors are the same and untied where not."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

import transformer_cpp as tc
from transformer_cpp import export
from transformer_cpp.pretrained import load_marian
from transformer_cpp.pretrained.weight_files import SafetensorsFile, open_weights


def _tensors() -> dict:
    rng = np.random.default_rng(0)
    return {
        "f32": rng.standard_normal((7, 5)).astype(np.float32),
        "f64": rng.standard_normal((3, 2, 4)),
        "f16": rng.standard_normal(9).astype(np.float16),
        "i64": np.arange(6, dtype=np.int64).reshape(2, 3),
        "u8": np.arange(5, dtype=np.uint8),
        "empty": np.zeros((0, 4), np.float32),
        "bias": rng.standard_normal((1, 6)).astype(np.float32),
    }


def test_every_tensor_reads_as_the_safetensors_package_reads_it(tmp_path: Path) -> None:
    save_file(_tensors(), str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    weights = open_weights(tmp_path)
    reference = safe_open(str(tmp_path / "model.safetensors"), framework="numpy")
    try:
        assert sorted(weights.keys) == sorted(reference.keys())
        for name in weights.keys:
            want = reference.get_tensor(name)
            assert weights.shape(name) == want.shape, name
            got = weights.read(name)
            assert got.dtype == want.dtype, name
            np.testing.assert_array_equal(got, want, err_msg=name)
            if want.ndim:  # a run of rows, and a run past the end
                np.testing.assert_array_equal(weights.read(name, 1, 3), want[1:3], err_msg=name)
                np.testing.assert_array_equal(weights.read(name, 2, 99), want[2:], err_msg=name)
            target = np.empty(want.shape, want.dtype)
            weights.read_into(name, target)  # the same dtype: the bytes straight into the array
            np.testing.assert_array_equal(target, want, err_msg=name)
            if want.dtype.kind in "fiu":  # another dtype: converted as np.copyto converts
                converted = np.empty(want.shape, np.float64 if want.dtype == np.float32 else np.float32)
                weights.read_into(name, converted)
                expected = np.empty_like(converted)
                np.copyto(expected, want, casting="same_kind")
                np.testing.assert_array_equal(converted, expected, err_msg=name)
        flat = np.empty(6, np.float32)  # (1, V) into (V,): as many elements
        weights.read_into("bias", flat)
        np.testing.assert_array_equal(flat, reference.get_tensor("bias").reshape(-1))
    finally:
        weights.close()


def test_conversion_in_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor converted on its way in is read a piece at a time; the pieces add up to it."""
    from transformer_cpp.pretrained import weight_files

    value = np.random.default_rng(1).standard_normal((50, 7))
    save_file({"w": value}, str(tmp_path / "model.safetensors"))
    monkeypatch.setattr(weight_files, "CHUNK_BYTES", 24)  # 3 float64 values at a time
    weights = open_weights(tmp_path)
    target = np.empty((50, 7), np.float32)
    weights.read_into("w", target)
    weights.close()
    np.testing.assert_array_equal(target, value.astype(np.float32))


def _header_file(path: Path, header: object, data: bytes = b"", length: int | None = None) -> Path:
    text = json.dumps(header).encode("utf-8")
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


@pytest.mark.parametrize(
    "header, data, length, message",
    [
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, None, "end at byte"),
        ({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, None, "F32 of shape"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, None, "starts at byte 4"),
        ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4, None, "no valid dtype"),
        ({"a": {"dtype": "F32"}}, b"", None, "no valid dtype"),
        ([1, 2], b"", None, "not a JSON object"),
        ({}, b"", 1 << 40, "more than"),
        ({}, b"", 500, "in a file of"),
    ],
    ids=["short", "size", "gap", "negative", "no_offsets", "list", "huge_header", "header_past_end"],
)
def test_a_damaged_header_is_refused(tmp_path: Path, header: object, data: bytes, length, message: str) -> None:
    path = _header_file(tmp_path / "model.safetensors", header, data, length)
    with pytest.raises(ValueError, match=message):
        SafetensorsFile(path)


def test_a_file_shorter_than_its_length_field_and_an_unread_dtype(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"\1\2")
    with pytest.raises(ValueError, match="fewer than the 8"):
        open_weights(tmp_path)
    path = _header_file(tmp_path / "model.safetensors", {"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}})
    path.write_bytes(path.read_bytes() + b"\0" * 4)
    weights = open_weights(tmp_path)  # a dtype that is not read is refused when the tensor is read
    with pytest.raises(ValueError, match="'a' is BF16"):
        weights.read_into("a", np.empty(2, np.float32))
    weights.close()


def _model(**options: object) -> tc.Transformer:
    settings = dict(
        src_vocab_size=19,
        tgt_vocab_size=19,
        d_model=8,
        n_layers=1,
        n_decoder_layers=2,
        n_heads=2,
        d_ff=16,
        layout="concatenated",
        activation="swish",
        scale_embedding=True,
        pad_id=18,
        start_id=18,
        end_id=0,
        layer_norm_eps=1e-5,
        seed=4,
    )
    settings.update(options)
    model = tc.Transformer(**settings)
    rng = np.random.default_rng(5)
    for p in model.parameters().values():
        p.value[...] = rng.standard_normal(p.value.shape) * 0.5
    return model


def _marian_directory(path: Path, model: tc.Transformer, dtype: type = np.float32, **replace: np.ndarray) -> Path:
    files = export.convert_to_marian(model, None, None)
    path.mkdir()
    (path / "config.json").write_text(json.dumps(files["config"]), encoding="utf-8")
    weights = {k: np.ascontiguousarray(v, dtype=dtype) for k, v in files["weights"].items()}
    weights.update(replace)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


@pytest.mark.parametrize(
    "options",
    [{}, {"share_embeddings": True}, {"share_source_embedding": True, "share_embeddings": True}],
    ids=["separate", "tied_output", "one_embedding"],
)
def test_load_marian_gives_the_weights_back(tmp_path: Path, options: dict) -> None:
    model = _model(**options)
    loaded = load_marian(_marian_directory(tmp_path / "m", model))
    assert {k: loaded.config[k] for k in ("share_embeddings", "share_source_embedding")} == {
        k: model.config[k] for k in ("share_embeddings", "share_source_embedding")
    }
    for name, p in model.parameters().items():
        np.testing.assert_array_equal(loaded.parameters()[name].value, p.value, err_msg=name)
    as_float64 = load_marian(tmp_path / "m", dtype="float64")  # each value converted on its way in
    for name, p in model.parameters().items():
        np.testing.assert_array_equal(as_float64.parameters()[name].value, p.value.astype(np.float64), err_msg=name)


@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_load_marian_converts_other_dtypes_as_numpy_does(tmp_path: Path, dtype: type) -> None:
    model = _model()
    loaded = load_marian(_marian_directory(tmp_path / "m", model, dtype))
    for name, p in model.parameters().items():
        np.testing.assert_array_equal(loaded.parameters()[name].value, p.value.astype(dtype).astype(np.float32))


def test_tied_names_holding_different_tensors_are_read_untied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A configuration that ties every embedding next to a file whose tied names hold different
    tensors (compared a block of rows at a time, here a row) is read as the file's separate weights."""
    from transformer_cpp.pretrained import marian

    monkeypatch.setattr(marian, "_COMPARED_ELEMENTS", 8)
    model = _model(share_source_embedding=True, share_embeddings=True)
    files = export.convert_to_marian(model, None, None)["weights"]
    shape = files["lm_head.weight"].shape
    other = files["lm_head.weight"].copy()
    other[-1, -1] += 1.0  # in the last block compared
    source = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    loaded = load_marian(
        _marian_directory(
            tmp_path / "m", model, **{"lm_head.weight": other, "model.encoder.embed_tokens.weight": source}
        )
    )
    assert not loaded.config["share_embeddings"] and not loaded.config["share_source_embedding"]
    params = loaded.parameters()
    np.testing.assert_array_equal(params["output.weight"].value, other)
    np.testing.assert_array_equal(params["encoder.embedding.weight"].value, source)
    np.testing.assert_array_equal(params["decoder.embedding.weight"].value, files["model.decoder.embed_tokens.weight"])


def test_a_wrong_shape_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    model = _model()
    bad = np.zeros((8, 7), np.float32)
    with pytest.raises(ValueError, match=r"model.encoder.layers.0.fc1.weight has shape \(8, 7\)"):
        load_marian(_marian_directory(tmp_path / "m", model, **{"model.encoder.layers.0.fc1.weight": bad}))
