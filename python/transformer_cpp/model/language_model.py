"""The decoder-only language model, a thin Python class over the C++ model."""

from __future__ import annotations

import inspect
from typing import Any, Optional, Tuple, cast

import numpy as np

from .. import _core
from .._delegated import SettableDelegated
from .._checks import flag as _flag
from ..config import LM_FIELDS, describe_fields, keyword_parameters
from ..layers import core_class
from .base import CoreModel

__all__ = ["LanguageModel"]


class LanguageModel(CoreModel):
    """The decoder-only (GPT-style) language model with its C++ forward and backward passes.

    Token embedding times sqrt(d_model) plus sinusoidal positions, ``n_layers`` blocks of causal
    self-attention and feed-forward network with residual connections (pre-norm by default, as
    GPT-2, with a final layer normalisation; post-norm as the paper with ``pre_norm=False``), and
    an output projection to the vocabulary (the token embedding itself with ``share_embeddings``).
    Token 0 is padding: a label 0 is not scored.

    ``forward(tokens)`` maps int ids (B, T) to logits (B, T, vocab_size), position t predicting
    the token after it; ``train_step(tokens)`` takes (B, T+1) ids, scores ``tokens[:, 1:]`` given
    ``tokens[:, :-1]`` (mean cross-entropy in nats), backpropagates and takes one Adam step, in
    one C++ call; ``evaluate_loss`` does the same without the update. ``start_generation`` /
    ``generation_step`` run one step per token for sampling (softmax attention: a key/value cache;
    linear attention: its RNN state, constant time per token). ``attention="lsh"`` is Reformer's
    LSH attention (rotations drawn from the update count, so reproducible between updates) and
    ``reversible=True`` makes the blocks a reversible residual stack (pre-norm; the activations of
    one block are stored whatever the depth); neither has a cached step: generation runs
    :meth:`forward` over the window.

    ``attention="relative"`` is Transformer-XL: no absolute positions are added to the embedding,
    each block's attention encodes the distance between query and key, and with
    ``memory_length`` M > 0 each block also attends to its own inputs at the M positions before
    the segment, kept from the previous forward (a stop-gradient memory). Consecutive calls must
    then feed consecutive segments of the same texts; :meth:`reset_memory` starts afresh, and
    :attr:`memory_length` may be set to any length for evaluation.

    Args:
        {args}
        dtype: ``"float32"`` (training) or ``"float64"`` (gradient checks).
    """

    def __init__(self, vocab_size: int, *, dtype: Any = "float32", **config: Any) -> None:
        architecture = _core.LanguageModelConfig(vocab_size=vocab_size, **config)
        core = core_class("LanguageModel", dtype)
        self.dtype = np.dtype(dtype).name
        self._core = core(architecture)

    def forward(self, tokens: np.ndarray, training: bool = False) -> np.ndarray:
        """Logits (B, T, vocab_size) for ids (B, T)."""
        return cast(np.ndarray, self._core.forward(tokens, _flag("LanguageModel.forward", "training", training)))

    __call__ = forward

    def train_step(self, tokens: np.ndarray) -> float:
        """One step on ids (B, T+1): the mean cross-entropy (nats per token) before the update.
        Raises :class:`NonFiniteError` (nothing updated) when the loss or the update is not finite."""
        loss, _ = self._core.train_step(tokens)
        return float(loss)

    def compute_gradients(self, tokens: np.ndarray, training: bool = True) -> float:
        """The loss of :meth:`train_step` and its gradients (in :meth:`parameters`' ``.grad``), no update."""
        loss, _ = self._core.compute_gradients(tokens, _flag("LanguageModel.compute_gradients", "training", training))
        return float(loss)

    def apply_gradients(self) -> None:
        """The update of :meth:`train_step` from the gradients in :meth:`parameters`' ``.grad``:
        clipping, one Adam step, the gradients zeroed; refused (nothing changed) as it refuses."""
        self._core.apply_gradients()

    def evaluate_loss(self, tokens: np.ndarray) -> Tuple[float, int]:
        """``(mean cross-entropy in nats, labels scored)`` of ``tokens[:, 1:]`` given the tokens
        before, in inference mode."""
        loss, count = self._core.evaluate_loss(tokens)
        return float(loss), int(count)

    memory_length = SettableDelegated(
        "_core",
        "Relative attention: positions of the preceding segments each block attends to (settable "
        "to any length, longer than in training too, or 0; setting it empties the memory).",
    )

    @property
    def clamp_len(self) -> Optional[int]:
        """Relative attention: distances beyond this many positions are encoded as this one (None,
        the default: no clamp). Transformer-XL's ``clamp_len``: set it to the longest distance seen
        in training (``seq_len + memory_length - 1``) to evaluate with a longer memory whose farthest
        positions then meet only distances the model has learnt."""
        value = self._core.clamp_len
        return None if value is None else int(value)

    @clamp_len.setter
    def clamp_len(self, value: Optional[int]) -> None:
        self._core.clamp_len = value

    @property
    def memory_held(self) -> int:
        """Positions the segment memory holds now (at most :attr:`memory_length`)."""
        return int(self._core.memory_held)

    def reset_memory(self) -> None:
        """Empty the segment memory: the next segment starts a new text."""
        self._core.reset_memory()

    @property
    def memory_update(self) -> bool:
        """True (default): each forward moves the memory on. False: forwards attend to the memory
        and leave it unchanged (a constant input, as for a gradient check)."""
        return bool(self._core.memory_update)

    @memory_update.setter
    def memory_update(self, value: bool) -> None:
        self._core.memory_update = _flag("LanguageModel.memory_update", "value", value)

    @property
    def has_cached_step(self) -> bool:
        """Whether :meth:`generation_step` can run: softmax, relative or linear attention in
        ordinary blocks (LSH attention and reversible blocks have no cached step)."""
        return bool(self._core.has_cached_step)

    def start_generation(self, rows: int, capacity: int) -> None:
        """Empty generation state (key/value caches, or linear attention's RNN state) for ``rows``
        sequences of up to ``capacity`` positions."""
        self._core.start_generation(rows, capacity)

    def generation_step(self, tokens: np.ndarray) -> np.ndarray:
        """Feed one id per sequence at the next position: logits (rows, vocab_size) of the next token."""
        return cast(np.ndarray, self._core.generation_step(tokens))

    def configure_optimizer(self, **settings: Any) -> None:
        """Adam and the learning-rate schedule, as :meth:`Transformer.configure_optimizer`
        (``label_smoothing`` is not used: the loss is the plain cross-entropy)."""
        self._core.configure_optimizer(_core.OptimizerConfig(**settings))

    def __repr__(self) -> str:
        c = self.config
        return (
            f"LanguageModel(vocab_size={c['vocab_size']}, d_model={c['d_model']}, n_layers={c['n_layers']}, "
            f"n_heads={c['n_heads']}, d_ff={c['d_ff']}, attention={c['attention']!r}, dtype={self.dtype!r}; "
            f"{self.num_parameters():,} parameters)"
        )


def _derive_lm_signature() -> None:
    fields = [f for f in LM_FIELDS if f.name != "vocab_size"]
    init: Any = LanguageModel.__init__
    init.__signature__ = inspect.Signature(
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter("vocab_size", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="int"),
            *keyword_parameters(fields),
            inspect.Parameter("dtype", inspect.Parameter.KEYWORD_ONLY, default="float32", annotation="Any"),
        ],
        return_annotation="None",
    )
    LanguageModel.__doc__ = (LanguageModel.__doc__ or "").replace("        {args}", describe_fields(LM_FIELDS, " " * 8))


_derive_lm_signature()
