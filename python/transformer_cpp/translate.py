"""Translation with a trained Transformer: greedy decoding, beam search, attention maps, BLEU.

::

    translator = Translator.from_checkpoint("runs/tutorial")
    translator.translate("you should pay for it.")            # 'deberías pagar por ello.'
    translator.translate_batch(["we have no extra money."], beam_size=4)
    t = translator.translate("you should pay for it.", return_attention=True)
    attention_heatmap(t.cross_attention(), t.source_pieces, t.target_pieces)

Input sentences go through :func:`transformer_cpp.text.clean_sentence` in the source language,
exactly as the training sentences did, and are encoded as ``[start, ..., end]``. Length policy:
**every input is translated whole**, whatever its length (the sinusoidal positional encodings
exist for every position; the model's table is a cache that grows). Each sentence may produce up
to :func:`~transformer_cpp.training.output_limit` tokens, ``1.5 * source tokens + 10``, or fewer
with ``max_length``. A model translates best what is as long as its training pairs; an input
longer than the longest training pair the checkpoint records gets a :class:`LongInputWarning`
(the translation is still made, of the whole input).

Decoding. Greedy decoding appends the most likely next token until the end token or the
output limit. It runs in C++ (``Transformer.greedy_decode``: the encoder runs
once and the decoder keeps a key/value cache). :func:`greedy_reference` is the same algorithm
written plainly in Python over any next-token function, and :func:`greedy_decode_reference`
applies it to ``Transformer.forward`` re-run on the growing prefix: the readable definition, and
what the tests and the benchmark compare decoders against. Beam search (``beam_size > 1``) uses
``Transformer.beam_search`` (GNMT length penalty).

Attention. With ``return_attention=True`` the decoded sentence is run once more through
``Transformer.forward`` (teacher-forced on the model's own output) and the cross-attention
weights of every decoder layer are returned: row ``i`` is the query that produced output token
``i``, column ``j`` the source token ``j``.

Output text. A translation is one line: the model can emit any byte (a line break among them,
from a damaged or barely trained model), but it was trained on cleaned sentences, in which every
run of whitespace is one space; the decoded text gets the same treatment (:func:`one_line`), so
that the command line's output lines stay aligned with its input lines.
"""

from __future__ import annotations

import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple, Union, cast

import numpy as np

from ._checks import Limit, choice as _choice, flag as _flag
from .text import _resolve_language, check_text, clean_sentence

__all__ = [
    "Translator",
    "Translation",
    "EvaluationResult",
    "LongInputWarning",
    "greedy_decode",
    "greedy_decode_reference",
    "greedy_reference",
    "evaluate",
]

_WHITESPACE = re.compile(r"\s+")

#: The decoders' compute types, in the order the command line lists them.
COMPUTE_TYPES = ("float32", "int8", "bf16")


def check_compute_type(who: str, value: Any) -> str:
    """``value`` if it names a compute type this machine can run, else ``ValueError`` (``TypeError``
    for a non-str) naming what is allowed or what the CPU lacks."""
    name = _choice(who, "compute_type", value, COMPUTE_TYPES)
    from . import _core

    if not _core._compute_type_supported(name):
        raise ValueError(
            f"{who}: compute_type {name!r} is not available: "
            f"{_core._compute_type_unsupported_reason(name)}; use compute_type 'float32'"
        )
    return name


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (line breaks included) as one space, stripped: what
    the training targets look like after cleaning, and one output line per translation."""
    return _WHITESPACE.sub(" ", text).strip()


class LongInputWarning(UserWarning):
    """An input is longer than any training pair: it is translated whole, but quality may suffer."""


# ------------------------------------------------------------------------------------ decoding


def _check_src(src: Any, who: str) -> np.ndarray:
    src = np.asarray(src)
    if src.ndim != 2 or src.dtype.kind not in "iu":
        raise ValueError(f"{who}: src must be an integer (batch, length) array, got {src.dtype} {src.shape}")
    return np.ascontiguousarray(src, dtype=np.int64)


def greedy_reference(
    next_logits: Callable[[np.ndarray], Any], batch_size: int, start_id: int, end_id: int, max_length: int
) -> np.ndarray:
    """Greedy decoding written plainly: the one reference loop every greedy decoder of this
    project is checked against (the C++ ``Transformer.greedy_decode`` in the tests, CTranslate2
    and the PyTorch tutorial loop in the benchmark).

    ``next_logits(prefix)`` gets the int64 (B, t+1) prefixes ``[start, y_1, ..., y_t]`` of the
    ``batch_size`` sentences and returns the logits (B, V) of the token after each (a NumPy array
    or anything ``np.asarray`` takes). ``y_{t+1}`` is the argmax over every token except padding
    (id 0, which a model must never output; ties go to the lowest id). A sentence is finished
    once it has produced ``end_id``; its later positions are padding (0). Stops when every
    sentence is finished or after ``max_length`` tokens.

    Returns:
        int64 (B, L): the generated ids after the start token, up to and including the end token,
        padded with 0; ``L`` is the longest row.
    """
    out = np.zeros((batch_size, 0), dtype=np.int64)
    done = np.zeros(batch_size, dtype=bool)
    start = np.full((batch_size, 1), int(start_id), dtype=np.int64)
    for _ in range(int(max_length)):
        logits = np.asarray(next_logits(np.concatenate([start, out], axis=1)))  # (B, V)
        nxt = logits[:, 1:].argmax(axis=-1).astype(np.int64) + 1  # never the padding id 0
        nxt[done] = 0
        out = np.concatenate([out, nxt[:, None]], axis=1)
        done |= nxt == int(end_id)
        if done.all():
            break
    return out


def greedy_decode_reference(model: Any, src: np.ndarray, start_id: int, end_id: int, max_length: int) -> np.ndarray:
    """Greedy decoding in plain Python: the readable definition of ``Transformer.greedy_decode``.

    :func:`greedy_reference` with the whole prefix ``[start, y_1, ..., y_t]`` run through
    ``model.forward(src, prefix)`` at every step (no cache) and the last position's logits taken.

    Args:
        model: a :class:`~transformer_cpp.model.Transformer`.
        src: int (B, S) source ids, padded with 0.
        start_id, end_id: the target tokenizer's start and end ids.
        max_length: the most tokens to generate per sentence (the end token included).

    Returns:
        int64 (B, L): the generated ids after the start token, up to and including the end token,
        padded with 0; ``L`` is the longest row.
    """
    src = _check_src(src, "greedy_decode_reference")
    return greedy_reference(
        lambda prefix: model.forward(src, prefix, training=False)[:, -1], src.shape[0], start_id, end_id, max_length
    )


def greedy_decode(
    model: Any, src: np.ndarray, start_id: int, end_id: int, max_length: int, compute_type: str = "float32"
) -> np.ndarray:
    """Greedy decoding: ``model.greedy_decode`` (C++, key/value cache) when the model has it,
    else :func:`greedy_decode_reference` (float32 only). Same arguments and result."""
    src = _check_src(src, "greedy_decode")
    if hasattr(model, "greedy_decode"):
        if compute_type == "float32":  # models from before compute_type (or stand-ins) take 4 arguments
            return np.asarray(model.greedy_decode(src, int(start_id), int(end_id), int(max_length)), dtype=np.int64)
        return np.asarray(
            model.greedy_decode(src, int(start_id), int(end_id), int(max_length), compute_type), dtype=np.int64
        )
    if compute_type != "float32":
        raise ValueError(f"greedy_decode: compute_type {compute_type!r} needs a model with a C++ greedy_decode")
    return greedy_decode_reference(model, src, start_id, end_id, max_length)


# ------------------------------------------------------------------------------------ results


@dataclass
class Translation:
    """One translation with what is needed to inspect it.

    Attributes:
        source: the input sentence after cleaning.
        text: the translation (detokenised).
        source_ids: the encoder input, ``[start, ..., end]`` (the whole sentence).
        target_ids: the generated ids (the end token included when ``finished``).
        source_pieces, target_pieces: readable subword pieces for ``source_ids`` / ``target_ids``
            (``▁`` marks a leading space), for axis labels.
        finished: whether decoding produced the end token (else it hit the output limit).
        score: beam search's length-normalised log-probability (``None`` for greedy decoding).
        attention: with ``return_attention=True``, decoder layer name ->
            cross-attention weights ``(heads, len(target_ids), len(source_ids))``.
    """

    source: str
    text: str
    source_ids: List[int]
    target_ids: List[int]
    source_pieces: List[str]
    target_pieces: List[str]
    finished: bool
    score: Optional[float] = None
    attention: Dict[str, np.ndarray] = field(default_factory=dict)

    def cross_attention(self, layer: int = -1) -> np.ndarray:
        """Cross-attention ``(heads, target, source)`` of decoder layer ``layer`` (default the last).

        Raises:
            ValueError: if the translation was made without ``return_attention=True``.
        """
        if not self.attention:
            raise ValueError(
                "Translation.cross_attention: translate with return_attention=True to get attention weights"
            )
        names = sorted(self.attention, key=lambda n: int(n.split(".")[2]))
        if (
            isinstance(layer, (bool, np.bool_))
            or not isinstance(layer, (int, np.integer))
            or not -len(names) <= int(layer) < len(names)
        ):
            raise ValueError(
                f"Translation.cross_attention: layer must be an integer in [{-len(names)}, {len(names)}) "
                f"(the model has {len(names)} decoder layer{'s' if len(names) != 1 else ''}), got {layer!r}"
            )
        return self.attention[names[int(layer)]]

    def __str__(self) -> str:
        return self.text


@dataclass
class EvaluationResult:
    """Scores of :func:`evaluate`.

    Attributes:
        bleu: corpus BLEU (sacrebleu, 0-100). chrf: corpus chrF (sacrebleu, 0-100).
        loss, accuracy: masked loss and accuracy (teacher forcing, token-weighted) over the pairs
            that fit ``max_length``.
        sentences: pairs translated. scored_pairs: pairs in the loss (those that fit).
        hypotheses, references: the translations and the cleaned references.
        bleu_signature, chrf_signature: sacrebleu's signatures (how the scores were computed).
        sources: how many distinct source sentences the pairs hold.
        multi_bleu, multi_chrf: the scores with every reference of a source counted: one
            hypothesis per distinct source, scored against all the references given for it
            (sacrebleu with a variable number of references). Equal to ``bleu``/``chrf`` when no
            source repeats; higher when one English sentence has several Spanish translations,
            as a correct alternative translation then counts.
    """

    bleu: float
    chrf: float
    loss: float
    accuracy: float
    sentences: int
    scored_pairs: int
    hypotheses: List[str]
    references: List[str]
    bleu_signature: str = ""
    chrf_signature: str = ""
    sources: int = 0
    multi_bleu: float = float("nan")
    multi_chrf: float = float("nan")

    def summary(self) -> str:
        """One line with the four scores."""
        return (
            f"BLEU {self.bleu:.2f}  chrF {self.chrf:.2f}  loss {self.loss:.4f}  accuracy {self.accuracy:.4f}  "
            f"({self.sentences} sentences)"
        )


# ------------------------------------------------------------------------------------ translator


def _piece(tokenizer: Any, token_id: int) -> str:
    """A readable label for one token id: ``▁`` for a leading space, ``<end>`` for specials."""
    if token_id in tokenizer.special_ids:
        return cast(str, tokenizer.id_to_token(token_id))
    text = cast(str, tokenizer.decode([token_id]))
    # byte-level BPE writes a leading space as "Ġ"; decode() drops one leading space, so restore it
    return ("\u2581" + text) if tokenizer.id_to_token(token_id).startswith("\u0120") else text


class Translator:
    """Translate sentences with a trained model and its two tokenizers.

    Args:
        model: a trained :class:`~transformer_cpp.model.Transformer`.
        src_tokenizer, tgt_tokenizer: the tokenizers it was trained with.
        src_lang: language of the input, for :func:`~transformer_cpp.text.clean_sentence`
            (``"en"``); ``None`` skips cleaning.
        max_length: most tokens to generate per sentence (default: ``1.5 * source tokens + 10``
            each; a number caps that).
        trained_length: the longest training pair in tokens (inputs beyond it get a
            :class:`LongInputWarning`), or ``None``.
        compute_type: the precision of the decoder's matrix products (the model is not changed):
            ``"float32"`` (default), ``"int8"`` (int8 weights per output feature and activations
            per row, AVX512_VNNI) or ``"bf16"`` (AVX512_BF16). Checked when set: a name outside
            these, or one this CPU cannot run, is a ``ValueError`` saying what is missing.

    Options (here and in :meth:`translate` / :meth:`translate_batch`) are checked against
    :attr:`LIMITS`, as the command line checks its options, with the same messages.
    """

    #: The allowed values of the decoding options.
    LIMITS: ClassVar[Dict[str, Limit]] = {
        "beam_size": Limit(True, 1, 1024),
        "length_penalty": Limit(False, 0, 10),
        "max_length": Limit(True, 1, 100_000),
        "batch_size": Limit(True, 1, 100_000),
    }

    @classmethod
    def check(cls, name: str, value: Any) -> Any:
        """``value`` if it is allowed for option ``name`` (``max_length`` may be ``None``), else
        ``TypeError`` (a value of the wrong type) or ``ValueError`` (out of range) naming the option
        and what it allows."""
        if name == "max_length" and value is None:
            return None
        if name not in cls.LIMITS:
            raise ValueError(f"Translator: unknown option {name!r}")
        return cls.LIMITS[name].check("Translator", name, value)

    def __init__(
        self,
        model: Any,
        src_tokenizer: Any,
        tgt_tokenizer: Any,
        *,
        src_lang: Optional[str] = "en",
        max_length: Optional[int] = None,
        trained_length: Optional[int] = None,
        compute_type: str = "float32",
    ) -> None:
        if src_lang is not None:
            _resolve_language(src_lang, "Translator: src_lang")  # an unknown language fails here, not per sentence
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.src_lang = src_lang
        self.trained_length = None if trained_length is None else int(trained_length)
        for label, tok, key in (
            ("src_tokenizer", src_tokenizer, "src_vocab_size"),
            ("tgt_tokenizer", tgt_tokenizer, "tgt_vocab_size"),
        ):
            if tok.vocab_size != model.config[key]:
                raise ValueError(
                    f"Translator: {label} has {tok.vocab_size} tokens but the model's {key} is {model.config[key]}"
                )
        self.max_length = max_length  # checked by the property
        self.compute_type = compute_type  # checked by the property
        self.checkpoint: Optional[Path] = None  # set by from_checkpoint
        self._adaptive_threads = True
        self._governor: Optional[Any] = None

    @property
    def max_length(self) -> Optional[int]:
        """Most tokens to generate per sentence (``None``: ``1.5 * source tokens + 10`` each);
        checked when set, as the constructor checks it."""
        return self._max_length

    @max_length.setter
    def max_length(self, value: Optional[int]) -> None:
        self._max_length = self._limit(value)

    @property
    def compute_type(self) -> str:
        """The precision of the decoder's matrix products: ``"float32"``, ``"int8"`` or ``"bf16"``."""
        return self._compute_type

    @compute_type.setter
    def compute_type(self, value: str) -> None:
        self._compute_type = check_compute_type("Translator", value)

    @property
    def adaptive_threads(self) -> bool:
        """Time each batch and use fewer threads while that is faster (a busy machine); True or
        False (a string such as ``"no"`` is refused, not taken as true)."""
        return self._adaptive_threads

    @adaptive_threads.setter
    def adaptive_threads(self, value: bool) -> None:
        self._adaptive_threads = _flag("Translator", "adaptive_threads", value)

    @classmethod
    def from_checkpoint(
        cls, path: Union[str, Path], *, max_length: Optional[int] = None, compute_type: str = "float32"
    ) -> "Translator":
        """Load the model and tokenizers of a checkpoint (a run directory or one checkpoint);
        ``compute_type`` as for the constructor.

        Raises:
            transformer_cpp.checkpoint.CheckpointError: a missing or damaged checkpoint.
        """
        from .checkpoint import load_checkpoint

        ckpt = load_checkpoint(path, optimizer=False)
        data = ckpt.data or {}
        trained = data.get("max_length") if isinstance(data.get("max_length"), int) else None
        translator = cls(
            ckpt.model,
            ckpt.src_tokenizer,
            ckpt.tgt_tokenizer,
            src_lang=data.get("src_lang", "en"),
            max_length=max_length,
            trained_length=trained,
            compute_type=compute_type,
        )
        translator.checkpoint = ckpt.path
        return translator

    @classmethod
    def _limit(cls, max_length: Optional[int]) -> Optional[int]:
        return cast(Optional[int], cls.check("max_length", max_length))

    def clean(self, sentence: str) -> str:
        """The input as the model sees it: :func:`clean_sentence` in ``src_lang``.

        Raises:
            TypeError: not a ``str``. ValueError: a ``str`` that is not valid text (it holds a
                lone surrogate, as bytes that were not UTF-8 become with ``surrogateescape``).
        """
        if not isinstance(sentence, str):
            raise TypeError(f"Translator: expected a sentence (str), got {type(sentence).__name__}")
        return clean_sentence(sentence, self.src_lang) if self.src_lang else check_text(sentence, "Translator").strip()

    def encode(self, sentence: str, *, _stacklevel: int = 2) -> Tuple[str, List[int]]:
        """``(cleaned, ids)`` for one input sentence, all of it (see the module docstring); warns
        with :class:`LongInputWarning` when it is longer than any training pair."""
        cleaned = self.clean(sentence)
        ids = self.src_tokenizer.encode(cleaned)
        if self.trained_length is not None and len(ids) > self.trained_length:
            warnings.warn(
                f"Translator: the sentence {cleaned[:60]!r}{'...' if len(cleaned) > 60 else ''} has {len(ids)} tokens, "
                f"more than any training pair ({self.trained_length}); it is translated whole, but the translation "
                "may be poorer",
                LongInputWarning,
                stacklevel=_stacklevel + 1,
            )
        return cleaned, ids

    def translate(
        self,
        sentence: str,
        *,
        beam_size: int = 1,
        length_penalty: float = 1.0,
        max_length: Optional[int] = None,
        return_attention: bool = False,
    ) -> Union[str, Translation]:
        """Translate one sentence.

        Args:
            sentence: the input (cleaned like the training data before encoding).
            beam_size: 1 for greedy decoding, more for beam search.
            length_penalty: GNMT length-penalty exponent for beam search (scores are divided by
                ``((5 + length) / 6) ** length_penalty``). The default 1.0 (GNMT's paper used
                0.6, which stays the core's default) was chosen on validation BLEU, beam 4: +0.16
                for a quick-recipe model (44.10 against 43.94), +0.03 for the standard one;
                2.0 lost 1.1.
            max_length: most tokens to generate (default: the translator's ``max_length``, else
                ``1.5 * source tokens + 10``).
            return_attention: return a :class:`Translation` with the cross-attention weights
                instead of the text.

        Returns:
            The translation text, or a :class:`Translation` with ``return_attention=True``.
        """
        if not isinstance(sentence, str):
            raise TypeError(
                f"Translator.translate: expected a str, got {type(sentence).__name__}; "
                "use translate_batch for several sentences"
            )
        return cast(
            Union[str, "Translation"],
            self.translate_batch(
                [sentence],
                beam_size=beam_size,
                length_penalty=length_penalty,
                max_length=max_length,
                return_attention=return_attention,
                _stacklevel=3,
            )[0],
        )

    def translate_batch(
        self,
        sentences: Sequence[str],
        *,
        beam_size: int = 1,
        length_penalty: float = 1.0,
        max_length: Optional[int] = None,
        return_attention: bool = False,
        batch_size: int = 64,
        _stacklevel: int = 2,
    ) -> List[Any]:
        """Translate several sentences (``batch_size`` at a time); a list of texts, or of
        :class:`Translation` with ``return_attention=True``. See :meth:`translate`."""
        if isinstance(sentences, str):
            raise TypeError("Translator.translate_batch: expected a list of sentences, got a single string")
        sentences = list(sentences)
        beam_size = self.check("beam_size", beam_size)
        batch_size = self.check("batch_size", batch_size)
        return_attention = _flag("Translator", "return_attention", return_attention)
        length_penalty = self.check("length_penalty", length_penalty)
        limit = self._limit(max_length) if max_length is not None else self.max_length
        encoded = [self.encode(s, _stacklevel=_stacklevel + 1) for s in sentences]
        results: List[Translation] = []
        governor = self._thread_governor()
        try:
            for start in range(0, len(encoded), int(batch_size)):
                chunk = encoded[start : start + int(batch_size)]
                t0 = time.perf_counter()
                results.extend(
                    self._translate_chunk(chunk, int(beam_size), float(length_penalty), limit, return_attention)
                )
                if governor is not None:  # work ~ sentences x (source + output length)
                    work = sum(len(ids) + len(r.target_ids) for (_, ids), r in zip(chunk, results[start:]))
                    governor.record(time.perf_counter() - t0, max(work, 1))
        finally:
            if governor is not None:
                from ._runtime import set_num_threads

                set_num_threads(governor.most)
        return results if return_attention else [r.text for r in results]

    def _thread_governor(self) -> Optional[Any]:
        """This translator's ThreadGovernor (kept across calls, so that what it learnt about the
        machine carries over), set to its current choice; None with one thread or
        ``adaptive_threads`` off. A thread count changed by the user starts a new one."""
        from ._runtime import ThreadGovernor, get_num_threads, set_num_threads

        most = get_num_threads()
        if not self.adaptive_threads or most <= 1:
            return None
        if self._governor is None or self._governor.most != most:
            self._governor = ThreadGovernor(most)
        else:
            set_num_threads(self._governor.threads)
        return self._governor

    def _translate_chunk(
        self,
        encoded: List[Tuple[str, List[int]]],
        beam_size: int,
        length_penalty: float,
        limit: Optional[int],
        return_attention: bool,
    ) -> List[Translation]:
        from .training import output_limit

        if not encoded:
            return []
        width = max(len(ids) for _, ids in encoded)
        src = np.zeros((len(encoded), width), dtype=np.int64)
        for i, (_, ids) in enumerate(encoded):
            src[i, : len(ids)] = ids
        # one decode call per chunk: its limit is the longest sentence's; shorter ones are cut below
        limits = [output_limit(len(ids)) if limit is None else limit for _, ids in encoded]
        steps = max(limits)
        tgt = self.tgt_tokenizer
        scores: List[Optional[float]] = [None] * len(encoded)
        if beam_size == 1:
            out = greedy_decode(self.model, src, tgt.start_id, tgt.end_id, steps, self.compute_type)
            generated = [[int(v) for v in row if v != 0][:n] for row, n in zip(out, limits)]
        else:
            if not hasattr(self.model, "beam_search"):
                raise ValueError("Translator: this model has no beam_search; use beam_size=1")
            if self.compute_type == "float32":
                hyps = self.model.beam_search(src, tgt.start_id, tgt.end_id, steps, beam_size, length_penalty, 1)
            else:
                hyps = self.model.beam_search(
                    src, tgt.start_id, tgt.end_id, steps, beam_size, length_penalty, 1, self.compute_type
                )
            generated = [[int(v) for v in h[0][0]][:n] for h, n in zip(hyps, limits)]
            scores = [float(h[0][1]) for h in hyps]
        results = []
        for (cleaned, ids), gen, score in zip(encoded, generated, scores):
            finished = bool(gen) and gen[-1] == tgt.end_id
            results.append(
                Translation(
                    source=cleaned,
                    text=one_line(tgt.decode(gen)),
                    source_ids=list(ids),
                    target_ids=gen,
                    source_pieces=[_piece(self.src_tokenizer, i) for i in ids],
                    target_pieces=[_piece(tgt, i) for i in gen],
                    finished=finished,
                    score=score,
                )
            )
        if return_attention:
            self._attach_attention(src, results)
        return results

    def _attach_attention(self, src: np.ndarray, results: List[Translation]) -> None:
        """One teacher-forced forward pass on ``[start] + output[:-1]``; keep the cross-attention."""
        lengths = [len(r.target_ids) for r in results]
        width = max(max(lengths), 1)
        tgt_in = np.zeros((len(results), width), dtype=np.int64)
        for i, r in enumerate(results):
            row = [self.tgt_tokenizer.start_id] + r.target_ids[:-1]
            tgt_in[i, : len(row)] = row
        self.model.forward(src, tgt_in, training=False)
        weights = self.model.attention_weights()
        cross = {name: w for name, w in weights.items() if name.endswith("cross_attention")}
        for i, r in enumerate(results):
            t, s = max(len(r.target_ids), 1), len(r.source_ids)
            r.attention = {name: np.array(w[i, :, :t, :s]) for name, w in cross.items()}


# ------------------------------------------------------------------------------------ evaluation


def evaluate(
    translator: Translator,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    beam_size: int = 1,
    length_penalty: float = 1.0,
    batch_size: int = 64,
    tgt_lang: Optional[str] = "es",
) -> EvaluationResult:
    """BLEU and chrF of ``translator`` on held-out pairs, plus the masked loss and accuracy.

    The references are cleaned with :func:`clean_sentence` in ``tgt_lang`` (as the training
    targets were; ``None`` to leave them as they are) and scored against the translations with
    ``sacrebleu.corpus_bleu`` / ``corpus_chrf`` (default settings: 13a tokenisation, chrF with
    character n-grams up to 6). The loss and accuracy are teacher-forced and token-weighted over
    every pair. Every source is translated whole (see :class:`Translator`).

    Raises:
        ValueError: if the lists differ in length or are empty.
    """
    from sacrebleu.metrics.bleu import BLEU
    from sacrebleu.metrics.chrf import CHRF

    from .data import encode_pairs
    from .training import evaluate_loss

    sources, references = list(sources), list(references)
    if len(sources) != len(references):
        raise ValueError(f"evaluate: {len(sources)} sources but {len(references)} references")
    if not sources:
        raise ValueError("evaluate: no sentence pairs to evaluate")
    refs = [clean_sentence(r, tgt_lang) if tgt_lang else r.strip() for r in references]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LongInputWarning)
        hyps = translator.translate_batch(
            sources, beam_size=beam_size, length_penalty=length_penalty, batch_size=batch_size
        )
    bleu = BLEU()
    chrf = CHRF()
    bleu_score = bleu.corpus_score(hyps, [refs])
    chrf_score = chrf.corpus_score(hyps, [refs])
    multi_hyps, multi_refs = _group_references(sources, hyps, refs)
    # sacrebleu takes None for a source with fewer references than the others
    streams = cast(List[Sequence[str]], multi_refs)
    multi_bleu = BLEU().corpus_score(multi_hyps, streams)
    multi_chrf = CHRF().corpus_score(multi_hyps, streams)

    loss = accuracy = float("nan")
    scored = 0
    enc = encode_pairs(
        [translator.clean(s) for s in sources], refs, translator.src_tokenizer, translator.tgt_tokenizer, None
    )
    loss, accuracy, _ = evaluate_loss(translator.model, enc, batch_size)
    scored = len(enc)
    return EvaluationResult(
        bleu=float(bleu_score.score),
        chrf=float(chrf_score.score),
        loss=loss,
        accuracy=accuracy,
        sentences=len(sources),
        scored_pairs=scored,
        hypotheses=hyps,
        references=refs,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        sources=len(multi_hyps),
        multi_bleu=float(multi_bleu.score),
        multi_chrf=float(multi_chrf.score),
    )


def _group_references(
    sources: Sequence[str], hyps: Sequence[str], refs: Sequence[str]
) -> Tuple[List[str], List[List[Optional[str]]]]:
    """One hypothesis per distinct source (its first) and the reference streams sacrebleu takes
    for a variable number of references: stream k holds each source's k-th reference or None.
    Sources are "the same" as the leak-free split sees it (case and spacing ignored)."""
    from .data import _sentence_key

    order: Dict[str, int] = {}
    grouped: List[List[str]] = []
    first_hyp: List[str] = []
    for src, hyp, ref in zip(sources, hyps, refs):
        key = _sentence_key(src)
        if key not in order:
            order[key] = len(grouped)
            grouped.append([])
            first_hyp.append(hyp)
        grouped[order[key]].append(ref)
    most = max(len(g) for g in grouped)
    streams = [[g[k] if k < len(g) else None for g in grouped] for k in range(most)]
    return first_hyp, streams
