"""``python -m transformer_cpp.bench [options]``: the ``transformer-cpp bench`` command
(:mod:`transformer_cpp.cli.bench`)."""

from ..cli.bench import main

raise SystemExit(main())
