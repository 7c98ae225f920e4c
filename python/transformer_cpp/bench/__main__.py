"""``python -m transformer_cpp.bench [options]``: the options of ``transformer-cpp bench``."""

from .cli import main

raise SystemExit(main())
