"""Published models of other toolkits read into a :class:`~transformer_cpp.Transformer`.

:func:`load_marian` reads a Hugging Face MarianMT (OPUS-MT) directory; :func:`import_pretrained`
writes one (or a Hub name) as a run directory; :func:`load_pretrained` reads it all into memory.
"""

from __future__ import annotations

from .importing import PROVENANCE_FILE, PretrainedParts, import_pretrained, load_pretrained, resolve_source
from .marian import MARIAN_ACTIVATIONS, load_marian, marian_config

__all__ = [
    "MARIAN_ACTIVATIONS",
    "PROVENANCE_FILE",
    "PretrainedParts",
    "import_pretrained",
    "load_marian",
    "load_pretrained",
    "marian_config",
    "resolve_source",
]
