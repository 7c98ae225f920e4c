"""Importing a published MarianMT model as a run directory (``import_pretrained``, ``transformer-cpp
import``) and translating with it (``Translator.from_checkpoint``, ``Translator.from_pretrained``,
``translate --model``): a MarianMT directory built here (random weights, SentencePiece models
trained here, vocab.json, tokenizer_config.json); our greedy ids and text against
MarianMTModel.generate on MarianTokenizer's input ids; the provenance record; a Hub name while
offline and a model that is not Marian refused in one line."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Dict, List

import numpy as np

import pytest
from helpers.marian import marian_directory, tiny_marian_config, trimmed

from transformer_cpp import Translator, cli, encode_pairs, import_pretrained
from transformer_cpp.checkpoint import load_checkpoint

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.torch  # the module imports PyTorch

STEPS = 8  # generated tokens at most
WORDS = "the cat dog house sees runs quickly under a big small red tree near my old friend".split()
SENTENCES = ["the cat runs", "a big red dog sees my old friend", "house", "the small tree near a house runs quickly"]


@pytest.fixture(scope="module")
def marian(tmp_path_factory: Any) -> Dict[str, Any]:
    """A MarianMT directory named like a published one: tokenizers, config and random weights."""
    tmp = tmp_path_factory.mktemp("marian")
    out, vocab = marian_directory(tmp, WORDS, {"separate_vocabs": False, "source_lang": "en", "target_lang": "es"})
    # weights large enough that the output depends on the source
    pad = len(vocab) - 1
    config = tiny_marian_config(len(vocab), init_std=0.25)
    hf_tok = transformers.MarianTokenizer(
        source_spm=str(out / "source.spm"), target_spm=str(out / "target.spm"), vocab=str(out / "vocab.json")
    )
    for seed in range(20):  # the first seed whose random model translates the sentences differently
        torch.manual_seed(seed)
        model = transformers.MarianMTModel(config).eval()
        with torch.no_grad():
            model.final_logits_bias[0, pad] = -1e4  # padding is never generated on either side
        found = _generate({"hf": model, "tok": hf_tok, "pad": pad})
        if len({tuple(f) for f in found}) == len(found):
            break
    model.save_pretrained(out)
    return {"path": out, "hf": model, "tok": hf_tok, "pad": pad}


def _generate(m: Dict[str, Any]) -> List[List[int]]:
    """MarianMTModel's greedy ids of SENTENCES (without the start token, up to and including the end)."""
    enc = m["tok"](SENTENCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = m["hf"].generate(**enc, num_beams=1, do_sample=False, max_new_tokens=STEPS)
    return [trimmed(row, m["pad"]) for row in out.numpy()[:, 1:]]


def _ours(translator: Translator) -> List[Any]:
    return translator.translate_batch(SENTENCES, max_output_tokens=STEPS, return_attention=True)


def _assert_same_as_transformers(translator: Translator, m: Dict[str, Any]) -> None:
    expected = _generate(m)
    ours = _ours(translator)
    assert [t.source_ids for t in ours] == m["tok"](SENTENCES)["input_ids"]
    assert [t.target_ids for t in ours] == expected
    assert len({tuple(e) for e in expected}) > 1  # the sentences are not all translated alike
    for t, ids in zip(ours, expected):
        assert t.text == " ".join(m["tok"].decode(ids, skip_special_tokens=True).split())


def test_imported_run_translates_as_transformers_does(marian: Dict[str, Any], tmp_path: Any) -> None:
    run = tmp_path / "run"
    ckpt = import_pretrained(marian["path"], run)
    assert ckpt.parent == run
    translator = Translator.from_checkpoint(run)
    assert (translator.src_lang, translator.tgt_lang) == ("en", "es")
    assert translator.model.config["pad_id"] == marian["pad"]
    _assert_same_as_transformers(translator, marian)


def test_from_pretrained_translates_the_same_without_a_run(marian: Dict[str, Any], tmp_path: Any) -> None:
    translator = Translator.from_pretrained(marian["path"])
    assert (translator.src_lang, translator.tgt_lang) == ("en", "es")
    _assert_same_as_transformers(translator, marian)


def test_provenance_records_every_file_and_the_license(marian: Dict[str, Any], tmp_path: Any) -> None:
    run = tmp_path / "run"
    ckpt = import_pretrained(marian["path"], run)
    record = json.loads((run / "pretrained.json").read_text(encoding="utf-8"))
    assert record["source"] == str(marian["path"])
    assert record["license"] == "unknown"  # a local directory without a model card
    files = sorted(p.name for p in marian["path"].iterdir() if p.is_file())
    assert sorted(record["files"]) == files and "model.safetensors" in files
    for name, digest in record["files"].items():
        assert digest == hashlib.sha256((marian["path"] / name).read_bytes()).hexdigest()
    assert load_checkpoint(ckpt, optimizer=False).data["pretrained"] == record
    with pytest.raises(FileExistsError, match="already holds a run"):
        import_pretrained(marian["path"], run)


def test_model_card_license_is_read(marian: Dict[str, Any], tmp_path: Any) -> None:
    import shutil

    copy = tmp_path / "model"
    shutil.copytree(marian["path"], copy)
    (copy / "README.md").write_text("---\nlanguage: en\nlicense: apache-2.0\n---\n# A model\n", encoding="utf-8")
    import_pretrained(copy, tmp_path / "run", src_lang="en", tgt_lang="es")
    assert json.loads((tmp_path / "run" / "pretrained.json").read_text())["license"] == "apache-2.0"


def test_command_line_import_and_translate(marian: Dict[str, Any], tmp_path: Any, capsys: Any) -> None:
    run = tmp_path / "run"
    assert cli.main(["import", str(marian["path"]), "--out", str(run)]) == 0
    assert "license: unknown" in capsys.readouterr().out
    assert cli.main(["translate", "--model", str(run), "--max-output-tokens", str(STEPS), SENTENCES[1]]) == 0
    expected = _generate(marian)[1]
    assert capsys.readouterr().out.strip() == " ".join(marian["tok"].decode(expected, skip_special_tokens=True).split())


def test_hub_name_offline_fails_in_one_line(tmp_path: Any, monkeypatch: Any, capsys: Any) -> None:
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    name = "Helsinki-NLP/opus-mt-xx-yy"
    assert cli.main(["import", name, "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err and "pass its path" in err
    assert not (tmp_path / "run").exists()


def test_hub_error_keeps_a_shortened_reason(tmp_path: Any, monkeypatch: Any) -> None:
    """A download that fails with a long message: the error keeps 300 characters of it at most,
    cut between words and marked with "...", in one line; a short one is kept whole."""
    hub = pytest.importorskip("huggingface_hub")

    def failing(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError(message)

    monkeypatch.setattr(hub, "snapshot_download", failing)
    name = "Helsinki-NLP/opus-mt-xx-yy"
    message = "word " * 200
    with pytest.raises(OSError) as long_error:
        import_pretrained(name, tmp_path / "run")
    reason = str(long_error.value).split("RuntimeError: ", 1)[1].split(")", 1)[0]
    assert reason.endswith(" ...") and len(reason) <= 304 and "\n" not in str(long_error.value)
    assert reason[: -len(" ...")].split() == ["word"] * len(reason[: -len(" ...")].split())
    message = "no route\nto host"
    with pytest.raises(OSError, match=re.escape("RuntimeError: no route to host)")):
        import_pretrained(name, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_model_that_is_not_marian_is_refused_by_field(marian: Dict[str, Any], tmp_path: Any, capsys: Any) -> None:
    import shutil

    copy = tmp_path / "t5"
    shutil.copytree(marian["path"], copy)
    config = json.loads((copy / "config.json").read_text())
    config["model_type"] = "t5"
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="config.json's model_type is 't5'"):
        import_pretrained(copy, tmp_path / "run")
    assert cli.main(["import", str(copy), "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model_type" in err


def test_languages_are_required_when_the_model_does_not_say(marian: Dict[str, Any], tmp_path: Any) -> None:
    import shutil

    copy = tmp_path / "model"
    shutil.copytree(marian["path"], copy)
    (copy / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": False}))
    with pytest.raises(ValueError, match="--source-lang and --target-lang"):
        import_pretrained(copy, tmp_path / "run")
    import_pretrained(copy, tmp_path / "run", src_lang="en", tgt_lang="es")
    data = load_checkpoint(tmp_path / "run", optimizer=False).data
    assert (data["src_lang"], data["tgt_lang"]) == ("en", "es")


def test_opus_mt_hub_names_are_cc_by(marian: Dict[str, Any]) -> None:
    from transformer_cpp.pretrained.importing import languages, model_license

    assert model_license("Helsinki-NLP/opus-mt-en-es", marian["path"]) == "CC-BY-4.0"
    assert languages("Helsinki-NLP/opus-mt-de-fr", marian["path"].parent, None, None) == ("de", "fr")
    assert languages("x", marian["path"], "fr", None) == ("fr", "es")  # what is given wins


def test_pairs_are_padded_with_the_tokenizers_padding_id(marian: Dict[str, Any]) -> None:
    from transformer_cpp.data.batching import make_batch

    t = Translator.from_pretrained(marian["path"])
    targets = ["el gato", "un perro grande ve a mi viejo amigo", "casa"]
    enc = encode_pairs(SENTENCES[:3], targets, t.src_tokenizer, t.tgt_tokenizer, None)
    pad = marian["pad"]
    assert (enc.src_pad_id, enc.tgt_pad_id) == (pad, pad)
    for i, (s, r) in enumerate(zip(SENTENCES[:3], targets)):
        src, tgt = t.src_tokenizer.encode(s), t.tgt_tokenizer.encode(r)
        assert enc.src[i].tolist() == src + [pad] * (enc.src.shape[1] - len(src))
        # the decoder input starts with the start id (MarianTokenizer's ids do not hold it)
        tgt = [t.tgt_tokenizer.start_id] + tgt
        assert enc.tgt[i].tolist() == tgt + [pad] * (enc.tgt.shape[1] - len(tgt))
    batch = make_batch(enc, np.arange(3))
    # the labels are each target without its first id; 0 is the end id here, not padding
    assert batch.num_target_tokens == int((enc.tgt_lengths - 1).sum())
    assert int(np.count_nonzero(batch.tgt_out == 0)) == 3


def test_evaluate_scores_an_imported_run(marian: Dict[str, Any], tmp_path: Any, capsys: Any) -> None:
    run = tmp_path / "run"
    import_pretrained(marian["path"], run)
    pairs = tmp_path / "pairs.tsv"
    targets = ["el gato corre", "un perro grande", "casa", "el arbol"]
    pairs.write_text("".join(f"{s}\t{r}\n" for s, r in zip(SENTENCES, targets)), encoding="utf-8")
    assert cli.main(["evaluate", "--model", str(run), "--pairs", str(pairs)]) == 0
    out = capsys.readouterr().out
    loss = float(next(line.split()[1] for line in out.splitlines() if line.startswith("loss")))
    # MarianMTModel's mean cross-entropy over the same labels (the end id included, padding not)
    tok = marian["tok"]
    enc = tok(SENTENCES, text_target=targets, return_tensors="pt", padding=True)
    labels = enc.pop("labels")
    labels[labels == marian["pad"]] = -100
    with torch.no_grad():
        ref = float(marian["hf"](**enc, labels=labels).loss)
    assert abs(loss - ref) <= 1e-4
