"""Float32 training speed of two builds of the package, alternating (not collected by pytest).

    python tools/train_speed.py --shapes quick --threads 2 \
        --python ../baseline/.venv/bin/python --python .venv/bin/python

Each ``--python`` is an interpreter whose ``transformer_cpp`` is one build (the first is the
baseline). The parent writes the batches once (``quick``: the quick preset with ~4,000-token
subword vocabularies and token batches of at most 1,500 padded tokens from Tatoeba; ``tutorial``:
the bench's tutorial shapes), starts one worker per interpreter (same config, same seed, same
batches, warmed up), then in each round tells each worker in turn (the order alternates) to time
``--steps`` training steps and report target tokens per second. The summary gives each build's
median rate and the median of the per-round ratios new/baseline. Nothing is asserted. ``--data``
(the quick shapes' pairs) is found as ``transformer-cpp train`` finds it: the option, else
``$TRANSFORMER_CPP_DATA``, else the cache, else the download.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def write_batches(shapes: str, data: str, pairs: int, count: int, seed: int, path: str) -> dict:
    import transformer_cpp as tc

    if shapes == "quick":
        d = tc.load_tatoeba(data, num_samples=pairs, seed=seed)
        src_tok = tc.SubwordTokenizer.build_from_corpus(d.sources, 4000)
        tgt_tok = tc.SubwordTokenizer.build_from_corpus(d.targets, 4000)
        enc = tc.encode_pairs(d.sources, d.targets, src_tok, tgt_tok, 35)
        every = list(tc.batches(enc, max_tokens=1500, seed=seed))
        rng = np.random.default_rng(seed)
        picked = rng.choice(len(every), size=min(count, len(every)), replace=False)
        batches = [(every[i].src, every[i].tgt_in, every[i].tgt_out) for i in picked]
        config = dict(tc.preset_config("quick"), src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size)
    else:
        from transformer_cpp.bench import TUTORIAL_SHAPES, make_batches

        config = TUTORIAL_SHAPES.model_config(seed)
        config.pop("seed")
        batches = [(b.src, b.tgt_in, b.tgt_out) for b in make_batches(TUTORIAL_SHAPES, count, seed)]
    arrays = {}
    for i, b in enumerate(batches):
        for name, a in zip(("src", "tgt_in", "tgt_out"), b):
            arrays[f"{name}{i}"] = a
    np.savez(path, **arrays)
    return config


def worker(args: argparse.Namespace) -> int:
    import transformer_cpp as tc

    config = json.loads(args.config)
    tc.set_num_threads(args.threads)
    z = np.load(args.batches)
    n = len([k for k in z.files if k.startswith("src")])
    batches = [(z[f"src{i}"], z[f"tgt_in{i}"], z[f"tgt_out{i}"]) for i in range(n)]
    model = tc.Transformer(**config, seed=args.seed)
    # the recipes' optimiser settings (quick: label smoothing 0.1, which the loss pass computes)
    if args.shapes == "quick":
        model.configure_optimizer(warmup=600, lr_scale=0.8, label_smoothing=0.1)
    else:
        model.configure_optimizer(warmup=4000)
    for b in batches[:3]:  # warm-up: buffers, first-touch pages
        model.train_step(*b)
    cursor = 0
    print("ready", flush=True)
    for line in sys.stdin:
        steps = int(line)
        chosen = [batches[(cursor + i) % n] for i in range(steps)]
        cursor += steps
        tokens = sum(int(np.count_nonzero(b[2])) for b in chosen)
        t0 = time.perf_counter()
        for b in chosen:
            model.train_step(*b)
        print(tokens / (time.perf_counter() - t0), flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", choices=("quick", "tutorial"), default="quick")
    p.add_argument(
        "--data", default=None, help="the quick shapes' pairs (default: $TRANSFORMER_CPP_DATA, the cache, the download)"
    )
    p.add_argument("--pairs", type=int, default=30000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="timed steps per build per round")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--python", action="append", help="an interpreter per build (first: baseline)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--batches", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    pythons = args.python or [sys.executable]
    tmp = tempfile.mkdtemp(prefix="train_speed_")
    path = os.path.join(tmp, "batches.npz")
    config = write_batches(args.shapes, args.data, args.pairs, 40 if args.shapes == "quick" else 20, args.seed, path)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    procs = []
    for py in pythons:
        cmd = [
            py,
            os.path.abspath(__file__),
            "--worker",
            "--config",
            json.dumps(config),
            "--batches",
            path,
            "--threads",
            str(args.threads),
            "--seed",
            str(args.seed),
            "--shapes",
            args.shapes,
        ]
        cmd[0] = os.path.abspath(py) if os.sep in py else py
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tmp))
    for pr in procs:
        assert pr.stdout.readline().strip() == "ready"
    print(f"{args.shapes} shapes, {args.threads} threads, load {os.getloadavg()[0]:.2f}", flush=True)
    rates = [[] for _ in procs]
    for r in range(args.rounds):
        order = list(range(len(procs)))
        if r % 2:
            order.reverse()
        for k in order:
            procs[k].stdin.write(f"{args.steps}\n")
            procs[k].stdin.flush()
            rates[k].append(float(procs[k].stdout.readline()))
        print(
            f"round {r + 1}: "
            + "  ".join(f"{rs[-1]:8.0f}" for rs in rates)
            + "".join(f"  ratio {rs[-1] / rates[0][-1]:.3f}" for rs in rates[1:]),
            flush=True,
        )
    for pr in procs:
        pr.stdin.close()
        pr.wait()
    summary = "median target tokens/s: " + ", ".join(f"{statistics.median(rs):.0f}" for rs in rates)
    for rs in rates[1:]:
        ratios = [a / b for a, b in zip(rs, rates[0])]
        summary += f"; ratio median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"
    print(summary + f"; load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
