"""A PyTorch reference of :class:`transformer_cpp.Transformer`, for parity tests and benchmarks.

The reference is built from ``torch.nn`` pieces and computes exactly what the C++ model computes,
so the two agree on outputs and gradients up to floating-point rounding:

* input layer: ``nn.Embedding(vocab, d_model, padding_idx=0)`` scaled by ``sqrt(d_model)`` plus
  the sinusoidal table of :func:`transformer_cpp.positional_encoding`, then dropout;
* attention: packed Q/K/V projection ``in_proj_weight`` (3 d_model, d_model) as in
  ``nn.MultiheadAttention``, ``torch.nn.functional.scaled_dot_product_attention`` per head, an
  ``output`` ``nn.Linear``; a query whose keys are all blocked gets a zero output (PyTorch's own
  attention returns NaN there);
* sub-layers post-norm (``x = LN(x + Dropout(sublayer(x)))``, the paper) or, with ``pre_norm``,
  ``x = x + Dropout(sublayer(LN(x)))`` and a final ``LayerNorm`` after each stack;
* feed-forward ``linear2(Dropout(ReLU(linear1(x))))``; ``nn.LayerNorm(d_model, eps)``;
* masks: source key padding in encoder self-attention and in cross-attention, look-ahead plus
  target key padding in decoder self-attention (token 0 is padding);
* output projection ``y W^T + b``, with ``W`` the decoder embedding when ``share_embeddings``.

Module and parameter names mirror the C++ model's (``encoder.layers.0.norm1.weight`` ...) except
that each attention keeps its query/key/value weights packed in ``in_proj_weight`` /
``in_proj_bias`` (rows ``[W_q; W_k; W_v]``, the same packing the C++ core uses internally).

Public functions (stable; the benchmark uses them):

``build_reference(config, dtype=None) -> ReferenceTransformer``
    A fresh reference for a ``Transformer.config`` dict (float32 unless the config or ``dtype``
    says float64), initialised like the C++ model (Glorot-uniform weights, zero biases,
    ``N(0, d_model**-0.5)`` embeddings, seeded by ``config["seed"]``). It is an ordinary
    ``nn.Module``: call it as ``ref(src, tgt_in)`` with int64 tensors or NumPy arrays to get
    logits ``(B, T, tgt_vocab)``, train it with ``torch.optim.Adam``; ``ref.loss(logits, tgt_out)``
    is the masked cross-entropy (``ignore_index=0``). For step-by-step decoding use its parts:
    ``memory = ref.encoder(src)``, ``y = ref.decoder(tgt_prefix, memory, source_padding=src == 0)``,
    ``logits = ref.project(y)``.
``copy_weights_to_reference(model, ref)``
    Copy every parameter of one of our models or layers (``Transformer``, ``EncoderLayer``,
    ``MultiHeadAttention``, ... or a mapping ``name -> array``) into the matching reference module
    (``ReferenceTransformer``, ``ReferenceEncoderLayer``, ...). Every reference parameter must be
    covered and every name known; anything else raises ``KeyError`` / ``ValueError``.
``reference_gradients(ref) -> dict``
    The ``.grad`` of every reference parameter as NumPy arrays keyed by OUR parameter names
    (``...self_attention.query.weight`` is the first third of ``in_proj_weight.grad``); zeros for
    parameters that received no gradient.
``tutorial_greedy_decode(ref, src, start_id, end_id, max_length) -> np.ndarray``
    Greedy decoding as the PyTorch tutorial writes it (encode once, re-run the decoder on the
    growing prefix, no cache): the benchmark's PyTorch decoding peer. The loop is
    :func:`transformer_cpp.translate.greedy_reference`, so the output follows its convention.

The layer classes (``ReferenceMultiHeadAttention``, ``ReferenceFeedForward``,
``ReferenceEncoderLayer``, ``ReferenceDecoderLayer``, ``ReferenceEncoder``, ``ReferenceDecoder``)
take the same constructor arguments and forward inputs as our layers of the same name, with
boolean masks where True = blocked.

This module needs PyTorch (``pip install 'transformer-cpp[torch]'``); importing it without
PyTorch raises ``ImportError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Dict, Optional, Tuple, cast

import numpy as np

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "transformer_cpp.torch_reference needs PyTorch; install it with pip install 'transformer-cpp[torch]'"
    ) from exc

from .._exported_torch import SelfAttentionLayer, residual
from .._runtime import positional_encoding
from ..translate import greedy_reference
from .attention import (
    ReferenceLinearAttention,
    ReferenceMultiHeadAttention,
    _as_mask,
    self_attention_reference,
)

__all__ = [
    "ReferenceDecoder",
    "ReferenceDecoderLayer",
    "ReferenceEncoder",
    "ReferenceEncoderLayer",
    "ReferenceFeedForward",
    "ReferenceLinearAttention",
    "ReferenceMultiHeadAttention",
    "ReferenceTransformer",
    "build_reference",
    "copy_weights_to_reference",
    "reference_gradients",
    "torch_dtype",
    "tutorial_greedy_decode",
]

# Defaults of transformer_cpp.Transformer for keys a config may leave out.
_DEFAULTS: Dict[str, Any] = dict(
    d_model=512,
    n_layers=6,
    n_heads=8,
    d_ff=2048,
    dropout=0.1,
    max_length=2048,
    layout="interleaved",
    pre_norm=False,
    share_embeddings=False,
    layer_norm_eps=1e-6,
    seed=0,
    dtype="float32",
    # our matrix-product precision; the reference computes in its dtype
    precision="float32",
    encoder_attention="softmax",
    decoder_attention="softmax",
)

#: Options of the core that the reference does not mirror (a Marian model's): accepted at these
#: values, which are the core's defaults, and refused at any other (transformers' MarianMTModel is
#: the reference of an imported model).
_FIXED: Dict[str, Any] = dict(
    n_encoder_layers=0,
    n_decoder_layers=0,
    activation="relu",
    scale_embedding=True,
    share_source_embedding=False,
    pad_id=0,
    start_id=1,
    end_id=2,
)

_QKV = {"query": 0, "key": 1, "value": 2}


def torch_dtype(dtype: Any) -> "torch.dtype":
    """``torch.float32`` or ``torch.float64`` for a NumPy-style dtype name (or a torch dtype)."""
    if isinstance(dtype, torch.dtype):
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"torch_reference: dtype must be float32 or float64, got {dtype}")
        return dtype
    name = np.dtype(dtype).name
    if name not in ("float32", "float64"):
        raise ValueError(f"torch_reference: dtype must be 'float32' or 'float64', got {dtype!r}")
    return torch.float32 if name == "float32" else torch.float64


def _as_tokens(x: Any, device: "torch.device") -> "torch.Tensor":
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    if t.dtype.is_floating_point or t.dtype == torch.bool or t.dim() != 2:
        raise ValueError(f"torch_reference: token ids must be an integer (B, T) array, got {t.dtype} {tuple(t.shape)}")
    return t.to(device=device, dtype=torch.long)


# --- layers ----------------------------------------------------------------------------------------


class ReferenceFeedForward(nn.Module):
    """``linear2(Dropout(ReLU(linear1(x))))``."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: "torch.Tensor") -> "torch.Tensor":
        return cast(torch.Tensor, self.linear2(self.dropout(torch.relu(self.linear1(x)))))


class _ReferenceLayer(SelfAttentionLayer):
    """What both layers start with: the self-attention of the kind ``attention`` (causal in the
    decoder), its LayerNorm and dropout, and the feed-forward network."""

    causal = False

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, dropout: float, pre_norm: bool, eps: float, attention: str
    ) -> None:
        kind = self_attention_reference(attention, d_model, n_heads, self.causal)
        super().__init__(kind, d_model, dropout, pre_norm, eps)
        self.feed_forward = ReferenceFeedForward(d_model, d_ff, dropout)


class ReferenceEncoderLayer(_ReferenceLayer):
    """Self-attention and feed-forward sub-layers, post-norm (default) or pre-norm.
    ``forward(x, mask=None)`` with x (B, T, d) and mask broadcastable to (B, T, T)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, pre_norm: bool = False,
                 eps: float = 1e-6, attention: str = "softmax") -> None:  # fmt: skip
        super().__init__(d_model, n_heads, d_ff, dropout, pre_norm, eps, attention)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: "torch.Tensor", mask: Any = None) -> "torch.Tensor":
        x = residual(x, lambda h: self.self_attention(h, mask=mask), self.norm1, self.dropout1, self.pre_norm)
        return residual(x, self.feed_forward, self.norm2, self.dropout2, self.pre_norm)


class ReferenceDecoderLayer(_ReferenceLayer):
    """Masked self-attention, cross-attention and feed-forward sub-layers, post- or pre-norm.
    ``forward(x, memory, self_mask=None, cross_mask=None)``."""

    causal = True

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, pre_norm: bool = False,
                 eps: float = 1e-6, attention: str = "softmax") -> None:  # fmt: skip
        super().__init__(d_model, n_heads, d_ff, dropout, pre_norm, eps, attention)
        self.cross_attention = ReferenceMultiHeadAttention(d_model, n_heads)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.dropout2 = nn.Dropout(dropout)
        self.norm3 = nn.LayerNorm(d_model, eps=eps)
        self.dropout3 = nn.Dropout(dropout)

    def forward(
        self, x: "torch.Tensor", memory: "torch.Tensor", self_mask: Any = None, cross_mask: Any = None
    ) -> "torch.Tensor":
        x = residual(x, lambda h: self.self_attention(h, mask=self_mask), self.norm1, self.dropout1, self.pre_norm)
        x = residual(
            x, lambda h: self.cross_attention(h, memory, mask=cross_mask), self.norm2, self.dropout2, self.pre_norm
        )
        return residual(x, self.feed_forward, self.norm3, self.dropout3, self.pre_norm)


class _Stack(nn.Module):
    """Shared input layer, ``n_layers`` layers of ``layer_class`` and the final pre-norm LayerNorm
    of the encoder and decoder stacks."""

    pe: torch.Tensor  # the positional-encoding buffer registered in __init__
    layer_class: type  # the layer each subclass stacks

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
        eps: float = 1e-6,
        **layer_options: Any,
    ) -> None:
        super().__init__()
        self.d_model, self.max_length = d_model, max_length
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.register_buffer(
            "pe", torch.from_numpy(positional_encoding(max_length, d_model, layout, "float64")), persistent=False
        )
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            self.layer_class(d_model, n_heads, d_ff, dropout, pre_norm, eps, **layer_options) for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model, eps=eps) if pre_norm else None

    def embed(self, tokens: "torch.Tensor") -> "torch.Tensor":
        t = tokens.shape[1]
        if t > self.max_length:
            raise ValueError(f"torch_reference: sequence length {t} is longer than max_length {self.max_length}")
        x = self.embedding(tokens) * math.sqrt(self.d_model) + self.pe[:t].to(self.embedding.weight.dtype)
        return cast(torch.Tensor, self.dropout(x))


class ReferenceEncoder(_Stack):
    """Embedding, dropout and ``n_layers`` encoder layers (+ a final LayerNorm when pre-norm).
    ``forward(tokens) -> (B, S, d)``; padding keys (token 0) are masked."""

    layer_class = ReferenceEncoderLayer

    def forward(self, tokens: Any) -> "torch.Tensor":
        tokens = _as_tokens(tokens, self.embedding.weight.device)
        mask = (tokens == 0)[:, None, :]  # (B, 1, S): padding keys
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, mask=mask)
        return self.norm(x) if self.norm is not None else x


class ReferenceDecoder(_Stack):
    """Embedding, dropout and ``n_layers`` decoder layers (+ a final LayerNorm when pre-norm).
    ``forward(tokens, memory, source_padding=None)`` with source_padding (B, S), True = padding."""

    layer_class = ReferenceDecoderLayer

    def forward(self, tokens: Any, memory: "torch.Tensor", source_padding: Any = None) -> "torch.Tensor":
        tokens = _as_tokens(tokens, self.embedding.weight.device)
        t = tokens.shape[1]
        look_ahead = torch.ones(t, t, dtype=torch.bool, device=tokens.device).triu(1)
        self_mask = look_ahead[None] | (tokens == 0)[:, None, :]  # (B, T, T)
        cross_mask = (
            None if source_padding is None else cast(torch.Tensor, _as_mask(source_padding, tokens.device))[:, None, :]
        )
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, memory, self_mask=self_mask, cross_mask=cross_mask)
        return self.norm(x) if self.norm is not None else x


class _OutputProjection(nn.Module):
    """``y W^T + b``; ``weight`` is None when tied to the decoder embedding."""

    def __init__(self, d_model: int, vocab_size: int, tied: bool) -> None:
        super().__init__()
        self.weight = None if tied else nn.Parameter(torch.empty(vocab_size, d_model))
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, y: "torch.Tensor", tied_weight: Optional["torch.Tensor"] = None) -> "torch.Tensor":
        # with a tied output the caller passes tied_weight (project does)
        return F.linear(y, cast(torch.Tensor, self.weight if self.weight is not None else tied_weight), self.bias)


class ReferenceTransformer(nn.Module):
    """The encoder-decoder Transformer in PyTorch, mirroring :class:`transformer_cpp.Transformer`.

    ``forward(src, tgt_in) -> logits (B, T, tgt_vocab_size)``; ``loss(logits, tgt_out,
    label_smoothing=0.0)`` is the cross-entropy averaged over non-padding targets. Build it with
    :func:`build_reference`.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        super().__init__()
        unknown = set(config) - set(_DEFAULTS) - set(_FIXED) - {"src_vocab_size", "tgt_vocab_size"}
        if unknown:
            raise ValueError(f"build_reference: unknown config keys {sorted(unknown)}")
        for key, value in _FIXED.items():
            if config.get(key, value) != value and not (
                key.endswith("_layers") and config[key] == config.get("n_layers")
            ):
                raise ValueError(
                    f"build_reference: {key}={config[key]!r} is not mirrored by the PyTorch reference (only "
                    f"{value!r}); compare such a model with transformers' MarianMTModel"
                )
        c = dict(_DEFAULTS)
        c.update({k: v for k, v in config.items() if k not in _FIXED})
        if "src_vocab_size" not in c or "tgt_vocab_size" not in c:
            raise ValueError("build_reference: the config needs src_vocab_size and tgt_vocab_size")
        self.config = c
        common = dict(
            d_model=c["d_model"],
            n_layers=c["n_layers"],
            n_heads=c["n_heads"],
            d_ff=c["d_ff"],
            dropout=c["dropout"],
            max_length=c["max_length"],
            layout=c["layout"],
            pre_norm=c["pre_norm"],
            eps=c["layer_norm_eps"],
        )
        self.encoder = ReferenceEncoder(c["src_vocab_size"], **common, attention=c["encoder_attention"])
        self.decoder = ReferenceDecoder(c["tgt_vocab_size"], **common, attention=c["decoder_attention"])
        self.output = _OutputProjection(c["d_model"], c["tgt_vocab_size"], bool(c["share_embeddings"]))

    def forward(self, src: Any, tgt_in: Any) -> "torch.Tensor":
        device = self.output.bias.device
        src = _as_tokens(src, device)
        tgt_in = _as_tokens(tgt_in, device)
        if src.shape[0] != tgt_in.shape[0]:
            raise ValueError(
                f"ReferenceTransformer: src has batch size {src.shape[0]} but tgt_in has {tgt_in.shape[0]}"
            )
        memory = self.encoder(src)
        y = self.decoder(tgt_in, memory, source_padding=src == 0)
        return self.project(y)

    def project(self, y: "torch.Tensor") -> "torch.Tensor":
        """Logits from decoder outputs ``y`` (..., d_model), with the tied or own output weight."""
        return cast(torch.Tensor, self.output(y, self.decoder.embedding.weight))

    @staticmethod
    def loss(logits: "torch.Tensor", tgt_out: Any, label_smoothing: float = 0.0) -> "torch.Tensor":
        """Mean cross-entropy over targets that are not padding (0), as the C++ masked loss."""
        tgt = _as_tokens(tgt_out, logits.device)
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=0, label_smoothing=label_smoothing
        )


def _init_like_ours(module: nn.Module, seed: int) -> None:
    """Glorot-uniform weights (each of W_q, W_k, W_v as a square matrix), zero biases, LayerNorm
    weight 1, embeddings N(0, d**-0.5) with the padding row 0 — the C++ initialisation scheme
    (not its numbers, which come from a different generator)."""
    g = torch.Generator().manual_seed(int(seed))

    def glorot(w: "torch.Tensor") -> None:
        a = math.sqrt(6.0 / (w.shape[0] + w.shape[1]))
        w.copy_(torch.rand(w.shape, generator=g, dtype=torch.float64).mul_(2 * a).sub_(a))

    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, ReferenceMultiHeadAttention):
                for part in m.in_proj_weight.chunk(3, dim=0):
                    glorot(part)
                m.in_proj_bias.zero_()
            elif isinstance(m, nn.Linear):
                glorot(m.weight)
                m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                d = m.weight.shape[1]
                m.weight.copy_(torch.randn(m.weight.shape, generator=g, dtype=torch.float64) / math.sqrt(d))
                m.weight[0].zero_()
            elif isinstance(m, _OutputProjection):
                if m.weight is not None:
                    glorot(m.weight)
                m.bias.zero_()


def build_reference(config: Mapping[str, Any], dtype: Any = None) -> ReferenceTransformer:
    """A :class:`ReferenceTransformer` for a ``Transformer.config`` dict.

    ``dtype`` (``"float32"``/``"float64"``) overrides ``config["dtype"]`` (default float32). The
    weights are initialised like the C++ model's (same scheme, seeded by ``config["seed"]``); use
    :func:`copy_weights_to_reference` to make them equal to a given model's.
    """
    ref = ReferenceTransformer(config)
    _init_like_ours(ref, ref.config["seed"])
    return ref.to(torch_dtype(dtype if dtype is not None else ref.config["dtype"]))


# --- name mapping ------------------------------------------------------------------------------------


def _reference_slot(ref: nn.Module, name: str, params: Dict[str, "torch.nn.Parameter"]) -> Tuple[str, Optional[slice]]:
    """(torch parameter name, row slice or None) holding OUR parameter ``name``."""
    parts = name.split(".")
    if len(parts) >= 2 and parts[-2] in _QKV and parts[-1] in ("weight", "bias"):
        prefix = ".".join(parts[:-2])
        packed = f"{prefix}.in_proj_{parts[-1]}" if prefix else f"in_proj_{parts[-1]}"
        if packed in params:
            d = params[packed].shape[0] // 3
            i = _QKV[parts[-2]]
            return packed, slice(i * d, (i + 1) * d)
    if name in params:
        return name, None
    raise KeyError(
        f"copy_weights_to_reference: our parameter {name!r} has no counterpart in "
        f"{type(ref).__name__}; is it the matching reference class and configuration?"
    )


def _our_values(model: Any) -> Dict[str, np.ndarray]:
    if isinstance(model, Mapping):
        items = model.items()
    elif hasattr(model, "parameters"):
        items = model.parameters().items()
    else:
        raise TypeError(
            f"copy_weights_to_reference: expected one of our models or layers, or a mapping "
            f"name -> array, got {type(model).__name__}"
        )
    return {name: np.asarray(getattr(p, "value", p)) for name, p in items}


def copy_weights_to_reference(model: Any, ref: nn.Module) -> None:
    """Copy every parameter of ``model`` (one of our models/layers, or a mapping ``name -> array``
    or ``name -> Parameter``) into ``ref``, converting to ``ref``'s dtype.

    Raises ``KeyError`` for a name with no counterpart, ``ValueError`` for a shape mismatch or when
    some reference parameter was not covered.
    """
    params = dict(ref.named_parameters())
    covered = {n: torch.zeros(p.shape, dtype=torch.bool) for n, p in params.items()}
    with torch.no_grad():
        for name, value in _our_values(model).items():
            target, rows = _reference_slot(ref, name, params)
            dest = params[target] if rows is None else params[target][rows]
            if tuple(dest.shape) != value.shape:
                raise ValueError(
                    f"copy_weights_to_reference: {name} has shape {value.shape} but the reference's "
                    f"{target} slot has {tuple(dest.shape)}"
                )
            dest.copy_(torch.from_numpy(np.ascontiguousarray(value)).to(dest.dtype))
            if rows is None:
                covered[target][...] = True
            else:
                covered[target][rows] = True
    missing = [n for n, c in covered.items() if not bool(c.all())]
    if missing:
        raise ValueError(f"copy_weights_to_reference: reference parameters {missing} were not covered by the model")


def reference_gradients(ref: nn.Module) -> Dict[str, np.ndarray]:
    """``name -> gradient`` (float64 NumPy copies) of every reference parameter, in OUR naming:
    packed ``in_proj_weight``/``in_proj_bias`` gradients are split into ``query``, ``key`` and
    ``value``. Parameters without a gradient give zeros."""
    out: Dict[str, np.ndarray] = {}
    for name, p in ref.named_parameters():
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        g = grad.detach().to("cpu", torch.float64).numpy().copy()
        head, _, leaf = name.rpartition(".")
        if leaf in ("in_proj_weight", "in_proj_bias"):
            kind = leaf[len("in_proj_") :]
            d = g.shape[0] // 3
            for part, i in _QKV.items():
                key = f"{head}.{part}.{kind}" if head else f"{part}.{kind}"
                out[key] = g[i * d : (i + 1) * d]
        else:
            out[name] = g
    return out


# --- decoding ----------------------------------------------------------------------------------------


def tutorial_greedy_decode(
    ref: ReferenceTransformer, src: Any, start_id: int, end_id: int, max_length: int
) -> np.ndarray:
    """Greedy decoding with the reference as the PyTorch tutorial does it: the source is encoded
    once, then at every step the whole decoder re-runs on the growing prefix and its last
    position is projected (no key/value cache, no gradients; eval mode is the caller's to set).
    The loop is :func:`transformer_cpp.translate.greedy_reference`: (B, L) int64 ids after the
    start token, up to and including the end token, then 0; the padding id 0 is never chosen."""
    with torch.no_grad():
        src_t = _as_tokens(src, ref.output.bias.device)
        memory = ref.encoder(src_t)
        source_padding = src_t == 0

        def next_logits(prefix: np.ndarray) -> np.ndarray:
            y = ref.decoder(torch.from_numpy(prefix), memory, source_padding=source_padding)
            return ref.project(y[:, -1]).numpy()

        return greedy_reference(next_logits, int(src_t.shape[0]), start_id, end_id, max_length)
