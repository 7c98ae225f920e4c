"""Tests for transformer_cpp.text: sentence cleaning with non-breaking prefixes."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    # the generic rules never put a space between run-on sentences (the prefix rules do)
    assert clean_sentence("  それは.テスト\u3000です。\t", "ja") == "それは.テスト です。"
    assert clean_sentence("ภาษาไทย.ไม่มี   ช่องว่าง", "th") == "ภาษาไทย.ไม่มี ช่องว่าง"
    assert clean_sentence("He said no. then left.", "tok") == "He said no. then left."
    assert clean_sentence("He said no.Then left.", "tok") == "He said no.Then left."
    assert clean_sentence("He said no.Then left.", "en") == "He said no. Then left."
    # NFC, as in every language: a decomposed Hangul syllable is composed
    assert clean_sentence("\u1112\u1161\u11ab", "ko") == "\ud55c"
    assert language_iso3("fr") == "fra" and language_iso3("zh") == "cmn" and language_iso3("tok") is None
    assert language_name("es") == "Spanish" and language_name("tok") == "tok"


# ---------------------------------------------------------------- cleaning rules


@pytest.mark.parametrize(
    "text, lang, expected",
    [
        # A dot joining a lower-case letter to an upper-case one is a run-on sentence end.
        ("No te ofendas.Tom se comporta así con todos.", "es", "No te ofendas. Tom se comporta así con todos."),
        ("I'm sorry.I didn't mean it.", "en", "I'm sorry. I didn't mean it."),
        ('He said "no.Then" and left.', "en", 'He said "no. Then" and left.'),
        ("one.Two.Three", "en", "one. Two. Three"),
        # ... except after a non-breaking prefix of the language.
        ("Dr.Smith and Mrs.Brown came.", "en", "Dr.Smith and Mrs.Brown came."),
        ("La Sra.García vive aquí.", "es", "La Sra.García vive aquí."),
        ("Vea p.ej.Juan.", "es", "Vea p.ej.Juan."),
        # ... or after a single letter: an initial.
        ("En el año 174 a.C., su gente.", "es", "En el año 174 a.C., su gente."),
        ("Tom F.Jones", "en", "Tom F.Jones"),
        # A prefix of one language is not one of another.
        ("la Sra.García", "en", "la Sra. García"),
        # Initialisms, abbreviations, numbers, ellipses and dotted words are left as they are.
        ("U.S.A. is big", "en", "U.S.A. is big"),
        ("La Sra. García vive en EE.UU. desde hace años.", "es", "La Sra. García vive en EE.UU. desde hace años."),
        ("The screw, the lever, etc. are simple machines.", "en", "The screw, the lever, etc. are simple machines."),
        ("Tom wakes up at 8 a.m. every morning.", "en", "Tom wakes up at 8 a.m. every morning."),
        ("Tom is 1.80 m tall.", "en", "Tom is 1.80 m tall."),
        ("Cuesta 10.000 dólares.", "es", "Cuesta 10.000 dólares."),
        ("Well... I don't know.", "en", "Well... I don't know."),
        ("Hello.world", "en", "Hello.world"),
        ("He said no. then he left.", "en", "He said no. then he left."),
        ("I use Node.js daily.", "en", "I use Node.js daily."),
        ("¨No, no la vi.¨.", "es", "¨No, no la vi.¨."),
        ("Hi .", "en", "Hi ."),
        # "?" and "!" are never touched.
        ("¡Qué bien! ¿Vienes?", "es", "¡Qué bien! ¿Vienes?"),
        ("Really?!", "en", "Really?!"),
    ],
)
def test_clean_sentence_rules(text, lang, expected):
    assert clean_sentence(text, lang) == expected


@given(st.text(alphabet=st.sampled_from(list("aZé.Ñ ,?¿\"'-1\u00a0\t")), max_size=40))
@settings(max_examples=300, deadline=None)
def test_prefix_rules_change_whitespace_only(text):
    # No character that shows is ever removed, added or replaced: cleaning changes whitespace only.
    for lang in ("en", "es"):
        cleaned = clean_sentence(text, lang)
        assert "".join(cleaned.split()) == "".join(text.split())
        assert clean_sentence(cleaned, lang) == cleaned


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
    out = clean_corpus(["Mr.  Smith is here.", "Hello.World"], "en")
    assert out == ["Mr. Smith is here.", "Hello. World"]
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
