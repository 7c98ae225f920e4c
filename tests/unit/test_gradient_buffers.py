"""The parameter gradients start as zeros that no constructor writes (large ones are pages of a
memory mapping, supplied when first written; see ``core/gradient_buffer.hpp``): the gradients of
the first backward are those of a model whose gradient memory was written (zeroed) beforehand,
``zero_grad`` clears whatever was written, gradients accumulate; a shared source embedding is tied
from construction and the model's weights are those it always had; reading or zeroing ``step``
leaves a model without an optimiser as it was."""

from __future__ import annotations

import numpy as np
import pytest

import transformer_cpp as tc

V = 2100  # embeddings and the output layer of (V, 16): large enough to be mapped, in float32 too


def _model(dtype: str, **options: object) -> tc.Transformer:
    settings = dict(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, seed=3)
    settings.update(options)
    return tc.Transformer(V, V, dtype=dtype, **settings)


def _batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    src = rng.integers(1, V, size=(3, 6)).astype(np.int64)
    tgt = rng.integers(1, V, size=(3, 5)).astype(np.int64)
    src[0, 4:] = 0  # padding: no gradient into row 0
    dlogits = rng.standard_normal((3, 5, V))
    return src, tgt, dlogits


def _backward(model: tc.Transformer, seed: int = 0) -> None:
    src, tgt, dlogits = _batch(seed)
    model.forward(src, tgt)
    model.backward(dlogits.astype(model.parameters()["output.bias"].value.dtype))


def _grads(model: tc.Transformer) -> dict:
    return {name: p.grad.copy() for name, p in model.parameters().items()}


OPTIONS = [{}, {"share_embeddings": True}, {"share_embeddings": True, "share_source_embedding": True}]
IDS = ["separate", "tied_output", "one_embedding"]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("options", OPTIONS, ids=IDS)
def test_first_backward_equals_that_of_written_zeroed_gradients(dtype: str, options: dict) -> None:
    fresh = _model(dtype, **options)
    for name, p in fresh.parameters().items():  # never written: zeros all the same
        assert not p.grad.any(), name
    written = _model(dtype, **options)
    for p in written.parameters().values():
        p.grad[...] = 1.0  # every page of its gradients written ...
    written.zero_grad()  # ... then zeroed: as gradients allocated and cleared up front
    _backward(fresh)
    _backward(written)
    want = _grads(written)
    for name, got in _grads(fresh).items():
        assert got.tobytes() == want[name].tobytes(), name
    assert any(g.any() for g in want.values())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_zero_grad_clears_every_value_written(dtype: str) -> None:
    model = _model(dtype, share_embeddings=True)
    rng = np.random.default_rng(1)
    params = model.parameters()
    for i, p in enumerate(params.values()):
        g = p.grad.reshape(-1)
        g[...] = rng.standard_normal(g.size)
        g[:: 7 + i] = -0.0  # a negative zero is a written value too: zero_grad makes it +0
        g[3 :: 11 + i] = np.nan
    first = next(iter(params.values())).grad.reshape(-1)
    first[: first.size // 2] = 0.0  # whole blocks already zero are left as they are
    model.zero_grad()
    for name, p in params.items():
        assert not p.grad.view(np.uint8).any(), name  # every byte 0: +0.0 everywhere


@pytest.mark.parametrize("options", OPTIONS, ids=IDS)
def test_gradients_accumulate_until_zero_grad(options: dict) -> None:
    model = _model("float64", **options)
    _backward(model)
    once = _grads(model)
    _backward(model)
    for name, g in _grads(model).items():  # a tied weight sums two uses in its order: to rounding
        np.testing.assert_allclose(g, 2 * once[name], rtol=1e-13, atol=1e-15, err_msg=name)
    model.zero_grad()
    _backward(model)
    for name, g in _grads(model).items():
        np.testing.assert_array_equal(g, once[name], err_msg=name)


def test_training_from_untouched_gradients_equals_training_from_written_ones() -> None:
    """train_step zeroes the gradients before its first backward and after every update."""
    fresh, written = _model("float32"), _model("float32")
    for p in written.parameters().values():
        p.grad[...] = 3.0
    src, tgt, _ = _batch(2)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    for model in (fresh, written):
        model.configure_optimizer(fixed_lr=1e-3)
    for _ in range(2):
        assert fresh.train_step(src, tgt_in, tgt_out) == written.train_step(src, tgt_in, tgt_out)
    for name, p in fresh.parameters().items():
        np.testing.assert_array_equal(p.value, written.parameters()[name].value, err_msg=name)


def test_a_shared_source_embedding_leaves_every_other_weight_as_it_was() -> None:
    """The encoder of a model with one embedding is built after the decoder and uses its
    embedding from the start; each stack's weights come from its own seed, so every weight is
    the one the same model without sharing has."""
    shared = _model("float32", share_source_embedding=True).parameters()
    separate = _model("float32").parameters()
    assert set(separate) - set(shared) == {"encoder.embedding.weight"}
    for name, p in shared.items():
        np.testing.assert_array_equal(p.value, separate[name].value, err_msg=name)


def test_the_shared_embedding_gradient_sums_both_uses() -> None:
    shared = _model("float64", share_source_embedding=True)
    separate = _model("float64")
    separate.parameters()["encoder.embedding.weight"].value[...] = shared.parameters()["decoder.embedding.weight"].value
    _backward(shared)
    _backward(separate)
    g = separate.parameters()
    np.testing.assert_allclose(
        shared.parameters()["decoder.embedding.weight"].grad,
        g["encoder.embedding.weight"].grad + g["decoder.embedding.weight"].grad,
        rtol=1e-12,
        atol=1e-14,
    )


def test_step_of_a_model_without_an_optimiser() -> None:
    model = _model("float32")
    assert model.step == 0
    model.step = 0  # nothing to restore: the model stays as it was
    assert model.step == 0
    assert all(not p.value.any() for p in model.optimizer_state().values())
    model.step = 7
    assert model.step == 7
    src, tgt, _ = _batch(3)
    model.train_step(src, tgt[:, :-1], tgt[:, 1:])
    assert model.step == 8
