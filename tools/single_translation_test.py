"""Write the part of a run's test split whose English sentences have one translation in the file.

Usage: python tools/single_translation_test.py RUN_DIR OUT.tsv   (a run directory or one checkpoint of it)
then:  transformer-cpp evaluate --model RUN_DIR/averaged --pairs OUT.tsv --beam-size 4

Why: issue 9 gives, "for scale", a score taken on the pairs of a *random* (pair-by-pair) test split
whose English sentence does not occur in training. An English sentence with several Spanish
translations almost never has all of them fall into a small random test part, so that measure
keeps mostly sentences with a single translation, where one reference is all there is. This
project's test split keeps every translation of a sentence together, so single-reference BLEU
counts each correct alternative ("Guarda esto." for the reference "Guardad esto.") as an error.
Scoring only the test pairs whose English sentence has exactly one translation in the whole
data file makes the two measures comparable. It is a subset of the leak-free test split (the
run never trained on any of it); the targets are judged on the whole split.
"""

import collections
import json
import sys
from pathlib import Path

from transformer_cpp.checkpoint import CheckpointError, resolve_checkpoint
from transformer_cpp.task import split_digest
from transformer_cpp.data import sentence_key, load_tatoeba, split_by_source
from transformer_cpp.text import clean_corpus


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    run, out = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        checkpoint = resolve_checkpoint(run)  # a checkpoint, or the one a run's 'latest' names
    except CheckpointError as exc:
        sys.exit(str(exc))
    info = json.loads((checkpoint / "config.json").read_text())["data"]
    if info.get("split") != "by-source" or info.get("num_samples"):
        sys.exit(f"{checkpoint}: this tool rebuilds only by-source splits of the whole file")
    pairs = load_tatoeba(info["path"], encoding=info.get("encoding", "utf-8"))
    sources = clean_corpus(pairs.english, info["src_lang"])
    targets = clean_corpus(pairs.spanish, info["tgt_lang"])
    split = split_by_source(sources, targets, info["valid_fraction"], info["test_fraction"], seed=info["split_seed"])
    test = ([sources[i] for i in split.test], [targets[i] for i in split.test])
    recorded = (info.get("split_digests") or {}).get("test")
    if recorded is not None and split_digest(*test) != recorded:
        sys.exit(f"{info['path']}: the test split rebuilt from it is not the one the run held out (the file changed)")
    translations = collections.Counter(sentence_key(s) for s in sources)
    kept = [i for i in split.test if translations[sentence_key(sources[i])] == 1]
    with open(out, "w", encoding="utf-8") as f:
        for i in kept:
            f.write(f"{pairs.english[i]}\t{pairs.spanish[i]}\n")
    print(f"{len(kept):,} of {len(split.test):,} test pairs have an English sentence with one translation: {out}")


if __name__ == "__main__":
    main()
