"""The two models, thin Python classes over the C++ ones: the encoder-decoder
:class:`Transformer` (:mod:`.transformer`) and the decoder-only :class:`LanguageModel`
(:mod:`.language_model`), on what they share (:class:`CoreModel`, :mod:`.base`);
:data:`NonFiniteError` is what either raises on NaN or infinity."""

from .base import CoreModel, NonFiniteError
from .language_model import LanguageModel
from .transformer import DEFAULT_LENGTH_PENALTY, Transformer

__all__ = ["DEFAULT_LENGTH_PENALTY", "CoreModel", "LanguageModel", "NonFiniteError", "Transformer"]
