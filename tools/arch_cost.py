"""Seconds per training step of candidate architectures, measured side by side.

Each model takes 3 training steps on one batch shaped like the quick recipe's (110 pairs of about
13 tokens: about 1,500 padded tokens), the models taking turns for 6 rounds; the first round is
left out and the median is reported with its ratio to the quick preset. Used to give each
architecture in docs/experiments.md the same compute as the quick preset's epochs, and to estimate
how many epochs the larger candidates for the standard preset get in its hour (every model here has
its decoder embedding tied to the output layer, which does not change a step's cost).

    python tools/arch_cost.py [THREADS] [PRECISION]
"""

import sys
import time

import numpy as np

import transformer_cpp as tc

CANDIDATES = {
    "quick": dict(d_model=128, n_layers=2, n_heads=4, d_ff=512, dropout=0.0),
    "ff1024": dict(d_model=128, n_layers=2, n_heads=4, d_ff=1024, dropout=0.1),
    "d160": dict(d_model=160, n_layers=2, n_heads=4, d_ff=640, dropout=0.1),
    "d192": dict(d_model=192, n_layers=2, n_heads=4, d_ff=768, dropout=0.1),
    "d128L3": dict(d_model=128, n_layers=3, n_heads=4, d_ff=512, dropout=0.1),
    "d256": dict(d_model=256, n_layers=2, n_heads=4, d_ff=1024, dropout=0.1),
    "d256L3": dict(d_model=256, n_layers=3, n_heads=4, d_ff=1024, dropout=0.1),
    "d256L4": dict(d_model=256, n_layers=4, n_heads=4, d_ff=1024, dropout=0.1),
    "d320L3": dict(d_model=320, n_layers=3, n_heads=4, d_ff=1280, dropout=0.1),
    "d384L3": dict(d_model=384, n_layers=3, n_heads=6, d_ff=1536, dropout=0.1),
    "d512L3": dict(d_model=512, n_layers=3, n_heads=8, d_ff=2048, dropout=0.1),
}


def main() -> None:
    tc.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    precision = sys.argv[2] if len(sys.argv) > 2 else "float32"
    rng = np.random.default_rng(0)
    batch, src_len, tgt_len = 110, 13, 14
    src = rng.integers(4, 4000, (batch, src_len))
    tgt = rng.integers(4, 4000, (batch, tgt_len + 1))
    models = {
        name: tc.Transformer(4000, 4000, max_length=64, share_embeddings=True, precision=precision, **cfg)
        for name, cfg in CANDIDATES.items()
    }
    times: dict = {name: [] for name in CANDIDATES}
    for _ in range(6):
        for name, model in models.items():
            start = time.perf_counter()
            for _ in range(3):
                model.train_step(src, tgt[:, :-1], tgt[:, 1:])
            times[name].append((time.perf_counter() - start) / 3)
    base = float(np.median(times["quick"][1:]))
    for name in CANDIDATES:
        med = float(np.median(times[name][1:]))
        print(f"{name:8s} {med * 1000:7.1f} ms/step  {med / base:5.2f}x quick")


if __name__ == "__main__":
    main()
