"""The decoder-only language model (LanguageModel): float64 gradients against central differences,
parity with a readable PyTorch GPT holding the same weights (loss and every gradient), causality,
the generation step (softmax: key/value cache; linear attention: the RNN form) against the full
forward, and bad input; with softmax and with linear attention."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers.layer_checks import LM_SMALL as SMALL, check_lm_against_torch, check_lm_gradients, tokens_for
from transformer_cpp import LanguageModel
from transformer_cpp.config import LM_FIELDS

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch  # the module imports PyTorch

# the PyTorch reference's parts, once PyTorch is known to be there
from helpers.torch_gpt import affine, layer_norm, merge_heads, next_token_loss, residual_block, sinusoids, split_heads


@pytest.mark.parametrize(
    "options",
    [
        dict(pre_norm=True, share_embeddings=True),
        dict(pre_norm=False, share_embeddings=False),
        dict(pre_norm=True, share_embeddings=True, attention="linear"),
        dict(pre_norm=False, share_embeddings=False, attention="linear"),
    ],
    ids=["pre-norm-tied", "post-norm-untied", "linear-pre-norm-tied", "linear-post-norm-untied"],
)
def test_gradients_match_central_differences_float64(options):
    lm = LanguageModel(7, dtype="float64", seed=3, **SMALL, **options)
    # output.bias starts at 0 and the embeddings are small: move every weight off its initial
    # symmetric point so that no gradient is zero by construction
    rng = np.random.default_rng(1)
    for p in lm.parameters().values():
        p.value[...] += 0.05 * rng.standard_normal(p.value.shape)
    tokens = tokens_for(7, (2, 6), seed=2)
    assert check_lm_gradients(lm, tokens) >= 30


# ------------------------------------------------------------------ a readable PyTorch GPT


def torch_gpt_loss(weights, tokens, d, n_layers, n_heads, pre_norm, eps=1e-6, kind="softmax"):
    """Mean cross-entropy of tokens[:, 1:] given tokens[:, :-1], written out op by op. ``kind``
    "linear": causal linear attention, out_i = sum_{j<=i} (phi(q_i).phi(k_j)) v_j /
    (sum_{j<=i} phi(q_i).phi(k_j) + 1e-6) with phi(x) = elu(x) + 1, as its quadratic form."""
    x_ids = torch.as_tensor(tokens[:, :-1])
    y_ids = torch.as_tensor(tokens[:, 1:])
    T = x_ids.shape[1]
    emb = weights["embedding.weight"]
    x = emb[x_ids] * math.sqrt(d) + sinusoids(T, d).to(emb.dtype)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)

    def attention(h, p):
        q, k, v = (split_heads(affine(weights, h, p + name), n_heads) for name in ("query", "key", "value"))
        if kind == "linear":
            phi_q, phi_k = (torch.nn.functional.elu(t) + 1 for t in (q, k))
            a = (phi_q @ phi_k.transpose(-1, -2)).masked_fill(causal, 0.0)
            return affine(weights, merge_heads((a @ v) / (a.sum(-1, keepdim=True) + 1e-6)), p + "output")
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // n_heads)
        scores = scores.masked_fill(causal, float("-inf"))
        return affine(weights, merge_heads(torch.softmax(scores, dim=-1) @ v), p + "output")

    for i in range(n_layers):
        x = residual_block(weights, x, attention, f"layers.{i}.", eps, pre_norm)
    if pre_norm:
        x = layer_norm(weights, x, "norm", eps)
    out_w = weights.get("output.weight", emb)
    return next_token_loss(x @ out_w.T + weights["output.bias"], y_ids)


@pytest.mark.parametrize(
    "pre_norm,tied,kind", [(True, True, "softmax"), (False, False, "softmax"), (True, False, "linear")]
)
def test_loss_and_gradients_match_pytorch_gpt_float32(pre_norm, tied, kind):
    d, L, H, V = 16, 2, 4, 11
    lm = LanguageModel(
        V,
        d_model=d,
        n_layers=L,
        n_heads=H,
        d_ff=24,
        dropout=0.0,
        pre_norm=pre_norm,
        share_embeddings=tied,
        attention=kind,
        seed=5,
    )
    rng = np.random.default_rng(0)
    for p in lm.parameters().values():
        p.value[...] += (0.05 * rng.standard_normal(p.value.shape)).astype(np.float32)
    tokens = tokens_for(V, (3, 9), seed=4)
    check_lm_against_torch(
        lm, tokens, lambda w: torch_gpt_loss(w, tokens, d, L, H, pre_norm, kind=kind), rel=1e-5, rtol=2e-4, atol=2e-5
    )


def test_float32_agrees_with_float64():
    tokens = tokens_for(9, (2, 7), seed=6)
    a = LanguageModel(9, dtype="float32", seed=2, **SMALL)
    b = LanguageModel(9, dtype="float64", seed=2, **SMALL)
    for (n, pa), pb in zip(a.parameters().items(), b.parameters().values()):
        pb.value[...] = pa.value
    np.testing.assert_allclose(a.forward(tokens), b.forward(tokens), rtol=1e-4, atol=1e-5)
    assert a.evaluate_loss(tokens)[0] == pytest.approx(b.evaluate_loss(tokens)[0], rel=1e-5)


@pytest.mark.parametrize("kind", ["softmax", "linear"])
def test_causal_a_later_token_changes_no_earlier_logit(kind):
    lm = LanguageModel(9, dtype="float64", seed=1, attention=kind, **SMALL)
    tokens = tokens_for(9, (1, 8), seed=7)
    before = lm.forward(tokens)
    changed = tokens.copy()
    changed[0, 5] = 1 + (changed[0, 5] % 8)
    after = lm.forward(changed)
    np.testing.assert_array_equal(before[0, :5], after[0, :5])
    assert not np.allclose(before[0, 5:], after[0, 5:])


@pytest.mark.parametrize("pre_norm", [True, False])
@pytest.mark.parametrize("kind", ["softmax", "linear"])
def test_cached_generation_step_equals_the_full_forward(pre_norm, kind):
    # softmax: the key/value-cached step; linear: the RNN form, a state (S, z) per block
    lm = LanguageModel(9, dtype="float64", seed=4, pre_norm=pre_norm, attention=kind, **SMALL)
    assert lm.has_cached_step
    tokens = tokens_for(9, (2, 20), seed=8)  # longer than max_len: the positional table grows
    full = lm.forward(tokens)
    lm.start_generation(2, 20)
    for t in range(20):
        step = lm.generation_step(tokens[:, t])
        np.testing.assert_allclose(step, full[:, t], rtol=1e-10, atol=1e-12)


def test_cached_step_with_a_long_cache_at_two_threads_equals_the_forward():
    # one sequence, 4 heads: from about 512 cached positions (4 heads x 512 x d_k 16 >= 2**15) the
    # heads of a step run on separate threads; the logits are those of the forward at any count
    import transformer_cpp as tc

    lm = LanguageModel(9, d_model=64, n_layers=1, n_heads=4, d_ff=32, dropout=0.0, dtype="float64", seed=2)
    tokens = tokens_for(9, (1, 700), seed=3)
    full = lm.forward(tokens)
    before = tc.get_num_threads()
    try:
        tc.set_num_threads(2)
        lm.start_generation(1, 700)
        steps = np.stack([lm.generation_step(tokens[:, t]) for t in range(700)], axis=1)
    finally:
        tc.set_num_threads(before)
    np.testing.assert_allclose(steps, full, rtol=1e-9, atol=1e-11)


def test_train_step_lowers_the_loss_of_a_repeated_sequence():
    lm = LanguageModel(6, d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, seed=0)
    lm.configure_optimizer(fixed_lr=3e-3)
    tokens = np.tile(np.array([1, 2, 3, 4, 5], dtype=np.int64), (4, 4))[:, :17]
    first = lm.train_step(tokens)
    for _ in range(60):
        last = lm.train_step(tokens)
    assert lm.step == 61
    assert last < 0.3 * first


def test_config_is_one_table_with_the_attention_names():
    names = [f.name for f in LM_FIELDS]
    assert names == [
        "vocab_size",
        "d_model",
        "n_layers",
        "n_heads",
        "d_ff",
        "dropout",
        "max_len",
        "attention",
        "memory_length",
        "lsh_hashes",
        "lsh_chunk",
        "lsh_buckets",
        "reversible",
        "pre_norm",
        "share_embeddings",
        "seed",
    ]
    lm = LanguageModel(5, d_model=8, n_heads=2, n_layers=1, d_ff=8)
    assert lm.config["attention"] == "softmax" and LanguageModel.from_config(lm.config).config == lm.config


def test_bad_input_is_refused_with_clear_errors():
    with pytest.raises(
        ValueError, match=r"attention must be one of 'softmax', 'linear', 'lsh', 'relative', got 'nope'"
    ):
        LanguageModel(5, attention="nope")
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        LanguageModel(5, d_model=10, n_heads=4)
    with pytest.raises(ValueError, match="vocab_size"):
        LanguageModel(1)
    lm = LanguageModel(5, d_model=8, n_heads=2, n_layers=1, d_ff=8)
    with pytest.raises(ValueError, match="out of range for vocab_size 5"):
        lm.forward(np.array([[1, 2, 9]]))
    with pytest.raises(ValueError, match=r"\(B, T\+1\)"):
        lm.train_step(np.array([[1]]))
    with pytest.raises(ValueError, match="padding id 0"):
        lm.train_step(np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(TypeError):
        lm.forward(np.array([[1.0, 2.0]]))
    with pytest.raises(RuntimeError, match="start_generation"):
        LanguageModel(5, d_model=8, n_heads=2, n_layers=1, d_ff=8).generation_step(np.array([1]))
    linear = LanguageModel(5, d_model=8, n_heads=2, n_layers=1, d_ff=8, attention="linear")
    linear.start_generation(1, 2)
    linear.generation_step(np.array([1]))
    linear.generation_step(np.array([2]))
    with pytest.raises(ValueError, match="capacity"):
        linear.generation_step(np.array([3]))
