"""Draw docs/experiments.png from docs/experiments.json: validation BLEU against training minutes,
in small panels of a few runs each (the runs compared with one another, on one CPU and one
validation scale), each run labelled by what it changed.

    python docs/plot_experiments.py [--out docs/experiments.png]

Each run of the JSON file has ``name`` (what it changed), ``panels`` (where it is drawn, 1-8), ``cpu``, ``date``,
``threads``, ``validation_pairs`` (``"shortest"``: greedy BLEU on the 500 shortest validation
pairs; ``"spread"``: on 500 pairs spread over the validation split; the two scales differ by 4-6
BLEU, so a panel holds one of them) and ``epoch`` (``minutes`` and ``val_bleu`` after each epoch).
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent

# panel -> title (what the panel compares)
PANELS = {
    1: "10 minutes: vocabularies and batch sizes",
    2: "10 minutes: dropout, tied embeddings, learning rate",
    3: "The compute of 10 minutes on 2 threads: model width",
    4: "The quick preset: post-norm and pre-norm",
    5: "One hour: the standard recipe",
    6: "One hour: tied decoder embedding",
    7: "One hour: larger, deeper, more regularised",
    8: "One hour: pre-norm",
}
SCALES = {
    "shortest": "validation BLEU, greedy\n(500 shortest pairs)",
    "spread": "validation BLEU, greedy\n(500 pairs spread over the split)",
}
STYLES = ["o-", "s-", "^-", "D-", "v-", "P-", "X-", "*-"]


def draw(runs: dict, out: Path) -> None:
    fig, axes = plt.subplots(2, 4, figsize=(22, 12.5))
    for number, ax in zip(sorted(PANELS), axes.flat):
        members = [r for r in runs.values() if number in r["panels"]]
        if not members:
            raise ValueError(f"panel {number} has no runs")
        scales = {r["validation_pairs"] for r in members}
        cpus = {r["cpu"] for r in members}
        if len(scales) != 1 or len(cpus) != 1:
            raise ValueError(f"panel {number} mixes validation scales {scales} or CPUs {cpus}")
        dates = sorted({r["date"] for r in members})
        for i, run in enumerate(members):
            threads = f"{run['threads']} thread{'s' if run['threads'] > 1 else ''}"
            label = "\n".join(textwrap.wrap(f"{run['name']} ({threads})", 48))
            ax.plot(
                run["epoch"]["minutes"],
                run["epoch"]["val_bleu"],
                STYLES[i % len(STYLES)],
                ms=4,
                lw=1.4,
                label=label,
                color=f"C{i}",
            )
        when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}"
        ax.set_title(f"{PANELS[number]}\n{cpus.pop()}\n{when}", fontsize=10.5)
        ax.set_xlabel("training minutes")
        ax.set_ylabel(SCALES[scales.pop()])
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), frameon=False)
    fig.suptitle(
        "Validation BLEU against training minutes (English to Spanish, Tatoeba); "
        "docs/experiments.md describes every run",
        fontsize=13,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.97), h_pad=2.0)
    fig.savefig(out, dpi=72)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=HERE / "experiments.json")
    parser.add_argument("--out", type=Path, default=HERE / "experiments.png")
    args = parser.parse_args()
    draw(json.loads(args.data.read_text(encoding="utf-8")), args.out)


if __name__ == "__main__":
    main()
