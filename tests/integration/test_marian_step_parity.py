"""Training steps of a model imported from a MarianMTModel equal PyTorch's steps of the
MarianMTModel itself: the same batch, the loss as ours computes it (label-smoothed cross-entropy,
the mean over the targets that are not padding: ``F.cross_entropy(label_smoothing=...,
ignore_index=pad)``) and ``torch.optim.Adam`` with the same hyper-parameters and learning rate;
every weight, mapped by the importer's names, within 2e-5 of the largest of its tensor after three
steps (Adam divides each gradient by its own running RMS, so a gradient that the two engines' sum
orders round apart by a relative d moves its weight apart by about LR x d per step; small gradients
carry d near 1e-3, more where Eigen's GEMM runs (the generic level): 7e-6 of weights near 0.6
measured there; a wrong update formula moves weights by LR = 3e-3, 250 times the bound), with a shared tied embedding and with separate vocabularies and an untied output layer (the
key projections' biases, whose gradient is 0, within the learning rate per step).

``final_logits_bias``: Transformers keeps it as a buffer (never trained); this package trains the
output layer's bias like every other weight, so here the PyTorch model trains it too (made a
parameter), and the exporter writes the trained bias back as ``final_logits_bias``."""

from __future__ import annotations

from typing import Any, Dict

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import MarianMTModel

from helpers.marian import tiny_marian_config

from transformer_cpp.pretrained import load_marian
from transformer_cpp.pretrained.marian import marian_names

pytestmark = pytest.mark.torch  # the module imports PyTorch

LR, BETAS, EPS, SMOOTHING, STEPS = 3e-3, (0.9, 0.98), 1e-8, 0.1, 3

CASES = {
    "shared, tied embedding, scaled": dict(scale_embedding=True),
    "two vocabularies, untied output": dict(
        share_encoder_decoder_embeddings=False, tie_word_embeddings=False, decoder_vocab_size=19
    ),
}


def _batch(pad: int, v_src: int, v_tgt: int) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(4)
    src_lengths, tgt_lengths = [5, 2, 7, 4], [3, 6, 1, 4]  # targets without the start, with the end
    src = np.full((4, max(src_lengths)), pad, dtype=np.int64)
    tgt_in = np.full((4, max(tgt_lengths)), pad, dtype=np.int64)
    tgt_out = np.full_like(tgt_in, pad)
    for i, (s, t) in enumerate(zip(src_lengths, tgt_lengths)):
        src[i, :s] = list(rng.integers(1, min(pad, v_src), size=s - 1)) + [0]
        words = list(rng.integers(1, min(pad, v_tgt), size=t - 1))
        tgt_in[i, :t] = [pad] + words  # the decoder starts with the start id, Marian's padding id
        tgt_out[i, :t] = words + [0]
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}


@pytest.mark.parametrize("case", list(CASES))
def test_training_steps_equal_pytorch(tmp_path: Any, case: str) -> None:
    pad = 16
    settings: Dict[str, Any] = dict(
        pad=pad,
        decoder_vocab_size=17,
        ffn_dim=24,
        max_position_embeddings=32,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        init_std=0.2,
        bad_words_ids=None,
    )
    settings.update(CASES[case])
    torch.manual_seed(3)
    hf = MarianMTModel(tiny_marian_config(17, **settings))
    with torch.no_grad():  # biases as a trained model has them, not the zeros of the initialisation
        hf.final_logits_bias.normal_(0.0, 0.3)
        for name, p in hf.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.2)
    hf.save_pretrained(tmp_path / "m")
    ours = load_marian(tmp_path / "m")
    assert ours.config["dropout"] == 0.0
    # PyTorch trains final_logits_bias too (see the module docstring)
    bias = hf.final_logits_bias.detach().clone()
    del hf._buffers["final_logits_bias"]
    hf.final_logits_bias = torch.nn.Parameter(bias)
    hf.train()
    optimizer = torch.optim.Adam(hf.parameters(), lr=LR, betas=BETAS, eps=EPS)
    ours.configure_optimizer(
        fixed_lr=LR, beta1=BETAS[0], beta2=BETAS[1], eps=EPS, clip_norm=0.0, label_smoothing=SMOOTHING
    )
    v_tgt = int(settings["decoder_vocab_size"])
    b = _batch(pad, 17, v_tgt)
    before = {name: p.value.copy() for name, p in ours.parameters().items()}
    for _ in range(STEPS):
        optimizer.zero_grad()
        logits = hf(
            input_ids=torch.tensor(b["src"]),
            attention_mask=torch.tensor(b["src"] != pad).long(),
            decoder_input_ids=torch.tensor(b["tgt_in"]),
        ).logits
        ref = F.cross_entropy(
            logits.reshape(-1, v_tgt),
            torch.tensor(b["tgt_out"]).reshape(-1),
            ignore_index=pad,
            label_smoothing=SMOOTHING,
        )
        ref.backward()
        optimizer.step()
        loss, _ = ours.train_step(b["src"], b["tgt_in"], b["tgt_out"])
        assert abs(loss - float(ref.detach())) <= 1e-5 * abs(float(ref.detach()))
    theirs = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    params = ours.parameters()
    for name, candidates in marian_names(ours.config):
        found = next(n for n in candidates if n in theirs)
        got, want = params[name].value, theirs[found].reshape(params[name].value.shape)
        assert not np.array_equal(got, before[name]), name  # every weight moved
        if name.endswith(".key.bias"):
            # its gradient is 0 (softmax ignores a shift of every key's score), so each side's Adam
            # steps follow its own rounding noise: both stay within the learning rate per step
            for value in (got, want):
                assert float(np.abs(value - before[name]).max()) <= STEPS * LR * (1 + 1e-6), name
            continue
        scale = float(np.abs(want).max())
        assert float(np.abs(got - want).max()) <= 2e-5 * scale, (name, found)
