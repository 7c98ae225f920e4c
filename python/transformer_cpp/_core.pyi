"""transformer_cpp._core: the C++ core (private; use the transformer_cpp package)"""

# Type stubs of the compiled extension for editors and type checkers, generated from the bindings
# by tools/gen_stubs.py (signatures, types and docstrings as pybind11 reports them): do not edit.
# After changing a binding, rebuild and run `python tools/gen_stubs.py`; tests/test_stubs.py fails while
# this file and the compiled module differ.
from __future__ import annotations

import collections
import collections.abc
import numpy
import numpy.typing
import typing

_F = typing.TypeVar("_F", numpy.float32, numpy.float64)

class _Adam(typing.Generic[_F]):
    """
    Adam over Parameter views (torch.optim.Adam update with bias correction).
    """
    def __init__(self, parameters: object, beta1: object = 0.9, beta2: object = 0.98, eps: object = 1e-09) -> None: ...
    def step(self, lr: object) -> None:
        """
        One update with learning rate lr (increments step_count first).
        """
    def clip_grad_norm(self, max_norm: object) -> float:
        """
        Global L2 norm of all gradients; scales them by max_norm / norm when it is larger. Returns the norm before clipping.
        """
    @property
    def step_count(self) -> int: ...
    @step_count.setter
    def step_count(self, value: object) -> None: ...
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
    def __len__(self) -> int: ...
    def state(self) -> object:
        """
        OrderedDict '<param>.m' / '<param>.v' -> writable views of the moments (for checkpoints).
        """
    def reset_state(self) -> None:
        """
        Zero the moments and the step count.
        """

class _DecoderLayer(typing.Generic[_F]):
    """
    Masked self-attention, cross-attention over ``memory`` and FFN, each with residual + LayerNorm.

    ``forward(x, memory, self_mask=None, cross_mask=None, training=False)``; ``backward(dout)``
    returns ``(dx, dmemory)``.
    """
    def __init__(self, d_model: object, n_heads: object, d_ff: object, dropout: object = 0.1, pre_norm: bool = False, eps: object = 1e-06, seed: object = 0) -> None: ...
    def forward(self, x: object, memory: object, self_mask: object = None, cross_mask: object = None, training: bool = False) -> numpy.typing.NDArray[_F]: ...
    def backward(self, dout: object) -> tuple[numpy.typing.NDArray[_F], numpy.typing.NDArray[_F]]:
        """
        dout (B, T, d) -> (dx (B, T, d), dmemory (B, S, d))
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _Decoder(typing.Generic[_F]):
    """
    Positional embedding, dropout and ``n_layers`` decoder layers.
    ``forward(tokens, memory, source_padding=None, training=False)``: tokens (B, T), memory (B, S, d),
    source_padding bool (B, S) (True = padding key). ``backward(dout)`` returns dmemory.
    """
    def __init__(self, vocab_size: object, d_model: object, n_layers: object, n_heads: object, d_ff: object, dropout: object = 0.1, max_length: object = 2048, layout: object = 'interleaved', pre_norm: bool = False, eps: object = 1e-06, seed: object = 0) -> None: ...
    def forward(self, tokens: object, memory: object, source_padding: object = None, training: bool = False) -> numpy.typing.NDArray[_F]: ...
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]:
        """
        dout (B, T, d) -> dmemory (B, S, d)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _Dropout(typing.Generic[_F]):
    """
    Inverted dropout. ``forward(x, training=True)`` zeroes each element with probability ``rate``
    and scales the rest by ``1 / (1 - rate)``; with ``training=False``, the default of every layer,
    it is the identity. Masks depend only on ``seed`` and the call count (``.calls``), never on the
    thread count.
    """
    def __init__(self, rate: object = 0.1, seed: object = 0) -> None: ...
    @property
    def rate(self) -> float: ...
    @property
    def calls(self) -> int: ...
    @calls.setter
    def calls(self, value: object) -> None: ...
    def forward(self, x: object, training: bool = False) -> numpy.typing.NDArray[_F]: ...
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _Embedding(typing.Generic[_F]):
    """
    Token embedding with padding id 0.

    The ``"weight"`` parameter ``(vocab_size, d_model)`` starts as ``N(0, d_model**-0.5)`` with
    row 0 zero; row 0 never receives gradient (like ``padding_idx=0`` in PyTorch).
    ``forward(tokens, scale=1.0)`` maps int ``(B, T)`` ids to ``weight[tokens] * scale`` of shape
    ``(B, T, d_model)``; ids outside ``[0, vocab_size)`` raise ``ValueError``.
    ``backward(dout)`` accumulates the weight gradient and returns ``None``.
    """
    def __init__(self, vocab_size: object, d_model: object, seed: object = 0) -> None: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    def forward(self, tokens: object, scale: object = 1.0) -> numpy.typing.NDArray[_F]:
        """
        tokens: int (B, T) -> (B, T, d_model) = weight[tokens] * scale
        """
    def backward(self, dout: object) -> None:
        """
        dout: (B, T, d_model); accumulates the weight gradient (not row 0); returns None
        """
    def padding_mask(self, tokens: object) -> numpy.typing.NDArray[numpy.bool]:
        """
        bool (B, T), True where tokens == 0
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _EncoderLayer(typing.Generic[_F]):
    """
    ``x -> LN(x + Dropout(SelfAttention(x))) -> LN(. + Dropout(FFN(.)))`` (post-norm; ``pre_norm=True``
    for the pre-norm variant). ``forward(x, mask=None, training=False)`` with ``x`` (B, T, d_model).
    """
    def __init__(self, d_model: object, n_heads: object, d_ff: object, dropout: object = 0.1, pre_norm: bool = False, eps: object = 1e-06, seed: object = 0) -> None: ...
    def forward(self, x: object, mask: object = None, training: bool = False) -> numpy.typing.NDArray[_F]: ...
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _Encoder(typing.Generic[_F]):
    """
    Positional embedding, dropout and ``n_layers`` encoder layers. ``forward(tokens, training=False)``
    maps int tokens (B, S) to (B, S, d_model); padding (token 0) keys are masked.
    """
    def __init__(self, vocab_size: object, d_model: object, n_layers: object, n_heads: object, d_ff: object, dropout: object = 0.1, max_length: object = 2048, layout: object = 'interleaved', pre_norm: bool = False, eps: object = 1e-06, seed: object = 0) -> None: ...
    def forward(self, tokens: object, training: bool = False) -> numpy.typing.NDArray[_F]: ...
    def backward(self, dout: object) -> None: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _FeedForward(typing.Generic[_F]):
    """
    Position-wise ``Linear(d_model, d_ff) -> ReLU -> Dropout -> Linear(d_ff, d_model)``;
    ``forward(x, training=False)`` with ``x`` (..., d_model).
    """
    def __init__(self, d_model: object, d_ff: object, dropout: object = 0.1, seed: object = 0) -> None: ...
    def forward(self, x: object, training: bool = False) -> numpy.typing.NDArray[_F]: ...
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _LSHAttention(typing.Generic[_F]):
    """
    Reformer's LSH attention over given heads: the kernel of :class:`LSHSelfAttention` without its
    query, value and output projections, as :class:`TiledAttention` is for softmax attention.

    ``forward(qk, v, causal=False)``: ``qk`` (B, H, T, d) are the shared queries and keys (the keys
    are their unit vectors), ``v`` (B, H, T, d) the values; returns the output (B, H, T, d).
    ``backward(dout)`` returns ``(dqk, dv)``. Hashing, chunks, rounds and masks are those of
    :class:`LSHSelfAttention`; with the same ``seed`` and ``calls`` it draws the same rotations, so
    its heads equal the layer's on the layer's projections. ``buckets()``: ``(B, H, n_hashes, T)``
    of the last forward.
    """
    def __init__(self, chunk: object = 64, n_hashes: object = 4, n_buckets: object = None, seed: object = 0) -> None: ...
    @property
    def chunk(self) -> int: ...
    @property
    def n_hashes(self) -> int: ...
    @property
    def n_buckets(self) -> object:
        """
        The number of buckets, or None: 2 * max(1, length // chunk) for each input
        """
    @property
    def calls(self) -> int:
        """
        The forward count that, with the seed, draws the next forward's rotations
        """
    @calls.setter
    def calls(self, value: object) -> None: ...
    def forward(self, qk: object, v: object, causal: object = False) -> numpy.typing.NDArray[_F]:
        """
        qk (B, H, T, d): the shared queries and keys (the keys are their unit vectors), v (B, H, T, d) -> (B, H, T, d)
        """
    def backward(self, dout: object) -> tuple[numpy.typing.NDArray[_F], numpy.typing.NDArray[_F]]:
        """
        dout (B, H, T, d) -> (dqk, dv)
        """
    def buckets(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        The buckets of the last forward, (B, H, n_hashes, T)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _LSHSelfAttention(typing.Generic[_F]):
    """
    Reformer's LSH self-attention (Kitaev et al. 2020): O(T) memory instead of O(T^2).

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
    def __init__(self, d_model: object, n_heads: object, chunk: object = 64, n_hashes: object = 4, n_buckets: object = None, causal: object = False, seed: object = 0) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def d_k(self) -> int: ...
    @property
    def chunk(self) -> int: ...
    @property
    def n_hashes(self) -> int: ...
    @property
    def n_buckets(self) -> object:
        """
        The number of buckets, or None: 2 * max(1, length // chunk) for each input
        """
    @property
    def causal(self) -> bool: ...
    @property
    def calls(self) -> int:
        """
        The forward count that, with the seed, draws the next forward's rotations
        """
    @calls.setter
    def calls(self, value: object) -> None: ...
    @property
    def freeze_hash(self) -> bool:
        """
        True: forward does not advance calls, so every forward hashes with the same rotations
        """
    @freeze_hash.setter
    def freeze_hash(self, value: object) -> None: ...
    def forward(self, x: object, causal: object = None) -> numpy.typing.NDArray[_F]:
        """
        x (B, T, d_model) -> (B, T, d_model); causal None: the layer's setting
        """
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); accumulates parameter gradients
        """
    def rotations(self) -> numpy.typing.NDArray[_F]:
        """
        The random rotations of the last forward, (n_heads, n_hashes, d_k, n_buckets/2)
        """
    def buckets(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        The buckets of the last forward, (B, n_heads, n_hashes, T)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _LanguageModel(typing.Generic[_F]):
    """
    The decoder-only (GPT-style) language model.
    """
    def __init__(self, config: LanguageModelConfig) -> None:
        """
        A model of this architecture (checked again for the memory it needs).
        """
    def forward(self, tokens: object, training: bool = False) -> numpy.typing.NDArray[_F]:
        """
        tokens (B, T) int ids -> logits (B, T, vocab_size): position t predicts the token after it.
        """
    def backward(self, dlogits: object) -> None:
        """
        Accumulate every parameter gradient from d loss / d logits (B, T, V).
        """
    def train_step(self, tokens: object) -> tuple[float, int]:
        """
        tokens (B, T+1): inputs tokens[:, :-1], labels tokens[:, 1:]. Forward, mean cross-entropy, backward and one Adam step; returns (loss, labels scored).
        """
    def check_batch(self, batch: typing.SupportsInt | typing.SupportsIndex, length: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Raise MemoryError when a training step on (batch, length) tokens (length = T+1, as train_step takes them) needs more memory than there is: checked before the batch is built.
        """
    def compute_gradients(self, tokens: object, training: bool = True) -> tuple[float, int]:
        """
        train_step's loss and gradients (in parameters()' .grad) without the update; returns (loss, count).
        """
    def apply_gradients(self) -> None:
        """
        train_step's update from the gradients in parameters()' .grad (compute_gradients', or a sum of several batches' written there): clipping, one Adam step, the gradients zeroed.
        """
    def evaluate_loss(self, tokens: object) -> tuple[float, int]:
        """
        tokens (B, T+1): mean cross-entropy (nats) of tokens[:, 1:] given the tokens before, in inference mode; returns (loss, labels scored).
        """
    @property
    def has_cached_step(self) -> bool:
        """
        Whether generation can run one step per token (softmax and relative attention: a key/value cache; linear: its RNN state; LSH attention and reversible blocks have none).
        """
    def start_generation(self, rows: object, capacity: object) -> None:
        """
        Empty generation state (key/value caches, or linear attention's RNN state) for `rows` sequences of up to `capacity` positions.
        """
    def generation_step(self, tokens: object) -> numpy.typing.NDArray[_F]:
        """
        Feed one token per sequence at the next position: logits (rows, vocab_size) of the token after it.
        """
    @property
    def generation_position(self) -> int:
        """
        Positions fed since start_generation.
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    def configure_optimizer(self, config: OptimizerConfig) -> None:
        """
        Adam, the schedule and clipping of the following train_steps.
        """
    def optimizer_config(self) -> OptimizerConfig:
        """
        The optimiser's configuration.
        """
    def optimizer_state(self) -> collections.OrderedDict[str, Parameter]:
        """
        Adam moments as an OrderedDict '<param>.m' / '<param>.v' -> Parameter (write .value to restore).
        """
    @property
    def step(self) -> int:
        """
        Optimiser steps taken so far.
        """
    @step.setter
    def step(self, value: object) -> None: ...
    @property
    def dropout_calls(self) -> int:
        """
        Training forwards so far: the dropout masks' counter (restore it to resume exactly).
        """
    @dropout_calls.setter
    def dropout_calls(self, value: object) -> None: ...
    def set_dropout_seed(self, seed: object) -> None:
        """
        Seed the dropout masks (the counter is kept).
        """
    def learning_rate(self, step: object) -> float: ...
    @property
    def last_grad_norm(self) -> float: ...
    @property
    def output_chunk_rows(self) -> int:
        """
        Rows per chunk of the training step's output layer and loss, computed together chunk by chunk so the (rows, vocabulary) logits are never stored whole: 0 (default) sizes the chunks from the vocabulary, n > 0 takes n rows, -1 computes the whole logits matrix (the unfused reference).
        """
    @output_chunk_rows.setter
    def output_chunk_rows(self, value: object) -> None: ...
    @property
    def memory_length(self) -> int:
        """
        Relative attention: positions of the preceding segments each block attends to (any length; setting it empties the memory).
        """
    @memory_length.setter
    def memory_length(self, value: object) -> None: ...
    @property
    def clamp_len(self) -> object:
        """
        Relative attention: distances beyond it are encoded as it (None: no clamp).
        """
    @clamp_len.setter
    def clamp_len(self, value: object) -> None: ...
    @property
    def memory_held(self) -> int:
        """
        Positions the segment memory holds now.
        """
    def reset_memory(self) -> None:
        """
        Empty the segment memory (a new text, or a stripe that starts again).
        """
    @property
    def memory_update(self) -> bool:
        """
        True (default): each forward moves the segment memory on; False: forwards read it and leave it as it is.
        """
    @memory_update.setter
    def memory_update(self, value: bool) -> None: ...
    def nonfinite_parameters(self, optimizer_state: bool = True) -> list[str]:
        """
        Names of the parameters (and, with optimizer_state, Adam moments) holding NaN or inf.
        """
    def config(self) -> LanguageModelConfig:
        """
        The architecture.
        """

class _LayerNorm(typing.Generic[_F]):
    """
    Layer normalisation over the last axis, as ``torch.nn.LayerNorm(d_model, eps=eps)``.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias`` with the biased variance (divide by
    ``d_model``) and ``eps`` inside the square root. Parameters ``"weight"`` (ones) and ``"bias"``
    (zeros), each of shape ``(d_model,)``.

    ``forward(x)`` maps ``(..., d_model)`` to the same shape. ``forward_residual(a, b)`` computes
    ``LN(a + b)`` (the "Add & Norm" of the paper) without a separate sum; after it, ``backward``
    returns ``d(a + b)``, which is the gradient of both ``a`` and ``b``.
    """
    def __init__(self, d_model: object, eps: object = 1e-06) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def eps(self) -> float: ...
    def forward(self, x: object) -> numpy.typing.NDArray[_F]:
        """
        x: (..., d_model) -> (..., d_model)
        """
    def forward_residual(self, a: object, b: object) -> numpy.typing.NDArray[_F]:
        """
        LN(a + b); backward() then returns d(a + b), the gradient of both
        """
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]:
        """
        dout: (..., d_model) -> dx; accumulates the weight and bias gradients
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _LinearAttentionState(typing.Generic[_F]):
    """
    The generation state of a LinearMultiHeadAttention: S (d_k x d_k) and z (d_k) per row and head.
    """
    @property
    def rows(self) -> int: ...
    @property
    def length(self) -> int: ...
    def values(self) -> tuple[numpy.typing.NDArray[_F], numpy.typing.NDArray[_F]]:
        """
        Copies (S, z): S (rows, n_heads, d_k, d_k) = sum phi(k)^T v, z (rows, n_heads, d_k) = sum phi(k)
        """

class _LinearAttention(typing.Generic[_F]):
    """
    Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs") with its backward.

    ``out_i = phi(q_i) sum_j phi(k_j)^T v_j / (phi(q_i) . sum_j phi(k_j) + 1e-6)``, ``phi(x) = elu(x) + 1``,
    summing over every position ``j`` or, with ``causal=True``, over ``j <= i`` (by cumulative sums in
    chunks: time and memory linear in T, no (T, T) matrix). ``forward(q, k, v, causal=False)`` takes
    ``q``, ``k``, ``v`` of one shape (..., T, d) and returns the output of that shape;
    ``backward(dout)`` returns ``(dq, dk, dv)``. ``state()`` gives ``(S, z)`` of the last forward,
    ``S = sum_j phi(k_j)^T v_j`` (..., d, d) and ``z = sum_j phi(k_j)`` (..., d).
    """
    def __init__(self) -> None: ...
    def forward(self, q: object, k: object, v: object, causal: object = False) -> numpy.typing.NDArray[_F]:
        """
        q, k, v (G, T, d) -> out (G, T, d)
        """
    def backward(self, dout: object) -> tuple[numpy.typing.NDArray[_F], numpy.typing.NDArray[_F], numpy.typing.NDArray[_F]]:
        """
        dout (G, T, d) -> (dq, dk, dv)
        """
    def state(self) -> tuple[numpy.typing.NDArray[_F], numpy.typing.NDArray[_F]]:
        """
        (S, z) of the last forward over the whole sequence: S (G, d, d) = sum phi(K_j)^T V_j, z (G, d) = sum phi(K_j)
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _LinearMultiHeadAttention(typing.Generic[_F]):
    """
    Multi-head linear attention: the Q, K, V and output projections of :class:`MultiHeadAttention`
    (same parameter names ``query|key|value|output.weight|bias``, same layout and, for one seed, the
    same initial values) around :class:`LinearAttention` per head instead of softmax attention.

    ``forward(x, causal=False)``: self-attention over ``x`` (B, T, d_model); with ``causal=True``
    position t attends to positions <= t. Time and memory are linear in T. ``backward(dout)``
    returns ``dx`` and accumulates the parameter gradients; ``release()`` frees what forward kept.

    Generation uses the RNN form: ``state = layer.new_state(rows)``, then ``layer.step(x_t, state)``
    with ``x_t`` (rows, d_model), one new position per sequence, returns its output (rows, d_model)
    in constant time per position, equal to the causal forward at that position.
    """
    def __init__(self, d_model: object, n_heads: object, seed: object = 0) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def d_k(self) -> int: ...
    def forward(self, x: object, causal: object = False) -> numpy.typing.NDArray[_F]:
        """
        x (B, T, d_model) -> (B, T, d_model)
        """
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); accumulates the parameter gradients
        """
    def release(self) -> None:
        """
        Free what the last forward kept for backward.
        """
    def new_state(self, rows: object) -> _LinearAttentionState[_F]:
        """
        An empty generation state for `rows` sequences.
        """
    def step(self, x: object, state: _LinearAttentionState[_F]) -> numpy.typing.NDArray[_F]:
        """
        x (rows, d_model): one new position per row -> y (rows, d_model); advances the state
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _Linear(typing.Generic[_F]):
    """
    Dense layer ``y = x W^T + b``; ``W`` has shape ``(out_features, in_features)`` as in PyTorch.

    Weights are Glorot-uniform from ``seed``, the bias starts at zero.
    ``forward(x)`` maps ``(..., in_features)`` to ``(..., out_features)``.
    """
    def __init__(self, in_features: object, out_features: object, bias: bool = True, seed: object = 0) -> None: ...
    @property
    def in_features(self) -> int: ...
    @property
    def out_features(self) -> int: ...
    def forward(self, x: object) -> numpy.typing.NDArray[_F]:
        """
        x: (..., in_features) -> (..., out_features)
        """
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]:
        """
        dout: (..., out_features) -> dx: (..., in_features); accumulates dW, db
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _MultiHeadAttention(typing.Generic[_F]):
    """
    Multi-head attention (Q, K, V projections, ``n_heads`` heads of ``d_k = d_model / n_heads``,
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
    def __init__(self, d_model: object, n_heads: object, seed: object = 0) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def d_k(self) -> int: ...
    def forward(self, x: object, memory: object = None, mask: object = None) -> numpy.typing.NDArray[_F]: ...
    def backward(self, dout: object) -> object:
        """
        dout (B, Tq, d) -> dx (self-attention) or (dx, dmemory) (cross-attention)
        """
    def attention_weights(self) -> numpy.typing.NDArray[_F]:
        """
        The attention weights of the last forward, (B, heads, T_q, T_k).
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    @property
    def attention_impl(self) -> str:
        """
        'plain' (keeps the attention weights), 'tiled' (memory linear in the length) or 'auto' (tiled from the length where it pays)
        """
    @attention_impl.setter
    def attention_impl(self, value: object) -> None: ...
    @property
    def last_forward_tiled(self) -> bool: ...

class _PositionalEmbedding(typing.Generic[_F]):
    """
    The input layer of the Transformer: ``weight[tokens] * sqrt(d_model) + PE[:T]``.

    ``PE`` is the sinusoidal table of :func:`transformer_cpp.positional_encoding` with the given
    ``layout`` (``"interleaved"`` or ``"concatenated"``), built once for ``max_length`` positions
    (``.table``) and grown for longer inputs. ``forward(tokens)`` takes int ids ``(B, T)`` and
    returns ``(B, T, d_model)``; the embedding weight is as in :class:`Embedding`.
    """
    def __init__(self, vocab_size: object, d_model: object, max_length: object = 2048, layout: object = 'interleaved', seed: object = 0) -> None: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def max_length(self) -> int: ...
    @property
    def layout(self) -> str: ...
    @property
    def table(self) -> numpy.typing.NDArray[_F]:
        """
        read-only copy (cached positions, d_model) of the positional table
        """
    def forward(self, tokens: object) -> numpy.typing.NDArray[_F]:
        """
        tokens: int (B, T) -> (B, T, d_model); the table grows past max_length as needed
        """
    def backward(self, dout: object) -> None:
        """
        dout: (B, T, d_model); accumulates the weight gradient (not row 0); returns None
        """
    def padding_mask(self, tokens: object) -> numpy.typing.NDArray[numpy.bool]:
        """
        bool (B, T), True where tokens == 0
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _ReLU(typing.Generic[_F]):
    """
    ``y = max(x, 0)`` element-wise; ``backward(dout)`` passes ``dout`` where ``y > 0``.
    """
    def __init__(self) -> None: ...
    def forward(self, x: object) -> numpy.typing.NDArray[_F]: ...
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]:
        """
        dout -> dx = dout where the output was positive, 0 elsewhere
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _RelativeMultiHeadAttention(typing.Generic[_F]):
    """
    Transformer-XL's relative multi-head attention with a segment memory (Dai et al. 2019).

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
    def __init__(self, d_model: object, n_heads: object, seed: object = 0, clamp_len: object = None) -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def d_k(self) -> int: ...
    @property
    def clamp_len(self) -> object:
        """
        Distances beyond clamp_len use the sinusoid of clamp_len (None: no clamp).
        """
    @clamp_len.setter
    def clamp_len(self, value: object) -> None: ...
    def forward(self, x: object, memory: object = None) -> numpy.typing.NDArray[_F]:
        """
        x (B, T, d_model), memory (B, M, d_model) or None -> (B, T, d_model)
        """
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); the memory gets no gradient
        """
    def attention_weights(self) -> numpy.typing.NDArray[_F]:
        """
        The attention weights of the last forward, (B, heads, T, M + T).
        """
    def infer_reset(self, batch: object, mem_len: object) -> None:
        """
        Empty the evaluation cache, for `batch` sequences keeping the last `mem_len` positions. The cache holds keys and values made by the current weights: reset it after they change.
        """
    def infer_memory(self, memory: object) -> None:
        """
        The memory (batch, M, d_model), the hidden states of the layer below, becomes the cached positions (their keys and values; the last mem_len are kept).
        """
    def infer(self, x: object) -> numpy.typing.NDArray[_F]:
        """
        New positions x (batch, T, d_model) attend to the cached positions and to themselves (causal), as forward(x, memory) does; then they join the cache. Returns (batch, T, d_model).
        """
    @property
    def infer_length(self) -> int:
        """
        Positions held in the evaluation cache.
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _ReversibleStack(typing.Generic[_F]):
    """
    Reformer's reversible residual stack of ``n_layers`` blocks (Kitaev et al. 2020, Sec. 3).

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
    called once per forward; ``rebuilt_inputs()`` then returns the two rebuilt streams.
    """
    def __init__(self, n_layers: object, d_model: object, n_heads: object, d_ff: object, dropout: object = 0.1, causal: object = True, seed: object = 0, attention: object = 'softmax', reversible: object = True, chunk_rows: object = None, eps: object = 1e-06) -> None: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def d_ff(self) -> int: ...
    @property
    def causal(self) -> bool: ...
    @property
    def attention(self) -> str: ...
    @property
    def reversible(self) -> bool: ...
    @property
    def chunk_rows(self) -> int: ...
    def forward(self, x: object, training: bool = False) -> numpy.typing.NDArray[_F]:
        """
        x (B, T, d_model) -> (B, T, d_model)
        """
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); parameter gradients accumulate
        """
    def rebuilt_inputs(self) -> tuple[numpy.typing.NDArray[_F], numpy.typing.NDArray[_F]]:
        """
        (x1, x2), each (B, T, d_model): the two streams at the bottom of the stack after backward. A reversible stack rebuilds them from its output; both equal the input up to rounding.
        """
    def activation_bytes(self) -> float:
        """
        Bytes of activations held for backward since the last forward (0 before a forward or after backward): the two streams when reversible, every block's cached activations when not.
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _ScaledDotProductAttention(typing.Generic[_F]):
    """
    ``softmax(Q K^T / sqrt(d_k) + mask) V`` with its backward.

    ``forward(q, k, v, mask=None)`` takes ``q`` (..., Tq, d), ``k`` and ``v`` (..., Tk, d) and a
    mask broadcastable to (..., Tq, Tk) with True = blocked; returns ``(output, weights)``.
    ``backward(dout)`` returns ``(dq, dk, dv)``.
    """
    def __init__(self) -> None: ...
    def forward(self, q: object, k: object, v: object, mask: object = None) -> tuple[numpy.typing.NDArray[_F], numpy.typing.NDArray[_F]]: ...
    def backward(self, dout: object) -> tuple[numpy.typing.NDArray[_F], numpy.typing.NDArray[_F], numpy.typing.NDArray[_F]]: ...
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _SoftmaxSelfAttention(typing.Generic[_F]):
    """
    Softmax self-attention as a language model's block uses it: ``forward(x, causal=True)`` with
    ``x`` (B, T, d_model), ``backward(dout)`` returns ``dx``. The layer of :class:`MultiHeadAttention`
    (same parameters); ``attention_impl`` defaults to ``"auto"`` (the tiled kernel for long inputs).
    """
    def __init__(self, d_model: object, n_heads: object, seed: object = 0, attention_impl: object = 'auto') -> None: ...
    @property
    def d_model(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def attention_impl(self) -> str: ...
    @attention_impl.setter
    def attention_impl(self, value: object) -> None: ...
    @property
    def last_forward_tiled(self) -> bool: ...
    def forward(self, x: object, causal: bool = True) -> numpy.typing.NDArray[_F]:
        """
        x (B, T, d_model) -> (B, T, d_model)
        """
    def backward(self, dout: object) -> numpy.typing.NDArray[_F]:
        """
        dout (B, T, d_model) -> dx (B, T, d_model); accumulates the parameter gradients
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _TiledAttention(typing.Generic[_F]):
    """
    Exact ``softmax(Q K^T / sqrt(d_k) + mask) V`` over (B, H, T, d_k) heads, computed block by block
    with a running maximum and sum per query, so that the (Tq, Tk) weights are never stored.

    ``forward(q, k, v, causal=False, key_padding=None)``: ``q`` (B, H, Tq, d), ``k`` and ``v``
    (B, H, Tk, d), ``key_padding`` (B, Tk) with True = blocked; returns the output (B, H, Tq, d).
    ``backward(dout)`` returns ``(dq, dk, dv)``, recomputing the weights from ``log_sum_exp()``.
    ``tiled=False`` runs the plain kernel (which stores the weights) on the same inputs.
    """
    def __init__(self, tiled: bool = True) -> None: ...
    @property
    def tiled(self) -> bool: ...
    def forward(self, q: object, k: object, v: object, causal: bool = False, key_padding: object = None) -> numpy.typing.NDArray[_F]:
        """
        q (B, H, Tq, d), k and v (B, H, Tk, d), key_padding (B, Tk) with 1 = blocked -> (B, H, Tq, d)
        """
    def backward(self, dout: object) -> tuple[numpy.typing.NDArray[_F], numpy.typing.NDArray[_F], numpy.typing.NDArray[_F]]:
        """
        dout (B, H, Tq, d) -> (dq, dk, dv)
        """
    def log_sum_exp(self) -> numpy.typing.NDArray[_F]:
        """
        Each query row's log-sum-exp of its scaled scores, (B, H, Tq); +inf where every key is blocked.
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...

class _Transformer(typing.Generic[_F]):
    """
    The encoder-decoder Transformer.
    """
    def __init__(self, config: TransformerConfig) -> None:
        """
        A model of this architecture (checked again for the precision and the memory it needs).
        """
    def forward(self, src: object, tgt_in: object, training: bool = False) -> numpy.typing.NDArray[_F]:
        """
        src (B, S), tgt_in (B, T) int token ids -> logits (B, T, tgt_vocab_size)
        """
    def backward(self, dlogits: object) -> None:
        """
        Accumulate every parameter gradient from d loss / d logits (B, T, V).
        """
    def train_step(self, src: object, tgt_in: object, tgt_out: object) -> tuple[typing.Any, ...]:
        """
        Forward, masked loss, backward and one Adam step; returns (loss, accuracy).
        """
    def evaluate(self, src: object, tgt_in: object, tgt_out: object) -> tuple[typing.Any, ...]:
        """
        Forward (inference mode) and masked loss/accuracy, no update; returns (loss, accuracy).
        """
    def compute_gradients(self, src: object, tgt_in: object, tgt_out: object, grad_scale: object = 1.0, accumulate: bool = False) -> tuple[float, float]:
        """
        Forward, masked loss and backward; the gradients times grad_scale go to gradient_buffer() (the layers' own are zeroed); no update. With accumulate they are added to the gradients not yet applied there (several batches, one update). Returns (loss, accuracy).
        """
    def gradient_buffer(self) -> numpy.typing.NDArray[_F]:
        """
        The contiguous gradient buffer (a view, not a copy): every parameter's gradient in parameters() order, then 8 spare values for the caller to sum along with them.
        """
    def zero_gradient_buffer(self) -> None:
        """
        Set gradient_buffer() to 0 and make it ready for apply_gradients (a process without a share of the batch).
        """
    def apply_gradients(self, grad_scale: object = 1.0) -> None:
        """
        Norm, clipping and one Adam step with gradient_buffer() * grad_scale as the gradients.
        """
    def set_dropout_seed(self, seed: object) -> None:
        """
        Seed the dropout masks (the counter is kept).
        """
    def weights_fingerprint(self) -> int:
        """
        64-bit fingerprint of every weight's bytes (equal weights, equal fingerprints).
        """
    @property
    def last_token_count(self) -> int:
        """
        Non-padding target tokens in the last train_step/evaluate batch.
        """
    def parameters(self) -> collections.OrderedDict[str, Parameter]: ...
    def zero_grad(self) -> None: ...
    def configure_optimizer(self, config: OptimizerConfig) -> None:
        """
        Adam, the schedule, clipping and label smoothing of the following train_steps.
        """
    def optimizer_config(self) -> OptimizerConfig:
        """
        The optimiser's configuration.
        """
    def optimizer_state(self) -> collections.OrderedDict[str, Parameter]:
        """
        Adam moments as an OrderedDict '<param>.m' / '<param>.v' -> Parameter (write .value to restore).
        """
    @property
    def step(self) -> int:
        """
        Optimiser steps taken so far.
        """
    @step.setter
    def step(self, value: object) -> None: ...
    @property
    def dropout_calls(self) -> int:
        """
        Training forwards so far: the dropout masks' counter (restore it to resume exactly).
        """
    @dropout_calls.setter
    def dropout_calls(self, value: object) -> None: ...
    def learning_rate(self, step: object) -> float: ...
    def nonfinite_parameters(self, optimizer_state: bool = True) -> list[str]:
        """
        Names of the parameters (and, with optimizer_state, Adam moments '<param>.m'/'.v') holding NaN or inf.
        """
    @property
    def last_grad_norm(self) -> float: ...
    @property
    def output_chunk_rows(self) -> int:
        """
        Rows per chunk of the training step's output layer and loss, computed together chunk by chunk so the (rows, vocabulary) logits are never stored whole: 0 (default) sizes the chunks from the vocabulary, n > 0 takes n rows, -1 computes the whole logits matrix (the unfused reference).
        """
    @output_chunk_rows.setter
    def output_chunk_rows(self, value: object) -> None: ...
    @property
    def attention_impl(self) -> str:
        """
        The kernel of every softmax attention's training forward and backward: 'auto' (the default: tiled from the length where it pays, memory linear in the length), 'tiled', or 'plain' (keeps the weights attention_weights() returns at every length). Decoding does not use it.
        """
    @attention_impl.setter
    def attention_impl(self, value: object) -> None: ...
    def attention_weights(self) -> dict[typing.Any, typing.Any]:
        """
        The last forward's attention weights: name -> (B, heads, T_q, T_k); see attention_impl.
        """
    def greedy_decode(self, src: object, start_id: object, end_id: object, max_length: object, compute_type: object = 'float32', max_lengths: object = None, return_attention: bool = False, target_prefix: object = None, sampling_topk: object = 1, sampling_topp: object = 1.0, sampling_temperature: object = 1.0, seed: object = 0) -> object:
        """
        KV-cached greedy decoding: (B, L) ids after the start token, up to and including end_id, then 0. max_lengths: each sentence's own limit (int array (B,), each in [1, max_length]); return_attention: also each sentence's cross-attention weights (layers, heads, its tokens, its source tokens). target_prefix: per sentence, ids each output starts with. sampling_topk > 1: draw each token among the k most likely (then the fewest whose probability reaches sampling_topp), logits divided by sampling_temperature; sentence b's draws depend only on seed and b.
        """
    def beam_search(self, src: object, start_id: object, end_id: object, max_length: object, beam_size: object = 4, length_penalty: object = 0.6, n_best: object = 1, compute_type: object = 'float32', max_lengths: object = None, return_attention: bool = False, target_prefix: object = None, constraints: object = None, length_penalty_mode: str = 'gnmt', early_stopping: str = 'heuristic', force_end: bool = False) -> list[typing.Any]:
        """
        KV-cached beam search: per sentence, n_best (tokens, score, log_prob, finished) best first. length_penalty_mode 'gnmt': score log_prob / ((5 + len) / 6) ** length_penalty; 'hf': Hugging Face generate's rules, log_prob / len ** length_penalty, early_stopping 'heuristic' (its False), 'first' (True) or 'never'. force_end: at the limit the end token, its log-probability not counted. target_prefix: per sentence, ids each output starts with; constraints: per sentence, id lists that must each appear in every output (fewer than beam_size), each tuple then ending with the number of constraints the hypothesis misses (above 0 only when cut at its limit). max_lengths: each sentence's own limit (int array (B,), each in [1, max_length]); return_attention: each hypothesis also carries its cross-attention weights (layers, heads, its tokens, its source tokens).
        """
    def config(self) -> TransformerConfig:
        """
        The architecture.
        """

class Adam_float32(_Adam[numpy.float32]): ...

class Adam_float64(_Adam[numpy.float64]): ...

class AttentionKind:
    """
    What one attention kind supports (read-only; the records of the core's attention/kinds.hpp). Every kind is causal.
    """
    @property
    def name(self) -> str: ...
    @property
    def summary(self) -> str: ...
    @property
    def bidirectional(self) -> bool:
        """
        Works without a causal mask (causal=False).
        """
    @property
    def memory(self) -> bool:
        """
        Takes a segment memory of preceding positions and encodes positions itself (memory_length, clamp_len; no absolute positional encoding).
        """
    @property
    def step(self) -> object:
        """
        The generation step: 'key_value_cache', 'recurrent_state' or None (generation re-reads the context).
        """
    @property
    def has_cached_step(self) -> bool: ...
    @property
    def reversible(self) -> bool:
        """
        Works in a reversible stack.
        """
    @property
    def cross_attention(self) -> bool:
        """
        Works as a decoder's cross-attention.
        """
    @property
    def key_padding(self) -> bool:
        """
        Masks the padded keys of a bidirectional batch (a translator's encoder).
        """
    @property
    def full_weights(self) -> bool:
        """
        Keeps the (B, H, T, T) attention weights on short inputs.
        """
    @property
    def hashed(self) -> bool:
        """
        Hashes positions into buckets (the lsh_* settings).
        """
    def __repr__(self) -> str: ...

class ConfigField:
    """
    One row of a configuration's table (TransformerConfig.fields()).
    """
    @property
    def name(self) -> str: ...
    @property
    def limit(self) -> Limit:
        """
        What the field allows (its kind: limit.kind).
        """
    @property
    def default(self) -> object: ...
    @property
    def help(self) -> str: ...
    @property
    def option(self) -> str | None:
        """
        The field's name among the training settings and on the command line (--option-name), or None: a field the program sets.
        """
    def __repr__(self) -> str: ...

class DecoderLayer_float32(_DecoderLayer[numpy.float32]): ...

class DecoderLayer_float64(_DecoderLayer[numpy.float64]): ...

class Decoder_float32(_Decoder[numpy.float32]): ...

class Decoder_float64(_Decoder[numpy.float64]): ...

class Dropout_float32(_Dropout[numpy.float32]): ...

class Dropout_float64(_Dropout[numpy.float64]): ...

class Embedding_float32(_Embedding[numpy.float32]): ...

class Embedding_float64(_Embedding[numpy.float64]): ...

class EncoderLayer_float32(_EncoderLayer[numpy.float32]): ...

class EncoderLayer_float64(_EncoderLayer[numpy.float64]): ...

class Encoder_float32(_Encoder[numpy.float32]): ...

class Encoder_float64(_Encoder[numpy.float64]): ...

class FeedForward_float32(_FeedForward[numpy.float32]): ...

class FeedForward_float64(_FeedForward[numpy.float64]): ...

class LSHAttention_float32(_LSHAttention[numpy.float32]): ...

class LSHAttention_float64(_LSHAttention[numpy.float64]): ...

class LSHSelfAttention_float32(_LSHSelfAttention[numpy.float32]): ...

class LSHSelfAttention_float64(_LSHSelfAttention[numpy.float64]): ...

class LanguageModelConfig:
    """
    The language model's architecture (ConfigTable<LanguageModelConfig>).
    """
    def __init__(self, **kwargs: typing.Any) -> None:
        """
        Every field by keyword (the others keep their defaults), each checked against its row of fields(): TypeError for an unknown name or a value of the wrong type, ValueError for one out of range.
        """
    @staticmethod
    def fields() -> list[typing.Any]:
        """
        The table of the fields, in order: list of ConfigField.
        """
    def to_dict(self) -> dict[typing.Any, typing.Any]:
        """
        The fields as a dict, in the table's order (JSON-serialisable).
        """
    def __eq__(self, arg0: object) -> bool: ...
    __hash__: typing.ClassVar[None]  # type: ignore[assignment]
    def __repr__(self) -> str: ...

class LanguageModel_float32(_LanguageModel[numpy.float32]): ...

class LanguageModel_float64(_LanguageModel[numpy.float64]): ...

class LayerNorm_float32(_LayerNorm[numpy.float32]): ...

class LayerNorm_float64(_LayerNorm[numpy.float64]): ...

class Limit:
    """
    The allowed values of a setting: an integer (integer=True) or a finite number from low to high (high may be infinite; low_open / high_open exclude the bound), Limit.flag() (True or False) or Limit.one_of(names). check() refuses anything else with one message format, '<owner>: <name> must be <describe()>, got <value>' (TypeError for a value of the wrong type, ValueError for one out of range); the core checks its configurations with the same.
    """
    def __init__(self, integer: bool, low: object, high: object = ..., low_open: bool = False, high_open: bool = False, unit: str = '') -> None: ...
    @staticmethod
    def flag() -> Limit:
        """
        True or False.
        """
    @staticmethod
    def one_of(choices: collections.abc.Sequence[str]) -> Limit:
        """
        One of these names.
        """
    @property
    def kind(self) -> str:
        """
        'integer', 'number', 'flag' or 'choice'.
        """
    @property
    def integer(self) -> bool: ...
    @property
    def low(self) -> object: ...
    @property
    def high(self) -> object: ...
    @property
    def low_open(self) -> bool: ...
    @property
    def high_open(self) -> bool: ...
    @property
    def unit(self) -> str: ...
    @property
    def choices(self) -> list[str]: ...
    def describe(self) -> str:
        """
        What is allowed: 'an integer in [1, 16384]', 'a finite number > 0', 'a number in [0, 1)', 'True or False', "'float32' or 'bf16'".
        """
    def check(self, owner: str, name: str, value: object) -> int | float | bool | str:
        """
        value as an int, float, bool or str if allowed; else TypeError (wrong type) or ValueError (out of range): '<owner>: <name> must be <describe()>, got <value>' ('<name> must be ...' without an owner).
        """
    def message(self, owner: str, name: str, value: object) -> str:
        """
        The message check() gives for value.
        """
    def __eq__(self, arg0: object) -> bool: ...
    def __hash__(self) -> int: ...
    def __repr__(self) -> str: ...

class LinearAttentionState_float32(_LinearAttentionState[numpy.float32]): ...

class LinearAttentionState_float64(_LinearAttentionState[numpy.float64]): ...

class LinearAttention_float32(_LinearAttention[numpy.float32]): ...

class LinearAttention_float64(_LinearAttention[numpy.float64]): ...

class LinearMultiHeadAttention_float32(_LinearMultiHeadAttention[numpy.float32]): ...

class LinearMultiHeadAttention_float64(_LinearMultiHeadAttention[numpy.float64]): ...

class Linear_float32(_Linear[numpy.float32]): ...

class Linear_float64(_Linear[numpy.float64]): ...

class MultiHeadAttention_float32(_MultiHeadAttention[numpy.float32]): ...

class MultiHeadAttention_float64(_MultiHeadAttention[numpy.float64]): ...

class NonFiniteError(FloatingPointError, RuntimeError): ...

class OptimizerConfig:
    """
    Adam, the learning-rate schedule, clipping and label smoothing.
    """
    def __init__(self, **kwargs: typing.Any) -> None:
        """
        Every field by keyword (the others keep their defaults), each checked against its row of fields(): TypeError for an unknown name or a value of the wrong type, ValueError for one out of range.
        """
    @staticmethod
    def fields() -> list[typing.Any]:
        """
        The table of the fields, in order: list of ConfigField.
        """
    def to_dict(self) -> dict[typing.Any, typing.Any]:
        """
        The fields as a dict, in the table's order (JSON-serialisable).
        """
    def __eq__(self, arg0: object) -> bool: ...
    __hash__: typing.ClassVar[None]  # type: ignore[assignment]
    def __repr__(self) -> str: ...

class Parameter:
    """
    A named parameter: writable NumPy views of value and grad.
    """
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> numpy.ndarray: ...
    @property
    def grad(self) -> numpy.ndarray: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    def __repr__(self) -> str: ...

class PositionalEmbedding_float32(_PositionalEmbedding[numpy.float32]): ...

class PositionalEmbedding_float64(_PositionalEmbedding[numpy.float64]): ...

class ReLU_float32(_ReLU[numpy.float32]): ...

class ReLU_float64(_ReLU[numpy.float64]): ...

class RelativeMultiHeadAttention_float32(_RelativeMultiHeadAttention[numpy.float32]): ...

class RelativeMultiHeadAttention_float64(_RelativeMultiHeadAttention[numpy.float64]): ...

class ReversibleStack_float32(_ReversibleStack[numpy.float32]): ...

class ReversibleStack_float64(_ReversibleStack[numpy.float64]): ...

class ScaledDotProductAttention_float32(_ScaledDotProductAttention[numpy.float32]): ...

class ScaledDotProductAttention_float64(_ScaledDotProductAttention[numpy.float64]): ...

class SoftmaxSelfAttention_float32(_SoftmaxSelfAttention[numpy.float32]): ...

class SoftmaxSelfAttention_float64(_SoftmaxSelfAttention[numpy.float64]): ...

class TiledAttention_float32(_TiledAttention[numpy.float32]): ...

class TiledAttention_float64(_TiledAttention[numpy.float64]): ...

class TransformerConfig:
    """
    The model's architecture (ConfigTable<TransformerConfig> in the core).
    """
    def __init__(self, **kwargs: typing.Any) -> None:
        """
        Every field by keyword (the others keep their defaults), each checked against its row of fields(): TypeError for an unknown name or a value of the wrong type, ValueError for one out of range.
        """
    @staticmethod
    def fields() -> list[typing.Any]:
        """
        The table of the fields, in order: list of ConfigField.
        """
    def to_dict(self) -> dict[typing.Any, typing.Any]:
        """
        The fields as a dict, in the table's order (JSON-serialisable).
        """
    def __eq__(self, arg0: object) -> bool: ...
    __hash__: typing.ClassVar[None]  # type: ignore[assignment]
    def __repr__(self) -> str: ...

class Transformer_float32(_Transformer[numpy.float32]): ...

class Transformer_float64(_Transformer[numpy.float64]): ...

def _bf16_amx_cpu_supported() -> bool:
    """
    Whether the AMX tiles can run here (CPU, OS, build), whatever the environment says.
    """

def _bf16_amx_supported() -> bool:
    """
    Whether the AMX tiles compute the bf16 products here.
    """

def _bf16_amx_unsupported_reason() -> str:
    """
    Why not, or '' when they do.
    """

def _bf16_kernel() -> str:
    """
    The kernel of the bf16 products: 'amx' or 'avx512_bf16'.
    """

def _bf16_matmul(a: object, b: object, trans_a: bool, trans_b: bool, c: object, kernel: str) -> numpy.typing.NDArray[numpy.float32]:
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

def _check_memory(who: str, what: str, bytes: typing.SupportsFloat | typing.SupportsIndex) -> None:
    """
    ValueError '<who>: <what> needs N, more than the M of memory available' when bytes > the limit.
    """

def _compute_type_supported(name: str) -> bool:
    """
    Whether decoding with compute type name ('float32', 'int8', 'bf16') may run here.
    """

def _compute_type_unsupported_reason(name: str) -> str:
    """
    Why not, or '' when it may.
    """

def _decode_linear(x: object, W: object, b: object, kernel: str) -> numpy.typing.NDArray[numpy.float32]:
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

def _f32_matmul(a: object, b: object, trans_a: bool, trans_b: bool, c: object, bias: object, kernel: str) -> numpy.typing.NDArray[numpy.float32]:
    """
    op(a) op(b) (+ c) (+ bias) in float32 (tests).
    """

def _fingerprint(data: numpy.ndarray, seed: typing.SupportsInt | typing.SupportsIndex = 0) -> int:
    """
    64-bit fingerprint of a contiguous buffer's bytes (tests).
    """

def _first_argmax(v: object) -> int:
    """
    Index of the first largest value (tests of the decoding argmax).
    """

def _have_decode_kernels() -> bool:
    """
    Whether the AVX2 or AVX-512 decoding kernels may run (build and instruction-set level).
    """

def _memory_limit_bytes() -> float:
    """
    Bytes this process may still use (see checks.hpp).
    """

def _quantized_linear(x: object, W: object, b: object, compute_type: str, kernel: str) -> numpy.typing.NDArray[numpy.float32]:
    """
    y = x W^T + b with int8 or bf16 weights: the kernel, its reference, or the dequantised weight (tests).
    """

def _round_to_bf16(x: object) -> numpy.typing.NDArray[numpy.float32]:
    """
    Each value rounded to the nearest bfloat16, ties to even (tests).
    """

def _splitmix64(x: typing.SupportsInt | typing.SupportsIndex) -> int:
    """
    splitmix64 of x, the core's one seed mixer (random.hpp); Python derives seeds with it.
    """

def attention_kind(name: str) -> AttentionKind:
    """
    The record of the attention kind `name`; ValueError naming the kinds for any other name.
    """

def attention_kinds() -> tuple[typing.Any, ...]:
    """
    The attention kinds' records, in the order messages list them.
    """

def attention_mask(key_padding: object, query_length: object, causal: bool = False) -> numpy.typing.NDArray[numpy.bool]: ...

def build_info() -> dict[str, str]:
    """
    Compiler, flags, OpenMP, Eigen version and SIMD level.
    """

def get_num_threads() -> int:
    """
    Number of threads the core will use.
    """

def masked_accuracy_float32(logits: object, targets: object) -> float:
    """
    Fraction of targets != 0 whose argmax over logits is right.
    """

def masked_accuracy_float64(logits: object, targets: object) -> float:
    """
    Fraction of targets != 0 whose argmax over logits is right.
    """

def masked_cross_entropy_float32(logits: object, targets: object, label_smoothing: object = 0.0, compute_grad: bool = True) -> tuple[typing.Any, ...]:
    """
    (loss, dlogits): softmax cross-entropy averaged over targets != 0, and its gradient.
    """

def masked_cross_entropy_float64(logits: object, targets: object, label_smoothing: object = 0.0, compute_grad: bool = True) -> tuple[typing.Any, ...]:
    """
    (loss, dlogits): softmax cross-entropy averaged over targets != 0, and its gradient.
    """

def padding_mask(tokens: object) -> numpy.typing.NDArray[numpy.bool]:
    """
    bool (B, T), True where tokens == 0 (padding)
    """

def positional_encoding(length: object, depth: object, layout: object = 'interleaved', dtype: object = 'float32') -> numpy.ndarray: ...

def rel_shift_float32(x: object) -> numpy.typing.NDArray[numpy.float32]:
    """
    out[..., i, j] = x[..., i, j + T-1-i] for j <= L-T+i, else 0.
    """

def rel_shift_float64(x: object) -> numpy.typing.NDArray[numpy.float64]:
    """
    out[..., i, j] = x[..., i, j + T-1-i] for j <= L-T+i, else 0.
    """

def sampling_distribution(logits: typing.Annotated[numpy.typing.ArrayLike, numpy.float64], top_k: typing.SupportsInt | typing.SupportsIndex, top_p: typing.SupportsFloat | typing.SupportsIndex = 1.0, temperature: typing.SupportsFloat | typing.SupportsIndex = 1.0) -> numpy.typing.NDArray[numpy.float64]:
    """
    The distribution greedy decoding samples from for one row of logits (padding id 0 never): temperature, then top-k, then top-p, renormalised.
    """

def set_num_threads(n: object) -> None:
    """
    Set the number of threads used by OpenMP loops and Eigen's GEMM.
    """

def softmax_backward_float32(y: object, dy: object) -> numpy.typing.NDArray[numpy.float32]:
    """
    Gradient of the softmax input given its output y and dy: y * (dy - sum(dy * y)).
    """

def softmax_backward_float64(y: object, dy: object) -> numpy.typing.NDArray[numpy.float64]:
    """
    Gradient of the softmax input given its output y and dy: y * (dy - sum(dy * y)).
    """

def softmax_float32(x: object) -> numpy.typing.NDArray[numpy.float32]:
    """
    Softmax over the last axis; a row that is all -inf gives zeros.
    """

def softmax_float64(x: object) -> numpy.typing.NDArray[numpy.float64]:
    """
    Softmax over the last axis; a row that is all -inf gives zeros.
    """

def warmup_learning_rate(step: object, d_model: object, warmup: object = 4000, scale: object = 1.0) -> float:
    """
    d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) * scale, step counted from 1.
    """
