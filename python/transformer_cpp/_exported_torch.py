"""A Transformer exported by transformer-cpp, in plain PyTorch.

``transformer-cpp export --to torch`` copies this file into the export directory as
``transformer_torch.py``, next to:

    config.json             the architecture, the special token ids and where the model came from
    model.safetensors       the weights: this module's state dict (transformer-cpp's parameter names)
    source_tokenizer.json   the subword vocabularies, as Hugging Face ``tokenizers`` files
    target_tokenizer.json

It needs PyTorch, ``safetensors`` (to read the weights) and ``tokenizers`` (for the text helpers),
not transformer-cpp. From the export directory::

    import transformer_torch as tt

    model = tt.load(".")                                  # a torch.nn.Module in eval mode
    src_tok, tgt_tok = tt.load_tokenizers(".")
    tt.translate(model, src_tok, tgt_tok, ["you should pay for it."])
    logits = model(src_ids, tgt_in_ids)                   # (B, T, tgt_vocab_size)

What it computes is what the transformer-cpp model computes (post-norm by default, or pre-norm
with a final LayerNorm after each stack, as ``config.json`` says):

* input layer: ``embedding(tokens) * sqrt(d_model) + PE[:T]``, then dropout; ``PE`` is the
  sinusoidal table (``"interleaved"``: ``PE[pos, 2i] = sin(pos / 10000**(2i/d))``, ``PE[pos, 2i+1]``
  the cosine of the same angle; ``"concatenated"``: all sines, then all cosines), for any length;
* attention: ``softmax(Q K^T / sqrt(d_k) + mask) V`` per head, masks True = blocked; a query
  whose keys are all blocked gets zeros;
* sub-layers ``x = LN(x + dropout(sublayer(x)))``; feed-forward ``linear2(dropout(relu(linear1(x))))``;
* token 0 is padding: padding keys are blocked in every attention, and the decoder's
  self-attention is also blocked ahead of each position;
* logits ``y W^T + b``, with ``W`` the decoder embedding when the embeddings are tied.

Greedy decoding (:func:`greedy_decode`) never outputs the padding id and stops a sentence at its
end token. Input text: transformer-cpp cleans each sentence before encoding it (whitespace runs
become one space, and two sentences typed without a space, as in ``"ofendas.Tom"``, get one);
:func:`translate` does the whitespace part only, so ordinary sentences give the same tokens.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import torch
import torch.nn.functional as F
from torch import nn

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILES = ("source_tokenizer.json", "target_tokenizer.json")


def positional_encoding(length: int, depth: int, layout: str = "interleaved") -> torch.Tensor:
    """The sinusoidal table ``(length, depth)`` in float64."""
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    if layout == "interleaved":
        cols = torch.arange(0, depth, 2, dtype=torch.float64)
        angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), cols / depth)
        table = torch.zeros(length, depth, dtype=torch.float64)
        table[:, 0::2] = torch.sin(angle)
        table[:, 1::2] = torch.cos(angle[:, : depth // 2])
        return table
    if layout == "concatenated":
        half = depth // 2
        freqs = torch.arange(half, dtype=torch.float64)
        angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), freqs / half)
        return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)
    raise ValueError(f"positional_encoding: unknown layout {layout!r}")


class MultiHeadAttention(nn.Module):
    """Query, key, value and output projections around scaled dot-product attention."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"MultiHeadAttention: d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.output = nn.Linear(d_model, d_model)

    def _split(self, t: torch.Tensor) -> torch.Tensor:  # (B, T, d) -> (B, H, T, d_k)
        return t.view(t.shape[0], t.shape[1], self.n_heads, self.d_k).transpose(1, 2)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
        """x (B, Tq, d) attends to memory (B, Tk, d); blocked (B, Tq, Tk), True = blocked."""
        q, k, v = self._split(self.query(x)), self._split(self.key(memory)), self._split(self.value(memory))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, H, Tq, Tk)
        blocked = blocked[:, None]  # (B, 1, Tq, Tk)
        weights = torch.softmax(scores.masked_fill(blocked, -math.inf), dim=-1)
        weights = torch.where(blocked.all(dim=-1, keepdim=True), torch.zeros_like(weights), weights)
        context = (weights @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)  # (B, Tq, d)
        return cast(torch.Tensor, self.output(context))


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, self.linear2(self.dropout(torch.relu(self.linear1(x)))))


def residual(x: torch.Tensor, sublayer: Any, norm: nn.LayerNorm, dropout: nn.Dropout, pre_norm: bool) -> torch.Tensor:
    """One sub-layer with its residual connection: ``LN(x + dropout(sublayer(x)))`` (post-norm, the
    paper) or ``x + dropout(sublayer(LN(x)))`` (pre-norm)."""
    if pre_norm:
        return cast(torch.Tensor, x + dropout(sublayer(norm(x))))
    return cast(torch.Tensor, norm(x + dropout(sublayer(x))))


class SelfAttentionLayer(nn.Module):
    """What both layers start with: the self-attention sub-layer, its LayerNorm and dropout."""

    def __init__(self, self_attention: nn.Module, d_model: int, dropout: float, pre_norm: bool, eps: float) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.self_attention = self_attention
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.dropout1 = nn.Dropout(dropout)


class EncoderLayer(SelfAttentionLayer):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, pre_norm: bool, eps: float) -> None:
        super().__init__(MultiHeadAttention(d_model, n_heads), d_model, dropout, pre_norm, eps)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, blocked: torch.Tensor) -> torch.Tensor:
        x = residual(x, lambda h: self.self_attention(h, h, blocked), self.norm1, self.dropout1, self.pre_norm)
        return residual(x, self.feed_forward, self.norm2, self.dropout2, self.pre_norm)


class DecoderLayer(SelfAttentionLayer):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, pre_norm: bool, eps: float) -> None:
        super().__init__(MultiHeadAttention(d_model, n_heads), d_model, dropout, pre_norm, eps)
        self.cross_attention = MultiHeadAttention(d_model, n_heads)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.norm3 = nn.LayerNorm(d_model, eps=eps)
        self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(
        self, x: torch.Tensor, memory: torch.Tensor, self_blocked: torch.Tensor, cross_blocked: torch.Tensor
    ) -> torch.Tensor:
        x = residual(x, lambda h: self.self_attention(h, h, self_blocked), self.norm1, self.dropout1, self.pre_norm)
        x = residual(
            x, lambda h: self.cross_attention(h, memory, cross_blocked), self.norm2, self.dropout2, self.pre_norm
        )
        return residual(x, self.feed_forward, self.norm3, self.dropout3, self.pre_norm)


class Stack(nn.Module):
    """Embedding, positional encoding, dropout, the layers and (pre-norm) a final LayerNorm."""

    def __init__(self, layer: Any, vocab_size: int, c: Dict[str, Any]) -> None:
        super().__init__()
        self.d_model, self.layout = c["d_model"], c["layout"]
        self.embedding = nn.Embedding(vocab_size, c["d_model"])
        self.dropout = nn.Dropout(c["dropout"])
        self.layers = nn.ModuleList(
            layer(c["d_model"], c["n_heads"], c["d_ff"], c["dropout"], c["pre_norm"], c["layer_norm_eps"])
            for _ in range(c["n_layers"])
        )
        self.norm = nn.LayerNorm(c["d_model"], eps=c["layer_norm_eps"]) if c["pre_norm"] else None
        self._table = torch.zeros(0, c["d_model"], dtype=torch.float64)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        if self._table.shape[0] < t:  # the table is a cache: any length can be encoded
            self._table = positional_encoding(max(t, 2 * self._table.shape[0], 64), self.d_model, self.layout)
        weight = self.embedding.weight
        pe = self._table[:t].to(device=weight.device, dtype=weight.dtype)
        return cast(torch.Tensor, self.dropout(self.embedding(tokens) * math.sqrt(self.d_model) + pe))

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) if self.norm is not None else x


class Encoder(Stack):
    def __init__(self, c: Dict[str, Any]) -> None:
        super().__init__(EncoderLayer, c["src_vocab_size"], c)

    def forward(self, src: torch.Tensor) -> torch.Tensor:
        """src (B, S) ids -> memory (B, S, d)."""
        blocked = (src == 0)[:, None, :].expand(-1, src.shape[1], -1)  # padding keys
        x = self.embed(src)
        for layer in self.layers:
            x = layer(x, blocked)
        return self.finish(x)


class Decoder(Stack):
    def __init__(self, c: Dict[str, Any]) -> None:
        super().__init__(DecoderLayer, c["tgt_vocab_size"], c)

    def forward(self, tgt: torch.Tensor, memory: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        """tgt (B, T) ids, memory (B, S, d) of src (B, S) -> (B, T, d)."""
        t = tgt.shape[1]
        ahead = torch.ones(t, t, dtype=torch.bool, device=tgt.device).triu(1)
        self_blocked = ahead[None] | (tgt == 0)[:, None, :]  # (B, T, T)
        cross_blocked = (src == 0)[:, None, :].expand(-1, t, -1)  # (B, T, S)
        x = self.embed(tgt)
        for layer in self.layers:
            x = layer(x, memory, self_blocked, cross_blocked)
        return self.finish(x)


class TiedOutput(nn.Module):
    """The output layer when its weight is the decoder embedding: only the bias is its own."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab_size))


class Transformer(nn.Module):
    """The encoder-decoder Transformer. ``forward(src, tgt_in)`` takes int64 ids ``(B, S)`` and
    ``(B, T)``, 0-padded, and returns the logits ``(B, T, tgt_vocab_size)``."""

    def __init__(self, config: Dict[str, Any]) -> None:
        super().__init__()
        self.config = dict(config)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        d, v = config["d_model"], config["tgt_vocab_size"]
        self.output = TiedOutput(v) if config["share_embeddings"] else nn.Linear(d, v)

    def project(self, y: torch.Tensor) -> torch.Tensor:
        if isinstance(self.output, TiedOutput):
            return F.linear(y, self.decoder.embedding.weight, self.output.bias)
        return cast(torch.Tensor, self.output(y))

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.project(self.decoder(tgt_in, self.encoder(src), src))


# ------------------------------------------------------------------------------------ loading


def read_config(directory: str) -> Dict[str, Any]:
    with open(os.path.join(directory, CONFIG_FILE), encoding="utf-8") as f:
        return cast(Dict[str, Any], json.load(f))


def load(directory: str, device: str = "cpu") -> Transformer:
    """The model of an export directory, with its weights, in eval mode."""
    from safetensors.torch import load_file

    config = read_config(directory)
    model = Transformer(config["model"])
    state = load_file(os.path.join(directory, WEIGHTS_FILE), device=device)
    model.to(device=device, dtype=next(iter(state.values())).dtype)
    model.load_state_dict(state, strict=True)
    return model.eval()


def load_tokenizers(directory: str) -> Tuple[Any, Any]:
    """The source and target ``tokenizers.Tokenizer`` of an export directory."""
    from tokenizers import Tokenizer

    loaded = []
    for name in TOKENIZER_FILES:
        tok = Tokenizer.from_file(os.path.join(directory, name))
        if hasattr(tok, "encode_special_tokens"):
            tok.encode_special_tokens = True  # text that spells "<end>" is text, not the end token
        loaded.append(tok)
    return loaded[0], loaded[1]


# ------------------------------------------------------------------------------------ text and decoding


def special_ids(model: Transformer) -> Dict[str, int]:
    return cast(Dict[str, int], model.config.get("special_ids", {"pad": 0, "start": 1, "end": 2, "unk": 3}))


def encode(tokenizer: Any, text: str, start_id: int, end_id: int) -> List[int]:
    """``[start, ..., end]``: the text is encoded with one leading space, as transformer-cpp does."""
    return [start_id, *tokenizer.encode(" " + text, add_special_tokens=False).ids, end_id]


def decode(tokenizer: Any, ids: Sequence[int], ids_of: Dict[str, int]) -> str:
    """The text of generated ids: up to the end token, without padding, start and unknown tokens."""
    kept = []
    for i in ids:
        if i == ids_of["end"]:
            break
        if i not in (ids_of["pad"], ids_of["start"], ids_of["unk"]):
            kept.append(int(i))
    text = tokenizer.decode(kept, skip_special_tokens=False) if kept else ""
    return text[1:] if text.startswith(" ") else text


@torch.no_grad()
def greedy_decode(model: Transformer, src: torch.Tensor, start_id: int, end_id: int, max_length: int) -> torch.Tensor:
    """Greedy decoding: (B, L) ids after the start token, up to and including the end token, then 0.
    The padding id 0 is never chosen; stops when every sentence has ended or after ``max_length``."""
    memory = model.encoder(src)
    b = src.shape[0]
    ys = torch.full((b, 1), start_id, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    for _ in range(max_length):
        logits = model.project(model.decoder(ys, memory, src)[:, -1])  # (B, V)
        nxt = logits[:, 1:].argmax(dim=-1) + 1
        nxt = torch.where(done, torch.zeros_like(nxt), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == end_id
        if bool(done.all()):
            break
    return ys[:, 1:]


def output_limit(source_tokens: int) -> int:
    """Most tokens generated for a source of this many tokens (start and end included)."""
    return int(1.5 * source_tokens) + 10


def translate(
    model: Transformer,
    src_tokenizer: Any,
    tgt_tokenizer: Any,
    sentences: Sequence[str],
    max_length: Optional[int] = None,
) -> List[str]:
    """Greedy translations of ``sentences`` (one batch)."""
    ids_of = special_ids(model)
    encoded = [encode(src_tokenizer, " ".join(s.split()), ids_of["start"], ids_of["end"]) for s in sentences]
    if not encoded:
        return []
    device = model.output.bias.device
    src = torch.zeros(len(encoded), max(len(e) for e in encoded), dtype=torch.long, device=device)
    for i, e in enumerate(encoded):
        src[i, : len(e)] = torch.tensor(e)
    limits = [output_limit(len(e)) if max_length is None else max_length for e in encoded]
    out = greedy_decode(model, src, ids_of["start"], ids_of["end"], max(limits)).tolist()
    return [decode(tgt_tokenizer, row[:n], ids_of) for row, n in zip(out, limits)]
