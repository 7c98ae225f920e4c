"""A quick end-to-end check of an installed build (not collected by pytest).

    python tools/smoke.py

Builds a tiny model, trains it for a few steps on a toy copy task, greedy-decodes and
beam-searches a batch in every compute type the CPU offers, and checks that the loss fell and the
outputs are well formed. ``.ci/emulated`` runs it under an emulated older CPU, where the point is
that nothing executes an instruction the CPU lacks before the run-time checks choose the kernels.
Exits 0 when every check passed.
"""

from __future__ import annotations

import sys

import numpy as np

import transformer_cpp as tc
from transformer_cpp.kernels import have_compute_type


def main() -> int:
    info = tc.build_info()
    print("isa", info.get("isa"), "cpu", info.get("isa_cpu"), "kernels", info.get("kernels"))
    tc.set_num_threads(2)
    model = tc.Transformer(
        src_vocab_size=20, tgt_vocab_size=20, d_model=32, n_layers=1, n_heads=2, d_ff=64, max_length=16, seed=0
    )
    model.configure_optimizer(fixed_lr=3e-3)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(60):
        body = rng.integers(3, 20, size=(16, 6))
        src = body
        tgt_in = np.concatenate([np.ones((16, 1), np.int64), body], axis=1)
        tgt_out = np.concatenate([body, np.full((16, 1), 2, np.int64)], axis=1)
        loss, _ = model.train_step(src, tgt_in, tgt_out)
        losses.append(loss)
    first, last = float(np.mean(losses[:5])), float(np.mean(losses[-5:]))
    print(f"loss {first:.3f} -> {last:.3f}")
    if not last < first:
        print("smoke: the loss did not fall", file=sys.stderr)
        return 1
    src = rng.integers(3, 20, size=(4, 6))
    types = ["float32"] + [t for t in ("int8", "bf16") if have_compute_type(t)]
    for ct in types:
        out = np.asarray(model.greedy_decode(src, 1, 2, 10, compute_type=ct))
        if out.shape[0] != 4 or out.min() < 0 or out.max() >= 20:
            print(f"smoke: greedy {ct} gave a malformed output {out}", file=sys.stderr)
            return 1
        beams = model.beam_search(src, 1, 2, 10, beam_size=2, compute_type=ct)
        if len(beams) != 4:
            print(f"smoke: beam search {ct} gave {len(beams)} results for 4 sentences", file=sys.stderr)
            return 1
        print(f"decoded in {ct}")
    print("smoke: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
