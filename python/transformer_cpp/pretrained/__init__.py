"""Published models of other toolkits read into a :class:`~transformer_cpp.Transformer`.

:func:`load_marian` reads a Hugging Face MarianMT (OPUS-MT) directory.
"""

from __future__ import annotations

from .marian import MARIAN_ACTIVATIONS, load_marian, marian_config

__all__ = ["MARIAN_ACTIVATIONS", "load_marian", "marian_config"]
