"""The tokenizer and sentence cleaning: any text, damaged tokenizer files, copies and threads."""

from __future__ import annotations

import copy
import json
import pickle
import re
import threading
from typing import List

import numpy as np

import transformer_cpp as tc

from .base import (
    CORPUS,
    ctok,
    HUGE,
    api,
    err,
    raises,
    sparse,
)


# --- tokenizer and text -------------------------------------------------------------------------


@api("tokenizer: corpus from a generator")
def _(c):
    tok = tc.SubwordTokenizer.build_from_corpus((s for s in CORPUS), 300, min_frequency=1)
    assert tok.decode(tok.encode(CORPUS[1])) == CORPUS[1]


err("tokenizer: corpus of whitespace", lambda c: tc.SubwordTokenizer.build_from_corpus([" ", "\t\n", ""], 300), "empty")
err("tokenizer: corpus of bytes", lambda c: tc.SubwordTokenizer.build_from_corpus([b"abc"], 300), "str")
err(
    "tokenizer: float vocabulary size",
    lambda c: tc.SubwordTokenizer.build_from_corpus(CORPUS, 300.0),
    "target_vocab_size",
)
# a string such as "no" is true in Python: a flag given one is refused, never taken as True
err(
    "tokenizer: lowercase given as a string",
    lambda c: tc.SubwordTokenizer.build_from_corpus(CORPUS, 300, lowercase="no"),
    "lowercase must be True or False",
    raises=TypeError,
)
err(
    "tokenizer: add_special_tokens given as a string",
    lambda c: ctok().encode("the cat", add_special_tokens="no"),
    "add_special_tokens must be True or False",
    raises=TypeError,
)
err(
    "tokenizer: skip_special_tokens given as a number",
    lambda c: ctok().decode([1, 5, 2], skip_special_tokens=0),
    "skip_special_tokens must be True or False",
    raises=TypeError,
)
err(
    "tokenizer: min_frequency 0",
    lambda c: tc.SubwordTokenizer.build_from_corpus(CORPUS, 300, min_frequency=0),
    "min_frequency",
)


@api("tokenizer: numpy vocabulary size")
def _(c):
    tok = tc.SubwordTokenizer.build_from_corpus(CORPUS, np.int64(300), min_frequency=1)
    assert tok.vocab_size <= 300


@api("tokenizer: control characters, NUL, emoji, right-to-left text round-trip")
def _(c):
    tok = ctok()
    for text in (
        "a\x00b",
        "tab\there",
        "bell\x07",
        "emoji 😀🇪🇸",
        "עברית ومرحبا",
        "zero\u200bwidth",
        "\ufeffbom",
        "  two  spaces ",
        "e\u0301 combining",
    ):
        import unicodedata

        want = unicodedata.normalize("NFC", text)
        assert tok.decode(tok.encode(text)) == want, (text, tok.decode(tok.encode(text)))


@api("tokenizer: lowercase with characters that change length")
def _(c):
    tok = tc.SubwordTokenizer.build_from_corpus(CORPUS, 300, min_frequency=1, lowercase=True)
    import unicodedata

    for text in ("İstanbul ẞ STRASSE", "ΣΊΣΥΦΟΣ"):
        got = tok.decode(tok.encode(text))  # lower case (final sigma or not), the same letters
        assert got == got.lower() and got.casefold() == unicodedata.normalize("NFC", text).casefold(), (text, got)


@api("tokenizer: text that spells a special token is ordinary text")
def _(c):
    tok = tc.SubwordTokenizer.build_from_corpus(["hello world"] * 3, 300)
    again = tc.SubwordTokenizer.from_str(tok.to_str())  # a reloaded tokenizer too
    for text in ("<end>", "a <end> b", "<pad>", "<start><unk> x"):
        ids = tok.encode(text)
        assert ids[0] == tok.start_id and ids[-1] == tok.end_id
        assert not set(ids[1:-1]) & tok.special_ids, (text, ids)  # never the special ids
        assert tok.decode(ids) == text
        assert again.encode(text) == ids


@api("tokenizer: a pickled or copied tokenizer keeps text that spells a special token ordinary")
def _(c):
    tok = ctok()
    for again in (pickle.loads(pickle.dumps(tok)), copy.deepcopy(tok), copy.copy(tok)):
        assert again == tok
        for text in ("a <end> b", "<pad>", "<start><unk>", "x <end> y"):
            ids = again.encode(text)
            assert ids == tok.encode(text), (text, ids, tok.encode(text))
            assert not set(ids[1:-1]) & tok.special_ids, (text, ids)


err("tokenizer: decode a 2-D array", lambda c: ctok().decode(np.ones((2, 2), int)), "1-D")
err("tokenizer: decode floats", lambda c: ctok().decode(np.array([1.0, 5.0])), "integer")
err("tokenizer: decode booleans", lambda c: ctok().decode([True, 5]), "int")
err("tokenizer: decode id equal to vocab_size", lambda c: (lambda t: t.decode([5, t.vocab_size]))(ctok()), "range")
err("tokenizer: decode a string", lambda c: ctok().decode("1 2 3"), "string")


@api("tokenizer: decode uint64 and int8 arrays")
def _(c):
    tok = ctok()
    ids = tok.encode("the cat")
    assert tok.decode(np.array(ids, np.uint64)) == "the cat"
    small_ids = [i for i in ids if i < 128]
    assert tok.decode(np.array(small_ids, np.int8)) == tok.decode(small_ids)


@api("tokenizer: decode_batch of ragged lists and of nothing")
def _(c):
    tok = ctok()
    a, b = tok.encode("the cat"), tok.encode("¿qué tal?")
    assert tok.decode_batch([a, b, []]) == ["the cat", "¿qué tal?", ""]
    assert tok.decode_batch([]) == []


err(
    "tokenizer: from_str with a damaged model",
    lambda c: tc.SubwordTokenizer.from_str(json.dumps(dict(json.loads(ctok().to_str()), tokenizer={"model": 5}))),
    "damaged",
)
err(
    "tokenizer: from_str of another version",
    lambda c: tc.SubwordTokenizer.from_str(json.dumps(dict(json.loads(ctok().to_str()), version=99))),
    "version",
)
err("tokenizer: from_str of bytes", lambda c: tc.SubwordTokenizer.from_str(ctok().to_str().encode()), "str")
err("tokenizer: from_str of JSON null", lambda c: tc.SubwordTokenizer.from_str("null"), "SubwordTokenizer")


def _swapped_specials(c):
    doc = json.loads(ctok().to_str())
    vocab = doc["tokenizer"]["model"]["vocab"]
    vocab["<end>"], vocab["<start>"] = vocab["<start>"], vocab["<end>"]
    for added in doc["tokenizer"].get("added_tokens", []):
        if added["content"] == "<end>":
            added["id"] = 1
        elif added["content"] == "<start>":
            added["id"] = 2
    return tc.SubwordTokenizer.from_str(json.dumps(doc))


err("tokenizer: from_str with special ids swapped", _swapped_specials, "<start>")
err(
    "tokenizer: load a directory",
    lambda c: tc.SubwordTokenizer.load(c.work),
    "is a directory",
    raises=IsADirectoryError,
    note="the message must not claim that a directory does not exist",
)


def _load_bytes(c, payload: bytes):
    (c.work / "tok.json").write_bytes(payload)
    return tc.SubwordTokenizer.load(c.work / "tok.json")


err("tokenizer: load a binary file", lambda c: _load_bytes(c, b"\x00\xff\xfe" * 100), "tok.json")
err("tokenizer: load an empty file", lambda c: _load_bytes(c, b""), "tok.json")
err(
    "tokenizer: load a 10 GB sparse file",
    lambda c: tc.SubwordTokenizer.load(sparse(c.work / "t.json", 10 << 30)),
    "bytes",
    "more than any SubwordTokenizer file",
)
err(
    "tokenizer: load a 3 GB sparse file",
    lambda c: tc.SubwordTokenizer.load(sparse(c.work / "t.json", 3 << 30)),
    "more than any SubwordTokenizer file",
    raises=ValueError,
)


@api(
    "tokenizer: save onto a directory leaves nothing behind",
    expect="error",
    match=("is a directory",),
    raises=IsADirectoryError,
)
def _(c):
    target = c.work / "dir"
    target.mkdir()
    try:
        ctok().save(target)
    except OSError:
        left = [p.name for p in c.work.iterdir() if p.name != "dir"]
        assert not left, f"a failed save left {left} behind"
        raise


@api("tokenizer: saved from two threads at once")
def _(c):
    tok = ctok()
    path = c.work / "t.json"
    errors: List[BaseException] = []

    def save() -> None:
        for _ in range(30):
            try:
                tok.save(path)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

    threads = [threading.Thread(target=save) for _ in range(3)]
    [th.start() for th in threads]
    [th.join() for th in threads]
    assert not errors, f"{type(errors[0]).__name__}: {errors[0]}"
    assert tc.SubwordTokenizer.load(path) == tok
    assert [p.name for p in c.work.iterdir()] == ["t.json"]  # no temporary file left behind


@api("tokenizer: encode_batch from a generator")
def _(c):
    tok = ctok()
    assert tok.encode_batch(s for s in ["the cat", "a dog"]) == [tok.encode("the cat"), tok.encode("a dog")]


err("tokenizer: encode_batch with a bytes item", lambda c: ctok().encode_batch(["ok", b"no"]), "text 1")
err("tokenizer: encode None", lambda c: ctok().encode(None), "str")
err("tokenizer: token_to_id of an int", lambda c: ctok().token_to_id(5), "str")
err("tokenizer: id_to_token of -1", lambda c: ctok().id_to_token(-1), "-1")
err(
    "tokenizer: a text with a surrogate pair written as two code points",
    lambda c: ctok().encode("smile \ud83d\ude00"),
    "surrogate",
)
err(
    "tokenizer: constructed from garbage",
    lambda c: tc.SubwordTokenizer(object()),
    "SubwordTokenizer",
    "expected a trained tokenizers.Tokenizer",
    raises=TypeError,
)


@api("tokenizer: compared with another type")
def _(c):
    assert (ctok() == "tokenizer") is False


err("text: clean None", lambda c: tc.clean_sentence(None), "str")
err("text: clean bytes", lambda c: tc.clean_sentence(b"Hello."), "str")
err("text: language None", lambda c: tc.clean_sentence("Hello.", None), "lang")
err("text: unknown language", lambda c: tc.clean_sentence("Hello.", "klingon"), "klingon")
err("text: corpus holding an int", lambda c: tc.clean_corpus(["a.", 5]), "sentence 1")
err("text: corpus that is one string", lambda c: tc.clean_corpus("Hello there."), "string")


@api("text: only dots, one dot, dots and spaces")
def _(c):
    assert tc.clean_sentence("....") == "...."
    assert tc.clean_sentence(".") == "."
    assert tc.clean_sentence(" . . ") in (".", ". .")


@api("text: NUL and line separators")
def _(c):
    assert tc.clean_sentence("a\x00b") == "a\x00b"
    assert tc.clean_sentence("one\u2028two\u2029three\x85four") == "one two three four"


@api("text: cleaning twice changes nothing")
def _(c):
    for s in (
        "Hello.world , he said. then left.",
        "U.S.A. is big. and so.",
        "x .. y . z",
        "a. b. C. d.",
        "He said no. then left. Then",
        "No. 5 is here.",
        "(e.g. this). and that.",
        "¿Sí. no.?",
        "3.14. pi",
        ".5 . .5",
        "etc.. etc...",
        "A.B.C.d.e. f",
    ):
        once = tc.clean_sentence(s)
        assert tc.clean_sentence(once) == once, (s, once, tc.clean_sentence(once))


@api("text: corpus from a generator")
def _(c):
    assert tc.clean_corpus(s for s in ["Hello.World", "Mr. X."]) == ["Hello. World", "Mr. X."]


@api("tokenizer: vocabulary sizes beyond the bounds name the bounds")
def _(c):
    from transformer_cpp.tokenizer import MAX_VOCAB_SIZE

    build = tc.SubwordTokenizer.build_from_corpus
    corpus = ["the cat sat on the mat", "¿qué tal?"]
    raises(
        lambda: build(corpus, 10**12),
        ValueError,
        f"target_vocab_size {10**12} is too large; it must be at most {MAX_VOCAB_SIZE}",
    )
    raises(lambda: build(corpus, 2**64 + 1), ValueError, "too large")
    n_bytes = len(set(" ".join(" " + s for s in corpus).encode("utf-8")))
    raises(
        lambda: build(corpus, 5),
        ValueError,
        f"target_vocab_size 5 cannot hold the 4 special tokens and the {n_bytes} "
        f"byte symbols this corpus uses; it must be at least {4 + n_bytes}",
    )
    tok = build(corpus, 4 + n_bytes, min_frequency=1)  # the minimum: the corpus round-trips
    for s in corpus:
        assert tok.decode(tok.encode(s)) == s
    raises(lambda: build(corpus, 300, min_frequency=HUGE), ValueError, "min_frequency")


for _size in (10**10, 2**64, 2**200):
    err(
        f"tokenizer: vocabulary size {_size}",
        (lambda s: lambda c: tc.SubwordTokenizer.build_from_corpus(["a b c"], s))(_size),
        "too large",
        raises=ValueError,
    )


@api("tokenizer: text that is not valid Unicode names the position")
def _(c):
    tok = tc.SubwordTokenizer.build_from_corpus(["hello world"] * 3, 300)
    bad = b"caf\xe9 ok".decode("utf-8", errors="surrogateescape")  # Latin-1 bytes read as UTF-8
    raises(
        lambda: tok.encode(bad),
        ValueError,
        re.compile(r"encode: the text is not valid Unicode: .*'\\udce9' at position 3"),
    )
    raises(lambda: tok.encode_batch(["fine", bad]), ValueError, "encode_batch: text 1 is not valid Unicode")
    raises(lambda: tok.tokens(bad), ValueError, "tokens: the text is not valid Unicode")
    raises(
        lambda: tc.SubwordTokenizer.build_from_corpus(["fine", bad], 300),
        ValueError,
        "build_from_corpus: sentence 1 is not valid Unicode",
    )


# --- tokenizer files from elsewhere --------------------------------------------------------------

_PATHOLOGICAL = r"(\w+\s?)*$"  # backtracks past the regex library's limit on a long word


def _with_split(doc):
    split = {"type": "Split", "pattern": {"Regex": _PATHOLOGICAL}, "behavior": "Isolated", "invert": False}
    tokenizer = doc["tokenizer"]
    tokenizer["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, tokenizer["pre_tokenizer"]]}
    return doc


def _load_edited(c, edit):
    path = c.work / "tok.json"
    path.write_text(json.dumps(edit(json.loads(ctok().to_str()))))
    return tc.SubwordTokenizer.load(path)


err(
    "tokenizer: load a file with a Split pre-tokenizer (a regular expression)",
    lambda c: _load_edited(c, _with_split),
    "tok.json",
    "not a tokenizer this program writes",
    "pre_tokenizer.type",
)
err(
    "tokenizer: load a file with BPE dropout",
    lambda c: _load_edited(c, lambda d: (d["tokenizer"]["model"].update(dropout=0.9), d)[1]),
    "tok.json",
    "model.dropout",
)
err(
    "tokenizer: load a file with a post-processor",
    lambda c: _load_edited(c, lambda d: (d["tokenizer"].update(post_processor={"type": "ByteLevel"}), d)[1]),
    "post_processor",
)


def _panicking(c):
    from tokenizers import Tokenizer

    hf = Tokenizer.from_str(json.dumps(_with_split(json.loads(ctok().to_str()))["tokenizer"]))
    return tc.SubwordTokenizer(hf, source="tok.json").encode("a" * 5000 + "!")


err(
    "tokenizer: the tokenizers library panics while encoding",
    _panicking,
    "tok.json",
    "tokenizers library failed",
    raises=ValueError,
)
