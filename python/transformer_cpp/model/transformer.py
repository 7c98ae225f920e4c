"""The encoder-decoder Transformer, a thin Python class over the C++ model."""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from .. import _core
from .._checks import flag as _flag
from ..config import MODEL_FIELDS, OPTIMIZER_FIELDS, describe_fields, keyword_parameters
from ..layers import core_class
from .base import CoreModel, NonFiniteError

__all__ = ["DEFAULT_LENGTH_PENALTY", "NonFiniteError", "Transformer"]


#: Beam search's default GNMT length-penalty exponent, for every decoder of the package
#: (``Transformer.beam_search``, ``DecodeOptions``, the command line and the server). 1.0 scored
#: higher validation BLEU than GNMT's 0.6 with the package's recipes (docs/experiments.md).
DEFAULT_LENGTH_PENALTY = 1.0


class Transformer(CoreModel):
    """The Transformer of "Attention Is All You Need" with its C++ forward and backward passes.

    ``forward(src, tgt_in, training=False)`` maps int token ids ``src`` (B, S) and ``tgt_in`` (B, T)
    to float logits (B, T, tgt_vocab_size). Token ``pad_id`` (0 by default) is padding in both. ``backward(dlogits)``
    accumulates every parameter gradient; ``train_step(src, tgt_in, tgt_out)`` does forward, the
    masked cross-entropy, backward and one Adam step in one C++ call and returns
    ``(loss, accuracy)``; ``evaluate`` does the same without the update.

    The architecture is given by keyword (every one but the vocabulary sizes has a default); the
    arguments are the fields of the core's ``TransformerConfig`` (:data:`transformer_cpp.config.MODEL_FIELDS`),
    each checked when the model is made (``TypeError`` for a value of the wrong type, ``ValueError``
    naming the field, the value and what is allowed), then the combinations (``d_model`` divisible
    by ``n_heads``), the precision and the memory the weights need.

    Args:
        {args}
        dtype: ``"float32"`` (training) or ``"float64"`` (gradient checks).
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, *, dtype: Any = "float32", **config: Any) -> None:
        architecture = _core.TransformerConfig(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size, **config)
        core = core_class("Transformer", dtype)
        self.dtype = np.dtype(dtype).name
        # the core checks the rest (precision, memory) before allocating
        self._core = core(architecture)

    # --- the model --------------------------------------------------------------------------
    def forward(self, src: np.ndarray, tgt_in: np.ndarray, training: bool = False) -> np.ndarray:
        """Logits (B, T, tgt_vocab_size) for source ids (B, S) and decoder-input ids (B, T)."""
        return cast(np.ndarray, self._core.forward(src, tgt_in, _flag("Transformer.forward", "training", training)))

    __call__ = forward

    # --- training ---------------------------------------------------------------------------
    def configure_optimizer(self, **settings: Any) -> None:
        """Adam and the schedule ``lr = lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``
        (or a constant ``fixed_lr`` when > 0), optional clipping to a global norm, label smoothing.
        With ``total_steps > warmup`` the rate falls linearly after the warm-up, from its peak
        to 0 at ``total_steps`` (a schedule fitted to the run's length); with a ``fixed_lr``
        (no warm-up) and ``total_steps >= 1`` it falls from ``fixed_lr`` at step 0. Settings left
        out take their defaults.

        The settings are the fields of the core's ``OptimizerConfig``
        (:data:`transformer_cpp.config.OPTIMIZER_FIELDS`); a bad one raises ``ValueError`` naming it,
        its value and what is allowed (the core's check, shared with ``TrainConfig`` and the command
        line), and changes nothing:

        {args}
        """
        self._core.configure_optimizer(_core.OptimizerConfig(**settings))

    def train_step(self, src: np.ndarray, tgt_in: np.ndarray, tgt_out: np.ndarray) -> Tuple[float, float]:
        """zero_grad, forward (training), masked loss, backward, clipping, one Adam step — all in
        C++ with the GIL released. Returns ``(loss, accuracy)`` over non-padding targets.

        Raises :class:`NonFiniteError` (a ``FloatingPointError`` and ``RuntimeError``; the message
        starts ``"Transformer.train_step: non-finite loss"`` when the loss diverged) for
        non-finite weights, loss or gradient norm, or an update that would make a weight
        non-finite: nothing is updated then, the model keeps the weights of its last good step."""
        loss, accuracy = self._core.train_step(src, tgt_in, tgt_out)
        return float(loss), float(accuracy)

    # ---------------------------------------------------------------- data parallelism
    # train_step in two halves around a sum of gradient_buffer() over processes (see distributed.py)

    def compute_gradients(
        self,
        src: np.ndarray,
        tgt_in: np.ndarray,
        tgt_out: np.ndarray,
        grad_scale: float = 1.0,
        accumulate: bool = False,
    ) -> Tuple[float, float]:
        """The first half of :meth:`train_step`: forward, masked loss and backward; the gradients
        times ``grad_scale`` land in :meth:`gradient_buffer` and nothing is updated. Returns
        ``(loss, accuracy)``. ``grad_scale = last_token_count`` turns the mean over this batch's
        tokens into their sum, so that sums over processes divided by the global token count give
        the gradient of the whole batch's mean loss. With ``accumulate`` the gradients are added to
        those in the buffer not yet applied (one update from several batches)."""
        flag = _flag("Transformer.compute_gradients", "accumulate", accumulate)
        loss, accuracy = self._core.compute_gradients(src, tgt_in, tgt_out, grad_scale, flag)
        return float(loss), float(accuracy)

    def gradient_buffer(self) -> np.ndarray:
        """The model's contiguous gradient buffer, a NumPy view (no copy): every parameter's
        gradient in :meth:`parameters` order, then 8 spare values that the caller may use to sum
        its own numbers in the same all-reduce."""
        return cast(np.ndarray, self._core.gradient_buffer())

    def zero_gradient_buffer(self) -> None:
        """Set :meth:`gradient_buffer` to 0, ready for :meth:`apply_gradients`: what a process
        without a share of a batch contributes to the sum."""
        self._core.zero_gradient_buffer()

    def apply_gradients(self, grad_scale: float = 1.0) -> None:
        """The second half of :meth:`train_step` with ``gradient_buffer() * grad_scale`` as the
        gradients: norm (summed in a fixed order, independent of the thread count), clipping and one
        Adam step. Refuses non-finite results as :meth:`train_step` does, changing nothing."""
        self._core.apply_gradients(grad_scale)

    def set_dropout_seed(self, seed: int) -> None:
        """Seed the dropout masks (by default the model's ``seed``); the counter is kept."""
        self._core.set_dropout_seed(seed)

    def weights_fingerprint(self) -> int:
        """A 64-bit fingerprint of every weight's bytes: equal weights give equal fingerprints."""
        return int(self._core.weights_fingerprint())

    def evaluate(self, src: np.ndarray, tgt_in: np.ndarray, tgt_out: np.ndarray) -> Tuple[float, float]:
        """Masked loss and accuracy in inference mode (no dropout, no update)."""
        loss, accuracy = self._core.evaluate(src, tgt_in, tgt_out)
        return float(loss), float(accuracy)

    @property
    def last_token_count(self) -> int:
        """Non-padding target tokens in the last ``train_step``/``evaluate`` batch."""
        return int(self._core.last_token_count)

    def attention_weights(self) -> Dict[str, np.ndarray]:
        """Attention weights of the last forward: layer name -> (B, heads, T_q, T_k).

        A linear self-attention keeps none (its layers are left out). After a forward in which a
        softmax attention ran the tiled kernel (:attr:`attention_impl`) it raises ``RuntimeError``
        naming the layer.
        """
        return dict(self._core.attention_weights())

    @property
    def attention_impl(self) -> str:
        """The kernel of every softmax attention's training forward and backward (the layers'
        self- and cross-attention): ``"auto"`` (the default) runs the tiled kernel from 512 keys on,
        whose memory grows linearly with the length and which keeps no attention weights, and the
        plain kernel below; ``"tiled"`` always tiles; ``"plain"`` keeps the weights that
        :meth:`attention_weights` returns at every length. The results agree up to rounding.
        Decoding does not use it. Settable; not saved with the model."""
        return str(self._core.attention_impl)

    @attention_impl.setter
    def attention_impl(self, value: str) -> None:
        self._core.attention_impl = value

    # --- decoding ---------------------------------------------------------------------------
    def greedy_decode(
        self,
        src: np.ndarray,
        start_id: int,
        end_id: int,
        max_length: int,
        compute_type: str = "float32",
        max_lengths: Optional[Any] = None,
        return_attention: bool = False,
        target_prefix: Optional[Sequence[Sequence[int]]] = None,
        sampling_topk: int = 1,
        sampling_topp: float = 1.0,
        sampling_temperature: float = 1.0,
        seed: int = 0,
    ) -> Any:
        """Greedy decoding with a key/value cache, in C++.

        Encodes ``src`` (B, S) once, projects the cross-attention keys/values once per sentence,
        and appends self-attention keys/values one position per step. Returns int64 (B, L): the
        ids generated after ``start_id``, up to and including ``end_id``, padded with the model's
        ``pad_id`` (0 by default; the padding id is never generated); ``L <= max_length``. Finished sentences leave the batch.

        float32 models on a CPU with AVX-512 pack the weights once into panels for a small-row
        kernel (batches of 4+ rows) and keep that copy, with the decoder's buffers, between
        calls; each weight's copy is refreshed whenever its fingerprint changes. The GIL is released
        while decoding; another thread's call on this model meanwhile raises ``RuntimeError``.
        Decoding leaves the last :meth:`forward` (what :meth:`backward` and
        :meth:`attention_weights` use) as it was.

        Before decoding, ``max_length`` is checked against the memory its key/value caches need
        (ValueError) and every weight must be finite (:class:`NonFiniteError`, as for logits that
        overflow while decoding).

        ``compute_type`` is the matrix products' precision (the model's weights are not changed):
        ``"float32"``; ``"int8"`` (weights quantised per output feature, activations per row,
        integer dot products on AVX2 + FMA or ARM sdot, float32 everywhere else); ``"bf16"`` (weights and
        activations rounded to bfloat16, float32 sums, AVX512_BF16). The low-precision copy of the
        weights is made at the first call and kept like the float32 panels. ``ValueError`` names
        what is missing on a CPU without the instructions, and refuses them for float64 models.

        ``max_lengths``: each sentence's own limit, an integer array of shape (B,) with every value
        in [1, ``max_length``] (a sentence stops there, inside the search: it gets what it gets
        decoded alone with that limit); ``None``: ``max_length`` for all. A bad one is a
        ``ValueError`` naming it. With ``return_attention`` the result is ``(ids, attention)``:
        ``attention[b]`` holds the cross-attention weights that produced sentence ``b``'s tokens,
        recorded while decoding, (layers, heads, its generated tokens, its source tokens).

        ``target_prefix``: per sentence, the ids its output starts with (each no longer than its
        limit, ids other than padding and ``end_id``). ``sampling_topk`` above 1 draws each token
        instead of taking the most likely: logits divided by ``sampling_temperature`` (> 0), then
        the ``sampling_topk`` most likely, then the fewest of those whose probability reaches
        ``sampling_topp`` (in (0, 1]). Sentence ``b``'s draws depend only on ``seed`` and ``b``
        (never on the thread count).
        """
        return self._core.greedy_decode(
            src,
            start_id,
            end_id,
            max_length,
            compute_type,
            max_lengths,
            return_attention,
            target_prefix,
            sampling_topk,
            sampling_topp,
            sampling_temperature,
            seed,
        )

    def beam_search(
        self,
        src: np.ndarray,
        start_id: int,
        end_id: int,
        max_length: int,
        beam_size: int = 4,
        length_penalty: float = DEFAULT_LENGTH_PENALTY,
        n_best: int = 1,
        compute_type: str = "float32",
        max_lengths: Optional[Any] = None,
        return_attention: bool = False,
        target_prefix: Optional[Sequence[Sequence[int]]] = None,
        constraints: Optional[Sequence[Sequence[Sequence[int]]]] = None,
        length_penalty_mode: str = "gnmt",
        early_stopping: str = "heuristic",
        force_end: bool = False,
    ) -> List[List[Tuple[Any, ...]]]:
        """Beam search with a key/value cache, in C++.

        Returns, for every sentence, ``n_best`` hypotheses best first as ``(tokens, score,
        log_prob, finished)``: ``tokens`` the generated ids (ending with ``end_id`` when
        ``finished``), ``score = log_prob / ((5 + len) / 6) ** length_penalty`` (GNMT). A sentence
        stops when no live beam can still beat its ``n_best``-th finished hypothesis.
        With ``beam_size=1`` and ``length_penalty=0`` it equals :meth:`greedy_decode`.
        ``beam_size`` is at most 1024, ``length_penalty`` a finite number >= 0. ``compute_type``
        and ``max_lengths``: as for :meth:`greedy_decode` (a sentence's limit also bounds the
        score its live beams may still reach). With ``return_attention`` each hypothesis has a
        fifth element: its own cross-attention weights, recorded while searching, (layers, heads,
        its tokens, its source tokens).

        ``target_prefix`` as for :meth:`greedy_decode`. ``constraints``: per sentence, fewer than
        ``beam_size`` id sequences that must each appear in every output (lexically constrained
        search, dynamic beam allocation); each hypothesis then ends with the number of constraints
        it misses, above 0 only for one cut at its limit.

        ``length_penalty_mode="hf"`` follows Hugging Face ``generate``: ``score = log_prob /
        len ** length_penalty`` (``len`` the generated tokens, the end token included), only the
        first ``beam_size`` candidates of a step may finish, and a sentence stops once
        ``beam_size`` hypotheses are finished and, by ``early_stopping``, ``"heuristic"``
        (generate's ``early_stopping=False``: the best live beam scored at its present length does
        not beat the last of them), ``"first"`` (``True``: at once) or ``"never"`` (the limit as
        that length). ``force_end``: at a sentence's limit the end token is the only continuation,
        its log-probability not counted (generate's ``forced_eos_token_id``).
        """
        hypotheses: List[List[Tuple[Any, ...]]] = self._core.beam_search(
            src,
            start_id,
            end_id,
            max_length,
            beam_size,
            length_penalty,
            n_best,
            compute_type,
            max_lengths,
            return_attention,
            target_prefix,
            constraints,
            length_penalty_mode,
            early_stopping,
            force_end,
        )
        return hypotheses

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Transformer(src_vocab_size={c['src_vocab_size']}, tgt_vocab_size={c['tgt_vocab_size']}, "
            f"d_model={c['d_model']}, n_layers={c['n_layers']}, n_heads={c['n_heads']}, d_ff={c['d_ff']}, "
            f"dropout={c['dropout']}, max_length={c['max_length']}, dtype={self.dtype!r}, "
            f"precision={c['precision']!r}"
            + "".join(f", {k}={c[k]!r}" for k in ("encoder_attention", "decoder_attention") if c[k] != "softmax")
            + f"; {self.num_parameters():,} parameters)"
        )


# the keyword arguments, signature and documentation of the configuration, from the core's tables
def _derive_signatures() -> None:
    model_args = [f for f in MODEL_FIELDS if f.name not in ("src_vocab_size", "tgt_vocab_size")]
    positional = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="int")
        for name in ("src_vocab_size", "tgt_vocab_size")
    ]
    dtype = inspect.Parameter("dtype", inspect.Parameter.KEYWORD_ONLY, default="float32", annotation="Any")
    init: Any = Transformer.__init__
    init.__signature__ = inspect.Signature(
        [*positional, *keyword_parameters(model_args), dtype], return_annotation="None"
    )
    Transformer.__doc__ = (Transformer.__doc__ or "").replace("        {args}", describe_fields(MODEL_FIELDS, " " * 8))
    configure: Any = Transformer.configure_optimizer
    configure.__signature__ = inspect.Signature(
        [positional[0], *keyword_parameters(OPTIMIZER_FIELDS)], return_annotation="None"
    )
    configure.__doc__ = (configure.__doc__ or "").replace("        {args}", describe_fields(OPTIMIZER_FIELDS, " " * 8))


_derive_signatures()
