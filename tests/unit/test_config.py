"""The configuration, defined once: the core's tables of the model's and the optimiser's fields
(``transformer_cpp.config``) and everything derived from them: the ``Transformer`` keyword
arguments and ``config`` dict, ``configure_optimizer``, checkpoint JSON, ``TrainConfig``'s
optimiser settings and the command line's options, with the same defaults; and one validator
(``Limit``) whose message for a bad value is the same from Python, the command line and a
checkpoint."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import subprocess
import sys

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp import cli, kernels
from transformer_cpp.cli.train import request_from_args
from transformer_cpp._checks import Limit, choice, flag, integer, number, seed
from transformer_cpp.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from transformer_cpp.config import MODEL_FIELDS, OPTIMIZER_FIELDS, OptimizerConfig, TransformerConfig, option_fields

from helpers.toy_task import one_thread, tok  # noqa: F401  (shared fixtures)

# a small architecture the tests vary one field at a time
SMALL = dict(d_model=8, n_layers=1, n_heads=2, d_ff=16, max_length=8)


def _other(field, value):
    """An allowed value of ``field`` other than ``value`` (None when the field has no other that
    runs here)."""
    limit = field.limit
    if limit.kind == "flag":
        return not value
    if limit.kind == "choice":
        others = [c for c in limit.choices if c != value]
        if field.name == "precision" and not kernels.have_bf16():
            others = [c for c in others if c != "bf16"]
        return others[0] if others else None
    if limit.kind == "integer":
        return value + 1 if limit.high > value + 1 else None
    candidate = value * 0.5 if value else 0.25
    return candidate if candidate != value else None


def _outside(field):
    """A value just outside a numeric field's limit."""
    limit = field.limit
    if limit.integer:
        return limit.low - 1
    return float(limit.low) if limit.low_open else float(limit.low) - 1.0


NUMERIC_OPTIONS = [f for f in option_fields(MODEL_FIELDS + OPTIMIZER_FIELDS) if f.limit.kind in ("integer", "number")]


# --- the tables ------------------------------------------------------------------------------------


def test_the_tables_describe_every_field():
    vocab = dict(src_vocab_size=2, tgt_vocab_size=2)
    for fields, config in ((MODEL_FIELDS, TransformerConfig(**vocab)), (OPTIMIZER_FIELDS, OptimizerConfig())):
        assert [f.name for f in fields] == list(config.to_dict()), "the table and the dict name the same fields"
        for f in fields:
            assert f.help and f.limit.describe(), f
            assert config.to_dict()[f.name] == vocab.get(f.name, f.default)
            if f.default is not None and f.name not in ("src_vocab_size", "tgt_vocab_size"):
                assert f.limit.check("", f.name, f.default) == f.default, f"{f.name}: its default is allowed"
    # one name per setting: the command line spells each model field as Python does (--n-layers);
    # Adam's epsilon is TrainConfig's adam_eps (--adam-eps) beside the layer norm's epsilon
    assert {f.name: f.option for f in MODEL_FIELDS if f.option != f.name} == {
        "src_vocab_size": None,
        "tgt_vocab_size": None,
        "max_length": None,
        "seed": None,
        "pad_id": None,
        "start_id": None,
        "end_id": None,
        # the options of imported models (pretrained.load_marian): not training settings
        "n_encoder_layers": None,
        "n_decoder_layers": None,
        "share_source_embedding": None,
        "activation": None,
        "scale_embedding": None,
    }
    assert {f.name: f.option for f in OPTIMIZER_FIELDS if f.option != f.name} == {
        "eps": "adam_eps",
        "total_steps": None,
    }


def test_config_classes_check_every_field():
    c = TransformerConfig(src_vocab_size=10, tgt_vocab_size=12, d_model=64, layout="concatenated")
    assert c.to_dict()["d_model"] == 64 and c.to_dict()["layout"] == "concatenated"
    assert c == TransformerConfig(**c.to_dict()) and c != TransformerConfig(**dict(c.to_dict(), seed=1))
    assert "d_model=64" in repr(c)
    with pytest.raises(ValueError, match=r"^Transformer: d_model must be an integer in \[1, 16384\], got 0$"):
        TransformerConfig(d_model=0)
    with pytest.raises(ValueError, match=r"^Transformer: d_model 10 is not divisible by n_heads 4$"):
        TransformerConfig(src_vocab_size=5, tgt_vocab_size=5, d_model=10, n_heads=4)
    with pytest.raises(TypeError, match=r"^Transformer: d_model must be an integer in \[1, 16384\], got 8.0$"):
        TransformerConfig(d_model=8.0)
    with pytest.raises(TypeError, match="Transformer: unknown setting 'colour'; the settings are src_vocab_size, "):
        TransformerConfig(colour="red")
    with pytest.raises(ValueError, match=r"^Transformer: layout must be 'interleaved' or 'concatenated', got 'x'$"):
        TransformerConfig(layout="x")
    with pytest.raises(
        ValueError, match=r"^Transformer: src_vocab_size must be an integer in \[2, 9223372036854775807\]"
    ):
        TransformerConfig(src_vocab_size=2**70)  # no stated upper bound, but a 64-bit C++ member
    assert TransformerConfig(src_vocab_size=2, tgt_vocab_size=2, seed=2**64 - 1).to_dict()["seed"] == 2**64 - 1
    with pytest.raises(ValueError, match=r"^configure_optimizer: total_steps must be 0 \(no decay\) or > warmup 10"):
        OptimizerConfig(warmup=10, total_steps=5)
    assert OptimizerConfig(fixed_lr=0.1, warmup=10, total_steps=5).to_dict()["total_steps"] == 5


def test_limit_is_the_one_validator():
    assert Limit(True, 1, 16384).describe() == "an integer in [1, 16384]"
    assert Limit(True, 0).describe() == "an integer >= 0"
    assert Limit(False, 0, low_open=True).describe() == "a finite number > 0"
    assert Limit(False, 0, 1, high_open=True).describe() == "a number in [0, 1)"
    assert Limit(False, 0, 1_000_000, unit="minutes").describe() == "a number of minutes in [0, 1000000]"
    assert Limit(False, -math.inf).describe() == "a finite number" and Limit(True, -(2**63)).describe() == "an integer"
    assert Limit.flag().describe() == "True or False"
    assert Limit.one_of(["float32", "bf16"]).describe() == "'float32' or 'bf16'"
    assert Limit.one_of(["a", "b", "c"]).describe() == "one of 'a', 'b', 'c'"
    assert Limit(True, 1, 5) == Limit(True, 1, 5) and Limit(True, 1, 5) != Limit(True, 1, 6)
    # what check returns: the value as int / float / bool / str
    assert type(integer("f", "n", np.int32(7), 1)) is int and integer("f", "n", 2**80) == 2**80
    assert type(number("f", "x", 2, 0)) is float and flag("f", "b", np.bool_(True)) is True
    assert choice("f", "c", "b", ["a", "b"]) == "b" and seed("f", "seed", 3) == 3
    # one message format; TypeError for a value of the wrong type, ValueError out of range
    for call, error, message in [
        (lambda: integer("f", "n", 0, 1), ValueError, "f: n must be an integer >= 1, got 0"),
        (lambda: integer("f", "n", True, 1), TypeError, "f: n must be an integer >= 1, got True"),
        (lambda: integer("f", "n", 2.0, 1), TypeError, "f: n must be an integer >= 1, got 2.0"),
        (lambda: integer("f", "n", "3", 1, 5), TypeError, "f: n must be an integer in [1, 5], got '3'"),
        (lambda: number("f", "x", math.nan, 0), ValueError, "f: x must be a finite number >= 0, got nan"),
        (lambda: number("f", "x", 10**400, 0), ValueError, "f: x must be a finite number >= 0, got 1000"),
        (lambda: flag("f", "b", "no"), TypeError, "f: b must be True or False, got 'no'"),
        (lambda: choice("f", "c", 3, ["a", "b"]), TypeError, "f: c must be 'a' or 'b', got 3"),
        (lambda: choice("f", "c", "x", ["a", "b"]), ValueError, "f: c must be 'a' or 'b', got 'x'"),
        (lambda: seed("f", "seed", -1), ValueError, "f: seed must be an integer >= 0, got -1"),
    ]:
        with pytest.raises(error) as info:
            call()
        assert str(info.value).startswith(message), (str(info.value), message)
    assert Limit(True, 0, 5).message("", "n", 9) == "n must be an integer in [0, 5], got 9"


def test_messages_print_numbers_as_python_does():
    """A value that reaches the core's check from C++ (a checkpoint's JSON, a struct) is written as
    Python's repr writes it, so that the message does not depend on where the value came from."""
    for value in (0.0, -0.0, 0.1, 1e-9, 1e-5, 0.0001, 123.0, 1e16, 1e15, 2.5e-300, 1.7976931348623157e308, 1 / 3):
        with pytest.raises(ValueError) as info:
            OptimizerConfig(warmup=10, total_steps=0, lr_scale=-abs(value) if value else 0.0)
        assert str(info.value).endswith(f"got {-abs(value) if value else 0.0!r}")


# --- what is derived from them -------------------------------------------------------------------


def test_transformer_arguments_come_from_the_table():
    signature = inspect.signature(tc.Transformer)
    params = signature.parameters
    assert list(params)[:2] == ["src_vocab_size", "tgt_vocab_size"]
    for f in MODEL_FIELDS[2:]:
        assert params[f.name].default == f.default and params[f.name].kind is inspect.Parameter.KEYWORD_ONLY, f
        assert f.name in tc.Transformer.__doc__ and f.help.split()[0] in tc.Transformer.__doc__
    assert set(params) == {f.name for f in MODEL_FIELDS} | {"dtype"}
    model = tc.Transformer(5, 6, **SMALL)
    config = model.config
    assert list(config) == [f.name for f in MODEL_FIELDS] + ["dtype"]
    for f in MODEL_FIELDS:
        expected = {"src_vocab_size": 5, "tgt_vocab_size": 6, **SMALL}.get(f.name, f.default)
        assert config[f.name] == expected, f
    assert tc.Transformer.from_config(config).config == config
    # the optimiser: configure_optimizer's keyword arguments and optimizer_config
    opt_params = inspect.signature(tc.Transformer.configure_optimizer).parameters
    assert {n: p.default for n, p in opt_params.items() if n != "self"} == {f.name: f.default for f in OPTIMIZER_FIELDS}
    assert model.optimizer_config == {f.name: f.default for f in OPTIMIZER_FIELDS}
    for f in OPTIMIZER_FIELDS:
        assert f.name in tc.Transformer.configure_optimizer.__doc__


@pytest.mark.parametrize("field", [f for f in MODEL_FIELDS if f.name not in SMALL and f.option], ids=lambda f: f.name)
def test_every_model_field_reaches_the_model_and_a_checkpoint(tmp_path, tok, field):
    base = dict(SMALL, src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size)
    value = _other(field, base.get(field.name, field.default))
    if value is None:
        pytest.skip(f"{field.name}: no other value runs here")
    model = tc.Transformer(**dict(base, **{field.name: value}))
    assert model.config[field.name] == value
    path = save_checkpoint(tmp_path, model, tok, tok, name="epoch-0001")
    saved = json.loads((path / "config.json").read_text())["model"]
    assert saved[field.name] == value
    assert load_checkpoint(path).model.config == model.config


def test_every_optimizer_field_reaches_a_checkpoint(tmp_path, tok):
    model = tc.Transformer(tok.vocab_size, tok.vocab_size, **SMALL)
    settings = {f.name: _other(f, f.default) for f in OPTIMIZER_FIELDS}
    settings["total_steps"] = settings["warmup"] + 10
    model.configure_optimizer(**settings)
    assert model.optimizer_config == settings
    path = save_checkpoint(tmp_path, model, tok, tok, name="epoch-0001")
    assert json.loads((path / "config.json").read_text())["optimizer"]["config"] == settings
    assert load_checkpoint(path).model.optimizer_config == settings


def test_train_config_has_the_optimizer_settings():
    config = tc.TrainConfig()
    names = {f.name for f in dataclasses.fields(tc.TrainConfig)}
    for f in option_fields(OPTIMIZER_FIELDS):
        assert f.option in names and getattr(config, f.option) == f.default, f
        assert tc.TrainConfig.LIMITS[f.option] == f.limit
        assert f.option in tc.TrainConfig.__doc__
    assert "total_steps" not in names  # the trainer fits it to the run
    assert config.optimizer_settings() == {f.name: f.default for f in option_fields(OPTIMIZER_FIELDS)}
    assert tc.TrainConfig.from_dict(config.to_dict()) == config


def test_every_field_with_an_option_is_a_command_line_option():
    parser = cli.build_parser()
    train = next(a for a in parser._subparsers._group_actions[0].choices.values() if a.prog.endswith(" train"))
    options = {opt: action for action in train._actions for opt in action.option_strings}
    for f in MODEL_FIELDS + OPTIMIZER_FIELDS:
        # named as Python names the setting: the model's keyword, TrainConfig's field
        setting = f.name if f in MODEL_FIELDS else (f.option or f.name)
        flag_name = "--" + setting.replace("_", "-")
        if f.option is None:
            assert flag_name not in options or f.name in ("max_length", "seed"), f  # those are other options
            continue
        action = options[flag_name]
        assert action.dest == setting and action.default is None, f  # None: the preset's value
        assert f.help.replace("%", "%%")[:30] in action.help, f
        if f.limit.kind in ("integer", "number"):
            assert f.limit.describe() in action.help
        if f.limit.kind == "flag":
            assert "--no-" + setting.replace("_", "-") in options
    # the command line's option values become the model's and TrainConfig's settings
    args = parser.parse_args(["train", "--n-layers", "3", "--share-embeddings", "--adam-eps", "1e-8", "--warmup", "7"])
    request = request_from_args(args)
    assert request.architecture == {"n_layers": 3, "share_embeddings": True}
    assert request.training == {"adam_eps": 1e-8, "warmup": 7}


def test_presets_and_recipes_use_the_fields():
    model_names = {f.name for f in MODEL_FIELDS}
    train_names = set(tc.TrainConfig().to_dict())
    for name, preset in tc.PRESETS.items():
        assert set(preset) <= model_names, name
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, **preset)  # every preset is valid
        assert set(tc.RECIPES[name]["train"]) <= train_names, name
        tc.TrainConfig(**tc.RECIPES[name]["train"])


# --- one message for a bad value, wherever it comes from -----------------------------------------


def _cli_error(capsys, *argv):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", *argv])
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("field", NUMERIC_OPTIONS, ids=lambda f: f.name)
def test_a_bad_value_has_one_message(tmp_path, tok, capsys, field):
    """Out of range from Python, the command line and a checkpoint's config.json: the same words."""
    bad = _outside(field)
    words = f"{field.name} must be {field.limit.describe()}, got {bad!r}"
    model_field = field in MODEL_FIELDS
    # Python
    with pytest.raises(ValueError) as info:
        if model_field:
            tc.Transformer(10, 10, **{field.name: bad})
        else:
            tc.Transformer(10, 10, **SMALL).configure_optimizer(**{field.name: bad})
    assert str(info.value) == f"{'Transformer' if model_field else 'configure_optimizer'}: {words}"
    if not model_field:
        with pytest.raises(ValueError) as info:
            tc.TrainConfig(**{field.option: bad})
        assert str(info.value) == f"TrainConfig: {field.option} must be {field.limit.describe()}, got {bad!r}"
    # the command line: one line, status 2
    line = _cli_error(capsys, "--" + field.option.replace("_", "-"), str(bad))
    assert line.endswith(
        f"{field.option if not model_field else field.name} must be {field.limit.describe()}, got {bad!r} (see transformer-cpp train --help)"
    ), line
    # a checkpoint whose config.json holds the value
    model = tc.Transformer(tok.vocab_size, tok.vocab_size, **SMALL)
    path = save_checkpoint(tmp_path, model, tok, tok, name="epoch-0001")
    config = json.loads((path / "config.json").read_text())
    section = config["model"] if model_field else config["optimizer"]["config"]
    section[field.name] = bad
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    assert words in str(info.value)


def test_the_command_line_error_is_one_line_with_status_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "transformer_cpp", "train", "--out", str(tmp_path / "run"), "--d-model", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "transformer-cpp train: error: argument --d-model: Transformer: d_model must be an integer in "
        "[1, 16384], got 0 (see transformer-cpp train --help)"
    )
