"""Fine-tuning an imported MarianMT run (``train --init-from RUN``): the new run keeps RUN's
architecture, tokenizers, languages, provenance and decoding defaults, records where it started,
reads the user's pairs raw (SentencePiece normalises them itself) and splits them leak-free;
``evaluate`` scores its held-out split and ``--resume`` continues it; options that would change
the model are refused in one line."""

from __future__ import annotations

import json
from typing import Any, Dict

import numpy as np
import pytest
from helpers.marian import marian_directory, tiny_marian_config

from transformer_cpp import cli, import_pretrained
from transformer_cpp.checkpoint import load_checkpoint
from transformer_cpp.data import DataRecord
from transformer_cpp.task import load_split
from transformer_cpp.task.finetune import _trained_length
from transformer_cpp.translate import Translator

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.torch  # the module imports PyTorch

WORDS = "the cat dog house sees runs quickly under a big small red tree near my old friend".split()
RAW = "The CAT  runs!"  # what cleaning would change (case, spacing, punctuation)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: Any) -> Dict[str, Any]:
    """A MarianMT directory (SentencePiece models trained here, random weights), imported as a run."""
    tmp = tmp_path_factory.mktemp("finetune")
    out, vocab = marian_directory(tmp, WORDS, {"separate_vocabs": False})
    pad = len(vocab) - 1
    config = tiny_marian_config(len(vocab), layers=1, heads=2, forced_eos_token_id=0, bad_words_ids=None)
    torch.manual_seed(0)
    transformers.MarianMTModel(config).save_pretrained(out)
    rules = {"bad_words_ids": [[pad]], "num_beams": 3, "max_length": 40, "forced_eos_token_id": 0, "eos_token_id": 0}
    (out / "generation_config.json").write_text(json.dumps(rules), encoding="utf-8")
    run = tmp / "run"
    ckpt = import_pretrained(out, run)
    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(240):
        words = list(rng.choice(WORDS, size=int(rng.integers(2, 6))))
        pairs.append((" ".join(words), " ".join(reversed(words))))
    pairs.append((RAW, "El GATO  corre!"))
    data = tmp / "pairs.tsv"
    data.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return {"run": run, "ckpt": ckpt, "data": data, "pad": pad, "tmp": tmp}


def _train(m: Dict[str, Any], out: Any, *more: str) -> int:
    return cli.main(
        ["train", "--init-from", str(m["run"]), "--data", str(m["data"]), "--out", str(out), "--threads", "1"]
        + ["--no-progress", "--fixed-lr", "0.003", "--max-tokens", "0", "--batch-size", "32", "--time-budget", "0"]
        + ["--val-bleu-sentences", "0", "--average-last", "0", "--epochs", "1", "--test-fraction", "0.1"]
        + list(more)
    )


def test_finetuned_run_keeps_the_model_and_records_its_origin(imported: Dict[str, Any], tmp_path: Any) -> None:
    out = tmp_path / "tuned"
    assert _train(imported, out) == 0
    base = load_checkpoint(imported["run"], optimizer=False)
    tuned = load_checkpoint(out, optimizer=True)
    assert tuned.model.config == base.model.config  # the architecture is RUN's
    assert tuned.src_tokenizer.to_str() == base.src_tokenizer.to_str()
    assert tuned.tgt_tokenizer.to_str() == base.tgt_tokenizer.to_str()
    assert tuned.model.step > 0
    moved = [
        name
        for name, p in tuned.model.parameters().items()
        if not np.array_equal(p.value, base.model.parameters()[name].value)
    ]
    assert "decoder.embedding.weight" in moved and "encoder.layers.0.self_attention.query.weight" in moved
    data = tuned.data
    assert data["init_from"]["checkpoint"] == str(imported["ckpt"])
    assert tuned.train_config["init_from"] == str(imported["run"].resolve())
    assert (data["src_lang"], data["tgt_lang"]) == ("en", "es")
    assert data["pretrained"] == base.data["pretrained"]
    assert data["decode_defaults"] == base.data["decode_defaults"]
    assert data["decode_defaults"]["beam_size"] == 3 and data["decode_defaults"]["force_end"] is True
    # the imported model was trained elsewhere on pairs of unknown length: no warning for long inputs
    assert data["trained_length"] is None and data["max_length"] > 0
    assert Translator.from_checkpoint(out).trained_length is None
    assert json.loads((out / "pretrained.json").read_text()) == json.loads(
        (imported["run"] / "pretrained.json").read_text()
    )
    # the pairs are read raw, as the SentencePiece tokenizers take them, and the split is rebuilt alike
    assert data["clean"] is False
    split, rebuilt = load_split(str(imported["data"]), DataRecord.from_dict(data))
    assert rebuilt.split_digests == data["split_digests"]
    everything = split.train[0] + split.valid[0] + split.test[0]
    assert RAW in everything
    assert not set(split.test[0]) & set(split.train[0])  # leak-free: no test source is trained on


def test_evaluate_and_resume_a_finetuned_run(imported: Dict[str, Any], tmp_path: Any, capsys: Any) -> None:
    out = tmp_path / "tuned"
    assert _train(imported, out) == 0
    capsys.readouterr()
    assert cli.main(["evaluate", "--model", str(out), "--threads", "1"]) == 0
    report = capsys.readouterr().out
    assert "the test split" in report and "BLEU" in report
    assert "beam size 3" in report  # the imported model's num_beams, the default
    assert cli.main(["evaluate", "--model", str(out), "--threads", "1", "--beam-size", "1"]) == 0
    assert "beam size 1" in capsys.readouterr().out  # an option overrides it
    step = load_checkpoint(out, optimizer=True).model.step
    assert _train(imported, out, "--resume", "--epochs", "2") == 0
    assert load_checkpoint(out, optimizer=True).model.step > step


@pytest.mark.parametrize(
    "option, shown",
    [
        (["--d-model", "32"], "--d-model 32 (the model has 16)"),
        (["--vocab-size", "1000"], "--vocab-size (the vocabularies are the model's)"),
        (["--target-lang", "fr"], "--target-lang fr (the model translates en -> es)"),
    ],
)
def test_options_that_change_the_model_are_refused(
    imported: Dict[str, Any], tmp_path: Any, capsys: Any, option: Any, shown: str
) -> None:
    out = tmp_path / "tuned"
    assert _train(imported, out, *option) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and shown in err
    assert not out.exists()


def test_init_from_a_missing_run_is_one_line(imported: Dict[str, Any], tmp_path: Any, capsys: Any) -> None:
    m = dict(imported, run=tmp_path / "nothing")
    assert _train(m, tmp_path / "tuned") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--init-from" in err


def test_trained_length_covers_every_run_of_the_model() -> None:
    """A fine-tuned run warns beyond the longest pair of all the model's training: RUN's (its own
    record, or the one RUN carried from its start) and its own; unknown stays unknown."""
    assert _trained_length({"max_length": 40}, 25) == 40
    assert _trained_length({"max_length": 20}, 25) == 25
    assert _trained_length({"max_length": 12, "trained_length": 60}, 25) == 60
    assert _trained_length({"max_length": 12, "trained_length": None}, 25) is None
    assert _trained_length({}, 25) is None
