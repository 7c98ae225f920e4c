"""The model options that MarianMT checkpoints use, each checked in float64 against central
differences (forward/backward and the train step's loss): the feed-forward activation (gelu,
swish), no embedding scale, different encoder and decoder depths, one embedding for the source,
the target and the output layer (its gradients summed), and special ids other than 0/1/2 (padding
the last id and the decoder's start, end 0); and the defaults unchanged."""

import numpy as np
import pytest

import transformer_cpp as tc
from helpers.layer_checks import check_against_numeric, grads_of, randomise_parameters

D, H, FF, V = 8, 2, 12, 11
PAD = V - 1  # Marian's ids: padding is the last id and the decoder's start, the end is 0
MARIAN_IDS = dict(pad_id=PAD, start_id=PAD, end_id=0)


def batch(rng, pad=0, start=None):
    """src (3, 5), tgt (3, 4) ids other than pad, rows padded from a position on; tgt column 0 the start id."""

    def ids(shape, pad_from):
        tok = rng.integers(0, V - 1, shape)
        tok[tok >= pad] += 1  # every id but pad
        for i, p in enumerate(pad_from):
            if p is not None:
                tok[i, p:] = pad
        return tok

    src, tgt = ids((3, 5), [3, None, 4]), ids((3, 4), [2, None, 3])
    if start is not None:
        tgt[:, 0] = start
    return src, tgt


def parameter_items(model, analytic, pad):
    """``name -> (view, analytic gradient)``; embedding weights without the padding row, which gets
    no embedding gradient by convention (PyTorch's ``padding_idx``, MarianMTModel's too) although
    the start token (the padding id under Marian's ids) reads it."""
    items = {}
    for name, p in model.parameters().items():
        keep = slice(1, None) if pad == 0 else slice(0, pad)
        assert pad in (0, V - 1)  # a slice, so that the view perturbs the weights in place
        if name.endswith("embedding.weight"):
            items[name] = (p.value[keep], analytic[name][keep])
        else:
            items[name] = (p.value, analytic[name])
    return items


def make(**options):
    model = tc.Transformer(
        V, V, d_model=D, n_heads=H, d_ff=FF, dropout=0.0, max_length=6, seed=8, dtype="float64", **options
    )
    randomise_parameters(model, 7)
    return model


CASES = {
    "gelu": dict(n_layers=1, activation="gelu"),
    "swish": dict(n_layers=1, activation="swish"),
    "unscaled": dict(n_layers=1, scale_embedding=False),
    "depths_1_2": dict(n_encoder_layers=1, n_decoder_layers=2),
    "one_embedding": dict(n_layers=1, share_source_embedding=True, share_embeddings=True),
    "marian_ids": dict(n_layers=1, layout="concatenated", **MARIAN_IDS),
    "marian": dict(
        n_encoder_layers=2,
        n_decoder_layers=1,
        activation="swish",
        scale_embedding=False,
        share_source_embedding=True,
        share_embeddings=True,
        layout="concatenated",
        **MARIAN_IDS,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_backward_gradients(name):
    options = CASES[name]
    model = make(**options)
    pad = options.get("pad_id", 0)
    rng = np.random.default_rng(6)
    src, tgt = batch(rng, pad, options.get("start_id"))
    w = rng.standard_normal((3, 4, V))
    model.zero_grad()
    model.forward(src, tgt)
    model.backward(w)
    analytic = grads_of(model)
    names = list(analytic)
    assert ("encoder.embedding.weight" in names) != bool(options.get("share_source_embedding"))
    layers = {
        side: len({n.split(".")[2] for n in names if n.startswith(side + ".layers.")})
        for side in ("encoder", "decoder")
    }
    assert layers == {"encoder": options.get("n_encoder_layers", 1), "decoder": options.get("n_decoder_layers", 1)}
    check_against_numeric(lambda: float(np.sum(model.forward(src, tgt) * w)), parameter_items(model, analytic, pad))


def test_gelu_and_swish_change_the_function():
    """Each activation gives different logits from relu's with the same weights."""
    rng = np.random.default_rng(2)
    src, tgt = batch(rng)
    logits = {a: make(n_layers=1, activation=a).forward(src, tgt) for a in ("relu", "gelu", "swish")}
    assert np.abs(logits["relu"] - logits["gelu"]).max() > 1e-3
    assert np.abs(logits["gelu"] - logits["swish"]).max() > 1e-3


@pytest.mark.parametrize("name", ["marian", "one_embedding"])
def test_train_step_gradient_is_the_loss_derivative(name):
    """train_step's gradient (read back from one Adam step) is the derivative of evaluate()'s
    loss, with the padding id ignored by the loss and the shared embedding's gradients summed."""
    options = CASES[name]
    lr, eps = 1e-2, 1.0
    a, b = make(**options), make(**options)
    pad = options.get("pad_id", 0)
    rng = np.random.default_rng(11)
    src, tgt = batch(rng, pad, options.get("start_id"))
    tgt_out = batch(rng, pad)[1]
    tgt_out[tgt == pad] = pad
    tgt_out[:, 0] = 0 if pad else 1  # the first label is a real id (the end id 0 under Marian's ids)
    for m in (a, b):
        m.configure_optimizer(fixed_lr=lr, eps=eps)
    before = {n: p.value.copy() for n, p in a.parameters().items()}
    a.train_step(src, tgt, tgt_out)
    analytic = {}
    for n, p in a.parameters().items():
        r = -(p.value - before[n]) / lr
        analytic[n] = r * eps / (1 - np.abs(r))
    assert np.abs(analytic["decoder.embedding.weight"][pad]).max() > 0 or not options.get("share_embeddings")
    check_against_numeric(lambda: b.evaluate(src, tgt, tgt_out)[0], parameter_items(b, analytic, pad))


def test_padding_id_gets_no_loss_and_start_is_not_masked():
    model = make(n_layers=1, **MARIAN_IDS)
    rng = np.random.default_rng(4)
    src, tgt = batch(rng, PAD, PAD)
    tgt_out = batch(rng, PAD)[1]
    loss_all = model.evaluate(src, tgt, tgt_out)[0]
    cut = tgt_out.copy()
    cut[:, -1] = PAD  # labels set to padding drop out of the mean
    kept = cut != PAD
    assert kept.sum() < (tgt_out != PAD).sum()
    logits = model.forward(src, tgt)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.take_along_axis(logp, cut[..., None], -1)[..., 0][kept].mean()
    assert model.evaluate(src, tgt, cut)[0] == pytest.approx(expected, rel=1e-12)
    assert loss_all != pytest.approx(expected, rel=1e-6)
    # the start token (= padding) is attended to: changing nothing but its embedding row changes position 0
    emb = model.parameters()["decoder.embedding.weight"].value
    emb[PAD] += 0.5
    assert np.abs(model.forward(src, tgt)[:, 0] - logits[:, 0]).max() > 1e-6


def test_defaults_are_the_previous_model():
    c = tc.Transformer(V, V + 2, d_model=D, n_heads=H, d_ff=FF, n_layers=2).config
    assert (c["n_encoder_layers"], c["n_decoder_layers"], c["activation"], c["scale_embedding"]) == (0, 0, "relu", True)
    assert (c["pad_id"], c["start_id"], c["end_id"], c["share_source_embedding"]) == (0, 1, 2, False)
    names = list(tc.Transformer(V, V + 2, d_model=D, n_heads=H, d_ff=FF, n_layers=2).parameters())
    assert sum(n.startswith("encoder.layers.") and n.endswith("norm2.bias") for n in names) == 2
    assert sum(n.startswith("decoder.layers.") and n.endswith("norm3.bias") for n in names) == 2


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(share_source_embedding=True, tgt_vocab_size=V + 1), "share_source_embedding needs src_vocab_size equal"),
        (dict(pad_id=V), "pad_id must be below both vocabulary sizes"),
        (dict(pad_id=0, end_id=0), "end_id must differ from pad_id"),
        (dict(activation="tanh"), "activation"),
    ],
)
def test_bad_combinations_are_refused(options, message):
    kwargs = dict(src_vocab_size=V, tgt_vocab_size=V, d_model=D, n_heads=H, d_ff=FF)
    kwargs.update(options)
    with pytest.raises(ValueError, match=message):
        tc.Transformer(**kwargs)


def test_config_round_trip_and_older_configs():
    """A checkpoint's config dict rebuilds the model with the new fields; one written before them
    (without the keys) rebuilds with the defaults."""
    model = make(**CASES["marian"])
    again = tc.Transformer.from_config(model.config)
    assert again.config == model.config
    old = {k: v for k, v in make(n_layers=1).config.items()}
    for key in (
        "n_encoder_layers",
        "n_decoder_layers",
        "activation",
        "scale_embedding",
        "share_source_embedding",
        "pad_id",
        "start_id",
        "end_id",
    ):
        del old[key]
    rebuilt = tc.Transformer.from_config(old).config
    assert (rebuilt["activation"], rebuilt["pad_id"], rebuilt["start_id"], rebuilt["end_id"]) == ("relu", 0, 1, 2)


def test_decode_rows_pads_with_the_models_padding_id():
    from transformer_cpp.translate.decoding import DecodeOptions, decode_rows

    model = make(**CASES["marian"])
    rows = [[3, 4, 0], [5, 0]]
    options = DecodeOptions()
    found = decode_rows(model, rows, PAD, 0, options)
    src = np.array([[3, 4, 0], [5, 0, PAD]])
    limits = np.array([options.limit(len(r)) for r in rows])
    direct = model.greedy_decode(src, PAD, 0, int(limits.max()), max_lengths=limits)
    assert (direct[:, 0] != PAD).all()
    for hyps, row in zip(found, direct):
        assert hyps[0].ids == [int(v) for v in row if v != PAD]
        assert 0 < len(hyps[0].ids)
