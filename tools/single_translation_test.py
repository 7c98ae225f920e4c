"""Write the part of a run's test split whose source sentences have one translation in the file.

Usage: python tools/single_translation_test.py RUN_DIR OUT.tsv   (a run directory or one checkpoint of it)
then:  transformer-cpp evaluate --model RUN_DIR/averaged --pairs OUT.tsv --beam-size 4

Why: scores published for Tatoeba are often taken on a random (pair-by-pair) test split, keeping
the pairs whose source sentence does not occur in training. A sentence with several translations
almost never has all of them fall into a small random test part, so that measure keeps mostly
sentences with a single translation, where one reference is all there is. This package's test
split keeps every translation of a sentence together, so single-reference BLEU counts each correct
alternative ("Guarda esto." for the reference "Guardad esto.") as an error. Scoring only the test
pairs whose source sentence has exactly one translation in the whole data file makes the two
measures comparable. It is a subset of the leak-free test split: the run never trained on any of it.
"""

import collections
import json
import sys
from pathlib import Path

from transformer_cpp import task
from transformer_cpp.checkpoint import CheckpointError, resolve_checkpoint
from transformer_cpp.data import SPLIT_BY_SOURCE, DataRecord, sentence_key
from transformer_cpp.text import clean_corpus


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    run, out = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        checkpoint = resolve_checkpoint(run)  # a checkpoint, or the one a run's 'latest' names
    except CheckpointError as exc:
        sys.exit(str(exc))
    record = DataRecord.from_dict(json.loads((checkpoint / "config.json").read_text())["data"])
    if record.split != SPLIT_BY_SOURCE:
        sys.exit(f"{checkpoint}: this tool rebuilds only splits by source sentence")
    try:
        pairs = task.load_pairs(
            record.path,
            record,
            task.quiet,
            num_samples=record.num_samples or None,
            sampling=record.sampling,
            seed=record.split_seed,
        )
        sources = clean_corpus(pairs.sources, record.src_lang)
        targets = clean_corpus(pairs.targets, record.tgt_lang)
        split, rebuilt = task.split_sentences(sources, targets, record, task.quiet)
        task.check_same_split("test", record, rebuilt.replace(path=record.path, pairs_loaded=len(pairs)))
    except (OSError, ValueError) as exc:
        sys.exit(str(exc))
    translations = collections.Counter(sentence_key(s) for s in sources)
    test_sources, test_targets = split.test
    kept = [(s, t) for s, t in zip(test_sources, test_targets) if translations[sentence_key(s)] == 1]
    with open(out, "w", encoding="utf-8") as f:
        for s, t in kept:
            f.write(f"{s}\t{t}\n")
    print(f"{len(kept):,} of {len(test_sources):,} test pairs have a source sentence with one translation: {out}")


if __name__ == "__main__":
    main()
