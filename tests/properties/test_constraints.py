"""Property-based tests (Hypothesis) of lexically constrained beam search: on a tiny trained
model and generated constraints, every hypothesis that ends with the end token holds every
constraint, one cut at its limit says how many it misses (never fewer than it does), and a forced
prefix starts every output."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.toy_task import reversal_tokenizer, threads, trained_reversal_model


@pytest.fixture(scope="module")
def trained():
    tok = reversal_tokenizer()
    with threads(1):
        return tok, trained_reversal_model(tok)


def holds(tokens, phrase):
    tokens, n = list(tokens), len(phrase)
    return any(tokens[i : i + n] == list(phrase) for i in range(len(tokens) - n + 1))


SYMBOL_IDS = st.integers(4, 16)  # the tokenizer's ids past its specials
CASE = st.fixed_dictionaries(
    {
        "src": st.lists(st.lists(SYMBOL_IDS, min_size=1, max_size=5), min_size=1, max_size=3),
        "beam": st.integers(2, 5),
        "phrases": st.lists(st.lists(SYMBOL_IDS, min_size=1, max_size=2), max_size=3),
        "prefix": st.lists(SYMBOL_IDS, max_size=2),
        "limit": st.integers(3, 12),
    }
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=CASE)
def test_every_constraint_in_every_finished_output(trained, case):
    tok, model = trained
    phrases = case["phrases"][: case["beam"] - 1]
    rows = [[tok.start_id, *r, tok.end_id] for r in case["src"]]
    width = max(len(r) for r in rows)
    src = np.array([r + [0] * (width - len(r)) for r in rows], dtype=np.int64)
    prefix = case["prefix"][: case["limit"]]
    with threads(1):
        found = model.beam_search(
            src,
            tok.start_id,
            tok.end_id,
            case["limit"],
            beam_size=case["beam"],
            n_best=2 if case["beam"] > 2 else 1,
            target_prefix=[prefix] * len(rows),
            constraints=[phrases] * len(rows),
        )
    for hyps in found:
        for tokens, _score, _log_prob, finished, missing in hyps:
            tokens = [int(t) for t in tokens]
            assert tokens[: len(prefix)] == prefix
            not_held = sum(not holds(tokens, p) for p in phrases)
            assert not_held <= missing
            if finished:
                assert missing == 0 and not_held == 0 and tokens[-1] == tok.end_id
            else:
                assert len(tokens) == case["limit"]
        # hypotheses that miss fewer constraints come first
        assert [h[4] for h in hyps] == sorted(h[4] for h in hyps)
