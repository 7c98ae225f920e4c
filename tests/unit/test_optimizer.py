"""Adam (vs torch.optim.Adam), gradient clipping and the warm-up learning-rate schedule."""

import gc
from collections import OrderedDict

import numpy as np
import pytest
import torch

import transformer_cpp as tc
from transformer_cpp.functional import masked_cross_entropy, warmup_learning_rate
from transformer_cpp.layers import Embedding, LayerNorm
from transformer_cpp.optim import Adam

pytestmark = pytest.mark.torch  # the module imports PyTorch


# --- schedule ------------------------------------------------------------------------------------


def test_warmup_learning_rate_formula():
    for step in (1, 10, 3999, 4000, 4001, 100000):
        ref = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert warmup_learning_rate(step, 512) == pytest.approx(ref, rel=1e-15)
    assert warmup_learning_rate(50, 128, warmup=100, scale=2.0) == pytest.approx(
        2.0 * 128**-0.5 * 50 * 100**-1.5, rel=1e-15
    )
    # linear rise to the peak at step == warmup, then decay
    lrs = [warmup_learning_rate(s, 64, warmup=20) for s in range(1, 60)]
    assert int(np.argmax(lrs)) + 1 == 20
    assert lrs[0] == pytest.approx(lrs[9] / 10, rel=1e-14)


def test_warmup_learning_rate_bad_input():
    with pytest.raises(ValueError, match="step is counted from 1, got 0"):
        warmup_learning_rate(0, 512)
    with pytest.raises(ValueError, match="step"):
        warmup_learning_rate(-5, 512)
    with pytest.raises(ValueError, match="d_model must be positive"):
        warmup_learning_rate(1, 0)
    with pytest.raises(ValueError, match="warmup must be positive"):
        warmup_learning_rate(1, 512, warmup=0)


# --- Adam ----------------------------------------------------------------------------------------


def two_layers(dtype, seed=0):
    lin = tc.Linear(6, 4, seed=seed, dtype=dtype)
    ln = LayerNorm(4, dtype=dtype)
    rng = np.random.default_rng(seed)
    ln.parameters()["bias"].value[:] = rng.standard_normal(4)
    params = OrderedDict()
    for prefix, layer in (("lin", lin), ("norm", ln)):
        for name, p in layer.parameters().items():
            params[f"{prefix}.{name}"] = p
    return (lin, ln), params


@pytest.mark.parametrize("dtype,rtol,atol", [("float64", 1e-12, 1e-15), ("float32", 2e-6, 2e-7)])
def test_adam_matches_torch(dtype, rtol, atol):
    layers, params = two_layers(dtype)
    opt = Adam(params)
    assert isinstance(opt, Adam) and opt.dtype == np.dtype(dtype)
    tparams = [torch.tensor(p.value.copy(), requires_grad=True) for p in params.values()]
    topt = torch.optim.Adam(tparams, lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    rng = np.random.default_rng(1)
    for step in range(1, 8):
        lr = warmup_learning_rate(step, 4, warmup=3, scale=0.5)
        for p, tp in zip(params.values(), tparams):
            g = (rng.standard_normal(p.value.shape) * 10.0 ** rng.integers(-4, 2)).astype(dtype)
            p.grad[...] = g
            tp.grad = torch.from_numpy(g.copy())
        opt.step(lr)
        for group in topt.param_groups:
            group["lr"] = lr
        topt.step()
        assert opt.step_count == step
        for p, tp in zip(params.values(), tparams):
            np.testing.assert_allclose(p.value, tp.detach().numpy(), rtol=rtol, atol=atol)
    state = opt.state()
    assert list(state) == [f"{k}.{s}" for k in params for s in ("m", "v")]
    for name, tp in zip(params, tparams):
        np.testing.assert_allclose(state[name + ".m"], topt.state[tp]["exp_avg"].numpy(), rtol=rtol * 10, atol=atol)
        np.testing.assert_allclose(
            state[name + ".v"], topt.state[tp]["exp_avg_sq"].numpy(), rtol=rtol * 10, atol=atol * atol
        )


def test_adam_large_parameter_matches_torch():
    # 300 * 200 elements: the update loop runs on all threads
    emb = Embedding(300, 200, seed=2, dtype="float64")
    opt = Adam(emb.parameters())
    p = emb.parameters()["weight"]
    tp = torch.tensor(p.value.copy(), requires_grad=True)
    topt = torch.optim.Adam([tp], lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    rng = np.random.default_rng(3)
    for _ in range(3):
        g = rng.standard_normal(p.value.shape)
        p.grad[...] = g
        tp.grad = torch.from_numpy(g.copy())
        opt.step(1e-3)
        topt.step()
    np.testing.assert_allclose(p.value, tp.detach().numpy(), rtol=1e-12, atol=1e-15)


def test_adam_step_count_drives_bias_correction():
    _, params = two_layers("float64")
    opt = Adam(params, beta1=0.8, beta2=0.9, eps=1e-8)
    assert (opt.beta1, opt.beta2, opt.eps) == (0.8, 0.9, 1e-8)
    before = {k: p.value.copy() for k, p in params.items()}
    grads = {k: np.full(p.value.shape, 0.5) for k, p in params.items()}
    for k, p in params.items():
        p.grad[...] = grads[k]
    opt.step_count = 100
    opt.step(0.01)
    assert opt.step_count == 101
    for k, p in params.items():
        m = 0.2 * grads[k]
        v = 0.1 * grads[k] ** 2
        ref = before[k] - 0.01 / (1 - 0.8**101) * m / (np.sqrt(v) / np.sqrt(1 - 0.9**101) + 1e-8)
        np.testing.assert_allclose(p.value, ref, rtol=1e-14, atol=1e-16)
    opt.reset_state()
    assert opt.step_count == 0
    assert all(not a.any() for a in opt.state().values())


def test_adam_state_views_are_writable_for_checkpoints():
    _, params = two_layers("float64")
    opt = Adam(params)
    for p in params.values():
        p.grad[...] = 1.0
    opt.step(0.1)
    saved = {k: v.copy() for k, v in opt.state().items()}
    saved_values = {k: p.value.copy() for k, p in params.items()}
    opt.step(0.1)
    after_two = {k: p.value.copy() for k, p in params.items()}
    # restore the checkpoint after step 1 and replay step 2: the same numbers come out
    opt.reset_state()
    for k, v in opt.state().items():
        v[...] = saved[k]
    for k, p in params.items():
        p.value[...] = saved_values[k]
    opt.step_count = 1
    opt.step(0.1)
    for k, p in params.items():
        np.testing.assert_array_equal(p.value, after_two[k])


def test_adam_from_a_list_of_parameters():
    (lin, ln), _ = two_layers("float32")
    plist = list(lin.parameters().values()) + list(ln.parameters().values())
    opt = Adam(plist)
    # names repeat across the two layers, so the list index is prefixed
    assert opt.names == ["0.weight", "1.bias", "2.weight", "3.bias"] and len(opt) == 4
    only = Adam(lin.parameters().values())
    assert only.names == ["weight", "bias"]


def test_adam_keeps_the_layers_alive():
    opt = Adam(LayerNorm(5, dtype="float64").parameters())
    gc.collect()
    opt.step(0.1)  # zero gradients: the (alive) parameters do not move
    assert opt.clip_grad_norm(1.0) == 0.0


def test_clip_grad_norm_is_global():
    _, params = two_layers("float64")
    rng = np.random.default_rng(4)
    for p in params.values():
        p.grad[...] = rng.standard_normal(p.value.shape)
    grads = [p.grad.copy() for p in params.values()]
    norm = np.sqrt(sum((g**2).sum() for g in grads))
    tgrads = [torch.from_numpy(g.copy()) for g in grads]
    tparams = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for tp, g in zip(tparams, tgrads):
        tp.grad = g
    torch_norm = torch.nn.utils.clip_grad_norm_(tparams, max_norm=1e9).item()

    opt = Adam(params)
    assert opt.clip_grad_norm(0.0) == pytest.approx(norm, rel=1e-14)  # 0: measure only
    assert opt.clip_grad_norm(2 * norm) == pytest.approx(norm, rel=1e-14)  # below the limit
    for p, g in zip(params.values(), grads):
        np.testing.assert_array_equal(p.grad, g)
    assert opt.clip_grad_norm(norm / 4) == pytest.approx(torch_norm, rel=1e-14)
    for p, g in zip(params.values(), grads):
        np.testing.assert_allclose(p.grad, g / 4, rtol=1e-14)
    assert opt.clip_grad_norm(0.0) == pytest.approx(norm / 4, rel=1e-14)


def test_clip_grad_norm_large_float32():
    emb = Embedding(400, 100, seed=5)
    g = np.random.default_rng(6).standard_normal((400, 100)).astype(np.float32)
    emb.parameters()["weight"].grad[...] = g
    opt = Adam(emb.parameters())
    assert opt.clip_grad_norm(1.0) == pytest.approx(np.linalg.norm(g.astype(np.float64)), rel=1e-12)
    assert np.linalg.norm(emb.parameters()["weight"].grad.astype(np.float64)) == pytest.approx(1.0, rel=1e-6)


def test_a_tiny_model_learns():
    """Embedding -> LayerNorm -> Linear trained with Adam to map each token to itself."""
    vocab, d = 12, 16
    emb = Embedding(vocab, d, seed=7, dtype="float64")
    norm = LayerNorm(d, dtype="float64")
    out = tc.Linear(d, vocab, seed=8, dtype="float64")
    params = OrderedDict()
    for prefix, layer in (("emb", emb), ("norm", norm), ("out", out)):
        for name, p in layer.parameters().items():
            params[f"{prefix}.{name}"] = p
    opt = Adam(params)
    tokens = np.random.default_rng(9).integers(0, vocab, size=(8, 10))
    losses = []
    for _ in range(60):
        for layer in (emb, norm, out):
            layer.zero_grad()
        logits = out.forward(norm.forward(emb.forward(tokens)))
        loss, dlogits = masked_cross_entropy(logits, tokens)
        emb.backward(norm.backward(out.backward(dlogits)))
        opt.clip_grad_norm(5.0)
        opt.step(0.05)
        losses.append(loss)
    assert losses[0] > 2.0 and losses[-1] < 0.05, losses


def test_adam_bad_input():
    _, params = two_layers("float64")
    with pytest.raises(ValueError, match="no parameters"):
        Adam([])
    with pytest.raises(ValueError, match="no parameters"):
        Adam(OrderedDict())
    with pytest.raises(TypeError, match="Parameter objects"):
        Adam([np.zeros(3)])
    with pytest.raises(TypeError, match="Parameter objects"):
        Adam(list(params.values()) + [np.zeros(3)])
    _, params32 = two_layers("float32")
    with pytest.raises(TypeError, match="expected float64"):
        Adam(list(params.values()) + list(params32.values()))
    p = next(iter(params.values()))
    with pytest.raises(ValueError, match="given twice"):
        Adam([p, p])
    with pytest.raises(ValueError, match="beta1"):
        Adam(params, beta1=1.0)
    with pytest.raises(ValueError, match="beta2"):
        Adam(params, beta2=-0.1)
    with pytest.raises(ValueError, match="eps"):
        Adam(params, eps=-1.0)
    opt = Adam(params)
    with pytest.raises(ValueError, match=r"Adam.step: lr must be a finite number >= 0, got -1.0"):
        opt.step(-1.0)
    with pytest.raises(ValueError, match="Adam.step: lr must be a finite number >= 0, got nan"):
        opt.step(float("nan"))
    assert opt.step_count == 0  # a rejected step does not count
    with pytest.raises(ValueError, match="step_count"):
        opt.step_count = -1
