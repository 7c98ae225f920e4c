"""Helpers for the gradient checks of the composite layers (attention, encoder/decoder, Transformer).

``helpers/gradcheck.py`` checks a layer with one forward signature; the composite layers need more
freedom (several inputs, token inputs without gradient, embedding rows that are padding by
convention, parameters whose true gradient is zero), so these helpers take the pieces explicitly.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Tuple

import numpy as np
import pytest

import transformer_cpp as tc
from .gradcheck import TOLERANCE, numeric_grad, rel_error

# The key bias adds q . b_k to every score of a query row; softmax is invariant to that shift, so
# its true gradient is exactly zero and both sides hold only rounding noise (~1e-15 analytic,
# ~1e-10 numeric for an O(1) loss and step 1e-6).
ZERO_GRADIENT_SUFFIXES = ("key.bias",)
ANALYTIC_ZERO = 1e-11
NUMERIC_ZERO = 1e-7


def randomise_parameters(layer, seed: int, scale: float = 0.3, skip: Iterable[str] = ()) -> None:
    """Add ``scale * N(0, 1)`` to every parameter (biases and LayerNorm weights move away from
    0 and 1, so a gradient formula that only works at the initial values is caught). Embedding row
    0 (padding) stays zero."""
    rng = np.random.default_rng(seed)
    for name, p in layer.parameters().items():
        if any(s in name for s in skip):
            continue
        v = p.value
        noise = scale * rng.standard_normal(v.shape)
        if name.endswith("embedding.weight"):
            noise[0] = 0.0
        v += noise.astype(v.dtype)


def parameter_items(layer, analytic: Dict[str, np.ndarray]) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """``name -> (view to perturb, analytic gradient)`` for every parameter. Embedding weights are
    checked on rows 1: only: row 0 is padding and gets no gradient by convention (like PyTorch's
    ``padding_idx``), which is not the derivative of the outputs at padded positions."""
    items = {}
    for name, p in layer.parameters().items():
        if name.endswith("embedding.weight"):
            items[name] = (p.value[1:], analytic[name][1:])
        else:
            items[name] = (p.value, analytic[name])
    return items


def check_against_numeric(
    loss: Callable[[], float],
    items: Dict[str, Tuple[np.ndarray, np.ndarray]],
    tolerance: float = TOLERANCE,
    zero_gradients: Tuple[str, ...] = ZERO_GRADIENT_SUFFIXES,
) -> Dict[str, float]:
    """Compare each analytic gradient with central differences of ``loss`` over its view.

    Relative error is ``||a - n|| / (||a|| + ||n||)`` over the whole tensor (``gradcheck.rel_error``);
    it must be <= ``tolerance``. Parameters whose true gradient is zero (names ending in one of
    ``zero_gradients``; by default softmax attention's key bias, which shifts every score of a row
    alike) are instead required to be ~0 on both sides in absolute terms. Returns the errors by name.
    """
    errors: Dict[str, float] = {}
    bad = {}
    # Thousands of tiny forwards: one thread avoids OpenMP barrier stalls when the cores are shared
    # (the analytic gradients were computed with the default thread count).
    threads = tc.get_num_threads()
    tc.set_num_threads(1)
    try:
        numerics = {name: numeric_grad(loss, view) for name, (view, _) in items.items()}
    finally:
        tc.set_num_threads(threads)
    for name, (view, analytic) in items.items():
        numeric = numerics[name]
        if zero_gradients and name.endswith(zero_gradients):
            a, n = float(np.abs(analytic).max()), float(np.abs(numeric).max())
            errors[name] = max(a, n)
            if not (a <= ANALYTIC_ZERO and n <= NUMERIC_ZERO):
                bad[name] = (a, n)
            continue
        # a gradient that is zero on both sides would make the check vacuous
        assert np.linalg.norm(numeric) > 1e-8, f"{name}: the numeric gradient is zero, the check proves nothing"
        errors[name] = rel_error(analytic, numeric)
        if not errors[name] <= tolerance:
            bad[name] = errors[name]
    assert not bad, f"gradient check failed (relative error > {tolerance} or a nonzero 'zero' gradient): {bad}"
    return errors


def check_lm_gradients(lm, tokens: np.ndarray, per_parameter: int = 2, seed: int = 7) -> int:
    """A float64 language model's ``compute_gradients`` against central differences of
    ``evaluate_loss`` (step 1e-6) at ``per_parameter`` random entries of every parameter: each entry
    within 1e-6 relative (+ 1e-8 for gradients that are zero by symmetry), and the relative error
    of all of them together <= 1e-6. Returns how many entries were compared."""
    lm.compute_gradients(tokens, training=False)
    grads = {name: np.array(p.grad) for name, p in lm.parameters().items()}
    rng = np.random.default_rng(seed)
    eps = 1e-6
    numeric, analytic = [], []
    for name, p in lm.parameters().items():
        flat = p.value.reshape(-1)
        for i in rng.choice(flat.size, size=min(per_parameter, flat.size), replace=False):
            old = flat[i]
            flat[i] = old + eps
            up, _ = lm.evaluate_loss(tokens)
            flat[i] = old - eps
            down, _ = lm.evaluate_loss(tokens)
            flat[i] = old
            n, a = (up - down) / (2 * eps), grads[name].reshape(-1)[i]
            assert abs(n - a) <= 1e-6 * max(abs(n), abs(a)) + 1e-8, (name, i, n, a)
            numeric.append(n)
            analytic.append(a)
    num, ana = np.array(numeric), np.array(analytic)
    assert np.linalg.norm(num - ana) / (np.linalg.norm(num) + np.linalg.norm(ana)) <= 1e-6
    return len(numeric)


def check_lm_against_torch(
    lm, tokens: np.ndarray, reference: Callable[[Dict[str, Any]], Any], rel: float, rtol: float, atol: float
) -> None:
    """A language model's loss and every gradient of ``compute_gradients`` on ``tokens`` (no
    dropout) against ``reference(weights)``, a PyTorch loss of tensors holding the same weights
    (by parameter name), and its autograd: the loss within ``rel``, each gradient within
    ``rtol`` and ``atol``."""
    import torch

    loss = lm.compute_gradients(tokens, training=False)
    weights = {n: torch.tensor(np.array(p.value), requires_grad=True) for n, p in lm.parameters().items()}
    ref = reference(weights)
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=rel)
    for name, p in lm.parameters().items():
        np.testing.assert_allclose(p.grad, weights[name].grad.numpy(), rtol=rtol, atol=atol, err_msg=name)


def grads_of(layer) -> Dict[str, np.ndarray]:
    """A copy of the gradient of each parameter of ``layer``, by name."""
    return {n: p.grad.copy() for n, p in layer.parameters().items()}


def check_accumulated(layer, once: Dict[str, np.ndarray], rtol: float, atol: float) -> None:
    """After a second backward pass every gradient of ``layer`` is twice ``once``, its gradients
    after the first (within ``rtol`` and ``atol``), and ``zero_grad`` clears them all."""
    for n, p in layer.parameters().items():
        np.testing.assert_allclose(p.grad, 2 * once[n], rtol=rtol, atol=atol)
    layer.zero_grad()
    assert all(not p.grad.any() for p in layer.parameters().values())


# The language-model tests' model: two blocks of width 8, no dropout.
LM_SMALL = dict(d_model=8, n_layers=2, n_heads=2, d_ff=12, dropout=0.0, max_len=16)


def tokens_for(vocab: int, shape, seed: int = 0) -> np.ndarray:
    """Random token ids in [1, vocab) (no padding), int64."""
    rng = np.random.default_rng(seed)
    return rng.integers(1, vocab, size=shape).astype(np.int64)


def check_input_errors(layer, shape: Tuple[int, int, int]) -> None:
    """The errors a self-attention layer gives for an input ``x`` other than the (batch, length,
    d_model) ``shape`` it takes: one dimension fewer, another last dimension, integers; and for a
    ``causal`` that is not True or False. Each names the layer's forward and what it allows."""
    batch, length, d_model = shape
    who = f"{type(layer).__name__}.forward"
    with pytest.raises(ValueError, match=rf"{who}: x must have shape \(batch, length, {d_model}\)"):
        layer.forward(np.zeros((length, d_model)))
    with pytest.raises(ValueError, match=f"{who}: x must have last dimension {d_model}"):
        layer.forward(np.zeros((batch, length, d_model + 1)))
    with pytest.raises(TypeError, match=f"{who}: x must be a floating-point array"):
        layer.forward(np.zeros(shape, dtype=np.int64))
    with pytest.raises(TypeError, match=f"{who}: causal must be True or False"):
        layer.forward(np.zeros(shape), causal=1)
