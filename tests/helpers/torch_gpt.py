"""The parts of a readable PyTorch GPT, written out op by op over the language model's weights (a
dict of tensors by the model's parameter names), which the language-model tests build their
references of: the sinusoidal positions, the affine maps, layer norm, the feed-forward sub-layer,
the attention heads and the next-token loss. Import it after ``pytest.importorskip("torch")``."""

from __future__ import annotations

from typing import Callable, Dict

import torch

Weights = Dict[str, torch.Tensor]


def sinusoids(length: int, d: int) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(the same angle), in float64."""
    pe = torch.zeros(length, d, dtype=torch.float64)
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    angle = pos / torch.pow(10000.0, torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)[:, : d // 2]
    return pe


def affine(w: Weights, h: torch.Tensor, name: str) -> torch.Tensor:
    """``h @ W.T + b`` with the weight and bias of the linear layer ``name``."""
    return h @ w[name + ".weight"].T + w[name + ".bias"]


def layer_norm(w: Weights, h: torch.Tensor, name: str, eps: float) -> torch.Tensor:
    """Layer norm ``name`` over the last dimension of ``h``."""
    return torch.nn.functional.layer_norm(h, (h.shape[-1],), w[name + ".weight"], w[name + ".bias"], eps)


def feed_forward(w: Weights, h: torch.Tensor, prefix: str) -> torch.Tensor:
    """The feed-forward sub-layer ``prefix`` (``layers.0.feed_forward.``): linear, ReLU, linear."""
    return affine(w, torch.relu(affine(w, h, prefix + "linear1")), prefix + "linear2")


def residual_block(
    w: Weights,
    x: torch.Tensor,
    attention: Callable[[torch.Tensor, str], torch.Tensor],
    prefix: str,
    eps: float,
    pre_norm: bool = True,
) -> torch.Tensor:
    """Block ``prefix`` (``layers.0.``) of the stack on ``x``: ``attention(h, prefix +
    "self_attention.")``, then the feed-forward sub-layer, each with its residual connection and
    layer norm (``norm1``, ``norm2``): pre-norm (the norm of the sub-layer's input) or post-norm
    (the norm of the sum)."""
    norm1, norm2 = prefix + "norm1", prefix + "norm2"
    if pre_norm:
        x = x + attention(layer_norm(w, x, norm1, eps), prefix + "self_attention.")
        return x + feed_forward(w, layer_norm(w, x, norm2, eps), prefix + "feed_forward.")
    x = layer_norm(w, x + attention(x, prefix + "self_attention."), norm1, eps)
    return layer_norm(w, x + feed_forward(w, x, prefix + "feed_forward."), norm2, eps)


def split_heads(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, T, d) -> (B, heads, T, d / heads)."""
    batch, length, d = t.shape
    return t.view(batch, length, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(t: torch.Tensor) -> torch.Tensor:
    """(B, heads, T, d_k) -> (B, T, heads * d_k)."""
    batch, heads, length, dk = t.shape
    return t.transpose(1, 2).reshape(batch, length, heads * dk)


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits`` (B, T, vocabulary) against the ``targets`` (B, T)."""
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
