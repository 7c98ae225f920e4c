"""Target prefixes, lexically constrained beam search and sampling in the C++ search: against the
unconstrained search, a NumPy reference of the sampling filter, and the rules each must keep."""

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp import _core
from transformer_cpp.translate import DecodeOptions, decode_rows

from helpers.toy_task import float64_model, threads

START, END = 1, 2


@pytest.fixture(scope="module")
def model():
    return float64_model()


def random_source(seed, rows=6, width=7):
    rng = np.random.default_rng(seed)
    src = rng.integers(3, 30, size=(rows, width))
    for b in range(rows):
        src[b, int(rng.integers(1, width + 1)) :] = 0
    return src


def reference_distribution(logits, top_k, top_p, temperature):
    """temperature, top-k (ties: the lower id), top-p over the renormalised top-k, padding id 0 never."""
    z = np.asarray(logits, dtype=np.float64)
    ids = sorted(range(1, len(z)), key=lambda i: (-z[i], i))[: min(top_k, len(z) - 1)]
    p = np.exp((z[ids] - z[ids[0]]) / temperature)
    p /= p.sum()
    keep = int(np.searchsorted(np.cumsum(p), top_p - 1e-12) + 1)
    out = np.zeros(len(z))
    out[ids[:keep]] = p[:keep] / p[:keep].sum()
    return out


@pytest.mark.parametrize(
    ("top_k", "top_p", "temperature"), [(3, 1.0, 1.0), (50, 0.8, 0.7), (5, 0.5, 2.0), (2, 0.01, 1)]
)
def test_sampling_distribution_equals_numpy_reference(top_k, top_p, temperature):
    logits = np.random.default_rng(top_k).normal(size=12) * 2
    got = _core.sampling_distribution(logits, top_k, top_p, temperature)
    np.testing.assert_allclose(got, reference_distribution(logits, top_k, top_p, temperature), rtol=0, atol=1e-12)
    assert got[0] == 0.0


def test_sampled_tokens_follow_the_filtered_distribution(model):
    """The tokens greedy decoding draws at its first step, over many rows (each its own stream),
    against the reference distribution of the same logits: a chi-square test at 1e-4."""
    src = np.tile(random_source(0, rows=1), (4000, 1))
    logits = model.forward(src[:1], np.array([[START]]), training=False)[0, -1].astype(np.float64)
    options = dict(sampling_topk=6, sampling_topp=0.9, sampling_temperature=1.5)
    first = model.greedy_decode(src, START, END, 1, seed=7, **options)[:, 0]
    expected = reference_distribution(logits, 6, 0.9, 1.5) * len(first)
    counts = np.bincount(first, minlength=len(expected))
    assert counts[expected == 0].sum() == 0  # nothing outside the kept ids
    kept = expected > 0
    chi2 = float((((counts[kept] - expected[kept]) ** 2) / expected[kept]).sum())
    # chi-square with (kept - 1) degrees of freedom; 25 bounds its upper 1e-4 tail for up to 5 of them
    assert kept.sum() - 1 <= 5 and chi2 < 25.0, (chi2, counts[kept], expected[kept])


def test_sampling_same_seed_same_output_any_thread_count(model):
    src = random_source(1, rows=8)
    options = dict(sampling_topk=20, sampling_topp=0.95, sampling_temperature=1.0, seed=11)
    with threads(1):
        one = model.greedy_decode(src, START, END, 12, **options)
    with threads(2):
        two = model.greedy_decode(src, START, END, 12, **options)
    np.testing.assert_array_equal(one, two)
    other = model.greedy_decode(src, START, END, 12, **{**options, "seed": 12})
    assert not np.array_equal(one, other)
    # a row's draws depend on its index and the seed, not on the other rows
    alone = model.greedy_decode(src[:1], START, END, 12, **options)[0]
    np.testing.assert_array_equal(one[0, : alone.size], alone)


def test_top_k_one_is_greedy(model):
    src = random_source(2)
    np.testing.assert_array_equal(
        model.greedy_decode(src, START, END, 10, sampling_topk=1, seed=3), model.greedy_decode(src, START, END, 10)
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("sampling_topk", 0, "sampling_topk must be an integer >= 1"),
        ("sampling_topp", 0.0, "sampling_topp must be a number in (0, 1]"),
        ("sampling_topp", 1.5, "sampling_topp must be a number in (0, 1]"),
        ("sampling_temperature", 0.0, "sampling_temperature must be a finite number > 0"),
        ("seed", -1, "seed must be an integer >= 0"),
    ],
)
def test_sampling_limits(model, name, value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        model.greedy_decode(random_source(0), START, END, 5, **{name: value})
    with pytest.raises(ValueError, match=name):
        DecodeOptions(**{name: value})


def test_prefix_starts_every_output_greedy_and_beam(model):
    src = random_source(3)
    prefixes = [[5], [6, 7], [], [8, 9, 10], [11], [12, 13]]
    greedy = model.greedy_decode(src, START, END, 10, target_prefix=prefixes)
    beams = model.beam_search(src, START, END, 10, beam_size=3, n_best=2, target_prefix=prefixes)
    for b, prefix in enumerate(prefixes):
        assert list(greedy[b, : len(prefix)]) == prefix
        for hyp in beams[b]:
            assert list(hyp[0][: len(prefix)]) == prefix
    # the continuation is what the model prefers after the forced tokens (greedy: the argmax)
    row = greedy[1]
    logits = model.forward(src[1:2], np.array([[START, 6, 7]]), training=False)[0, -1]
    assert row[2] == 1 + int(np.argmax(logits[1:]))


def test_prefix_checks(model):
    src = random_source(4, rows=2)
    with pytest.raises(ValueError, match=r"target_prefix\[0\] has 6 tokens, more than the sentence's output limit 5"):
        model.greedy_decode(src, START, END, 5, target_prefix=[[3] * 6, []])
    with pytest.raises(ValueError, match="nor the end id"):
        model.beam_search(src, START, END, 5, beam_size=2, target_prefix=[[END], []])
    with pytest.raises(ValueError, match="target_prefix has 1 entries for 2 sentences"):
        model.greedy_decode(src, START, END, 5, target_prefix=[[3]])


@pytest.mark.parametrize("seed", range(8))
def test_no_constraints_leaves_beam_search_unchanged(model, seed):
    """Empty constraint lists take the constrained code path (banks, the ranking by constraints
    missing): the outputs are those of the plain search, token for token, score for score."""
    src = random_source(100 + seed)
    beam = int(np.random.default_rng(seed).integers(2, 6))
    plain = model.beam_search(src, START, END, 9, beam_size=beam, n_best=2)
    empty = model.beam_search(src, START, END, 9, beam_size=beam, n_best=2, constraints=[[] for _ in src])
    for p_hyps, e_hyps in zip(plain, empty):
        assert len(p_hyps) == len(e_hyps)
        for p, e in zip(p_hyps, e_hyps):
            np.testing.assert_array_equal(p[0], e[0])
            assert p[1] == e[1] and p[3] == e[3] and e[4] == 0


def holds(tokens, phrase):
    tokens, n = list(tokens), len(phrase)
    return any(tokens[i : i + n] == list(phrase) for i in range(len(tokens) - n + 1))


def test_constraints_appear_in_every_output(model):
    src = random_source(5)
    wanted = [[[7, 8]], [[9], [10, 11]], [[12]], [[13, 14, 15]], [], [[16], [17]]]
    beams = model.beam_search(src, START, END, 14, beam_size=4, n_best=3, constraints=wanted)
    # this untrained model rarely ends: a hypothesis cut at the limit may miss constraints, and says so
    met = 0
    for b, hyps in enumerate(beams):
        for hyp in hyps:
            missing = sum(not holds(hyp[0], c) for c in wanted[b])
            assert missing <= hyp[4] and (hyp[4] == 0 or not hyp[3]), (hyp, wanted[b])
            met += hyp[4] == 0
    assert met >= len(src)  # the search meets them in most outputs


def test_constraints_cut_at_the_limit_say_so(model):
    src = random_source(6, rows=1)
    hyp = model.beam_search(src, START, END, 2, beam_size=3, constraints=[[[7, 8, 9]]])[0][0]
    assert not hyp[3] and hyp[4] == 1 and len(hyp[0]) == 2  # three tokens cannot fit in two


def test_constraint_checks(model):
    src = random_source(7, rows=1)
    with pytest.raises(ValueError, match=r"has 2 constraints, too many for beam_size 2; at most beam_size - 1 = 1"):
        model.beam_search(src, START, END, 5, beam_size=2, constraints=[[[3], [4]]])
    with pytest.raises(ValueError, match="is empty"):
        model.beam_search(src, START, END, 5, beam_size=2, constraints=[[[]]])
    with pytest.raises(ValueError, match="constraints need beam search"):
        decode_rows(model, [[3, 4]], START, END, DecodeOptions(), constraints=[[[5]]])


def test_decode_rows_prefix_longer_than_limit(model):
    with pytest.raises(ValueError, match="target_prefix: the prefix of sentence 1 has 4 tokens, more than its output"):
        decode_rows(model, [[3, 4]], START, END, DecodeOptions(max_output_tokens=3), target_prefix=[[5, 6, 7, 8]])


def test_translator_prefix_constraints_and_sampling():
    from helpers.toy_task import reversal_tokenizer, tiny_model

    tok = reversal_tokenizer()
    translator = tc.Translator(tiny_model(tok, seed=3), tok, tok, src_lang=None, max_output_tokens=8)
    out = translator.translate_batch(["a b", "c d e"], target_prefix="f", beam_size=3, return_attention=True)
    f = tok.encode("f", add_special_tokens=False)
    assert all(t.target_ids[: len(f)] == f for t in out)
    res = translator.translate_batch(["a b", "c"], constraints=[["e"], ["b", "d"]], beam_size=3, return_attention=True)
    for t, cs in zip(res, [["e"], ["b", "d"]]):
        assert t.constraints_missing > 0 or all(
            holds(t.target_ids, tok.encode(c, add_special_tokens=False)) for c in cs
        )
    a = translator.translate_batch(["a b c"] * 3, sampling_topk=5, seed=4)
    assert a == translator.translate_batch(["a b c"] * 3, sampling_topk=5, seed=4)
    with pytest.raises(ValueError, match="target_prefix ' ' encodes to no token"):
        translator.translate("a", target_prefix=" ")
    with pytest.raises(ValueError, match="constraints: 2 constraints need beam_size of at least 3"):
        translator.translate("a", constraints=["a", "b"], beam_size=2)


def test_language_model_sampler_top_p_uses_the_same_filter():
    from transformer_cpp.task.lm_sampling import sample_next

    logits = np.array([5.0, 3.0, 2.9, 0.5, -1.0, 0.0])
    rng = np.random.default_rng(0)
    draws = np.bincount([sample_next(logits, 1.0, 0, rng, top_p=0.6) for _ in range(3000)], minlength=6)
    allowed = reference_distribution(logits, 6, 0.6, 1.0) > 0
    assert draws[~allowed].sum() == 0 and draws[allowed].min() > 0 and allowed.sum() == 2
