"""Parallel data: reading the Tatoeba pairs (:mod:`.tatoeba`), splitting them without leaks
(:mod:`.split`), and encoding and batching them (:mod:`.batching`).

Pipeline::

    pairs = load_tatoeba(num_samples=80_000)                # download once, then cached
    en = clean_corpus(pairs.english, "en"); es = clean_corpus(pairs.spanish, "es")
    tok_en = SubwordTokenizer.build_from_corpus(en, 2**14)
    tok_es = SubwordTokenizer.build_from_corpus(es, 2**14)
    split = split_by_source(en, es, valid_fraction=0.02, test_fraction=0.03)
    enc = encode_pairs([en[i] for i in split.train], [es[i] for i in split.train], tok_en, tok_es, 15)
    for batch in batches(enc, 64, seed=0, epoch=epoch):
        ...  # batch.src, batch.tgt_in, batch.tgt_out
"""

from .batching import Batch, EncodedPairs, batch_plan, batches, encode_pairs, make_batch, num_batches
from .record import SPLIT_BY_PAIR, SPLIT_BY_SOURCE, DataRecord
from .split import (
    LENGTH_PERCENTILES,
    SourceSplit,
    check_fractions,
    length_limit,
    length_percentiles,
    sentence_key,
    split_by_source,
    train_val_test_split,
)
from .tatoeba import (
    CACHE_ENV_VAR,
    DATA_ENV_VAR,
    DECODE_ERRORS,
    MAX_LINE_BYTES,
    SAMPLING_MODES,
    TATOEBA_LICENSE,
    TATOEBA_URLS,
    LoadStats,
    TatoebaPairs,
    UndecodableLineError,
    check_encoding,
    default_cache_dir,
    download_tatoeba,
    load_tatoeba,
)

__all__ = [
    "DataRecord",
    "SPLIT_BY_PAIR",
    "SPLIT_BY_SOURCE",
    "Batch",
    "CACHE_ENV_VAR",
    "DATA_ENV_VAR",
    "DECODE_ERRORS",
    "EncodedPairs",
    "LENGTH_PERCENTILES",
    "LoadStats",
    "MAX_LINE_BYTES",
    "SAMPLING_MODES",
    "SourceSplit",
    "TATOEBA_LICENSE",
    "TATOEBA_URLS",
    "TatoebaPairs",
    "UndecodableLineError",
    "batch_plan",
    "batches",
    "check_encoding",
    "check_fractions",
    "default_cache_dir",
    "download_tatoeba",
    "encode_pairs",
    "length_limit",
    "length_percentiles",
    "load_tatoeba",
    "make_batch",
    "num_batches",
    "sentence_key",
    "split_by_source",
    "train_val_test_split",
]
