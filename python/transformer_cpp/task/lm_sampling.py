"""Sampling from a language model: one character at a time, seeded, with a temperature, top-k and top-p,
through the model's cached step where it has one (softmax attention's key/value caches, linear
attention's recurrent state, relative attention's sliding memory)."""

from __future__ import annotations

import math
from typing import List, Optional

import numpy as np

from ..config import attention_kind
from ..data.lm_text import CharVocabulary
from ..kernels import sampling_distribution
from ..model import LanguageModel

__all__ = ["generate", "sample_next"]


def sample_next(
    logits: np.ndarray, temperature: float, top_k: int, rng: np.random.Generator, top_p: float = 1.0
) -> int:
    """One id from logits (V,): the most likely with ``temperature == 0``, else drawn from
    softmax(logits / temperature) over the ``top_k`` most likely (all when 0), then over the
    fewest of those whose probability reaches ``top_p`` (the translation sampler's filter,
    :func:`~transformer_cpp.kernels.sampling_distribution`). The padding id 0 is never drawn."""
    z = np.array(logits, dtype=np.float64)
    if temperature == 0:
        z[0] = -np.inf
        return int(np.argmax(z))
    p = sampling_distribution(z, top_k if top_k > 0 else len(z), top_p, temperature)
    return int(rng.choice(len(p), p=p))


def generate(
    model: LanguageModel,
    vocabulary: CharVocabulary,
    prompt: str,
    max_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    context: Optional[int] = None,
) -> str:
    """``prompt`` continued by ``max_tokens`` characters sampled from the model (the continuation
    only is returned). The same seed gives the same text. An empty prompt starts after a newline
    (the start of a line). ``top_p`` in (0, 1] keeps, of the ``top_k``, the fewest most likely
    characters whose probability reaches it (nucleus sampling).

    Each character sees at most ``context`` characters (default the model's ``max_len``; the
    task passes the training ``seq_len``): positions beyond those a model was trained on are
    positions it never learnt. Each character costs one step: softmax attention appends to
    key/value caches, linear attention advances its recurrent state (constant time per
    character); when the context is full the state starts again from its last half. Relative
    attention (Transformer-XL) keeps the keys and values of the last ``context`` - 1 positions
    and slides on. A model without a step (LSH attention, reversible blocks) runs its forward over
    the last ``context`` characters for each character: the same function as in training, at the
    cost of a whole window per character."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise ValueError(f"generate: max_tokens must be an integer >= 0, got {max_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
        raise ValueError(f"generate: temperature must be a finite number >= 0, got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"generate: top_k must be an integer >= 0 (0: every token), got {top_k!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"generate: top_p must be a number in (0, 1], got {top_p!r}")
    window = int(model.config["max_len"]) if context is None else context
    if isinstance(window, bool) or not isinstance(window, int) or window < 2:
        raise ValueError(f"generate: context must be an integer >= 2, got {context!r}")
    seq = [int(i) for i in vocabulary.encode(prompt if prompt else "\n")]
    rng = np.random.default_rng(seed)
    out: List[int] = []
    if max_tokens == 0:
        return ""
    if not model.has_cached_step:
        for _ in range(max_tokens):
            logits = model.forward(np.array([seq[-window:]], dtype=np.int64))
            nxt = sample_next(logits[0, -1], float(temperature), top_k, rng, float(top_p))
            out.append(nxt)
            seq.append(nxt)
        return vocabulary.decode(out)

    def restart(piece: List[int]) -> np.ndarray:
        """Fresh caches fed with ``piece``: the logits after its last id."""
        model.start_generation(1, window)
        last = np.empty((1, 0))
        for i in piece:
            last = model.generation_step(np.array([i], dtype=np.int64))
        return last

    keep = window // 2
    logits = restart(seq[-window:])
    fed = min(len(seq), window)
    while True:
        nxt = sample_next(logits[0], float(temperature), top_k, rng, float(top_p))
        out.append(nxt)
        seq.append(nxt)
        if len(out) == max_tokens:
            break
        # the context is full: start again from its last half (relative attention's window slides)
        if fed >= window and not attention_kind(model.config["attention"]).memory:
            logits = restart(seq[-keep:])
            fed = keep
        else:
            logits = model.generation_step(np.array([nxt], dtype=np.int64))
            fed += 1
    return vocabulary.decode(out)
