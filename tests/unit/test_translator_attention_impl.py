"""The translator's softmax attention on the plain or the tiled kernel (``Transformer.attention_impl``):
"auto" tiles long inputs and keeps the weights of short ones, every kernel gives the plain kernel's
logits, gradients and training steps, the memory check counts the weights only where they are kept,
and bad values are refused by name. (The float64 finite differences and the PyTorch parity of a
tiled model are variants of test_layers_gradcheck.py and test_torch_parity.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import transformer_cpp as tc

from helpers.layer_checks import randomise_parameters

LONG = 520  # past the length from which "auto" tiles (tuning::kTiledAttentionMinLength, 512)
EXACT = 1e-10  # float64: one kernel against the other (the same sums in another order)


def model(impl, dtype="float64", **options):
    settings = dict(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_length=LONG + 8, dropout=0.0, seed=3)
    settings.update(options)
    m = tc.Transformer(31, 29, dtype=dtype, **settings)
    randomise_parameters(m, 5, scale=0.3)
    m.attention_impl = impl
    return m


def batch(src_len, tgt_len=6, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(3, 31, (2, src_len))
    src[0, src_len * 3 // 4 :] = 0  # padding: masked keys in the encoder and the cross-attention
    tgt = rng.integers(3, 29, (2, tgt_len + 1))
    tgt[1, tgt_len - 1 :] = 0
    return src, tgt[:, :-1], tgt[:, 1:]


def relative(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def softmax_key_bias(name):
    """A softmax attention's key bias: its true gradient is zero (a softmax does not change when
    every score of a row moves alike), so what either kernel gives is rounding noise."""
    return name.endswith("attention.key.bias")


def assert_gradients_close(got, expected, tol):
    scale = max(float(np.max(np.abs(g))) for g in expected.values())
    for name, g in expected.items():
        limit = tol * (scale if softmax_key_bias(name) else float(np.max(np.abs(g))))
        assert float(np.max(np.abs(got[name] - g))) <= limit, name


def forward_backward(m, src, tgt_in, seed=1):
    logits = m.forward(src, tgt_in)
    dlogits = np.random.default_rng(seed).standard_normal(logits.shape)
    m.zero_grad()
    m.backward(dlogits)
    return logits, {n: p.grad.copy() for n, p in m.parameters().items()}


def test_auto_is_the_default_and_a_setting_of_the_model_only():
    m = tc.Transformer(31, 29, d_model=16, n_layers=1, n_heads=2, d_ff=32)
    assert m.attention_impl == "auto"
    m.attention_impl = "plain"
    assert m.attention_impl == "plain"
    assert "attention_impl" not in m.config  # a kernel choice, not part of the saved architecture


@pytest.mark.parametrize("decoder_attention", ["softmax", "linear"])
def test_auto_tiles_long_inputs_with_the_plain_kernels_results(decoder_attention):
    src, tgt_in, _ = batch(LONG)
    auto = model("auto", decoder_attention=decoder_attention)
    plain = model("plain", decoder_attention=decoder_attention)
    logits, grads = forward_backward(auto, src, tgt_in)
    # the encoder's self-attention (520 keys) ran the tiled kernel, so it kept no weights
    with pytest.raises(RuntimeError, match=r"encoder\.layers\.0\.self_attention \(520 keys; attention_impl 'auto'\)"):
        auto.attention_weights()
    expected, expected_grads = forward_backward(plain, src, tgt_in)
    assert relative(logits, expected) < EXACT
    assert_gradients_close(grads, expected_grads, EXACT)
    weights = plain.attention_weights()
    assert weights["encoder.layers.0.self_attention"].shape == (2, 2, LONG, LONG)
    assert weights["decoder.layers.0.cross_attention"].shape == (2, 2, 6, LONG)


def test_auto_keeps_the_weights_of_short_inputs():
    src, tgt_in, _ = batch(12)
    auto, plain = model("auto"), model("plain")
    auto.forward(src, tgt_in)
    plain.forward(src, tgt_in)
    got, expected = auto.attention_weights(), plain.attention_weights()
    assert sorted(got) == sorted(expected) and len(got) == 3
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])


def test_tiled_train_steps_equal_the_plain_kernels():
    """train_step's packed rows through either kernel: the same losses and the same weights after."""
    src, tgt_in, tgt_out = batch(LONG)
    models = [model(impl) for impl in ("tiled", "plain")]
    losses = []
    for m in models:
        m.configure_optimizer(warmup=2, lr_scale=1.0, label_smoothing=0.1)
        losses.append([m.train_step(src, tgt_in, tgt_out)[0] for _ in range(3)])
    np.testing.assert_allclose(losses[0], losses[1], rtol=EXACT, atol=0)
    assert losses[0][-1] < losses[0][0]  # the steps changed the weights
    tiled, plain = (m.parameters() for m in models)
    for name, p in plain.items():
        if not softmax_key_bias(name):  # Adam turns their noise gradients into full-size steps
            assert relative(tiled[name].value, p.value) < 1e-9, name


def test_float32_tiled_against_plain():
    src, tgt_in, _ = batch(LONG)
    logits, grads = forward_backward(model("tiled", "float32"), src, tgt_in)
    expected, expected_grads = forward_backward(model("plain", "float32"), src, tgt_in)
    assert relative(logits, expected) < 1e-5
    assert_gradients_close(grads, expected_grads, 1e-4)


def test_the_memory_check_counts_the_weights_only_where_they_are_kept(monkeypatch):
    """A batch whose (B, heads, S, S) weights would not fit runs tiled, and plain is refused."""
    m = tc.Transformer(31, 29, d_model=16, n_layers=1, n_heads=8, d_ff=32, max_length=2100)
    src = np.full((1, 2000), 5)
    tgt_in = np.full((1, 4), 6)
    # the weights of the encoder's 2,000 keys: 2 * 8 heads * 2000^2 float32 = 256 MB
    monkeypatch.setenv("TRANSFORMER_CPP_MEMORY_LIMIT", str(96 * 2**20))
    assert m.forward(src, tgt_in).shape == (1, 4, 29)
    m.attention_impl = "plain"
    with pytest.raises(
        ValueError, match=r"Transformer\.forward: a batch of 1 sequences of source length 2000 .* needs"
    ):
        m.forward(src, tgt_in)


def test_the_memory_check_counts_no_weights_for_linear_self_attention(monkeypatch):
    """Linear attention keeps no (S, S) weights: its batch fits where softmax's plain kernel's does not."""
    src = np.full((1, 2000), 5)
    tgt_in = np.full((1, 4), 6)
    monkeypatch.setenv("TRANSFORMER_CPP_MEMORY_LIMIT", str(96 * 2**20))
    for attention, fits in (("linear", True), ("softmax", False)):
        m = tc.Transformer(31, 29, d_model=16, n_layers=1, n_heads=8, d_ff=32, max_length=2100,
                           encoder_attention=attention)  # fmt: skip
        m.attention_impl = "plain"  # the cross-attention keeps its (4, 2000) weights: small
        if fits:
            assert m.forward(src, tgt_in).shape == (1, 4, 29)
        else:
            with pytest.raises(ValueError, match=r"source length 2000 .* needs"):
                m.forward(src, tgt_in)


def test_bad_values_are_refused_by_name():
    m = model("auto")
    with pytest.raises(ValueError, match=r"Transformer: attention_impl must be 'plain', 'tiled' or 'auto', got 'fast'"):
        m.attention_impl = "fast"
    with pytest.raises(TypeError, match="attention_impl"):
        m.attention_impl = 3
    assert m.attention_impl == "auto"  # unchanged
