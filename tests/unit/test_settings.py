"""Settings are declared once (``transformer_cpp.config.setting``) and the command line's options
are generated from the declarations (``transformer_cpp.cli.options.add_settings``).

``train``, ``serve`` and ``bench`` are pinned here by each option string and the default it
leaves when it is not given, as these commands had them when their options were written by hand:
the generated options are the same public command line. Every declared setting has its help and
one option (a flag's ``--name/--no-name`` pair counting as one), found exactly once in its
command's parser. The generator itself is checked on a small declared class: its types, messages,
defaults and flag forms."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Optional

import pytest

from transformer_cpp import cli
from transformer_cpp._checks import Limit
from transformer_cpp.bench import BenchSettings
from transformer_cpp.cli.options import add_settings, given
from transformer_cpp.config import check_settings, choice_setting, flag_setting, setting, setting_limits, settings_of
from transformer_cpp.data import DataRecord
from transformer_cpp.serve import ServeConfig, ServerOptions
from transformer_cpp.training import TrainConfig
from transformer_cpp.translate import DecodeOptions

SUPPRESS = argparse.SUPPRESS

# option string -> its default, as the hand-written parsers had them (deprecated aliases: SUPPRESS)
EXPECTED = {
    "train": {
        # added since the parsers were generated: a YAML file of options, fine-tuning, early
        # stopping, gradient accumulation
        "--config": None,
        "--init-from": None,
        "--patience": None,
        "--accumulate": None,
        "--preset": None,
        "--data": None,
        "--out": None,
        "--resume": False,
        "--epochs": None,
        "--time-budget": None,
        "--threads": None,
        "--adaptive-threads": None,
        "--no-adaptive-threads": None,
        "--no-progress": False,
        "--mpi-timeout": None,
        "--source-lang": None,
        "--target-lang": None,
        "--columns": None,
        "--num-samples": None,
        "--sampling": None,
        "--vocab-size": None,
        "--joint-vocab": None,
        "--valid-fraction": None,
        "--test-fraction": None,
        "--split-seed": None,
        "--max-length": None,
        "--encoding": None,
        "--decode-errors": None,
        "--d-model": None,
        "--n-layers": None,
        "--n-heads": None,
        "--d-ff": None,
        "--dropout": None,
        "--layout": None,
        "--pre-norm": None,
        "--no-pre-norm": None,
        "--share-embeddings": None,
        "--no-share-embeddings": None,
        "--layer-norm-eps": None,
        "--encoder-attention": None,
        "--decoder-attention": None,
        "--precision": None,
        "--warmup": None,
        "--lr-scale": None,
        "--fixed-lr": None,
        "--beta1": None,
        "--beta2": None,
        "--adam-eps": None,
        "--clip-norm": None,
        "--label-smoothing": None,
        "--batch-size": None,
        "--max-tokens": None,
        "--decay": None,
        "--no-decay": None,
        "--seed": None,
        "--log-every": None,
        "--bucket-by-length": None,
        "--drop-remainder": None,
        "--keep-checkpoints": None,
        "--val-bleu-sentences": None,
        "--average-last": None,
        "--layers": "==SUPPRESS==",
        "--heads": "==SUPPRESS==",
        "--tie-embeddings": "==SUPPRESS==",
        "--no-tie-embeddings": "==SUPPRESS==",
        "--fixed-threads": "==SUPPRESS==",
    },
    "serve": {
        "--model": None,
        "--host": "127.0.0.1",
        "--port": 8000,
        "--threads": None,
        "--max-batch": 32,
        "--max-wait-ms": 5.0,
        "--max-batch-tokens": 16384,
        "--batch-seconds": 1.0,
        "--beam-size": 1,
        "--length-penalty": 1.0,
        "--max-output-tokens": None,
        "--max-length": "==SUPPRESS==",
        "--compute-type": "float32",
        "--max-beam-size": None,
        "--max-request-bytes": 65536,
        "--max-texts": 64,
        "--max-chars": 1000,
        "--max-queue": 1024,
        "--max-source-tokens": 256,
        "--max-request-tokens": 131072,
        "--max-attention-weights": 262144,
        "--graceful-timeout": 30.0,
        "--read-timeout": 10.0,
        "--keep-alive-timeout": 5.0,
        "--max-connections": 256,
        "--max-header-bytes": 16384,
        "--allowed-hosts": None,
        "--log-level": "info",
        "--access-log": False,
    },
    "bench": {
        "--threads": None,
        "--quick": False,
        "--isa": None,
        "--json": None,
        "--steps": None,
        "--warmup": None,
        "--sentences": None,
        "--skip-memory": False,
        "--skip-decode": False,
        "--skip-scaling": False,
        "--skip-busy": False,
        "--skip-serving": False,
        "--skip-mpi": False,
        "--serving-only": False,
        "--attention": False,
        "--marian": False,
        "--marian-shapes": None,
        "--no-torch": False,
        "--no-ctranslate2": False,
        "--seed": 0,
    },
}
# what changed on purpose: --no-progress now sets TrainConfig's own setting, progress, and like
# every train option leaves None (not given: the run's default) when it is left out
CHANGED = {("train", "--no-progress"): None}

# each declared class and the command whose options it declares
COMMANDS = {
    TrainConfig: "train",
    DataRecord: "train",
    ServeConfig: "serve",
    ServerOptions: "serve",
    BenchSettings: "bench",
    DecodeOptions: "translate",
}


def _parsers():
    parser = cli.build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("command", sorted(EXPECTED))
def test_the_generated_options_and_defaults_are_the_command_lines(command):
    p = _parsers()[command]
    found = {o: a.default for a in p._actions if not isinstance(a, argparse._HelpAction) for o in a.option_strings}
    want = {o: CHANGED.get((command, o), d) for o, d in EXPECTED[command].items()}
    assert sorted(found) == sorted(want)
    assert {o: d for o, d in found.items() if d != want[o]} == {}


@pytest.mark.parametrize("cls", list(COMMANDS), ids=lambda c: c.__name__)
def test_each_declared_setting_has_one_option_and_help(cls):
    actions = [a for a in _parsers()[COMMANDS[cls]]._actions if a.option_strings]
    declared = settings_of(cls)
    assert declared and all(s.help.strip() for s in declared.values()), cls
    for name, s in declared.items():
        if not s.option:
            continue
        flag = s.limit is not None and s.limit.kind == "flag"
        pair = len(s.option) == 2 and s.option[1] == "--no-" + s.option[0][2:]
        assert len(s.option) == 1 or (flag and pair), (name, s.option)
        mine = [a for a in actions if set(s.option) <= set(a.option_strings)]
        assert len(mine) == 1, (name, s.option)
        assert mine[0].dest == name and mine[0].option_strings == list(s.option), name
        assert mine[0].help == SUPPRESS if s.hidden else mine[0].help, name


def test_every_option_of_serve_and_bench_is_declared():
    """Besides --model and the shared --threads and --max-length alias, serve's options are its
    settings' (bench has nothing else)."""
    owned = {
        o for cls in (ServeConfig, ServerOptions, DecodeOptions) for s in settings_of(cls).values() for o in s.option
    }
    serve = {o for a in _parsers()["serve"]._actions for o in a.option_strings} - {"-h", "--help"}
    assert serve - owned == {"--model", "--threads", "--max-length"}
    bench = {o for a in _parsers()["bench"]._actions for o in a.option_strings} - {"-h", "--help"}
    assert bench == {o for s in settings_of(BenchSettings).values() for o in s.option}


# --- the generator, on a class declared for the test ------------------------------------------


@dataclasses.dataclass
class Knobs:
    steps: int = setting(10, limit=Limit(True, 0, 100), option_limit=Limit(True, 1, 100), help="steps")
    rate: float = setting(0.5, limit=Limit(False, 0, 1), help="rate (default {default:g})")
    length: int = setting(0, limit=Limit(True, 2, 50), zero="automatic", help="length", option="--max-length")
    mode: str = choice_setting("a", ["a", "b"], "mode")
    loud: bool = flag_setting("loud")
    shown: bool = setting(True, limit=Limit.flag(), help="a bar", option="--no-shown")
    both: bool = setting(True, limit=Limit.flag(), help="both", option=("--both", "--no-both"))
    out: Optional[str] = setting(None, help="where", const="-")
    word: str = setting("X", option_check=str.upper, help="a word")
    secret: Optional[int] = setting(None, limit=Limit(True, 0, 9), help="internal", hidden=True)
    kept: int = setting(3, limit=Limit(True, 0, 5), help="not an option", option=())

    def __post_init__(self) -> None:
        check_settings(self)


class _Fail(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Fail(message)


def _parser(**kw) -> argparse.ArgumentParser:
    p = _Parser(prog="knobs")
    assert add_settings(p, Knobs, **kw) == [n for n, s in settings_of(Knobs).items() if s.option]
    return p


def test_an_option_is_named_by_its_field_unless_declared():
    options = {n: s.option for n, s in settings_of(Knobs).items()}
    assert options["steps"] == ("--steps",) and options["loud"] == ("--loud",) and options["kept"] == ()
    assert options["length"] == ("--max-length",) and options["both"] == ("--both", "--no-both")


def test_the_generator_converts_and_checks_by_the_limit():
    args = _parser().parse_args(["--steps", "7", "--rate", "0.25", "--mode", "b", "--max-length", "0", "--word", "hi"])
    assert (args.steps, args.rate, args.mode, args.length, args.word) == (7, 0.25, "b", 0, "HI")
    assert type(args.steps) is int and type(args.rate) is float
    assert Knobs(**given(args, Knobs)) == Knobs(steps=7, rate=0.25, mode="b", word="HI")
    for argv, message in [
        (["--steps", "2.0"], "argument --steps: expected an integer, got '2.0'"),
        (["--steps", "101"], "argument --steps: Knobs: steps must be an integer in [0, 100], got 101"),
        (["--steps", "0"], "argument --steps: Knobs: steps must be an integer in [1, 100], got 0"),  # the option's
        (["--rate", "nan"], "argument --rate: Knobs: rate must be a number in [0, 1], got nan"),
        (["--max-length", "1"], "argument --max-length: max_length must be 0 (automatic) or an integer in [2, 50]"),
        (["--mode", "c"], "argument --mode: Knobs: mode must be 'a' or 'b', got 'c'"),
    ]:
        with pytest.raises(_Fail) as info:
            _parser().parse_args(argv)
        assert str(info.value).startswith(message), (argv, str(info.value))
    with pytest.raises(_Fail, match="argument --steps: steps must be"):
        _parser(owner="").parse_args(["--steps", "-1"])


def test_the_generator_defaults_flags_const_and_help():
    p = _parser()
    args = p.parse_args([])
    assert vars(args) == {n: s.default for n, s in settings_of(Knobs).items() if s.option}
    assert vars(_parser(unset=True).parse_args([])) == {n: None for n in vars(args)}
    assert _parser(unset={"rate"}).parse_args([]).rate is None and _parser(unset={"rate"}).parse_args([]).steps == 10
    flags = p.parse_args(["--loud", "--no-shown", "--no-both", "--out"])
    assert (flags.loud, flags.shown, flags.both, flags.out) == (True, False, False, "-")
    assert p.parse_args(["--out", "f.json", "--both"]).out == "f.json"
    text = p.format_help()
    assert "rate (default 0.5) (a number in [0, 1])" in text and "steps (an integer in [1, 100])" in text
    assert "{a,b}" in text and "--secret" not in text and "--kept" not in text
    assert p.parse_args(["--secret", "4"]).secret == 4


def test_declared_settings_are_checked_and_give_the_limits():
    with pytest.raises(ValueError, match=r"^Knobs: steps must be an integer in \[0, 100\], got 101$"):
        Knobs(steps=101)
    with pytest.raises(TypeError, match="Knobs: loud must be True or False"):
        Knobs(loud="no")
    with pytest.raises(TypeError, match="Knobs: kept must be"):
        Knobs(kept=None)  # None only where the default is None
    assert Knobs(secret=None).secret is None and Knobs(length=0).length == 0 and Knobs(rate=1).rate == 1.0
    assert set(setting_limits(Knobs)) == {"steps", "rate", "mode", "loud", "shown", "both", "secret", "kept"}
    assert TrainConfig.LIMITS == setting_limits(TrainConfig) and DecodeOptions.LIMITS == setting_limits(DecodeOptions)
