"""Reformer's duplication task for the language model (not collected by pytest).

    python tools/duplication_task.py --attention lsh --lsh-hashes 4 --time-budget 300 --threads 1 --stop-at 0.99

Each sequence is a separator, `--length` random symbols, the separator again and the same
symbols once more: ``S w1 .. wL S w1 .. wL`` (Kitaev et al. 2020, Sec. 5, with the separator as
a symbol of its own since id 0 is padding). The first half cannot be predicted; the second half
can be, by finding the earlier copy. The loss and the accuracy count the copy half only: the
predictions of w1 .. wL after the second separator. Training uses the model's forward and backward
with that masked loss and Adam (`transformer_cpp.optim.Adam`), warm-up then a constant rate, and
gradient clipping at 1. Every `--eval-every` steps it prints the copy accuracy on a fixed set of
held-out sequences; at the end the accuracy, steps and seconds as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Dict, Tuple

import numpy as np


def duplication_batch(rng: np.random.Generator, batch: int, length: int, symbols: int) -> np.ndarray:
    """(batch, 2 * length + 2) int64 sequences S w S w: symbols are ids 1 .. symbols, S is
    symbols + 1."""
    w = rng.integers(1, symbols + 1, size=(batch, length), dtype=np.int64)
    sep = np.full((batch, 1), symbols + 1, dtype=np.int64)
    return np.concatenate([sep, w, sep, w], axis=1)


def copy_rows(length: int) -> slice:
    """The input positions whose next token is a copied symbol: the second separator (position
    length + 1) up to the last symbol but one."""
    return slice(length + 1, 2 * length + 1)


def copy_loss(logits: np.ndarray, tokens: np.ndarray, length: int) -> Tuple[float, float, np.ndarray]:
    """Mean cross-entropy and accuracy of the copy half, and d loss / d logits (zero elsewhere).
    logits (B, T, V) of inputs tokens[:, :-1]."""
    rows = copy_rows(length)
    z = logits[:, rows].astype(np.float64)
    labels = tokens[:, 1:][:, rows]
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=-1, keepdims=True)
    b, t = np.indices(labels.shape)
    count = labels.size
    loss = float(-np.log(p[b, t, labels]).mean())
    accuracy = float((p.argmax(axis=-1) == labels).mean())
    grad = np.zeros_like(logits)
    d = p
    d[b, t, labels] -= 1.0
    grad[:, rows] = (d / count).astype(logits.dtype)
    return loss, accuracy, grad


def evaluate(lm, tokens: np.ndarray, length: int, batch: int = 64) -> float:
    """Copy accuracy over ``tokens`` (inference mode)."""
    right = 0
    for i in range(0, len(tokens), batch):
        part = tokens[i : i + batch]
        logits = lm.forward(part[:, :-1])
        rows = copy_rows(length)
        right += int((logits[:, rows].argmax(axis=-1) == part[:, 1:][:, rows]).sum())
    return right / (len(tokens) * length)


def train(args: argparse.Namespace) -> Dict[str, float]:
    from transformer_cpp import LanguageModel, set_num_threads
    from transformer_cpp.optim import Adam

    set_num_threads(args.threads)
    seq = 2 * args.length + 1  # inputs per sequence
    lm = LanguageModel(
        args.symbols + 2,
        d_model=args.d_model,
        n_layers=args.n_layers,
        n_heads=args.n_heads,
        d_ff=args.d_ff,
        dropout=0.0,
        max_len=seq,
        attention=args.attention,
        lsh_hashes=args.lsh_hashes,
        lsh_chunk=args.lsh_chunk,
        lsh_buckets=args.lsh_buckets,
        reversible=args.reversible,
        seed=args.seed,
    )
    print(lm, flush=True)
    adam = Adam(lm.parameters(), beta1=0.9, beta2=0.98, eps=1e-9)
    rng = np.random.default_rng(args.seed)
    held_out = duplication_batch(np.random.default_rng(args.seed + 1), args.eval_sequences, args.length, args.symbols)
    start = time.perf_counter()
    step, accuracy = 0, 0.0
    while True:
        elapsed = time.perf_counter() - start
        if (args.steps and step >= args.steps) or (args.time_budget and elapsed >= args.time_budget):
            break
        step += 1
        tokens = duplication_batch(rng, args.batch_size, args.length, args.symbols)
        lm.step = step - 1  # LSH attention hashes with the rotations of the update count
        lm.zero_grad()
        logits = lm.forward(tokens[:, :-1], training=True)
        loss, train_accuracy, grad = copy_loss(logits, tokens, args.length)
        lm.backward(grad)
        adam.clip_grad_norm(1.0)
        adam.step(args.lr * min(1.0, step / args.warmup))
        if step % args.eval_every == 0:
            lm.step = step
            accuracy = evaluate(lm, held_out, args.length)
            print(
                f"step {step}: loss {loss:.4f}, train accuracy {train_accuracy:.4f}, held-out copy accuracy "
                f"{accuracy:.4f}, {time.perf_counter() - start:.0f} s",
                flush=True,
            )
            if args.stop_at and accuracy >= args.stop_at:
                break
    lm.step = step
    accuracy = evaluate(lm, held_out, args.length)
    result = {"steps": step, "seconds": round(time.perf_counter() - start, 1), "copy_accuracy": accuracy}
    print(json.dumps(result), flush=True)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--length", type=int, default=32, help="symbols per half (default 32)")
    p.add_argument("--symbols", type=int, default=16, help="distinct symbols (default 16)")
    p.add_argument("--attention", default="lsh", help="softmax, linear or lsh (default lsh)")
    p.add_argument("--lsh-hashes", dest="lsh_hashes", type=int, default=4, help="hash rounds (default 4)")
    p.add_argument("--lsh-chunk", dest="lsh_chunk", type=int, default=8, help="positions per chunk (default 8)")
    p.add_argument("--lsh-buckets", dest="lsh_buckets", type=int, default=0, help="buckets per round (default 0: auto)")
    p.add_argument("--reversible", action="store_true", help="reversible blocks")
    p.add_argument("--d-model", dest="d_model", type=int, default=32)
    p.add_argument("--n-layers", dest="n_layers", type=int, default=2)
    p.add_argument("--n-heads", dest="n_heads", type=int, default=2)
    p.add_argument("--d-ff", dest="d_ff", type=int, default=64)
    p.add_argument("--batch-size", dest="batch_size", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3, help="Adam's rate after the warm-up (default 3e-3)")
    p.add_argument("--warmup", type=int, default=50, help="warm-up steps (default 50)")
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    p.add_argument("--time-budget", dest="time_budget", type=float, default=300.0, help="seconds (default 300)")
    p.add_argument("--stop-at", dest="stop_at", type=float, default=0.0, help="stop at this held-out accuracy")
    p.add_argument("--eval-every", dest="eval_every", type=int, default=100)
    p.add_argument("--eval-sequences", dest="eval_sequences", type=int, default=256)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.length < 1 or args.symbols < 2:
        p.error("--length must be >= 1 and --symbols >= 2")
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
