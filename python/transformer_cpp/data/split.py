"""Splitting sentence pairs without leaks: by source sentence, so that no test or validation source
is seen in training (the Tatoeba file lists many sentences several times with different
translations), and the length statistics that choose a length limit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Sequence, Tuple, Union

import numpy as np

from .._checks import number as _number, seed as _seed

__all__ = [
    "LENGTH_PERCENTILES",
    "SourceSplit",
    "check_fractions",
    "length_limit",
    "length_percentiles",
    "sentence_key",
    "split_by_source",
    "train_val_test_split",
]


def train_val_test_split(
    n_or_items: Union[int, Sequence[Any], np.ndarray],
    valid_fraction: float = 0.1,
    test_fraction: float = 0.0,
    seed: int = 0,
) -> Tuple[Any, Any, Any]:
    """Split ``n`` examples at random into train, validation and test parts.

    The split depends only on ``n`` and ``seed``. The validation part has
    ``round(n * valid_fraction)`` examples, the test part ``round(n * test_fraction)``, the
    training part the rest; the three are disjoint and cover everything.

    Args:
        n_or_items: the number of examples, or the examples themselves (a sequence or array).
        valid_fraction: share of examples for validation, in ``[0, 1)``.
        test_fraction: share of examples for testing, in ``[0, 1)``.
        seed: random seed.

    Returns:
        ``(train, valid, test)``: for an int, three sorted ``int64`` index arrays; for an
        array, the rows at those indices; for another sequence, lists of its items.

    Raises:
        ValueError: if a fraction is out of range or the fractions leave no training example.
    """
    caller = "train_val_test_split"
    if isinstance(n_or_items, bool):
        raise TypeError(f"{caller}: expected an int or a sequence, got bool")
    if isinstance(n_or_items, (int, np.integer)):
        n = int(n_or_items)
        if n < 0:
            raise ValueError(f"{caller}: the number of examples must be >= 0, got {n}")
        items = None
    else:
        try:
            n = len(n_or_items)
        except TypeError:
            raise TypeError(
                f"{caller}: expected an int or a sequence with a length, got {type(n_or_items).__name__}"
            ) from None
        items = n_or_items
    check_fractions(valid_fraction, test_fraction, caller)
    seed = _seed(caller, "seed", seed)
    n_valid = int(round(n * float(valid_fraction)))
    n_test = int(round(n * float(test_fraction)))
    if n > 0 and n_valid + n_test >= n:
        raise ValueError(
            f"{caller}: valid_fraction {valid_fraction} and test_fraction {test_fraction} leave no "
            f"training example out of {n}"
        )
    perm = np.random.default_rng(seed).permutation(n).astype(np.int64)  # seed checked above
    test = np.sort(perm[:n_test])
    valid = np.sort(perm[n_test : n_test + n_valid])
    train = np.sort(perm[n_test + n_valid :])
    if items is None:
        return train, valid, test
    if isinstance(items, np.ndarray):
        return items[train], items[valid], items[test]
    return tuple([items[int(i)] for i in part] for part in (train, valid, test))  # type: ignore[return-value]


def check_fractions(valid_fraction: Any, test_fraction: Any, caller: str = "split_by_source") -> Tuple[float, float]:
    """``(valid_fraction, test_fraction)`` as floats if each is a number in [0, 1) and together
    they leave pairs for training (sum < 1); ``ValueError`` otherwise."""
    values = [
        _number(caller, label, value, 0.0, 1.0, high_open=True)
        for label, value in (("valid_fraction", valid_fraction), ("test_fraction", test_fraction))
    ]
    if values[0] + values[1] >= 1.0:
        raise ValueError(
            f"{caller}: valid_fraction {valid_fraction} and test_fraction {test_fraction} add up to "
            "1 or more and leave nothing for training"
        )
    return values[0], values[1]


def sentence_key(text: str) -> str:
    """What makes two sentences "the same" for splitting: case and spacing ignored."""
    return " ".join(text.casefold().split())


@dataclass(eq=False)
class SourceSplit:
    """A split of sentence pairs drawn by source sentence (see :func:`split_by_source`).

    Attributes:
        train, valid, test: sorted ``int64`` indices of the pairs in each part.
        dropped: pairs left out of ``train`` (and ``valid``) because their target sentence is a
            reference of a later part: no reference is ever a training target.
    """

    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    dropped: int

    def parts(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.train, self.valid, self.test


def split_by_source(
    sources: Sequence[str],
    targets: Sequence[str],
    valid_fraction: float = 0.05,
    test_fraction: float = 0.05,
    seed: int = 0,
) -> SourceSplit:
    """Split parallel sentences into train, validation and test **by source sentence**.

    Tatoeba gives one English sentence several Spanish translations; a pair-by-pair split puts
    some of them in training and others in the test part, so the test then measures memory.
    Here every distinct source sentence (case and spacing ignored) goes, with all its pairs,
    to exactly one part: the distinct sources are shuffled with ``seed`` and dealt to the test
    part until it holds ``round(n * test_fraction)`` pairs, then to validation, the rest to
    training. Then every training pair whose *target* sentence is also a test or validation
    reference is dropped, and every validation pair whose target is a test reference: no
    reference is ever seen as a training target either.

    Deterministic: the same sentences, fractions and seed give the same split.

    Raises:
        ValueError: if the lists differ in length, a fraction is outside ``[0, 1)``, or nothing
            is left for training.
    """
    caller = "split_by_source"
    if isinstance(sources, str) or isinstance(targets, str):
        raise TypeError(f"{caller}: expected lists of sentences, got a single string")
    sources, targets = list(sources), list(targets)  # any iterables (a generator has no len)
    if len(sources) != len(targets):
        raise ValueError(f"{caller}: {len(sources)} sources but {len(targets)} targets; expected parallel lists")
    check_fractions(valid_fraction, test_fraction, caller)
    seed = _seed(caller, "seed", seed)
    for label, texts in (("source", sources), ("target", targets)):
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"{caller}: {label} {i} is a {type(text).__name__}, expected a str")
    n = len(sources)
    group_of: Dict[str, int] = {}
    groups = np.empty(n, dtype=np.int64)
    for i, text in enumerate(sources):
        groups[i] = group_of.setdefault(sentence_key(text), len(group_of))
    sizes = np.bincount(groups, minlength=len(group_of))
    order = np.random.default_rng(int(seed)).permutation(len(group_of))
    filled = np.cumsum(sizes[order])
    n_test = int(round(n * float(test_fraction)))
    n_valid = int(round(n * float(valid_fraction)))
    # deal whole groups: a group goes to test while test is still short of its share, and so on
    part_of_group = np.full(len(group_of), 2, dtype=np.int64)  # 0 test, 1 valid, 2 train
    before = filled - sizes[order]
    in_test = before < n_test
    test_end = int(filled[in_test][-1]) if in_test.any() else 0  # pairs dealt to test (whole groups)
    part_of_group[order[in_test]] = 0
    part_of_group[order[~in_test & (before < test_end + n_valid)]] = 1
    part = part_of_group[groups]
    del group_of  # the keys of the sources: memory for the next step
    # each target's key made when it is looked at, not kept for every pair
    test_refs = {sentence_key(targets[i]) for i in np.flatnonzero(part == 0)}
    valid_refs = {sentence_key(targets[i]) for i in np.flatnonzero(part == 1)}
    keep = np.ones(n, dtype=bool)
    for i in np.flatnonzero(part != 0).tolist():
        key = sentence_key(targets[i])
        if (part[i] == 2 and (key in test_refs or key in valid_refs)) or (part[i] == 1 and key in test_refs):
            keep[i] = False
    train = np.flatnonzero((part == 2) & keep).astype(np.int64)
    if n and not len(train):
        raise ValueError(
            f"{caller}: valid_fraction {valid_fraction} and test_fraction {test_fraction} "
            f"leave no training pair out of {n}"
        )
    return SourceSplit(
        train=train,
        valid=np.flatnonzero((part == 1) & keep).astype(np.int64),
        test=np.flatnonzero(part == 0).astype(np.int64),
        dropped=int(n - keep.sum()),
    )


#: Percentiles that :func:`length_percentiles` reports.
LENGTH_PERCENTILES = (50.0, 90.0, 99.0, 99.5, 99.9, 100.0)


def length_percentiles(lengths: Sequence[int], percentiles: Sequence[float] = LENGTH_PERCENTILES) -> Dict[float, int]:
    """``{percentile: length}``: the smallest length that covers that share of ``lengths``."""
    values = np.sort(np.asarray(lengths, dtype=np.int64))
    if not len(values):
        raise ValueError("length_percentiles: no lengths")
    out = {}
    for p in percentiles:
        k = int(np.ceil(len(values) * float(p) / 100.0)) - 1
        out[float(p)] = int(values[min(max(k, 0), len(values) - 1)])
    return out


def length_limit(lengths: Sequence[int], coverage: float = 99.5) -> int:
    """The smallest length that covers ``coverage`` percent of ``lengths``."""
    if not 0.0 < float(coverage) <= 100.0:
        raise ValueError(f"length_limit: coverage must be in (0, 100], got {coverage!r}")
    return length_percentiles(lengths, (float(coverage),))[float(coverage)]
