"""Tests for transformer_cpp.data: Tatoeba loading, splitting, encoding and batching."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from transformer_cpp import data
from transformer_cpp.data import (
    CACHE_ENV_VAR,
    DATA_ENV_VAR,
    TATOEBA_LICENSE,
    Batch,
    EncodedPairs,
    TatoebaPairs,
    batches,
    default_cache_dir,
    download_tatoeba,
    encode_pairs,
    load_tatoeba,
    num_batches,
    train_val_test_split,
)
from transformer_cpp.text import clean_corpus
from transformer_cpp.tokenizer import SubwordTokenizer

ATTR = "CC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM) & #4986655 (cueyayotl)"

GOOD_LINES = [
    f"Go.\tVe.\t{ATTR}",
    f"Hi.\tHola.\t{ATTR}",
    "Run!\t¡Corre!",  # no attribution column, as in some mirrors
    f"Who?\t¿Quién?\t{ATTR}",
    f"What year is it?\t¿Qué año es?\t{ATTR}",
]


def write_txt(path: Path, lines, *, extra: bytes = b"") -> Path:
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8") + extra)
    return path


def write_zip(path: Path, members: dict) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No data variable (CI sets one), and a private cache directory."""
    monkeypatch.delenv(DATA_ENV_VAR, raising=False)
    cache = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV_VAR, str(cache))
    return cache


# ---------------------------------------------------------------- loading


def test_load_txt(tmp_path):
    pairs = load_tatoeba(write_txt(tmp_path / "spa.txt", GOOD_LINES))
    assert isinstance(pairs, TatoebaPairs)
    assert len(pairs) == 5
    assert pairs[0] == ("Go.", "Ve.")
    assert pairs[-1] == ("What year is it?", "¿Qué año es?")
    assert pairs.sources[2] == "Run!" and pairs.targets[2] == "¡Corre!"
    assert pairs.attributions[0] == ATTR and pairs.attributions[2] == ""
    assert list(pairs)[1] == ("Hi.", "Hola.")
    assert pairs[1:3] == [("Hi.", "Hola."), ("Run!", "¡Corre!")]
    assert pairs.stats.read == 5 and pairs.stats.kept == 5 and pairs.stats.skipped == 0
    assert "CC-BY 2.0 FR" in TATOEBA_LICENSE and pairs.license == TATOEBA_LICENSE


def test_load_zip_finds_spa_txt(tmp_path):
    text = "\n".join(GOOD_LINES) + "\n"
    zpath = write_zip(tmp_path / "spa-eng.zip", {"_about.txt": "about\n", "spa-eng/spa.txt": text})
    pairs = load_tatoeba(zpath)
    assert len(pairs) == 5 and pairs[4] == ("What year is it?", "¿Qué año es?")
    assert pairs.source == zpath


def test_load_zip_with_single_other_txt(tmp_path):
    zpath = write_zip(tmp_path / "d.zip", {"_about.txt": "x", "pairs.txt": "\n".join(GOOD_LINES)})
    assert len(load_tatoeba(zpath)) == 5


def test_zip_without_txt_raises(tmp_path):
    zpath = write_zip(tmp_path / "bad.zip", {"readme.md": "nothing here"})
    with pytest.raises(ValueError, match=r"load_tatoeba: cannot tell which file of .*bad.zip.*readme.md"):
        load_tatoeba(zpath)
    two = write_zip(tmp_path / "two.zip", {"a.txt": "a\tb", "b.txt": "c\td"})
    with pytest.raises(ValueError, match="exactly one .txt"):
        load_tatoeba(two)


def test_fake_zip_raises(tmp_path):
    fake = tmp_path / "fake.zip"
    fake.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match="not a valid zip archive"):
        load_tatoeba(fake)


def test_bad_lines_are_counted_not_fatal(tmp_path):
    lines = [
        "\ufeffGo.\tVe.",  # byte-order mark on the first line is dropped
        "",
        "   ",
        "no tab on this line",
        "Hi.\tHola.\r",  # Windows line ending
        "\tonly spanish",
        "only english\t",
    ]
    path = write_txt(tmp_path / "spa.txt", lines, extra=b"Bad\xff\xfe bytes\tMalo\nOk.\tVale.\n")
    pairs = load_tatoeba(path, errors="skip")
    assert list(pairs) == [("Go.", "Ve."), ("Hi.", "Hola."), ("Ok.", "Vale.")]
    s = pairs.stats
    assert (s.read, s.kept, s.empty, s.no_tab, s.empty_field, s.undecodable) == (9, 3, 2, 1, 2, 1)
    assert s.skipped == 6 and s.undecodable_lines == [8]
    assert s.describe_skipped() == "2 empty, 1 without a tab, 2 with an empty side, 1 not valid utf-8"
    # by default the undecodable line is an error that names the file, the line and the bytes
    with pytest.raises(
        data.UndecodableLineError,
        match=r"spa.txt' line 8 is not valid utf-8: invalid start byte "
        r"at byte 4 of the line \(b'\\xff'\)",
    ) as info:
        load_tatoeba(path)
    assert (info.value.line, info.value.encoding, info.value.path) == (8, "utf-8", path)


def test_a_file_in_another_encoding_is_refused_or_decoded_as_named(tmp_path):
    lines = ["Go.\tVe.", "Where is the bathroom?\t¿Dónde está el baño?", "Coffee.\tCafé."]
    path = tmp_path / "latin1.txt"
    path.write_bytes(("\n".join(lines) + "\n").encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.txt' line 2 is not valid utf-8.*encoding='latin-1'"):
        load_tatoeba(path)
    pairs = load_tatoeba(path, encoding="latin-1")
    assert list(pairs)[1:] == [("Where is the bathroom?", "¿Dónde está el baño?"), ("Coffee.", "Café.")]
    assert pairs.stats.encoding == "iso8859-1" and pairs.stats.skipped == 0
    skipped = load_tatoeba(path, errors="skip")  # nothing is lost silently: counted, with line numbers
    assert len(skipped) == 1 and skipped.stats.undecodable_lines == [2, 3]
    utf16 = tmp_path / "utf16.txt"
    utf16.write_bytes("Go.\tVe.\n".encode("utf-16"))
    with pytest.raises(ValueError, match="line 1 is not valid utf-8.*UTF-16 byte-order mark"):
        load_tatoeba(utf16)
    with pytest.raises(ValueError, match="encoding 'utf-16' is not supported"):
        load_tatoeba(utf16, encoding="utf-16")
    with pytest.raises(ValueError, match="unknown text encoding 'klingon'"):
        load_tatoeba(path, encoding="klingon")
    with pytest.raises(ValueError, match="load_tatoeba: errors must be 'strict' or 'skip', got 'replace'"):
        load_tatoeba(path, errors="replace")


def test_nothing_valid_raises(tmp_path):
    path = write_txt(tmp_path / "spa.txt", ["", "no tab", "still no tab"])
    with pytest.raises(ValueError, match=r"no valid sentence pair.*1 empty, 2 without a tab"):
        load_tatoeba(path)


def test_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "spa.txt"
    with pytest.raises(FileNotFoundError, match=f"load_tatoeba: no such file '{missing}'"):
        load_tatoeba(missing)
    with pytest.raises(OSError, match=f"load_tatoeba: '{tmp_path}' is a directory; expected a .txt or .zip data file"):
        load_tatoeba(tmp_path)


def test_num_samples_takes_first_valid_pairs(tmp_path):
    path = write_txt(tmp_path / "spa.txt", ["", "junk"] + GOOD_LINES)
    pairs = load_tatoeba(path, num_samples=2, sampling="first")
    assert list(pairs) == [("Go.", "Ve."), ("Hi.", "Hola.")]
    assert pairs.stats.kept == 2 and pairs.stats.read == 4  # reading stops there
    assert len(load_tatoeba(path, num_samples=100)) == 5
    with pytest.raises(ValueError, match="num_samples must be an integer >= 1, got 0"):
        load_tatoeba(path, num_samples=0)
    with pytest.raises(TypeError, match="num_samples must be an integer >= 1, got 2.5"):
        load_tatoeba(path, num_samples=2.5)  # type: ignore[arg-type]


def test_env_var_resolution(tmp_path, monkeypatch, clean_env):
    zpath = write_zip(tmp_path / "spa-eng.zip", {"spa-eng/spa.txt": "\n".join(GOOD_LINES)})
    monkeypatch.setenv(DATA_ENV_VAR, str(zpath))
    assert len(load_tatoeba()) == 5
    txt = write_txt(tmp_path / "other.txt", GOOD_LINES[:2])
    monkeypatch.setenv(DATA_ENV_VAR, str(txt))
    assert len(load_tatoeba(num_samples=1, sampling="first")) == 1
    # An explicit path wins over the variable.
    assert len(load_tatoeba(zpath)) == 5
    monkeypatch.setenv(DATA_ENV_VAR, str(tmp_path / "gone.txt"))
    with pytest.raises(FileNotFoundError, match=f"gone.txt.*{DATA_ENV_VAR}"):
        load_tatoeba()


def test_cache_resolution(tmp_path, clean_env):
    assert default_cache_dir() == clean_env
    cached = clean_env / "spa-eng" / "spa.txt"
    cached.parent.mkdir(parents=True)
    write_txt(cached, GOOD_LINES)
    assert load_tatoeba(download=False).source == cached
    # An explicit cache_dir wins over the variable.
    other = tmp_path / "other-cache"
    with pytest.raises(FileNotFoundError, match="download=False"):
        load_tatoeba(cache_dir=other, download=False)


def test_default_cache_dir_without_variable(monkeypatch):
    monkeypatch.delenv(CACHE_ENV_VAR, raising=False)
    assert default_cache_dir() == Path.home() / ".cache" / "transformer_cpp"


def test_download_via_file_url(tmp_path, clean_env):
    # Same layout as the mirror: spa-eng/spa.txt inside the zip.
    served = write_zip(tmp_path / "served.zip", {"spa-eng/spa.txt": "\n".join(GOOD_LINES) + "\n"})
    missing_url = (tmp_path / "missing.zip").as_uri()
    not_zip = tmp_path / "page.html"
    not_zip.write_text("<html>blocked</html>")
    urls = [missing_url, not_zip.as_uri(), served.as_uri()]  # the first two fail, the third works

    pairs = load_tatoeba(urls=urls)
    assert len(pairs) == 5
    txt = clean_env / "spa-eng" / "spa.txt"
    assert pairs.source == txt and txt.is_file()
    assert (clean_env / "spa-eng.zip").is_file()
    # No temporary files are left behind.
    leftovers = [p.name for p in clean_env.rglob("*") if p.name.endswith(".part")]
    assert leftovers == []
    # The second time the cache is used: no URL is needed.
    assert len(load_tatoeba(urls=[missing_url])) == 5
    # A cached zip whose text was lost is unpacked again, without downloading.
    txt.unlink()
    assert len(load_tatoeba(download=False)) == 5 and txt.is_file()


def test_download_tatoeba_directly_and_failure(tmp_path):
    served = write_zip(tmp_path / "s.zip", {"_about.txt": "x", "spa.txt": "\n".join(GOOD_LINES)})
    cache = tmp_path / "c"
    path = download_tatoeba(cache, urls=[served.as_uri()])
    assert path == cache / "spa-eng" / "spa.txt" and len(load_tatoeba(path)) == 5

    bad = write_zip(tmp_path / "bad.zip", {"readme.md": "no pairs"})
    with pytest.raises(OSError, match=r"download_tatoeba: could not download.*bad.zip.*missing.zip"):
        download_tatoeba(tmp_path / "c2", urls=[bad.as_uri(), (tmp_path / "missing.zip").as_uri()])
    assert not [p for p in (tmp_path / "c2").rglob("*.part")]


def test_default_urls_are_a_module_constant():
    assert data.TATOEBA_URLS[0].endswith("spa-eng.zip")
    assert any("storage.googleapis.com" in u for u in data.TATOEBA_URLS)


# ---------------------------------------------------------------- splitting


def test_split_is_deterministic_disjoint_and_complete():
    train, valid, test = train_val_test_split(100, valid_fraction=0.2, test_fraction=0.1, seed=3)
    assert (len(train), len(valid), len(test)) == (70, 20, 10)
    for part in (train, valid, test):
        assert part.dtype == np.int64
    together = np.concatenate([train, valid, test])
    assert sorted(together.tolist()) == list(range(100))
    again = train_val_test_split(100, valid_fraction=0.2, test_fraction=0.1, seed=3)
    for a, b in zip((train, valid, test), again):
        np.testing.assert_array_equal(a, b)
    other = train_val_test_split(100, valid_fraction=0.2, test_fraction=0.1, seed=4)
    assert not np.array_equal(valid, other[1])


def test_split_of_items():
    items = [f"s{i}" for i in range(10)]
    train, valid, test = train_val_test_split(items, valid_fraction=0.3, seed=1)
    assert len(train) == 7 and len(valid) == 3 and test == []
    assert sorted(train + valid) == sorted(items)
    idx = train_val_test_split(10, valid_fraction=0.3, seed=1)
    assert valid == [items[i] for i in idx[1]]
    arr = np.arange(20).reshape(10, 2)
    a_train, a_valid, _ = train_val_test_split(arr, valid_fraction=0.3, seed=1)
    np.testing.assert_array_equal(a_valid, arr[idx[1]])


def test_split_errors():
    with pytest.raises(ValueError, match=r"valid_fraction must be a number in \[0, 1\), got 1.5"):
        train_val_test_split(10, valid_fraction=1.5)
    with pytest.raises(ValueError, match=r"test_fraction must be a number in \[0, 1\), got nan"):
        data.split_by_source(["a"], ["b"], test_fraction=float("nan"))
    with pytest.raises(ValueError, match="add up to 1 or more and leave nothing for training"):
        train_val_test_split(10, valid_fraction=0.5, test_fraction=0.5)
    with pytest.raises(ValueError, match="leave no training example"):
        train_val_test_split(3, valid_fraction=0.45, test_fraction=0.5)
    with pytest.raises(TypeError, match="expected an int or a sequence"):
        train_val_test_split(3.5)  # type: ignore[arg-type]


# ---------------------------------------------------------------- encoding and batching

EN = [
    "Go.",
    "Hi.",
    "Run!",
    "Who?",
    "What year is it?",
    "Tom is tired.",
    "I like coffee.",
    "She speaks Spanish and English very well, doesn't she?",
    "Where is the bathroom?",
    "I'm here.",
    "How are you?",
    "The boy ate an apple.",
]
ES = [
    "Ve.",
    "Hola.",
    "¡Corre!",
    "¿Quién?",
    "¿Qué año es?",
    "Tom está cansado.",
    "Me gusta el café.",
    "Ella habla muy bien español e inglés, ¿verdad?",
    "¿Dónde está el baño?",
    "Estoy aquí.",
    "¿Cómo estás?",
    "El niño comió una manzana.",
]


@pytest.fixture(scope="module")
def tokenizers():
    en = SubwordTokenizer.build_from_corpus(EN * 2, 300)
    es = SubwordTokenizer.build_from_corpus(ES * 2, 300)
    return en, es


@pytest.fixture(scope="module")
def encoded(tokenizers):
    return encode_pairs(EN, ES, tokenizers[0], tokenizers[1], max_length=None)


def test_encode_pairs_layout(encoded, tokenizers):
    en_tok, es_tok = tokenizers
    assert isinstance(encoded, EncodedPairs)
    assert len(encoded) == len(EN) and encoded.removed == 0
    assert encoded.src.dtype == np.int64 and encoded.tgt.dtype == np.int64
    assert encoded.src.shape == (len(EN), max(len(en_tok.encode(s)) for s in EN))
    for i in range(len(EN)):
        ids = en_tok.encode(EN[i])
        row = encoded.src[i]
        assert row[: len(ids)].tolist() == ids  # start ... end
        assert (row[len(ids) :] == 0).all()  # padding after the sentence
        assert encoded.src_lengths[i] == len(ids)
        assert es_tok.decode(encoded.tgt[i]) == ES[i]


def test_encode_pairs_removes_long_pairs(tokenizers):
    en_tok, es_tok = tokenizers
    limit = 8
    expected_removed = sum(1 for e, s in zip(EN, ES) if len(en_tok.encode(e)) > limit or len(es_tok.encode(s)) > limit)
    assert 0 < expected_removed < len(EN)
    enc = encode_pairs(EN, ES, en_tok, es_tok, limit)
    assert enc.removed == expected_removed
    assert len(enc) == len(EN) - expected_removed
    assert enc.src.shape[1] <= limit and enc.tgt.shape[1] <= limit
    assert (enc.src_lengths <= limit).all() and (enc.tgt_lengths <= limit).all()
    kept = [EN[i] for i in enc.indices]
    assert [en_tok.decode(r) for r in enc.src] == kept
    # A pair exactly max_length long (start and end included) is kept.
    exact = len(en_tok.encode(EN[0]))
    assert encode_pairs(EN[:1], EN[:1], en_tok, en_tok, exact).removed == 0
    assert encode_pairs(EN[:2], EN[:2], en_tok, en_tok, None).removed == 0


def test_encode_pairs_errors(tokenizers):
    en_tok, es_tok = tokenizers
    with pytest.raises(ValueError, match="2 source sentences but 1 target sentences"):
        encode_pairs(EN[:2], ES[:1], en_tok, es_tok, 10)
    with pytest.raises(ValueError, match="no sentence pairs"):
        encode_pairs([], [], en_tok, es_tok, 10)
    with pytest.raises(ValueError, match="max_length must be an integer >= 2, got"):
        encode_pairs(EN, ES, en_tok, es_tok, 1)
    with pytest.raises(ValueError, match="all 1 pairs are longer than max_length=3"):
        encode_pairs(EN[7:8], ES[7:8], en_tok, es_tok, 3)


def test_batches_teacher_forcing_and_padding(encoded):
    seen = []
    for batch in batches(encoded, 5, shuffle=False):
        assert isinstance(batch, Batch)
        for arr in (batch.src, batch.tgt_in, batch.tgt_out):
            assert arr.dtype == np.int64 and arr.flags.c_contiguous
        full = encoded.tgt[batch.indices]
        t = batch.tgt_in.shape[1] + 1
        np.testing.assert_array_equal(batch.tgt_in, full[:, : t - 1])
        np.testing.assert_array_equal(batch.tgt_out, full[:, 1:t])
        np.testing.assert_array_equal(batch.tgt_in[:, 1:], batch.tgt_out[:, :-1])  # the shift
        np.testing.assert_array_equal(batch.src, encoded.src[batch.indices][:, : batch.src.shape[1]])
        # Trimmed: no all-padding column is left, and nothing but padding was cut.
        assert (batch.src[:, -1] != 0).any() and (batch.tgt_out[:, -1] != 0).any()
        assert (encoded.src[batch.indices][:, batch.src.shape[1] :] == 0).all()
        assert (full[:, t:] == 0).all()
        # Padding is 0 and only after the sentence.
        for row, n in zip(batch.src, encoded.src_lengths[batch.indices]):
            assert (row[:n] != 0).all() and (row[n:] == 0).all()
        assert (batch.tgt_in[:, 0] == 1).all()  # start id
        assert batch.num_target_tokens == int(encoded.tgt_lengths[batch.indices].sum() - len(batch))
        seen.extend(batch.indices.tolist())
    assert seen == list(range(len(encoded)))  # no shuffle: in order


def test_shuffle_is_deterministic_per_seed_and_epoch(encoded):
    def order(**kw):
        return [i for b in batches(encoded, 4, **kw) for i in b.indices.tolist()]

    e0 = order(seed=7, epoch=0)
    assert e0 == order(seed=7, epoch=0)
    assert sorted(e0) == list(range(len(encoded)))
    assert e0 != order(seed=7, epoch=1)
    assert e0 != order(seed=8, epoch=0)
    assert e0 != list(range(len(encoded)))


def test_drop_remainder_and_num_batches(encoded):
    n = len(encoded)  # 12
    assert [len(b) for b in batches(encoded, 5, shuffle=False)] == [5, 5, 2]
    assert [len(b) for b in batches(encoded, 5, drop_remainder=True)] == [5, 5]
    assert num_batches(encoded, 5) == 3 and num_batches(encoded, 5, drop_remainder=True) == 2
    assert num_batches(n, 4) == 3 and num_batches(n, 4, drop_remainder=True) == 3
    assert num_batches(encoded, 100) == 1 and num_batches(encoded, 100, drop_remainder=True) == 0
    assert list(batches(encoded, 100, drop_remainder=True)) == []
    with pytest.raises(ValueError, match="batches: batch_size must be an integer >= 1, got 0"):
        next(batches(encoded, 0))
    with pytest.raises(TypeError, match="expected EncodedPairs"):
        next(batches([1, 2, 3], 2))  # type: ignore[arg-type]


def test_bucketing_covers_every_example_once(encoded):
    for seed in range(3):
        got = [b for b in batches(encoded, 3, bucket_by_length=True, seed=seed, bucket_pool=2)]
        indices = [i for b in got for i in b.indices.tolist()]
        assert sorted(indices) == list(range(len(encoded)))
        assert len(got) == num_batches(encoded, 3)
    # With one pool covering everything and no shuffling, batches go from short to long.
    got = list(batches(encoded, 3, shuffle=False, bucket_by_length=True))
    lengths = np.maximum(encoded.src_lengths, encoded.tgt_lengths)
    maxima = [int(lengths[b.indices].max()) for b in got]
    assert maxima == sorted(maxima)

    # Bucketing reduces padding compared with no bucketing.
    def padding(bs):
        return sum(int((b.src == 0).sum() + (b.tgt_out == 0).sum()) for b in bs)

    assert padding(got) <= padding(batches(encoded, 3, shuffle=False))
    # Deterministic per (seed, epoch).
    a = [b.indices.tolist() for b in batches(encoded, 3, bucket_by_length=True, seed=1, epoch=2)]
    b = [b.indices.tolist() for b in batches(encoded, 3, bucket_by_length=True, seed=1, epoch=2)]
    assert a == b


# ---------------------------------------------------------------- the real data (CI)


def test_real_tatoeba_file_end_to_end():
    path = Path(os.environ[DATA_ENV_VAR])
    assert path.is_file(), f"{DATA_ENV_VAR} points at '{path}', which does not exist"
    full = load_tatoeba(path)
    assert len(full) > 100_000
    assert full.stats.kept == len(full)
    assert full[0][0] and full[0][1]
    pairs = load_tatoeba(path, num_samples=3000)
    assert len(pairs) == 3000
    en = clean_corpus(pairs.sources, "en")
    es = clean_corpus(pairs.targets, "es")
    en_tok = SubwordTokenizer.build_from_corpus(en, 1000)
    es_tok = SubwordTokenizer.build_from_corpus(es, 1000)
    for tok, sentences in ((en_tok, en), (es_tok, es)):
        assert tok.decode_batch(tok.encode_batch(sentences)) == sentences
    train, valid, _ = train_val_test_split(len(pairs), valid_fraction=0.1)
    enc = encode_pairs([en[i] for i in train], [es[i] for i in train], en_tok, es_tok, 15)
    assert len(enc) + enc.removed == len(train)
    total = sum(len(b) for b in batches(enc, 64, bucket_by_length=True))
    assert total == len(enc)
