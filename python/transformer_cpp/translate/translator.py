"""Translation with a trained Transformer: :class:`Translator` (clean, encode, decode, detokenize)
and :class:`Translation` (one result with what is needed to inspect it).

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
to :func:`~transformer_cpp.translate.output_limit` tokens, ``1.5 * source tokens + 10``, or fewer
with ``max_output_tokens``. A model translates best what is as long as its training pairs; an input
longer than the longest training pair the checkpoint records gets a :class:`LongInputWarning`
(the translation is still made, of the whole input).

A batch is translated by :func:`~transformer_cpp.translate.batch.translate_encoded`, which the server's batcher calls too: one
:func:`~transformer_cpp.translate.decode_rows` call (greedy decoding in C++ with a key/value cache,
or beam search with the GNMT length penalty, each sentence stopping at its own output limit), the
one decode path of the package, then the texts and pieces of each output.

Attention. With ``return_attention=True`` the decoder records the cross-attention weights of every
decoder layer while it decodes (for beam search, those of the returned hypothesis): row ``i`` is
the query that produced output token ``i``, column ``j`` the source token ``j``.

Output text. A translation is one line: the model can emit any byte (a line break among them,
from a damaged or barely trained model), but it was trained on cleaned sentences, in which every
run of whitespace is one space; the decoded text gets the same treatment (:func:`one_line`), so
that the command line's output lines stay aligned with its input lines.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional, Sequence, Tuple, Union, cast

from .._checks import Limit, flag as _flag
from .._runtime import ThreadGovernor, get_num_threads, governor_for
from ..text import check_text, clean_sentence, resolve_language
from . import constructors
from .batch import EncodedSource, LongInputWarning, Translation, encode_source, search_ids, translate_in_chunks
from .decoding import DecodeOptions, call_options, check_compute_type, checked_defaults

__all__ = ["Translator"]


def _warn_max_length(who: str, stacklevel: int) -> None:
    warnings.warn(
        f"{who}: max_length is deprecated and will be removed; use max_output_tokens (the same setting)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def _renamed_max_length(max_output_tokens: Optional[int], max_length: Optional[int], who: str) -> Optional[int]:
    """``max_output_tokens``, or the value given under its old name ``max_length`` (with a
    ``DeprecationWarning`` pointing at the caller's caller)."""
    if max_length is None:
        return max_output_tokens
    _warn_max_length(who, 4)
    if max_output_tokens is not None:
        raise TypeError(f"{who}: max_length is the old name of max_output_tokens; give only max_output_tokens")
    return max_length


def _check_vocab_sizes(model: Any, src_tokenizer: Any, tgt_tokenizer: Any) -> None:
    """``ValueError`` unless each tokenizer has as many tokens as the model's vocabulary on its side."""
    for label, tok, key in (
        ("src_tokenizer", src_tokenizer, "src_vocab_size"),
        ("tgt_tokenizer", tgt_tokenizer, "tgt_vocab_size"),
    ):
        if tok.vocab_size != model.config[key]:
            raise ValueError(
                f"Translator: {label} has {tok.vocab_size} tokens but the model's {key} is {model.config[key]}"
            )


def _answers(results: List[Translation], n_best: bool, return_attention: bool) -> List[Any]:
    """What :meth:`Translator.translate_batch` returns of its ``results``: the translations, each
    with its hypotheses, with ``n_best`` (one kept: the translation itself); the translations with
    ``return_attention``; else their texts."""
    if n_best:
        for r in results:
            r.hypotheses = r.hypotheses or [replace(r)]
        return results
    return results if return_attention else [r.text for r in results]


class Translator:
    """Translate sentences with a trained model and its two tokenizers.

    Args:
        model: a trained :class:`~transformer_cpp.model.Transformer`.
        src_tokenizer, tgt_tokenizer: the tokenizers it was trained with.
        src_lang: language of the input, for :func:`~transformer_cpp.text.clean_sentence`
            (``"en"``); ``None`` skips cleaning.
        tgt_lang: language of the output (``None``: not known; a checkpoint records both, and
            :meth:`from_checkpoint` sets them).
        max_output_tokens: most tokens to generate per sentence (default: ``1.5 * source tokens +
            10`` each; a number caps that). ``max_length`` is its old name, still accepted with a
            ``DeprecationWarning``.
        trained_length: the longest training pair in tokens (inputs beyond it get a
            :class:`LongInputWarning`), or ``None``.
        compute_type: the precision of the decoder's matrix products (the model is not changed):
            ``"float32"`` (default), ``"int8"`` (int8 weights per output feature and activations
            per row; AVX2 + FMA or ARM sdot) or ``"bf16"`` (AVX512_BF16). Checked when set: a name outside
            these, or one this CPU cannot run, is a ``ValueError`` saying what is missing.

    Options (here and in :meth:`translate` / :meth:`translate_batch`) are checked against
    :attr:`LIMITS`, as the command line checks its options, with the same messages.
    """

    #: The allowed values of the decoding options (those of :class:`DecodeOptions`, and the batch size).
    LIMITS: ClassVar[Dict[str, Limit]] = {
        **{k: v for k, v in DecodeOptions.LIMITS.items() if k != "n_best"},
        "batch_size": Limit(True, 1, 100_000),
    }

    @classmethod
    def check(cls, name: str, value: Any) -> Any:
        """``value`` if it is allowed for option ``name`` (``max_output_tokens`` may be ``None``),
        else ``TypeError`` (a value of the wrong type) or ``ValueError`` (out of range) naming the
        option and what it allows."""
        if name == "max_output_tokens" and value is None:
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
        tgt_lang: Optional[str] = None,
        max_output_tokens: Optional[int] = None,
        trained_length: Optional[int] = None,
        compute_type: str = "float32",
        max_length: Optional[int] = None,
        decode_defaults: Optional[Dict[str, Any]] = None,
    ) -> None:
        max_output_tokens = _renamed_max_length(max_output_tokens, max_length, "Translator")
        # a string that is no language fails here, not per sentence
        self.src_lang = None if src_lang is None else resolve_language(src_lang, "Translator: src_lang")
        self.tgt_lang = None if tgt_lang is None else resolve_language(tgt_lang, "Translator: tgt_lang")
        self.model = model
        self.src_tokenizer = src_tokenizer
        self.tgt_tokenizer = tgt_tokenizer
        self.trained_length = None if trained_length is None else int(trained_length)
        _check_vocab_sizes(model, src_tokenizer, tgt_tokenizer)
        #: The decoding settings used when a call leaves them out (an imported model's generation rules).
        self.decode_defaults = checked_defaults(decode_defaults or {}, "Translator: decode_defaults")
        if max_output_tokens is None:
            max_output_tokens = self.decode_defaults.get("max_output_tokens")
        self.max_output_tokens = max_output_tokens  # checked by the property
        self.compute_type = compute_type  # checked by the property
        self.checkpoint: Optional[Path] = None  # set by from_checkpoint
        self._adaptive_threads = True
        self._governor: Optional[ThreadGovernor] = None

    @property
    def max_output_tokens(self) -> Optional[int]:
        """Most tokens to generate per sentence (``None``: ``1.5 * source tokens + 10`` each);
        checked when set, as the constructor checks it."""
        return self._max_output_tokens

    @max_output_tokens.setter
    def max_output_tokens(self, value: Optional[int]) -> None:
        self._max_output_tokens = self._limit(value)

    @property
    def max_length(self) -> Optional[int]:
        """The old name of :attr:`max_output_tokens` (deprecated: it warns)."""
        _warn_max_length("Translator", 3)
        return self._max_output_tokens

    @max_length.setter
    def max_length(self, value: Optional[int]) -> None:
        _warn_max_length("Translator", 3)
        self.max_output_tokens = value

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
        cls,
        path: Union[str, Path],
        *,
        max_output_tokens: Optional[int] = None,
        compute_type: str = "float32",
        max_length: Optional[int] = None,
    ) -> "Translator":
        """Load the model and tokenizers of a checkpoint: a run directory (its ``best`` checkpoint,
        or its ``latest`` when it has no ``best``) or one checkpoint directory. ``max_output_tokens``
        (old name ``max_length``, deprecated) and ``compute_type`` as for the constructor.

        Raises:
            transformer_cpp.checkpoint.CheckpointError: a missing or damaged checkpoint.
        """
        max_output_tokens = _renamed_max_length(max_output_tokens, max_length, "Translator.from_checkpoint")
        return constructors.from_checkpoint(cls, path, max_output_tokens, compute_type)

    @classmethod
    def from_pretrained(cls, source: Union[str, Path], **kwargs: Any) -> "Translator":
        """A translator for a published MarianMT model (a directory or a Hub name, as
        :func:`~transformer_cpp.import_pretrained` takes), read into memory without writing a run.
        ``src_lang`` / ``tgt_lang`` default to the model's; other keywords as for the constructor."""
        return constructors.from_pretrained(cls, source, kwargs)

    @classmethod
    def _limit(cls, max_output_tokens: Optional[int]) -> Optional[int]:
        return cast(Optional[int], cls.check("max_output_tokens", max_output_tokens))

    def clean(self, sentence: str) -> str:
        """The input as the model sees it: :func:`clean_sentence` in ``src_lang``.

        Raises:
            TypeError: not a ``str``. ValueError: a ``str`` that is not valid text (it holds a
                lone surrogate, as bytes that were not UTF-8 become with ``surrogateescape``).
        """
        if not isinstance(sentence, str):
            raise TypeError(f"Translator: expected a sentence (str), got {type(sentence).__name__}")
        if not getattr(self.src_tokenizer, "expects_cleaned_text", True):  # the model normalises raw text itself
            return check_text(sentence, "Translator")
        return clean_sentence(sentence, self.src_lang) if self.src_lang else check_text(sentence, "Translator").strip()

    def encode(self, sentence: str, *, _stacklevel: int = 2) -> Tuple[str, List[int]]:
        """``(cleaned, ids)`` for one input sentence, all of it (see the module docstring); warns
        with :class:`LongInputWarning` when it is longer than any training pair."""
        enc = self._encoded(sentence, _stacklevel + 1)
        return enc.source, enc.ids

    def _encoded(self, sentence: str, stacklevel: int) -> EncodedSource:
        enc = encode_source(self, sentence)
        if enc.warning:
            warnings.warn(f"Translator: {enc.warning}", LongInputWarning, stacklevel=stacklevel + 1)
        return enc

    def translate(
        self,
        sentence: str,
        *,
        beam_size: Optional[int] = None,
        length_penalty: Optional[float] = None,
        max_output_tokens: Optional[int] = None,
        return_attention: bool = False,
        max_length: Optional[int] = None,
        **search: Any,
    ) -> Union[str, Translation]:
        """Translate one sentence.

        Args:
            sentence: the input (cleaned like the training data before encoding).
            beam_size: 1 for greedy decoding, more for beam search (default: the translator's
                :attr:`decode_defaults`, else 1).
            length_penalty: length-penalty exponent for beam search (default: the
                :attr:`decode_defaults`, else :data:`~transformer_cpp.model.DEFAULT_LENGTH_PENALTY`);
                ``length_penalty_mode`` (in ``search``) says how it applies (GNMT's
                ``((5 + length) / 6) ** length_penalty`` or Hugging Face's ``length ** length_penalty``).
            max_output_tokens: most tokens to generate (default: the translator's
                ``max_output_tokens``, else ``1.5 * source tokens + 10``); ``max_length`` is its
                old name (deprecated: it warns).
            return_attention: return a :class:`Translation` with the cross-attention weights
                instead of the text.
            search: ``target_prefix``, ``constraints``, ``sampling_topk``, ``sampling_topp``,
                ``sampling_temperature``, ``seed``, ``length_penalty_mode``, ``early_stopping``,
                ``force_end``, as for :meth:`translate_batch`.

        Returns:
            The translation text, or a :class:`Translation` with ``return_attention=True``.
        """
        if not isinstance(sentence, str):
            raise TypeError(
                f"Translator.translate: expected a str, got {type(sentence).__name__}; "
                "use translate_batch for several sentences"
            )
        max_output_tokens = _renamed_max_length(max_output_tokens, max_length, "Translator.translate")
        return cast(
            Union[str, "Translation"],
            self.translate_batch(
                [sentence],
                beam_size=beam_size,
                length_penalty=length_penalty,
                max_output_tokens=max_output_tokens,
                return_attention=return_attention,
                _stacklevel=3,
                **search,
            )[0],
        )

    def translate_batch(
        self,
        sentences: Sequence[str],
        *,
        beam_size: Optional[int] = None,
        length_penalty: Optional[float] = None,
        max_output_tokens: Optional[int] = None,
        return_attention: bool = False,
        batch_size: int = 64,
        n_best: Optional[int] = None,
        max_length: Optional[int] = None,
        target_prefix: Optional[Union[str, Sequence[str]]] = None,
        constraints: Optional[Union[Sequence[str], Sequence[Sequence[str]]]] = None,
        sampling_topk: int = 1,
        sampling_topp: float = 1.0,
        sampling_temperature: float = 1.0,
        seed: int = 0,
        length_penalty_mode: Optional[str] = None,
        early_stopping: Optional[str] = None,
        force_end: Optional[bool] = None,
        _stacklevel: int = 2,
    ) -> List[Any]:
        """Translate several sentences (``batch_size`` at a time); a list of texts, or of
        :class:`Translation` with ``return_attention=True`` or ``n_best``. See :meth:`translate`.

        ``n_best=N`` keeps the ``N`` best hypotheses of beam search (``beam_size`` must be at least
        ``N``): each result is a :class:`Translation` (the best) whose
        :attr:`~Translation.hypotheses` hold the ``N`` best, best first, each with its text and
        :attr:`~Translation.score`.

        ``target_prefix``: text every translation starts with (one str for all, or one per
        sentence). ``constraints``: texts every translation must contain (a list of str for all, or
        one list per sentence; beam search, fewer than ``beam_size``); a translation that reached
        its output limit first has :attr:`Translation.constraints_missing` above 0.
        ``sampling_topk`` (> 1: draw each token among the k most likely), ``sampling_topp``,
        ``sampling_temperature``, ``seed``: sampling, as :class:`DecodeOptions` declares them.
        ``length_penalty_mode``, ``early_stopping``, ``force_end``: the beam rules, as
        :class:`DecodeOptions` declares them; left out (None), each of these and ``beam_size`` /
        ``length_penalty`` takes the translator's :attr:`decode_defaults`, else the default."""
        if isinstance(sentences, str):
            raise TypeError("Translator.translate_batch: expected a list of sentences, got a single string")
        max_output_tokens = _renamed_max_length(max_output_tokens, max_length, "Translator.translate_batch")
        sentences = list(sentences)
        batch_size = self.check("batch_size", batch_size)
        return_attention = _flag("Translator", "return_attention", return_attention)
        options = call_options(
            "Translator",
            self.decode_defaults,
            self.max_output_tokens,
            self.compute_type,
            beam_size=beam_size,
            length_penalty=length_penalty,
            max_output_tokens=max_output_tokens,
            n_best=n_best,
            sampling_topk=sampling_topk,
            sampling_topp=sampling_topp,
            sampling_temperature=sampling_temperature,
            seed=seed,
            length_penalty_mode=length_penalty_mode,
            early_stopping=early_stopping,
            force_end=force_end,
        )
        prefixes, wanted = search_ids(self, len(sentences), target_prefix, constraints, options.beam_size)
        encoded = [self._encoded(s, _stacklevel + 1) for s in sentences]
        results = translate_in_chunks(
            self, encoded, options, return_attention, prefixes, wanted, int(batch_size), self._thread_governor()
        )
        return _answers(results, n_best is not None, return_attention)

    def _thread_governor(self) -> Optional[ThreadGovernor]:
        """The thread governor of the next decode calls (None with ``adaptive_threads`` off or a
        single thread): one per translator, kept across calls and while ``adaptive_threads`` is off,
        so that what it learnt about the machine carries over."""
        governor = governor_for(self._governor, get_num_threads(), self.adaptive_threads)
        if governor is not None:
            self._governor = governor
        return governor
