"""``python -m transformer_cpp.serve --model DIR [options]``: the ``transformer-cpp serve`` command
(:mod:`transformer_cpp.cli.serve`)."""

from ..cli.serve import main

raise SystemExit(main())
