"""Peak memory of reading, splitting and encoding a large parallel corpus, against the size of the
encoded pairs: ``python tools/data_memory.py [PAIRS] [FILE]``.

Writes a generated tab-separated corpus of PAIRS sentence pairs (default 2,000,000) to FILE (kept
and reused when it is already there), then, in this process, takes the steps of a training run up
to the encoded pairs: read and clean (:func:`transformer_cpp.task.load_split`, which also splits by
source sentence), learn the vocabularies, choose the length limit and encode the three parts. The
peak resident memory (``ru_maxrss``) is printed after each step, less what the interpreter and the
libraries held before the first, and the size of the encoded arrays at the end.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import numpy as np


def write_corpus(path: Path, pairs: int, seed: int = 0) -> None:
    """Sentences of 3-14 words over two vocabularies of 6,000 generated words; the target is a
    word-by-word image of the source with some words dropped (lengths and repetitions of real pairs)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyzáéíóúñ"))
    vocab = ["".join(rng.choice(letters, size=int(rng.integers(2, 9)))) for _ in range(6000)]
    other = ["".join(rng.choice(letters, size=int(rng.integers(2, 9)))) for _ in range(6000)]
    zipf = 1.0 / np.arange(1, 6001)
    zipf /= zipf.sum()
    tmp = path.with_suffix(".part")
    with open(tmp, "w", encoding="utf-8") as f:
        for start in range(0, pairs, 100_000):
            n = min(100_000, pairs - start)
            lengths = rng.integers(3, 15, size=n)
            words = rng.choice(6000, size=int(lengths.sum()), p=zipf)
            lines = []
            at = 0
            for k in lengths:
                ids = words[at : at + k]
                at += k
                src = " ".join(vocab[i] for i in ids).capitalize() + "."
                tgt = " ".join(other[i] for i in ids[: max(2, k - 1)]).capitalize() + "."
                lines.append(f"{src}\t{tgt}\tCC-BY generated #{start}\n")
            f.write("".join(lines))
    tmp.replace(path)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    path = Path(sys.argv[2] if len(sys.argv) > 2 else f"corpus-{pairs}.tsv")
    if not path.is_file():
        print(f"writing {pairs:,} generated pairs to {path} ...", flush=True)
        write_corpus(path, pairs)
    from transformer_cpp import task
    from transformer_cpp.data import DataRecord

    print(f"file {path}: {path.stat().st_size / 2**20:,.0f} MB", flush=True)
    base = peak_mb()
    start = time.perf_counter()

    def step(name: str) -> None:
        print(
            f"{name:<28} peak {peak_mb() - base:8,.0f} MB above the {base:,.0f} MB before  "
            f"({time.perf_counter() - start:6.1f} s)",
            flush=True,
        )

    record = DataRecord(src_lang="es", tgt_lang="en", vocab_size=4000).check()
    split, record = task.load_split(str(path), record, task.quiet)
    step("read, clean, split")
    src_tok, tgt_tok = task.build_tokenizers(split, record, task.quiet)
    step("vocabularies")
    max_length = task.choose_max_length(split, src_tok, tgt_tok, 0, task.quiet)
    step(f"length limit ({max_length})")
    encoded = [task.encode_split(split, name, src_tok, tgt_tok, max_length) for name in ("train", "valid", "test")]
    step("encoded")
    size = sum(
        a.nbytes for e in encoded if e is not None for a in (e.src, e.tgt, e.src_lengths, e.tgt_lengths, e.indices)
    )
    print(f"encoded pairs: {sum(len(e) for e in encoded if e is not None):,}, {size / 2**20:,.0f} MB")
    print(f"peak above the start / encoded size: {(peak_mb() - base) * 2**20 / size:.2f}")


if __name__ == "__main__":
    main()
