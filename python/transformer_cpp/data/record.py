"""What a training run records about its data: the ``data`` section of every checkpoint it writes.

The record says how to rebuild the run's split exactly (file, sampling, seed, fractions, encoding)
and what came of it (pairs loaded, a digest per split, the length limit), so that ``evaluate``
scores the held-out pairs and ``train --resume`` continues on the same ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

from .._checks import Limit
from ..config import check_settings, choice_setting, flag_setting, setting
from ..text import language_code
from ..tokenizer import MAX_VOCAB_SIZE, SPECIAL_TOKENS
from .split import check_fractions
from .tatoeba import DECODE_ERRORS, SAMPLING_MODES, check_encoding, choose_columns

__all__ = ["DataRecord", "LENGTH_COVERAGE", "SPLIT_BY_PAIR", "SPLIT_BY_SOURCE", "columns_option", "language_option"]

#: Share of the training pairs that the automatic length limit (max_length_option 0) keeps.
LENGTH_COVERAGE = 99.9

#: Pairs split by source sentence (:func:`~transformer_cpp.data.split_by_source`): no leak.
SPLIT_BY_SOURCE = "by-source"
#: Pairs split one by one (:func:`~transformer_cpp.data.train_val_test_split`): what records
#: without a ``split`` key hold.
SPLIT_BY_PAIR = "by-pair"


def _language(owner: str, name: str, value: Any) -> str:
    return language_code(value, f"{owner}: {name}" if owner else name)


def language_option(text: str) -> str:
    """A language option's text (a code or an English name: ``es``, ``fra``, ``japanese``) as its code."""
    try:
        return language_code(text, "language")
    except ValueError as exc:
        raise ValueError(str(exc).split(": ", 1)[1]) from None


def columns_option(text: str) -> str:
    """The columns option's text: two column numbers, source then target (``2,1``), or the
    languages of a file's columns in order (``en,es``); its form is checked here, its fit to the
    languages when the data is read."""
    numbers = [x.strip() for x in text.split(",")]
    if all(x.isdigit() for x in numbers):
        choose_columns(text, "en", "es", caller="--columns")
        return ",".join(numbers)
    langs = [language_code(x, "--columns") for x in numbers]
    if len(langs) < 2 or len(set(langs)) != len(langs):
        raise ValueError("--columns: name the language of each column once, in order, such as en,es")
    return ",".join(langs)


def _encoding(owner: str, name: str, value: Any) -> Any:
    check_encoding(value, owner or "encoding")
    return value  # as given: the record keeps the name the run was asked for


_FRACTION = Limit(False, 0, 1, high_open=True)


@dataclass
class DataRecord:
    """The data settings of a run and what the data gave (see the module docstring). The settings a
    run chooses are declared with their limits and ``transformer-cpp train`` options."""

    #: Source and target language codes (cleaning and tokenization follow them; a record without
    #: them is English to Spanish, as every run was before they could be chosen).
    src_lang: str = setting(
        "en",
        check=_language,
        option_check=language_option,
        help="language to translate from: a code (en, es, fr, ja, ...) or an English name; cleaning follows "
        "it (default {default})",
        option="--source-lang",
        metavar="LANG",
    )
    tgt_lang: str = setting(
        "es",
        check=_language,
        option_check=language_option,
        help="language to translate into (default {default})",
        option="--target-lang",
        metavar="LANG",
    )
    #: The columns option as given (None: chosen from the file's name, a Tatoeba file English
    #: first, else source<TAB>target).
    columns: Optional[str] = setting(
        None,
        option_check=columns_option,
        help="which columns of a tab-separated file hold the source and the target: the languages of its "
        "columns in order (en,es: the languages pick), or two column numbers, source then target (2,1). "
        "Default: a Tatoeba file (spa.txt, fra-eng.zip) is English then the other language; any other file "
        "is source<TAB>target",
        metavar="COLS",
    )
    #: The 1-based columns the sources and targets were read from (None before the data is read,
    #: and for two aligned files); a record without them read columns 1 and 2.
    source_column: Optional[int] = None
    target_column: Optional[int] = None
    #: How the pairs were split: :data:`SPLIT_BY_SOURCE` or :data:`SPLIT_BY_PAIR`.
    split: str = SPLIT_BY_SOURCE
    num_samples: int = setting(
        0,
        limit=Limit(True, 0, 2**63 - 1),
        help="use N pairs of the file (default: the preset's; 0 = all)",
    )
    sampling: str = choice_setting(
        "random",
        SAMPLING_MODES,
        "how --num-samples picks pairs: a random sample seeded by --split-seed, or the first N "
        "lines (the file is sorted by length: the N shortest; the tutorial's way)",
    )
    vocab_size: int = setting(
        8000,
        # the special tokens and the 256 byte symbols: a smaller vocabulary cannot spell every text
        limit=Limit(True, len(SPECIAL_TOKENS) + 256, MAX_VOCAB_SIZE),
        help="target size of each subword vocabulary (at least the 4 special tokens and the 256 byte symbols)",
    )
    joint_vocab: bool = flag_setting(
        "one subword vocabulary for both languages, decoder embedding tied to the output layer"
    )
    split_seed: int = setting(
        0,
        limit=Limit(True, 0, 2**63 - 1),
        help="seed of the sample and of the train/valid/test split by source sentence (default {default})",
    )
    valid_fraction: float = setting(
        0.02,
        limit=_FRACTION,
        option_check=lambda value: check_fractions(value, 0.0)[0],
        help="share of pairs for validation (default {default})",
    )
    test_fraction: float = setting(
        0.03,
        limit=_FRACTION,
        option_check=lambda value: check_fractions(0.0, value)[1],
        help="share of pairs held out for evaluate (default {default})",
    )
    max_length_option: int = setting(
        0,
        limit=Limit(True, 2, 100_000),
        zero="automatic",
        help="longest training pair in tokens; longer pairs are left out of training (0 = the length that "
        f"covers {LENGTH_COVERAGE}% of them). Translation has no length limit.",
        option="--max-length",
    )
    #: The length limit used, in tokens.
    max_length: Optional[int] = None
    #: Whether the sentences are cleaned in their language as they are read: not for tokenizers
    #: that normalise raw text themselves (a fine-tuned SentencePiece model's).
    clean: bool = True
    encoding: str = setting(
        "utf-8",
        check=_encoding,
        option_check=lambda text: check_encoding(text, "--encoding"),
        help="text encoding of the data file (default {default}); a line not valid in it is an error",
    )
    decode_errors: str = choice_setting(
        "strict",
        DECODE_ERRORS,
        "what a line that is not valid in the encoding does: stop with its line number (strict, the "
        "default) or be left out, counted (skip)",
    )
    #: The file (absolute path; the source sentences of two aligned files, ``target_path`` the
    #: target ones), how many pairs it gave, and a digest of each split's pairs.
    path: Optional[str] = None
    target_path: Optional[str] = None
    #: The Tatoeba pair ("fra-eng") when the data came from the cache, and its archive's SHA-256.
    tatoeba_pair: Optional[str] = None
    archive_sha256: Optional[str] = None
    pairs_loaded: Optional[int] = None
    split_digests: Dict[str, str] = field(default_factory=dict)
    #: Keys of the stored section that are not fields here (checkpoint averaging adds
    #: ``averaged_from``), kept so that a record read and written again loses nothing.
    extra: Dict[str, Any] = field(default_factory=dict)

    def check(self) -> "DataRecord":
        """This record, if every setting a run chooses is allowed; else ``TypeError`` /
        ``ValueError`` naming the setting and what it allows."""
        check_settings(self, "DataRecord")
        check_fractions(self.valid_fraction, self.test_fraction, "DataRecord")
        if self.src_lang == self.tgt_lang:
            raise ValueError(
                f"DataRecord: the source and target languages are both {self.src_lang!r}; they must differ"
            )
        return self

    @property
    def direction(self) -> str:
        """``"es -> en"``: the source and target languages."""
        return f"{self.src_lang} -> {self.tgt_lang}"

    def read_columns(self) -> Any:
        """The columns to read the data with: the recorded ones once the data was read, else the
        columns option as given (None: chosen from the file)."""
        if self.source_column is not None and self.target_column is not None:
            return (int(self.source_column), int(self.target_column))
        return self.columns

    @classmethod
    def from_dict(cls, values: Optional[Mapping[str, Any]]) -> "DataRecord":
        """The record a checkpoint stored, including those written before a field existed: a
        missing field gets the value such runs used (they sampled the first pairs, split pair by
        pair, and skipped undecodable lines when no encoding was recorded)."""
        values = dict(values or {})
        legacy: Dict[str, Any] = {
            "sampling": "first",
            "source_column": None if values.get("target_path") else 1,
            "target_column": None if values.get("target_path") else 2,
            "split": SPLIT_BY_PAIR,
            "decode_errors": "strict" if "encoding" in values else "skip",
        }
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in values.items() if k in names}
        extra = {k: v for k, v in values.items() if k not in names}
        record = cls(**{**legacy, **known})
        record.split_digests = dict(record.split_digests or {})
        record.extra = extra
        return record

    def to_dict(self) -> Dict[str, Any]:
        """The record as the JSON object a checkpoint stores."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        out["split_digests"] = dict(self.split_digests)
        return {**out, **self.extra}

    def replace(self, **changes: Any) -> "DataRecord":
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)
