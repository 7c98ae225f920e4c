"""The language model's attention options: LSH attention in the blocks (attention="lsh") and the
blocks as a reversible stack (reversible=True). Float64 gradients against central differences,
readable PyTorch references (the reversible blocks; LSH attention with one chunk, which is full
shared-QK attention), activation memory against depth, generation, the configuration's JSON and
bad combinations."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from helpers.gradcheck import central_difference
from helpers.layer_checks import LM_SMALL as SMALL, check_lm_against_torch, check_lm_gradients, tokens_for
from transformer_cpp import LanguageModel
from transformer_cpp.data.lm_text import CharVocabulary
from transformer_cpp.task import generate

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch  # the module imports PyTorch

# the PyTorch references' parts, once PyTorch is known to be there
from helpers.torch_gpt import affine, feed_forward, layer_norm, merge_heads, next_token_loss, residual_block, sinusoids
from helpers.torch_gpt import split_heads


def moved(lm: LanguageModel, scale: float = 0.05, seed: int = 1) -> LanguageModel:
    """Every weight moved off its initial point (zero biases, unit norms) so that no gradient is
    zero by construction."""
    rng = np.random.default_rng(seed)
    for p in lm.parameters().values():
        p.value[...] += scale * rng.standard_normal(p.value.shape)
    return lm


def greedy_over_windows(lm: LanguageModel, vocabulary: CharVocabulary, prompt: str, n: int, context: int) -> str:
    """``n`` characters after ``prompt``, each the most likely (padding aside) of the model's full
    forward over the last ``context`` characters."""
    seq, want = [int(i) for i in vocabulary.encode(prompt)], []
    for _ in range(n):
        logits = lm.forward(np.array([seq[-context:]]))[0, -1]
        logits[0] = -np.inf
        want.append(int(np.argmax(logits)))
        seq.append(want[-1])
    return vocabulary.decode(want)


# ------------------------------------------------------------------ float64 gradients


@pytest.mark.parametrize(
    "options",
    [
        dict(attention="lsh", lsh_chunk=2, lsh_hashes=2),  # several chunks: the hashing decides the windows
        dict(attention="lsh", lsh_chunk=3, lsh_hashes=1, pre_norm=False, share_embeddings=False),
        dict(reversible=True),
        dict(reversible=True, attention="linear", share_embeddings=False),
        dict(reversible=True, attention="lsh", lsh_chunk=2, lsh_hashes=2),
    ],
    ids=["lsh", "lsh-post-norm-untied", "reversible", "reversible-linear", "reversible-lsh"],
)
def test_gradients_match_central_differences_float64(options):
    lm = moved(LanguageModel(7, dtype="float64", seed=3, **{**SMALL, **options}))
    assert check_lm_gradients(lm, tokens_for(7, (2, 6), seed=2)) >= 30


def test_reversible_gradients_with_dropout_match_central_differences_float64():
    # training mode: the masks of a forward are replayed when backward rebuilds each block, and
    # the same masks are drawn again when the dropout counters are set back before each loss
    lm = moved(LanguageModel(7, dtype="float64", seed=5, reversible=True, **{**SMALL, "dropout": 0.2}))
    tokens = tokens_for(7, (2, 6), seed=4)
    lm.compute_gradients(tokens, training=True)
    grads = {name: np.array(p.grad) for name, p in lm.parameters().items()}
    calls = lm.dropout_calls - 1  # the counter before that forward

    def loss() -> float:
        lm.dropout_calls = calls
        return lm.compute_gradients(tokens, training=True)

    rng = np.random.default_rng(3)
    eps = 1e-6
    for name, p in lm.parameters().items():
        flat = p.value.reshape(-1)
        i = int(rng.integers(flat.size))
        n, a = central_difference(loss, flat, i, eps), grads[name].reshape(-1)[i]
        assert abs(n - a) <= 1e-6 * max(abs(n), abs(a)) + 1e-8, (name, i, n, a)


# ------------------------------------------------------------------ readable PyTorch references


def torch_lm_loss(w, tokens, d, n_layers, n_heads, reversible, kind, eps=1e-6):
    """Mean cross-entropy of tokens[:, 1:] given tokens[:, :-1], pre-norm, written out op by op.

    reversible: x1 = x2 = x; per block y1 = x1 + Attn(LN1(x2)), y2 = x2 + FFN(LN2(y1)); then
    (y1 + y2) / 2 and the final LN. Otherwise x = x + Attn(LN1(x)), x = x + FFN(LN2(x)).
    kind "softmax": causal softmax attention; "lsh" with one chunk: shared-QK attention (keys
    are the queries normalised per head) over every earlier position, a position attending to
    itself only when it has no other key (position 0)."""
    x_ids, y_ids = torch.as_tensor(tokens[:, :-1]), torch.as_tensor(tokens[:, 1:])
    T = x_ids.shape[1]
    x = w["embedding.weight"][x_ids] * math.sqrt(d) + sinusoids(T, d)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)

    def norm(h, name):
        return layer_norm(w, h, name, eps)

    def attention(h, p):
        q = split_heads(affine(w, h, p + "query"), n_heads)
        v = split_heads(affine(w, h, p + "value"), n_heads)
        if kind == "lsh":
            k = q / q.norm(dim=-1, keepdim=True)
            blocked = future | torch.eye(T, dtype=torch.bool)
            blocked[0, 0] = False  # position 0 has no other key
        else:
            k = split_heads(affine(w, h, p + "key"), n_heads)
            blocked = future
        scores = (q @ k.transpose(-1, -2) / math.sqrt(d // n_heads)).masked_fill(blocked, float("-inf"))
        return affine(w, merge_heads(torch.softmax(scores, dim=-1) @ v), p + "output")

    x1, x2 = x, x
    for i in range(n_layers):
        p = f"layers.{i}."
        if reversible:
            x1 = x1 + attention(norm(x2, p + "norm1"), p + "self_attention.")
            x2 = x2 + feed_forward(w, norm(x1, p + "norm2"), p + "feed_forward.")
        else:
            x = residual_block(w, x, attention, p, eps)
    if reversible:
        x = (x1 + x2) / 2
    return next_token_loss(norm(x, "norm") @ w["embedding.weight"].T + w["output.bias"], y_ids)


@pytest.mark.parametrize(
    "options",
    [dict(reversible=True), dict(attention="lsh", lsh_chunk=8), dict(reversible=True, attention="lsh", lsh_chunk=8)],
    ids=["reversible", "lsh-one-chunk", "reversible-lsh-one-chunk"],
)
def test_loss_and_gradients_match_pytorch_float64(options):
    d, L, H, V = 16, 3, 4, 11
    lm = moved(
        LanguageModel(V, d_model=d, n_layers=L, n_heads=H, d_ff=24, dropout=0.0, seed=6, dtype="float64", **options),
        scale=0.1,
    )
    tokens = tokens_for(V, (3, 8), seed=1)  # 7 inputs: one LSH chunk of 8 holds them all
    reversible, kind = options.get("reversible", False), options.get("attention", "softmax")
    check_lm_against_torch(
        lm, tokens, lambda w: torch_lm_loss(w, tokens, d, L, H, reversible, kind), rel=1e-12, rtol=1e-9, atol=1e-12
    )


def test_reversible_blocks_are_another_function_than_ordinary_blocks():
    # the same weights (the parameter names match) give another loss: y = (y1 + y2) / 2 of two
    # streams is not the residual stream of the ordinary pre-norm stack
    tokens = tokens_for(9, (2, 7), seed=3)
    rev = moved(LanguageModel(9, dtype="float64", seed=2, reversible=True, **SMALL))
    plain = LanguageModel(9, dtype="float64", seed=2, **SMALL)
    assert sorted(rev.parameters()) == sorted(plain.parameters())
    for name, p in plain.parameters().items():
        p.value[...] = rev.parameters()[name].value
    assert abs(rev.evaluate_loss(tokens)[0] - plain.evaluate_loss(tokens)[0]) > 1e-3


# ------------------------------------------------------------------ LSH hashing in the model


def test_lsh_rotations_follow_the_step_count():
    lm = moved(LanguageModel(9, dtype="float64", seed=2, attention="lsh", lsh_chunk=2, lsh_hashes=1, **SMALL))
    tokens = tokens_for(9, (2, 12), seed=5)
    first = lm.forward(tokens)
    np.testing.assert_array_equal(first, lm.forward(tokens))  # deterministic between updates
    lm.configure_optimizer(fixed_lr=1e-9)
    lm.train_step(tokens)
    lm.train_step(tokens)
    # a tiny update cannot move the logits by 1e-3: a change that large is new buckets
    assert np.abs(lm.forward(tokens) - first).max() > 1e-3


def test_lsh_with_one_chunk_is_causal_and_generation_recomputes_the_window():
    vocabulary = CharVocabulary.from_text("abcdefg")
    lm = moved(
        LanguageModel(vocabulary.vocab_size, dtype="float64", seed=4, attention="lsh", lsh_chunk=64, **SMALL), 0.3
    )
    tokens = tokens_for(vocabulary.vocab_size, (1, 10), seed=7)
    before = lm.forward(tokens)
    changed = tokens.copy()
    changed[0, 6] = 1 + (changed[0, 6] % (vocabulary.vocab_size - 1))
    # the same sums in another order (the sort by bucket moves the changed position)
    np.testing.assert_allclose(before[0, :6], lm.forward(changed)[0, :6], rtol=1e-12, atol=1e-13)
    assert not np.allclose(before[0, 6:], lm.forward(changed)[0, 6:])
    assert not lm.has_cached_step
    with pytest.raises(ValueError, match="attention 'lsh' has no cached generation step"):
        lm.start_generation(1, 8)
    # generation runs the model over the last `context` characters for each one
    got = generate(lm, vocabulary, "abc", 12, temperature=0, context=6)
    assert got == greedy_over_windows(lm, vocabulary, "abc", 12, 6)


def test_reversible_generation_recomputes_the_window():
    vocabulary = CharVocabulary.from_text("abcdefg")
    lm = moved(LanguageModel(vocabulary.vocab_size, dtype="float64", seed=1, reversible=True, **SMALL), 0.3)
    assert not lm.has_cached_step
    with pytest.raises(ValueError, match="reversible blocks have no cached generation step"):
        lm.start_generation(1, 8)
    got = generate(lm, vocabulary, "ab", 10, temperature=0, context=5)
    assert got == greedy_over_windows(lm, vocabulary, "ab", 10, 5)


# ------------------------------------------------------------------ memory against depth

_PEAK_CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from transformer_cpp import LanguageModel, set_num_threads
    from transformer_cpp.bench.reversible import _reset_peak, _status_kb

    set_num_threads(1)
    layers, reversible = int(sys.argv[1]), sys.argv[2] == "1"
    lm = LanguageModel(8, d_model=64, n_layers=layers, n_heads=4, d_ff=128, dropout=0.0, max_len=512,
                       reversible=reversible, seed=0)
    tokens = np.random.default_rng(0).integers(1, 8, size=(4, 385)).astype(np.int64)
    lm.compute_gradients(tokens[:1, :9])  # buffers that do not depend on the batch
    for p in lm.parameters().values():
        p.grad[...] = 0.0
    base = _status_kb("VmRSS")
    assert _reset_peak()
    lm.compute_gradients(tokens)
    print(json.dumps({"added_kb": _status_kb("VmHWM") - base}))
    """
)


def peak_added_mb(layers: int, reversible: bool) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_CHILD, str(layers), "1" if reversible else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["added_kb"] / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak memory is read from /proc/self/status")
def test_reversible_activation_memory_does_not_grow_with_depth():
    # one training forward and backward of 4 x 384 positions: the ordinary blocks keep every
    # block's activations (each about 13 MB here, the attention weights included); the reversible
    # stack keeps the two streams and rebuilds one block at a time
    ordinary = {n: peak_added_mb(n, False) for n in (2, 8)}
    reversible = {n: peak_added_mb(n, True) for n in (2, 8)}
    assert ordinary[8] - ordinary[2] > 40.0, ordinary  # the ordinary stack grows with depth
    assert reversible[8] - reversible[2] < 0.1 * (ordinary[8] - ordinary[2]), (reversible, ordinary)


@pytest.mark.parametrize("options", [dict(attention="lsh"), dict(reversible=True)], ids=["lsh", "reversible"])
def test_the_memory_check_counts_what_the_options_keep(options, monkeypatch):
    # 4,096 positions: stored (B, H, T, T) weights would be 2 x 2 x 4096^2 floats, 134 MB, in each of
    # the 3 blocks; LSH attention keeps none, a reversible stack one block's (tiled here: none)
    tokens = tokens_for(8, (1, 4097), seed=1)
    lm = LanguageModel(8, d_model=16, n_layers=3, n_heads=2, d_ff=16, dropout=0.0, seed=0, **options)
    monkeypatch.setenv("TRANSFORMER_CPP_MEMORY_LIMIT", str(120 << 20))
    loss, count = lm.evaluate_loss(tokens)
    assert count == 4096 and math.isfinite(loss)
    monkeypatch.setenv("TRANSFORMER_CPP_MEMORY_LIMIT", str(1 << 20))
    with pytest.raises(ValueError, match="a batch of 1 sequences of length 4097 needs"):
        lm.evaluate_loss(tokens)


# ------------------------------------------------------------------ configuration


def test_config_json_round_trip_keeps_the_options():
    lm = LanguageModel(
        9,
        d_model=8,
        n_heads=2,
        n_layers=2,
        d_ff=8,
        attention="lsh",
        lsh_hashes=3,
        lsh_chunk=5,
        lsh_buckets=6,
        reversible=True,
    )
    config = json.loads(json.dumps(lm.config))
    assert (config["attention"], config["lsh_hashes"], config["lsh_chunk"], config["lsh_buckets"]) == ("lsh", 3, 5, 6)
    assert config["reversible"] is True
    again = LanguageModel.from_config(config)
    assert again.config == lm.config
    tokens = tokens_for(9, (1, 12))
    for name, p in again.parameters().items():
        p.value[...] = lm.parameters()[name].value
    np.testing.assert_array_equal(again.forward(tokens), lm.forward(tokens))
    # a configuration written before these fields existed gets their defaults
    old = {k: v for k, v in lm.config.items() if not k.startswith("lsh_") and k not in ("reversible", "attention")}
    restored = LanguageModel.from_config(old).config
    assert (restored["attention"], restored["reversible"], restored["lsh_hashes"]) == ("softmax", False, 4)


def test_bad_combinations_are_refused_with_clear_errors():
    with pytest.raises(ValueError, match=r"attention must be one of 'softmax', 'linear', 'lsh', 'relative', got 'LSH'"):
        LanguageModel(5, attention="LSH")
    with pytest.raises(ValueError, match="reversible=True needs pre_norm=True"):
        LanguageModel(5, d_model=8, n_heads=2, reversible=True, pre_norm=False)
    with pytest.raises(ValueError, match="lsh_buckets must be even"):
        LanguageModel(5, d_model=8, n_heads=2, attention="lsh", lsh_buckets=3)
    with pytest.raises(ValueError, match="lsh_hashes must be"):
        LanguageModel(5, d_model=8, n_heads=2, attention="lsh", lsh_hashes=0)
    with pytest.raises(ValueError, match="lsh_chunk must be"):
        LanguageModel(5, d_model=8, n_heads=2, attention="lsh", lsh_chunk=0)
    with pytest.raises(TypeError, match="reversible"):
        LanguageModel(5, d_model=8, n_heads=2, reversible="yes")
