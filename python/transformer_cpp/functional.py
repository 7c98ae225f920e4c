"""The Transformer's functions over the C++ core: softmax, the masked loss and accuracy, masks,
scaled dot-product attention, linear attention and the learning-rate schedule of the paper.

Functions choose the float32 or float64 core from their input array: float64 input runs the
float64 core, anything else float32. Token id 0 is padding everywhere: loss and accuracy ignore
targets equal to 0.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple, cast

import numpy as np

from . import _core
from ._checks import blocked as _blocked, integer as _integer

__all__ = [
    "attention_inputs",
    "decoder_self_attention_mask",
    "linear_attention",
    "linear_attention_inputs",
    "look_ahead_mask",
    "masked_accuracy",
    "masked_cross_entropy",
    "padding_mask",
    "rel_shift",
    "scaled_dot_product_attention",
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


def _function(name: str, x: ArrayLike) -> Any:
    return getattr(_core, f"{name}_{_suffix(x)}")


def softmax(x: ArrayLike) -> np.ndarray:
    """Numerically stable softmax over the last axis. A row that is entirely ``-inf`` (fully
    masked) gives zeros, not NaN."""
    return cast(np.ndarray, _function("softmax", x)(x))


def softmax_backward(y: ArrayLike, dy: ArrayLike) -> np.ndarray:
    """Gradient of the softmax input from its output ``y`` and the output gradient ``dy``:
    ``y * (dy - sum(dy * y, axis=-1))``."""
    return cast(np.ndarray, _function("softmax_backward", y)(y, dy))


def rel_shift(x: ArrayLike) -> np.ndarray:
    """Transformer-XL's relative shift of scores ``x`` (..., T, L), L >= T: ``out[..., i, j] =
    x[..., i, j + T-1-i]`` for ``j <= L-T+i``, else 0. When column ``p`` of ``x`` belongs to the
    relative distance ``L-1-p``, entry ``(i, j)`` of the result belongs to distance ``L-T+i-j``:
    query ``i`` of a segment that follows ``L-T`` memory positions against key ``j``."""
    return cast(np.ndarray, _function("rel_shift", x)(x))


def padding_mask(tokens: ArrayLike) -> np.ndarray:
    """Boolean ``(B, T)`` array, ``True`` where ``tokens == 0`` (padding)."""
    return _core.padding_mask(tokens)


def masked_cross_entropy(
    logits: ArrayLike, targets: ArrayLike, label_smoothing: float = 0.0, *, compute_grad: bool = True
) -> Tuple[float, Optional[np.ndarray]]:
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
    return cast(
        Tuple[float, Optional[np.ndarray]],
        _function("masked_cross_entropy", logits)(logits, targets, label_smoothing, compute_grad),
    )


def masked_accuracy(logits: ArrayLike, targets: ArrayLike) -> float:
    """Fraction of non-padding targets whose ``argmax(logits)`` is right (0.0 if there are none).
    Logits holding NaN or infinity raise NonFiniteError (a RuntimeError)."""
    return cast(float, _function("masked_accuracy", logits)(logits, targets))


def warmup_learning_rate(step: int, d_model: int, warmup: int = 4000, scale: float = 1.0) -> float:
    """The schedule of the paper: ``scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)``.

    ``step`` counts from 1 (``ValueError`` for ``step <= 0``); the rate rises linearly for
    ``warmup`` steps and then decays as ``step**-0.5``.
    """
    return _core.warmup_learning_rate(step, d_model, warmup, scale)


# --- masks ----------------------------------------------------------------------------------------
#
# Masks are boolean with True = blocked (the query may not attend to that key), as PyTorch's boolean
# attention masks and the original TensorFlow tutorial's 0/1 masks; additive masks of 0 / -inf (or
# -1e9) work as well. Any other value (NaN, 0.5, 2) is refused (``_checks.blocked``).


def look_ahead_mask(size: int) -> np.ndarray:
    """``(size, size)`` boolean mask, True above the diagonal: position i may not see j > i."""
    size = _integer("look_ahead_mask", "size", size, 1)
    _core._check_memory("look_ahead_mask", f"a ({size}, {size}) mask", float(min(2 * int(size) ** 2, 10**300)))
    return np.triu(np.ones((size, size), dtype=bool), k=1)


def decoder_self_attention_mask(tokens: np.ndarray) -> np.ndarray:
    """``(B, T, T)`` union of the look-ahead mask and the padding mask of target ``tokens`` (B, T)."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.dtype.kind not in "iu":
        raise ValueError(
            f"decoder_self_attention_mask: tokens must be an integer (B, T) array, got {tokens.dtype} {tokens.shape}"
        )
    return _core.attention_mask((tokens == 0).astype(np.uint8), tokens.shape[1], True)


def attention_inputs(
    q: Any, k: Any, v: Any, mask: Any, who: str
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Optional[np.ndarray], Tuple[int, ...]]:
    """Attention's arguments as the core takes them: ``q`` (G, Tq, d), ``k`` and ``v`` (G, Tk, d)
    with the leading dimensions flattened into G groups, the mask broadcast to (G, Tq, Tk) as
    uint8 (or None), and the leading dimensions; ``ValueError`` naming ``who`` for shapes that do
    not fit together."""
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ValueError(f"{who}: q, k, v must have the same rank >= 2, got shapes {q.shape}, {k.shape}, {v.shape}")
    lead = q.shape[:-2]
    if k.shape[:-2] != lead or v.shape[:-2] != lead:
        raise ValueError(f"{who}: q, k, v must share leading dimensions, got {q.shape}, {k.shape}, {v.shape}")
    if k.shape[-2] != v.shape[-2] or not (q.shape[-1] == k.shape[-1] == v.shape[-1]):
        raise ValueError(
            f"{who}: expected q (..., Tq, d), k (..., Tk, d), v (..., Tk, d) with one d and one Tk; "
            f"got q, k, v of shapes {q.shape}, {k.shape}, {v.shape}"
        )
    g = int(np.prod(lead)) if lead else 1
    tq, tk = q.shape[-2], k.shape[-2]
    m = None
    if mask is not None:
        _core._check_memory(who, f"a mask of {g} groups of ({tq}, {tk})", 2.0 * float(g) * float(tq) * float(tk))
        mm = _blocked(who, "mask", mask)
        try:
            mm = np.broadcast_to(mm, lead + (tq, tk))
        except ValueError:
            raise ValueError(f"{who}: mask of shape {mm.shape} does not broadcast to {lead + (tq, tk)}") from None
        m = np.ascontiguousarray(mm.reshape(g, tq, tk), dtype=np.uint8)
    return q.reshape(g, tq, -1), k.reshape(g, tk, -1), v.reshape(g, tk, -1), m, lead


def scaled_dot_product_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Any = None
) -> Tuple[np.ndarray, np.ndarray]:
    """``softmax(Q K^T / sqrt(d_k) + mask) V`` computed in C++; returns ``(output, attention_weights)``.

    Shapes: ``q`` (..., Tq, d), ``k``/``v`` (..., Tk, d); ``mask`` broadcastable to (..., Tq, Tk),
    True (or 1, or -inf additively) = blocked. A query whose keys are all blocked gets zero weights and output.
    The dtype follows ``q`` (float64 stays float64, anything else is float32).
    """
    dtype = "float64" if np.asarray(q).dtype == np.float64 else "float32"
    q3, k3, v3, m, lead = attention_inputs(q, k, v, mask, "scaled_dot_product_attention")
    out, w = getattr(_core, f"ScaledDotProductAttention_{dtype}")().forward(q3, k3, v3, m)
    return out.reshape(lead + out.shape[1:]), w.reshape(lead + w.shape[1:])


def linear_attention_inputs(
    q: Any, k: Any, v: Any, causal: Any, who: str
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Tuple[int, ...]]:
    """Linear attention's arguments as the core takes them: ``q``, ``k``, ``v`` of one shape
    (..., T, d) flattened to (G, T, d), and the leading dimensions; ``ValueError`` (``TypeError``
    for a ``causal`` that is not a bool) naming ``who`` otherwise."""
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"{who}: causal must be True or False, got {causal!r}")
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if q.ndim < 2 or not (q.shape == k.shape == v.shape):
        raise ValueError(
            f"{who}: q, k, v must have one shape (..., T, d) of rank >= 2 (self-attention: the queries, keys "
            f"and values of the same positions), got shapes {q.shape}, {k.shape}, {v.shape}"
        )
    lead = q.shape[:-2]
    g = int(np.prod(lead)) if lead else 1
    t, d = q.shape[-2:]
    return q.reshape(g, t, d), k.reshape(g, t, d), v.reshape(g, t, d), lead


def linear_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False) -> np.ndarray:
    """Linear attention (Katharopoulos et al. 2020) computed in C++.

    ``out_i = phi(q_i) sum_j phi(k_j)^T v_j / (phi(q_i) . sum_j phi(k_j) + 1e-6)`` with the feature
    map ``phi(x) = elu(x) + 1``; the sums run over every position ``j``, or over ``j <= i`` with
    ``causal=True``. Time and memory are linear in the length T. Shapes: ``q``, ``k``, ``v``
    (..., T, d), e.g. (B, heads, T, d); the output has the same shape. The dtype follows ``q``
    (float64 stays float64, anything else is float32).
    """
    dtype = "float64" if np.asarray(q).dtype == np.float64 else "float32"
    q3, k3, v3, lead = linear_attention_inputs(q, k, v, causal, "linear_attention")
    out = getattr(_core, f"LinearAttention_{dtype}")().forward(q3, k3, v3, bool(causal))
    return cast(np.ndarray, out.reshape(lead + out.shape[1:]))
