"""The public API is pinned: ``transformer_cpp.__all__`` and every subcommand of the command line
with its options. A name or an option that disappears (or one that appears) fails here, so that a
change to what users call is made on purpose, with this list. Old spellings of options stay as
deprecated aliases: they still work, warn on standard error and are left out of --help."""

from __future__ import annotations

import argparse
import re

import pytest

import transformer_cpp as tc
from transformer_cpp import cli
from transformer_cpp.cli.options import DeprecatedAlias

PUBLIC_NAMES = [
    "Adam",
    "CheckpointError",
    "Decoder",
    "DecoderLayer",
    "Dropout",
    "Embedding",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "LSHAttention",
    "LSHSelfAttention",
    "LanguageModel",
    "Layer",
    "LayerNorm",
    "Linear",
    "LinearAttention",
    "LinearMultiHeadAttention",
    "MultiHeadAttention",
    "NonFiniteError",
    "PRESETS",
    "PositionalEmbedding",
    "RECIPES",
    "ReLU",
    "RelativeMultiHeadAttention",
    "ReversibleStack",
    "ScaledDotProductAttention",
    "SentencePairs",
    "SoftmaxSelfAttention",
    "SubwordTokenizer",
    "TatoebaPairs",
    "TiledAttention",
    "TrainConfig",
    "Trainer",
    "TrainingDiverged",
    "TrainingInterrupted",
    "Transformer",
    "Translation",
    "Translator",
    "__version__",
    "average_checkpoints",
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
    "load_checkpoint",
    "load_tatoeba",
    "look_ahead_mask",
    "masked_accuracy",
    "masked_cross_entropy",
    "padding_mask",
    "positional_encoding",
    "preset_config",
    "preset_recipe",
    "read_pairs",
    "save_checkpoint",
    "scaled_dot_product_attention",
    "set_num_threads",
    "softmax",
    "softmax_backward",
    "split_by_source",
    "train_val_test_split",
    "warmup_learning_rate",
]

# subcommand -> its option strings, then its positional arguments (sorted each)
CLI = {
    "average": [
        "--help",
        "--last",
        "--mark-best",
        "--model",
        "-h",
    ],
    "bench": [
        "--attention",
        "--help",
        "--isa",
        "--json",
        "--marian",
        "--marian-shapes",
        "--no-ctranslate2",
        "--no-torch",
        "--quick",
        "--seed",
        "--sentences",
        "--serving-only",
        "--skip-busy",
        "--skip-decode",
        "--skip-memory",
        "--skip-mpi",
        "--skip-scaling",
        "--skip-serving",
        "--steps",
        "--threads",
        "--warmup",
        "-h",
    ],
    "evaluate": [
        "--batch-size",
        "--beam-size",
        "--columns",
        "--compute-type",
        "--data",
        "--early-stopping",
        "--encoding",
        "--examples",
        "--force-end",
        "--help",
        "--length-penalty",
        "--length-penalty-mode",
        "--limit",
        "--model",
        "--no-force-end",
        "--output",
        "--pairs",
        "--split",
        "--threads",
        "-h",
    ],
    "evaluate-lm": [
        "--clamp-len",
        "--help",
        "--memory-length",
        "--model",
        "--seq-len",
        "--text",
        "--threads",
        "-h",
    ],
    "export": [
        "--help",
        "--model",
        "--quantization",
        "--to",
        "-h",
        "out",
    ],
    "import": [
        "--help",
        "--out",
        "--source-lang",
        "--target-lang",
        "-h",
        "source",
    ],
    "figures": [
        "--help",
        "--out",
        "-h",
    ],
    "generate": [
        "--help",
        "--max-output-tokens",
        "--max-tokens",
        "--model",
        "--prompt",
        "--seed",
        "--temperature",
        "--threads",
        "--top-k",
        "--top-p",
        "-h",
    ],
    "serve": [
        "--access-log",
        "--allowed-hosts",
        "--batch-seconds",
        "--beam-size",
        "--compute-type",
        "--graceful-timeout",
        "--help",
        "--host",
        "--keep-alive-timeout",
        "--length-penalty",
        "--log-level",
        "--max-attention-weights",
        "--max-batch",
        "--max-batch-tokens",
        "--max-beam-size",
        "--max-chars",
        "--max-connections",
        "--max-header-bytes",
        "--max-length",
        "--max-output-tokens",
        "--max-queue",
        "--max-request-bytes",
        "--max-request-tokens",
        "--max-source-tokens",
        "--max-texts",
        "--max-wait-ms",
        "--model",
        "--port",
        "--read-timeout",
        "--threads",
        "-h",
    ],
    "train": [
        "--accumulate",
        "--adam-eps",
        "--adaptive-threads",
        "--average-last",
        "--batch-size",
        "--beta1",
        "--beta2",
        "--bucket-by-length",
        "--clip-norm",
        "--columns",
        "--config",
        "--d-ff",
        "--d-model",
        "--data",
        "--decay",
        "--decode-errors",
        "--decoder-attention",
        "--drop-remainder",
        "--dropout",
        "--encoder-attention",
        "--encoding",
        "--epochs",
        "--fixed-lr",
        "--fixed-threads",
        "--heads",
        "--help",
        "--init-from",
        "--joint-vocab",
        "--keep-checkpoints",
        "--label-smoothing",
        "--layer-norm-eps",
        "--layers",
        "--layout",
        "--log-every",
        "--lr-scale",
        "--max-length",
        "--max-tokens",
        "--mpi-timeout",
        "--n-heads",
        "--n-layers",
        "--no-adaptive-threads",
        "--no-decay",
        "--no-pre-norm",
        "--no-progress",
        "--no-share-embeddings",
        "--no-tie-embeddings",
        "--num-samples",
        "--out",
        "--patience",
        "--pre-norm",
        "--precision",
        "--preset",
        "--resume",
        "--sampling",
        "--seed",
        "--share-embeddings",
        "--source-lang",
        "--split-seed",
        "--target-lang",
        "--test-fraction",
        "--threads",
        "--tie-embeddings",
        "--time-budget",
        "--val-bleu-sentences",
        "--valid-fraction",
        "--vocab-size",
        "--warmup",
        "-h",
    ],
    "train-lm": [
        "--accumulate",
        "--adaptive-threads",
        "--attention",
        "--average-last",
        "--batch-size",
        "--checkpoint-every",
        "--clip-norm",
        "--config",
        "--d-ff",
        "--d-model",
        "--dropout",
        "--encoding",
        "--epochs",
        "--eval-chars",
        "--eval-every",
        "--help",
        "--keep",
        "--keep-checkpoints",
        "--lr-scale",
        "--lsh-buckets",
        "--lsh-chunk",
        "--lsh-hashes",
        "--memory-length",
        "--n-heads",
        "--n-layers",
        "--no-adaptive-threads",
        "--no-pre-norm",
        "--no-progress",
        "--no-reversible",
        "--no-share-embeddings",
        "--out",
        "--patience",
        "--pre-norm",
        "--resume",
        "--reversible",
        "--seed",
        "--seq-len",
        "--share-embeddings",
        "--steps",
        "--text",
        "--threads",
        "--time-budget",
        "--warmup",
        "-h",
    ],
    "translate": [
        "--batch-size",
        "--beam-size",
        "--compute-type",
        "--constraint",
        "--early-stopping",
        "--force-end",
        "--help",
        "--input",
        "--length-penalty",
        "--length-penalty-mode",
        "--max-length",
        "--max-output-tokens",
        "--model",
        "--n-best",
        "--no-force-end",
        "--output",
        "--prefix",
        "--sampling-temperature",
        "--sampling-topk",
        "--sampling-topp",
        "--seed",
        "--threads",
        "-h",
        "sentences",
    ],
}

# command -> deprecated option -> (its replacement, the arguments that give both a value)
DEPRECATED = {
    "train": {
        "--layers": ("--n-layers", ["3"]),
        "--heads": ("--n-heads", ["2"]),
        "--tie-embeddings": ("--share-embeddings", []),
        "--no-tie-embeddings": ("--no-share-embeddings", []),
        "--fixed-threads": ("--no-adaptive-threads", []),
    },
    "translate": {"--max-length": ("--max-output-tokens", ["7"])},
    "serve": {"--max-length": ("--max-output-tokens", ["7"])},
    "train-lm": {"--keep": ("--keep-checkpoints", ["2"])},
    "generate": {"--max-tokens": ("--max-output-tokens", ["7"])},
}
# command -> deprecated option whose replacement counts in other units -> (the replacement, a value):
# accepted and named in a warning, its value not used
RETIRED = {"train-lm": {"--checkpoint-every": ("--eval-every", ["600"])}}
# the arguments every parse of the command needs
_REQUIRED = {
    "train": [],
    "translate": ["--model", "m"],
    "serve": ["--model", "m"],
    "train-lm": ["--out", "o"],
    "generate": ["--model", "m"],
}


def _subparsers():
    parser = cli.build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def test_all_is_pinned():
    assert sorted(tc.__all__) == PUBLIC_NAMES
    missing = [name for name in tc.__all__ if not hasattr(tc, name)]
    assert not missing, f"in __all__ but not defined: {missing}"


def test_command_line_is_pinned():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = {
        name: sorted(s for a in p._actions for s in a.option_strings)
        + sorted(a.dest for a in p._actions if not a.option_strings)
        for name, p in sub.choices.items()
    }
    assert sorted(found) == sorted(CLI)
    for name, options in CLI.items():
        assert found[name] == options, name


def test_deprecated_aliases_are_pinned_and_left_out_of_help():
    for command, aliases in [*DEPRECATED.items(), *RETIRED.items()]:
        for old, (new, _) in aliases.items():
            assert old in CLI[command] and new in CLI[command], (command, old)
    for command, p in _subparsers().items():
        aliases = [a for a in p._actions if isinstance(a, DeprecatedAlias)]
        hidden = {o for a in aliases for o in a.option_strings}
        assert hidden == set(DEPRECATED.get(command, {})) | set(RETIRED.get(command, {})), command
        assert all(a.help == argparse.SUPPRESS for a in aliases), command
        text = p.format_help()
        for old in hidden:
            assert not re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", text), (command, old)


@pytest.mark.parametrize("command, old", [(command, old) for command, aliases in DEPRECATED.items() for old in aliases])
def test_deprecated_alias_works_as_its_replacement_and_warns(command, old, capsys):
    new, value = DEPRECATED[command][old]
    p = _subparsers()[command]
    with_new = p.parse_args([*_REQUIRED[command], new, *value])
    assert capsys.readouterr().err == ""
    with_old = p.parse_args([*_REQUIRED[command], old, *value])
    assert vars(with_old) == vars(with_new)
    assert vars(with_old) != vars(p.parse_args(_REQUIRED[command])), "the alias sets something"
    err = capsys.readouterr().err
    assert err == f"transformer-cpp {command}: warning: {old} is deprecated and will be removed; use {new}\n"


@pytest.mark.parametrize("command, old", [(command, old) for command, aliases in RETIRED.items() for old in aliases])
def test_retired_option_warns_and_changes_nothing_the_command_uses(command, old, capsys):
    new, value = RETIRED[command][old]
    p = _subparsers()[command]
    plain = vars(p.parse_args(_REQUIRED[command]))
    with_old = vars(p.parse_args([*_REQUIRED[command], old, *value]))
    dest = old.lstrip("-").replace("-", "_")
    assert with_old.pop(dest) == value[0] and with_old == plain
    err = capsys.readouterr().err
    assert err == f"transformer-cpp {command}: warning: {old} is deprecated and will be removed; use {new}\n"


def test_train_aliases_make_the_same_request():
    from transformer_cpp.cli.train import request_from_args

    p = _subparsers()["train"]
    old = p.parse_args(["--layers", "3", "--heads", "2", "--tie-embeddings", "--fixed-threads"])
    new = p.parse_args(["--n-layers", "3", "--n-heads", "2", "--share-embeddings", "--no-adaptive-threads"])
    request = request_from_args(new)
    assert request == request_from_args(old)
    assert request.architecture == {"n_layers": 3, "n_heads": 2, "share_embeddings": True}
    assert request.adaptive_threads is False
    assert request_from_args(p.parse_args([])).adaptive_threads is True
    assert request_from_args(p.parse_args(["--adaptive-threads"])).adaptive_threads is True
