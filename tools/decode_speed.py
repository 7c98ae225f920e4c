"""Greedy decoding speed of two builds of the package, alternating (not collected by pytest).

    python tools/decode_speed.py --shapes tutorial --threads 2 \
        --python ../baseline/.venv/bin/python --python .venv/bin/python

Each ``--python`` is an interpreter whose ``transformer_cpp`` is one build (the first is the
baseline). Every worker builds the same model (``tutorial``: the bench's tutorial shapes, d_model
512, 4 layers, vocabularies of 14,000 / 15,500; ``quick``: the quick preset, d_model 128, 2
layers, d_ff 512, tied output layer, vocabularies of 4,000) from the same seed and decodes the same
random source sentences (4 to 15 tokens, as the bench's decoding section, ``max_length`` 15). In each
round, for every case (batch size x compute type), the workers take turns (the order alternates) to
greedy-decode all the sentences at that batch size and report sentences per second and a digest of
the outputs (``--cpu-time``: per second of the worker's CPU time, which with ``--threads 1`` is the
work done whatever else runs on the machine). The summary gives each build's median rate per case,
the median of the per-round ratios new/baseline, and whether the builds decoded the same tokens.
Nothing is asserted.

``--isa`` runs the builds at forced instruction-set levels (``TRANSFORMER_CPP_ISA``), one level for
every build or one per ``--python``: ``--python .venv/bin/python --python .venv/bin/python --isa
generic,avx2`` compares one build's generic path with its AVX2 kernels.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

SHAPES = {
    "tutorial": dict(src_vocab_size=14000, tgt_vocab_size=15500, d_model=512, n_layers=4, n_heads=8, d_ff=512),
    "quick": dict(
        src_vocab_size=4000, tgt_vocab_size=4000, d_model=128, n_layers=2, n_heads=4, d_ff=512, share_embeddings=True
    ),
}
START, END, MAX_LENGTH = 1, 2, 15


def sentences(vocab: int, count: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab, size=int(rng.integers(4, MAX_LENGTH + 1))) for _ in range(count)]


def pad(rows: list) -> np.ndarray:
    out = np.zeros((len(rows), max(len(r) for r in rows)), np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def worker(args: argparse.Namespace) -> int:
    import transformer_cpp as tc

    tc.set_num_threads(args.threads)
    config = SHAPES[args.shapes]
    model = tc.Transformer(**config, dropout=0.0, max_length=64, seed=args.seed)
    sents = sentences(config["src_vocab_size"], args.sentences, args.seed + 1)
    cases = json.loads(args.cases)
    chunks = {bs: [pad(sents[i : i + bs]) for i in range(0, len(sents), bs)] for bs, _ in cases}
    for bs, ct in cases:  # warm-up: prepared weights, buffers, first-touch pages
        model.greedy_decode(chunks[bs][0], START, END, MAX_LENGTH, compute_type=ct)
    print("ready", flush=True)
    for line in sys.stdin:
        bs, ct = cases[int(line)]
        digest = hashlib.sha1()
        t0, c0 = time.perf_counter(), time.process_time()
        outs = [model.greedy_decode(c, START, END, MAX_LENGTH, compute_type=ct) for c in chunks[bs]]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        for o in outs:
            digest.update(np.ascontiguousarray(o).tobytes())
        print(f"{len(sents) / (cpu if args.cpu_time else wall)} {digest.hexdigest()[:12]}", flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", choices=sorted(SHAPES), default="tutorial")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sentences", type=int, default=128)
    p.add_argument("--batches", default="1,32", help="batch sizes, comma-separated")
    p.add_argument("--compute-types", default="float32,int8,bf16")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--cpu-time",
        action="store_true",
        help="rates per second of the process's CPU time, not of wall time (with --threads 1: the work done, "
        "whatever else runs on the machine)",
    )
    p.add_argument("--python", action="append", help="an interpreter per build (first: baseline)")
    p.add_argument(
        "--isa",
        default=None,
        help="TRANSFORMER_CPP_ISA for the builds (avx512, avx2, generic): one level, or one per --python, comma-separated",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cases", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    cases = [(int(b), c) for b in args.batches.split(",") for c in args.compute_types.split(",")]
    pythons = args.python or [sys.executable]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    levels = args.isa.split(",") if args.isa else [None]
    if len(levels) == 1:
        levels = levels * len(pythons)
    if len(levels) != len(pythons):
        p.error(f"--isa: {len(levels)} levels for {len(pythons)} builds")
    tmp = tempfile.mkdtemp(prefix="decode_speed_")
    procs = []
    for py, level in zip(pythons, levels):
        worker_env = dict(env, TRANSFORMER_CPP_ISA=level) if level else env
        cmd = [os.path.abspath(py) if os.sep in py else py, os.path.abspath(__file__), "--worker"]
        cmd += ["--shapes", args.shapes, "--threads", str(args.threads), "--sentences", str(args.sentences)]
        cmd += ["--seed", str(args.seed), "--cases", json.dumps(cases)] + (["--cpu-time"] if args.cpu_time else [])
        procs.append(
            subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=worker_env, cwd=tmp)
        )
    for pr in procs:
        assert pr.stdout.readline().strip() == "ready"
    clock = "CPU" if args.cpu_time else "wall"
    print(
        f"{args.shapes} shapes, {args.threads} threads, {args.sentences} sentences, {clock} time, load {os.getloadavg()[0]:.2f}"
        + (f", levels {args.isa}" if args.isa else "")
    )
    rates = {case: [[] for _ in procs] for case in cases}
    digests = {case: [set() for _ in procs] for case in cases}
    for r in range(args.rounds):
        line = f"round {r + 1}:"
        for i, case in enumerate(cases):
            order = list(range(len(procs)))
            if (r + i) % 2:
                order.reverse()
            for k in order:
                procs[k].stdin.write(f"{i}\n")
                procs[k].stdin.flush()
                rate, digest = procs[k].stdout.readline().split()
                rates[case][k].append(float(rate))
                digests[case][k].add(digest)
            line += f"  b{case[0]} {case[1]} " + "/".join(f"{rs[-1]:.1f}" for rs in rates[case])
        print(line, flush=True)
    for pr in procs:
        pr.stdin.close()
        pr.wait()
    print(f"median sentences/s per build (ratio: median of the per-round new/baseline); load {os.getloadavg()[0]:.2f}")
    for case in cases:
        rs = rates[case]
        line = f"batch {case[0]:3d} {case[1]:8s} " + "  ".join(f"{statistics.median(x):9.1f}" for x in rs)
        for x in rs[1:]:
            ratios = [a / b for a, b in zip(x, rs[0])]
            line += f"  ratio {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
        same = all(d == digests[case][0] and len(d) == 1 for d in digests[case])
        print(line + ("  same tokens" if same else "  DIFFERENT tokens"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
