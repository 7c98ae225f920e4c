"""Where the tests find the Tatoeba data: the same place as the README's main job.

The main job reads ``${TRANSFORMER_CPP_DATA:-../shared/data/spa-eng/spa.txt}`` (relative to the
repository root). When ``TRANSFORMER_CPP_DATA`` is unset, the tests point it at that same file, so
``python -m pytest`` needs no set-up and never downloads anything. Without the file and the
variable, the real-data tests fail with the message of ``load_tatoeba`` (nothing skips in CI).
"""

from __future__ import annotations

import os
from pathlib import Path

from transformer_cpp.data import DATA_ENV_VAR

_SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "spa-eng" / "spa.txt"

if not os.environ.get(DATA_ENV_VAR) and _SHARED.is_file():
    os.environ[DATA_ENV_VAR] = str(_SHARED)
