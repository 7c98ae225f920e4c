"""transformer-cpp: the Transformer of "Attention Is All You Need" with a multithreaded C++ core.

The C++ extension (``transformer_cpp._core``) is private; everything public is re-exported here.
Layers (:mod:`~transformer_cpp.layers`, one class each) have ``forward``/``backward``/
``parameters``/``zero_grad``; the functions (softmax, loss, masks) are in ``functional``, Adam in
``optim``; ``Transformer`` is the full model with ``train_step``; the text side (cleaning, tokenizer, Tatoeba data), training,
translation, plots and export to other runtimes live in the submodules ``text``, ``tokenizer``,
``data``, ``training``, ``translate``, ``plotting`` and ``export``.
"""

from __future__ import annotations

from ._version import __version__
from ._runtime import build_info, get_num_threads, positional_encoding, set_num_threads
from .data import (
    SentencePairs,
    TatoebaPairs,
    batches,
    encode_pairs,
    load_tatoeba,
    read_pairs,
    split_by_source,
    train_val_test_split,
)
from .functional import (
    decoder_self_attention_mask,
    linear_attention,
    look_ahead_mask,
    masked_accuracy,
    masked_cross_entropy,
    padding_mask,
    scaled_dot_product_attention,
    softmax,
    softmax_backward,
    warmup_learning_rate,
)
from . import layers as _layers
from .layers import *  # noqa: F403  (every layer class: layers.__all__)
from .checkpoint import CheckpointError, average_checkpoints, load_checkpoint, save_checkpoint
from .export import export_ctranslate2, export_torch, export_transformers
from .optim import Adam
from .pretrained import import_pretrained
from .model import LanguageModel, NonFiniteError, Transformer
from .task import PRESETS, RECIPES, preset_config, preset_recipe
from .text import clean_corpus, clean_sentence
from .tokenizer import SubwordTokenizer
from .training import TrainConfig, Trainer, TrainingDiverged, TrainingInterrupted
from .translate import Translation, Translator
from .translate import evaluate as evaluate_translation

__all__ = [
    "Adam",
    "CheckpointError",
    "NonFiniteError",
    "PRESETS",
    "RECIPES",
    "SubwordTokenizer",
    "SentencePairs",
    "TatoebaPairs",
    "TrainConfig",
    "Trainer",
    "TrainingDiverged",
    "TrainingInterrupted",
    "LanguageModel",
    "Transformer",
    "Translation",
    "Translator",
    "__version__",
    "batches",
    "build_info",
    "clean_corpus",
    "clean_sentence",
    "decoder_self_attention_mask",
    "encode_pairs",
    "evaluate_translation",
    "export_ctranslate2",
    "export_torch",
    "export_transformers",
    "get_num_threads",
    "import_pretrained",
    "linear_attention",
    "load_tatoeba",
    "read_pairs",
    "load_checkpoint",
    "average_checkpoints",
    "look_ahead_mask",
    "masked_accuracy",
    "masked_cross_entropy",
    "padding_mask",
    "positional_encoding",
    "preset_config",
    "preset_recipe",
    "save_checkpoint",
    "scaled_dot_product_attention",
    "set_num_threads",
    "softmax",
    "softmax_backward",
    "train_val_test_split",
    "split_by_source",
    "warmup_learning_rate",
]
__all__ += _layers.__all__
