"""KV-cached greedy decoding and beam search against full recomputation and enumeration."""

import itertools

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp.translate import greedy_decode_reference

from helpers.toy_task import float64_model

START, END = 1, 2


def log_probs(model, src_row, prefix):
    """log softmax over the vocabulary, pad excluded, for the next token after ``prefix``."""
    logits = model.forward(src_row[None], np.array([[START] + list(prefix)]))[0, -1].astype(np.float64)
    logits[0] = -np.inf
    m = logits.max()
    return logits - m - np.log(np.exp(logits - m).sum())


@pytest.fixture(
    params=[
        (False, "softmax", "softmax"),
        (True, "softmax", "softmax"),
        (False, "softmax", "linear"),
        (True, "linear", "linear"),
    ],
    ids=["post-norm", "pre-norm", "post-norm-linear-decoder", "pre-norm-linear-encoder-and-decoder"],
)
def model(request):
    """A float64 model; with a linear decoder self-attention, decoding steps its RNN state (and a
    beam reorders it) where softmax appends to a key/value cache; a linear encoder encodes each
    sentence at its own length."""
    pre_norm, encoder, decoder = request.param
    return float64_model(pre_norm=pre_norm, encoder_attention=encoder, decoder_attention=decoder)


def padded_source():
    src = np.random.default_rng(0).integers(3, 30, size=(5, 7))
    src[1, 4:] = 0
    src[3, 2:] = 0
    return src


def test_cached_greedy_equals_full_recompute(model):
    src = padded_source()
    out = model.greedy_decode(src, START, END, 10)
    ref = greedy_decode_reference(model, src, START, END, 10)  # the whole model re-run on the growing prefix
    assert out.dtype == np.int64 and out.shape[0] == 5 and out.shape[1] <= 10
    np.testing.assert_array_equal(out, ref)


def test_greedy_batch_equals_one_by_one(model):
    src = padded_source()
    batch = model.greedy_decode(src, START, END, 10)
    for b in range(src.shape[0]):
        single = model.greedy_decode(src[b : b + 1], START, END, 10)[0]
        np.testing.assert_array_equal(batch[b, : single.size], single)
        assert not batch[b, single.size :].any()


def test_greedy_stops_at_end_and_pads_after():
    # a model trained to copy: output must end with END and be followed by zeros only
    model = tc.Transformer(12, 12, d_model=32, n_layers=1, n_heads=4, d_ff=64, dropout=0.0, max_length=8, seed=0)
    model.configure_optimizer(fixed_lr=3e-3)
    src = np.array([[3, 4, 5, 0], [6, 7, 8, 9], [10, 11, 0, 0]])
    tgt = np.array([[1, 3, 4, 5, 2, 0], [1, 6, 7, 8, 9, 2], [1, 10, 11, 2, 0, 0]])
    for _ in range(300):
        model.train_step(src, tgt[:, :-1], tgt[:, 1:])
    out = model.greedy_decode(src, START, END, 8)
    np.testing.assert_array_equal(out, tgt[:, 1:][:, : out.shape[1]])


def test_beam_size_one_equals_greedy(model):
    src = padded_source()
    greedy = model.greedy_decode(src, START, END, 10)
    beams = model.beam_search(src, START, END, 10, beam_size=1, length_penalty=0.0)
    for b, hyps in enumerate(beams):
        assert len(hyps) == 1
        expected = [t for t in greedy[b] if t != 0]
        np.testing.assert_array_equal(hyps[0][0], expected)


def test_beam_search_scores_are_the_model_log_probabilities(model):
    src = padded_source()[:2]
    for alpha in (0.0, 0.6):
        for b, hyps in enumerate(model.beam_search(src, START, END, 6, beam_size=3, length_penalty=alpha, n_best=3)):
            assert len(hyps) == 3
            scores = [h[1] for h in hyps]
            assert scores == sorted(scores, reverse=True)
            for tokens, score, logp, finished in hyps:
                total = sum(log_probs(model, src[b], tokens[:i])[tokens[i]] for i in range(len(tokens)))
                assert abs(total - logp) < 1e-9
                assert abs(score - logp / ((5 + len(tokens)) / 6) ** alpha) < 1e-9
                assert finished == (tokens[-1] == END)


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_beam_search_finds_the_exact_best_sequence_by_enumeration(alpha):
    # vocabulary {pad, start, end, 3, 4}; every sequence of up to 3 generated tokens is enumerable
    model = tc.Transformer(6, 5, d_model=8, n_layers=1, n_heads=2, d_ff=16, max_length=6, seed=11, dtype="float64")
    params = model.parameters()
    rng = np.random.default_rng(5)
    for p in params.values():  # larger weights give peaky, varied distributions
        p.value[...] = rng.standard_normal(p.value.shape) * 0.8
    src = np.array([[3, 4, 5, 0], [5, 5, 3, 4]])
    max_len = 3
    for b in range(src.shape[0]):
        best, best_score = None, -np.inf
        for length in range(1, max_len + 1):
            for body in itertools.product([1, 2, 3, 4], repeat=length):
                if END in body[:-1]:
                    continue  # generation stops at the first end token
                logp = sum(log_probs(model, src[b], body[:i])[body[i]] for i in range(length))
                score = logp / ((5 + length) / 6) ** alpha
                if body[-1] != END and length < max_len:
                    continue  # unfinished hypotheses only count when cut at max_length
                if score > best_score:
                    best, best_score = body, score
        # a beam as wide as the search space never prunes, so it must find the optimum
        hyp = model.beam_search(src[b : b + 1], START, END, max_len, beam_size=64, length_penalty=alpha)[0][0]
        assert tuple(hyp[0]) == best
        assert abs(hyp[1] - best_score) < 1e-9


def test_decoding_bad_arguments():
    model = tc.Transformer(10, 10, d_model=8, n_layers=1, n_heads=2, d_ff=8, max_length=5)
    src = np.array([[3, 4]])
    with pytest.raises(ValueError, match="start_id"):
        model.greedy_decode(src, 0, 2, 5)
    with pytest.raises(ValueError, match="out of range"):
        model.greedy_decode(np.array([[3, 40]]), 1, 2, 5)
    with pytest.raises(TypeError, match="integer"):
        model.greedy_decode(src.astype(np.float32), 1, 2, 5)
    with pytest.raises(ValueError, match="n_best"):
        model.beam_search(src, 1, 2, 5, beam_size=2, n_best=3)
    with pytest.raises(ValueError, match="beam_size"):
        model.beam_search(src, 1, 2, 5, beam_size=0)
    with pytest.raises(ValueError, match="max_length must be >= 1"):
        model.greedy_decode(src, 1, 2, 0)
    # sources and outputs longer than the model's positional table (5 rows) are fine: it grows
    assert model.greedy_decode(np.ones((1, 9), np.int64), 1, 2, 50).shape[1] <= 50


@pytest.mark.parametrize("pre_norm", [False, True])
def test_float32_cached_greedy_equals_full_recompute(pre_norm):
    # float32 steps with few rows use the AVX-512 kernel (when built with it); the reference loop
    # uses the training forward. d_model and d_ff multiples of 16 take the kernel's fast path, the
    # odd vocabulary size and batch sizes its edge tiles.
    m = tc.Transformer(300, 251, d_model=64, n_layers=2, n_heads=4, d_ff=96, max_length=12, seed=5, pre_norm=pre_norm)
    rng = np.random.default_rng(1)
    src = rng.integers(3, 300, size=(37, 9))
    src[1, 4:] = 0
    src[3, 2:] = 0
    np.testing.assert_array_equal(m.greedy_decode(src, START, END, 10), greedy_decode_reference(m, src, START, END, 10))


def test_float32_beam_log_probs_match_the_forward_pass():
    m = tc.Transformer(40, 37, d_model=32, n_layers=2, n_heads=4, d_ff=48, max_length=10, seed=2)
    src = np.random.default_rng(3).integers(3, 40, size=(5, 6))
    for b, hyps in enumerate(m.beam_search(src, START, END, 6, beam_size=3, length_penalty=0.0, n_best=2)):
        for tokens, score, logp, finished in hyps:
            total = sum(log_probs(m, src[b], tokens[:i])[tokens[i]] for i in range(len(tokens)))
            assert abs(total - logp) < 1e-4 * max(1.0, abs(total))  # float32 forward vs float32 steps


def test_packed_weights_follow_every_change_of_the_model():
    # float32 decodes of 4+ sentences reuse the packed weights while the model's weights are
    # unchanged; a change through the NumPy views, a training step or a loaded state must show up
    # in the very next decode, exactly as a fresh model with the same weights decodes
    m = tc.Transformer(60, 53, d_model=32, n_layers=2, n_heads=4, d_ff=48, max_length=10, seed=4)
    src = np.random.default_rng(5).integers(3, 60, size=(6, 7))
    first = m.greedy_decode(src, START, END, 8)
    np.testing.assert_array_equal(m.greedy_decode(src, START, END, 8), first)  # cached, same weights
    bias = m.parameters()["output.bias"].value
    bias[17] = 1e4  # token 17 now wins everywhere
    out = m.greedy_decode(src, START, END, 8)
    assert (out == 17).all()
    bias[17] = 0.0
    bias[END] = 1e4  # the end token wins at once
    np.testing.assert_array_equal(m.greedy_decode(src, START, END, 8), np.full((6, 1), END))
    bias[END] = 0.0
    # a decoder weight deep inside a layer (no effect on the bias-only checks above)
    w = m.parameters()["decoder.layers.1.feed_forward.linear2.weight"].value
    w *= -3.0
    fresh = tc.Transformer(60, 53, d_model=32, n_layers=2, n_heads=4, d_ff=48, max_length=10, seed=999)
    for name, p in fresh.parameters().items():
        p.value[...] = m.parameters()[name].value
    np.testing.assert_array_equal(m.greedy_decode(src, START, END, 8), fresh.greedy_decode(src, START, END, 8))
    # and after an optimiser step
    tgt = np.random.default_rng(6).integers(3, 53, size=(6, 6))
    tgt_in = np.concatenate([np.full((6, 1), START), tgt[:, :-1]], axis=1)
    m.train_step(src, tgt_in, tgt)
    for name, p in fresh.parameters().items():
        p.value[...] = m.parameters()[name].value
    np.testing.assert_array_equal(m.greedy_decode(src, START, END, 8), fresh.greedy_decode(src, START, END, 8))
    for hyp_m, hyp_f in zip(m.beam_search(src, START, END, 8, beam_size=3), fresh.beam_search(src, START, END, 8, 3)):
        np.testing.assert_array_equal(hyp_m[0][0], hyp_f[0][0])


def test_a_model_busy_in_another_thread_refuses_instead_of_racing():
    # calls that release the GIL mark the model busy; another thread's call raises meanwhile
    import threading

    m = tc.Transformer(200, 300, d_model=64, n_layers=2, n_heads=4, d_ff=128, max_length=16, seed=1)
    src = np.random.default_rng(0).integers(3, 200, size=(64, 15))
    expected = m.greedy_decode(src, START, END, 15)
    results, errors = [], []
    started = threading.Event()

    def decode():
        started.set()
        while len(results) < 30:
            try:
                results.append(m.greedy_decode(src, START, END, 15))
            except RuntimeError as exc:  # the main thread's call held the model: retry
                errors.append(str(exc))

    worker = threading.Thread(target=decode)
    worker.start()
    started.wait()
    while worker.is_alive():
        for call in (
            m.zero_grad,
            lambda: m.forward(src[:2], src[:2, :3]),
            lambda: m.greedy_decode(src[:4], START, END, 5),
        ):
            try:
                call()
            except RuntimeError as exc:
                errors.append(str(exc))
    worker.join()
    assert errors and all("in use by another thread" in e for e in errors)
    assert len(results) == 30
    for out in results:  # the worker's decodes were never disturbed
        np.testing.assert_array_equal(out, expected)
    # idle again: every call works
    m.zero_grad()
    np.testing.assert_array_equal(m.greedy_decode(src, START, END, 15), expected)


@pytest.mark.parametrize("compute_type", ["float32", "int8", "bf16"])
def test_prepared_weights_are_checked_after_a_decode_that_did_not_use_them(compute_type):
    # A decode of 4+ sentences multiplies by weights prepared for its compute type (float32 panels,
    # int8, bf16); one float32 sentence multiplies by the weights as they are. A decode that did not
    # use the prepared weights must not count as having checked them: after a training step, a
    # one-sentence float32 decode, then a batch in the first compute type must see the new weights.
    from transformer_cpp import kernels

    if compute_type != "float32" and not kernels.have_compute_type(compute_type):
        pytest.skip(kernels.compute_type_unsupported_reason(compute_type))
    m = tc.Transformer(60, 53, d_model=32, n_layers=2, n_heads=4, d_ff=48, max_length=10, seed=4)
    m.configure_optimizer(fixed_lr=0.05)
    rng = np.random.default_rng(5)
    src = rng.integers(3, 60, size=(6, 7))
    before = m.greedy_decode(src, START, END, 8, compute_type=compute_type)  # prepares the weights
    tgt = rng.integers(3, 53, size=(6, 6))
    tgt_in = np.concatenate([np.full((6, 1), START), tgt[:, :-1]], axis=1)
    for _ in range(5):
        m.train_step(src, tgt_in, tgt)
    m.greedy_decode(src[:1], START, END, 8)  # float32, one sentence: no prepared weights
    after = m.greedy_decode(src, START, END, 8, compute_type=compute_type)
    fresh = tc.Transformer(60, 53, d_model=32, n_layers=2, n_heads=4, d_ff=48, max_length=10, seed=999)
    for name, p in fresh.parameters().items():
        p.value[...] = m.parameters()[name].value
    expected = fresh.greedy_decode(src, START, END, 8, compute_type=compute_type)
    assert not np.array_equal(before, expected)  # the training steps changed what is decoded
    np.testing.assert_array_equal(after, expected)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_decoding_leaves_the_last_forward_to_backward(dtype):
    # decoding runs the layers' inference methods, which touch none of forward()'s state: after
    # decodes of other shapes (plain and, for float32, prepared weights), backward() and
    # attention_weights() still belong to the last forward()
    m = tc.Transformer(30, 25, d_model=16, n_layers=2, n_heads=2, d_ff=32, max_length=12, seed=3, dtype=dtype)
    src = padded_source()
    tgt_in = np.random.default_rng(1).integers(1, 25, size=(5, 6))
    dlogits = np.random.default_rng(2).standard_normal((5, 6, 25)).astype(dtype)

    def gradients():
        m.zero_grad()
        m.backward(dlogits)
        return {name: p.grad.copy() for name, p in m.parameters().items()}

    m.forward(src, tgt_in)
    weights = m.attention_weights()
    expected = gradients()
    m.forward(src, tgt_in)
    m.greedy_decode(src[:1, :3], START, END, 9)
    m.greedy_decode(src[1:], START, END, 7)
    m.beam_search(src[:2], START, END, 8, beam_size=3)
    after = m.attention_weights()
    assert after.keys() == weights.keys()
    for name in weights:
        np.testing.assert_array_equal(after[name], weights[name])
    for name, grad in gradients().items():
        np.testing.assert_array_equal(grad, expected[name])


# ------------------------------------------------------------------------------------ per-row limits

LIMITS = np.array([3, 10, 1, 5, 7])  # one per row of padded_source(); 10 is the call's max_length


def limited_model(dtype):
    return tc.Transformer(30, 25, d_model=16, n_layers=2, n_heads=2, d_ff=32, max_length=12, seed=3, dtype=dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_greedy_row_limits_equal_each_row_decoded_alone_with_its_limit(dtype):
    m, src = limited_model(dtype), padded_source()
    out = m.greedy_decode(src, START, END, 10, max_lengths=LIMITS)
    unlimited = m.greedy_decode(src, START, END, 10)
    for b, limit in enumerate(LIMITS):
        alone = m.greedy_decode(src[b : b + 1], START, END, int(limit))[0]
        assert 1 <= alone.size <= limit
        np.testing.assert_array_equal(out[b, : alone.size], alone)
        assert not out[b, alone.size :].any()  # the row stopped at its limit, inside the search
        # the other rows are unaffected: a row's output is the first `limit` tokens of its unlimited one
        np.testing.assert_array_equal(alone, unlimited[b, : alone.size])
    # and the plain reference loop with the same limits agrees
    np.testing.assert_array_equal(out, greedy_decode_reference(m, src, START, END, 10, LIMITS)[:, : out.shape[1]])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_beam_row_limits_equal_each_row_decoded_alone_with_its_limit(dtype):
    m, src = limited_model(dtype), padded_source()
    batch = m.beam_search(src, START, END, 10, beam_size=3, length_penalty=0.6, n_best=2, max_lengths=LIMITS)
    unlimited = m.beam_search(src, START, END, 10, beam_size=3, length_penalty=0.6, n_best=2)
    for b, limit in enumerate(LIMITS):
        alone = m.beam_search(src[b : b + 1], START, END, int(limit), beam_size=3, length_penalty=0.6, n_best=2)[0]
        assert [list(h[0]) for h in batch[b]] == [list(h[0]) for h in alone]
        assert [h[3] for h in batch[b]] == [h[3] for h in alone]
        np.testing.assert_allclose(
            [h[1] for h in batch[b]], [h[1] for h in alone], rtol=1e-5 if dtype == "float32" else 1e-12
        )
        assert all(len(h[0]) <= limit for h in batch[b])
        if limit == 10:  # a row at the call's max_length is decoded as without limits
            assert [list(h[0]) for h in batch[b]] == [list(h[0]) for h in unlimited[b]]


def test_no_row_limits_decode_as_before_token_for_token():
    # limits equal to max_length everywhere are the same search as none
    m, src = limited_model("float64"), padded_source()
    full = np.full(src.shape[0], 10)
    np.testing.assert_array_equal(
        m.greedy_decode(src, START, END, 10), m.greedy_decode(src, START, END, 10, max_lengths=full)
    )
    np.testing.assert_array_equal(m.greedy_decode(src, START, END, 10), greedy_decode_reference(m, src, START, END, 10))
    plain = m.beam_search(src, START, END, 10, beam_size=3, n_best=3)
    limited = m.beam_search(src, START, END, 10, beam_size=3, n_best=3, max_lengths=full)
    assert [[(list(h[0]), h[1], h[2], h[3]) for h in hs] for hs in plain] == [
        [(list(h[0]), h[1], h[2], h[3]) for h in hs] for hs in limited
    ]
    assert all(len(h) == 4 for hs in plain for h in hs)  # no attention unless asked for


@pytest.mark.parametrize("decoder", ["greedy_decode", "beam_search"])
def test_bad_row_limits_are_refused_by_name(decoder):
    m, src = limited_model("float64"), padded_source()
    decode = getattr(m, decoder)
    for bad, message in (
        (np.array([3, 4, 0, 5, 6]), r"max_lengths\[2\] is 0; each sentence's limit must be in \[1, max_length = 10\]"),
        (np.array([3, -1, 2, 5, 6]), r"max_lengths\[1\] is -1; .* in \[1, max_length = 10\]"),
        (np.array([3, 4, 2, 11, 6]), r"max_lengths\[3\] is 11; .* in \[1, max_length = 10\]"),
        (np.array([3, 4, 2]), r"max_lengths must have shape \(5,\)"),
        (np.ones((5, 1), np.int64), r"max_lengths must have shape \(5,\)"),
        (np.full(5, 3.0), r"max_lengths must be None or an integer array of shape \(5,\).*float64"),
        (np.ones(5, bool), r"max_lengths must be None or an integer array"),
        ("3", r"max_lengths must be None or an integer array"),
        (np.array([2**64 - 1] * 5, np.uint64), r"max_lengths\[0\] is too large"),
    ):
        with pytest.raises(ValueError, match=message):
            decode(src, START, END, 10, max_lengths=bad)
    # a list of Python ints is an integer array
    assert decode(src, START, END, 10, max_lengths=[2] * 5) is not None


# ------------------------------------------------------------------------------------ attention


def forward_cross_attention(m, src_row, tokens):
    """The reference: a teacher-forced forward pass on [start] + tokens[:-1], each decoder layer's
    cross-attention (heads, len(tokens), source tokens) -- what the decoders record."""
    row = [int(v) for v in src_row if v != 0]
    m.forward(np.array([row]), np.array([[START] + list(tokens)[:-1]]))
    weights = m.attention_weights()
    return np.stack([weights[f"decoder.layers.{i}.cross_attention"][0] for i in range(m.config["n_layers"])])


# float64 steps and the float64 forward differ by rounding only; float32 ones by a few ulps of
# weights <= 1 summed over at most 16-wide dot products
ATTENTION_TOL = {"float64": 1e-12, "float32": 2e-6}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_greedy_records_the_cross_attention_of_its_tokens(dtype):
    m, src = limited_model(dtype), padded_source()
    out, attention = m.greedy_decode(src, START, END, 10, max_lengths=LIMITS, return_attention=True)
    np.testing.assert_array_equal(out, m.greedy_decode(src, START, END, 10, max_lengths=LIMITS))
    assert len(attention) == src.shape[0]
    for b in range(src.shape[0]):
        tokens = [int(v) for v in out[b] if v != 0]
        ref = forward_cross_attention(m, src[b], tokens)
        assert attention[b].dtype == np.dtype(dtype) and attention[b].shape == ref.shape
        assert ref.shape == (2, 2, len(tokens), int((src[b] != 0).sum()))
        np.testing.assert_allclose(attention[b], ref, rtol=0, atol=ATTENTION_TOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_beam_search_records_the_cross_attention_of_each_returned_hypothesis(dtype):
    m, src = limited_model(dtype), padded_source()
    found = m.beam_search(src, START, END, 10, beam_size=3, n_best=3, max_lengths=LIMITS, return_attention=True)
    plain = m.beam_search(src, START, END, 10, beam_size=3, n_best=3, max_lengths=LIMITS)
    for b, hyps in enumerate(found):
        assert [list(h[0]) for h in hyps] == [list(h[0]) for h in plain[b]]
        for tokens, _, _, _, weights in hyps:
            ref = forward_cross_attention(m, src[b], tokens)
            assert weights.shape == ref.shape
            np.testing.assert_allclose(weights, ref, rtol=0, atol=ATTENTION_TOL[dtype])
