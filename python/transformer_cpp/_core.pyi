"""
transformer_cpp._core: the C++ core (private; use the transformer_cpp package)
"""

# Type stubs of the compiled extension, for editors and type checkers. First written by
# pybind11-stubgen 3.0 (`pybind11-stubgen transformer_cpp._core -o OUT`), then given argument
# and return types by hand (the bindings take `object` and check numbers themselves).
# tests/test_stubs.py fails when this file and the compiled module differ in their names, the
# methods and properties of a class, or the argument names of a function: edit it with the bindings.
from __future__ import annotations
import collections
import typing

import numpy
import numpy.typing

class NonFiniteError(FloatingPointError, RuntimeError):
    pass

class Parameter:
    """
    A named parameter: writable NumPy views of value and grad.
    """
    def __repr__(self) -> str: ...
    @property
    def grad(self) -> numpy.ndarray: ...
    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def value(self) -> numpy.ndarray: ...

class Linear_float32:
    """
    Dense layer y = x W^T + b with W of shape (out_features, in_features).
    """
    def __init__(self, in_features: int, out_features: int, bias: bool = True, seed: int = 0) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        dout: (..., out_features) -> dx: (..., in_features); accumulates dW, db
        """
    def forward(self, x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        x: (..., in_features) -> (..., out_features)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def in_features(self) -> int: ...
    @property
    def out_features(self) -> int: ...

class Linear_float64:
    """
    Dense layer y = x W^T + b with W of shape (out_features, in_features).
    """
    def __init__(self, in_features: int, out_features: int, bias: bool = True, seed: int = 0) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        dout: (..., out_features) -> dx: (..., in_features); accumulates dW, db
        """
    def forward(self, x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        x: (..., in_features) -> (..., out_features)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def in_features(self) -> int: ...
    @property
    def out_features(self) -> int: ...

class Dropout_float32:
    """
    Inverted dropout with a seeded, thread-count independent mask.
    """
    def __init__(self, rate: float = 0.1, seed: int = 0) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]: ...
    def forward(self, x: numpy.typing.ArrayLike, training: bool = False) -> numpy.typing.NDArray[numpy.float32]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def calls(self) -> int: ...
    @calls.setter
    def calls(self, value: int) -> None: ...
    @property
    def rate(self) -> float: ...

class Dropout_float64:
    """
    Inverted dropout with a seeded, thread-count independent mask.
    """
    def __init__(self, rate: float = 0.1, seed: int = 0) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]: ...
    def forward(self, x: numpy.typing.ArrayLike, training: bool = False) -> numpy.typing.NDArray[numpy.float64]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def calls(self) -> int: ...
    @calls.setter
    def calls(self, value: int) -> None: ...
    @property
    def rate(self) -> float: ...

class ScaledDotProductAttention_float32:
    """
    softmax(Q K^T / sqrt(d_k) + mask) V over a batch of (T, d_k) groups.
    """
    def __init__(self) -> None: ...
    def backward(
        self, dout: numpy.typing.ArrayLike
    ) -> tuple[
        numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]
    ]: ...
    def forward(
        self,
        q: numpy.typing.ArrayLike,
        k: numpy.typing.ArrayLike,
        v: numpy.typing.ArrayLike,
        mask: numpy.typing.ArrayLike | None = None,
    ) -> tuple[numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class LinearAttention_float32:
    """
    Linear attention phi(Q) (phi(K)^T V) / (phi(Q) . sum phi(K) + eps), phi = elu + 1, over a batch of (T, d) heads; causal by chunked cumulative sums.
    """
    def __init__(self) -> None: ...
    def backward(
        self, dout: numpy.typing.ArrayLike
    ) -> tuple[
        numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]
    ]:
        """
        dout (G, T, d) -> (dq, dk, dv)
        """
    def forward(
        self,
        q: numpy.typing.ArrayLike,
        k: numpy.typing.ArrayLike,
        v: numpy.typing.ArrayLike,
        causal: bool = False,
    ) -> numpy.typing.NDArray[numpy.float32]:
        """
        q, k, v (G, T, d) -> out (G, T, d)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def state(self) -> tuple[numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]]:
        """
        (S, z) of the last forward over the whole sequence: S (G, d, d) = sum phi(K_j)^T V_j, z (G, d) = sum phi(K_j)
        """
    def zero_grad(self) -> None: ...

class LinearAttentionState_float32:
    """
    The generation state of a LinearMultiHeadAttention: S (d_k x d_k) and z (d_k) per row and head.
    """
    def values(self) -> tuple[numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]]:
        """
        Copies (S, z): S (rows, n_heads, d_k, d_k) = sum phi(k)^T v, z (rows, n_heads, d_k) = sum phi(k)
        """
    @property
    def length(self) -> int: ...
    @property
    def rows(self) -> int: ...

class LinearMultiHeadAttention_float32:
    """
    Multi-head linear attention: the projections of MultiHeadAttention around linear attention.
    """
    def __init__(self, d_model: int, n_heads: int, seed: int = 0) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); accumulates the parameter gradients
        """
    def forward(self, x: numpy.typing.ArrayLike, causal: bool = False) -> numpy.typing.NDArray[numpy.float32]:
        """
        x (B, T, d_model) -> (B, T, d_model)
        """
    def new_state(self, rows: int) -> LinearAttentionState_float32:
        """
        An empty generation state for `rows` sequences.
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def release(self) -> None:
        """
        Free what the last forward kept for backward.
        """
    def step(
        self, x: numpy.typing.ArrayLike, state: LinearAttentionState_float32
    ) -> numpy.typing.NDArray[numpy.float32]:
        """
        x (rows, d_model): one new position per row -> y (rows, d_model); advances the state
        """
    def zero_grad(self) -> None: ...
    @property
    def d_k(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_heads(self) -> int: ...

class LinearAttention_float64:
    """
    Linear attention phi(Q) (phi(K)^T V) / (phi(Q) . sum phi(K) + eps), phi = elu + 1, over a batch of (T, d) heads; causal by chunked cumulative sums.
    """
    def __init__(self) -> None: ...
    def backward(
        self, dout: numpy.typing.ArrayLike
    ) -> tuple[
        numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64]
    ]:
        """
        dout (G, T, d) -> (dq, dk, dv)
        """
    def forward(
        self,
        q: numpy.typing.ArrayLike,
        k: numpy.typing.ArrayLike,
        v: numpy.typing.ArrayLike,
        causal: bool = False,
    ) -> numpy.typing.NDArray[numpy.float64]:
        """
        q, k, v (G, T, d) -> out (G, T, d)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def state(self) -> tuple[numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64]]:
        """
        (S, z) of the last forward over the whole sequence: S (G, d, d) = sum phi(K_j)^T V_j, z (G, d) = sum phi(K_j)
        """
    def zero_grad(self) -> None: ...

class LinearAttentionState_float64:
    """
    The generation state of a LinearMultiHeadAttention: S (d_k x d_k) and z (d_k) per row and head.
    """
    def values(self) -> tuple[numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64]]:
        """
        Copies (S, z): S (rows, n_heads, d_k, d_k) = sum phi(k)^T v, z (rows, n_heads, d_k) = sum phi(k)
        """
    @property
    def length(self) -> int: ...
    @property
    def rows(self) -> int: ...

class LinearMultiHeadAttention_float64:
    """
    Multi-head linear attention: the projections of MultiHeadAttention around linear attention.
    """
    def __init__(self, d_model: int, n_heads: int, seed: int = 0) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); accumulates the parameter gradients
        """
    def forward(self, x: numpy.typing.ArrayLike, causal: bool = False) -> numpy.typing.NDArray[numpy.float64]:
        """
        x (B, T, d_model) -> (B, T, d_model)
        """
    def new_state(self, rows: int) -> LinearAttentionState_float64:
        """
        An empty generation state for `rows` sequences.
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def release(self) -> None:
        """
        Free what the last forward kept for backward.
        """
    def step(
        self, x: numpy.typing.ArrayLike, state: LinearAttentionState_float64
    ) -> numpy.typing.NDArray[numpy.float64]:
        """
        x (rows, d_model): one new position per row -> y (rows, d_model); advances the state
        """
    def zero_grad(self) -> None: ...
    @property
    def d_k(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_heads(self) -> int: ...

class MultiHeadAttention_float32:
    """
    Multi-head attention: projections, heads, scaled dot-product attention, output projection.
    """
    def __init__(self, d_model: int, n_heads: int, seed: int = 0) -> None: ...
    def attention_weights(self) -> numpy.typing.NDArray[numpy.float32]:
        """
        The attention weights of the last forward, (B, heads, T_q, T_k).
        """
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.ndarray | tuple[numpy.ndarray, numpy.ndarray]:
        """
        dout (B, Tq, d) -> dx (self-attention) or (dx, dmemory) (cross-attention)
        """
    def forward(
        self,
        x: numpy.typing.ArrayLike,
        memory: numpy.typing.ArrayLike | None = None,
        mask: numpy.typing.ArrayLike | None = None,
    ) -> numpy.typing.NDArray[numpy.float32]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def attention_impl(self) -> str:
        """
        'plain' (keeps the attention weights), 'tiled' (memory linear in the length) or 'auto' (tiled from the length where it pays)
        """
    @attention_impl.setter
    def attention_impl(self, value: str) -> None: ...
    @property
    def d_k(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def last_forward_tiled(self) -> bool: ...
    @property
    def n_heads(self) -> int: ...

class RelativeMultiHeadAttention_float32:
    """
    Transformer-XL relative multi-head attention over [memory ; x], causal, with a stop-gradient memory and an evaluation cache.
    """
    def __init__(self, d_model: int, n_heads: int, seed: int = 0, clamp_len: int | None = None) -> None: ...
    def attention_weights(self) -> numpy.typing.NDArray[numpy.float32]:
        """
        The attention weights of the last forward, (B, heads, T, M + T).
        """
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); the memory gets no gradient
        """
    def forward(
        self, x: numpy.typing.ArrayLike, memory: numpy.typing.ArrayLike | None = None
    ) -> numpy.typing.NDArray[numpy.float32]:
        """
        x (B, T, d_model), memory (B, M, d_model) or None -> (B, T, d_model)
        """
    def infer(self, x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        New positions x (batch, T, d_model) attend to the cached positions and to themselves (causal), as forward(x, memory) does; then they join the cache. Returns (batch, T, d_model).
        """
    def infer_memory(self, memory: numpy.typing.ArrayLike) -> None:
        """
        The memory (batch, M, d_model), the hidden states of the layer below, becomes the cached positions (their keys and values; the last mem_len are kept).
        """
    def infer_reset(self, batch: int, mem_len: int) -> None:
        """
        Empty the evaluation cache, for `batch` sequences keeping the last `mem_len` positions. The cache holds keys and values made by the current weights: reset it after they change.
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def clamp_len(self) -> int | None:
        """
        Distances beyond clamp_len use the sinusoid of clamp_len (None: no clamp).
        """
    @clamp_len.setter
    def clamp_len(self, value: int | None) -> None: ...
    @property
    def d_k(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def infer_length(self) -> int:
        """
        Positions held in the evaluation cache.
        """
    @property
    def n_heads(self) -> int: ...

class RelativeMultiHeadAttention_float64:
    """
    Transformer-XL relative multi-head attention over [memory ; x], causal, with a stop-gradient memory and an evaluation cache.
    """
    def __init__(self, d_model: int, n_heads: int, seed: int = 0, clamp_len: int | None = None) -> None: ...
    def attention_weights(self) -> numpy.typing.NDArray[numpy.float64]:
        """
        The attention weights of the last forward, (B, heads, T, M + T).
        """
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); the memory gets no gradient
        """
    def forward(
        self, x: numpy.typing.ArrayLike, memory: numpy.typing.ArrayLike | None = None
    ) -> numpy.typing.NDArray[numpy.float64]:
        """
        x (B, T, d_model), memory (B, M, d_model) or None -> (B, T, d_model)
        """
    def infer(self, x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        New positions x (batch, T, d_model) attend to the cached positions and to themselves (causal), as forward(x, memory) does; then they join the cache. Returns (batch, T, d_model).
        """
    def infer_memory(self, memory: numpy.typing.ArrayLike) -> None:
        """
        The memory (batch, M, d_model), the hidden states of the layer below, becomes the cached positions (their keys and values; the last mem_len are kept).
        """
    def infer_reset(self, batch: int, mem_len: int) -> None:
        """
        Empty the evaluation cache, for `batch` sequences keeping the last `mem_len` positions. The cache holds keys and values made by the current weights: reset it after they change.
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def clamp_len(self) -> int | None:
        """
        Distances beyond clamp_len use the sinusoid of clamp_len (None: no clamp).
        """
    @clamp_len.setter
    def clamp_len(self, value: int | None) -> None: ...
    @property
    def d_k(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def infer_length(self) -> int:
        """
        Positions held in the evaluation cache.
        """
    @property
    def n_heads(self) -> int: ...

class ScaledDotProductAttention_float64:
    """
    softmax(Q K^T / sqrt(d_k) + mask) V over a batch of (T, d_k) groups.
    """
    def __init__(self) -> None: ...
    def backward(
        self, dout: numpy.typing.ArrayLike
    ) -> tuple[
        numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64]
    ]: ...
    def forward(
        self,
        q: numpy.typing.ArrayLike,
        k: numpy.typing.ArrayLike,
        v: numpy.typing.ArrayLike,
        mask: numpy.typing.ArrayLike | None = None,
    ) -> tuple[numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64]]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class MultiHeadAttention_float64:
    """
    Multi-head attention: projections, heads, scaled dot-product attention, output projection.
    """
    def __init__(self, d_model: int, n_heads: int, seed: int = 0) -> None: ...
    def attention_weights(self) -> numpy.typing.NDArray[numpy.float64]:
        """
        The attention weights of the last forward, (B, heads, T_q, T_k).
        """
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.ndarray | tuple[numpy.ndarray, numpy.ndarray]:
        """
        dout (B, Tq, d) -> dx (self-attention) or (dx, dmemory) (cross-attention)
        """
    def forward(
        self,
        x: numpy.typing.ArrayLike,
        memory: numpy.typing.ArrayLike | None = None,
        mask: numpy.typing.ArrayLike | None = None,
    ) -> numpy.typing.NDArray[numpy.float64]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def attention_impl(self) -> str:
        """
        'plain' (keeps the attention weights), 'tiled' (memory linear in the length) or 'auto' (tiled from the length where it pays)
        """
    @attention_impl.setter
    def attention_impl(self, value: str) -> None: ...
    @property
    def d_k(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def last_forward_tiled(self) -> bool: ...
    @property
    def n_heads(self) -> int: ...

class FeedForward_float32:
    """
    FFN(x) = Linear2(Dropout(ReLU(Linear1(x)))).
    """
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1, seed: int = 0) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]: ...
    def forward(self, x: numpy.typing.ArrayLike, training: bool = False) -> numpy.typing.NDArray[numpy.float32]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class FeedForward_float64:
    """
    FFN(x) = Linear2(Dropout(ReLU(Linear1(x)))).
    """
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1, seed: int = 0) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]: ...
    def forward(self, x: numpy.typing.ArrayLike, training: bool = False) -> numpy.typing.NDArray[numpy.float64]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class EncoderLayer_float32:
    """
    Self-attention and feed-forward sub-layers with residuals and LayerNorm.
    """
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        pre_norm: bool = False,
        eps: float = 1e-06,
        seed: int = 0,
    ) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]: ...
    def forward(
        self, x: numpy.typing.ArrayLike, mask: numpy.typing.ArrayLike | None = None, training: bool = False
    ) -> numpy.typing.NDArray[numpy.float32]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class DecoderLayer_float32:
    """
    Masked self-attention, cross-attention and feed-forward sub-layers with residuals and LayerNorm.
    """
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        pre_norm: bool = False,
        eps: float = 1e-06,
        seed: int = 0,
    ) -> None: ...
    def backward(
        self, dout: numpy.typing.ArrayLike
    ) -> tuple[numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]]:
        """
        dout (B, T, d) -> (dx (B, T, d), dmemory (B, S, d))
        """
    def forward(
        self,
        x: numpy.typing.ArrayLike,
        memory: numpy.typing.ArrayLike,
        self_mask: numpy.typing.ArrayLike | None = None,
        cross_mask: numpy.typing.ArrayLike | None = None,
        training: bool = False,
    ) -> numpy.typing.NDArray[numpy.float32]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class Encoder_float32:
    """
    Positional embedding, dropout and N encoder layers.
    """
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
        pre_norm: bool = False,
        eps: float = 1e-06,
        seed: int = 0,
    ) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> None: ...
    def forward(
        self, tokens: numpy.typing.ArrayLike, training: bool = False
    ) -> numpy.typing.NDArray[numpy.float32]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class Decoder_float32:
    """
    Positional embedding, dropout and N decoder layers attending to an encoder memory.
    """
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
        pre_norm: bool = False,
        eps: float = 1e-06,
        seed: int = 0,
    ) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        dout (B, T, d) -> dmemory (B, S, d)
        """
    def forward(
        self,
        tokens: numpy.typing.ArrayLike,
        memory: numpy.typing.ArrayLike,
        source_padding: numpy.typing.ArrayLike | None = None,
        training: bool = False,
    ) -> numpy.typing.NDArray[numpy.float32]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class EncoderLayer_float64:
    """
    Self-attention and feed-forward sub-layers with residuals and LayerNorm.
    """
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        pre_norm: bool = False,
        eps: float = 1e-06,
        seed: int = 0,
    ) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]: ...
    def forward(
        self, x: numpy.typing.ArrayLike, mask: numpy.typing.ArrayLike | None = None, training: bool = False
    ) -> numpy.typing.NDArray[numpy.float64]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class DecoderLayer_float64:
    """
    Masked self-attention, cross-attention and feed-forward sub-layers with residuals and LayerNorm.
    """
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        pre_norm: bool = False,
        eps: float = 1e-06,
        seed: int = 0,
    ) -> None: ...
    def backward(
        self, dout: numpy.typing.ArrayLike
    ) -> tuple[numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64]]:
        """
        dout (B, T, d) -> (dx (B, T, d), dmemory (B, S, d))
        """
    def forward(
        self,
        x: numpy.typing.ArrayLike,
        memory: numpy.typing.ArrayLike,
        self_mask: numpy.typing.ArrayLike | None = None,
        cross_mask: numpy.typing.ArrayLike | None = None,
        training: bool = False,
    ) -> numpy.typing.NDArray[numpy.float64]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class Encoder_float64:
    """
    Positional embedding, dropout and N encoder layers.
    """
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
        pre_norm: bool = False,
        eps: float = 1e-06,
        seed: int = 0,
    ) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> None: ...
    def forward(
        self, tokens: numpy.typing.ArrayLike, training: bool = False
    ) -> numpy.typing.NDArray[numpy.float64]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class Decoder_float64:
    """
    Positional embedding, dropout and N decoder layers attending to an encoder memory.
    """
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
        pre_norm: bool = False,
        eps: float = 1e-06,
        seed: int = 0,
    ) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        dout (B, T, d) -> dmemory (B, S, d)
        """
    def forward(
        self,
        tokens: numpy.typing.ArrayLike,
        memory: numpy.typing.ArrayLike,
        source_padding: numpy.typing.ArrayLike | None = None,
        training: bool = False,
    ) -> numpy.typing.NDArray[numpy.float64]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class LayerNorm_float32:
    """
    LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias, biased variance.
    """
    def __init__(self, d_model: int, eps: float = 1e-06) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        dout: (..., d_model) -> dx; accumulates the weight and bias gradients
        """
    def forward(self, x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        x: (..., d_model) -> (..., d_model)
        """
    def forward_residual(
        self, a: numpy.typing.ArrayLike, b: numpy.typing.ArrayLike
    ) -> numpy.typing.NDArray[numpy.float32]:
        """
        LN(a + b); backward() then returns d(a + b), the gradient of both
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def eps(self) -> float: ...

class LayerNorm_float64:
    """
    LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * weight + bias, biased variance.
    """
    def __init__(self, d_model: int, eps: float = 1e-06) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        dout: (..., d_model) -> dx; accumulates the weight and bias gradients
        """
    def forward(self, x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        x: (..., d_model) -> (..., d_model)
        """
    def forward_residual(
        self, a: numpy.typing.ArrayLike, b: numpy.typing.ArrayLike
    ) -> numpy.typing.NDArray[numpy.float64]:
        """
        LN(a + b); backward() then returns d(a + b), the gradient of both
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def eps(self) -> float: ...

class ReversibleStack_float32:
    """
    Reformer's reversible residual stack: x1 = x2 = x; per block y1 = x1 + Dropout(Attention(LN(x2))), y2 = x2 + Dropout(FFN(LN(y1))) (the feed-forward by chunks of rows); output (y1 + y2) / 2. Backward rebuilds each block's inputs from its outputs, so activations are stored once.
    """
    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        causal: bool = True,
        seed: int = 0,
        attention: str = "softmax",
        reversible: bool = True,
        chunk_rows: int = 256,
        eps: float = 1e-06,
    ) -> None: ...
    def activation_bytes(self) -> float:
        """
        Bytes of activations held for backward since the last forward (0 before a forward or after backward): the two streams when reversible, every block's cached activations when not.
        """
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); parameter gradients accumulate
        """
    def forward(self, x: numpy.typing.ArrayLike, training: bool = False) -> numpy.typing.NDArray[numpy.float32]:
        """
        x (B, T, d_model) -> (B, T, d_model)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def rebuilt_inputs(self) -> tuple[numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]]:
        """
        (x1, x2), each (B, T, d_model): the two streams at the bottom of the stack after backward. A reversible stack rebuilds them from its output; both equal the input up to rounding.
        """
    def zero_grad(self) -> None: ...
    @property
    def attention(self) -> str: ...
    @property
    def causal(self) -> bool: ...
    @property
    def chunk_rows(self) -> int: ...
    @property
    def d_ff(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def reversible(self) -> bool: ...

class ReversibleStack_float64:
    """
    Reformer's reversible residual stack: x1 = x2 = x; per block y1 = x1 + Dropout(Attention(LN(x2))), y2 = x2 + Dropout(FFN(LN(y1))) (the feed-forward by chunks of rows); output (y1 + y2) / 2. Backward rebuilds each block's inputs from its outputs, so activations are stored once.
    """
    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        causal: bool = True,
        seed: int = 0,
        attention: str = "softmax",
        reversible: bool = True,
        chunk_rows: int = 256,
        eps: float = 1e-06,
    ) -> None: ...
    def activation_bytes(self) -> float:
        """
        Bytes of activations held for backward since the last forward (0 before a forward or after backward): the two streams when reversible, every block's cached activations when not.
        """
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); parameter gradients accumulate
        """
    def forward(self, x: numpy.typing.ArrayLike, training: bool = False) -> numpy.typing.NDArray[numpy.float64]:
        """
        x (B, T, d_model) -> (B, T, d_model)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def rebuilt_inputs(self) -> tuple[numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64]]:
        """
        (x1, x2), each (B, T, d_model): the two streams at the bottom of the stack after backward. A reversible stack rebuilds them from its output; both equal the input up to rounding.
        """
    def zero_grad(self) -> None: ...
    @property
    def attention(self) -> str: ...
    @property
    def causal(self) -> bool: ...
    @property
    def chunk_rows(self) -> int: ...
    @property
    def d_ff(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def reversible(self) -> bool: ...

class ReLU_float32:
    """
    ReLU: y = max(x, 0).
    """
    def __init__(self) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        dout -> dx = dout where the output was positive, 0 elsewhere
        """
    def forward(self, x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class ReLU_float64:
    """
    ReLU: y = max(x, 0).
    """
    def __init__(self) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        dout -> dx = dout where the output was positive, 0 elsewhere
        """
    def forward(self, x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class Embedding_float32:
    """
    Token embedding; id 0 is padding (zero row, no gradient).
    """
    def __init__(self, vocab_size: int, d_model: int, seed: int = 0) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> None:
        """
        dout: (B, T, d_model); accumulates the weight gradient (not row 0); returns None
        """
    def forward(self, tokens: numpy.typing.ArrayLike, scale: float = 1.0) -> numpy.typing.NDArray[numpy.float32]:
        """
        tokens: int (B, T) -> (B, T, d_model) = weight[tokens] * scale
        """
    def padding_mask(self, tokens: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.bool_]:
        """
        bool (B, T), True where tokens == 0
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...

class Embedding_float64:
    """
    Token embedding; id 0 is padding (zero row, no gradient).
    """
    def __init__(self, vocab_size: int, d_model: int, seed: int = 0) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> None:
        """
        dout: (B, T, d_model); accumulates the weight gradient (not row 0); returns None
        """
    def forward(self, tokens: numpy.typing.ArrayLike, scale: float = 1.0) -> numpy.typing.NDArray[numpy.float64]:
        """
        tokens: int (B, T) -> (B, T, d_model) = weight[tokens] * scale
        """
    def padding_mask(self, tokens: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.bool_]:
        """
        bool (B, T), True where tokens == 0
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...

class PositionalEmbedding_float32:
    """
    weight[tokens] * sqrt(d_model) + PE[:T]; id 0 is padding.
    """
    def __init__(
        self, vocab_size: int, d_model: int, max_length: int = 2048, layout: str = "interleaved", seed: int = 0
    ) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> None:
        """
        dout: (B, T, d_model); accumulates the weight gradient (not row 0); returns None
        """
    def forward(self, tokens: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        tokens: int (B, T) -> (B, T, d_model); the table grows past max_length as needed
        """
    def padding_mask(self, tokens: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.bool_]:
        """
        bool (B, T), True where tokens == 0
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def layout(self) -> str: ...
    @property
    def max_length(self) -> int: ...
    @property
    def table(self) -> numpy.typing.NDArray[numpy.float32]:
        """
        read-only copy (cached positions, d_model) of the positional table
        """
    @property
    def vocab_size(self) -> int: ...

class PositionalEmbedding_float64:
    """
    weight[tokens] * sqrt(d_model) + PE[:T]; id 0 is padding.
    """
    def __init__(
        self, vocab_size: int, d_model: int, max_length: int = 2048, layout: str = "interleaved", seed: int = 0
    ) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> None:
        """
        dout: (B, T, d_model); accumulates the weight gradient (not row 0); returns None
        """
    def forward(self, tokens: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        tokens: int (B, T) -> (B, T, d_model); the table grows past max_length as needed
        """
    def padding_mask(self, tokens: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.bool_]:
        """
        bool (B, T), True where tokens == 0
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def layout(self) -> str: ...
    @property
    def max_length(self) -> int: ...
    @property
    def table(self) -> numpy.typing.NDArray[numpy.float64]:
        """
        read-only copy (cached positions, d_model) of the positional table
        """
    @property
    def vocab_size(self) -> int: ...

class Adam_float32:
    """
    Adam over Parameter views (torch.optim.Adam update with bias correction).
    """
    def __init__(
        self,
        parameters: collections.OrderedDict[str, Parameter] | typing.Iterable[Parameter],
        beta1: float = 0.9,
        beta2: float = 0.98,
        eps: float = 1e-09,
    ) -> None: ...
    def __len__(self) -> int: ...
    def clip_grad_norm(self, max_norm: float) -> float:
        """
        Global L2 norm of all gradients; scales them by max_norm / norm when it is larger. Returns the norm before clipping.
        """
    def reset_state(self) -> None:
        """
        Zero the moments and the step count.
        """
    def state(self) -> collections.OrderedDict[str, numpy.ndarray]:
        """
        OrderedDict '<param>.m' / '<param>.v' -> writable views of the moments (for checkpoints).
        """
    def step(self, lr: float) -> None:
        """
        One update with learning rate lr (increments step_count first).
        """
    @property
    def beta1(self) -> float: ...
    @property
    def beta2(self) -> float: ...
    @property
    def eps(self) -> float: ...
    @property
    def names(self) -> list[str]:
        """
        parameter names, in update order
        """
    @property
    def step_count(self) -> int: ...
    @step_count.setter
    def step_count(self, value: int) -> None: ...

class Adam_float64:
    """
    Adam over Parameter views (torch.optim.Adam update with bias correction).
    """
    def __init__(
        self,
        parameters: collections.OrderedDict[str, Parameter] | typing.Iterable[Parameter],
        beta1: float = 0.9,
        beta2: float = 0.98,
        eps: float = 1e-09,
    ) -> None: ...
    def __len__(self) -> int: ...
    def clip_grad_norm(self, max_norm: float) -> float:
        """
        Global L2 norm of all gradients; scales them by max_norm / norm when it is larger. Returns the norm before clipping.
        """
    def reset_state(self) -> None:
        """
        Zero the moments and the step count.
        """
    def state(self) -> collections.OrderedDict[str, numpy.ndarray]:
        """
        OrderedDict '<param>.m' / '<param>.v' -> writable views of the moments (for checkpoints).
        """
    def step(self, lr: float) -> None:
        """
        One update with learning rate lr (increments step_count first).
        """
    @property
    def beta1(self) -> float: ...
    @property
    def beta2(self) -> float: ...
    @property
    def eps(self) -> float: ...
    @property
    def names(self) -> list[str]:
        """
        parameter names, in update order
        """
    @property
    def step_count(self) -> int: ...
    @step_count.setter
    def step_count(self, value: int) -> None: ...

class Limit:
    """
    The allowed values of a setting: an integer (integer=True) or a finite number from low to high (high may be infinite; low_open / high_open exclude the bound), Limit.flag() (True or False) or Limit.one_of(names). check() refuses anything else with one message format, '<owner>: <name> must be <describe()>, got <value>' (TypeError for a value of the wrong type, ValueError for one out of range); the core checks its configurations with the same.
    """
    @staticmethod
    def flag() -> Limit:
        """
        True or False.
        """
    @staticmethod
    def one_of(choices: list[str]) -> Limit:
        """
        One of these names.
        """
    def __eq__(self, arg0: object) -> bool: ...
    def __hash__(self) -> int: ...
    def __init__(
        self,
        integer: bool,
        low: float,
        high: float = ...,
        low_open: bool = False,
        high_open: bool = False,
        unit: str = "",
    ) -> None: ...
    def __repr__(self) -> str: ...
    def check(self, owner: str, name: str, value: object) -> typing.Any:
        """
        value as an int, float, bool or str if allowed; else TypeError (wrong type) or ValueError (out of range): '<owner>: <name> must be <describe()>, got <value>' ('<name> must be ...' without an owner).
        """
    def describe(self) -> str:
        """
        What is allowed: 'an integer in [1, 16384]', 'a finite number > 0', 'a number in [0, 1)', 'True or False', "'float32' or 'bf16'".
        """
    def message(self, owner: str, name: str, value: object) -> str:
        """
        The message check() gives for value.
        """
    @property
    def choices(self) -> list[str]: ...
    @property
    def high(self) -> float: ...
    @property
    def high_open(self) -> bool: ...
    @property
    def integer(self) -> bool: ...
    @property
    def kind(self) -> str:
        """
        'integer', 'number', 'flag' or 'choice'.
        """
    @property
    def low(self) -> float: ...
    @property
    def low_open(self) -> bool: ...
    @property
    def unit(self) -> str: ...

class AttentionKind:
    """
    What one attention kind supports (read-only; the records of the core's attention/kinds.hpp). Every kind is causal.
    """
    def __repr__(self) -> str: ...
    @property
    def bidirectional(self) -> bool:
        """
        Works without a causal mask (causal=False).
        """
    @property
    def cross_attention(self) -> bool:
        """
        Works as a decoder's cross-attention.
        """
    @property
    def full_weights(self) -> bool:
        """
        Keeps the (B, H, T, T) attention weights on short inputs.
        """
    @property
    def has_cached_step(self) -> bool: ...
    @property
    def hashed(self) -> bool:
        """
        Hashes positions into buckets (the lsh_* settings).
        """
    @property
    def memory(self) -> bool:
        """
        Takes a segment memory of preceding positions and encodes positions itself (memory_length, clamp_len; no absolute positional encoding).
        """
    @property
    def name(self) -> str: ...
    @property
    def reversible(self) -> bool:
        """
        Works in a reversible stack.
        """
    @property
    def step(self) -> str | None:
        """
        The generation step: 'key_value_cache', 'recurrent_state' or None (generation re-reads the context).
        """
    @property
    def summary(self) -> str: ...

class ConfigField:
    """
    One row of a configuration's table (TransformerConfig.fields()).
    """
    def __repr__(self) -> str: ...
    @property
    def default(self) -> typing.Any: ...
    @property
    def help(self) -> str: ...
    @property
    def limit(self) -> Limit:
        """
        What the field allows (its kind: limit.kind).
        """
    @property
    def name(self) -> str: ...
    @property
    def option(self) -> str | None:
        """
        The field's name among the training settings and on the command line (--option-name), or None: a field the program sets.
        """

class TransformerConfig:
    """
    The model's architecture (ConfigTable<TransformerConfig> in the core).
    """

    __hash__: typing.ClassVar[None]  # type: ignore[assignment]
    @staticmethod
    def fields() -> list[ConfigField]:
        """
        The table of the fields, in order: list of ConfigField.
        """
    def __eq__(self, arg0: object) -> bool: ...
    def __init__(self, **kwargs: typing.Any) -> None:
        """
        Every field by keyword (the others keep their defaults), each checked against its row of fields(): TypeError for an unknown name or a value of the wrong type, ValueError for one out of range.
        """
    def __repr__(self) -> str: ...
    def to_dict(self) -> dict[str, typing.Any]:
        """
        The fields as a dict, in the table's order (JSON-serialisable).
        """

class OptimizerConfig:
    """
    Adam, the learning-rate schedule, clipping and label smoothing.
    """

    __hash__: typing.ClassVar[None]  # type: ignore[assignment]
    @staticmethod
    def fields() -> list[ConfigField]:
        """
        The table of the fields, in order: list of ConfigField.
        """
    def __eq__(self, arg0: object) -> bool: ...
    def __init__(self, **kwargs: typing.Any) -> None:
        """
        Every field by keyword (the others keep their defaults), each checked against its row of fields(): TypeError for an unknown name or a value of the wrong type, ValueError for one out of range.
        """
    def __repr__(self) -> str: ...
    def to_dict(self) -> dict[str, typing.Any]:
        """
        The fields as a dict, in the table's order (JSON-serialisable).
        """

class LanguageModelConfig:
    """
    The language model's architecture (ConfigTable<LanguageModelConfig>).
    """

    __hash__: typing.ClassVar[None]  # type: ignore[assignment]
    @staticmethod
    def fields() -> list[ConfigField]:
        """
        The table of the fields, in order: list of ConfigField.
        """
    def __eq__(self, arg0: object) -> bool: ...
    def __init__(self, **kwargs: typing.Any) -> None:
        """
        Every field by keyword (the others keep their defaults), each checked against its row of fields(): TypeError for an unknown name or a value of the wrong type, ValueError for one out of range.
        """
    def __repr__(self) -> str: ...
    def to_dict(self) -> dict[str, typing.Any]:
        """
        The fields as a dict, in the table's order (JSON-serialisable).
        """

class LanguageModel_float32:
    """
    The decoder-only (GPT-style) language model.
    """
    def __init__(self, config: LanguageModelConfig) -> None:
        """
        A model of this architecture (checked again for the memory it needs).
        """
    def backward(self, dlogits: numpy.typing.ArrayLike) -> None:
        """
        Accumulate every parameter gradient from d loss / d logits (B, T, V).
        """
    def compute_gradients(self, tokens: numpy.typing.ArrayLike, training: bool = True) -> tuple[float, int]:
        """
        train_step's loss and gradients (in parameters()' .grad) without the update; returns (loss, count).
        """
    def config(self) -> LanguageModelConfig:
        """
        The architecture.
        """
    def configure_optimizer(self, config: OptimizerConfig) -> None:
        """
        Adam, the schedule and clipping of the following train_steps.
        """
    def evaluate_loss(self, tokens: numpy.typing.ArrayLike) -> tuple[float, int]:
        """
        tokens (B, T+1): mean cross-entropy (nats) of tokens[:, 1:] given the tokens before, in inference mode; returns (loss, labels scored).
        """
    def forward(self, tokens: numpy.typing.ArrayLike, training: bool = False) -> numpy.typing.NDArray[numpy.float32]:
        """
        tokens (B, T) int ids -> logits (B, T, vocab_size): position t predicts the token after it.
        """
    def generation_step(self, tokens: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        Feed one token per sequence at the next position: logits (rows, vocab_size) of the token after it.
        """
    def learning_rate(self, step: int) -> float: ...
    def nonfinite_parameters(self, optimizer_state: bool = True) -> list[str]:
        """
        Names of the parameters (and, with optimizer_state, Adam moments) holding NaN or inf.
        """
    def optimizer_config(self) -> OptimizerConfig:
        """
        The optimiser's configuration.
        """
    def optimizer_state(self) -> collections.OrderedDict[str, Parameter]:
        """
        Adam moments as an OrderedDict '<param>.m' / '<param>.v' -> Parameter (write .value to restore).
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def set_dropout_seed(self, seed: int) -> None:
        """
        Seed the dropout masks (the counter is kept).
        """
    def start_generation(self, rows: int, capacity: int) -> None:
        """
        Empty generation state (key/value caches, or linear attention's RNN state) for `rows` sequences of up to `capacity` positions.
        """
    def train_step(self, tokens: numpy.typing.ArrayLike) -> tuple[float, int]:
        """
        tokens (B, T+1): inputs tokens[:, :-1], labels tokens[:, 1:]. Forward, mean cross-entropy, backward and one Adam step; returns (loss, labels scored).
        """
    def zero_grad(self) -> None: ...
    @property
    def dropout_calls(self) -> int:
        """
        Training forwards so far: the dropout masks' counter (restore it to resume exactly).
        """
    @dropout_calls.setter
    def dropout_calls(self, value: int) -> None: ...
    @property
    def generation_position(self) -> int:
        """
        Positions fed since start_generation.
        """
    @property
    def has_cached_step(self) -> bool:
        """
        Whether generation can run one step per token (softmax and relative attention: a key/value cache; linear: its RNN state; LSH attention and reversible blocks have none).
        """
    @property
    def last_grad_norm(self) -> float: ...
    @property
    def clamp_len(self) -> typing.Any:
        """
        Relative attention: distances beyond it are encoded as it (None: no clamp).
        """
    @clamp_len.setter
    def clamp_len(self, arg1: typing.Any) -> None: ...
    @property
    def memory_held(self) -> int:
        """
        Positions the segment memory holds now.
        """
    @property
    def memory_length(self) -> int:
        """
        Relative attention: positions of the preceding segments each block attends to (any length; setting it empties the memory).
        """
    @memory_length.setter
    def memory_length(self, arg1: typing.Any) -> None: ...
    @property
    def memory_update(self) -> bool:
        """
        True (default): each forward moves the segment memory on; False: forwards read it and leave it as it is.
        """
    @memory_update.setter
    def memory_update(self, arg1: bool) -> None: ...
    def reset_memory(self) -> None:
        """
        Empty the segment memory (a new text, or a stripe that starts again).
        """
    @property
    def step(self) -> int:
        """
        Optimiser steps taken so far.
        """
    @step.setter
    def step(self, value: int) -> None: ...

class LanguageModel_float64:
    """
    The decoder-only (GPT-style) language model.
    """
    def __init__(self, config: LanguageModelConfig) -> None:
        """
        A model of this architecture (checked again for the memory it needs).
        """
    def backward(self, dlogits: numpy.typing.ArrayLike) -> None:
        """
        Accumulate every parameter gradient from d loss / d logits (B, T, V).
        """
    def compute_gradients(self, tokens: numpy.typing.ArrayLike, training: bool = True) -> tuple[float, int]:
        """
        train_step's loss and gradients (in parameters()' .grad) without the update; returns (loss, count).
        """
    def config(self) -> LanguageModelConfig:
        """
        The architecture.
        """
    def configure_optimizer(self, config: OptimizerConfig) -> None:
        """
        Adam, the schedule and clipping of the following train_steps.
        """
    def evaluate_loss(self, tokens: numpy.typing.ArrayLike) -> tuple[float, int]:
        """
        tokens (B, T+1): mean cross-entropy (nats) of tokens[:, 1:] given the tokens before, in inference mode; returns (loss, labels scored).
        """
    def forward(self, tokens: numpy.typing.ArrayLike, training: bool = False) -> numpy.typing.NDArray[numpy.float64]:
        """
        tokens (B, T) int ids -> logits (B, T, vocab_size): position t predicts the token after it.
        """
    def generation_step(self, tokens: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        Feed one token per sequence at the next position: logits (rows, vocab_size) of the token after it.
        """
    def learning_rate(self, step: int) -> float: ...
    def nonfinite_parameters(self, optimizer_state: bool = True) -> list[str]:
        """
        Names of the parameters (and, with optimizer_state, Adam moments) holding NaN or inf.
        """
    def optimizer_config(self) -> OptimizerConfig:
        """
        The optimiser's configuration.
        """
    def optimizer_state(self) -> collections.OrderedDict[str, Parameter]:
        """
        Adam moments as an OrderedDict '<param>.m' / '<param>.v' -> Parameter (write .value to restore).
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def set_dropout_seed(self, seed: int) -> None:
        """
        Seed the dropout masks (the counter is kept).
        """
    def start_generation(self, rows: int, capacity: int) -> None:
        """
        Empty generation state (key/value caches, or linear attention's RNN state) for `rows` sequences of up to `capacity` positions.
        """
    def train_step(self, tokens: numpy.typing.ArrayLike) -> tuple[float, int]:
        """
        tokens (B, T+1): inputs tokens[:, :-1], labels tokens[:, 1:]. Forward, mean cross-entropy, backward and one Adam step; returns (loss, labels scored).
        """
    def zero_grad(self) -> None: ...
    @property
    def dropout_calls(self) -> int:
        """
        Training forwards so far: the dropout masks' counter (restore it to resume exactly).
        """
    @dropout_calls.setter
    def dropout_calls(self, value: int) -> None: ...
    @property
    def generation_position(self) -> int:
        """
        Positions fed since start_generation.
        """
    @property
    def has_cached_step(self) -> bool:
        """
        Whether generation can run one step per token (softmax and relative attention: a key/value cache; linear: its RNN state; LSH attention and reversible blocks have none).
        """
    @property
    def last_grad_norm(self) -> float: ...
    @property
    def clamp_len(self) -> typing.Any:
        """
        Relative attention: distances beyond it are encoded as it (None: no clamp).
        """
    @clamp_len.setter
    def clamp_len(self, arg1: typing.Any) -> None: ...
    @property
    def memory_held(self) -> int:
        """
        Positions the segment memory holds now.
        """
    @property
    def memory_length(self) -> int:
        """
        Relative attention: positions of the preceding segments each block attends to (any length; setting it empties the memory).
        """
    @memory_length.setter
    def memory_length(self, arg1: typing.Any) -> None: ...
    @property
    def memory_update(self) -> bool:
        """
        True (default): each forward moves the segment memory on; False: forwards read it and leave it as it is.
        """
    @memory_update.setter
    def memory_update(self, arg1: bool) -> None: ...
    def reset_memory(self) -> None:
        """
        Empty the segment memory (a new text, or a stripe that starts again).
        """
    @property
    def step(self) -> int:
        """
        Optimiser steps taken so far.
        """
    @step.setter
    def step(self, value: int) -> None: ...

class Transformer_float32:
    """
    The encoder-decoder Transformer.
    """
    def __init__(self, config: TransformerConfig) -> None:
        """
        A model of this architecture (checked again for the precision and the memory it needs).
        """
    def apply_gradients(self, grad_scale: typing.SupportsFloat = 1.0) -> None:
        """
        Norm, clipping and one Adam step with gradient_buffer() * grad_scale as the gradients.
        """
    def attention_weights(self) -> dict[str, numpy.ndarray]:
        """
        Attention weights of the last forward: name -> (B, heads, T_q, T_k).
        """
    def backward(self, dlogits: numpy.typing.ArrayLike) -> None:
        """
        Accumulate every parameter gradient from d loss / d logits (B, T, V).
        """
    def beam_search(
        self,
        src: numpy.typing.ArrayLike,
        start_id: int,
        end_id: int,
        max_length: int,
        beam_size: int = 4,
        length_penalty: float = 0.6,
        n_best: int = 1,
        compute_type: str = "float32",
    ) -> list[list[tuple[list[int], float, float, bool]]]:
        """
        KV-cached beam search: per sentence, n_best (tokens, score, log_prob, finished) best first.
        """
    def compute_gradients(
        self,
        src: numpy.typing.ArrayLike,
        tgt_in: numpy.typing.ArrayLike,
        tgt_out: numpy.typing.ArrayLike,
        grad_scale: typing.SupportsFloat = 1.0,
    ) -> tuple[float, float]:
        """
        Forward, masked loss and backward; the gradients times grad_scale go to gradient_buffer() (the layers' own are zeroed); no update. Returns (loss, accuracy).
        """
    def config(self) -> TransformerConfig:
        """
        The architecture.
        """
    def configure_optimizer(self, config: OptimizerConfig) -> None:
        """
        Adam, the schedule, clipping and label smoothing of the following train_steps.
        """
    def evaluate(
        self, src: numpy.typing.ArrayLike, tgt_in: numpy.typing.ArrayLike, tgt_out: numpy.typing.ArrayLike
    ) -> tuple[float, float]:
        """
        Forward (inference mode) and masked loss/accuracy, no update; returns (loss, accuracy).
        """
    def forward(
        self, src: numpy.typing.ArrayLike, tgt_in: numpy.typing.ArrayLike, training: bool = False
    ) -> numpy.typing.NDArray[numpy.float32]:
        """
        src (B, S), tgt_in (B, T) int token ids -> logits (B, T, tgt_vocab_size)
        """
    def gradient_buffer(self) -> numpy.typing.NDArray[numpy.float32]:
        """
        The contiguous gradient buffer (a view, not a copy): every parameter's gradient in parameters() order, then 8 spare values for the caller to sum along with them.
        """
    def greedy_decode(
        self, src: numpy.typing.ArrayLike, start_id: int, end_id: int, max_length: int, compute_type: str = "float32"
    ) -> numpy.typing.NDArray[numpy.int64]:
        """
        KV-cached greedy decoding: (B, L) ids after the start token, up to and including end_id, then 0.
        """
    def learning_rate(self, step: int) -> float: ...
    def nonfinite_parameters(self, optimizer_state: bool = True) -> list[str]:
        """
        Names of the parameters (and, with optimizer_state, Adam moments '<param>.m'/'.v') holding NaN or inf.
        """
    def optimizer_config(self) -> OptimizerConfig:
        """
        The optimiser's configuration.
        """
    def optimizer_state(self) -> collections.OrderedDict[str, Parameter]:
        """
        Adam moments as an OrderedDict '<param>.m' / '<param>.v' -> Parameter (write .value to restore).
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def set_dropout_seed(self, seed: int) -> None:
        """
        Seed the dropout masks (the counter is kept).
        """
    def train_step(
        self, src: numpy.typing.ArrayLike, tgt_in: numpy.typing.ArrayLike, tgt_out: numpy.typing.ArrayLike
    ) -> tuple[float, float]:
        """
        Forward, masked loss, backward and one Adam step; returns (loss, accuracy).
        """
    def weights_fingerprint(self) -> int:
        """
        64-bit fingerprint of every weight's bytes (equal weights, equal fingerprints).
        """
    def zero_grad(self) -> None: ...
    def zero_gradient_buffer(self) -> None:
        """
        Set gradient_buffer() to 0 and make it ready for apply_gradients (a process without a share of the batch).
        """
    @property
    def dropout_calls(self) -> int:
        """
        Training forwards so far: the dropout masks' counter (restore it to resume exactly).
        """
    @dropout_calls.setter
    def dropout_calls(self, value: int) -> None: ...
    @property
    def last_grad_norm(self) -> float: ...
    @property
    def last_token_count(self) -> int:
        """
        Non-padding target tokens in the last train_step/evaluate batch.
        """
    @property
    def step(self) -> int:
        """
        Optimiser steps taken so far.
        """
    @step.setter
    def step(self, value: int) -> None: ...

class Transformer_float64:
    """
    The encoder-decoder Transformer.
    """
    def __init__(self, config: TransformerConfig) -> None:
        """
        A model of this architecture (checked again for the precision and the memory it needs).
        """
    def apply_gradients(self, grad_scale: typing.SupportsFloat = 1.0) -> None:
        """
        Norm, clipping and one Adam step with gradient_buffer() * grad_scale as the gradients.
        """
    def attention_weights(self) -> dict[str, numpy.ndarray]:
        """
        Attention weights of the last forward: name -> (B, heads, T_q, T_k).
        """
    def backward(self, dlogits: numpy.typing.ArrayLike) -> None:
        """
        Accumulate every parameter gradient from d loss / d logits (B, T, V).
        """
    def beam_search(
        self,
        src: numpy.typing.ArrayLike,
        start_id: int,
        end_id: int,
        max_length: int,
        beam_size: int = 4,
        length_penalty: float = 0.6,
        n_best: int = 1,
        compute_type: str = "float32",
    ) -> list[list[tuple[list[int], float, float, bool]]]:
        """
        KV-cached beam search: per sentence, n_best (tokens, score, log_prob, finished) best first.
        """
    def compute_gradients(
        self,
        src: numpy.typing.ArrayLike,
        tgt_in: numpy.typing.ArrayLike,
        tgt_out: numpy.typing.ArrayLike,
        grad_scale: typing.SupportsFloat = 1.0,
    ) -> tuple[float, float]:
        """
        Forward, masked loss and backward; the gradients times grad_scale go to gradient_buffer() (the layers' own are zeroed); no update. Returns (loss, accuracy).
        """
    def config(self) -> TransformerConfig:
        """
        The architecture.
        """
    def configure_optimizer(self, config: OptimizerConfig) -> None:
        """
        Adam, the schedule, clipping and label smoothing of the following train_steps.
        """
    def evaluate(
        self, src: numpy.typing.ArrayLike, tgt_in: numpy.typing.ArrayLike, tgt_out: numpy.typing.ArrayLike
    ) -> tuple[float, float]:
        """
        Forward (inference mode) and masked loss/accuracy, no update; returns (loss, accuracy).
        """
    def forward(
        self, src: numpy.typing.ArrayLike, tgt_in: numpy.typing.ArrayLike, training: bool = False
    ) -> numpy.typing.NDArray[numpy.float64]:
        """
        src (B, S), tgt_in (B, T) int token ids -> logits (B, T, tgt_vocab_size)
        """
    def gradient_buffer(self) -> numpy.typing.NDArray[numpy.float64]:
        """
        The contiguous gradient buffer (a view, not a copy): every parameter's gradient in parameters() order, then 8 spare values for the caller to sum along with them.
        """
    def greedy_decode(
        self, src: numpy.typing.ArrayLike, start_id: int, end_id: int, max_length: int, compute_type: str = "float32"
    ) -> numpy.typing.NDArray[numpy.int64]:
        """
        KV-cached greedy decoding: (B, L) ids after the start token, up to and including end_id, then 0.
        """
    def learning_rate(self, step: int) -> float: ...
    def nonfinite_parameters(self, optimizer_state: bool = True) -> list[str]:
        """
        Names of the parameters (and, with optimizer_state, Adam moments '<param>.m'/'.v') holding NaN or inf.
        """
    def optimizer_config(self) -> OptimizerConfig:
        """
        The optimiser's configuration.
        """
    def optimizer_state(self) -> collections.OrderedDict[str, Parameter]:
        """
        Adam moments as an OrderedDict '<param>.m' / '<param>.v' -> Parameter (write .value to restore).
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def set_dropout_seed(self, seed: int) -> None:
        """
        Seed the dropout masks (the counter is kept).
        """
    def train_step(
        self, src: numpy.typing.ArrayLike, tgt_in: numpy.typing.ArrayLike, tgt_out: numpy.typing.ArrayLike
    ) -> tuple[float, float]:
        """
        Forward, masked loss, backward and one Adam step; returns (loss, accuracy).
        """
    def weights_fingerprint(self) -> int:
        """
        64-bit fingerprint of every weight's bytes (equal weights, equal fingerprints).
        """
    def zero_grad(self) -> None: ...
    def zero_gradient_buffer(self) -> None:
        """
        Set gradient_buffer() to 0 and make it ready for apply_gradients (a process without a share of the batch).
        """
    @property
    def dropout_calls(self) -> int:
        """
        Training forwards so far: the dropout masks' counter (restore it to resume exactly).
        """
    @dropout_calls.setter
    def dropout_calls(self, value: int) -> None: ...
    @property
    def last_grad_norm(self) -> float: ...
    @property
    def last_token_count(self) -> int:
        """
        Non-padding target tokens in the last train_step/evaluate batch.
        """
    @property
    def step(self) -> int:
        """
        Optimiser steps taken so far.
        """
    @step.setter
    def step(self, value: int) -> None: ...

class LSHAttention_float32:
    """
    Reformer's LSH attention over given shared-QK heads and values (B, H, T, d_k): the kernel of LSHSelfAttention without its projections.
    """
    def __init__(self, chunk: int = 64, n_hashes: int = 4, n_buckets: int | None = None, seed: int = 0) -> None: ...
    def backward(
        self, dout: numpy.typing.ArrayLike
    ) -> tuple[numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]]:
        """
        dout (B, H, T, d) -> (dqk, dv)
        """
    def buckets(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        The buckets of the last forward, (B, H, n_hashes, T)
        """
    def forward(
        self, qk: numpy.typing.ArrayLike, v: numpy.typing.ArrayLike, causal: bool = False
    ) -> numpy.typing.NDArray[numpy.float32]:
        """
        qk (B, H, T, d): the shared queries and keys (the keys are their unit vectors), v (B, H, T, d) -> (B, H, T, d)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def calls(self) -> int:
        """
        The forward count that, with the seed, draws the next forward's rotations
        """
    @calls.setter
    def calls(self, value: int) -> None: ...
    @property
    def chunk(self) -> int: ...
    @property
    def n_buckets(self) -> int | None:
        """
        The number of buckets, or None: 2 * max(1, length // chunk) for each input
        """
    @property
    def n_hashes(self) -> int: ...

class LSHAttention_float64:
    """
    Reformer's LSH attention over given shared-QK heads and values (B, H, T, d_k): the kernel of LSHSelfAttention without its projections.
    """
    def __init__(self, chunk: int = 64, n_hashes: int = 4, n_buckets: int | None = None, seed: int = 0) -> None: ...
    def backward(
        self, dout: numpy.typing.ArrayLike
    ) -> tuple[numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64]]:
        """
        dout (B, H, T, d) -> (dqk, dv)
        """
    def buckets(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        The buckets of the last forward, (B, H, n_hashes, T)
        """
    def forward(
        self, qk: numpy.typing.ArrayLike, v: numpy.typing.ArrayLike, causal: bool = False
    ) -> numpy.typing.NDArray[numpy.float64]:
        """
        qk (B, H, T, d): the shared queries and keys (the keys are their unit vectors), v (B, H, T, d) -> (B, H, T, d)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def calls(self) -> int:
        """
        The forward count that, with the seed, draws the next forward's rotations
        """
    @calls.setter
    def calls(self, value: int) -> None: ...
    @property
    def chunk(self) -> int: ...
    @property
    def n_buckets(self) -> int | None:
        """
        The number of buckets, or None: 2 * max(1, length // chunk) for each input
        """
    @property
    def n_hashes(self) -> int: ...

class LSHSelfAttention_float32:
    """
    Reformer's LSH self-attention: shared-QK heads hashed by random rotations, sorted by bucket, attending within chunks and one chunk back, n_hashes rounds combined.
    """
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        chunk: int = 64,
        n_hashes: int = 4,
        n_buckets: int | None = None,
        causal: bool = False,
        seed: int = 0,
    ) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); accumulates parameter gradients
        """
    def buckets(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        The buckets of the last forward, (B, n_heads, n_hashes, T)
        """
    def forward(self, x: numpy.typing.ArrayLike, causal: bool | None = None) -> numpy.typing.NDArray[numpy.float32]:
        """
        x (B, T, d_model) -> (B, T, d_model); causal None: the layer's setting
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def rotations(self) -> numpy.typing.NDArray[numpy.float32]:
        """
        The random rotations of the last forward, (n_heads, n_hashes, d_k, n_buckets/2)
        """
    def zero_grad(self) -> None: ...
    @property
    def calls(self) -> int:
        """
        The forward count that, with the seed, draws the next forward's rotations
        """
    @calls.setter
    def calls(self, value: int) -> None: ...
    @property
    def causal(self) -> bool: ...
    @property
    def chunk(self) -> int: ...
    @property
    def d_k(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def freeze_hash(self) -> bool:
        """
        True: forward does not advance calls, so every forward hashes with the same rotations
        """
    @freeze_hash.setter
    def freeze_hash(self, value: bool) -> None: ...
    @property
    def n_buckets(self) -> int | None:
        """
        The number of buckets, or None: 2 * max(1, length // chunk) for each input
        """
    @property
    def n_hashes(self) -> int: ...
    @property
    def n_heads(self) -> int: ...

class LSHSelfAttention_float64:
    """
    Reformer's LSH self-attention: shared-QK heads hashed by random rotations, sorted by bucket, attending within chunks and one chunk back, n_hashes rounds combined.
    """
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        chunk: int = 64,
        n_hashes: int = 4,
        n_buckets: int | None = None,
        causal: bool = False,
        seed: int = 0,
    ) -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); accumulates parameter gradients
        """
    def buckets(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        The buckets of the last forward, (B, n_heads, n_hashes, T)
        """
    def forward(self, x: numpy.typing.ArrayLike, causal: bool | None = None) -> numpy.typing.NDArray[numpy.float64]:
        """
        x (B, T, d_model) -> (B, T, d_model); causal None: the layer's setting
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def rotations(self) -> numpy.typing.NDArray[numpy.float64]:
        """
        The random rotations of the last forward, (n_heads, n_hashes, d_k, n_buckets/2)
        """
    def zero_grad(self) -> None: ...
    @property
    def calls(self) -> int:
        """
        The forward count that, with the seed, draws the next forward's rotations
        """
    @calls.setter
    def calls(self, value: int) -> None: ...
    @property
    def causal(self) -> bool: ...
    @property
    def chunk(self) -> int: ...
    @property
    def d_k(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def freeze_hash(self) -> bool:
        """
        True: forward does not advance calls, so every forward hashes with the same rotations
        """
    @freeze_hash.setter
    def freeze_hash(self, value: bool) -> None: ...
    @property
    def n_buckets(self) -> int | None:
        """
        The number of buckets, or None: 2 * max(1, length // chunk) for each input
        """
    @property
    def n_hashes(self) -> int: ...
    @property
    def n_heads(self) -> int: ...

def _check_memory(who: str, what: str, bytes: typing.SupportsFloat | typing.SupportsIndex) -> None:
    """
    ValueError '<who>: <what> needs N, more than the M of memory available' when bytes > the limit.
    """

def _bf16_matmul(
    a: numpy.typing.ArrayLike,
    b: numpy.typing.ArrayLike,
    trans_a: bool,
    trans_b: bool,
    c: numpy.typing.ArrayLike | None,
    kernel: str,
) -> numpy.typing.NDArray[numpy.float32]:
    """
    op(a) op(b) (+ c) with bfloat16 inputs and float32 sums (tests).
    """

def _bf16_supported() -> bool:
    """
    Whether the bfloat16 kernel may run here (CPU, build, environment).
    """

def _bf16_unsupported_reason() -> str:
    """
    Why not, or '' when it may.
    """

def _compute_type_supported(name: str) -> bool:
    """
    Whether decoding with compute type name ('float32', 'int8', 'bf16') may run here.
    """

def _compute_type_unsupported_reason(name: str) -> str:
    """
    Why not, or '' when it may.
    """

def _decode_linear(
    x: numpy.typing.ArrayLike, W: numpy.typing.ArrayLike, b: numpy.typing.ArrayLike, kernel: str
) -> numpy.typing.NDArray[numpy.float32]:
    """
    y = x W^T + b by one decoding kernel (tests).
    """

def _f32_kernel_runs(kernel: str) -> bool:
    """
    Whether the float32 kernel `kernel` can run here (CPU, build, instruction-set level).
    """

def _f32_kernel_supported() -> bool:
    """
    Whether a float32 kernel (AVX-512 or AVX2) runs the dense layers' products here (CPU, build, environment).
    """

def _f32_matmul(
    a: numpy.typing.ArrayLike,
    b: numpy.typing.ArrayLike,
    trans_a: bool,
    trans_b: bool,
    c: numpy.typing.ArrayLike | None,
    bias: numpy.typing.ArrayLike | None,
    kernel: str,
) -> numpy.typing.NDArray[numpy.float32]:
    """
    op(a) op(b) (+ c) (+ bias) in float32 (tests).
    """

def _splitmix64(x: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    splitmix64 of x, the core's one seed mixer (random.hpp); Python derives seeds with it.
    """

def _fingerprint(data: numpy.ndarray, seed: typing.SupportsInt | typing.SupportsIndex = 0) -> int:
    """
    64-bit fingerprint of a contiguous buffer's bytes (tests).
    """

def _first_argmax(v: numpy.typing.ArrayLike) -> int:
    """
    Index of the first largest value (tests of the decoding argmax).
    """

def _have_decode_kernels() -> bool:
    """
    Whether this build has the AVX-512 decoding kernels.
    """

def _memory_limit_bytes() -> float:
    """
    Bytes this process may still use (see checks.hpp).
    """

def _quantized_linear(
    x: numpy.typing.ArrayLike, W: numpy.typing.ArrayLike, b: numpy.typing.ArrayLike, compute_type: str, kernel: str
) -> numpy.typing.NDArray[numpy.float32]:
    """
    y = x W^T + b with int8 or bf16 weights: the kernel, its reference, or the dequantised weight (tests).
    """

def _round_to_bf16(x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
    """
    Each value rounded to the nearest bfloat16, ties to even (tests).
    """

def attention_mask(
    key_padding: numpy.typing.ArrayLike, query_length: int, causal: bool = False
) -> numpy.typing.NDArray[numpy.bool_]: ...
def attention_kind(name: str) -> AttentionKind:
    """
    The record of the attention kind `name`; ValueError naming the kinds for any other name.
    """

def attention_kinds() -> tuple[AttentionKind, ...]:
    """
    The attention kinds' records, in the order messages list them.
    """

def build_info() -> dict[str, str]:
    """
    Compiler, flags, OpenMP, Eigen version and SIMD level.
    """

def get_num_threads() -> int:
    """
    Number of threads the core will use.
    """

def masked_accuracy_float32(logits: numpy.typing.ArrayLike, targets: numpy.typing.ArrayLike) -> float:
    """
    Fraction of targets != 0 whose argmax over logits is right.
    """

def masked_accuracy_float64(logits: numpy.typing.ArrayLike, targets: numpy.typing.ArrayLike) -> float:
    """
    Fraction of targets != 0 whose argmax over logits is right.
    """

def masked_cross_entropy_float32(
    logits: numpy.typing.ArrayLike,
    targets: numpy.typing.ArrayLike,
    label_smoothing: float = 0.0,
    compute_grad: bool = True,
) -> tuple[float, numpy.ndarray | None]:
    """
    (loss, dlogits): softmax cross-entropy averaged over targets != 0, and its gradient.
    """

def masked_cross_entropy_float64(
    logits: numpy.typing.ArrayLike,
    targets: numpy.typing.ArrayLike,
    label_smoothing: float = 0.0,
    compute_grad: bool = True,
) -> tuple[float, numpy.ndarray | None]:
    """
    (loss, dlogits): softmax cross-entropy averaged over targets != 0, and its gradient.
    """

def padding_mask(tokens: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.bool_]:
    """
    bool (B, T), True where tokens == 0 (padding)
    """

def positional_encoding(
    length: int, depth: int, layout: str = "interleaved", dtype: str = "float32"
) -> numpy.ndarray: ...
def set_num_threads(n: int) -> None:
    """
    Set the number of threads used by OpenMP loops and Eigen's GEMM.
    """

def rel_shift_float32(x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
    """
    out[..., i, j] = x[..., i, j + T-1-i] for j <= L-T+i, else 0.
    """

def rel_shift_float64(x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
    """
    out[..., i, j] = x[..., i, j + T-1-i] for j <= L-T+i, else 0.
    """

def softmax_backward_float32(
    y: numpy.typing.ArrayLike, dy: numpy.typing.ArrayLike
) -> numpy.typing.NDArray[numpy.float32]:
    """
    Gradient of the softmax input given its output y and dy: y * (dy - sum(dy * y)).
    """

def softmax_backward_float64(
    y: numpy.typing.ArrayLike, dy: numpy.typing.ArrayLike
) -> numpy.typing.NDArray[numpy.float64]:
    """
    Gradient of the softmax input given its output y and dy: y * (dy - sum(dy * y)).
    """

def softmax_float32(x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
    """
    Softmax over the last axis; a row that is all -inf gives zeros.
    """

def softmax_float64(x: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
    """
    Softmax over the last axis; a row that is all -inf gives zeros.
    """

def warmup_learning_rate(step: int, d_model: int, warmup: int = 4000, scale: float = 1.0) -> float:
    """
    d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) * scale, step counted from 1.
    """

class TiledAttention_float32:
    """
    softmax(Q K^T / sqrt(d_k) + mask) V over (B, H, T, d_k) heads by the tiled kernel, which keeps the output and one log-sum-exp per query row instead of the (T_q, T_k) weights.
    """
    def __init__(self, tiled: bool = True) -> None: ...
    def backward(
        self, dout: numpy.typing.ArrayLike
    ) -> tuple[
        numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]
    ]:
        """
        dout (B, H, Tq, d) -> (dq, dk, dv)
        """
    def forward(
        self,
        q: numpy.typing.ArrayLike,
        k: numpy.typing.ArrayLike,
        v: numpy.typing.ArrayLike,
        causal: bool = False,
        key_padding: numpy.typing.ArrayLike | None = None,
    ) -> numpy.typing.NDArray[numpy.float32]:
        """
        q (B, H, Tq, d), k and v (B, H, Tk, d), key_padding (B, Tk) with 1 = blocked -> (B, H, Tq, d)
        """
    def log_sum_exp(self) -> numpy.typing.NDArray[numpy.float32]:
        """
        Each query row's log-sum-exp of its scaled scores, (B, H, Tq); +inf where every key is blocked.
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def tiled(self) -> bool: ...

class SoftmaxSelfAttention_float32:
    """
    Softmax self-attention (MultiHeadAttention) behind the interface of the language model's blocks.
    """
    def __init__(self, d_model: int, n_heads: int, seed: int = 0, attention_impl: str = "auto") -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float32]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); accumulates the parameter gradients
        """
    def forward(self, x: numpy.typing.ArrayLike, causal: bool = True) -> numpy.typing.NDArray[numpy.float32]:
        """
        x (B, T, d_model) -> (B, T, d_model)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def attention_impl(self) -> str: ...
    @attention_impl.setter
    def attention_impl(self, value: str) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def last_forward_tiled(self) -> bool: ...
    @property
    def n_heads(self) -> int: ...

class TiledAttention_float64:
    """
    softmax(Q K^T / sqrt(d_k) + mask) V over (B, H, T, d_k) heads by the tiled kernel, which keeps the output and one log-sum-exp per query row instead of the (T_q, T_k) weights.
    """
    def __init__(self, tiled: bool = True) -> None: ...
    def backward(
        self, dout: numpy.typing.ArrayLike
    ) -> tuple[
        numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64], numpy.typing.NDArray[numpy.float64]
    ]:
        """
        dout (B, H, Tq, d) -> (dq, dk, dv)
        """
    def forward(
        self,
        q: numpy.typing.ArrayLike,
        k: numpy.typing.ArrayLike,
        v: numpy.typing.ArrayLike,
        causal: bool = False,
        key_padding: numpy.typing.ArrayLike | None = None,
    ) -> numpy.typing.NDArray[numpy.float64]:
        """
        q (B, H, Tq, d), k and v (B, H, Tk, d), key_padding (B, Tk) with 1 = blocked -> (B, H, Tq, d)
        """
    def log_sum_exp(self) -> numpy.typing.NDArray[numpy.float64]:
        """
        Each query row's log-sum-exp of its scaled scores, (B, H, Tq); +inf where every key is blocked.
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def tiled(self) -> bool: ...

class SoftmaxSelfAttention_float64:
    """
    Softmax self-attention (MultiHeadAttention) behind the interface of the language model's blocks.
    """
    def __init__(self, d_model: int, n_heads: int, seed: int = 0, attention_impl: str = "auto") -> None: ...
    def backward(self, dout: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); accumulates the parameter gradients
        """
    def forward(self, x: numpy.typing.ArrayLike, causal: bool = True) -> numpy.typing.NDArray[numpy.float64]:
        """
        x (B, T, d_model) -> (B, T, d_model)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def attention_impl(self) -> str: ...
    @attention_impl.setter
    def attention_impl(self, value: str) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def last_forward_tiled(self) -> bool: ...
    @property
    def n_heads(self) -> int: ...
