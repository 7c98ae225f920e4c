"""Training: epochs of shuffled batches, metrics, history, checkpoints and exact resume.

The model does the heavy work: ``Transformer.train_step`` runs forward, the masked loss,
backward, clipping and one Adam step with the warm-up schedule in C++. This package decides what
goes into each step and keeps the books::

    model = Transformer(tok_en.vocab_size, tok_es.vocab_size, **preset_config("tutorial"))
    trainer = Trainer(model, train_pairs, valid_pairs, TrainConfig(epochs=10),
                      src_tokenizer=tok_en, tgt_tokenizer=tok_es, checkpoint_dir="runs/tutorial")
    history = trainer.fit()
    history_plot(history)

The parts:

- :mod:`.config`: :class:`TrainConfig` (every setting checked when it is set) and the two ways a
  run stops early, :class:`TrainingInterrupted` (Ctrl-C) and :class:`TrainingDiverged`.
- :mod:`.trainer`: :class:`Trainer`, the epoch loop, the time budget, validation.
- :mod:`.steps`: where the steps run, in this process or data-parallel over MPI
  (``Trainer(..., parallel=DataParallel)``; ``transformer-cpp train`` under ``mpiexec`` does it),
  behind one interface; the Ctrl-C (and SIGTERM, SIGUSR1) handling.
- :mod:`.run_dir`: the run directory: its lock, checkpoints, the ``best`` pointer, averaging.
- :mod:`.state`: the history, the running sums, the checks of a saved trainer state.

Validation loss and BLEU come from :mod:`transformer_cpp.translate` (:func:`evaluate_loss`,
:func:`bleu_of_encoded`, :func:`output_limit`, re-exported here).
"""

from .._checks import Limit
from ..translate import bleu_of_encoded, evaluate_loss, output_limit
from .config import MAX_SEED as MAX_SEED, MAX_THREADS as MAX_THREADS, TrainConfig, TrainingDiverged, TrainingInterrupted
from .run_dir import RunDirectory as RunDirectory
from .state import (
    STATE_FORMAT as STATE_FORMAT,
    STATE_VERSION as STATE_VERSION,
    empty_history,
    world_size_problem as world_size_problem,
)
from .steps import LocalSteps as LocalSteps, ParallelSteps as ParallelSteps
from .trainer import Trainer

__all__ = [
    "Limit",
    "TrainConfig",
    "Trainer",
    "TrainingInterrupted",
    "TrainingDiverged",
    "evaluate_loss",
    "empty_history",
    "bleu_of_encoded",
    "output_limit",
]
