"""Gradient checks (float64, central differences, relative error <= 1e-6) of the composite layers:
FeedForward, EncoderLayer and DecoderLayer (post-norm and pre-norm), the Encoder and Decoder stacks
and the whole Transformer — every input gradient and every parameter gradient, with padding and
look-ahead masks. Sizes are tiny so that differentiating every parameter stays fast."""

import gc

import numpy as np
import pytest

import transformer_cpp as tc
from helpers.layer_checks import (
    ZERO_GRADIENT_SUFFIXES,
    check_against_numeric,
    grads_of,
    parameter_items,
    randomise_parameters,
)

D, H, FF, V = 8, 2, 12, 11  # d_model, heads, d_ff, vocabulary


def tokens(rng, b, t, vocab=V, pad_from=None):
    """Random ids in [1, vocab) with row i padded (0) from position pad_from[i] on."""
    tok = rng.integers(1, vocab, (b, t))
    for i, p in enumerate(pad_from or []):
        if p is not None:
            tok[i, p:] = 0
    return tok


# --- feed-forward -------------------------------------------------------------------------------


def ffn_reference(params, x, mask=None):
    h = np.maximum(x @ params["linear1.weight"].value.T + params["linear1.bias"].value, 0.0)
    if mask is not None:
        h = h * mask
    return h @ params["linear2.weight"].value.T + params["linear2.bias"].value


def test_feed_forward_values_and_gradients():
    rng = np.random.default_rng(0)
    ffn = tc.FeedForward(D, FF, dropout=0.0, seed=1, dtype="float64")
    randomise_parameters(ffn, 1)
    p = ffn.parameters()
    assert list(p) == ["linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"]
    assert p["linear1.weight"].value.shape == (FF, D) and p["linear2.weight"].value.shape == (D, FF)
    x = rng.standard_normal((2, 4, D))
    y = ffn.forward(x, training=True)
    np.testing.assert_allclose(y, ffn_reference(p, x), rtol=0, atol=1e-13)
    h = x @ p["linear1.weight"].value.T + p["linear1.bias"].value
    assert (h < 0).mean() > 0.2, "the ReLU must be active on part of the input for the check to mean anything"
    w = rng.standard_normal(y.shape)
    ffn.zero_grad()
    ffn.forward(x, training=False)
    dx = ffn.backward(w)
    check_against_numeric(
        lambda: float(np.sum(ffn.forward(x) * w)), {"x": (x, dx), **parameter_items(ffn, grads_of(ffn))}
    )


def test_feed_forward_training_dropout_gradients():
    """The dropout mask is not exposed, but with d_ff <= d_model linear2 is injective, so the masked
    hidden activations — and from them the mask — can be recovered from one training forward.
    The backward of that same call must then be the gradient of the network with that mask."""
    rng = np.random.default_rng(1)
    d_model, d_ff, rate = 8, 6, 0.5
    ffn = tc.FeedForward(d_model, d_ff, dropout=rate, seed=3, dtype="float64")
    randomise_parameters(ffn, 2)
    p = ffn.parameters()
    x = rng.standard_normal((3, 5, d_model))
    y = ffn.forward(x, training=True)
    w = rng.standard_normal(y.shape)
    ffn.zero_grad()
    dx = ffn.backward(w)
    analytic = grads_of(ffn)

    h = np.maximum(x @ p["linear1.weight"].value.T + p["linear1.bias"].value, 0.0)  # (3, 5, d_ff)
    w2 = p["linear2.weight"].value
    hm = np.linalg.lstsq(w2, (y - p["linear2.bias"].value).reshape(-1, d_model).T, rcond=None)[0].T
    hm = hm.reshape(h.shape)
    live = h > 1e-3
    ratio = hm[live] / h[live]
    kept = np.isclose(ratio, 1 / (1 - rate), rtol=1e-8, atol=0)
    dropped = np.abs(ratio) < 1e-8
    assert np.all(kept | dropped), "the training output is not relu(x W1^T + b1) * mask W2^T + b2"
    assert 0.2 < dropped.mean() < 0.8  # dropout is active (rate 0.5 over ~45 live units)
    mask = np.where(h > 0, hm / np.where(h > 0, h, 1.0), 0.0)  # 0 or 1/(1-rate) where relu is live
    mask = np.where(np.isclose(mask, 1 / (1 - rate)), 1 / (1 - rate), 0.0)

    check_against_numeric(
        lambda: float(np.sum(ffn_reference(p, x, mask) * w)), {"x": (x, dx), **parameter_items(ffn, analytic)}
    )
    # inference mode: no dropout at all
    np.testing.assert_allclose(ffn.forward(x, training=False), ffn_reference(p, x), rtol=0, atol=1e-13)


# --- encoder and decoder layers -----------------------------------------------------------------


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_layer_gradients(pre_norm):
    rng = np.random.default_rng(2)
    layer = tc.EncoderLayer(D, H, FF, dropout=0.0, pre_norm=pre_norm, seed=4, dtype="float64")
    randomise_parameters(layer, 3)
    x = rng.standard_normal((3, 5, D))
    pad = tokens(rng, 3, 5, pad_from=[3, None, 4]) == 0
    mask = pad[:, None, :]  # (B, 1, T): padding keys
    w = rng.standard_normal(x.shape)
    layer.zero_grad()
    layer.forward(x, mask, training=True)
    dx = layer.backward(w)
    assert dx.shape == x.shape
    check_against_numeric(
        lambda: float(np.sum(layer.forward(x, mask) * w)), {"x": (x, dx), **parameter_items(layer, grads_of(layer))}
    )


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_layer_gradients(pre_norm):
    rng = np.random.default_rng(3)
    layer = tc.DecoderLayer(D, H, FF, dropout=0.0, pre_norm=pre_norm, seed=5, dtype="float64")
    randomise_parameters(layer, 4)
    assert list(layer.parameters())[0] == "self_attention.query.weight"
    assert any(n.startswith("cross_attention.") for n in layer.parameters())
    x = rng.standard_normal((3, 4, D))
    memory = rng.standard_normal((3, 5, D))
    self_mask = tc.decoder_self_attention_mask(tokens(rng, 3, 4, pad_from=[2, None, 3]))
    cross_mask = (tokens(rng, 3, 5, pad_from=[None, 3, 4]) == 0)[:, None, :]
    w = rng.standard_normal(x.shape)

    def loss():
        return float(np.sum(layer.forward(x, memory, self_mask, cross_mask) * w))

    layer.zero_grad()
    layer.forward(x, memory, self_mask, cross_mask)
    dx, dmem = layer.backward(w)
    assert dx.shape == x.shape and dmem.shape == memory.shape
    assert not dmem[1, 3:].any() and not dmem[2, 4:].any()  # padded source rows are never read
    check_against_numeric(loss, {"x": (x, dx), "memory": (memory, dmem), **parameter_items(layer, grads_of(layer))})


# --- stacks -------------------------------------------------------------------------------------


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_stack_gradients(pre_norm):
    rng = np.random.default_rng(4)
    enc = tc.Encoder(V, D, 2, H, FF, dropout=0.0, max_length=6, pre_norm=pre_norm, seed=6, dtype="float64")
    randomise_parameters(enc, 5)
    names = list(enc.parameters())
    assert names[0] == "embedding.weight" and "layers.1.norm2.bias" in names
    assert ("norm.weight" in names) == pre_norm
    src = tokens(rng, 3, 5, pad_from=[3, None, 4])
    w = rng.standard_normal((3, 5, D))
    enc.zero_grad()
    assert enc.forward(src).shape == (3, 5, D)
    assert enc.backward(w) is None  # token inputs have no gradient
    analytic = grads_of(enc)
    assert not analytic["embedding.weight"][0].any()  # padding row
    used = np.zeros(V, bool)
    used[src.ravel()] = True
    assert not analytic["embedding.weight"][~used].any()  # ids absent from the batch
    check_against_numeric(lambda: float(np.sum(enc.forward(src) * w)), parameter_items(enc, analytic))


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_stack_gradients(pre_norm):
    rng = np.random.default_rng(5)
    dec = tc.Decoder(V, D, 2, H, FF, dropout=0.0, max_length=6, pre_norm=pre_norm, seed=7, dtype="float64")
    randomise_parameters(dec, 6)
    tgt = tokens(rng, 3, 4, pad_from=[2, None, 3])
    memory = rng.standard_normal((3, 5, D))
    source_padding = tokens(rng, 3, 5, pad_from=[None, 3, 4]) == 0
    w = rng.standard_normal((3, 4, D))

    def loss():
        return float(np.sum(dec.forward(tgt, memory, source_padding) * w))

    dec.zero_grad()
    dec.forward(tgt, memory, source_padding)
    dmem = dec.backward(w)
    assert dmem.shape == memory.shape
    assert not dmem[source_padding].any()
    analytic = grads_of(dec)
    assert not analytic["embedding.weight"][0].any()
    check_against_numeric(loss, {"memory": (memory, dmem), **parameter_items(dec, analytic)})


# --- the whole model ----------------------------------------------------------------------------


def small_model(tgt_vocab=V + 2, **options):
    """A float64 Transformer of width D (H heads, feed-forward FF) over V source and ``tgt_vocab``
    target ids, up to 6 positions, one layer; ``options`` add to or replace these."""
    settings = dict(d_model=D, n_layers=1, n_heads=H, d_ff=FF, max_length=6, dtype="float64")
    settings.update(options)
    impl = settings.pop("attention_impl", "auto")  # the model's kernel setting, not a config field
    model = tc.Transformer(V, tgt_vocab, **settings)
    model.attention_impl = impl
    return model


def model_batch(rng, src_vocab=V, tgt_vocab=V + 2):
    src = tokens(rng, 3, 5, vocab=src_vocab, pad_from=[3, None, 4])
    tgt = tokens(rng, 3, 4, vocab=tgt_vocab, pad_from=[2, None, 3])
    return src, tgt


@pytest.mark.parametrize(
    "options",
    [
        dict(n_layers=2),
        dict(n_layers=1, pre_norm=True),
        dict(n_layers=1, share_embeddings=True),
        dict(n_layers=1, pre_norm=True, share_embeddings=True, layout="concatenated"),
        dict(n_layers=1, decoder_attention="linear"),
        dict(n_layers=1, pre_norm=True, decoder_attention="linear"),
        dict(n_layers=1, encoder_attention="linear"),
        # every softmax attention (self and cross) on the tiled kernel
        dict(n_layers=2, attention_impl="tiled"),
        dict(n_layers=1, pre_norm=True, decoder_attention="linear", attention_impl="tiled"),
    ],
    ids=[
        "post_norm_2_layers",
        "pre_norm",
        "shared_embeddings",
        "pre_norm_shared_concatenated",
        "linear_decoder",
        "pre_norm_linear_decoder",
        "linear_encoder",
        "tiled_2_layers",
        "tiled_pre_norm_linear_decoder",
    ],
)
def test_transformer_gradients(options):
    rng = np.random.default_rng(6)
    model = small_model(dropout=0.0, seed=8, **options)
    randomise_parameters(model, 7)
    names = list(model.parameters())
    assert ("output.weight" in names) != bool(options.get("share_embeddings"))
    src, tgt = model_batch(rng)
    w = rng.standard_normal((3, 4, V + 2))  # d loss / d logits: a fixed random tensor
    model.zero_grad()
    model.forward(src, tgt)
    model.backward(w)
    analytic = grads_of(model)
    assert not analytic["encoder.embedding.weight"][0].any()
    if options.get("share_embeddings"):
        # the tied matrix is both the decoder embedding and the output projection; row 0 (padding)
        # gets no embedding gradient but its projection gradient, sum over rows of dlogits[:, 0] * y
        assert analytic["decoder.embedding.weight"][0].any()
    else:
        assert not analytic["decoder.embedding.weight"][0].any()
    # rows 1: of the embeddings (row 0 is checked in test_transformer_tied_padding_row_gradient)
    check_against_numeric(
        lambda: float(np.sum(model.forward(src, tgt) * w)),
        parameter_items(model, analytic),
        zero_gradients=softmax_key_biases(model),
    )


def softmax_key_biases(model):
    """The names of the key biases of softmax attentions, whose true gradient is zero; a linear
    self-attention's key bias has a gradient like any weight."""
    linear = tuple(f"{side}." for side in ("encoder", "decoder") if model.config[f"{side}_attention"] == "linear")
    return tuple(
        n
        for n in model.parameters()
        if n.endswith(ZERO_GRADIENT_SUFFIXES) and not (n.startswith(linear) and ".self_attention." in n)
    )


def test_transformer_tied_padding_row_gradient():
    """With shared embeddings, row 0 of the decoder embedding is the output projection's row for
    the padding class. Outputs at real target positions never read the padding embedding (it is
    masked as a key and never a query there), so on a loss over real positions only its gradient is
    exactly the projection's — checked against central differences."""
    rng = np.random.default_rng(8)
    model = small_model(V, dropout=0.0, share_embeddings=True, seed=9)
    randomise_parameters(model, 9)
    src, tgt = model_batch(rng, V, V)
    w = rng.standard_normal((3, 4, V)) * (tgt != 0)[..., None]
    model.zero_grad()
    model.forward(src, tgt)
    model.backward(w)
    emb = model.parameters()["decoder.embedding.weight"]
    check_against_numeric(
        lambda: float(np.sum(model.forward(src, tgt) * w)), {"decoder.embedding.weight": (emb.value, emb.grad.copy())}
    )


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_transformer_gradients_with_training_dropout(pre_norm):
    """Dropout masks depend only on the seed and the call counter, so restoring ``dropout_calls``
    before every forward replays the same masks: the finite differences then see the same
    function as the backward."""
    rng = np.random.default_rng(10)
    model = small_model(dropout=0.3, pre_norm=pre_norm, seed=11)
    randomise_parameters(model, 12)
    src, tgt = model_batch(rng)
    w = rng.standard_normal((3, 4, V + 2))
    start = 5
    model.dropout_calls = start

    def run():
        model.dropout_calls = start
        return model.forward(src, tgt, training=True)

    out = run()
    assert model.dropout_calls == start + 1
    np.testing.assert_array_equal(run(), out)  # replayed
    model.dropout_calls = start + 1
    assert not np.allclose(model.forward(src, tgt, training=True), out)  # another mask
    assert not np.allclose(model.forward(src, tgt, training=False), out)  # dropout is on
    model.zero_grad()
    run()
    model.backward(w)
    check_against_numeric(lambda: float(np.sum(run() * w)), parameter_items(model, grads_of(model)))


# --- inputs that the bindings must convert --------------------------------------------------------


def _strided_float32(rng, shape):
    """A non-contiguous float32 view (every other element of a wider array): the binding must
    convert it to a contiguous float64 copy and keep that copy alive until backward."""
    wide = rng.standard_normal(shape[:-1] + (2 * shape[-1],)).astype(np.float32)
    return wide[..., ::2]


@pytest.mark.parametrize("kind", ["mha_self", "mha_cross", "feed_forward", "encoder_layer", "decoder_layer", "decoder"])
def test_backward_after_forward_on_a_converted_input(kind):
    makers = {
        "mha_self": lambda: tc.MultiHeadAttention(D, H, seed=3, dtype="float64"),
        "mha_cross": lambda: tc.MultiHeadAttention(D, H, seed=3, dtype="float64"),
        "feed_forward": lambda: tc.FeedForward(D, FF, dropout=0.0, seed=3, dtype="float64"),
        "encoder_layer": lambda: tc.EncoderLayer(D, H, FF, dropout=0.0, seed=3, dtype="float64"),
        "decoder_layer": lambda: tc.DecoderLayer(D, H, FF, dropout=0.0, seed=3, dtype="float64"),
        "decoder": lambda: tc.Decoder(V, D, 1, H, FF, dropout=0.0, seed=3, dtype="float64"),
    }
    tgt = tokens(np.random.default_rng(1), 2, 3)

    calls = {
        "mha_self": lambda layer, x, mem: layer.forward(x),
        "mha_cross": lambda layer, x, mem: layer.forward(x, mem),
        "feed_forward": lambda layer, x, mem: layer.forward(x),
        "encoder_layer": lambda layer, x, mem: layer.forward(x),
        "decoder_layer": lambda layer, x, mem: layer.forward(x, mem),
        "decoder": lambda layer, x, mem: layer.forward(tgt, mem),
    }
    call = calls[kind]

    rng = np.random.default_rng(0)
    a, b = makers[kind](), makers[kind]()
    x32, mem32 = _strided_float32(rng, (2, 3, D)), _strided_float32(rng, (2, 4, D))
    x64, mem64 = x32.astype(np.float64), mem32.astype(np.float64)
    dout = rng.standard_normal((2, 3, D))
    ya = call(a, x32, mem32)
    yb = call(b, x64, mem64)
    np.testing.assert_array_equal(ya, yb)
    del x32, mem32
    gc.collect()
    _ = [rng.standard_normal(64) for _ in range(100)]  # reuse freed memory if any were freed
    ga, gb = a.backward(dout), b.backward(dout)
    for u, v in zip(ga if isinstance(ga, tuple) else (ga,), gb if isinstance(gb, tuple) else (gb,)):
        np.testing.assert_array_equal(u, v)
    for (name, pa), pb in zip(a.parameters().items(), b.parameters().values()):
        np.testing.assert_array_equal(pa.grad, pb.grad, err_msg=name)


# --- the gradient inside train_step -----------------------------------------------------------------
#
# train_step computes its gradient on its own path (padding rows removed) and consumes it in a fused
# Adam pass, so it is never visible. It can be read back from the update: the first Adam step (with
# bias correction, m_hat = g and v_hat = g^2) moves a parameter by -lr * g / (|g| + eps), so with
# r = -delta / lr the gradient is g = r * eps / (1 - |r|). A large eps (1.0) keeps that inversion
# well conditioned in float64.

LR, ADAM_EPS = 1e-2, 1.0


def train_step_gradient(model, src, tgt_in, tgt_out):
    before = {n: p.value.copy() for n, p in model.parameters().items()}
    model.train_step(src, tgt_in, tgt_out)
    grads = {}
    for n, p in model.parameters().items():
        r = -(p.value - before[n]) / LR
        assert np.all(np.abs(r) < 1), n
        grads[n] = r * ADAM_EPS / (1 - np.abs(r))
    return grads


def twin_models(seed, **options):
    """Two identical float64 models (same seed, same randomised parameters)."""
    models = []
    for _ in range(2):
        m = small_model(seed=seed, **options)
        randomise_parameters(m, seed)
        models.append(m)
    return models


@pytest.mark.parametrize(
    "options,smoothing",
    [
        (dict(), 0.1),
        (dict(pre_norm=True, share_embeddings=True), 0.0),
        (dict(decoder_attention="linear"), 0.1),  # the packed rows through the linear attention
        (dict(encoder_attention="linear", decoder_attention="linear"), 0.0),
        (dict(attention_impl="tiled"), 0.1),  # the packed rows through the tiled kernel
    ],
    ids=["post_norm_label_smoothing", "pre_norm_shared", "linear_decoder", "linear_encoder_and_decoder", "tiled"],
)
def test_train_step_gradient_matches_finite_differences(options, smoothing):
    """The gradient train_step applies is the derivative of the loss evaluate() reports."""
    rng = np.random.default_rng(11)
    a, b = twin_models(12, dropout=0.0, **options)
    src, tgt = model_batch(rng)
    tgt_out = tokens(rng, 3, 4, vocab=V + 2, pad_from=[2, None, 3])  # padding where tgt_in has it
    for m in (a, b):
        m.configure_optimizer(fixed_lr=LR, eps=ADAM_EPS, label_smoothing=smoothing)
    analytic = train_step_gradient(a, src, tgt, tgt_out)
    check_against_numeric(
        lambda: b.evaluate(src, tgt, tgt_out)[0], parameter_items(b, analytic), zero_gradients=softmax_key_biases(b)
    )


def test_train_step_gradient_with_dropout_equals_forward_backward():
    """With dropout on, train_step (padding removed) and forward/backward (padded layout) started
    from the same dropout counter must drop the same elements, hence give the same gradient."""
    rng = np.random.default_rng(13)
    a, b = twin_models(14, dropout=0.3)
    src, tgt = model_batch(rng)
    tgt_out = tokens(rng, 3, 4, vocab=V + 2, pad_from=[2, None, 3])
    a.configure_optimizer(fixed_lr=LR, eps=ADAM_EPS)
    a.dropout_calls = b.dropout_calls = 7
    analytic = train_step_gradient(a, src, tgt, tgt_out)
    logits = b.forward(src, tgt, training=True)
    _, dlogits = tc.masked_cross_entropy(logits, tgt_out)
    b.zero_grad()
    b.backward(dlogits)
    assert a.dropout_calls == b.dropout_calls == 8
    for n, p in b.parameters().items():
        if n.endswith("key.bias"):  # zero in theory, rounding noise on both paths
            assert np.abs(analytic[n]).max() < 1e-12 and np.abs(p.grad).max() < 1e-12
            continue
        scale = np.abs(p.grad).max()
        assert scale > 0, n
        assert np.abs(analytic[n] - p.grad).max() <= 1e-9 * scale, n
    # and dropout was really on: without it the gradient differs
    c, _ = twin_models(14, dropout=0.0)
    logits = c.forward(src, tgt)
    c.zero_grad()
    c.backward(tc.masked_cross_entropy(logits, tgt_out)[1])
    g = c.parameters()["decoder.layers.0.feed_forward.linear1.weight"].grad
    assert not np.allclose(g, analytic["decoder.layers.0.feed_forward.linear1.weight"], rtol=1e-3)
