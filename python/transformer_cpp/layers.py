"""The C++ layers, one factory per layer, choosing the float32 or float64 build by ``dtype``.

Every layer object has the same surface:

* ``forward(x, ...)`` — NumPy in, NumPy out (a copy; the layer keeps what backward needs);
* ``backward(dout)`` — returns the gradient of the input(s) and *accumulates* parameter gradients;
* ``parameters()`` — an ordered dict ``name -> Parameter`` whose ``.value`` and ``.grad`` are
  writable NumPy views of the C++ memory (writing ``.value[...]`` changes the layer);
* ``zero_grad()`` — the only thing that clears parameter gradients.

``float32`` is what models train with; ``float64`` exists so that tests can check every backward
pass against finite differences.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Dropout",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "Linear",
    "MultiHeadAttention",
    "ScaledDotProductAttention",
    "core_class",
    "decoder_self_attention_mask",
    "look_ahead_mask",
    "scaled_dot_product_attention",
]


def core_class(name: str, dtype: Any = "float32") -> type:
    """The ``_core`` class ``name`` for ``dtype`` (``"float32"`` or ``"float64"``)."""
    try:
        dt = np.dtype(dtype).name
    except TypeError as exc:
        raise ValueError(f"{name}: dtype must be 'float32' or 'float64', got {dtype!r}") from exc
    if dt not in ("float32", "float64"):
        raise ValueError(f"{name}: dtype must be 'float32' or 'float64', got {dtype!r}")
    return getattr(_core, f"{name}_{dt}")


def Linear(in_features: int, out_features: int, bias: bool = True, *, seed: int = 0, dtype: Any = "float32"):
    """Dense layer ``y = x W^T + b``; ``W`` has shape ``(out_features, in_features)`` as in PyTorch.

    Weights are Glorot-uniform from ``seed``, the bias starts at zero.
    ``forward(x)`` maps ``(..., in_features)`` to ``(..., out_features)``.
    """
    return core_class("Linear", dtype)(in_features, out_features, bias, seed)


def Dropout(rate: float = 0.1, *, seed: int = 0, dtype: Any = "float32"):
    """Inverted dropout. ``forward(x, training=True)`` zeroes each element with probability ``rate``
    and scales the rest by ``1 / (1 - rate)``; with ``training=False`` it is the identity.
    Masks depend only on ``seed`` and the call count (``.calls``), never on the thread count."""
    return core_class("Dropout", dtype)(rate, seed)


# --- masks ----------------------------------------------------------------------------------------
#
# Masks are boolean with True = blocked (the query may not attend to that key), as PyTorch's boolean
# attention masks and the original TensorFlow tutorial's 0/1 masks. Any non-zero value counts as
# blocked, so additive masks of 0 / -inf (or -1e9) work as well.


def look_ahead_mask(size: int) -> np.ndarray:
    """``(size, size)`` boolean mask, True above the diagonal: position i may not see j > i."""
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size <= 0:
        raise ValueError(f"look_ahead_mask: size must be a positive integer, got {size!r}")
    _core._check_memory("look_ahead_mask", f"a ({size}, {size}) mask", float(min(2 * int(size) ** 2, 10 ** 300)))
    return np.triu(np.ones((size, size), dtype=bool), k=1)


def decoder_self_attention_mask(tokens: np.ndarray) -> np.ndarray:
    """``(B, T, T)`` union of the look-ahead mask and the padding mask of target ``tokens`` (B, T)."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.dtype.kind not in "iu":
        raise ValueError(f"decoder_self_attention_mask: tokens must be an integer (B, T) array, got {tokens.dtype} {tokens.shape}")
    return _core.attention_mask((tokens == 0).astype(np.uint8), tokens.shape[1], True)


def _as_mask(mask: Any, batch: int, tq: int, tk: int, who: str) -> Any:
    """Normalise a user mask to the contiguous ``(B, Tq, Tk)`` uint8 array the core expects."""
    if mask is None:
        return None
    m = np.asarray(mask)
    if m.dtype.kind not in "biuf":
        raise TypeError(f"{who}: mask must be boolean or numeric (non-zero = blocked), got dtype {m.dtype}")
    if m.ndim == 4:  # (B, 1, Tq, Tk) or (B, 1, 1, Tk) as in the tutorials
        if m.shape[1] != 1:
            raise ValueError(f"{who}: a 4-D mask must have shape (B, 1, Tq, Tk) to broadcast over heads, got {m.shape}")
        m = m[:, 0]
    if m.ndim not in (2, 3):
        raise ValueError(f"{who}: mask must broadcast to (B, Tq, Tk) = ({batch}, {tq}, {tk}), got shape {m.shape}")
    _core._check_memory(who, f"a ({batch}, {tq}, {tk}) mask", 2.0 * float(batch) * float(tq) * float(tk))
    try:
        m = np.broadcast_to(m != 0, (batch, tq, tk))
    except ValueError:
        raise ValueError(f"{who}: mask of shape {np.shape(mask)} does not broadcast to (B, Tq, Tk) = ({batch}, {tq}, {tk})") from None
    return np.ascontiguousarray(m, dtype=np.uint8)


def _btc_shape(x: Any, who: str, name: str) -> tuple:
    shape = np.shape(x)
    if len(shape) != 3:
        raise ValueError(f"{who}: {name} must have shape (batch, length, d_model), got {shape}")
    return shape


class _Wrapped:
    """Base of the thin Python classes that normalise masks before calling a ``_core`` layer."""

    _core_name = ""

    def __init__(self, core: Any) -> None:
        self._core = core

    def parameters(self):
        """Ordered dict ``name -> Parameter`` (writable views of value and grad)."""
        return self._core.parameters()

    def zero_grad(self) -> None:
        """Clear every parameter gradient."""
        self._core.zero_grad()

    def backward(self, dout: np.ndarray):
        """Gradient of the input(s) for ``dout`` of the last output's shape; accumulates parameter grads."""
        return self._core.backward(dout)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._args})"


class ScaledDotProductAttention(_Wrapped):
    """``softmax(Q K^T / sqrt(d_k) + mask) V`` with its backward.

    ``forward(q, k, v, mask=None)`` takes ``q`` (..., Tq, d), ``k`` and ``v`` (..., Tk, d) and a
    mask broadcastable to (..., Tq, Tk) with True = blocked; returns ``(output, weights)``.
    ``backward(dout)`` returns ``(dq, dk, dv)``.
    """

    def __init__(self, *, dtype: Any = "float32") -> None:
        super().__init__(core_class("ScaledDotProductAttention", dtype)())
        self._args = f"dtype={np.dtype(dtype).name!r}"
        self._lead: tuple = ()

    def forward(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Any = None):
        who = "scaled_dot_product_attention"
        q, k, v = (np.asarray(a) for a in (q, k, v))
        if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
            raise ValueError(f"{who}: q, k, v must have the same rank >= 2, got shapes {q.shape}, {k.shape}, {v.shape}")
        lead = q.shape[:-2]
        if k.shape[:-2] != lead or v.shape[:-2] != lead:
            raise ValueError(f"{who}: q, k, v must share leading dimensions, got {q.shape}, {k.shape}, {v.shape}")
        if k.shape[-2] != v.shape[-2] or not (q.shape[-1] == k.shape[-1] == v.shape[-1]):
            raise ValueError(f"{who}: expected q (..., Tq, d), k (..., Tk, d), v (..., Tk, d) with one d and one Tk; "
                             f"got q, k, v of shapes {q.shape}, {k.shape}, {v.shape}")
        g = int(np.prod(lead)) if lead else 1
        tq, tk = q.shape[-2], k.shape[-2]
        m = None
        if mask is not None:
            _core._check_memory(who, f"a mask of {g} groups of ({tq}, {tk})", 2.0 * float(g) * float(tq) * float(tk))
            mm = np.asarray(mask)
            try:
                mm = np.broadcast_to(mm != 0, lead + (tq, tk))
            except ValueError:
                raise ValueError(f"{who}: mask of shape {mm.shape} does not broadcast to {lead + (tq, tk)}") from None
            m = np.ascontiguousarray(mm.reshape(g, tq, tk), dtype=np.uint8)
        out, w = self._core.forward(q.reshape(g, tq, -1), k.reshape(g, tk, -1), v.reshape(g, tk, -1), m)
        self._lead = lead
        return out.reshape(lead + out.shape[1:]), w.reshape(lead + w.shape[1:])

    def backward(self, dout: np.ndarray):
        dout = np.asarray(dout)
        g = int(np.prod(self._lead)) if self._lead else 1
        dq, dk, dv = self._core.backward(dout.reshape((g,) + dout.shape[len(self._lead):]))
        lead = self._lead
        return dq.reshape(lead + dq.shape[1:]), dk.reshape(lead + dk.shape[1:]), dv.reshape(lead + dv.shape[1:])


def scaled_dot_product_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Any = None):
    """``softmax(Q K^T / sqrt(d_k) + mask) V`` computed in C++; returns ``(output, attention_weights)``.

    Shapes: ``q`` (..., Tq, d), ``k``/``v`` (..., Tk, d); ``mask`` broadcastable to (..., Tq, Tk),
    True (non-zero) = blocked. A query whose keys are all blocked gets zero weights and output.
    The dtype follows ``q`` (float64 stays float64, anything else is float32).
    """
    dtype = "float64" if np.asarray(q).dtype == np.float64 else "float32"
    return ScaledDotProductAttention(dtype=dtype).forward(q, k, v, mask)


class MultiHeadAttention(_Wrapped):
    """Multi-head attention (Q, K, V projections, ``n_heads`` heads of ``d_k = d_model / n_heads``,
    concatenation, output projection).

    ``forward(x, memory=None, mask=None)``: self-attention over ``x`` (B, T, d_model) or, with
    ``memory`` (B, S, d_model), cross-attention whose keys and values come from ``memory``.
    ``mask`` broadcasts to (B, Tq, Tk) (also (B, 1, Tq, Tk)); True = blocked.
    ``backward(dout)`` returns ``dx`` (self-attention) or ``(dx, dmemory)`` (cross-attention).
    ``attention_weights()`` gives the last weights (B, n_heads, Tq, Tk).
    Parameters: ``query|key|value|output.weight|bias``.
    """

    def __init__(self, d_model: int, n_heads: int, *, seed: int = 0, dtype: Any = "float32") -> None:
        super().__init__(core_class("MultiHeadAttention", dtype)(d_model, n_heads, seed))
        self._args = f"d_model={d_model}, n_heads={n_heads}"
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads

    def forward(self, x: np.ndarray, memory: Any = None, mask: Any = None) -> np.ndarray:
        who = "MultiHeadAttention.forward"
        b, tq, _ = _btc_shape(x, who, "x")
        tk = tq if memory is None else _btc_shape(memory, who, "memory")[1]
        return self._core.forward(x, memory, _as_mask(mask, b, tq, tk, who))

    def attention_weights(self) -> np.ndarray:
        return self._core.attention_weights()


class EncoderLayer(_Wrapped):
    """``x -> LN(x + Dropout(SelfAttention(x))) -> LN(. + Dropout(FFN(.)))`` (post-norm; ``pre_norm=True``
    for the pre-norm variant). ``forward(x, mask=None, training=False)`` with ``x`` (B, T, d_model)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, *, pre_norm: bool = False,
                 eps: float = 1e-6, seed: int = 0, dtype: Any = "float32") -> None:
        super().__init__(core_class("EncoderLayer", dtype)(d_model, n_heads, d_ff, dropout, pre_norm, eps, seed))
        self._args = f"d_model={d_model}, n_heads={n_heads}, d_ff={d_ff}, dropout={dropout}, pre_norm={pre_norm}"

    def forward(self, x: np.ndarray, mask: Any = None, training: bool = False) -> np.ndarray:
        who = "EncoderLayer.forward"
        b, t, _ = _btc_shape(x, who, "x")
        return self._core.forward(x, _as_mask(mask, b, t, t, who), training)


class DecoderLayer(_Wrapped):
    """Masked self-attention, cross-attention over ``memory`` and FFN, each with residual + LayerNorm.

    ``forward(x, memory, self_mask=None, cross_mask=None, training=False)``; ``backward(dout)``
    returns ``(dx, dmemory)``."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, *, pre_norm: bool = False,
                 eps: float = 1e-6, seed: int = 0, dtype: Any = "float32") -> None:
        super().__init__(core_class("DecoderLayer", dtype)(d_model, n_heads, d_ff, dropout, pre_norm, eps, seed))
        self._args = f"d_model={d_model}, n_heads={n_heads}, d_ff={d_ff}, dropout={dropout}, pre_norm={pre_norm}"

    def forward(self, x: np.ndarray, memory: np.ndarray, self_mask: Any = None, cross_mask: Any = None,
                training: bool = False) -> np.ndarray:
        who = "DecoderLayer.forward"
        b, t, _ = _btc_shape(x, who, "x")
        s = _btc_shape(memory, who, "memory")[1]
        return self._core.forward(x, memory, _as_mask(self_mask, b, t, t, who), _as_mask(cross_mask, b, t, s, who),
                                  training)


def FeedForward(d_model: int, d_ff: int, dropout: float = 0.1, *, seed: int = 0, dtype: Any = "float32"):
    """Position-wise ``Linear(d_model, d_ff) -> ReLU -> Dropout -> Linear(d_ff, d_model)``;
    ``forward(x, training=False)`` with ``x`` (..., d_model)."""
    return core_class("FeedForward", dtype)(d_model, d_ff, dropout, seed)


def Encoder(vocab_size: int, d_model: int, n_layers: int, n_heads: int, d_ff: int, dropout: float = 0.1,
            max_length: int = 2048, layout: str = "interleaved", *, pre_norm: bool = False, eps: float = 1e-6,
            seed: int = 0, dtype: Any = "float32"):
    """Positional embedding, dropout and ``n_layers`` encoder layers. ``forward(tokens, training=False)``
    maps int tokens (B, S) to (B, S, d_model); padding (token 0) keys are masked."""
    return core_class("Encoder", dtype)(vocab_size, d_model, n_layers, n_heads, d_ff, dropout, max_length, layout,
                                        pre_norm, eps, seed)


def Decoder(vocab_size: int, d_model: int, n_layers: int, n_heads: int, d_ff: int, dropout: float = 0.1,
            max_length: int = 2048, layout: str = "interleaved", *, pre_norm: bool = False, eps: float = 1e-6,
            seed: int = 0, dtype: Any = "float32"):
    """Positional embedding, dropout and ``n_layers`` decoder layers.
    ``forward(tokens, memory, source_padding=None, training=False)``: tokens (B, T), memory (B, S, d),
    source_padding bool (B, S) (True = padding key). ``backward(dout)`` returns dmemory."""
    return core_class("Decoder", dtype)(vocab_size, d_model, n_layers, n_heads, d_ff, dropout, max_length, layout,
                                        pre_norm, eps, seed)
