"""SentencePieceTokenizer against transformers' MarianTokenizer on a locally built Marian layout."""

from __future__ import annotations

import json

import pytest
from helpers.sentencepiece_models import pieces, train_sentencepiece

from transformer_cpp.tokenizer import SentencePieceTokenizer, SubwordTokenizer, Tokenizer, tokenizer_from_str

marian = pytest.importorskip("transformers.models.marian.tokenization_marian")

WORDS = "the cat dog house año niño café 12 345 runs quickly über straße día mañana".split()
SENTENCES = [
    "",
    "the cat runs",
    "El niño come café a las 12:45.",
    "über die Straße, 345 Tage!",
    "unknown ☃ and 漢字 here",
    "  spaced   out  ",
    "año día mañana",
]


@pytest.fixture(params=[False, True], ids=["shared", "separate"])
def marian_dir(request, tmp_path):
    lines = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(6)) for i in range(300)]
    src = train_sentencepiece(tmp_path, "src", lines, 60)
    tgt = train_sentencepiece(tmp_path, "tgt", lines[::-1] + ["niño straße"] * 20, 60)
    out = tmp_path / "marian"
    out.mkdir()
    (out / "source.spm").write_bytes(src)
    (out / "target.spm").write_bytes(tgt)

    def vocab(pieces):
        order = ["</s>", "<unk>"] + [p for p in dict.fromkeys(pieces) if p not in ("</s>", "<unk>")]
        return {p: i for i, p in enumerate(order + ["<pad>"])}

    separate = request.param
    if separate:
        (out / "vocab.json").write_text(json.dumps(vocab(pieces(src))), encoding="utf-8")
        (out / "target_vocab.json").write_text(json.dumps(vocab(pieces(tgt))), encoding="utf-8")
    else:
        (out / "vocab.json").write_text(json.dumps(vocab(pieces(src) + pieces(tgt))), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps({"separate_vocabs": separate}), encoding="utf-8")
    return out, separate


def _hf(path, separate):
    args = dict(
        source_spm=str(path / "source.spm"), target_spm=str(path / "target.spm"), vocab=str(path / "vocab.json")
    )
    if separate:
        args["target_vocab_file"] = str(path / "target_vocab.json")
    return marian.MarianTokenizer(**args, separate_vocabs=separate)


def test_ids_and_decodes_equal_marian_tokenizer(marian_dir):
    path, separate = marian_dir
    hf = _hf(path, separate)
    src = SentencePieceTokenizer.from_marian_dir(path, "source")
    tgt = SentencePieceTokenizer.from_marian_dir(path, "target")
    assert isinstance(src, Tokenizer)
    assert (src.end_id, src.unk_id, src.pad_id, src.start_id) == (0, 1, src.vocab_size - 1, src.vocab_size - 1)
    for text in SENTENCES:
        assert src.encode(text) == hf(text)["input_ids"], text
        assert tgt.encode(text) == hf(text_target=text)["input_ids"], text
        ids = tgt.encode(text)
        assert tgt.decode(ids) == hf.decode(ids, skip_special_tokens=True), text
    assert src.encode("unknown ☃")[-2] == src.unk_id or "☃" in "".join(src.get_vocab())


def test_save_load_round_trip_and_dispatch(marian_dir, tmp_path):
    path, _ = marian_dir
    tok = SentencePieceTokenizer.from_marian_dir(path, "target")
    file = tmp_path / "tok.json"
    tok.save(file)
    again = SentencePieceTokenizer.load(file)
    assert again == tok
    assert tokenizer_from_str(file.read_text(encoding="utf-8")) == tok
    for text in SENTENCES:
        assert again.encode(text) == tok.encode(text)
    assert not tok.expects_cleaned_text and tok.kind == "sentencepiece"


def test_old_bpe_documents_without_kind_still_load():
    bpe = SubwordTokenizer.build_from_corpus(["a b c"] * 20 + ["año"] * 5, 300)
    doc = json.loads(bpe.to_str())
    assert doc.pop("kind") == "bpe"
    assert tokenizer_from_str(json.dumps(doc)) == bpe


def test_damaged_documents_are_one_line_errors(marian_dir):
    path, _ = marian_dir
    doc = json.loads(SentencePieceTokenizer.from_marian_dir(path).to_str())
    for change in ({"model": "not base64!"}, {"model": "AAAA"}, {"vocab": {"a": 3}}, {"version": 9}):
        with pytest.raises(ValueError, match="not a SentencePieceTokenizer") as err:
            SentencePieceTokenizer.from_str(json.dumps(dict(doc, **change)))
        assert "\n" not in str(err.value)


def test_checkpoint_save_and_load_with_sentencepiece_tokenizers(marian_dir, tmp_path):
    from transformer_cpp.checkpoint import load_checkpoint, save_checkpoint

    import transformer_cpp as tc

    path, _ = marian_dir
    src = SentencePieceTokenizer.from_marian_dir(path, "source")
    tgt = SentencePieceTokenizer.from_marian_dir(path, "target")
    model = tc.Transformer(src.vocab_size, tgt.vocab_size, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_length=8)
    out = save_checkpoint(tmp_path / "run", model, src, tgt)
    ckpt = load_checkpoint(out, optimizer=False)
    assert ckpt.src_tokenizer == src and ckpt.tgt_tokenizer == tgt
    assert ckpt.tgt_tokenizer.encode("el niño") == tgt.encode("el niño")
