"""The two models, thin Python classes over the C++ ones: the encoder-decoder
:class:`Transformer` (:mod:`.transformer`) and the decoder-only :class:`LanguageModel`
(:mod:`.language_model`); :data:`NonFiniteError` is what either raises on NaN or infinity."""

from .language_model import LanguageModel
from .transformer import DEFAULT_LENGTH_PENALTY, NonFiniteError, Transformer

__all__ = ["DEFAULT_LENGTH_PENALTY", "LanguageModel", "NonFiniteError", "Transformer"]
