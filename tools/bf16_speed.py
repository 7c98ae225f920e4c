"""Training speed of precision="bf16" against float32, same batches, alternating (not collected by pytest).

    python tools/bf16_speed.py --shapes quick --data spa.txt --threads 2
    python tools/bf16_speed.py --shapes tutorial --threads 2

``quick``: the quick preset's model (d_model 128, 2+2 layers, 4 heads, d_ff 512, decoder embedding
tied to the output layer) with subword vocabularies of about 4,000 tokens built from the data, and
real batches of at most 1,500 padded tokens (``max_tokens`` of the quick recipe) drawn from it.
``tutorial``: the bench's tutorial shapes (d_model 512, 4+4 layers, vocabularies 14,000/15,500,
batch 64 of random sentences of 4-15 tokens). ``--data`` is found as ``transformer-cpp train``
finds it: the option, else ``$TRANSFORMER_CPP_DATA``, else the cache, else the download.

Both models start from the same weights and take the same batches. Each round times ``--steps``
training steps of one precision, then of the other (the first alternates between rounds), and
prints target tokens per second (non-padding) of each and their ratio; the summary gives the
median over rounds. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import List, Optional, Tuple

import numpy as np

import transformer_cpp as tc
from transformer_cpp import kernels
from transformer_cpp.bench import TUTORIAL_SHAPES, make_batches


def quick_batches(path: Optional[str], pairs: int, count: int, seed: int) -> Tuple[dict, List[Tuple[np.ndarray, ...]]]:
    data = tc.load_tatoeba(path, num_samples=pairs, seed=seed)
    src_tok = tc.SubwordTokenizer.build_from_corpus(data.sources, 4000)
    tgt_tok = tc.SubwordTokenizer.build_from_corpus(data.targets, 4000)
    enc = tc.encode_pairs(data.sources, data.targets, src_tok, tgt_tok, 35)
    all_batches = list(tc.batches(enc, max_tokens=1500, seed=seed))
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(all_batches), size=min(count, len(all_batches)), replace=False)
    out = [(all_batches[i].src, all_batches[i].tgt_in, all_batches[i].tgt_out) for i in picked]
    config = dict(tc.preset_config("quick"), src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size)
    return config, out


def tutorial_batches(count: int, seed: int) -> Tuple[dict, List[Tuple[np.ndarray, ...]]]:
    config = TUTORIAL_SHAPES.model_config(seed)
    config.pop("seed")
    return config, [(b.src, b.tgt_in, b.tgt_out) for b in make_batches(TUTORIAL_SHAPES, count, seed)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", choices=("quick", "tutorial"), default="quick")
    p.add_argument(
        "--data", default=None, help="the quick shapes' pairs (default: $TRANSFORMER_CPP_DATA, the cache, the download)"
    )
    p.add_argument("--pairs", type=int, default=30000, help="pairs to build the vocabularies and batches from")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="timed steps per precision per round")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if not kernels.have_bf16():
        print(f"bf16 cannot run here: {kernels.bf16_unsupported_reason()}", file=sys.stderr)
        return 1
    tc.set_num_threads(args.threads)
    if args.shapes == "quick":
        config, batches = quick_batches(args.data, args.pairs, args.steps * 4, args.seed)
    else:
        config, batches = tutorial_batches(args.steps * 2, args.seed)
    config["seed"] = args.seed
    models = {p: tc.Transformer(**config, precision=p) for p in ("float32", "bf16")}
    for m in models.values():
        m.configure_optimizer(warmup=4000)
    tokens = [int(np.count_nonzero(b[2])) for b in batches]
    print(
        f"{args.shapes} shapes: {models['float32']!r}; {len(batches)} batches, "
        f"{statistics.mean(tokens):.0f} target tokens and {statistics.mean(b[2].size for b in batches):.0f} padded "
        f"positions each on average; {args.threads} threads"
    )
    for m in models.values():  # warm-up: buffers, packed panels, first-touch pages
        for b in batches[:2]:
            m.train_step(*b)
    rates = {p: [] for p in models}
    cursor = 0
    for r in range(args.rounds):
        order = ("float32", "bf16") if r % 2 == 0 else ("bf16", "float32")
        chosen = [batches[(cursor + i) % len(batches)] for i in range(args.steps)]
        cursor += args.steps
        n_tokens = sum(int(np.count_nonzero(b[2])) for b in chosen)
        for prec in order:
            m = models[prec]
            t0 = time.perf_counter()
            for b in chosen:
                m.train_step(*b)
            rates[prec].append(n_tokens / (time.perf_counter() - t0))
        print(
            f"round {r + 1}: float32 {rates['float32'][-1]:8.0f}  bf16 {rates['bf16'][-1]:8.0f} target tokens/s  "
            f"bf16/float32 {rates['bf16'][-1] / rates['float32'][-1]:.3f}",
            flush=True,
        )
    ratios = [b / f for b, f in zip(rates["bf16"], rates["float32"])]
    print(
        f"median: float32 {statistics.median(rates['float32']):.0f}, bf16 {statistics.median(rates['bf16']):.0f} "
        f"target tokens/s; bf16/float32 median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
