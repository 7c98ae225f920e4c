"""The test suite's layout, and where the tests find the Tatoeba data.

The tests are in folders by what they test:

* ``unit/``: one module, layer or kernel against its reference (NumPy written from the formula,
  central finite differences, PyTorch), the tokenizer, text, data, configuration, checkpoints,
  decoding, the C++ tests;
* ``integration/``: whole workflows: training, translation, the command line, the server, the
  exports, MPI, the notebooks, the benchmark, the language-model task;
* ``properties/``: generated and hostile input: the Hypothesis fuzz suite, any writing system,
  the hostile-input case table;
* ``repo/``: the repository itself: linters, types, the documentation, the stubs, the public API,
  the import layers.

What they share is the package ``helpers/`` (toy tasks, gradient checks, the command line in a
subprocess, the hostile-input cases), imported as ``helpers.<module>``: ``tests/`` is on the path
(``pythonpath`` in pyproject.toml).

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
