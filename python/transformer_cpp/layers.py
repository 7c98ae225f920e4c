"""The layers of the Transformer, one class each, over the C++ core.

Every layer wraps one ``_core`` object (the float32 or float64 build, chosen by ``dtype``) and has
the same surface:

* ``forward(x, ...)`` — NumPy in, NumPy out (a copy; the layer keeps what backward needs);
* ``backward(dout)`` — returns the gradient of the input(s) and *accumulates* parameter gradients;
* ``parameters()`` — an ordered dict ``name -> Parameter`` whose ``.value`` and ``.grad`` are
  writable NumPy views of the C++ memory (writing ``.value[...]`` changes the layer);
* ``zero_grad()`` — the only thing that clears parameter gradients.

A layer with dropout (``Dropout``, ``FeedForward``, the encoder and decoder layers and stacks, like
``Transformer.forward``) takes ``training=False`` by default: a forward pass is inference
(deterministic, no dropout) unless ``training=True`` asks for the training one.

Other attributes of the C++ object (``in_features``, ``calls``, ``table``, ...) are read and set
through the wrapper. ``float32`` is what models train with; ``float64`` exists so that tests can
check every backward pass against finite differences. The functions (softmax, loss, masks) are in
:mod:`transformer_cpp.functional`, the optimiser in :mod:`transformer_cpp.optim`.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, List, Tuple, cast

import numpy as np

from . import _core
from .functional import attention_inputs, linear_attention_inputs

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Dropout",
    "Embedding",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "LSHAttention",
    "LSHSelfAttention",
    "Layer",
    "LayerNorm",
    "Linear",
    "LinearAttention",
    "LinearMultiHeadAttention",
    "MultiHeadAttention",
    "PositionalEmbedding",
    "ReLU",
    "RelativeMultiHeadAttention",
    "ReversibleStack",
    "ScaledDotProductAttention",
    "SoftmaxSelfAttention",
    "TiledAttention",
    "core_class",
]


def core_class(name: str, dtype: Any = "float32") -> Any:
    """The ``_core`` class ``name`` for ``dtype`` (``"float32"`` or ``"float64"``)."""
    try:
        dt = np.dtype(dtype).name
    except TypeError as exc:
        raise ValueError(f"{name}: dtype must be 'float32' or 'float64', got {dtype!r}") from exc
    if dt not in ("float32", "float64"):
        raise ValueError(f"{name}: dtype must be 'float32' or 'float64', got {dtype!r}")
    return getattr(_core, f"{name}_{dt}")


class CoreObject:
    """A Python object over one ``_core`` object: attributes it does not define itself are read
    from and written to the C++ object (so ``dropout.calls = 0`` reaches the core)."""

    _core: Any

    def __init__(self, core: Any) -> None:
        object.__setattr__(self, "_core", core)

    def __getattr__(self, name: str) -> Any:  # only called when normal lookup fails
        if name.startswith("__") or name == "_core":
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "_core"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and not hasattr(type(self), name) and hasattr(type(self._core), name):
            setattr(self._core, name, value)
        else:
            object.__setattr__(self, name, value)

    @property
    def dtype(self) -> np.dtype:
        """``float32`` or ``float64``: the build of the core object underneath."""
        return np.dtype("float64" if type(self._core).__name__.endswith("_float64") else "float32")

    def __dir__(self) -> List[str]:
        return sorted(set(super().__dir__()) | {n for n in dir(self._core) if not n.startswith("_")})


class Layer(CoreObject):
    """Base of every layer: ``forward``, ``backward``, ``parameters``, ``zero_grad``."""

    _args: str = ""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._core.forward(*args, **kwargs)

    def backward(self, dout: Any) -> Any:
        """Gradient of the input(s) for ``dout`` of the last output's shape; accumulates parameter grads."""
        return self._core.backward(dout)

    def parameters(self) -> "OrderedDict[str, _core.Parameter]":
        """Ordered dict ``name -> Parameter`` (writable views of value and grad)."""
        params: OrderedDict[str, _core.Parameter] = self._core.parameters()
        return params

    def zero_grad(self) -> None:
        """Clear every parameter gradient."""
        self._core.zero_grad()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._args})"


def _dtype_name(dtype: Any) -> str:
    return str(np.dtype(dtype).name)


# --- dense layers --------------------------------------------------------------------------------


class Linear(Layer):
    """Dense layer ``y = x W^T + b``; ``W`` has shape ``(out_features, in_features)`` as in PyTorch.

    Weights are Glorot-uniform from ``seed``, the bias starts at zero.
    ``forward(x)`` maps ``(..., in_features)`` to ``(..., out_features)``.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *, seed: int = 0, dtype: Any = "float32"
    ) -> None:
        super().__init__(core_class("Linear", dtype)(in_features, out_features, bias, seed))
        self._args = f"{in_features}, {out_features}, bias={bias}, dtype={_dtype_name(dtype)!r}"

    def forward(self, x: Any) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(x))


class Dropout(Layer):
    """Inverted dropout. ``forward(x, training=True)`` zeroes each element with probability ``rate``
    and scales the rest by ``1 / (1 - rate)``; with ``training=False``, the default of every layer,
    it is the identity. Masks depend only on ``seed`` and the call count (``.calls``), never on the
    thread count."""

    def __init__(self, rate: float = 0.1, *, seed: int = 0, dtype: Any = "float32") -> None:
        super().__init__(core_class("Dropout", dtype)(rate, seed))
        self._args = f"rate={rate}, dtype={_dtype_name(dtype)!r}"

    def forward(self, x: Any, training: bool = False) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(x, training))


class ReLU(Layer):
    """``y = max(x, 0)`` element-wise; ``backward(dout)`` passes ``dout`` where ``y > 0``."""

    def __init__(self, *, dtype: Any = "float32") -> None:
        super().__init__(core_class("ReLU", dtype)())
        self._args = f"dtype={_dtype_name(dtype)!r}"

    def forward(self, x: Any) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(x))


class LayerNorm(Layer):
    """Layer normalisation over the last axis, as ``torch.nn.LayerNorm(d_model, eps=eps)``.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias`` with the biased variance (divide by
    ``d_model``) and ``eps`` inside the square root. Parameters ``"weight"`` (ones) and ``"bias"``
    (zeros), each of shape ``(d_model,)``.

    ``forward(x)`` maps ``(..., d_model)`` to the same shape. ``forward_residual(a, b)`` computes
    ``LN(a + b)`` (the "Add & Norm" of the paper) without a separate sum; after it, ``backward``
    returns ``d(a + b)``, which is the gradient of both ``a`` and ``b``.
    """

    def __init__(self, d_model: int, eps: float = 1e-6, *, dtype: Any = "float32") -> None:
        super().__init__(core_class("LayerNorm", dtype)(d_model, eps))
        self._args = f"{d_model}, eps={eps}, dtype={_dtype_name(dtype)!r}"

    def forward(self, x: Any) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(x))

    def forward_residual(self, a: Any, b: Any) -> np.ndarray:
        return cast(np.ndarray, self._core.forward_residual(a, b))


class FeedForward(Layer):
    """Position-wise ``Linear(d_model, d_ff) -> ReLU -> Dropout -> Linear(d_ff, d_model)``;
    ``forward(x, training=False)`` with ``x`` (..., d_model)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1, *, seed: int = 0, dtype: Any = "float32") -> None:
        super().__init__(core_class("FeedForward", dtype)(d_model, d_ff, dropout, seed))
        self._args = f"{d_model}, {d_ff}, dropout={dropout}, dtype={_dtype_name(dtype)!r}"

    def forward(self, x: Any, training: bool = False) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(x, training))


# --- embeddings ----------------------------------------------------------------------------------


class Embedding(Layer):
    """Token embedding with padding id 0.

    The ``"weight"`` parameter ``(vocab_size, d_model)`` starts as ``N(0, d_model**-0.5)`` with
    row 0 zero; row 0 never receives gradient (like ``padding_idx=0`` in PyTorch).
    ``forward(tokens, scale=1.0)`` maps int ``(B, T)`` ids to ``weight[tokens] * scale`` of shape
    ``(B, T, d_model)``; ids outside ``[0, vocab_size)`` raise ``ValueError``.
    ``backward(dout)`` accumulates the weight gradient and returns ``None``.
    """

    def __init__(self, vocab_size: int, d_model: int, *, seed: int = 0, dtype: Any = "float32") -> None:
        super().__init__(core_class("Embedding", dtype)(vocab_size, d_model, seed))
        self._args = f"{vocab_size}, {d_model}, dtype={_dtype_name(dtype)!r}"

    def forward(self, tokens: Any, scale: float = 1.0) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(tokens, scale))


class PositionalEmbedding(Layer):
    """The input layer of the Transformer: ``weight[tokens] * sqrt(d_model) + PE[:T]``.

    ``PE`` is the sinusoidal table of :func:`transformer_cpp.positional_encoding` with the given
    ``layout`` (``"interleaved"`` or ``"concatenated"``), built once for ``max_length`` positions
    (``.table``). ``forward(tokens)`` takes int ids ``(B, T)`` with ``T <= max_length`` and returns
    ``(B, T, d_model)``; the embedding weight is as in :class:`Embedding`.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_length: int = 2048,
        layout: str = "interleaved",
        *,
        seed: int = 0,
        dtype: Any = "float32",
    ) -> None:
        super().__init__(core_class("PositionalEmbedding", dtype)(vocab_size, d_model, max_length, layout, seed))
        self._args = (
            f"{vocab_size}, {d_model}, max_length={max_length}, layout={layout!r}, dtype={_dtype_name(dtype)!r}"
        )

    def forward(self, tokens: Any) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(tokens))


# --- attention -----------------------------------------------------------------------------------


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
        raise ValueError(
            f"{who}: mask of shape {np.shape(mask)} does not broadcast to (B, Tq, Tk) = ({batch}, {tq}, {tk})"
        ) from None
    return np.ascontiguousarray(m, dtype=np.uint8)


def _btc_shape(x: Any, who: str, name: str) -> Tuple[int, ...]:
    shape = np.shape(x)
    if len(shape) != 3:
        raise ValueError(f"{who}: {name} must have shape (batch, length, d_model), got {shape}")
    return cast(Tuple[int, ...], shape)


class ScaledDotProductAttention(Layer):
    """``softmax(Q K^T / sqrt(d_k) + mask) V`` with its backward.

    ``forward(q, k, v, mask=None)`` takes ``q`` (..., Tq, d), ``k`` and ``v`` (..., Tk, d) and a
    mask broadcastable to (..., Tq, Tk) with True = blocked; returns ``(output, weights)``.
    ``backward(dout)`` returns ``(dq, dk, dv)``.
    """

    def __init__(self, *, dtype: Any = "float32") -> None:
        super().__init__(core_class("ScaledDotProductAttention", dtype)())
        self._args = f"dtype={np.dtype(dtype).name!r}"
        self._lead: Tuple[int, ...] = ()

    def forward(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Any = None) -> Tuple[np.ndarray, np.ndarray]:
        q3, k3, v3, m, lead = attention_inputs(q, k, v, mask, "scaled_dot_product_attention")
        out, w = self._core.forward(q3, k3, v3, m)
        self._lead = lead
        return out.reshape(lead + out.shape[1:]), w.reshape(lead + w.shape[1:])

    def backward(self, dout: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        dout = np.asarray(dout)
        g = int(np.prod(self._lead)) if self._lead else 1
        dq, dk, dv = self._core.backward(dout.reshape((g,) + dout.shape[len(self._lead) :]))
        lead = self._lead
        return dq.reshape(lead + dq.shape[1:]), dk.reshape(lead + dk.shape[1:]), dv.reshape(lead + dv.shape[1:])


class MultiHeadAttention(Layer):
    """Multi-head attention (Q, K, V projections, ``n_heads`` heads of ``d_k = d_model / n_heads``,
    concatenation, output projection).

    ``forward(x, memory=None, mask=None)``: self-attention over ``x`` (B, T, d_model) or, with
    ``memory`` (B, S, d_model), cross-attention whose keys and values come from ``memory``.
    ``mask`` broadcasts to (B, Tq, Tk) (also (B, 1, Tq, Tk)); True = blocked.
    ``backward(dout)`` returns ``dx`` (self-attention) or ``(dx, dmemory)`` (cross-attention).
    ``attention_weights()`` gives the last weights (B, n_heads, Tq, Tk).
    ``attention_impl``: ``"plain"`` keeps those weights; ``"tiled"`` keeps one log-sum-exp per query
    instead (memory linear in the length, no weights to read); ``"auto"`` is tiled for long inputs.
    Parameters: ``query|key|value|output.weight|bias``.
    """

    def __init__(
        self, d_model: int, n_heads: int, *, seed: int = 0, attention_impl: str = "plain", dtype: Any = "float32"
    ) -> None:
        super().__init__(core_class("MultiHeadAttention", dtype)(d_model, n_heads, seed))
        self._core.attention_impl = attention_impl
        self._args = f"d_model={d_model}, n_heads={n_heads}"

    def forward(self, x: np.ndarray, memory: Any = None, mask: Any = None) -> np.ndarray:
        who = "MultiHeadAttention.forward"
        b, tq, _ = _btc_shape(x, who, "x")
        tk = tq if memory is None else _btc_shape(memory, who, "memory")[1]
        return cast(np.ndarray, self._core.forward(x, memory, _as_mask(mask, b, tq, tk, who)))

    def attention_weights(self) -> np.ndarray:
        return cast(np.ndarray, self._core.attention_weights())


class RelativeMultiHeadAttention(Layer):
    """Transformer-XL's relative multi-head attention with a segment memory (Dai et al. 2019).

    ``forward(x, memory=None)``: queries from the segment ``x`` (B, T, d_model), keys and values
    from ``[memory ; x]`` with ``memory`` (B, M, d_model) the previous segment's hidden states of
    the layer below. Query ``i`` sees every memory position and the segment positions ``<= i``;
    its score for key ``j`` is ``((q_i + u) . k_j + (q_i + v) . W_{k,R} R_{i-j}) / sqrt(d_k)`` with
    ``R`` the sinusoids of the relative distance (distances beyond ``clamp_len`` use
    ``clamp_len``'s). ``backward(dout)`` returns ``dx``: the memory is a stop-gradient input.
    Parameters: ``query|key|value|output.weight|bias``, ``position.weight`` (W_{k,R}), and ``u``,
    ``v`` (n_heads, d_k), this layer's own (a model shares them across layers by tying them).

    Evaluation with state reuse: ``infer_reset(batch, mem_len)``, then ``infer_memory(memory)``
    (optional) and ``infer(x)`` for each new segment or token: it attends to the cached positions
    (their keys and values are kept, not recomputed) and joins them; the last ``mem_len`` stay.
    """

    def __init__(
        self, d_model: int, n_heads: int, *, seed: int = 0, clamp_len: Any = None, dtype: Any = "float32"
    ) -> None:
        super().__init__(core_class("RelativeMultiHeadAttention", dtype)(d_model, n_heads, seed, clamp_len))
        self._args = f"d_model={d_model}, n_heads={n_heads}"

    def forward(self, x: np.ndarray, memory: Any = None) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(x, memory))

    def attention_weights(self) -> np.ndarray:
        return cast(np.ndarray, self._core.attention_weights())


class LinearAttention(Layer):
    """Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs") with its backward.

    ``out_i = phi(q_i) sum_j phi(k_j)^T v_j / (phi(q_i) . sum_j phi(k_j) + 1e-6)``, ``phi(x) = elu(x) + 1``,
    summing over every position ``j`` or, with ``causal=True``, over ``j <= i`` (by cumulative sums in
    chunks: time and memory linear in T, no (T, T) matrix). ``forward(q, k, v, causal=False)`` takes
    ``q``, ``k``, ``v`` of one shape (..., T, d) and returns the output of that shape;
    ``backward(dout)`` returns ``(dq, dk, dv)``. ``state()`` gives ``(S, z)`` of the last forward,
    ``S = sum_j phi(k_j)^T v_j`` (..., d, d) and ``z = sum_j phi(k_j)`` (..., d).
    """

    def __init__(self, *, dtype: Any = "float32") -> None:
        super().__init__(core_class("LinearAttention", dtype)())
        self._args = f"dtype={np.dtype(dtype).name!r}"
        self._lead: Tuple[int, ...] = ()

    def forward(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False) -> np.ndarray:
        q3, k3, v3, lead = linear_attention_inputs(q, k, v, causal, "linear_attention")
        out = self._core.forward(q3, k3, v3, bool(causal))
        self._lead = lead
        return cast(np.ndarray, out.reshape(lead + out.shape[1:]))

    def backward(self, dout: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        dout = np.asarray(dout)
        g = int(np.prod(self._lead)) if self._lead else 1
        dq, dk, dv = self._core.backward(dout.reshape((g,) + dout.shape[len(self._lead) :]))
        lead = self._lead
        return dq.reshape(lead + dq.shape[1:]), dk.reshape(lead + dk.shape[1:]), dv.reshape(lead + dv.shape[1:])

    def state(self) -> Tuple[np.ndarray, np.ndarray]:
        s, z = self._core.state()
        return s.reshape(self._lead + s.shape[1:]), z.reshape(self._lead + z.shape[1:])


class LinearMultiHeadAttention(Layer):
    """Multi-head linear attention: the Q, K, V and output projections of :class:`MultiHeadAttention`
    (same parameter names ``query|key|value|output.weight|bias``, same layout and, for one seed, the
    same initial values) around :class:`LinearAttention` per head instead of softmax attention.

    ``forward(x, causal=False)``: self-attention over ``x`` (B, T, d_model); with ``causal=True``
    position t attends to positions <= t. Time and memory are linear in T. ``backward(dout)``
    returns ``dx`` and accumulates the parameter gradients; ``release()`` frees what forward kept.

    Generation uses the RNN form: ``state = layer.new_state(rows)``, then ``layer.step(x_t, state)``
    with ``x_t`` (rows, d_model), one new position per sequence, returns its output (rows, d_model)
    in constant time per position, equal to the causal forward at that position.
    """

    def __init__(self, d_model: int, n_heads: int, *, seed: int = 0, dtype: Any = "float32") -> None:
        super().__init__(core_class("LinearMultiHeadAttention", dtype)(d_model, n_heads, seed))
        self._args = f"d_model={d_model}, n_heads={n_heads}"

    def forward(self, x: np.ndarray, causal: bool = False) -> np.ndarray:
        if isinstance(causal, np.bool_):
            causal = bool(causal)
        return cast(np.ndarray, self._core.forward(x, causal))

    def release(self) -> None:
        """Free the activations the last forward kept for backward."""
        self._core.release()

    def new_state(self, rows: int) -> Any:
        """An empty generation state for ``rows`` sequences (``.rows``, ``.length``, ``.values()``)."""
        return self._core.new_state(rows)

    def step(self, x: np.ndarray, state: Any) -> np.ndarray:
        """One new position per sequence: ``x`` (rows, d_model) -> (rows, d_model); advances ``state``."""
        return cast(np.ndarray, self._core.step(x, state))


class LSHAttention(Layer):
    """Reformer's LSH attention over given heads: the kernel of :class:`LSHSelfAttention` without its
    query, value and output projections, as :class:`TiledAttention` is for softmax attention.

    ``forward(qk, v, causal=False)``: ``qk`` (B, H, T, d) are the shared queries and keys (the keys
    are their unit vectors), ``v`` (B, H, T, d) the values; returns the output (B, H, T, d).
    ``backward(dout)`` returns ``(dqk, dv)``. Hashing, chunks, rounds and masks are those of
    :class:`LSHSelfAttention`; with the same ``seed`` and ``calls`` it draws the same rotations, so
    its heads equal the layer's on the layer's projections. ``buckets()``: ``(B, H, n_hashes, T)``
    of the last forward.
    """

    def __init__(
        self, *, chunk: int = 64, n_hashes: int = 4, n_buckets: Any = None, seed: int = 0, dtype: Any = "float32"
    ) -> None:
        super().__init__(core_class("LSHAttention", dtype)(chunk, n_hashes, n_buckets, seed))
        self._args = f"chunk={chunk}, n_hashes={n_hashes}, n_buckets={n_buckets}, dtype={_dtype_name(dtype)!r}"

    def forward(self, qk: Any, v: Any, causal: bool = False) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(qk, v, causal))

    def buckets(self) -> np.ndarray:
        """The bucket of every position in the last forward, ``(B, H, n_hashes, T)``."""
        return cast(np.ndarray, self._core.buckets())


class LSHSelfAttention(Layer):
    """Reformer's LSH self-attention (Kitaev et al. 2020): O(T) memory instead of O(T^2).

    Shared QK: the query projection gives the queries and the keys are the same vectors normalised
    to unit length; a value and an output projection as in :class:`MultiHeadAttention`
    (parameters ``query|value|output.weight|bias``). Per head and hash round, positions are
    hashed with a random rotation ``R`` (``h(x) = argmax([xR; -xR])``), sorted by (bucket,
    position) and cut into chunks of ``chunk`` positions (the last may be shorter); each chunk
    attends to itself and to the chunk before. A position attends to itself only when it has no
    other key in any round (its output is then its value); ``causal`` blocks later positions.
    ``n_hashes`` rounds are combined as one softmax over the union of their windows, each key
    counted once (Reformer, App. A). Scores are scaled by ``1/sqrt(d_k)``.

    ``n_buckets=None`` chooses ``2 * max(1, length // chunk)`` for each input; a given
    ``n_buckets`` must be even. The rotations of a forward are drawn from ``seed`` and the forward
    count ``.calls``, which each forward advances unless ``.freeze_hash`` is True; ``backward``
    uses the buckets of the last forward. ``rotations()`` and ``buckets()`` return those of the
    last forward, ``(n_heads, n_hashes, d_k, n_buckets/2)`` and ``(B, n_heads, n_hashes, T)``.

    ``forward(x, causal=None)`` with ``x`` (B, T, d_model); ``causal=None`` uses the layer's setting.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        chunk: int = 64,
        n_hashes: int = 4,
        n_buckets: Any = None,
        causal: bool = False,
        seed: int = 0,
        dtype: Any = "float32",
    ) -> None:
        core = core_class("LSHSelfAttention", dtype)(d_model, n_heads, chunk, n_hashes, n_buckets, causal, seed)
        super().__init__(core)
        self._args = (
            f"d_model={d_model}, n_heads={n_heads}, chunk={chunk}, n_hashes={n_hashes}, "
            f"n_buckets={n_buckets}, causal={causal}, dtype={_dtype_name(dtype)!r}"
        )

    def forward(self, x: Any, causal: Any = None) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(x, causal))

    def rotations(self) -> np.ndarray:
        """The random rotations of the last forward, ``(n_heads, n_hashes, d_k, n_buckets/2)``."""
        return cast(np.ndarray, self._core.rotations())

    def buckets(self) -> np.ndarray:
        """The bucket of every position in the last forward, ``(B, n_heads, n_hashes, T)``."""
        return cast(np.ndarray, self._core.buckets())


class SoftmaxSelfAttention(Layer):
    """Softmax self-attention as a language model's block uses it: ``forward(x, causal=True)`` with
    ``x`` (B, T, d_model), ``backward(dout)`` returns ``dx``. The layer of :class:`MultiHeadAttention`
    (same parameters); ``attention_impl`` defaults to ``"auto"`` (the tiled kernel for long inputs).
    """

    def __init__(
        self, d_model: int, n_heads: int, *, seed: int = 0, attention_impl: str = "auto", dtype: Any = "float32"
    ) -> None:
        super().__init__(core_class("SoftmaxSelfAttention", dtype)(d_model, n_heads, seed, attention_impl))
        self._args = f"d_model={d_model}, n_heads={n_heads}, attention_impl={attention_impl!r}"

    def forward(self, x: np.ndarray, causal: bool = True) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(x, causal))


class TiledAttention(Layer):
    """Exact ``softmax(Q K^T / sqrt(d_k) + mask) V`` over (B, H, T, d_k) heads, computed block by block
    with a running maximum and sum per query, so that the (Tq, Tk) weights are never stored.

    ``forward(q, k, v, causal=False, key_padding=None)``: ``q`` (B, H, Tq, d), ``k`` and ``v``
    (B, H, Tk, d), ``key_padding`` (B, Tk) with True = blocked; returns the output (B, H, Tq, d).
    ``backward(dout)`` returns ``(dq, dk, dv)``, recomputing the weights from ``log_sum_exp()``.
    ``tiled=False`` runs the plain kernel (which stores the weights) on the same inputs.
    """

    def __init__(self, *, tiled: bool = True, dtype: Any = "float32") -> None:
        super().__init__(core_class("TiledAttention", dtype)(tiled))
        self._args = f"tiled={tiled}, dtype={np.dtype(dtype).name!r}"

    def forward(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False, key_padding: Any = None
    ) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(q, k, v, causal, key_padding))


class EncoderLayer(Layer):
    """``x -> LN(x + Dropout(SelfAttention(x))) -> LN(. + Dropout(FFN(.)))`` (post-norm; ``pre_norm=True``
    for the pre-norm variant). ``forward(x, mask=None, training=False)`` with ``x`` (B, T, d_model)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        *,
        pre_norm: bool = False,
        eps: float = 1e-6,
        seed: int = 0,
        dtype: Any = "float32",
    ) -> None:
        super().__init__(core_class("EncoderLayer", dtype)(d_model, n_heads, d_ff, dropout, pre_norm, eps, seed))
        self._args = f"d_model={d_model}, n_heads={n_heads}, d_ff={d_ff}, dropout={dropout}, pre_norm={pre_norm}"

    def forward(self, x: np.ndarray, mask: Any = None, training: bool = False) -> np.ndarray:
        who = "EncoderLayer.forward"
        b, t, _ = _btc_shape(x, who, "x")
        return cast(np.ndarray, self._core.forward(x, _as_mask(mask, b, t, t, who), training))


class DecoderLayer(Layer):
    """Masked self-attention, cross-attention over ``memory`` and FFN, each with residual + LayerNorm.

    ``forward(x, memory, self_mask=None, cross_mask=None, training=False)``; ``backward(dout)``
    returns ``(dx, dmemory)``."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        *,
        pre_norm: bool = False,
        eps: float = 1e-6,
        seed: int = 0,
        dtype: Any = "float32",
    ) -> None:
        super().__init__(core_class("DecoderLayer", dtype)(d_model, n_heads, d_ff, dropout, pre_norm, eps, seed))
        self._args = f"d_model={d_model}, n_heads={n_heads}, d_ff={d_ff}, dropout={dropout}, pre_norm={pre_norm}"

    def forward(
        self, x: np.ndarray, memory: np.ndarray, self_mask: Any = None, cross_mask: Any = None, training: bool = False
    ) -> np.ndarray:
        who = "DecoderLayer.forward"
        b, t, _ = _btc_shape(x, who, "x")
        s = _btc_shape(memory, who, "memory")[1]
        return cast(
            np.ndarray,
            self._core.forward(
                x, memory, _as_mask(self_mask, b, t, t, who), _as_mask(cross_mask, b, t, s, who), training
            ),
        )


# --- stacks --------------------------------------------------------------------------------------


class Encoder(Layer):
    """Positional embedding, dropout and ``n_layers`` encoder layers. ``forward(tokens, training=False)``
    maps int tokens (B, S) to (B, S, d_model); padding (token 0) keys are masked."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_layers: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        max_length: int = 2048,
        layout: str = "interleaved",
        *,
        pre_norm: bool = False,
        eps: float = 1e-6,
        seed: int = 0,
        dtype: Any = "float32",
    ) -> None:
        super().__init__(
            core_class("Encoder", dtype)(
                vocab_size, d_model, n_layers, n_heads, d_ff, dropout, max_length, layout, pre_norm, eps, seed
            )
        )
        self._args = (
            f"{vocab_size}, {d_model}, n_layers={n_layers}, n_heads={n_heads}, d_ff={d_ff}, "
            f"dropout={dropout}, pre_norm={pre_norm}, dtype={_dtype_name(dtype)!r}"
        )

    def forward(self, tokens: Any, training: bool = False) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(tokens, training))


class Decoder(Layer):
    """Positional embedding, dropout and ``n_layers`` decoder layers.
    ``forward(tokens, memory, source_padding=None, training=False)``: tokens (B, T), memory (B, S, d),
    source_padding bool (B, S) (True = padding key). ``backward(dout)`` returns dmemory."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_layers: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        max_length: int = 2048,
        layout: str = "interleaved",
        *,
        pre_norm: bool = False,
        eps: float = 1e-6,
        seed: int = 0,
        dtype: Any = "float32",
    ) -> None:
        super().__init__(
            core_class("Decoder", dtype)(
                vocab_size, d_model, n_layers, n_heads, d_ff, dropout, max_length, layout, pre_norm, eps, seed
            )
        )
        self._args = (
            f"{vocab_size}, {d_model}, n_layers={n_layers}, n_heads={n_heads}, d_ff={d_ff}, "
            f"dropout={dropout}, pre_norm={pre_norm}, dtype={_dtype_name(dtype)!r}"
        )

    def forward(self, tokens: Any, memory: Any, source_padding: Any = None, training: bool = False) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(tokens, memory, source_padding, training))


class ReversibleStack(Layer):
    """Reformer's reversible residual stack of ``n_layers`` blocks (Kitaev et al. 2020, Sec. 3).

    The input ``x`` (B, T, d_model) goes into two streams, ``x1 = x2 = x``; block ``i`` computes
    ``y1 = x1 + Dropout(Attention(LN(x2)))`` and ``y2 = x2 + Dropout(FFN(LN(y1)))`` (pre-norm, the
    feed-forward run on chunks of ``chunk_rows`` positions), and the output is ``(y1 + y2) / 2``.
    ``backward`` rebuilds each block's inputs from its outputs (``x2 = y2 - G(y1)``,
    ``x1 = y1 - F(x2)``), replaying the forward's dropout masks, so the activations of one block
    are held at a time whatever the depth (``activation_bytes()``). ``reversible=False`` gives the
    ordinary stack of the same blocks, which keeps every block's activations.

    ``attention`` names the attention inside: ``"softmax"`` (multi-head attention, with a look-ahead
    mask when ``causal``), ``"linear"`` (:class:`LinearMultiHeadAttention`) or ``"lsh"``
    (:class:`LSHSelfAttention` with its default chunk, hashes and buckets; each block's hashes are
    replayed when backward rebuilds it). ``forward(x, training=False)``; ``backward(dout)`` returns dx and can be
    called once per forward; ``rebuilt_inputs()`` then returns the two rebuilt streams."""

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        *,
        causal: bool = True,
        attention: str = "softmax",
        reversible: bool = True,
        chunk_rows: Any = None,
        eps: float = 1e-6,
        seed: int = 0,
        dtype: Any = "float32",
    ) -> None:
        cls = core_class("ReversibleStack", dtype)
        extra = {} if chunk_rows is None else {"chunk_rows": chunk_rows}
        super().__init__(
            cls(
                n_layers,
                d_model,
                n_heads,
                d_ff,
                dropout,
                causal=causal,
                seed=seed,
                attention=attention,
                reversible=reversible,
                eps=eps,
                **extra,
            )
        )
        self._args = (
            f"{n_layers}, {d_model}, n_heads={n_heads}, d_ff={d_ff}, dropout={dropout}, causal={causal}, "
            f"attention={attention!r}, reversible={reversible}, dtype={_dtype_name(dtype)!r}"
        )

    def forward(self, x: Any, training: bool = False) -> np.ndarray:
        return cast(np.ndarray, self._core.forward(x, training))

    def rebuilt_inputs(self) -> Tuple[np.ndarray, np.ndarray]:
        """The two streams (x1, x2) at the bottom of the stack after ``backward``, each (B, T, d_model)."""
        return cast(Tuple[np.ndarray, np.ndarray], self._core.rebuilt_inputs())

    def activation_bytes(self) -> float:
        """Bytes of activations held for ``backward`` since the last forward (0 once it ran)."""
        return float(self._core.activation_bytes())
