"""Reading a language model's text file: the size is checked before a byte is read, the file is
decoded a few megabytes at a time, and a decoding error names the byte of the file where it is,
also when a character is cut by the boundary between two reads."""

from __future__ import annotations

import pytest

from transformer_cpp.data import lm_text
from transformer_cpp.data.lm_text import MAX_TEXT_BYTES, read_text_file


def test_a_text_across_read_boundaries_is_read_whole(tmp_path):
    chunk = lm_text._TEXT_CHUNK
    text = "a" * (chunk - 1) + "é" + "ü" * chunk + "end\n"  # é's two bytes straddle the first boundary
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    assert read_text_file(path).text == text
    assert read_text_file(path, "latin-1").text == text.encode("utf-8").decode("latin-1")


@pytest.mark.parametrize("at", [6, lm_text._TEXT_CHUNK - 1, lm_text._TEXT_CHUNK, lm_text._TEXT_CHUNK + 5])
def test_a_decoding_error_names_its_byte(tmp_path, at):
    data = bytearray(b"x" * (lm_text._TEXT_CHUNK + 64))
    data[at] = 0xFF
    path = tmp_path / "bad.txt"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"^text file '{path}' is not valid utf-8 \(byte {at}\): invalid start byte$"):
        read_text_file(path)


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:
        f.truncate(MAX_TEXT_BYTES + 1)
    monkeypatch.setattr(lm_text, "open", lambda *a, **k: pytest.fail("the file was opened"), raising=False)
    with pytest.raises(
        ValueError, match=rf"has {MAX_TEXT_BYTES + 1:,} bytes, more than a language-model text may have"
    ):
        read_text_file(path)


def test_a_file_beyond_the_memory_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "t.txt"
    path.write_text("abc\n" * 1000)
    monkeypatch.setattr(lm_text, "memory_limit_bytes", lambda: 4000 * 9 - 1)
    monkeypatch.setattr(lm_text, "open", lambda *a, **k: pytest.fail("the file was opened"), raising=False)
    with pytest.raises(
        ValueError, match=r"has 4,000 bytes: reading and encoding it needs about .* more than the .* GB of memory"
    ):
        read_text_file(path)
    monkeypatch.setattr(lm_text, "memory_limit_bytes", lambda: 4000 * 9)  # just enough
    monkeypatch.delattr(lm_text, "open")
    assert read_text_file(path).text == "abc\n" * 1000


def test_an_unknown_encoding_and_an_empty_text_are_clear_errors(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("  \n\n")
    with pytest.raises(ValueError, match=r"unknown text encoding 'klingon'"):
        read_text_file(path, "klingon")
    with pytest.raises(ValueError, match=r"holds no text"):
        read_text_file(path)
