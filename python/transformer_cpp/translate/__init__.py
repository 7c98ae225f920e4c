"""Translation: one decode path (:func:`decode_rows` with :class:`DecodeOptions`), the
:class:`Translator` built on it (its batches through :func:`translate_encoded` in :mod:`.batch`,
which the server calls too), and the evaluation of a model on held-out pairs.

``transformer_cpp.translate`` is the package's inference layer: it sits above the model, the
tokenizers, the data and the checkpoints, and below training (whose validation BLEU calls
:func:`bleu_of_encoded`), the server and the command line.
"""

from . import decoding, evaluation
from .decoding import *  # noqa: F403  (decoding.__all__)
from .evaluation import *  # noqa: F403  (evaluation.__all__)
from .batch import EncodedSource, LongInputWarning, Translation, encode_source, token_piece, translate_encoded
from .translator import Translator

__all__ = [
    "EncodedSource",
    "LongInputWarning",
    "Translation",
    "Translator",
    "encode_source",
    "token_piece",
    "translate_encoded",
]
__all__ += decoding.__all__
__all__ += evaluation.__all__
