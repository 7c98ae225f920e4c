"""Finite-difference gradient checking shared by the layer tests (float64 only)."""

from __future__ import annotations

from typing import Callable, Dict

import numpy as np

EPS = 1e-6  # central-difference step in float64
TOLERANCE = 1e-6  # relative error allowed between analytic and numeric gradients


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / max(||a|| + ||b||, 1e-12): 0 when equal, ~1 when unrelated."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a) + np.linalg.norm(b), 1e-12))


def numeric_grad(f: Callable[[], float], x: np.ndarray, eps: float = EPS) -> np.ndarray:
    """d f / d x by central differences, perturbing ``x`` in place (it may be a parameter view)."""
    grad = np.zeros(x.shape, dtype=np.float64)
    flat = x.reshape(-1)
    assert np.shares_memory(flat, x), "x must be contiguous so it can be perturbed in place"
    g = grad.reshape(-1)
    for i in range(flat.size):
        g[i] = central_difference(f, flat, i, eps)
    return grad


def central_difference(f: Callable[[], float], flat: np.ndarray, i: int, eps: float = EPS) -> float:
    """d f / d flat[i] by one central difference, ``flat[i]`` restored afterwards."""
    old = flat[i]
    flat[i] = old + eps
    fp = f()
    flat[i] = old - eps
    fm = f()
    flat[i] = old
    return (fp - fm) / (2 * eps)


def check_layer(
    layer,
    inputs: Dict[str, np.ndarray],
    forward: Callable[..., np.ndarray],
    backward: Callable[[np.ndarray], Dict[str, np.ndarray]],
    seed: int = 0,
    tolerance: float = TOLERANCE,
) -> Dict[str, float]:
    """Check input and parameter gradients of ``layer`` against central differences.

    ``forward(**inputs)`` returns the output; ``backward(dout)`` returns a dict of input
    gradients keyed like ``inputs`` (missing keys are not checked). The scalar checked is
    ``sum(forward(...) * w)`` for a fixed random ``w``. Returns the relative errors by name and
    asserts each is below ``tolerance``.
    """
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(forward(**inputs).shape)

    def loss() -> float:
        return float(np.sum(forward(**inputs) * w))

    layer.zero_grad()
    forward(**inputs)
    analytic_inputs = backward(w)
    analytic_params = {name: p.grad.copy() for name, p in layer.parameters().items()}

    errors: Dict[str, float] = {}
    for name, g in analytic_inputs.items():
        errors[name] = rel_error(g, numeric_grad(loss, inputs[name]))
    for name, p in layer.parameters().items():
        errors[name] = rel_error(analytic_params[name], numeric_grad(loss, p.value))
    bad = {k: v for k, v in errors.items() if not v <= tolerance}
    assert not bad, f"gradient check failed (relative error > {tolerance}): {bad}"
    return errors
