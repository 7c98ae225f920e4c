"""Parity with the PyTorch reference (transformer_cpp.torch_reference): encoder layer, decoder layer
and the whole Transformer agree on outputs and on every parameter gradient, the masked loss agrees
with torch's cross_entropy(ignore_index=0), and a few training steps agree with torch.optim.Adam
under the same warm-up schedule.

Tolerance (float32): for each tensor, max |ours - torch| / max |torch| <= 1e-4. Both sides round
at float32 (eps 6e-8) through a few dozen operations of modest condition, which leaves errors near
1e-6 of the tensor's scale; 1e-4 keeps a wide margin for that, while a wrong formula (a missing
scale, a mask on the wrong side, a dropped residual) changes results by 1e-2 or more. The scale is
the tensor's largest entry rather than each entry, because small entries of a gradient are sums of
cancelling terms whose absolute error, not relative error, is what float32 bounds. The same
comparisons in float64 hold to 1e-10.
"""

import numpy as np
import pytest
import torch

import transformer_cpp as tc
from helpers.layer_checks import ZERO_GRADIENT_SUFFIXES, randomise_parameters
from transformer_cpp.torch_reference import (
    ReferenceDecoderLayer,
    ReferenceEncoderLayer,
    build_reference,
    copy_weights_to_reference,
    reference_gradients,
)

pytestmark = pytest.mark.torch  # the module imports PyTorch

TOL = {"float32": 1e-4, "float64": 1e-10}
D, H, FF = 16, 4, 24


def assert_close(ours, ref, tol, what):
    ours = np.asarray(ours, dtype=np.float64)
    ref = np.asarray(ref.detach().numpy() if isinstance(ref, torch.Tensor) else ref, dtype=np.float64)
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} vs {ref.shape}"
    assert np.all(np.isfinite(ours)), f"{what}: not finite"
    scale = np.abs(ref).max()
    assert scale > 0, f"{what}: the reference is all zeros, nothing is compared"
    err = np.abs(ours - ref).max() / scale
    assert err <= tol, f"{what}: max |ours - torch| / max |torch| = {err:.3g} > {tol}"


def assert_gradients_close(layer, ref, tol):
    """Every parameter gradient; the key bias (true gradient 0, pure rounding noise on both sides)
    is compared in absolute terms against the scale of all gradients."""
    ours = {n: p.grad for n, p in layer.parameters().items()}
    theirs = reference_gradients(ref)
    assert set(ours) == set(theirs)
    scale = max(np.abs(g).max() for g in theirs.values())
    # linear attention's weights are not invariant to the key bias: its gradient is compared as any
    config = getattr(layer, "config", {})
    linear = tuple(f"{side}." for side in ("encoder", "decoder") if config.get(f"{side}_attention") == "linear")
    for name, g in ours.items():
        if name.endswith(ZERO_GRADIENT_SUFFIXES) and not (name.startswith(linear) and ".self_attention." in name):
            assert np.abs(g).max() <= tol * scale and np.abs(theirs[name]).max() <= tol * scale, name
        else:
            assert_close(g, theirs[name], tol, name)


def tokens(rng, b, t, vocab, pad_from):
    tok = rng.integers(1, vocab, (b, t))
    for i, p in enumerate(pad_from):
        if p is not None:
            tok[i, p:] = 0
    return tok


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_encoder_layer_parity(pre_norm, dtype):
    rng = np.random.default_rng(0)
    layer = tc.EncoderLayer(D, H, FF, dropout=0.0, pre_norm=pre_norm, eps=1e-5, seed=1, dtype=dtype)
    randomise_parameters(layer, 1)
    ref = ReferenceEncoderLayer(D, H, FF, dropout=0.0, pre_norm=pre_norm, eps=1e-5).to(getattr(torch, dtype))
    copy_weights_to_reference(layer, ref)
    x = rng.standard_normal((4, 6, D)).astype(dtype)
    mask = (tokens(rng, 4, 6, 9, [3, None, 5, 1]) == 0)[:, None, :]
    dout = rng.standard_normal(x.shape).astype(dtype)

    y = layer.forward(x, mask)
    layer.zero_grad()
    dx = layer.backward(dout)
    xt = torch.tensor(x, requires_grad=True)
    yt = ref(xt, mask=torch.from_numpy(mask))
    yt.backward(torch.from_numpy(dout))

    tol = TOL[dtype]
    assert_close(y, yt, tol, "output")
    assert_close(dx, xt.grad, tol, "dx")
    assert_gradients_close(layer, ref, tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_decoder_layer_parity(pre_norm, dtype):
    rng = np.random.default_rng(2)
    layer = tc.DecoderLayer(D, H, FF, dropout=0.0, pre_norm=pre_norm, seed=3, dtype=dtype)
    randomise_parameters(layer, 2)
    ref = ReferenceDecoderLayer(D, H, FF, dropout=0.0, pre_norm=pre_norm).to(getattr(torch, dtype))
    copy_weights_to_reference(layer, ref)
    x = rng.standard_normal((4, 5, D)).astype(dtype)
    memory = rng.standard_normal((4, 7, D)).astype(dtype)
    self_mask = tc.decoder_self_attention_mask(tokens(rng, 4, 5, 9, [2, None, 4, None]))
    cross_mask = (tokens(rng, 4, 7, 9, [None, 3, 6, 1]) == 0)[:, None, :]
    dout = rng.standard_normal(x.shape).astype(dtype)

    y = layer.forward(x, memory, self_mask, cross_mask)
    layer.zero_grad()
    dx, dmem = layer.backward(dout)
    xt = torch.tensor(x, requires_grad=True)
    mt = torch.tensor(memory, requires_grad=True)
    yt = ref(xt, mt, self_mask=torch.from_numpy(self_mask), cross_mask=torch.from_numpy(cross_mask))
    yt.backward(torch.from_numpy(dout))

    tol = TOL[dtype]
    assert_close(y, yt, tol, "output")
    assert_close(dx, xt.grad, tol, "dx")
    assert_close(dmem, mt.grad, tol, "dmemory")
    assert_gradients_close(layer, ref, tol)


MODEL_VARIANTS = {
    "post_norm": dict(),
    "pre_norm": dict(pre_norm=True, layer_norm_eps=1e-2),  # a large eps, so a lost eps would show
    "shared_embeddings": dict(share_embeddings=True),
    "pre_norm_shared_concatenated": dict(pre_norm=True, share_embeddings=True, layout="concatenated"),
    # the decoder's masked self-attention as causal linear attention (ReferenceLinearAttention)
    "linear_decoder": dict(decoder_attention="linear"),
    "linear_decoder_pre_norm": dict(decoder_attention="linear", pre_norm=True, layer_norm_eps=1e-2),
    # the encoder's self-attention as linear attention over padded sources (their keys masked)
    "linear_encoder": dict(encoder_attention="linear"),
    "linear_both_pre_norm": dict(encoder_attention="linear", decoder_attention="linear", pre_norm=True),
    # every softmax attention (self and cross) on the tiled kernel, which keeps no weights
    "tiled": dict(attention_impl="tiled"),
    "tiled_pre_norm_linear_decoder": dict(attention_impl="tiled", decoder_attention="linear", pre_norm=True),
}


def parity_model(options, dtype="float32", dropout=0.0, seed=4):
    options = dict(options)
    impl = options.pop("attention_impl", "auto")  # the model's kernel setting, not a config field
    model = tc.Transformer(
        19,
        23,
        d_model=D,
        n_layers=2,
        n_heads=H,
        d_ff=FF,
        dropout=dropout,
        max_length=12,
        seed=seed,
        dtype=dtype,
        **options,
    )
    model.attention_impl = impl
    return model


def model_and_reference(options, dtype="float32", dropout=0.0, seed=4):
    model = parity_model(options, dtype, dropout, seed)
    ref = build_reference(model.config)
    copy_weights_to_reference(model, ref)
    return model, ref


def model_batch(rng):
    src = tokens(rng, 4, 7, 19, [4, None, 6, 2])
    tgt = tokens(rng, 4, 6, 23, [3, 5, None, 2])
    return src, tgt[:, :-1], tgt[:, 1:]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("variant", list(MODEL_VARIANTS))
def test_transformer_parity(variant, dtype):
    rng = np.random.default_rng(5)
    model = parity_model(MODEL_VARIANTS[variant], dtype, seed=6)
    randomise_parameters(model, 6, scale=0.1)
    ref = build_reference(model.config)
    assert next(ref.parameters()).dtype == getattr(torch, dtype)
    copy_weights_to_reference(model, ref)
    src, tgt_in, _ = model_batch(rng)
    dlogits = rng.standard_normal((4, 5, 23)).astype(dtype)

    logits = model.forward(src, tgt_in)
    model.zero_grad()
    model.backward(dlogits)
    lt = ref(src, tgt_in)
    lt.backward(torch.from_numpy(dlogits))

    tol = TOL[dtype]
    assert_close(logits, lt, tol, "logits")
    assert_gradients_close(model, ref, tol)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_masked_cross_entropy_matches_torch(label_smoothing):
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal((3, 5, 13)) * 3).astype(np.float32)
    targets = tokens(rng, 3, 5, 13, [2, None, 4])
    loss, dlogits = tc.masked_cross_entropy(logits, targets, label_smoothing)
    lt = torch.tensor(logits, requires_grad=True)
    ref = torch.nn.functional.cross_entropy(
        lt.reshape(-1, 13), torch.from_numpy(targets).reshape(-1), ignore_index=0, label_smoothing=label_smoothing
    )
    ref.backward()
    assert abs(loss - ref.item()) <= 1e-6 * abs(ref.item())
    assert_close(dlogits, lt.grad, 1e-5, "dlogits")
    assert not dlogits[targets == 0].any()  # padding targets contribute nothing


@pytest.mark.parametrize("variant", ["post_norm", "shared_embeddings"])
def test_model_loss_matches_torch(variant):
    rng = np.random.default_rng(8)
    model, ref = model_and_reference(MODEL_VARIANTS[variant])
    src, tgt_in, tgt_out = model_batch(rng)
    loss, acc = model.evaluate(src, tgt_in, tgt_out)
    with torch.no_grad():
        logits = ref(src, tgt_in)
        ref_loss = ref.loss(logits, tgt_out).item()
        real = torch.from_numpy(tgt_out) != 0
        ref_acc = ((logits.argmax(-1) == torch.from_numpy(tgt_out)) & real).sum().item() / real.sum().item()
    assert abs(loss - ref_loss) <= 1e-5 * ref_loss
    assert acc == pytest.approx(ref_acc, abs=1e-12)
    assert model.last_token_count == int((tgt_out != 0).sum())


@pytest.mark.parametrize(
    "variant,smoothing,clip",
    [
        ("post_norm", 0.0, 0.0),
        ("pre_norm_shared_concatenated", 0.0, 0.0),
        ("shared_embeddings", 0.1, 0.5),
        ("linear_decoder_pre_norm", 0.0, 0.0),  # train_step's packed rows through the linear attention
        ("linear_both_pre_norm", 0.0, 0.0),
        ("tiled", 0.0, 0.0),  # train_step's packed rows through the tiled kernel
    ],
)
def test_training_steps_match_torch_adam(variant, smoothing, clip):
    """Six train_steps of ours against the reference trained with torch.optim.Adam(betas=(0.9, 0.98),
    eps=1e-9) and the warm-up schedule as a LambdaLR (plus label smoothing and clipping to a global
    norm with clip_grad_norm_ in one case). The loss before each update is compared."""
    rng = np.random.default_rng(9)
    model, ref = model_and_reference(MODEL_VARIANTS[variant])
    warmup, scale = 3, 2.0
    model.configure_optimizer(warmup=warmup, lr_scale=scale, label_smoothing=smoothing, clip_norm=clip)
    opt = torch.optim.Adam(ref.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: tc.warmup_learning_rate(s + 1, D, warmup, scale))
    src, tgt_in, tgt_out = model_batch(rng)
    ours, theirs = [], []
    for step in range(6):
        assert model.learning_rate() == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12)
        ours.append(model.train_step(src, tgt_in, tgt_out)[0])
        opt.zero_grad()
        loss = ref.loss(ref(src, tgt_in), tgt_out, label_smoothing=smoothing)
        loss.backward()
        if clip:
            norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), clip).item()
            assert model.last_grad_norm == pytest.approx(norm, rel=1e-4)
            assert norm > clip  # the clipping is active
        opt.step()
        sched.step()
        theirs.append(loss.item())
    ours, theirs = np.array(ours), np.array(theirs)
    assert model.step == 6
    assert theirs[-1] < 0.8 * theirs[0], "the reference must actually train for the comparison to mean much"
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=0)


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post_norm", "pre_norm"])
def test_transformer_parity_medium_size(pre_norm):
    """Shapes large enough for the parallel paths (embedding rows, attention over batch x heads,
    blocked GEMM) and uneven padding in every sequence, float32."""
    rng = np.random.default_rng(10)
    model = tc.Transformer(
        50, 47, d_model=64, n_layers=2, n_heads=4, d_ff=128, dropout=0.0, max_length=32, pre_norm=pre_norm, seed=11
    )
    ref = build_reference(model.config)
    copy_weights_to_reference(model, ref)
    b, s, t = 16, 21, 18
    src = tokens(rng, b, s, 50, list(rng.integers(3, s + 1, b)))
    tgt_in = tokens(rng, b, t, 47, list(rng.integers(2, t + 1, b)))
    tgt_out = np.roll(tgt_in, -1, axis=1) * (tgt_in != 0)
    tgt_out[:, -1] = 0
    dlogits = rng.standard_normal((b, t, 47)).astype(np.float32)
    logits = model.forward(src, tgt_in)
    model.zero_grad()
    model.backward(dlogits)
    lt = ref(src, tgt_in)
    lt.backward(torch.from_numpy(dlogits))
    assert_close(logits, lt, TOL["float32"], "logits")
    assert_gradients_close(model, ref, TOL["float32"])
    loss, _ = model.evaluate(src, tgt_in, tgt_out)
    assert loss == pytest.approx(ref.loss(lt.detach(), tgt_out).item(), rel=1e-5)
