"""``python -m transformer_cpp.serve --model DIR [options]``: the ``transformer-cpp serve`` command."""

from .command import main

raise SystemExit(main())
