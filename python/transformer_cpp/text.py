"""Sentence cleaning, chosen per language, and language codes.

Cleaning makes the text of a corpus uniform before a subword vocabulary is learnt from it, and the
translator cleans what it is asked to translate the same way. It never removes a character that
shows: it changes whitespace only, so a sentence keeps every letter, digit and punctuation mark,
in any script, and a sentence that is not blank never becomes empty.

Generic rules (every language without a prefix list: Japanese, Thai, Arabic, Korean, Hebrew,
Vietnamese, ...; see :func:`cleaning_rules`): the text is normalised to Unicode NFC
(:func:`normalize`), every run of whitespace becomes one space, and the result is stripped.
Nothing else changes, so text with or without spaces between words keeps its form.

Prefix rules (the languages for which ``sacremoses`` ships a list of non-breaking prefixes, the
abbreviations whose dot does not end a sentence: :func:`supported_languages`):

1. Everything the generic rules do: NFC, whitespace runs collapsed to one space, stripped.
2. **Run-on sentences are separated.** A dot between a lower-case letter and an upper-case letter
   with no space after it (``"No te ofendas.Tom se comporta así."``) ends a sentence: a space is
   put after the dot (``"ofendas. Tom"``), so the two sentences are tokenised as they would be if
   the space had been typed.
3. **Except after a non-breaking prefix**: when the word before such a dot is a prefix from the
   language's list (``"Sra.García"``, ``"Dr.Smith"``; the Moses lists inside ``sacremoses``, see
   :func:`nonbreaking_prefixes`, matched case-sensitively as in Moses), or a single letter (an
   initial: ``"a.C."``, *antes de Cristo*), the dot belongs to the abbreviation and nothing is
   inserted. Initialisms in capitals (``U.S.A.``, ``EE.UU.``) never have a lower-case letter
   before a dot, so rule 2 does not apply to them.

Every other dot is left where it is: sentence ends, abbreviations (``etc.``, ``p.m.``), numbers
(``3.14``, ``10.000``), ellipses and dots inside words or names (``Node.js``).

Languages (:func:`language_code`): an ISO 639 code (``"en"``, ``"es"``, ``"ja"``; three-letter
codes such as ``"fra"`` or ``"jpn"``, as the Tatoeba file names use, become the two-letter code
where there is one), optionally with a region or script subtag (``"pt-br"``, ``"zh-hant"``: the
rules follow the first subtag), or an English name (``"english"``, ``"japanese"``), in any
case. The prefix rules apply to the languages :func:`supported_languages` lists, the generic
rules to every other code. Text that is not a language code (``"klingon!"``, ``""``) is a
:class:`ValueError`: no language is ever guessed.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Iterable, Optional, Tuple

__all__ = [
    "CLEANING_RULES",
    "cleaning_rules",
    "language_code",
    "language_iso3",
    "language_name",
    "resolve_language",
    "check_text",
    "is_blank",
    "normalize",
    "clean_sentence",
    "clean_corpus",
    "nonbreaking_prefixes",
    "numeric_only_prefixes",
    "supported_languages",
]

_WHITESPACE = re.compile(r"\s+")
_NUMERIC_ONLY_MARKER = "#NUMERIC_ONLY#"


_SURROGATE = re.compile("[\ud800-\udfff]")


def check_text(text: str, caller: str) -> str:
    """``text`` if it is valid Unicode text; ``ValueError`` if it holds a lone surrogate (what
    Python makes of bytes that are not UTF-8 when it decodes with ``surrogateescape``, as it does
    for command-line arguments), naming its position."""
    bad = _SURROGATE.search(text)
    if bad is not None:
        raise ValueError(
            f"{caller}: the text {text[:40]!r}{'...' if len(text) > 40 else ''} is not valid Unicode: it "
            f"holds the lone surrogate {bad.group()!r} at position {bad.start()} (bytes that were not "
            "valid UTF-8?)"
        )
    return text


# Code points that Unicode marks as default-ignorable (drawn as nothing) without being format
# characters (Cf): the combining grapheme joiner, the Hangul fillers, the Khmer inherent vowels,
# the Mongolian free variation selectors and the variation selectors.
_INVISIBLE = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]")
_BLANK_CATEGORIES = frozenset(("Cc", "Cf", "Zs", "Zl", "Zp"))


def is_blank(text: str) -> bool:
    """Whether ``text`` shows nothing: it holds only whitespace, control characters, format
    characters (Unicode category Cf: zero-width spaces and joiners, the byte-order mark, direction
    marks, tags) and the other code points Unicode draws as nothing (variation selectors, Hangul
    fillers). Such a text has nothing to translate: the server refuses it as it refuses
    whitespace, and ``transformer-cpp translate`` leaves its output line empty.

    Raises:
        TypeError: if ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"is_blank: expected a str, got {type(text).__name__}")
    for ch in text:
        if not (ch.isspace() or unicodedata.category(ch) in _BLANK_CATEGORIES or _INVISIBLE.match(ch)):
            return False
    return True


def normalize(text: str) -> str:
    """Return ``text`` in Unicode normal form NFC.

    Composed and decomposed spellings of the same letter (``"é"`` as one code point or as
    ``"e"`` plus a combining accent) become the same string, so that they map to the same
    subword tokens.

    Raises:
        TypeError: if ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"normalize: expected a str, got {type(text).__name__}")
    return unicodedata.normalize("NFC", text)


# (two-letter code or the code used here, ISO 639-3 code, English name): the languages of the
# Tatoeba pairs files (named by their ISO 639-3 code) and other common ones. A three-letter code
# listed here stands for its two-letter one; an unlisted code is used as it is.
_LANGUAGES = (
    ("af", "afr", "afrikaans"), ("am", "amh", "amharic"), ("ar", "ara", "arabic"),
    ("az", "aze", "azerbaijani"), ("be", "bel", "belarusian"), ("bg", "bul", "bulgarian"),
    ("bn", "ben", "bengali"), ("br", "bre", "breton"), ("bs", "bos", "bosnian"),
    ("ca", "cat", "catalan"), ("cs", "ces", "czech"), ("cy", "cym", "welsh"), ("da", "dan", "danish"),
    ("de", "deu", "german"), ("el", "ell", "greek"), ("en", "eng", "english"),
    ("eo", "epo", "esperanto"), ("es", "spa", "spanish"), ("et", "est", "estonian"),
    ("eu", "eus", "basque"), ("fa", "pes", "persian"), ("fi", "fin", "finnish"),
    ("fr", "fra", "french"), ("ga", "gle", "irish"), ("gl", "glg", "galician"),
    ("gu", "guj", "gujarati"), ("he", "heb", "hebrew"), ("hi", "hin", "hindi"),
    ("hr", "hrv", "croatian"), ("hu", "hun", "hungarian"), ("hy", "hye", "armenian"),
    ("id", "ind", "indonesian"), ("is", "isl", "icelandic"), ("it", "ita", "italian"),
    ("ja", "jpn", "japanese"), ("ka", "kat", "georgian"), ("kk", "kaz", "kazakh"),
    ("km", "khm", "khmer"), ("kn", "kan", "kannada"), ("ko", "kor", "korean"),
    ("ku", "kur", "kurdish"), ("la", "lat", "latin"), ("lo", "lao", "lao"),
    ("lt", "lit", "lithuanian"), ("lv", "lvs", "latvian"), ("mk", "mkd", "macedonian"),
    ("ml", "mal", "malayalam"), ("mn", "mon", "mongolian"), ("mr", "mar", "marathi"),
    ("ms", "zsm", "malay"), ("my", "mya", "burmese"), ("nb", "nob", "norwegian"),
    ("ne", "npi", "nepali"), ("nl", "nld", "dutch"), ("or", "ory", "oriya"),
    ("pa", "pan", "punjabi"), ("pl", "pol", "polish"), ("pt", "por", "portuguese"),
    ("ro", "ron", "romanian"), ("ru", "rus", "russian"), ("si", "sin", "sinhala"),
    ("sk", "slk", "slovak"), ("sl", "slv", "slovenian"), ("sq", "sqi", "albanian"),
    ("sr", "srp", "serbian"), ("sv", "swe", "swedish"), ("sw", "swh", "swahili"),
    ("ta", "tam", "tamil"), ("te", "tel", "telugu"), ("th", "tha", "thai"),
    ("tl", "tgl", "tagalog"), ("tr", "tur", "turkish"), ("tt", "tat", "tatar"),
    ("ug", "uig", "uyghur"), ("uk", "ukr", "ukrainian"), ("ur", "urd", "urdu"),
    ("uz", "uzb", "uzbek"), ("vi", "vie", "vietnamese"), ("yue", "yue", "cantonese"),
    ("zh", "cmn", "chinese"),
)  # fmt: skip
# more three-letter codes that stand for a two-letter one (macrolanguage or other spellings)
_MORE_ISO3 = {"zho": "zh", "fas": "fa", "msa": "ms", "nor": "nb", "lav": "lv", "nep": "ne", "swa": "sw", "ori": "or"}
_CODE_FORM = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{1,8})*")

#: The two ways :func:`clean_sentence` cleans (see the module docstring).
CLEANING_RULES = ("prefix", "generic")


@functools.lru_cache(maxsize=None)
def _language_table() -> dict[str, str]:
    """Map every accepted language name, two-letter and three-letter code (lower case) to its code."""
    from sacremoses.corpus import NonbreakingPrefixes

    table = {iso3: code for code, iso3, _ in _LANGUAGES}
    table.update(_MORE_ISO3)
    table.update({name: code for code, _, name in _LANGUAGES})
    table.update({code: code for code, _, _ in _LANGUAGES})
    table.update({name.lower(): code for name, code in NonbreakingPrefixes().available_langs.items()})
    return table


@functools.lru_cache(maxsize=None)
def _prefix_languages() -> frozenset[str]:
    from sacremoses.corpus import NonbreakingPrefixes

    return frozenset(NonbreakingPrefixes().available_langs.values())


def supported_languages() -> Tuple[str, ...]:
    """Return the sorted language codes whose sentences are cleaned with the prefix rules (a
    non-breaking prefix list ships with ``sacremoses``); every other language code is cleaned
    with the generic rules."""
    return tuple(sorted(_prefix_languages()))


def language_code(lang: str, caller: str = "language_code") -> str:
    """The language code of ``lang`` (see the module docstring): ``"English"`` and ``"eng"`` give
    ``"en"``, ``"jpn"`` gives ``"ja"``, ``"pt_BR"`` gives ``"pt-br"``; an unlisted well-formed code
    is returned in lower case. ``TypeError`` for a non-string, ``ValueError`` naming ``caller`` for
    text that is not a language code."""
    if not isinstance(lang, str):
        raise TypeError(f"{caller}: lang must be a str such as 'en' or 'es', got {type(lang).__name__}")
    key = lang.strip().lower().replace("_", "-")
    table = _language_table()
    if key in table:
        return table[key]
    if _CODE_FORM.fullmatch(key):
        primary, _, rest = key.partition("-")
        primary = table.get(primary, primary)
        return f"{primary}-{rest}" if rest else primary
    raise ValueError(
        f"{caller}: {lang!r} is not a language code; expected an ISO 639 code such as 'en', 'es', 'ja' or "
        "'fra' (optionally with a region or script: 'pt-br'), or an English name such as 'japanese'"
    )


def language_iso3(lang: str) -> Optional[str]:
    """The ISO 639-3 code of a language as the Tatoeba files name it (``"fr"`` -> ``"fra"``,
    ``"zh"`` -> ``"cmn"``), or None when the table does not list the language."""
    primary = language_code(lang, "language_iso3").partition("-")[0]
    return next((iso3 for code, iso3, _ in _LANGUAGES if code == primary), None)


def language_name(lang: str) -> str:
    """The English name of a language code (``"es"`` -> ``"Spanish"``), or the code itself when
    it is not in the table (``"tok"`` -> ``"tok"``)."""
    code = language_code(lang, "language_name")
    names = {c: name for c, _, name in _LANGUAGES}
    primary, _, rest = code.partition("-")
    if primary not in names:
        return code
    return names[primary].capitalize() + (f" ({rest})" if rest else "")


def cleaning_rules(lang: str) -> str:
    """``"prefix"`` when sentences in ``lang`` are cleaned with the non-breaking prefix rules (a
    list ships with ``sacremoses``), ``"generic"`` otherwise (see the module docstring)."""
    primary = language_code(lang, "cleaning_rules").partition("-")[0]
    return "prefix" if primary in _prefix_languages() else "generic"


def resolve_language(lang: str, caller: str) -> str:
    """The language code of ``lang``, as :func:`language_code` gives it (``caller`` names who asked
    in the messages)."""
    return language_code(lang, caller)


@functools.lru_cache(maxsize=None)
def _prefix_lists(code: str) -> Tuple[frozenset[str], frozenset[str]]:
    """Return (always non-breaking, non-breaking only before a digit) for a language code."""
    from sacremoses.corpus import NonbreakingPrefixes

    always = set()
    numeric = set()
    for line in NonbreakingPrefixes().words(code):
        if _NUMERIC_ONLY_MARKER in line:
            numeric.add(line.replace(_NUMERIC_ONLY_MARKER, "").strip())
        else:
            always.add(line.strip())
    always.discard("")
    numeric.discard("")
    return frozenset(always), frozenset(numeric)


def nonbreaking_prefixes(lang: str = "en") -> frozenset[str]:
    """Return the words that keep their dot in ``lang`` (``"Mr"``, ``"Dr"``, ``"Sra"``, ...).

    The lists are the Moses non-breaking prefix lists shipped inside ``sacremoses`` (read
    through ``sacremoses.corpus.NonbreakingPrefixes``; nothing is downloaded). Entries are
    given without their final dot; some contain inner dots (``"e.g"``, ``"EE.UU"``).
    Prefixes marked numeric-only by Moses are excluded: see :func:`numeric_only_prefixes`.

    Raises:
        ValueError: if ``lang`` is not a language code, or one without a list (see
            :func:`supported_languages`).
    """
    return _prefix_lists(_with_prefix_list(lang, "nonbreaking_prefixes"))[0]


def numeric_only_prefixes(lang: str = "en") -> frozenset[str]:
    """Return the words that Moses treats as non-breaking prefixes in ``lang`` only before a
    number (``"No"`` in ``"No. 5"``). Cleaning never splits after them either way: a dot before a
    digit is not between two letters.

    Raises:
        ValueError: if ``lang`` is not a language code, or one without a list.
    """
    return _prefix_lists(_with_prefix_list(lang, "numeric_only_prefixes"))[1]


def _with_prefix_list(lang: str, caller: str) -> str:
    """The code of the prefix list of ``lang``; ValueError naming the languages that have one."""
    primary = language_code(lang, caller).partition("-")[0]
    if primary not in _prefix_languages():
        raise ValueError(
            f"{caller}: no non-breaking prefix list for {lang!r} (its sentences are cleaned with the generic "
            f"rules); lists exist for {', '.join(supported_languages())}"
        )
    return primary


def _split_run_on(token: str, always: frozenset[str]) -> str:
    """Rules 2 and 3 of the module docstring on one whitespace-free token: a space after each dot
    that joins a lower-case letter to an upper-case one, unless the word before it is a prefix."""
    if "." not in token:
        return token
    out = []
    word_start = 0  # where the word before the current dot starts
    for i, ch in enumerate(token):
        out.append(ch)
        if ch != ".":
            if not (ch.isalnum() or ch in "-'’"):
                word_start = i + 1
            continue
        prev_ch = token[i - 1] if i > 0 else ""
        next_ch = token[i + 1] if i + 1 < len(token) else ""
        if prev_ch.islower() and next_ch.isupper():
            word = token[word_start:i]
            last = word.rpartition(".")[2]  # "C" of "a.C", "ej" of "p.ej"
            if len(last) > 1 and word not in always and last not in always:
                out.append(" ")
                word_start = i + 1
    return "".join(out)


def clean_sentence(text: str, lang: str = "en") -> str:
    """Clean one sentence: NFC, whitespace collapsed, and with the prefix rules (languages with a
    non-breaking prefix list) run-on sentences separated. Only whitespace changes.

    See the module docstring for the exact rules. Examples::

        >>> clean_sentence("Mr. Smith went to  Washington.")
        'Mr. Smith went to Washington.'
        >>> clean_sentence("Hello.world ,  he said. then left.")
        'Hello.world , he said. then left.'
        >>> clean_sentence("No te ofendas.Tom es así.", "es")
        'No te ofendas. Tom es así.'
        >>> clean_sentence("La Sra. García vive en EE.UU.", "es")
        'La Sra. García vive en EE.UU.'
        >>> clean_sentence("  それは.テスト です。 ", "ja")
        'それは.テスト です。'

    Args:
        text: the sentence.
        lang: its language: a code or an English name (``"en"``, ``"es"``, ``"ja"``...), which
            chooses the rules (:func:`cleaning_rules`).

    Raises:
        TypeError: if ``text`` is not a ``str``.
        ValueError: if ``lang`` is not a language code, or ``text`` is not valid Unicode (see
            :func:`check_text`).
    """
    if not isinstance(text, str):
        raise TypeError(f"clean_sentence: expected text to be a str, got {type(text).__name__}")
    check_text(text, "clean_sentence")
    primary = language_code(lang, "clean_sentence").partition("-")[0]
    tokens = _WHITESPACE.split(normalize(text).strip())
    if tokens == [""]:
        return ""
    if primary not in _prefix_languages():
        return " ".join(tokens)
    always = _prefix_lists(primary)[0]
    return " ".join(_split_run_on(token, always) for token in tokens)


def clean_corpus(sentences: Iterable[str], lang: str = "en") -> list[str]:
    """Clean every sentence of ``sentences`` with :func:`clean_sentence`; return a new list.

    Raises:
        TypeError: if ``sentences`` is a single ``str`` (pass a list of sentences) or holds
            something that is not a ``str`` (the message gives its index).
        ValueError: if ``lang`` is not a language code.
    """
    if isinstance(sentences, (str, bytes)):
        raise TypeError("clean_corpus: expected an iterable of sentences, got a single string")
    code = language_code(lang, "clean_corpus")
    result = []
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"clean_corpus: sentence {i} is a {type(sentence).__name__}, expected a str")
        result.append(clean_sentence(sentence, code))
    return result
