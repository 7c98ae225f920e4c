"""Presets and recipes of the translation task: named architectures, and how
``transformer-cpp train`` trains each (training settings, data settings, what it measures when a
run starts)."""

from __future__ import annotations

import copy
from typing import Any, Dict

__all__ = [
    "AUTO_PRECISION",
    "DEFAULT_PRESET",
    "PRESETS",
    "RECIPES",
    "SIZE_FIELDS",
    "preset_config",
    "preset_recipe",
]

#: The preset ``transformer-cpp train`` uses when none is named.
DEFAULT_PRESET = "quick"
#: ``precision="auto"``: measured when the run starts (:func:`transformer_cpp.precision.choose_precision`).
AUTO_PRECISION = "auto"
#: The architecture settings that choose a model's size: given any, the user chose the size, and
#: a recipe's ``grow`` section (model size auto) is not applied.
SIZE_FIELDS = ("d_model", "n_layers", "n_heads", "d_ff", "dropout")

# Presets, named for what they are for. PRESETS holds each one's architecture (vocabulary sizes
# come from the tokenizers; max_length is only the positional table's initial size, a cache);
# RECIPES holds how `transformer-cpp train` trains it: TrainConfig fields ("train"), data
# settings ("data") and architecture settings the command resolves when it runs ("model":
# precision "auto", measured by precision.py). Options given on the command line override all.
PRESETS: Dict[str, Dict[str, Any]] = {
    # the README's main job: all the data, 10 minutes on 2 cores; the decoder embedding is tied to
    # the output layer (higher validation BLEU at the same speed: docs/experiments.md)
    "quick": dict(d_model=128, n_layers=2, n_heads=4, d_ff=512, dropout=0.0, max_length=64, share_embeddings=True),
    # about an hour on 2 cores
    "standard": dict(d_model=256, n_layers=3, n_heads=4, d_ff=1024, dropout=0.1, max_length=64),
    # the TensorFlow NMT tutorial: the first 80k pairs, vocabulary target 2**14, max length 15
    "tutorial": dict(d_model=512, n_layers=4, n_heads=8, d_ff=512, dropout=0.1, max_length=15),
    # the paper's base model
    "base": dict(d_model=512, n_layers=6, n_heads=8, d_ff=2048, dropout=0.1, max_length=2048),
    # a first run in under two minutes (its recipe below), tests, CI
    "tiny": dict(d_model=128, n_layers=2, n_heads=4, d_ff=256, dropout=0.1, max_length=15),
}


def _timed(minutes: float, warmup: int, lr_scale: float, average_last: int) -> Dict[str, Dict[str, Any]]:
    """The recipe of a run fitted to a time budget of ``minutes`` on all the pairs: token batches,
    label smoothing 0.1, the learning rate decayed to 0 at the budget's end (the epochs only a
    cap), a 4,000-subword vocabulary, the precision measured when the run starts; the newest
    ``average_last`` checkpoints averaged at the end."""
    train = dict(max_tokens=1500, warmup=warmup, lr_scale=lr_scale, label_smoothing=0.1, decay=True)
    return {
        "train": dict(train, time_budget=minutes, epochs=1000, average_last=average_last),
        "data": dict(num_samples=0, sampling="random", vocab_size=4000, max_length=0),
        "model": dict(precision=AUTO_PRECISION),
    }


RECIPES: Dict[str, Dict[str, Dict[str, Any]]] = {
    # average_last 2: the last two checkpoints (the last full epoch and the partial one the
    # budget ends in) averaged, which scored higher validation BLEU than the last alone; bf16
    # where a step measures at least 1.10x as fast as float32 (CPUs differ: some run vdpbf16ps
    # at half rate), see precision.py
    "quick": {
        **_timed(10.0, warmup=600, lr_scale=0.8, average_last=2),
        # model size auto: d_model 192 where a step measures fast enough for it to get 7.5 epochs
        # in the budget (with fewer it ends behind d_model 128: docs/experiments.md), else the
        # preset's d_model 128
        "grow": dict(arch=dict(d_model=192, d_ff=768, dropout=0.05), min_epochs=7.5),
    },
    "standard": _timed(60.0, warmup=1000, lr_scale=0.7, average_last=3),
    "tutorial": {
        "train": dict(batch_size=64, warmup=4000, epochs=10),
        "data": dict(num_samples=80_000, sampling="first", vocab_size=2**14, max_length=15),
    },
    "base": {
        "train": dict(max_tokens=8000, warmup=4000, label_smoothing=0.1, epochs=20),
        "data": dict(num_samples=0, sampling="random", vocab_size=2**14, max_length=0),
    },
    # a first run that learns: the first (shortest) 30,000 pairs, a short warm-up, a small
    # vocabulary and batches of 128, so that 1.5 minutes at one thread give translations that
    # follow their input (validation BLEU in the teens on those short sentences)
    "tiny": {
        "train": dict(batch_size=128, warmup=200, epochs=30, time_budget=1.5),
        "data": dict(num_samples=30_000, sampling="first", vocab_size=2000, max_length=0),
    },
}


def preset_config(name: str) -> Dict[str, Any]:
    """A copy of preset ``name``'s architecture; ValueError naming the presets if unknown."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(sorted(PRESETS))}")
    return dict(PRESETS[name])


def preset_recipe(name: str) -> Dict[str, Dict[str, Any]]:
    """A copy of preset ``name``'s training recipe: ``{"train": TrainConfig fields, "data":
    data settings}``, and for some ``"model"``: ``{"precision": "auto"}`` (the command measures
    which precision trains faster, :func:`transformer_cpp.precision.choose_precision`) and
    ``"grow"``: ``{"arch": a larger architecture, "min_epochs": n}`` (the command trains the larger
    model when a step measures fast enough for n epochs in the time budget,
    :func:`transformer_cpp.precision.choose_size`) (``max_length`` 0: cover 99.9% of the training pairs; ``num_samples`` 0:
    all pairs)."""
    preset_config(name)
    return copy.deepcopy(RECIPES[name])
