"""Draw docs/experiments.png (validation BLEU against training minutes) from docs/experiments.json."""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from transformer_cpp.plotting import bleu_by_minutes_plot  # noqa: E402

here = Path(__file__).resolve().parent
runs = json.loads((here / "experiments.json").read_text())
bleu_by_minutes_plot(runs).savefig(here / "experiments.png", dpi=80)
