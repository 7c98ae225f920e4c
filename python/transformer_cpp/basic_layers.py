"""The basic building blocks: LayerNorm, ReLU, embeddings, softmax, the masked loss and Adam.

Layers follow the surface described in :mod:`transformer_cpp.layers` (``forward``, ``backward``,
``parameters``, ``zero_grad``) and choose their float32 / float64 build by ``dtype``. Functions
choose it from their input array: float64 input runs the float64 core, anything else float32.

Token id 0 is padding everywhere: its embedding row is zero and never learns, and loss and
accuracy ignore targets equal to 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterable, Tuple, Union

import numpy as np

from . import _core
from .layers import core_class

__all__ = [
    "Adam",
    "Embedding",
    "LayerNorm",
    "PositionalEmbedding",
    "ReLU",
    "masked_accuracy",
    "masked_cross_entropy",
    "padding_mask",
    "softmax",
    "softmax_backward",
    "warmup_learning_rate",
]

ArrayLike = Any


def _suffix(x: ArrayLike) -> str:
    """``"float64"`` for float64 input, else ``"float32"`` (the core reports other bad dtypes)."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        dtype = np.asarray(x).dtype
    return "float64" if np.dtype(dtype) == np.float64 else "float32"


def _function(name: str, x: ArrayLike):
    return getattr(_core, f"{name}_{_suffix(x)}")


# --- layers ------------------------------------------------------------------------------------


def LayerNorm(d_model: int, eps: float = 1e-6, *, dtype: Any = "float32"):
    """Layer normalisation over the last axis, as ``torch.nn.LayerNorm(d_model, eps=eps)``.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias`` with the biased variance (divide by
    ``d_model``) and ``eps`` inside the square root. Parameters ``"weight"`` (ones) and ``"bias"``
    (zeros), each of shape ``(d_model,)``.

    ``forward(x)`` maps ``(..., d_model)`` to the same shape. ``forward_residual(a, b)`` computes
    ``LN(a + b)`` (the "Add & Norm" of the paper) without a separate sum; after it, ``backward``
    returns ``d(a + b)``, which is the gradient of both ``a`` and ``b``.
    """
    return core_class("LayerNorm", dtype)(d_model, eps)


def ReLU(*, dtype: Any = "float32"):
    """``y = max(x, 0)`` element-wise; ``backward(dout)`` passes ``dout`` where ``y > 0``."""
    return core_class("ReLU", dtype)()


def Embedding(vocab_size: int, d_model: int, *, seed: int = 0, dtype: Any = "float32"):
    """Token embedding with padding id 0.

    The ``"weight"`` parameter ``(vocab_size, d_model)`` starts as ``N(0, d_model**-0.5)`` with
    row 0 zero; row 0 never receives gradient (like ``padding_idx=0`` in PyTorch).
    ``forward(tokens, scale=1.0)`` maps int ``(B, T)`` ids to ``weight[tokens] * scale`` of shape
    ``(B, T, d_model)``; ids outside ``[0, vocab_size)`` raise ``ValueError``.
    ``backward(dout)`` accumulates the weight gradient and returns ``None``.
    """
    return core_class("Embedding", dtype)(vocab_size, d_model, seed)


def PositionalEmbedding(vocab_size: int, d_model: int, max_length: int = 2048, layout: str = "interleaved",
                        *, seed: int = 0, dtype: Any = "float32"):
    """The input layer of the Transformer: ``weight[tokens] * sqrt(d_model) + PE[:T]``.

    ``PE`` is the sinusoidal table of :func:`transformer_cpp.positional_encoding` with the given
    ``layout`` (``"interleaved"`` or ``"concatenated"``), built once for ``max_length`` positions
    (``.table``). ``forward(tokens)`` takes int ids ``(B, T)`` with ``T <= max_length`` and returns
    ``(B, T, d_model)``; the embedding weight is as in :func:`Embedding`.
    """
    return core_class("PositionalEmbedding", dtype)(vocab_size, d_model, max_length, layout, seed)


# --- functions -----------------------------------------------------------------------------------


def softmax(x: ArrayLike) -> np.ndarray:
    """Numerically stable softmax over the last axis. A row that is entirely ``-inf`` (fully
    masked) gives zeros, not NaN."""
    return _function("softmax", x)(x)


def softmax_backward(y: ArrayLike, dy: ArrayLike) -> np.ndarray:
    """Gradient of the softmax input from its output ``y`` and the output gradient ``dy``:
    ``y * (dy - sum(dy * y, axis=-1))``."""
    return _function("softmax_backward", y)(y, dy)


def padding_mask(tokens: ArrayLike) -> np.ndarray:
    """Boolean ``(B, T)`` array, ``True`` where ``tokens == 0`` (padding)."""
    return _core.padding_mask(tokens)


def masked_cross_entropy(logits: ArrayLike, targets: ArrayLike, label_smoothing: float = 0.0, *,
                         compute_grad: bool = True) -> Tuple[float, Union[np.ndarray, None]]:
    """Softmax cross-entropy from logits averaged over the targets that are not padding (0).

    Args:
        logits: ``(B, T, V)`` or ``(N, V)`` float scores.
        targets: int ids of shape ``logits.shape[:-1]`` in ``[0, V)``; 0 is ignored.
        label_smoothing: ``eps`` in ``[0, 1]``; the target distribution is
            ``(1 - eps) * onehot + eps / V`` as in ``torch.nn.functional.cross_entropy``.
        compute_grad: when False, skip the gradient (evaluation) and return ``None`` for it.

    Returns:
        ``(loss, dlogits)``: the mean loss (0.0 when every target is padding) and its gradient with
        respect to ``logits`` (same shape and dtype), computed in the same pass.

    Raises:
        ValueError: target ids out of range, mismatched shapes, label_smoothing outside [0, 1].
        NonFiniteError: (a RuntimeError and FloatingPointError) the logits hold NaN or infinity.
    """
    return _function("masked_cross_entropy", logits)(logits, targets, label_smoothing, compute_grad)


def masked_accuracy(logits: ArrayLike, targets: ArrayLike) -> float:
    """Fraction of non-padding targets whose ``argmax(logits)`` is right (0.0 if there are none).
    Logits holding NaN or infinity raise NonFiniteError (a RuntimeError)."""
    return _function("masked_accuracy", logits)(logits, targets)


def warmup_learning_rate(step: int, d_model: int, warmup: int = 4000, scale: float = 1.0) -> float:
    """The schedule of the paper: ``scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)``.

    ``step`` counts from 1 (``ValueError`` for ``step <= 0``); the rate rises linearly for
    ``warmup`` steps and then decays as ``step**-0.5``.
    """
    return _core.warmup_learning_rate(step, d_model, warmup, scale)


# --- optimiser -----------------------------------------------------------------------------------


def Adam(parameters: Union[Mapping, Iterable], beta1: float = 0.9, beta2: float = 0.98, eps: float = 1e-9):
    """Adam over the parameters of one or more layers (``torch.optim.Adam`` with bias correction).

    Args:
        parameters: the ordered dict returned by a layer's ``parameters()`` (its keys name the
            state) or a list of ``Parameter`` objects (named by ``Parameter.name``, prefixed with
            their index if names repeat). All must share one dtype, which picks the float32 or
            float64 optimiser.
        beta1, beta2, eps: as in the paper (0.9, 0.98, 1e-9).

    The returned object has ``step(lr)``, ``clip_grad_norm(max_norm) -> norm`` (global L2 norm
    over all gradients), a settable ``step_count`` and ``state()``, an ordered dict of writable
    views ``"<name>.m"`` / ``"<name>.v"`` of the moments for checkpoints. It keeps the layers
    alive and updates their memory in place.
    """
    if isinstance(parameters, Mapping):
        first = next(iter(parameters.values()), None)
    else:
        parameters = list(parameters)
        first = parameters[0] if parameters else None
    if first is None:
        raise ValueError("Adam: got no parameters to optimise")
    value = getattr(first, "value", None)
    if value is None:
        raise TypeError(f"Adam: parameters must be Parameter objects (from a layer's parameters()), "
                        f"got {type(first).__name__}")
    return core_class("Adam", value.dtype)(parameters, beta1, beta2, eps)
