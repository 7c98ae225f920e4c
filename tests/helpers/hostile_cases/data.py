"""Data files, splits, encoding and batching: line ends, encodings, archives, sizes, seeds."""

from __future__ import annotations

import os
import zipfile
from typing import Any

import numpy as np

import transformer_cpp as tc
from transformer_cpp import data as td

from .base import (
    PAIRS,
    encoded,
    zip_file,
    api,
    err,
    rtok,
    sparse,
)


# --- data: loading, splitting, encoding, batching ------------------------------------------------


def _load(c, payload: bytes, name: str = "pairs.txt", **kw: Any) -> Any:
    path = c.work / name
    path.write_bytes(payload)
    return tc.load_tatoeba(path, **kw)


@api("data: lines ending in a lone carriage return (old Mac line ends) are lines")
def _(c):
    for end in ("\r", "\r\n", "\n"):
        pairs = _load(c, (end.join(PAIRS) + end).encode())
        assert len(pairs) == 12 and pairs.stats.read == 12, f"{len(pairs)} pairs read from 12 lines ({end!r})"
        assert pairs.spanish[11] == "El gato número 11."
        assert all("\r" not in s for s in pairs.spanish + pairs.english + pairs.attributions)


@api("data: Windows line endings")
def _(c):
    pairs = _load(c, "\r\n".join(PAIRS).encode() + b"\r\n")
    assert len(pairs) == 12 and all("\r" not in a for a in pairs.attributions)


@api("data: a byte-order mark and no final newline")
def _(c):
    pairs = _load(c, b"\xef\xbb\xbf" + "\n".join(PAIRS).encode())
    assert len(pairs) == 12 and pairs.english[0] == "The cat number 0."


@api("data: NUL bytes inside a line")
def _(c):
    pairs = _load(c, "\n".join(["The\x00cat.\tEl\x00gato."] + PAIRS).encode())
    assert len(pairs) == 13 and pairs.english[0] == "The\x00cat."


@api("data: every line is counted")
def _(c):
    lines = PAIRS + ["", "   ", "no tab here", "\tonly spanish", "only english\t", "\t", "a\tb\tc\td"]
    pairs = _load(c, "\n".join(lines).encode())
    s = pairs.stats
    assert s.read == len(lines) and s.kept == 13, (s.read, s.kept)
    assert s.kept + s.skipped == s.read, s


@api("data: a 5 MB line")
def _(c):
    pairs = _load(c, ("x " * 2_500_000 + "\ty\n").encode() + "\n".join(PAIRS).encode())
    assert len(pairs) == 13


# one endless line (10 GB of NUL bytes, sparse): refused without reading it whole, in seconds
@api(
    "data: a 10 GB sparse file",
    expect="error",
    match=("line 1 is longer than 4 MB: this is not a file of sentence pairs",),
    raises=ValueError,
    timeout=60,
)
def _(c):
    return tc.load_tatoeba(sparse(c.work / "huge.txt", 10 << 30))


# 100 MB of zeros compressed to a fraction of a MB: refused by its compression ratio before reading
@api("data: a zip whose member is 100 MB of zeros", expect="error", match=("compressed", "to 1 is allowed"))
def _(c):
    path = c.work / "bomb.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open("spa.txt", "w") as f:
            block = bytes(1 << 20)
            for _ in range(100):
                f.write(block)
    return tc.load_tatoeba(path)


@api("data: a path given as bytes", expect="either")
def _(c):
    path = c.work / "p.txt"
    path.write_bytes("\n".join(PAIRS).encode())
    assert len(tc.load_tatoeba(os.fsencode(path))) == 12


err("data: UTF-16 file", lambda c: _load(c, "\n".join(PAIRS).encode("utf-16")), "UTF-16")
err("data: empty file", lambda c: _load(c, b""), "no valid")
err("data: /dev/null", lambda c: tc.load_tatoeba("/dev/null"), "not a regular file")
err("data: a directory", lambda c: tc.load_tatoeba(c.work), "directory")


@api("data: a named pipe", expect="error", match=("not a regular file",), timeout=30)
def _(c):
    fifo = c.work / "fifo.txt"
    os.mkfifo(fifo)
    return tc.load_tatoeba(fifo)


err(
    "data: zip with two text files",
    lambda c: tc.load_tatoeba(zip_file(c, {"a.txt": b"x\ty\n", "b.txt": b"x\ty\n"})),
    "cannot tell",
)
err("data: empty zip", lambda c: tc.load_tatoeba(zip_file(c, {})), "no files")
err("data: broken zip with a .zip name", lambda c: _load(c, b"PK\x03\x04 broken", name="x.zip"), "zip")
err(
    "data: gzip file",
    lambda c: _load(c, __import__("gzip").compress("\n".join(PAIRS).encode()), name="spa.txt.gz"),
    "not valid",
)


@api("data: zip with spa.txt and an _about.txt")
def _(c):
    path = zip_file(c, {"spa-eng/_about.txt": b"about", "spa-eng/spa.txt": "\n".join(PAIRS).encode()})
    assert len(tc.load_tatoeba(path)) == 12


err("data: num_samples 0", lambda c: tc.load_tatoeba(c.data, 0), "num_samples")
err("data: num_samples 2.5", lambda c: tc.load_tatoeba(c.data, 2.5), "num_samples")
err(
    "data: negative seed",
    lambda c: tc.load_tatoeba(c.data, 5, seed=-1),
    "load_tatoeba: seed must be an integer >= 0, got -1",
)
err(
    "data: seed 2.5",
    lambda c: tc.load_tatoeba(c.data, 5, seed=2.5),
    "load_tatoeba: seed must be an integer >= 0, got 2.5",
)
err("data: unknown encoding", lambda c: tc.load_tatoeba(c.data, encoding="klingon"), "klingon")
err("data: unknown errors policy", lambda c: tc.load_tatoeba(c.data, errors="ignore"), "errors")
err("data: unknown sampling", lambda c: tc.load_tatoeba(c.data, 5, sampling="best"), "sampling")


@api("data: numpy num_samples, random and first")
def _(c):
    a = tc.load_tatoeba(c.data, np.int64(7))
    b = tc.load_tatoeba(c.data, 7, sampling="first")
    assert len(a) == len(b) == 7
    assert b.english == tc.load_tatoeba(c.data).english[:7]


@api("data: a file name that is not UTF-8")
def _(c):
    name = os.fsdecode(b"caf\xe9.txt")
    (c.work / name).write_bytes("\n".join(PAIRS).encode())
    assert len(tc.load_tatoeba(c.work / name)) == 12


err("split_by_source: non-string sources", lambda c: tc.split_by_source([1, 2, 3], ["a", "b", "c"]), "source")
err(
    "split_by_source: an int among the sources",
    lambda c: tc.split_by_source(["a", 5], ["x", "y"]),
    "split_by_source: source 1 is a int, expected a str",
)
err(
    "split_by_source: a None among the targets",
    lambda c: tc.split_by_source(["a", "b"], ["x", None]),
    "split_by_source: target 1 is a NoneType",
)
err("split_by_source: lists of different lengths", lambda c: tc.split_by_source(["a", "b"], ["a"]), "targets")
err(
    "split_by_source: negative seed",
    lambda c: tc.split_by_source(["a", "b", "c"], ["x", "y", "z"], seed=-2),
    "split_by_source: seed must be an integer >= 0",
)
err(
    "split_by_source: NaN fraction",
    lambda c: tc.split_by_source(["a", "b"], ["x", "y"], float("nan")),
    "valid_fraction",
)


@api("split_by_source: empty lists", expect="either")
def _(c):
    s = tc.split_by_source([], [])
    assert len(s.train) == len(s.valid) == len(s.test) == 0


@api("split_by_source: no source or reference crosses parts")
def _(c):
    rng = np.random.default_rng(0)
    src = [
        f"Sentence {int(k)}." if rng.random() < 0.5 else f"  SENTENCE   {int(k)}. " for k in rng.integers(0, 40, 400)
    ]
    tgt = [f"Frase {int(k)}." for k in rng.integers(0, 60, 400)]
    s = tc.split_by_source(src, tgt, 0.2, 0.2, seed=3)
    key = lambda t: " ".join(t.casefold().split())  # noqa: E731
    parts = [{key(src[i]) for i in p} for p in (s.train, s.valid, s.test)]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2]), "a source in two parts"
    refs = {key(tgt[i]) for i in np.concatenate([s.valid, s.test])}
    assert not refs & {key(tgt[i]) for i in s.train}, "a reference is a training target"
    assert len(s.train) + len(s.valid) + len(s.test) + s.dropped == 400


err("train_val_test_split: float n", lambda c: tc.train_val_test_split(10.0), "float")
err(
    "train_val_test_split: negative seed",
    lambda c: tc.train_val_test_split(10, seed=-3),
    "train_val_test_split: seed must be an integer >= 0",
)


@api("train_val_test_split: an array keeps its rows")
def _(c):
    items = np.arange(20) * 10
    a, b, t = tc.train_val_test_split(items, 0.2, 0.1, seed=1)
    assert sorted(np.concatenate([a, b, t]).tolist()) == items.tolist()


err("encode_pairs: strings instead of lists", lambda c: tc.encode_pairs("abc", "def", rtok(), rtok(), None), "string")
err("encode_pairs: max_length 1", lambda c: tc.encode_pairs(["a"], ["a"], rtok(), rtok(), 1), "max_length")
err("encode_pairs: max_length 3.0", lambda c: tc.encode_pairs(["a"], ["a"], rtok(), rtok(), 3.0), "max_length")
err(
    "encode_pairs: lists of different lengths",
    lambda c: tc.encode_pairs(["a", "b"], ["a"], rtok(), rtok(), None),
    "target",
)


class _FakeTok:
    pad_id = -1

    def encode_batch(self, texts, add_special_tokens=True):
        return [[1, 2] for _ in texts]


err(
    "encode_pairs: a tokenizer whose padding id is no id (-1)",
    lambda c: tc.encode_pairs(["a"], ["b"], _FakeTok(), rtok(), None),
    "pad_id",
)


@api("encode_pairs: empty sentences")
def _(c):
    tok = rtok()
    enc = tc.encode_pairs(["", "a"], ["", "b"], tok, tok, None)
    assert len(enc) == 2 and enc.src_lengths.min() >= 2 and enc.tgt_lengths.min() >= 2
    assert enc.src[0, 0] == tok.start_id and tok.decode(enc.src[0]) == "" and tok.decode(enc.src[1]) == "a"


@api("batches: a token budget below the longest pair")
def _(c):
    enc = encoded()
    seen = []
    for b in tc.batches(enc, max_tokens=1):
        assert len(b) == 1
        seen.extend(b.indices.tolist())
    assert sorted(seen) == list(range(len(enc)))


@api("batches: bucketed batches cover every pair once")
def _(c):
    enc = encoded(101)
    seen = [i for b in tc.batches(enc, 7, bucket_by_length=True, bucket_pool=2, epoch=3) for i in b.indices.tolist()]
    assert sorted(seen) == list(range(101))
    for b in tc.batches(enc, 7, bucket_by_length=True):
        assert b.tgt_in.shape == b.tgt_out.shape and (b.src[:, 0] == 1).all()


err("batches: float batch_size", lambda c: list(tc.batches(encoded(), 4.0)), "batch_size")
err("batches: negative max_tokens", lambda c: list(tc.batches(encoded(), max_tokens=-1)), "max_tokens")
err(
    "batches: bucket_pool 0",
    lambda c: list(tc.batches(encoded(), bucket_by_length=True, bucket_pool=0)),
    "bucket_pool",
)
err("batches: a list instead of EncodedPairs", lambda c: list(tc.batches([1, 2, 3], 2)), "EncodedPairs")
err(
    "batches: shuffle given as a string",
    lambda c: list(tc.batches(encoded(), 4, shuffle="no")),
    "batches: shuffle must be True or False",
)
err(
    "batches: drop_remainder given as a string",
    lambda c: list(tc.batches(encoded(), 4, drop_remainder="no")),
    "drop_remainder",
)
err(
    "batches: negative seed", lambda c: list(tc.batches(encoded(), 4, seed=-4)), "batches: seed must be an integer >= 0"
)
err("num_batches: negative count", lambda c: td.num_batches(-1, 2), "-1")
err("length_limit: coverage 0", lambda c: td.length_limit([1, 2, 3], 0), "coverage")
err("length_limit: NaN coverage", lambda c: td.length_limit([1, 2, 3], float("nan")), "coverage")
err("length_percentiles: no lengths", lambda c: td.length_percentiles([]), "no lengths")
err("TatoebaPairs: columns of different lengths", lambda c: tc.TatoebaPairs(["a"], ["b", "c"], [""]), "same length")
