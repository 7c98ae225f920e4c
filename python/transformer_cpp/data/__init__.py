"""Parallel data: reading sentence pairs (:mod:`.tatoeba`: tab-separated files, two aligned files,
the Tatoeba pairs by name, downloaded by :mod:`.download`), splitting them without leaks
(:mod:`.split`), and encoding and batching them (:mod:`.batching`).

Pipeline::

    pairs = read_pairs("tatoeba:fra-eng", languages=("fr", "en"), clean=True)  # download once, cached
    split = split_by_source(pairs.sources, pairs.targets, valid_fraction=0.02, test_fraction=0.03)
    src = [pairs.sources[i] for i in split.train]; tgt = [pairs.targets[i] for i in split.train]
    tok_src = SubwordTokenizer.build_from_corpus(src, 2**14)
    tok_tgt = SubwordTokenizer.build_from_corpus(tgt, 2**14)
    enc = encode_pairs(src, tgt, tok_src, tok_tgt, 15)
    for batch in batches(enc, 64, seed=0, epoch=epoch):
        ...  # batch.src, batch.tgt_in, batch.tgt_out
"""

from .batching import Batch, EncodedPairs, batch_plan, batches, encode_pairs, make_batch, num_batches, token_lengths
from .download import (
    DEFAULT_TATOEBA_BASE_URL,
    DEFAULT_TATOEBA_PAIR,
    TATOEBA_URL_ENV_VAR,
    cached_tatoeba,
    check_tatoeba_pair,
    file_sha256,
    tatoeba_urls,
)
from .record import LENGTH_COVERAGE, SPLIT_BY_PAIR, SPLIT_BY_SOURCE, DataRecord, columns_option, language_option
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
    DataSpec,
    LineCountMismatch,
    LoadStats,
    SentencePairs,
    TatoebaPairs,
    UndecodableLineError,
    check_encoding,
    choose_columns,
    default_cache_dir,
    download_tatoeba,
    file_languages,
    load_tatoeba,
    parse_data_spec,
    read_pairs,
    resolve_data,
    tatoeba_pair_for,
)

__all__ = [
    "DataRecord",
    "LENGTH_COVERAGE",
    "language_option",
    "SPLIT_BY_PAIR",
    "SPLIT_BY_SOURCE",
    "Batch",
    "CACHE_ENV_VAR",
    "DATA_ENV_VAR",
    "DECODE_ERRORS",
    "DEFAULT_TATOEBA_BASE_URL",
    "DEFAULT_TATOEBA_PAIR",
    "DataSpec",
    "EncodedPairs",
    "LENGTH_PERCENTILES",
    "LineCountMismatch",
    "LoadStats",
    "MAX_LINE_BYTES",
    "SAMPLING_MODES",
    "SentencePairs",
    "SourceSplit",
    "TATOEBA_LICENSE",
    "TATOEBA_URLS",
    "TATOEBA_URL_ENV_VAR",
    "TatoebaPairs",
    "UndecodableLineError",
    "batch_plan",
    "batches",
    "cached_tatoeba",
    "check_encoding",
    "columns_option",
    "check_fractions",
    "check_tatoeba_pair",
    "choose_columns",
    "default_cache_dir",
    "download_tatoeba",
    "encode_pairs",
    "file_languages",
    "file_sha256",
    "length_limit",
    "length_percentiles",
    "load_tatoeba",
    "make_batch",
    "num_batches",
    "parse_data_spec",
    "read_pairs",
    "resolve_data",
    "sentence_key",
    "split_by_source",
    "tatoeba_pair_for",
    "tatoeba_urls",
    "token_lengths",
    "train_val_test_split",
]
