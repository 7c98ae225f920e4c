"""Tests for transformer_cpp.text: sentence cleaning with non-breaking prefixes."""

from __future__ import annotations

import unicodedata

import pytest

from transformer_cpp.text import (
    clean_corpus,
    clean_sentence,
    cleaning_rules,
    is_blank,
    language_code,
    language_iso3,
    language_name,
    nonbreaking_prefixes,
    normalize,
    numeric_only_prefixes,
    supported_languages,
)


# ---------------------------------------------------------------- prefix lists


def test_prefix_lists_come_from_sacremoses_for_en_and_es():
    en = nonbreaking_prefixes("en")
    es = nonbreaking_prefixes("es")
    assert isinstance(en, frozenset) and isinstance(es, frozenset)
    assert {"Mr", "Mrs", "Dr", "Prof", "e.g", "i.e"} <= en
    assert {"Sr", "Sra", "Srta", "Dr", "Ud", "EE.UU", "etc"} <= es
    # Moses' numeric-only markers are split off, not left inside the words.
    assert not any("#" in p for p in en)
    assert "No" in numeric_only_prefixes("en") and "No" not in en


def test_language_names_and_case_are_accepted():
    assert nonbreaking_prefixes("English") == nonbreaking_prefixes("en")
    assert nonbreaking_prefixes("ES") == nonbreaking_prefixes("spanish")
    assert {"en", "es"} <= set(supported_languages())


def test_text_that_is_no_language_code_is_refused():
    with pytest.raises(ValueError, match=r"clean_sentence: 'klingon!' is not a language code; expected an ISO 639"):
        clean_sentence("Hi.", "klingon!")
    with pytest.raises(ValueError, match="clean_corpus: '' is not a language code"):
        clean_corpus(["Hi."], "")
    with pytest.raises(ValueError, match=r"nonbreaking_prefixes: no non-breaking prefix list for 'ja'.*\ben\b.*\bes\b"):
        nonbreaking_prefixes("ja")
    with pytest.raises(TypeError, match="lang must be a str"):
        clean_sentence("Hi.", None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "lang, code, rules",
    [
        ("en", "en", "prefix"),
        ("English", "en", "prefix"),
        ("eng", "en", "prefix"),
        ("spa", "es", "prefix"),
        ("fra", "fr", "prefix"),
        ("cmn", "zh", "prefix"),
        ("zh-Hant", "zh-hant", "prefix"),
        ("pt_BR", "pt-br", "prefix"),
        ("jpn", "ja", "generic"),
        ("japanese", "ja", "generic"),
        ("th", "th", "generic"),
        ("ar", "ar", "generic"),
        ("ko", "ko", "generic"),
        ("tok", "tok", "generic"),  # a code the table does not list is used as it is
    ],
)
def test_language_codes_and_the_rules_they_choose(lang, code, rules):
    assert language_code(lang) == code
    assert cleaning_rules(lang) == rules


def test_generic_rules_change_only_whitespace():
    # the prefix rules would drop the dot of "それは.テスト"; the generic rules keep every character
    assert clean_sentence("  それは.テスト\u3000です。\t", "ja") == "それは.テスト です。"
    assert clean_sentence("ภาษาไทย.ไม่มี   ช่องว่าง", "th") == "ภาษาไทย.ไม่มี ช่องว่าง"
    assert clean_sentence("He said no. then left.", "tok") == "He said no. then left."
    assert clean_sentence("He said no. then left.", "en") == "He said no then left."
    # NFC, as in every language: a decomposed Hangul syllable is composed
    assert clean_sentence("\u1112\u1161\u11ab", "ko") == "\ud55c"
    assert language_iso3("fr") == "fra" and language_iso3("zh") == "cmn" and language_iso3("tok") is None
    assert language_name("es") == "Spanish" and language_name("tok") == "tok"


# ---------------------------------------------------------------- cleaning rules


@pytest.mark.parametrize(
    "text, lang, expected",
    [
        # Non-breaking prefixes keep their dot; the sentence-final dot stays.
        ("Mr. Smith went to Washington.", "en", "Mr. Smith went to Washington."),
        ("Dr. Jones and Mrs. Brown came.", "en", "Dr. Jones and Mrs. Brown came."),
        ('"Mr. Smith?" she asked.', "en", '"Mr. Smith?" she asked.'),
        # Spanish prefixes, including ones with inner dots.
        ("La Sra. García vive en EE.UU. desde hace años.", "es", "La Sra. García vive en EE.UU. desde hace años."),
        ("¿Está Ud. hablando conmigo?", "es", "¿Está Ud. hablando conmigo?"),
        ("Compré manzanas, peras, etc. y me fui.", "es", "Compré manzanas, peras, etc. y me fui."),
        # "?" and "!" are never touched.
        ("Are you sure?", "en", "Are you sure?"),
        ("¡Qué bien! ¿Vienes?", "es", "¡Qué bien! ¿Vienes?"),
        ("Really?!", "en", "Really?!"),
        # A dot before a new sentence is a sentence end and stays.
        ("I'm sorry. I didn't mean it.", "en", "I'm sorry. I didn't mean it."),
        ('He said, "I\'m not." Then he left.', "en", 'He said, "I\'m not." Then he left.'),
        ("Lo siento. ¿Me perdonas?", "es", "Lo siento. ¿Me perdonas?"),
        # A dot that does not end a sentence is removed.
        ("Hello.world", "en", "Helloworld"),
        ("He said no. then he left.", "en", "He said no then he left."),
        ("«Sí.» dijo él.", "es", "«Sí» dijo él."),
        ("Wait., then go.", "en", "Wait, then go."),
        # Numbers and ellipses keep their dots.
        ("Tom is 1.80 m tall.", "en", "Tom is 1.80 m tall."),
        ("Cuesta 10.000 dólares.", "es", "Cuesta 10.000 dólares."),
        ("Add .5 litres.", "en", "Add .5 litres."),
        ("Well... I don't know.", "en", "Well... I don't know."),
        # Numeric-only prefixes keep their dot only before a number.
        ("Read chapter No. 5 today.", "en", "Read chapter No. 5 today."),
        ("I said No. twice.", "en", "I said No twice."),
        # A lone dot that ends the text is kept, one that does not is removed.
        ("Hi .", "en", "Hi ."),
        ("Hi . there", "en", "Hi there"),
    ],
)
def test_clean_sentence_rules(text, lang, expected):
    assert clean_sentence(text, lang) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        # Documented choice: letters joined by dots are initialisms and keep every dot, at the
        # end of a sentence or in the middle of one.
        ("U.S.A. is big", "U.S.A. is big"),
        ("I live in the U.S.A.", "I live in the U.S.A."),
        ("I love the U.S.A. It is big.", "I love the U.S.A. It is big."),
        ("Tom wakes up at 8 a.m. every morning.", "Tom wakes up at 8 a.m. every morning."),
        ("Is it 3 p.m.?", "Is it 3 p.m.?"),
        # Initials written with spaces are single-letter prefixes.
        ("J. K. Rowling wrote it.", "J. K. Rowling wrote it."),
    ],
)
def test_initialisms_keep_their_dots(text, expected):
    assert clean_sentence(text, "en") == expected


def test_whitespace_is_collapsed_and_stripped():
    assert clean_sentence("  Hello   there,\t my  friend.  ") == "Hello there, my friend."
    assert clean_sentence("Hola\u00a0 amigo.", "es") == "Hola amigo."
    assert clean_sentence("a\n\nb") == "a b"
    assert clean_sentence("   ") == ""
    assert clean_sentence("") == ""


def test_cleaning_is_idempotent():
    samples = [
        "Mr. Smith went to Washington.",
        "U.S.A. is big",
        "Hello.world , he said. then left.",
        "La Sra. García vive en EE.UU.",
        "Well... I don't know.",
    ]
    for s in samples:
        once = clean_sentence(s)
        assert clean_sentence(once) == once


def test_normalize_is_nfc_and_used_by_cleaning():
    decomposed = "Que\u0301 an\u0303o"  # "Qué año" with combining accents
    assert normalize(decomposed) == "Qué año"
    assert unicodedata.is_normalized("NFC", normalize(decomposed))
    assert clean_sentence("¿" + decomposed + "?", "es") == "¿Qué año?"
    with pytest.raises(TypeError, match="normalize: expected a str"):
        normalize(b"bytes")  # type: ignore[arg-type]


def test_clean_sentence_rejects_non_strings():
    with pytest.raises(TypeError, match="clean_sentence: expected text to be a str, got int"):
        clean_sentence(3)  # type: ignore[arg-type]


def test_clean_corpus_cleans_every_sentence():
    out = clean_corpus(["Mr.  Smith is here.", "Hello.world"], "en")
    assert out == ["Mr. Smith is here.", "Helloworld"]
    assert clean_corpus(iter(["La Sra.  López."]), "es") == ["La Sra. López."]
    assert clean_corpus([], "en") == []


def test_clean_corpus_errors():
    with pytest.raises(TypeError, match="single string"):
        clean_corpus("Hello there.", "en")
    with pytest.raises(TypeError, match="sentence 1 is a int"):
        clean_corpus(["ok", 5], "en")  # type: ignore[list-item]
    with pytest.raises(ValueError, match="clean_corpus: 'english!' is not a language code"):
        clean_corpus(["ok"], "english!")


@pytest.mark.parametrize(
    "text, blank",
    [
        ("", True),
        (" \t\n\u00a0\u3000", True),
        ("\u200b\u200b", True),  # zero-width spaces (Cf)
        ("\ufeff\u2060\u200c\u200d\u200e\u202e", True),  # BOM, word joiner, (non-)joiners, direction marks
        ("\U000e0041\U000e007f", True),  # tag characters
        ("\u3164\u115f\ufe0f\u034f", True),  # Hangul fillers, a variation selector, the grapheme joiner
        ("\x00\x07", True),  # control characters
        ("a", False),
        ("\u200b\u00e9\u200b", False),
        ("\U0001f600", False),
        ("\u0301", False),  # a combining accent alone still shows
        ("\u200d\U0001f468", False),
    ],
)
def test_is_blank_sees_only_visible_characters(text, blank):
    """Text made only of whitespace and of characters that draw nothing has nothing to translate."""
    assert is_blank(text) is blank


def test_is_blank_rejects_non_strings():
    with pytest.raises(TypeError, match="is_blank: expected a str"):
        is_blank(None)  # type: ignore[arg-type]
