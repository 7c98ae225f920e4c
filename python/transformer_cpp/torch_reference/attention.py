"""The attention of the PyTorch reference (:mod:`transformer_cpp.torch_reference`): softmax
multi-head attention with the packed projection of ``nn.MultiheadAttention``, and linear attention
with the same parameters, causal or with masked keys."""

from __future__ import annotations

from typing import Any, Optional, cast

import numpy as np

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "transformer_cpp.torch_reference needs PyTorch; install it with pip install 'transformer-cpp[torch]'"
    ) from exc


def _as_mask(mask: Any, device: "torch.device") -> Optional["torch.Tensor"]:
    """A boolean tensor, True = blocked (any non-zero value blocks), or None."""
    if mask is None:
        return None
    m = mask if isinstance(mask, torch.Tensor) else torch.as_tensor(np.asarray(mask))
    return (m != 0).to(device)


class ReferenceMultiHeadAttention(nn.Module):
    """Multi-head attention with a packed ``in_proj_weight`` (rows ``[W_q; W_k; W_v]``), like
    ``nn.MultiheadAttention``, and an ``output`` projection; fully blocked query rows give zeros.

    ``forward(x, memory=None, mask=None)``: x (B, Tq, d); memory (B, Tk, d) for cross-attention;
    mask broadcastable to (B, Tq, Tk), True = blocked.
    """

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"ReferenceMultiHeadAttention: d_model {d_model} is not divisible by n_heads {n_heads}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * d_model, d_model))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * d_model))
        self.output = nn.Linear(d_model, d_model)

    def _heads(self, t: "torch.Tensor") -> "torch.Tensor":  # (B, T, d) -> (B, H, T, d_k)
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, self.d_k).transpose(1, 2)

    def forward(self, x: "torch.Tensor", memory: Optional["torch.Tensor"] = None, mask: Any = None) -> "torch.Tensor":
        d = self.d_model
        if memory is None:
            q, k, v = torch.split(F.linear(x, self.in_proj_weight, self.in_proj_bias), d, dim=-1)
        else:
            q = F.linear(x, self.in_proj_weight[:d], self.in_proj_bias[:d])
            k, v = torch.split(F.linear(memory, self.in_proj_weight[d:], self.in_proj_bias[d:]), d, dim=-1)
        b, tq, tk = x.shape[0], x.shape[1], k.shape[1]
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        blocked = _as_mask(mask, x.device)
        if blocked is None:
            ctx = F.scaled_dot_product_attention(q, k, v)
        else:
            blocked = blocked.expand(b, tq, tk)
            dead = blocked.all(dim=-1, keepdim=True)  # (B, Tq, 1): queries with nothing to attend to
            # SDPA gives NaN for a row with no allowed key: let such rows attend freely, then zero them
            allowed = ~(blocked & ~dead)
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed.unsqueeze(1))
            ctx = ctx.masked_fill(dead.unsqueeze(1), 0.0)
        ctx = ctx.transpose(1, 2).reshape(b, tq, d)
        return cast(torch.Tensor, self.output(ctx))


class ReferenceLinearAttention(ReferenceMultiHeadAttention):
    """Multi-head linear attention (Katharopoulos et al. 2020) with the parameters of
    :class:`ReferenceMultiHeadAttention`: with ``phi(x) = elu(x) + 1``, position ``i`` gets
    ``phi(q_i) S_i / (phi(q_i) . z_i + eps)``, ``S_i = sum_j phi(k_j)^T v_j``, ``z_i = sum_j phi(k_j)``
    over the keys ``j <= i`` (``causal``) or over every key that is not padding.

    ``forward(x, mask=None)``: causal, the mask is not read (a decoder's padding keys come after
    every position that has a loss); otherwise ``mask`` (B, 1, T), True = a padded key, as the
    encoder's.
    """

    def __init__(self, d_model: int, n_heads: int, causal: bool = True) -> None:
        super().__init__(d_model, n_heads)
        self.causal = causal

    def forward(self, x: "torch.Tensor", memory: Optional["torch.Tensor"] = None, mask: Any = None) -> "torch.Tensor":
        if memory is not None:
            raise ValueError("ReferenceLinearAttention: self-attention only")
        d = self.d_model
        q, k, v = (self._heads(t) for t in torch.split(F.linear(x, self.in_proj_weight, self.in_proj_bias), d, dim=-1))
        fq, fk = F.elu(q) + 1.0, F.elu(k) + 1.0  # (B, H, T, d_k)
        if self.causal:
            s = torch.einsum("bhtd,bhte->bhtde", fk, v).cumsum(dim=2)  # S_i for every i
            z = fk.cumsum(dim=2)  # z_i
            num = torch.einsum("bhtd,bhtde->bhte", fq, s)
        else:
            padded = _as_mask(mask, x.device)
            if padded is not None:  # (B, 1, T): no query sees a padded key
                fk = fk.masked_fill(padded[:, 0, None, :, None], 0.0)
            s = torch.einsum("bhtd,bhte->bhde", fk, v)
            z = fk.sum(dim=2, keepdim=True)
            num = torch.einsum("bhtd,bhde->bhte", fq, s)
        den = (fq * z).sum(dim=-1, keepdim=True) + LINEAR_ATTENTION_EPS
        ctx = (num / den).transpose(1, 2).reshape(x.shape[0], x.shape[1], d)
        return cast(torch.Tensor, self.output(ctx))


#: The denominator's eps of the core's linear attention.
LINEAR_ATTENTION_EPS = 1e-6


def self_attention_reference(kind: str, d_model: int, n_heads: int, causal: bool) -> nn.Module:
    """The reference of a self-attention of ``kind`` ("softmax" or "linear")."""
    if kind == "linear":
        return ReferenceLinearAttention(d_model, n_heads, causal)
    if kind == "softmax":
        return ReferenceMultiHeadAttention(d_model, n_heads)
    raise ValueError(f"torch_reference: no reference of {kind!r} attention in a translator")
