"""What a training run records about its data: the ``data`` section of every checkpoint it writes.

The record says how to rebuild the run's split exactly (file, sampling, seed, fractions, encoding)
and what came of it (pairs loaded, a digest per split, the length limit), so that ``evaluate``
scores the held-out pairs and ``train --resume`` continues on the same ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Mapping, Optional

from .._checks import Limit
from ..text import language_code
from ..tokenizer import MAX_VOCAB_SIZE, SPECIAL_TOKENS
from .split import check_fractions
from .tatoeba import DECODE_ERRORS, SAMPLING_MODES, check_encoding

__all__ = ["DataRecord", "SPLIT_BY_PAIR", "SPLIT_BY_SOURCE"]

#: Pairs split by source sentence (:func:`~transformer_cpp.data.split_by_source`): no leak.
SPLIT_BY_SOURCE = "by-source"
#: Pairs split one by one (:func:`~transformer_cpp.data.train_val_test_split`): what records
#: without a ``split`` key hold.
SPLIT_BY_PAIR = "by-pair"


@dataclass
class DataRecord:
    """The data settings of a run and what the data gave (see the module docstring)."""

    #: Source and target language codes (cleaning and tokenization follow them; a record without
    #: them is English to Spanish, as every run was before they could be chosen).
    src_lang: str = "en"
    tgt_lang: str = "es"
    #: The columns option as given: the languages of a tab-separated file's columns ("en,es"),
    #: or its source and target column numbers ("2,1"); None to choose them from the file's name
    #: (a Tatoeba file: English first) or take source<TAB>target.
    columns: Optional[str] = None
    #: The 1-based columns the sources and targets were read from (None before the data is read,
    #: and for two aligned files); a record without them read columns 1 and 2.
    source_column: Optional[int] = None
    target_column: Optional[int] = None
    #: How the pairs were split: :data:`SPLIT_BY_SOURCE` or :data:`SPLIT_BY_PAIR`.
    split: str = SPLIT_BY_SOURCE
    #: Pairs read from the file (0 = all) and how they were chosen ("random" or "first", the shortest).
    num_samples: int = 0
    sampling: str = "random"
    #: Subword vocabulary size asked for, per language (or one shared with ``joint_vocab``).
    vocab_size: int = 8000
    joint_vocab: bool = False
    #: Seed of the sampling and of the split, and the held-out shares.
    split_seed: int = 0
    valid_fraction: float = 0.02
    test_fraction: float = 0.03
    #: The length limit asked for (0 = automatic) and the one used, in tokens.
    max_length_option: int = 0
    max_length: Optional[int] = None
    #: How the file was read: its text encoding, and "strict" (stop at an undecodable line) or "skip".
    encoding: str = "utf-8"
    decode_errors: str = "strict"
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

    #: The allowed values of the settings a run chooses (the others are what the data gave).
    LIMITS: ClassVar[Dict[str, Any]] = {
        "num_samples": Limit(True, 0, 2**63 - 1),
        "sampling": Limit.one_of(list(SAMPLING_MODES)),
        # the special tokens and the 256 byte symbols: a smaller vocabulary cannot spell every text
        "vocab_size": Limit(True, len(SPECIAL_TOKENS) + 256, MAX_VOCAB_SIZE),
        "joint_vocab": Limit.flag(),
        "split_seed": Limit(True, 0, 2**63 - 1),
        "max_length_option": Limit(True, 2, 100_000),  # or 0: automatic
        "decode_errors": Limit.one_of(list(DECODE_ERRORS)),
    }

    def check(self) -> "DataRecord":
        """This record, if every setting a run chooses is allowed; else ``TypeError`` /
        ``ValueError`` naming the setting and what it allows."""
        for name, limit in self.LIMITS.items():
            value = getattr(self, name)
            if not (name == "max_length_option" and value == 0):
                limit.check("DataRecord", name, value)
        check_fractions(self.valid_fraction, self.test_fraction, "DataRecord")
        check_encoding(self.encoding, "DataRecord")
        self.src_lang = language_code(self.src_lang, "DataRecord: src_lang")
        self.tgt_lang = language_code(self.tgt_lang, "DataRecord: tgt_lang")
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
