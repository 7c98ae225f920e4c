"""Translation: one decode path (:func:`decode_rows` with :class:`DecodeOptions`), the
:class:`Translator` built on it (its batches through :func:`translate_encoded` in :mod:`.batch`,
which the server calls too), and the evaluation of a model on held-out pairs.

``transformer_cpp.translate`` is the package's inference layer: it sits above the model, the
tokenizers, the data and the checkpoints, and below training (whose validation BLEU calls
:func:`bleu_of_encoded`), the server and the command line.
"""

from .decoding import (
    COMPUTE_TYPES,
    DecodeOptions,
    Hypothesis,
    check_compute_type,
    decode_rows,
    greedy_decode,
    greedy_decode_reference,
    greedy_reference,
    one_line,
    output_limit,
    pad_rows,
)
from .evaluation import EvaluationResult, bleu_of_encoded, bleu_tokenizer, evaluate, evaluate_loss, order_losses
from .batch import EncodedSource, LongInputWarning, Translation, encode_source, token_piece, translate_encoded
from .translator import Translator

__all__ = [
    "COMPUTE_TYPES",
    "DecodeOptions",
    "EncodedSource",
    "EvaluationResult",
    "Hypothesis",
    "LongInputWarning",
    "Translation",
    "Translator",
    "bleu_of_encoded",
    "bleu_tokenizer",
    "check_compute_type",
    "decode_rows",
    "encode_source",
    "evaluate",
    "evaluate_loss",
    "order_losses",
    "greedy_decode",
    "greedy_decode_reference",
    "greedy_reference",
    "one_line",
    "output_limit",
    "pad_rows",
    "token_piece",
    "translate_encoded",
]
