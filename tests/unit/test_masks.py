"""Mask semantics: the masks as matrices, causality of the decoder, invariance to extra padding,
and fully masked attention rows giving zeros rather than NaN."""

import numpy as np
import pytest

import transformer_cpp as tc

F, T = False, True


def test_look_ahead_mask_matrix():
    np.testing.assert_array_equal(
        tc.look_ahead_mask(4),
        [
            [F, T, T, T],
            [F, F, T, T],
            [F, F, F, T],
            [F, F, F, F],
        ],
    )
    assert tc.look_ahead_mask(1).tolist() == [[False]]
    assert tc.look_ahead_mask(3).dtype == bool


def test_padding_mask_matrix():
    np.testing.assert_array_equal(
        tc.padding_mask(np.array([[7, 3, 0, 0], [5, 0, 2, 0]])),
        [
            [F, F, T, T],
            [F, T, F, T],
        ],
    )


def test_decoder_self_attention_mask_is_the_union():
    tokens = np.array([[4, 9, 0], [2, 6, 8]])
    np.testing.assert_array_equal(
        tc.decoder_self_attention_mask(tokens),
        [
            [
                [F, T, T],  # sequence 0: position 2 is padding, so key 2 is blocked everywhere
                [F, F, T],
                [F, F, T],
            ],
            [
                [F, T, T],  # sequence 1: no padding, the look-ahead mask alone
                [F, F, T],
                [F, F, F],
            ],
        ],
    )
    rng = np.random.default_rng(0)
    tok = rng.integers(0, 4, (5, 6))
    expected = tc.look_ahead_mask(6)[None] | tc.padding_mask(tok)[:, None, :]
    np.testing.assert_array_equal(tc.decoder_self_attention_mask(tok), expected)


@pytest.mark.parametrize("bad", [0, -2, 2.5, True, "3"])
def test_look_ahead_mask_rejects_bad_sizes(bad):
    error = ValueError if type(bad) is int else TypeError  # out of range, or not an integer
    with pytest.raises(error, match=r"look_ahead_mask: size must be an integer >= 1, got"):
        tc.look_ahead_mask(bad)


def test_decoder_self_attention_mask_rejects_bad_tokens():
    with pytest.raises(ValueError, match=r"integer \(B, T\)"):
        tc.decoder_self_attention_mask(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"integer \(B, T\)"):
        tc.decoder_self_attention_mask(np.ones(3, int))


# --- causality and padding invariance of the whole model ----------------------------------------


def small_model(**kw):
    options = dict(d_model=16, n_layers=2, n_heads=4, d_ff=24, dropout=0.0, max_length=16, seed=3, dtype="float64")
    options.update(kw)
    return tc.Transformer(17, 19, **options)


def model_and_tokens(pre_norm, seed, src_len, tgt_len):
    """``small_model``, a generator seeded with ``seed`` and three source rows (ids 1..16) and three
    target rows (ids 1..18) drawn from it, in that order, without padding."""
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 17, (3, src_len))
    return small_model(pre_norm=pre_norm), rng, src, rng.integers(1, 19, (3, tgt_len))


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_output_at_t_ignores_later_target_tokens(pre_norm):
    model, rng, src, tgt = model_and_tokens(pre_norm, seed=1, src_len=6, tgt_len=7)
    base = model.forward(src, tgt)
    for t in range(7):
        changed = tgt.copy()
        changed[:, t + 1 :] = rng.integers(1, 19, (3, 6 - t))
        changed[0, t + 1 :] = 0  # also: turning later tokens into padding changes nothing before them
        out = model.forward(src, changed)
        np.testing.assert_allclose(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-12)
        if t < 6:
            assert not np.allclose(out[:, t + 1 :], base[:, t + 1 :]), "later positions must see the change"
    # and position t does depend on token t (the mask is not shifted by one)
    changed = tgt.copy()
    changed[:, 2] = (tgt[:, 2] % 18) + 1
    out = model.forward(src, changed)
    assert not np.allclose(out[:, 2], base[:, 2])
    np.testing.assert_allclose(out[:, :2], base[:, :2], rtol=0, atol=1e-12)


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_extra_source_padding_changes_nothing(pre_norm):
    model, rng, src, tgt = model_and_tokens(pre_norm, seed=2, src_len=5, tgt_len=4)
    src[1, 3:] = 0
    base = model.forward(src, tgt)
    for extra in (1, 4):
        longer = np.concatenate([src, np.zeros((3, extra), int)], axis=1)
        np.testing.assert_allclose(model.forward(longer, tgt), base, rtol=0, atol=1e-12)
    # replacing the padding with real tokens does change the output (the mask is what hides them)
    filled = src.copy()
    filled[1, 3:] = 5
    assert not np.allclose(model.forward(filled, tgt)[1], base[1])


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_extra_target_padding_changes_nothing_at_real_positions(pre_norm):
    model, rng, src, tgt = model_and_tokens(pre_norm, seed=3, src_len=5, tgt_len=4)
    tgt[2, 2:] = 0
    real = tgt != 0
    base = model.forward(src, tgt)
    longer = np.concatenate([tgt, np.zeros((3, 3), int)], axis=1)
    out = model.forward(src, longer)
    np.testing.assert_allclose(out[:, :4][real], base[real], rtol=0, atol=1e-12)
    # the loss over real targets is the same, and so is its gradient
    tgt_out = rng.integers(1, 19, (3, 4)) * real
    loss_a = model.evaluate(src, tgt, tgt_out)[0]
    loss_b = model.evaluate(src, longer, np.concatenate([tgt_out, np.zeros((3, 3), int)], axis=1))[0]
    assert loss_b == pytest.approx(loss_a, rel=1e-12)


def test_encoder_memory_at_real_positions_ignores_padding():
    enc = tc.Encoder(17, 16, 2, 4, 24, dropout=0.0, dtype="float64")
    rng = np.random.default_rng(4)
    src = rng.integers(1, 17, (2, 4))
    base = enc.forward(src)
    out = enc.forward(np.concatenate([src, np.zeros((2, 3), int)], axis=1))
    np.testing.assert_allclose(out[:, :4], base, rtol=0, atol=1e-12)


# --- attention weights of the model -------------------------------------------------------------


def test_model_attention_weights_respect_the_masks():
    model = small_model()
    rng = np.random.default_rng(5)
    src = rng.integers(1, 17, (2, 5))
    src[0, 3:] = 0
    tgt = rng.integers(1, 19, (2, 4))
    tgt[1, 3:] = 0
    model.forward(src, tgt)
    weights = model.attention_weights()
    assert set(weights) == {
        "encoder.layers.0.self_attention",
        "encoder.layers.1.self_attention",
        "decoder.layers.0.self_attention",
        "decoder.layers.1.self_attention",
        "decoder.layers.0.cross_attention",
        "decoder.layers.1.cross_attention",
    }
    enc = weights["encoder.layers.0.self_attention"]
    assert enc.shape == (2, 4, 5, 5)
    assert not enc[0, :, :, 3:].any()
    self_w = weights["decoder.layers.1.self_attention"]
    assert self_w.shape == (2, 4, 4, 4)
    assert not self_w[:, :, tc.look_ahead_mask(4)].any()
    assert not self_w[1, :, :, 3].any()
    cross = weights["decoder.layers.0.cross_attention"]
    assert cross.shape == (2, 4, 4, 5) and not cross[0, :, :, 3:].any()
    for w in weights.values():
        np.testing.assert_allclose(w.sum(-1), 1.0, rtol=0, atol=1e-12)


# --- fully masked rows --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fully_masked_rows_give_zeros_not_nan(dtype):
    rng = np.random.default_rng(6)
    q = rng.standard_normal((2, 3, 4)).astype(dtype)
    out, w = tc.scaled_dot_product_attention(q, q, q, np.ones((2, 3, 3), bool))
    assert np.all(out == 0) and np.all(w == 0)
    attn = tc.ScaledDotProductAttention(dtype=dtype)
    attn.forward(q, q, q, np.ones((3, 3), bool))
    for g in attn.backward(np.ones_like(q)):
        assert np.all(g == 0)
    # additive -inf masks, the usual source of NaN, behave the same
    out, w = tc.scaled_dot_product_attention(q, q, q, np.full((3, 3), -np.inf))
    assert np.all(out == 0) and np.all(w == 0)


def test_model_with_an_all_padding_source_and_target_row_is_finite():
    """A batch entry whose source is all padding (every cross-attention row dead) and whose target
    input starts with padding (a dead decoder self-attention row): forward, loss and one training
    step stay finite, and the other entries do not notice."""
    model = small_model(dtype="float32", dropout=0.1)
    rng = np.random.default_rng(7)
    src = rng.integers(1, 17, (3, 5))
    tgt_in = rng.integers(1, 19, (3, 4))
    tgt_out = rng.integers(1, 19, (3, 4))
    src[1] = 0
    tgt_in[2, 0] = 0
    alone = model.forward(src[[0]], tgt_in[[0]])
    logits = model.forward(src, tgt_in)
    assert np.all(np.isfinite(logits))
    np.testing.assert_allclose(logits[0], alone[0], rtol=1e-5, atol=1e-6)
    assert not model.attention_weights()["decoder.layers.0.cross_attention"][1].any()
    loss, _ = model.train_step(src, tgt_in, tgt_out)
    assert np.isfinite(loss) and np.isfinite(model.last_grad_norm)
    assert all(np.all(np.isfinite(p.value)) for p in model.parameters().values())


@pytest.mark.parametrize("after_a_step", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_train_step_on_a_batch_whose_sources_are_all_padding(dtype, after_a_step):
    """Every cross-attention row is dead, so the target side trains as a language model. train_step
    must accept the batch as forward/evaluate do, on a fresh model and right after a normal step."""
    model = small_model(dtype=dtype)
    model.configure_optimizer(fixed_lr=1e-3)
    rng = np.random.default_rng(8)
    tgt_in, tgt_out = rng.integers(1, 19, (3, 4)), rng.integers(1, 19, (3, 4))
    if after_a_step:
        model.train_step(rng.integers(1, 17, (3, 5)), tgt_in, tgt_out)
    empty = np.zeros((2, 6), int)
    expected, _ = model.evaluate(empty, tgt_in[:2], tgt_out[:2])
    before = model.parameters()["decoder.layers.0.feed_forward.linear1.weight"].value.copy()
    loss, _ = model.train_step(empty, tgt_in[:2], tgt_out[:2])
    assert loss == pytest.approx(expected, rel=1e-6)
    assert model.step == 1 + after_a_step
    assert not np.array_equal(model.parameters()["decoder.layers.0.feed_forward.linear1.weight"].value, before)
    assert all(np.all(np.isfinite(p.value)) for p in model.parameters().values())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_train_step_on_a_batch_whose_targets_are_all_padding(dtype):
    """No target counts: evaluate reports 0; train_step refuses (nothing to learn from) and nothing moves."""
    model = small_model(dtype=dtype)
    src = np.random.default_rng(9).integers(1, 17, (2, 5))
    none = np.zeros((2, 3), int)
    before = {n: p.value.copy() for n, p in model.parameters().items()}
    with pytest.raises(ValueError, match="tgt_out holds no target token.*no update was applied"):
        model.train_step(src, none, none)
    assert model.evaluate(src, none, none) == (0.0, 0.0)
    assert model.last_token_count == 0
    for n, p in model.parameters().items():
        np.testing.assert_array_equal(p.value, before[n], err_msg=n)
