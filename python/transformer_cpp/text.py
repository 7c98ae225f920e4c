"""Sentence cleaning for the English–Spanish corpus.

The NMT tutorial that this project follows cleans every sentence before it learns a subword
vocabulary: dots that do not end a sentence are removed, so that the only dots left are
sentence ends and the dots of known abbreviations. This module implements that step with
explicit, documented rules.

Rules of :func:`clean_sentence`, applied to each whitespace-separated token:

1. The text is normalised first (:func:`normalize`: Unicode NFC), and every run of whitespace
   (spaces, tabs, newlines, no-break spaces) becomes one space; the result is stripped.
2. **Non-breaking prefixes keep their dot.** If a token, after removing opening punctuation
   (``( " ' « ¿ ¡`` ...) and closing punctuation (``) " ' » , ; : ? !`` ...), is a prefix from
   the language's list followed by one dot (``Mr.``, ``Dr.``, ``Sra.``, ``EE.UU.``, ``e.g.``),
   it is kept verbatim, inner dots included. The lists are the Moses lists shipped inside
   ``sacremoses`` (see :func:`nonbreaking_prefixes`). Matching is case-sensitive, as in Moses.
   A few prefixes only count before a number (English ``No. 5``, ``Art. 3``, ``pp. 7``): see
   :func:`numeric_only_prefixes`.
3. **Initialisms keep their dots.** A token made of two or more single letters each followed
   by a dot (``U.S.A.``, ``U.N.``, ``a.m.``, ``p.m.``, ``a.C.``) is kept verbatim. The prefix
   lists already treat every single capital letter as a non-breaking initial (``J. K.
   Rowling``); this rule extends that to initials written without spaces, so ``"U.S.A. is
   big"`` stays ``"U.S.A. is big"`` and ``"at 9 a.m. sharp"`` does not become ``"am"``.
4. **Numbers keep their dots**: a dot between two digits (``3.14``, Spanish ``10.000``), or a
   dot that starts a token and is followed by a digit (``.5``), is kept.
5. **Ellipses are kept**: a run of two or more dots (``...``) is punctuation, not a sentence
   end, and is left as it is.
6. **Sentence-final dots are kept**: the last dot of a token is a sentence end when nothing
   follows it in the text, or when the next token starts like a sentence — an upper-case
   letter, a digit or opening punctuation (``"I'm sorry. I didn't mean it."``, ``"¿Vienes?"``).
   Closing quotes or brackets may stand between the dot and the next token (``"Sí."``).
   A dot followed directly by ``, ; : ? !`` is not a sentence end.
7. **Every other dot is removed**: a dot glued to the next letter (``"Hello.world"`` becomes
   ``"Helloworld"``, as in the tutorial) or a dot followed by a lower-case word
   (``"He said no. then left"`` becomes ``"He said no then left"``).

``?`` and ``!`` are never touched, and nothing but dots and whitespace is ever changed.

Languages: every language for which ``sacremoses`` ships a list (``"en"``, ``"es"``, ``"fr"``,
...; full names such as ``"english"`` are accepted too, case-insensitively). An unknown
language raises :class:`ValueError` naming the supported ones; there is no silent fallback
to English.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Iterable, Optional, Tuple

__all__ = [
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

# Characters that may open a sentence or a quotation before a word ("¿Qué", «Sí», (see)).
_OPENING = "\"'“‘«‹([{¿¡—–-"
# Characters that may close a word after its dot ("Sí.", (etc.), p.m.?).
_CLOSING_QUOTES = "\"'”’»›)]}"
_CLOSING_PUNCT = ",;:?!"
_CLOSING = _CLOSING_QUOTES + _CLOSING_PUNCT

_WHITESPACE = re.compile(r"\s+")
# Two or more single letters each followed by a dot: U.S.A., a.m., a.C.
_INITIALISM = re.compile(r"(?:[^\W\d_]\.){2,}")
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


@functools.lru_cache(maxsize=None)
def _language_table() -> dict[str, str]:
    """Map every accepted language name or code (lower case) to its sacremoses code."""
    from sacremoses.corpus import NonbreakingPrefixes

    return {name.lower(): code for name, code in NonbreakingPrefixes().available_langs.items()}


def supported_languages() -> Tuple[str, ...]:
    """Return the sorted language codes for which non-breaking prefix lists exist."""
    return tuple(sorted(set(_language_table().values())))


def resolve_language(lang: str, caller: str) -> str:
    """The language code of ``lang`` (a code or a full name, any case), else ``TypeError`` /
    ``ValueError`` naming ``caller`` and the supported languages."""
    if not isinstance(lang, str):
        raise TypeError(f"{caller}: lang must be a str such as 'en' or 'es', got {type(lang).__name__}")
    code = _language_table().get(lang.strip().lower())
    if code is None:
        raise ValueError(
            f"{caller}: unsupported language {lang!r}; expected one of "
            f"{', '.join(supported_languages())} (or a full name such as 'english')"
        )
    return code


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
        ValueError: if ``lang`` is not a supported language.
    """
    return _prefix_lists(resolve_language(lang, "nonbreaking_prefixes"))[0]


def numeric_only_prefixes(lang: str = "en") -> frozenset[str]:
    """Return the words that keep their dot in ``lang`` only before a number (``"No"`` in
    ``"No. 5"``).

    Raises:
        ValueError: if ``lang`` is not a supported language.
    """
    return _prefix_lists(resolve_language(lang, "numeric_only_prefixes"))[1]


def _starts_sentence(token: Optional[str]) -> bool:
    """Whether a token can begin a new sentence (``None`` means end of text)."""
    if token is None:
        return True
    first = token[0]
    return first.isupper() or first.isdigit() or first in _OPENING


def _clean_token(token: str, next_token: Optional[str], always: frozenset[str], numeric: frozenset[str]) -> str:
    """Apply the dot rules of the module docstring to one whitespace-free token."""
    if "." not in token:
        return token
    # Split the token into opening punctuation, body and closing punctuation.
    end = len(token)
    while end > 0 and token[end - 1] in _CLOSING:
        end -= 1
    start = 0
    while start < end and token[start] in _OPENING:
        start += 1
    head, body, tail = token[:start], token[start:end], token[end:]
    if not body:
        return token  # only punctuation, no dot to judge

    if body.endswith(".") and not body.endswith(".."):
        stem = body[:-1]
        if stem in always:
            return token
        if stem in numeric and next_token is not None and next_token[0].isdigit():
            return token
        if _INITIALISM.fullmatch(body):
            return token

    last_is_final = not any(c in _CLOSING_PUNCT for c in tail) and _starts_sentence(next_token)
    out = []
    n = len(body)
    for i, ch in enumerate(body):
        if ch != ".":
            out.append(ch)
            continue
        prev_ch = body[i - 1] if i > 0 else ""
        next_ch = body[i + 1] if i + 1 < n else ""
        if prev_ch == "." or next_ch == ".":
            out.append(ch)  # part of an ellipsis
        elif next_ch.isdigit() and (prev_ch.isdigit() or i == 0):
            out.append(ch)  # decimal or thousands separator, or ".5"
        elif i == n - 1 and last_is_final:
            out.append(ch)  # the sentence ends here
        # any other dot does not end a sentence: drop it
    return head + "".join(out) + tail


def clean_sentence(text: str, lang: str = "en") -> str:
    """Clean one sentence: remove dots that do not end a sentence, collapse whitespace.

    See the module docstring for the exact rules. Examples::

        >>> clean_sentence("Mr. Smith went to  Washington.")
        'Mr. Smith went to Washington.'
        >>> clean_sentence("Hello.world ,  he said. then left.")
        'Helloworld , he said then left.'
        >>> clean_sentence("La Sra. García vive en EE.UU.", "es")
        'La Sra. García vive en EE.UU.'

    Args:
        text: the sentence.
        lang: language code or name whose non-breaking prefixes apply (``"en"``, ``"es"``...).

    Raises:
        TypeError: if ``text`` is not a ``str``.
        ValueError: if ``lang`` is not supported, or ``text`` is not valid Unicode (see :func:`check_text`).
    """
    if not isinstance(text, str):
        raise TypeError(f"clean_sentence: expected text to be a str, got {type(text).__name__}")
    check_text(text, "clean_sentence")
    code = resolve_language(lang, "clean_sentence")
    always, numeric = _prefix_lists(code)
    tokens = _WHITESPACE.split(normalize(text).strip())
    if tokens == [""]:
        return ""
    cleaned = []
    for i, token in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        cleaned.append(_clean_token(token, nxt, always, numeric))
    # A token may have become empty only if it was made of dots we removed; drop those.
    return " ".join(t for t in cleaned if t)


def clean_corpus(sentences: Iterable[str], lang: str = "en") -> list[str]:
    """Clean every sentence of ``sentences`` with :func:`clean_sentence`; return a new list.

    Raises:
        TypeError: if ``sentences`` is a single ``str`` (pass a list of sentences) or holds
            something that is not a ``str`` (the message gives its index).
        ValueError: if ``lang`` is not supported.
    """
    if isinstance(sentences, (str, bytes)):
        raise TypeError("clean_corpus: expected an iterable of sentences, got a single string")
    code = resolve_language(lang, "clean_corpus")
    result = []
    for i, sentence in enumerate(sentences):
        if not isinstance(sentence, str):
            raise TypeError(f"clean_corpus: sentence {i} is a {type(sentence).__name__}, expected a str")
        result.append(clean_sentence(sentence, code))
    return result
