"""One rank of the data-parallel tests (tests/integration/test_distributed.py runs it under ``mpiexec -n 2``).

    python tests/helpers/distributed_worker.py SCENARIO[,SCENARIO...] OUT_DIR

Each rank trains the toy reversal task with a tiny model and writes what it saw to
``OUT_DIR/<scenario>-rank<r>.json`` (losses, fingerprint, checkpoint facts, exceptions) and its
weights to ``OUT_DIR/<scenario>-rank<r>.npz``. Scenarios:

* ``parity``: 2 epochs, dropout 0 (to compare with one process on the same global batches).
* ``full`` / ``half``: dropout 0.1, 2 epochs / the first epoch only, into ``OUT_DIR/<scenario>-run``;
  ``resume`` continues ``half-run`` to 2 epochs.
* ``kill``: rank 1 kills itself (SIGKILL) after step 3. ``hang``: rank 1 stops answering after step
  2 (timeout 3 s). ``sigterm``: rank 1 gets SIGTERM after step 2. ``drift``: rank 1 changes a weight
  after step 1 (the fingerprint check at step 2 must catch it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for helpers.toy_task

import transformer_cpp as tc  # noqa: E402
from transformer_cpp.distributed import WeightsDrifted, from_environment  # noqa: E402
from transformer_cpp.training import TrainConfig, Trainer, TrainingInterrupted  # noqa: E402

from helpers.toy_task import reversal_pairs, reversal_tokenizer, tiny_model  # noqa: E402

PAIRS = 145  # 6 batches of 24 and one of 1 pair: rank 1 has no share of the last batch
CONFIG = dict(
    batch_size=24,
    fixed_lr=2e-3,
    log_every=1,
    val_bleu_sentences=0,
    progress=False,
    threads=1,
    adaptive_threads=False,
    seed=3,
    clip_norm=1.0,
)


def data(tok):
    src, tgt = reversal_pairs(PAIRS + 20, seed=1)
    return tc.encode_pairs(src[:PAIRS], tgt[:PAIRS], tok, tok, 8), tc.encode_pairs(
        src[PAIRS:], tgt[PAIRS:], tok, tok, 8
    )


def main() -> int:
    scenarios, out = sys.argv[1].split(","), Path(sys.argv[2])
    tc.set_num_threads(1)
    tok = reversal_tokenizer()
    train, valid = data(tok)
    for scenario in scenarios:
        parallel = from_environment(timeout=3.0 if scenario == "hang" else 60.0, check_every=2)
        assert parallel is not None and parallel.size == 2, "run under mpiexec -n 2"
        run(scenario, out, parallel, tok, train, valid)
    return 0


def run(scenario, out, parallel, tok, train, valid) -> None:
    rank = parallel.rank
    run_dir = out / f"{scenario}-run"
    report = {"rank": rank, "size": parallel.size}

    def on_batch_end(trainer):
        if rank == 1 and scenario == "kill" and trainer.model.step == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        if rank == 1 and scenario == "hang" and trainer.model.step == 2:
            time.sleep(120)
        if rank == 1 and scenario == "sigterm" and trainer.model.step == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        if rank == 1 and scenario == "drift" and trainer.model.step == 1:
            trainer.model.parameters()["output.bias"].value[0] += 1e-3

    if scenario == "resume":
        trainer = Trainer.from_checkpoint(out / "half-run", train, valid, epochs=2, parallel=parallel)
    else:
        dropout = 0.0 if scenario == "parity" else 0.1
        config = TrainConfig(epochs=1 if scenario == "half" else (2 if scenario in ("parity", "full") else 3), **CONFIG)
        trainer = Trainer(
            tiny_model(tok, dropout=dropout, seed=5),
            train,
            valid,
            config,
            src_tokenizer=tok,
            tgt_tokenizer=tok,
            checkpoint_dir=run_dir,
            parallel=parallel,
        )
    report["checkpoint_dir"] = None if trainer.checkpoint_dir is None else str(trainer.checkpoint_dir)
    try:
        trainer.fit(on_batch_end=on_batch_end)
        report["outcome"] = "finished"
    except TrainingInterrupted as exc:
        report["outcome"] = "interrupted"
        report["checkpoint"] = None if exc.checkpoint is None else str(exc.checkpoint)
    except WeightsDrifted as exc:
        report["outcome"] = "drifted"
        report["message"] = str(exc)
    report["losses"] = trainer.history["batch"]["loss"]
    report["steps"] = trainer.history["batch"]["step"]
    report["val_loss"] = trainer.history["epoch"]["val_loss"]
    report["step"] = trainer.model.step
    report["fingerprint"] = trainer.model.weights_fingerprint()
    report["last_checkpoint"] = None if trainer.last_checkpoint is None else str(trainer.last_checkpoint)
    (out / f"{scenario}-rank{rank}.json").write_text(json.dumps(report))
    np.savez(
        out / f"{scenario}-rank{rank}.npz",
        **{name: np.asarray(p.value) for name, p in trainer.model.parameters().items()},
    )


if __name__ == "__main__":
    sys.exit(main())
