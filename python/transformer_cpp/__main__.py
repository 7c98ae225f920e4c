"""``python -m transformer_cpp`` runs the command line (see ``transformer_cpp.cli``)."""

from .cli import main

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
