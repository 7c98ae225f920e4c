"""Render the README's figures into docs/: the positional-encoding heat map and cosine
similarity (no model needed), and, from a trained run, a cross-attention map of one translation
and the training curve (loss, accuracy, validation BLEU).

    python docs/make_figures.py --run runs/quick          # a run of the quick preset
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")

from transformer_cpp import positional_encoding  # noqa: E402
from transformer_cpp.plotting import (
    attention_heatmap,
    cosine_similarity_plot,
    history_plot,  # noqa: E402
    positional_encoding_heatmap,
)
from transformer_cpp.translate import Translator  # noqa: E402

DOCS = pathlib.Path(__file__).resolve().parent
SENTENCE = "This is a really powerful method!"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, help="a training run directory (its best checkpoint translates)")
    p.add_argument("--out", default=str(DOCS), help="where the PNG files go (default: docs/)")
    p.add_argument("--sentence", default=SENTENCE, help="the sentence whose attention is drawn")
    args = p.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    pe = positional_encoding(2048, 512)
    figures = {
        "pe_heatmap.png": positional_encoding_heatmap(pe, position_axis="x"),
        "pe_cosine_similarity.png": cosine_similarity_plot(pe, position=1000, zoom=(950, 1050)),
    }
    translator = Translator.from_checkpoint(args.run)
    result = translator.translate(args.sentence, beam_size=4, return_attention=True)  # beam 4, as in the docs
    name = sorted(result.attention)[-1]  # the last decoder layer's cross-attention
    weights = result.attention[name].mean(axis=0)  # averaged over the heads
    figures["attention.png"] = attention_heatmap(
        weights,
        x_labels=result.source_pieces,
        y_labels=result.target_pieces,
        title=f"{result.source}\n→ {result.text}\n(cross-attention, last decoder layer, mean of heads)",
    )
    run = pathlib.Path(args.run)
    latest = run / (run / "latest").read_text(encoding="utf-8").strip() if (run / "latest").is_file() else run
    state_path = latest / "trainer_state.json"  # the whole run's history (best may be earlier)
    history = json.loads(state_path.read_text(encoding="utf-8"))["history"]
    figures["training_curve.png"] = history_plot(history)
    for file, fig in figures.items():
        fig.savefig(out / file, dpi=60 if file == "pe_heatmap.png" else 80)
        print(out / file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
