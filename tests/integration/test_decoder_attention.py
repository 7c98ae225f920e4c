"""A translator whose encoder and decoder have linear self-attention (``--encoder-attention linear
--decoder-attention linear``), from the command line to its translations: the tiny preset learns
the made-up grammar of test_tiny_preset (validation BLEU 100 within its time budget, as with
softmax), the checkpoint keeps the kinds, the translator encodes each sentence at its own length
and decodes with the linear attention's RNN state in float32, int8 and bf16, greedy and with a
beam, and gives the training pairs' targets; the formats of other runtimes, which hold softmax
attention only, refuse the model by name. The exactness of the inference paths is
test_decoding's (cached decoding against recomputing the prefix); the gradients are
test_layers_gradcheck's and test_torch_parity's."""

from __future__ import annotations

import re

import pytest

import transformer_cpp as tc
from transformer_cpp import kernels
from transformer_cpp.export.ctranslate2 import convert_to_ctranslate2
from transformer_cpp.export.marian import convert_to_marian
from transformer_cpp.translate import Translator

from helpers.cli import run_cli
from integration.test_tiny_preset import _pairs_file


@pytest.fixture(scope="module")
def linear_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("linear_decoder")
    data = _pairs_file(tmp / "pairs.txt", 3000)
    out = tmp / "run"
    result = run_cli(
        "train", "--preset", "tiny", "--data", str(data), "--num-samples", "3000", "--time-budget", "0.5",
        "--threads", "1", "--no-progress", "--out", str(out), "--encoder-attention", "linear",
        "--decoder-attention", "linear",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return data, out, result.stderr


def test_a_linear_translator_learns_the_tiny_preset(linear_run):
    _, out, log = linear_run
    bleu = [float(b) for b in re.findall(r"val_bleu (\d+\.\d+)", log)]
    assert bleu and max(bleu) >= 50, log[-2000:]
    model = Translator.from_checkpoint(out).model
    assert model.config["encoder_attention"] == model.config["decoder_attention"] == "linear"
    assert "encoder_attention='linear', decoder_attention='linear'" in repr(model)


@pytest.mark.parametrize("compute_type", ["float32", "int8", "bf16"])
def test_a_linear_translator_translates_in_every_compute_type(linear_run, compute_type):
    if not kernels.have_compute_type(compute_type):
        pytest.skip(kernels.compute_type_unsupported_reason(compute_type))
    data, out, _ = linear_run
    pairs = [line.split("\t")[:2] for line in data.read_text(encoding="utf-8").splitlines()[:12]]
    translator = Translator.from_checkpoint(out, compute_type=compute_type)
    for beam in (1, 4):
        texts = translator.translate_batch([s for s, _ in pairs], beam_size=beam)
        wrong = [(t, r) for t, (_, r) in zip(texts, pairs) if t != r]
        assert len(wrong) <= 1, (beam, wrong)  # a training pair of a model at validation BLEU 100


def test_the_other_runtimes_formats_refuse_linear_attention(linear_run, tmp_path):
    _, out, _ = linear_run
    model = Translator.from_checkpoint(out).model
    with pytest.raises(ValueError, match="convert_to_ctranslate2: the model's encoder has linear self-attention"):
        convert_to_ctranslate2(model, tmp_path / "ct2")
    with pytest.raises(ValueError, match="convert_to_marian: the model's encoder has linear self-attention"):
        convert_to_marian(model)
    with pytest.raises(ValueError, match="export_torch: the model's encoder has linear self-attention"):
        tc.export_torch(out, tmp_path / "torch")
    assert not (tmp_path / "torch").exists() or not any((tmp_path / "torch").iterdir())


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_the_attention_options_name_the_kinds_that_fit(side):
    with pytest.raises(ValueError, match=f"{side}_attention") as e:
        tc.Transformer(10, 10, d_model=8, n_heads=2, d_ff=8, **{f"{side}_attention": "lsh"})
    assert "'softmax'" in str(e.value) and "'linear'" in str(e.value)
    config = tc.Transformer(10, 10, d_model=8, n_heads=2, d_ff=8).config
    del config[f"{side}_attention"]  # a checkpoint written before the option
    assert tc.Transformer.from_config(config).config[f"{side}_attention"] == "softmax"
    with pytest.raises(
        ValueError, match=f"Transformer: {side}_attention must be 'softmax' or 'linear', got 'relative'"
    ):
        tc.Transformer(10, 10, d_model=8, n_heads=2, d_ff=8, **{f"{side}_attention": "relative"})


def test_linear_attention_trains_in_bf16():
    """A bf16 model with linear self-attention: its loss is float32's up to bfloat16 rounding (about 2^-8
    relative), and it learns. (That bf16 reaches the linear attention's own projections is the C++
    test test_linear_attention_bf16.)"""
    if not kernels.have_bf16():
        pytest.skip(kernels.bf16_unsupported_reason())
    import numpy as np

    def model(precision):
        return tc.Transformer(12, 12, d_model=32, n_layers=1, n_heads=4, d_ff=64, dropout=0.0, max_length=8, seed=0,
                              precision=precision, encoder_attention="linear", decoder_attention="linear")  # fmt: skip

    src = np.array([[3, 4, 5, 0], [6, 7, 8, 9], [10, 11, 0, 0]])
    tgt = np.array([[1, 3, 4, 5, 2, 0], [1, 6, 7, 8, 9, 2], [1, 10, 11, 2, 0, 0]])
    bf16, f32 = model("bf16"), model("float32")
    b, f = bf16.evaluate(src, tgt[:, :-1], tgt[:, 1:])[0], f32.evaluate(src, tgt[:, :-1], tgt[:, 1:])[0]
    assert b != f and abs(b - f) <= 2e-2 * f
    model = bf16
    model.configure_optimizer(fixed_lr=3e-3)
    losses = [model.train_step(src, tgt[:, :-1], tgt[:, 1:])[0] for _ in range(200)]
    assert losses[-1] < 0.2 * losses[0]
    out = model.greedy_decode(src, 1, 2, 8)
    np.testing.assert_array_equal(out, tgt[:, 1:][:, : out.shape[1]])
