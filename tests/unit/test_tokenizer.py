"""Tests for transformer_cpp.tokenizer.SubwordTokenizer (byte-level BPE)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from transformer_cpp.text import clean_corpus
from transformer_cpp.tokenizer import SPECIAL_TOKENS, SubwordTokenizer

SPANISH = [
    "¿Qué año es?",
    "¡Hola, señor!",
    "¿Cómo está usted?",
    "El niño comió una manzana.",
    "La Sra. García vive en EE.UU.",
    "Mañana iré a la playa.",
    "¿Dónde está el baño?",
    "Él tiene 10.000 pesos.",
    "No sé qué decir...",
    "«Sí», dijo ella.",
    "Tom está cansado.",
    "Estoy aquí.",
    "¿Qué hora es?",
    "Me gusta el café.",
    "Ella habla español e inglés.",
]
ENGLISH = [
    "What year is it?",
    "Hello, sir!",
    "How are you?",
    "The boy ate an apple.",
    "Mrs. Garcia lives in the U.S.A.",
    "Tomorrow I'll go to the beach.",
    "Where is the bathroom?",
    "He has 10,000 pesos.",
    "I don't know what to say...",
    '"Yes," she said.',
    "Tom is tired.",
    "I'm here.",
    "What time is it?",
    "I like coffee.",
    "She speaks Spanish and English.",
]
CORPUS = ENGLISH * 3 + SPANISH * 3


@pytest.fixture(scope="module")
def tok() -> SubwordTokenizer:
    return SubwordTokenizer.build_from_corpus(CORPUS, 400)


def test_special_ids(tok):
    assert tok.pad_id == 0
    assert (tok.start_id, tok.end_id, tok.unk_id) == (1, 2, 3)
    assert len({tok.pad_id, tok.start_id, tok.end_id, tok.unk_id}) == 4
    for i, name in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(name) == i
        assert tok.id_to_token(i) == name
    assert tok.id_to_token(0) == "<pad>"


def test_vocab_size_near_target(tok):
    assert len(SPECIAL_TOKENS) < tok.vocab_size <= 400
    # The full byte alphabet (256) fits in the target, so it is in the vocabulary.
    assert tok.vocab_size >= len(SPECIAL_TOKENS) + 256
    assert len(tok.get_vocab()) == tok.vocab_size == len(tok)


@pytest.mark.parametrize("text", SPANISH + ENGLISH + clean_corpus(["Mr. Smith   went to Washington."], "en"))
def test_round_trip_of_training_text(tok, text):
    ids = tok.encode(text)
    assert ids[0] == tok.start_id and ids[-1] == tok.end_id
    assert tok.pad_id not in ids
    assert tok.decode(ids) == text


@pytest.mark.parametrize(
    "text",
    [
        "¿Qué año?",
        "¡Ñandú! Über-Straße, añicos; «comillas» y (paréntesis)...",
        "Unseen characters: Ω ✓ 😀 and 日本語.",
        "A",
        "",
        "Tabs\tand  double spaces survive",
    ],
)
def test_round_trip_of_unseen_text(tok, text):
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    assert tok.unk_id not in tok.encode(text)


def test_encode_without_special_tokens(tok):
    with_sp = tok.encode("¿Qué año?")
    without = tok.encode("¿Qué año?", add_special_tokens=False)
    assert with_sp == [tok.start_id, *without, tok.end_id]
    assert all(i >= len(SPECIAL_TOKENS) for i in without)


def test_same_word_same_tokens_at_start_and_middle(tok):
    first = tok.encode("Tom is tired.", add_special_tokens=False)
    middle = tok.encode("Yes Tom is tired.", add_special_tokens=False)
    assert middle[-len(first) :] == first


def test_decode_stops_at_end_and_ignores_padding(tok):
    ids = tok.encode("Estoy aquí.")
    padded = ids + [tok.pad_id] * 5
    assert tok.decode(padded) == "Estoy aquí."
    assert tok.decode(np.array(padded, dtype=np.int64)) == "Estoy aquí."
    assert tok.decode(np.array(padded, dtype=np.int32)) == "Estoy aquí."
    # Anything after the end token (as a model may produce) is ignored.
    assert tok.decode(ids + tok.encode("Tom", add_special_tokens=False)) == "Estoy aquí."
    # Without skipping, special tokens are written out (padding is still ignored).
    raw = tok.decode(padded, skip_special_tokens=False)
    assert raw.startswith("<start>") and raw.endswith("<end>") and "<pad>" not in raw
    assert tok.decode([]) == ""
    assert tok.decode([tok.start_id, tok.end_id]) == ""


def test_batch_encode_decode(tok):
    texts = ["¿Qué año es?", "Tom is tired.", ""]
    batch = tok.encode_batch(texts)
    assert batch == [tok.encode(t) for t in texts]
    assert tok.decode_batch(batch) == texts
    width = max(len(b) for b in batch)
    arr = np.zeros((len(batch), width), dtype=np.int64)
    for i, b in enumerate(batch):
        arr[i, : len(b)] = b
    assert tok.decode_batch(arr) == texts
    assert tok.encode_batch([]) == []
    assert tok.decode_batch([]) == []


def test_tokens_for_display(tok):
    pieces = tok.tokens("¿Qué año?")
    assert pieces and all(isinstance(p, str) for p in pieces)
    assert "".join(pieces).replace("\u2581", " ").strip() == "¿Qué año?"
    assert len(pieces) == len(tok.encode("¿Qué año?", add_special_tokens=False))


def test_bad_input_errors(tok):
    with pytest.raises(TypeError, match="SubwordTokenizer.encode: expected a str, got bytes"):
        tok.encode(b"hola")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="encode_batch: text 1 is a int"):
        tok.encode_batch(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="single string"):
        tok.encode_batch("hola")
    with pytest.raises(ValueError, match=r"decode: token id 100000 is out of range \[0, "):
        tok.decode([1, 100000])
    with pytest.raises(ValueError, match="decode: token id -1"):
        tok.decode([-1])
    with pytest.raises(TypeError, match="token ids must be ints"):
        tok.decode([1.5])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="1-D array"):
        tok.decode(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(TypeError, match="integer token ids"):
        tok.decode(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="decode_batch: expected a 2-D array"):
        tok.decode_batch(np.zeros(3, dtype=np.int64))
    assert tok.token_to_id("definitely-not-a-token") is None


def test_build_errors():
    build = SubwordTokenizer.build_from_corpus
    with pytest.raises(ValueError, match=r"target_vocab_size 4 is too small; it must be at least 5"):
        build(CORPUS, 4)
    with pytest.raises(TypeError, match="target_vocab_size must be an int"):
        build(CORPUS, 100.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="the corpus is empty"):
        build([], 100)
    with pytest.raises(ValueError, match="the corpus is empty"):
        build(["", "   "], 100)
    with pytest.raises(TypeError, match="sentence 1 is a int"):
        build(["ok", 3], 100)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="single string"):
        build("a corpus as one string", 100)
    with pytest.raises(ValueError, match=r"min_frequency must be an integer in \[1, 9223372036854775807\], got 0"):
        build(CORPUS, 300, min_frequency=0)


def test_tiny_vocab_respects_target():
    # 9 = 4 special tokens + the 5 byte symbols of the corpus (" ", a, b, c, d), the smallest allowed
    small = SubwordTokenizer.build_from_corpus(["abc abc abd"] * 3, 9, min_frequency=1)
    assert len(SPECIAL_TOKENS) < small.vocab_size <= 9
    assert small.get_vocab()["<pad>"] == 0


def test_build_is_deterministic():
    a = SubwordTokenizer.build_from_corpus(CORPUS, 350)
    b = SubwordTokenizer.build_from_corpus(list(CORPUS), 350)
    assert a.get_vocab() == b.get_vocab()
    assert a == b
    assert a.encode_batch(SPANISH) == b.encode_batch(SPANISH)


def test_lowercase_option():
    low = SubwordTokenizer.build_from_corpus(CORPUS, 350, lowercase=True)
    assert low.lowercase
    assert low.decode(low.encode("¿QUÉ Año?")) == "¿qué año?"
    assert low.encode("TOM") == low.encode("tom")


def test_save_load_round_trip(tok, tmp_path):
    path = tmp_path / "sub" / "es.tokenizer.json"
    tok.save(path)
    loaded = SubwordTokenizer.load(path)
    assert loaded == tok
    assert loaded.vocab_size == tok.vocab_size
    assert loaded.encode_batch(SPANISH + ENGLISH) == tok.encode_batch(SPANISH + ENGLISH)
    assert json.loads(path.read_text(encoding="utf-8"))["format"] == "transformer_cpp.SubwordTokenizer"
    # The same through strings, as a checkpoint embeds it.
    again = SubwordTokenizer.from_str(tok.to_str())
    assert again.encode("¿Qué año?") == tok.encode("¿Qué año?")
    assert again.to_str() == tok.to_str()


def test_load_errors(tmp_path, tok):
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="SubwordTokenizer.load: no such file .*nope.json"):
        SubwordTokenizer.load(missing)

    garbage = tmp_path / "garbage.json"
    garbage.write_text("this is not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"garbage.json.*not a SubwordTokenizer: invalid JSON"):
        SubwordTokenizer.load(garbage)

    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": "world"}), encoding="utf-8")
    with pytest.raises(ValueError, match="not a SubwordTokenizer"):
        SubwordTokenizer.load(other)

    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match="not a SubwordTokenizer file"):
        SubwordTokenizer.load(binary)

    doc = json.loads(tok.to_str())
    doc["version"] = 99
    with pytest.raises(ValueError, match="unsupported SubwordTokenizer format version 99"):
        SubwordTokenizer.from_str(json.dumps(doc))

    doc = json.loads(tok.to_str())
    doc["tokenizer"] = {"model": "broken"}
    with pytest.raises(
        ValueError,
        match=r"not a tokenizer this program writes \(damaged, or made elsewhere\): the tokenizer lacks the field",
    ):
        SubwordTokenizer.from_str(json.dumps(doc))

    with pytest.raises(TypeError, match="from_str: expected a str"):
        SubwordTokenizer.from_str(b"{}")  # type: ignore[arg-type]


# --- saved tokenizers from elsewhere ------------------------------------------------------------

#: A regular expression whose search backtracks past the regex library's limit on a long word:
#: the tokenizers library panics on it (a BaseException, not an Exception).
PATHOLOGICAL = r"(\w+\s?)*$"


def _split_first(doc):
    tokenizer = doc["tokenizer"]
    split = {"type": "Split", "pattern": {"Regex": PATHOLOGICAL}, "behavior": "Isolated", "invert": False}
    tokenizer["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, tokenizer["pre_tokenizer"]]}


def _edit(path, value):
    def edit(doc):
        *parents, last = path
        part = doc["tokenizer"]
        for key in parents:
            part = part[key]
        part[last] = value

    return edit


def _extra_token(doc):
    doc["tokenizer"]["added_tokens"].append(dict(doc["tokenizer"]["added_tokens"][0], id=4, content="<mask>"))


def _gap_in_vocab(doc):
    vocab = doc["tokenizer"]["model"]["vocab"]
    last = max(vocab, key=vocab.get)
    vocab[last] += 10


FOREIGN_PARTS = [
    (_split_first, 'pre_tokenizer.type is "Sequence", this program writes "ByteLevel"'),
    (_edit(["normalizer"], {"type": "Replace", "pattern": {"Regex": PATHOLOGICAL}, "content": ""}), "normalizer.type"),
    (_edit(["normalizer", "normalizers"], [{"type": "NFC"}, {"type": "Lowercase"}]), "normalizer.normalizers"),
    (_edit(["model", "dropout"], 0.5), "model.dropout is 0.5"),
    (_edit(["model", "type"], "WordPiece"), 'model.type is "WordPiece"'),
    (_edit(["model", "byte_fallback"], True), "model.byte_fallback"),
    (_edit(["pre_tokenizer", "add_prefix_space"], True), "pre_tokenizer.add_prefix_space"),
    (_edit(["pre_tokenizer", "use_regex"], False), "pre_tokenizer.use_regex"),
    (_edit(["decoder"], {"type": "Replace", "pattern": {"String": "a"}, "content": "b"}), "decoder.type"),
    (_edit(["post_processor"], {"type": "ByteLevel"}), "post_processor"),
    (_edit(["padding"], {"strategy": "BatchLongest"}), "padding"),
    (_edit(["truncation"], {"max_length": 3}), "truncation"),
    (_edit(["model", "surprise"], 1), "'surprise', which this program never writes"),
    (_extra_token, "added_tokens must be the 4 special tokens"),
    (_gap_in_vocab, "model.vocab must number its"),
]


@pytest.mark.parametrize("edit,fragment", FOREIGN_PARTS, ids=[f for _, f in FOREIGN_PARTS])
def test_a_tokenizer_file_with_parts_this_program_never_writes_is_refused(tmp_path, tok, capfd, edit, fragment):
    doc = json.loads(tok.to_str())
    edit(doc)
    path = tmp_path / "tok.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(ValueError) as caught:
        SubwordTokenizer.load(path)
    message = str(caught.value)
    assert "tok.json" in message and "not a tokenizer this program writes" in message and fragment in message, message
    assert "panicked" not in capfd.readouterr().err  # refused before the library reads it


def test_every_tokenizer_this_program_writes_is_accepted(tmp_path):
    for lowercase in (False, True):
        for size in (70, 300):
            made = SubwordTokenizer.build_from_corpus(CORPUS, size, min_frequency=1, lowercase=lowercase)
            made.save(tmp_path / "t.json")
            again = SubwordTokenizer.load(tmp_path / "t.json")
            assert again == made and again.encode("¿Qué tal?") == made.encode("¿Qué tal?")


def test_a_failure_inside_the_tokenizers_library_is_a_value_error_naming_the_file(tok):
    from tokenizers import Tokenizer

    doc = json.loads(tok.to_str())
    _split_first(doc)
    hf = Tokenizer.from_str(json.dumps(doc["tokenizer"]))  # the library itself accepts it
    wrapped = SubwordTokenizer(hf, source="models/src_tokenizer.json")
    long_word = "a" * 5000 + "!"
    for call in (
        lambda: wrapped.encode(long_word),
        lambda: wrapped.encode_batch([long_word, "b"]),
        lambda: wrapped.tokens(long_word),
    ):
        with pytest.raises(ValueError, match=r"tokenizer file 'models/src_tokenizer.json'.*tokenizers library failed"):
            call()
