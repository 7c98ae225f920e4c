"""Reading sentence pairs: tab-separated files (the Tatoeba files of manythings.org among them),
two aligned text files, and the Tatoeba pairs by name (downloaded into a cache by :mod:`.download`).

What :func:`read_pairs` reads (a *data spec*, :func:`parse_data_spec`):

* a tab-separated file, ``.txt``/``.tsv`` or a ``.zip`` holding one: one pair a line,
  ``column<TAB>column[<TAB>...]``; which columns are the source and the target is the reader's
  ``columns`` (1-based; :func:`choose_columns` picks them by language or by number). The Tatoeba
  files (``spa.txt``, ``fra-eng.zip``, ...) are ``English<TAB>other language<TAB>attribution``;
* two aligned plain-text files, one sentence a line, written ``"train.es,train.en"`` (source file,
  comma, target file): line *n* of one is the translation of line *n* of the other, and files
  with different numbers of lines are refused, naming the first line that has no counterpart;
* ``"tatoeba:LLL-eng"``: the Tatoeba pair of manythings.org (``tatoeba:fra-eng``), downloaded
  once into the cache.

Without a spec: ``$TRANSFORMER_CPP_DATA`` (a spec too: how an offline machine points at a local
copy), else the named pair in the cache, else its download.

The Tatoeba sentences are licensed CC-BY 2.0 FR (:data:`TATOEBA_LICENSE`); the third column of
their files credits their authors, and :class:`SentencePairs` keeps it.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from .._checks import (
    choice as _choice,
    integer as _integer,
    seed as _seed,
)
from ..text import clean_sentence, language_code
from .download import (
    CACHE_ENV_VAR,
    DEFAULT_TATOEBA_PAIR,
    TATOEBA_LICENSE,
    TATOEBA_URLS,
    archive_sha256,
    default_cache_dir,
    download_tatoeba,
)
from .lines import (
    _END,
    DECODE_ERRORS,
    MAX_LINE_BYTES,
    LineCountMismatch,
    LoadStats,
    UndecodableLineError,
    _aligned_lines,
    _decoded,
    _read_lines,
    check_encoding,
)
from .spec import (
    DATA_ENV_VAR,
    ColumnsOption,
    DataSpec,
    choose_columns,
    file_languages,
    parse_data_spec,
    resolve_data,
    tatoeba_pair_for,
)

__all__ = [
    "CACHE_ENV_VAR",
    "DATA_ENV_VAR",
    "DECODE_ERRORS",
    "DataSpec",
    "LineCountMismatch",
    "LoadStats",
    "MAX_LINE_BYTES",
    "SAMPLING_MODES",
    "SentencePairs",
    "TATOEBA_LICENSE",
    "TATOEBA_URLS",
    "TatoebaPairs",
    "UndecodableLineError",
    "check_encoding",
    "choose_columns",
    "default_cache_dir",
    "download_tatoeba",
    "file_languages",
    "load_tatoeba",
    "parse_data_spec",
    "read_pairs",
    "resolve_data",
    "tatoeba_pair_for",
]

logger = logging.getLogger(__name__)

#: How :func:`read_pairs` picks ``num_samples`` pairs: a seeded random sample, or the first N.
SAMPLING_MODES = ("random", "first")


@dataclass
class SentencePairs:
    """Sentence pairs, source and target, with the attribution column of each line.

    ``pairs[i]`` is ``(source, target)``; ``len(pairs)`` the number of pairs. Iterating yields
    the same tuples. ``attributions[i]`` is what follows the source and target columns of the
    line ("" if nothing did; empty when read with ``attributions=False``). ``columns`` are the
    1-based columns the sources and targets were read from (``None`` for two aligned files),
    ``license`` the licence of the data when it is known (:data:`TATOEBA_LICENSE` for a Tatoeba
    file), ``about`` the path of the archive's ``_about.txt`` (authors, licence) when there is
    one, ``sha256`` the checksum of the downloaded archive when the pairs come from the cache.

    ``line_numbers[i]`` is the number of pair ``i``'s line in the file (1-based; empty when the
    pairs did not come from a file), so that a pair can be named to the user by its line.

    ``english`` and ``spanish`` are the names of ``sources`` and ``targets`` from when only
    English-to-Spanish was read; they still work, with a ``DeprecationWarning``.
    """

    sources: List[str]
    targets: List[str]
    attributions: List[str]
    stats: LoadStats = field(default_factory=LoadStats)
    source: Optional[Path] = None
    license: Optional[str] = TATOEBA_LICENSE
    columns: Optional[Tuple[int, int]] = (1, 2)
    target_file: Optional[Path] = None
    about: Optional[Path] = None
    sha256: Optional[str] = None
    line_numbers: List[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if (
            len(self.sources) != len(self.targets)
            or (self.attributions and len(self.attributions) != len(self.sources))
            or (self.line_numbers and len(self.line_numbers) != len(self.sources))
        ):
            raise ValueError(
                f"SentencePairs: sources ({len(self.sources)}), targets ({len(self.targets)}), "
                f"attributions ({len(self.attributions)}, or none) and line_numbers ({len(self.line_numbers)}, "
                "or none) must have the same length"
            )

    def __len__(self) -> int:
        return len(self.sources)

    def __getitem__(self, index: Union[int, slice]) -> Any:
        if isinstance(index, slice):
            return list(zip(self.sources[index], self.targets[index]))
        return self.sources[index], self.targets[index]

    def __iter__(self) -> Iterator[Tuple[str, str]]:
        return iter(zip(self.sources, self.targets))

    def __repr__(self) -> str:
        return f"SentencePairs({len(self)} pairs, source={str(self.source)!r})"

    @property
    def english(self) -> List[str]:
        """Deprecated name of :attr:`sources`."""
        warnings.warn("SentencePairs.english is deprecated: use .sources", DeprecationWarning, stacklevel=2)
        return self.sources

    @property
    def spanish(self) -> List[str]:
        """Deprecated name of :attr:`targets`."""
        warnings.warn("SentencePairs.spanish is deprecated: use .targets", DeprecationWarning, stacklevel=2)
        return self.targets


#: Deprecated name of :class:`SentencePairs`.
TatoebaPairs = SentencePairs


def _valid_lines(
    spec: DataSpec, columns: Optional[Tuple[int, int]], caller: str, encoding: str, errors: str, stats: LoadStats
) -> Iterator[List[str]]:
    """The fields of each line of ``spec`` that holds a pair, in order; the others are counted in
    ``stats`` (and ``stats.read`` counts every line read)."""
    assert spec.path is not None
    aligned = spec.kind == "aligned"
    src_col, tgt_col = (0, 1) if aligned or columns is None else (columns[0] - 1, columns[1] - 1)
    needed = max(src_col, tgt_col) + 1
    preferred = [f"{spec.pair.split('-')[0]}.txt"] if spec.pair else []
    if not preferred and spec.path.name.lower().endswith("-eng.zip"):
        preferred = [spec.path.name.lower()[: -len("-eng.zip")] + ".txt"]
    if aligned:
        assert spec.target_path is not None
        raws: Iterator[Tuple[bytes, ...]] = _aligned_lines(spec.path, spec.target_path, caller)
        paths = [spec.path, spec.target_path]
    else:
        raws, paths = ((line,) for line in _read_lines(spec.path, caller, preferred)), [spec.path]
    decoded = _decoded(raws, paths, encoding, errors, stats, caller)
    try:
        for lines in decoded:
            if lines is None:
                continue
            if aligned:
                fields = list(lines)
                if not fields[0].strip() and not fields[1].strip():
                    stats.empty += 1
                    continue
            else:
                line = lines[0]
                if not line.strip():
                    stats.empty += 1
                    continue
                if "\t" not in line:
                    stats.no_tab += 1
                    continue
                fields = line.split("\t")
                if len(fields) < needed:
                    stats.missing_column += 1
                    continue
            if not fields[src_col].strip() or not fields[tgt_col].strip():
                stats.empty_field += 1
                continue
            yield fields
    finally:
        decoded.close()  # type: ignore[attr-defined]
        if hasattr(raws, "close"):
            raws.close()


def _count_pairs(spec: DataSpec, columns: Optional[Tuple[int, int]], caller: str, encoding: str, errors: str) -> int:
    """How many lines of ``spec`` hold a pair (a pass that keeps nothing)."""
    return sum(1 for _ in _valid_lines(spec, columns, caller, encoding, errors, LoadStats(encoding=encoding)))


def _parse(
    spec: DataSpec,
    num_samples: Optional[int],
    columns: Optional[Tuple[int, int]],
    clean: Optional[Tuple[str, str]],
    keep_attributions: bool,
    caller: str,
    encoding: str = "utf-8",
    errors: str = "strict",
    select: Optional[Set[int]] = None,
) -> SentencePairs:
    """The pairs of ``spec``: the first ``num_samples`` (None: all), or with ``select`` those
    whose ordinal among the valid lines is in it (only they are cleaned and kept)."""
    assert spec.path is not None
    stats = LoadStats(encoding=encoding)
    sources: List[str] = []
    targets: List[str] = []
    attributions: List[str] = []
    numbers: List[int] = []
    aligned = spec.kind == "aligned"
    src_col, tgt_col = (0, 1) if aligned or columns is None else (columns[0] - 1, columns[1] - 1)
    clean_src: Callable[[str], str] = (lambda t: clean_sentence(t, clean[0])) if clean else str.strip
    clean_tgt: Callable[[str], str] = (lambda t: clean_sentence(t, clean[1])) if clean else str.strip
    valid = _valid_lines(spec, columns, caller, encoding, errors, stats)
    ordinal = -1
    try:
        while num_samples is None or stats.kept < num_samples:  # reading stops there
            fields = next(valid, _END)
            if fields is _END:
                break
            ordinal += 1
            if select is not None and ordinal not in select:
                continue
            sources.append(clean_src(fields[src_col]))
            targets.append(clean_tgt(fields[tgt_col]))
            if keep_attributions and not aligned:
                attributions.append("\t".join(f for i, f in enumerate(fields) if i not in (src_col, tgt_col)).strip())
            numbers.append(stats.read)
            stats.kept += 1
    finally:
        valid.close()  # type: ignore[attr-defined]
    if not sources:
        needed = max(src_col, tgt_col) + 1
        shape = "lines in both files" if aligned else f"line with {needed} tab-separated columns"
        raise ValueError(
            f"{caller}: no valid sentence pair ({shape}) in '{spec}' (read {stats.read} lines: {stats.describe_skipped()})"
        )
    if stats.skipped:
        logger.info(
            "%s: skipped %d of %d lines in %s (%s)", caller, stats.skipped, stats.read, spec, stats.describe_skipped()
        )
    tatoeba = spec.pair is not None or file_languages(spec) is not None
    about = spec.path.parent / "_about.txt" if tatoeba else None
    return SentencePairs(
        sources,
        targets,
        attributions if keep_attributions and not aligned else [],
        stats,
        spec.path,
        license=TATOEBA_LICENSE if tatoeba else None,
        columns=None if aligned else (src_col + 1, tgt_col + 1),
        target_file=spec.target_path,
        about=about if about is not None and about.is_file() else None,
        sha256=archive_sha256(spec.path) if spec.kind == "tatoeba" else None,
        line_numbers=numbers,
    )


def read_pairs(
    data: Union[str, "os.PathLike[str]", DataSpec, None] = None,
    num_samples: Optional[int] = None,
    *,
    columns: ColumnsOption = None,
    languages: Optional[Tuple[str, str]] = None,
    clean: bool = False,
    sampling: str = "random",
    seed: int = 0,
    pair: str = DEFAULT_TATOEBA_PAIR,
    cache_dir: Union[str, "os.PathLike[str]", None] = None,
    download: bool = True,
    urls: Optional[Sequence[str]] = None,
    encoding: str = "utf-8",
    errors: str = "strict",
    attributions: bool = True,
) -> SentencePairs:
    """Read sentence pairs: a tab-separated file, two aligned files or a named Tatoeba pair (see
    the module docstring; without ``data``: ``$TRANSFORMER_CPP_DATA``, else ``pair`` from the
    cache, else its download).

    Columns. ``columns`` chooses the source and target columns of a tab-separated file, by number
    or by the languages of the file's columns (:func:`choose_columns`, which ``languages``, the
    source and target languages, pick from); a Tatoeba file's columns are known (English first).
    Without ``languages``: the numbers given, or (1, 2). Two aligned files have no columns.

    Reading streams the file: a line is decoded, split and (with ``clean``, in each side's
    language, :func:`~transformer_cpp.text.clean_sentence`) cleaned as it is read, so the raw text
    is never held in memory as a whole. Blank lines, lines with too few columns and lines with an
    empty side are skipped and counted in ``.stats``; sides are stripped of surrounding whitespace.

    Encoding. The file is read as ``encoding`` (default UTF-8; a byte-order mark on the first
    line is dropped). A line that is not valid in it is an error naming the file, the line and
    the bytes (:class:`UndecodableLineError`), or with ``errors="skip"`` left out and counted,
    with its line number, in ``.stats``.

    Sampling. ``num_samples`` draws a seeded random sample by default (``sampling="random"``,
    the pairs stay in file order); ``sampling="first"`` keeps the first N valid pairs (a Tatoeba
    file is sorted by length: the N shortest).

    Args:
        data: the data spec, a path, or None.
        num_samples: how many pairs to keep (None: all).
        columns: the source and target columns, as :func:`choose_columns` takes them.
        languages: ``(source language, target language)``, for choosing columns by language and
            for cleaning.
        clean: clean each sentence in its language as it is read (needs ``languages``).
        sampling, seed: how ``num_samples`` pairs are chosen.
        pair: the Tatoeba pair used when no data is given.
        cache_dir, download, urls: the cache, whether a download may happen, and from where.
        encoding, errors: the text encoding, and what an undecodable line does.
        attributions: keep what follows the source and target columns of each line.

    Raises:
        FileNotFoundError: a file that does not exist.
        UndecodableLineError: a line is not valid in ``encoding`` (with ``errors="strict"``).
        LineCountMismatch: two aligned files of different lengths.
        ValueError: no valid pair, a bad argument, or columns that do not fit the data.
        OSError: the download failed.
    """
    caller = "read_pairs"
    num_samples, sampling, seed, encoding, errors = _reading_options(
        caller, num_samples, sampling, seed, encoding, errors
    )
    if clean and languages is None:
        raise ValueError(f"{caller}: clean=True needs languages=(source language, target language)")
    spec = resolve_data(data, pair=pair, cache_dir=cache_dir, download=download, urls=urls, caller=caller)
    return _read(spec, num_samples, columns, languages, clean, sampling, seed, encoding, errors, attributions, caller)


def _reading_options(
    caller: str, num_samples: Optional[int], sampling: str, seed: int, encoding: str, errors: str
) -> Tuple[Optional[int], str, int, str, str]:
    """The checked ``(num_samples, sampling, seed, encoding, errors)`` of :func:`read_pairs` and
    :func:`load_tatoeba`; a bad one is refused with an error naming ``caller``."""
    seed = _seed(caller, "seed", seed)
    encoding = check_encoding(encoding, caller)
    errors = _choice(caller, "errors", errors, DECODE_ERRORS)
    if num_samples is not None:
        num_samples = _integer(caller, "num_samples", num_samples, 1)
    return num_samples, _choice(caller, "sampling", sampling, SAMPLING_MODES), seed, encoding, errors


def _read(
    spec: DataSpec,
    num_samples: Optional[int],
    columns: ColumnsOption,
    languages: Optional[Tuple[str, str]],
    clean: bool,
    sampling: str,
    seed: int,
    encoding: str,
    errors: str,
    attributions: bool,
    caller: str,
) -> SentencePairs:
    if spec.kind == "aligned":
        if columns is not None:
            raise ValueError(f"{caller}: columns are for a tab-separated file; '{spec}' is two aligned files")
        chosen = None
    elif languages is not None:
        chosen = choose_columns(
            columns, languages[0], languages[1], file_languages(spec), what=f"'{spec.path}'", caller=caller
        )
    else:
        chosen = choose_columns(columns, "en", "es", None, caller=caller) if columns is not None else (1, 2)
    cleaning = (
        (language_code(languages[0], caller), language_code(languages[1], caller)) if clean and languages else None
    )
    if sampling == "first" or num_samples is None:
        return _parse(spec, num_samples, chosen, cleaning, attributions, caller, encoding, errors)
    # a seeded sample, in two streaming passes: count the pairs, then keep (and clean) only those drawn
    total = _count_pairs(spec, chosen, caller, encoding, errors)
    if num_samples >= total:
        return _parse(spec, None, chosen, cleaning, attributions, caller, encoding, errors)
    keep = np.random.default_rng(int(seed)).choice(total, size=num_samples, replace=False)
    select = {int(i) for i in keep}
    return _parse(spec, None, chosen, cleaning, attributions, caller, encoding, errors, select)


def load_tatoeba(
    path: Union[str, "os.PathLike[str]", None] = None,
    num_samples: Optional[int] = None,
    *,
    sampling: str = "random",
    seed: int = 0,
    cache_dir: Union[str, "os.PathLike[str]", None] = None,
    download: bool = True,
    urls: Optional[Sequence[str]] = None,
    encoding: str = "utf-8",
    errors: str = "strict",
    pair: str = DEFAULT_TATOEBA_PAIR,
    columns: ColumnsOption = None,
) -> SentencePairs:
    """Load sentence pairs as :func:`read_pairs` does, by default the Tatoeba English-Spanish
    pairs (``spa.txt``): ``path`` if given (any data spec), else ``$TRANSFORMER_CPP_DATA``, else
    ``pair`` (default ``"spa-eng"``) in the cache (``cache_dir``, else ``$TRANSFORMER_CPP_CACHE``,
    else ``~/.cache/transformer_cpp``), unpacked again from a cached archive if only that is left,
    else downloaded from ``urls`` (default :func:`~transformer_cpp.data.download.tatoeba_urls`)
    unless ``download`` is false.

    The sources are the first column and the targets the second unless ``columns`` says otherwise
    (two numbers, source then target). In a zip, the member named like the pair (``spa.txt``) is
    read, else the only ``.txt`` file (files whose name starts with ``_``, like manythings.org's
    ``_about.txt``, are ignored). Encoding, skipped lines and sampling: see :func:`read_pairs`.

    Raises:
        FileNotFoundError: if ``path`` (or ``$TRANSFORMER_CPP_DATA``) does not exist.
        UndecodableLineError: a line is not valid in ``encoding`` (with ``errors="strict"``).
        ValueError: if a zip holds no single pairs file, or no valid pair is left, or
            ``num_samples`` is not a positive int, or the encoding is unknown.
        OSError: if the download fails.
    """
    caller = "load_tatoeba"
    num_samples, sampling, seed, encoding, errors = _reading_options(
        caller, num_samples, sampling, seed, encoding, errors
    )
    spec = resolve_data(path, pair=pair, cache_dir=cache_dir, download=download, urls=urls, caller=caller)
    return _read(spec, num_samples, columns, None, False, sampling, seed, encoding, errors, True, caller)
