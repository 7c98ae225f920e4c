"""``--config FILE``: options from a YAML file, the command line over it, one-line mistakes."""

from __future__ import annotations

import argparse

import pytest

from transformer_cpp.cli import build_parser
from transformer_cpp.cli.config_file import _options, config_values, settle_exclusive


def _parse(*argv):
    return build_parser().parse_args(list(argv))


def _subparser(command):
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]
    raise AssertionError(command)


def _write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_file_sets_options_by_their_names_with_underscores_or_dashes(tmp_path):
    f = _write(tmp_path, "d_model: 64\nn-layers: 3\nlr_scale: 1e-3\nno_decay: true\njoint_vocab: true\npreset: tiny\n")
    args = _parse("train", "--config", f)
    assert (args.d_model, args.n_layers, args.lr_scale, args.decay, args.joint_vocab) == (64, 3, 0.001, False, True)
    assert args.preset == "tiny" and args.config == f
    # the file's values reach the request as the options' would
    from transformer_cpp.cli.train import request_from_args

    request = request_from_args(args)
    assert request.architecture == {"d_model": 64, "n_layers": 3}
    assert request.training == {"lr_scale": 0.001, "decay": False} and request.data == {"joint_vocab": True}
    # false for a flag without a --no- form is its other value; null is the default
    f = _write(tmp_path, "joint_vocab: false\nno_progress: false\nd_model: null\n")
    args = _parse("train", "--config", f)
    assert args.joint_vocab is False and args.progress is True and args.d_model is None


def test_the_command_line_overrides_the_file_before_or_after_config(tmp_path):
    f = _write(tmp_path, "d_model: 64\nwarmup: 100\ndecay: true\nout: runs/a\n")
    for argv in (
        ["train", "--d-model", "16", "--no-decay", "--config", f],
        ["train", "--config", f, "--d-model", "16", "--no-decay"],
    ):
        args = _parse(*argv)
        assert (args.d_model, args.decay, args.warmup, args.out) == (16, False, 100, "runs/a"), argv


def test_options_that_exclude_each_other_give_way_to_the_command_line(tmp_path):
    f = _write(tmp_path, "steps: 50\ntext: shakespeare\n")
    args = _parse("train-lm", "--config", f, "--epochs", "2")
    settle_exclusive(args, ("steps", "time_budget", "epochs"))
    assert (args.steps, args.epochs, args.text) == (None, 2.0, "shakespeare")
    args = _parse("train-lm", "--time-budget", "3", "--config", f)
    assert (args.steps, args.time_budget) == (None, 3.0)
    args = _parse("train-lm", "--config", f)
    settle_exclusive(args, ("steps", "time_budget", "epochs"))
    assert (args.steps, args.epochs) == (50, None)


@pytest.mark.parametrize(
    "text, fragments",
    [
        ("d_modle: 32\n", ["unknown option 'd_modle'", "did you mean d_model?", "warmup", "d_model"]),
        ("d_model: 0\n", ["d_model", "must be an integer in [1, 16384], got 0"]),
        ("d_model: 32.5\n", ["d_model", "expected an integer, got '32.5'"]),
        ("d_model: [1, 2]\n", ["d_model takes one value (an integer in [1, 16384])", "got [1, 2] (a list)"]),
        ("decay: 1\n", ["decay is a flag: it takes true or false, got 1"]),
        ("sampling: yes\n", ["sampling takes one value ('random' or 'first')", "got true"]),
        ("preset: huge\n", ["preset must be one of base, quick, standard, tiny, tutorial, got 'huge'"]),
        ("epochs: [\n", ["is not valid YAML at line 2"]),
        ("- 1\n", ["must be a mapping of option names to values", "got a list"]),
        ("layers: 2\n", ["layers is an old spelling; write n_layers"]),
        ("resume: true\n", ["resume is not an option a configuration file sets"]),
        ("d_model: 32\nd-model: 64\n", ["d_model and d-model set the same option"]),
        # no object is ever built from a file: a Python tag is refused, not run
        ("d_model: !!python/object/apply:os.getpid []\n", ["is not valid YAML", "python/object"]),
    ],
)
def test_a_bad_file_is_one_line_naming_the_file_the_key_and_what_is_allowed(tmp_path, capsys, text, fragments):
    f = _write(tmp_path, text)
    with pytest.raises(SystemExit) as info:
        _parse("train", "--config", f)
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("transformer-cpp train: error: --config '") and f in lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_a_missing_file_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _parse("train", "--config", str(tmp_path / "none.yaml"))
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "none.yaml': cannot be read" in err


def test_what_a_run_writes_holds_options_only():
    parser = _subparser("train")
    resolved = {"d_model": 32, "decay": False, "progress": False, "resume": True, "config": "x", "seed": 3}
    resolved.update(dtype="float32", src_vocab_size=300, threads=None)  # not options / no value
    values = config_values(parser, resolved)
    assert values == {"no_progress": True, "d_model": 32, "decay": False, "seed": 3}
    assert set(values) <= set(_options(parser))
