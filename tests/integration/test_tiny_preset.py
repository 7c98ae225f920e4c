"""``train --preset tiny`` learns from a few thousand pairs within half a minute at one thread: its
warm-up ends within the first epochs and its batches fit a small file, so the translations follow
their input. The pairs are a grammar of made-up words (60 nouns, adjectives and verbs on each side:
"The A N V the N." -> "El N' A' V' el N'."), 3,000 of them. The preset's schedule translates the
validation pairs at BLEU 100 from its fifth epoch; a warm-up of 4,000 steps (batches of 64, 10
epochs: the schedule that never left its warm-up on such a file) ends under BLEU 10, so the
bound of 50 tells the two apart."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List

import numpy as np

from transformer_cpp.translate import Translator

from helpers.cli import run_cli


def _words(rng: np.random.Generator, n: int) -> List[str]:
    consonants, vowels = list("bcdfghjklmnprstvz"), list("aeiou")
    out: set = set()
    while len(out) < n:
        out.add("".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(int(rng.integers(2, 4)))))
    return sorted(out)


def _pairs_file(path: Path, n: int, k: int = 60) -> Path:
    rng = np.random.default_rng(0)
    en, es = _words(rng, 3 * k), _words(rng, 3 * k)
    nouns, adjectives, verbs = (list(zip(en[i * k : (i + 1) * k], es[i * k : (i + 1) * k])) for i in range(3))
    seen: set = set()
    lines: List[str] = []
    while len(lines) < n:
        (n1, s1), (a1, b1), (v, w), (n2, s2) = (x[int(rng.integers(len(x)))] for x in (nouns, adjectives, verbs, nouns))
        source = f"The {a1} {n1} {v} the {n2}."
        if source not in seen:
            seen.add(source)
            lines.append(f"{source}\tEl {s1} {b1} {w} el {s2}.\tCC-BY 2.0 (France) Attribution: #{len(lines)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_tiny_preset_learns_from_a_few_thousand_pairs(tmp_path):
    data = _pairs_file(tmp_path / "pairs.txt", 3000)
    out = tmp_path / "run"
    result = run_cli(
        "train", "--preset", "tiny", "--data", str(data), "--num-samples", "3000", "--time-budget", "0.5",
        "--threads", "1", "--no-progress", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    bleu = [float(b) for b in re.findall(r"val_bleu (\d+\.\d+)", result.stderr)]
    assert bleu and max(bleu) >= 50, result.stderr[-2000:]
    translator = Translator.from_checkpoint(out)
    sources = [line.split("\t")[0] for line in data.read_text(encoding="utf-8").splitlines()[:4]]
    texts = translator.translate_batch(sources)
    assert all(texts) and len(set(texts)) == len(texts), texts
