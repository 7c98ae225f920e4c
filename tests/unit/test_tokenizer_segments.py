"""A text longer than ``_SEGMENT_CHARS`` is encoded in segments cut before single spaces: the ids
are those of the whole text in one call of the library, on texts built to stress the cuts (runs of
spaces, tabs and newlines, combining accents, contractions, digits, non-Latin scripts, a word
longer than a segment), lower-cased or not."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_cpp.tokenizer import bpe
from transformer_cpp.tokenizer.bpe import SubwordTokenizer

WORDS = ["the", "cat's", "Qué", "año", "e\u0301", "2026", "!!", "日本語", "x" * 40, "'ll", "Ωmega", "naïve"]
GAPS = [" ", " ", " ", "  ", "\t", "\n", " \n ", "   "]


def _text(seed: int, n_words: int) -> str:
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(n_words):
        parts.append(WORDS[rng.integers(len(WORDS))])
        parts.append(GAPS[rng.integers(len(GAPS))])
    return "".join(parts)


@pytest.fixture(scope="module", params=[False, True], ids=["cased", "lowercase"])
def tok(request):
    return SubwordTokenizer.build_from_corpus([_text(s, 300) for s in range(20)], 400, lowercase=request.param)


@pytest.mark.parametrize("seed", range(4))
def test_segmented_ids_are_the_whole_texts_ids(tok, monkeypatch, seed):
    monkeypatch.setattr(bpe, "_SEGMENT_CHARS", 97)  # many cuts in a text of a few thousand characters
    text = _text(100 + seed, 600) + " " + "y" * 300 + " end"  # ends with a word longer than a segment
    whole = tok._tok.encode(" " + (text.lower() if tok._lowercase else text), add_special_tokens=False).ids
    pieces = list(bpe._segments(" " + text))
    assert len(pieces) > 20 and "".join(pieces) == " " + text
    assert tok.encode(text, add_special_tokens=False) == whole
    assert tok.decode(tok.encode(text)) == tok.decode([tok.start_id, *whole, tok.end_id])


def test_a_text_without_a_single_space_is_one_segment(monkeypatch):
    monkeypatch.setattr(bpe, "_SEGMENT_CHARS", 10)
    assert list(bpe._segments(" " + "ab  " * 30)) == [" " + "ab  " * 30]
    assert list(bpe._segments(" abc def")) == [" abc def"]
