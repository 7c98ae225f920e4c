"""Where the tests find the Tatoeba data.

As ``transformer-cpp train`` does: ``TRANSFORMER_CPP_DATA`` when it is set (how an offline
machine points at a local copy), else the cache, else the download. When the variable is unset
and a copy sits at ``../shared/data/spa-eng/spa.txt`` beside the repository (the layout of the
offline machines that run CI), the tests use that copy, so the suite never downloads there.
Without any of them the real-data tests fail with the message of ``load_tatoeba`` (nothing skips).
"""

from __future__ import annotations

import os
from pathlib import Path

from transformer_cpp.data import DATA_ENV_VAR

_SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "spa-eng" / "spa.txt"

if not os.environ.get(DATA_ENV_VAR) and _SHARED.is_file():
    os.environ[DATA_ENV_VAR] = str(_SHARED)
