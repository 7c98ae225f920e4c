"""The C++ core and the low-level Python API against a hostile user: threads sharing one layer,
inputs changed between forward and backward, NaN and infinity, absurd sizes, options that make
no sense. Each must give a clear exception or a correct result, never a crash or a silent wrong
answer. Scenarios that could crash the interpreter run in a subprocess."""

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp.model import NonFiniteError
from transformer_cpp.tokenizer import MAX_VOCAB_SIZE

V = 13
HUGE = 2**70  # beyond 64 bits


def _under_address_sanitizer() -> bool:
    try:
        with open("/proc/self/maps") as f:
            return "libasan" in f.read()
    except OSError:
        return False


# AddressSanitizer (.ci/sanitize) reserves terabytes of address space for its shadow memory, so a
# process under an address-space limit (ulimit -v) aborts at start ("Failed to mmap"); the
# ordinary test run checks these cases.
needs_address_space_limit = pytest.mark.skipif(
    _under_address_sanitizer(), reason="AddressSanitizer cannot run under an address-space limit (ulimit -v)"
)


def run_isolated(code: str, env=None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; a crash shows up as a negative return code."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env
    )


def assert_clean_exit(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (
        f"the interpreter died with return code {proc.returncode} "
        f"(negative = killed by a signal)\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    )


def small_model(**kw):
    args = dict(d_model=8, n_layers=1, n_heads=2, d_ff=12, dropout=0.0, max_length=8, dtype="float64")
    args.update(kw)
    return tc.Transformer(V, V, **args)


def batch(seed=0, b=2, s=4, t=3):
    rng = np.random.default_rng(seed)
    return rng.integers(1, V, (b, s)), rng.integers(1, V, (b, t)), rng.integers(1, V, (b, t))


# --- 1. one call at a time per layer ------------------------------------------------------------

_HAMMER = """
    import threading, numpy as np, transformer_cpp as tc
    rng = np.random.default_rng(0)
    B, T, D = 8, 24, 64
    x = rng.standard_normal((B, T, D)).astype(np.float32)
    mem = rng.standard_normal((B, T, D)).astype(np.float32)
    tok = rng.integers(1, 50, (B, T))
    big = rng.standard_normal((256, 512)).astype(np.float32)

    def adam_step():
        lin = tc.Linear(512, 512)
        opt = tc.Adam(lin.parameters())
        return lambda: opt.step(1e-3)

    def model_step():
        m = tc.Transformer(50, 50, d_model=D, n_layers=1, n_heads=4, d_ff=64, dropout=0.1)
        return lambda: m.train_step(tok, tok, tok)

    def layer(make, fwd, bwd_shape):
        obj = make()
        def call():
            out = fwd(obj)
            if bwd_shape is not None:
                obj.backward(np.ones(bwd_shape, np.float32))
        return lambda: call()

    kinds = {
        "Linear": layer(lambda: tc.Linear(512, 512), lambda l: l.forward(big), (256, 512)),
        "Dropout": layer(lambda: tc.Dropout(0.5), lambda l: l.forward(big), (256, 512)),
        "ReLU": layer(lambda: tc.ReLU(), lambda l: l.forward(big), (256, 512)),
        "LayerNorm": layer(lambda: tc.LayerNorm(512), lambda l: l.forward(big), (256, 512)),
        "Embedding": layer(lambda: tc.Embedding(50, D), lambda l: l.forward(tok), (B, T, D)),
        "PositionalEmbedding": layer(lambda: tc.PositionalEmbedding(50, D, max_length=4), lambda l: l.forward(tok),
                                     (B, T, D)),
        "ScaledDotProductAttention": layer(lambda: tc.ScaledDotProductAttention(), lambda l: l.forward(x, x, x),
                                           (B, T, D)),
        "MultiHeadAttention": layer(lambda: tc.MultiHeadAttention(D, 4), lambda l: l.forward(x, mem), (B, T, D)),
        "FeedForward": layer(lambda: tc.FeedForward(D, 256), lambda l: l.forward(x, training=True), (B, T, D)),
        "EncoderLayer": layer(lambda: tc.EncoderLayer(D, 4, 128), lambda l: l.forward(x), (B, T, D)),
        "DecoderLayer": layer(lambda: tc.DecoderLayer(D, 4, 128), lambda l: l.forward(x, mem), (B, T, D)),
        "Encoder": layer(lambda: tc.Encoder(50, D, 2, 4, 128), lambda l: l.forward(tok), (B, T, D)),
        "Decoder": layer(lambda: tc.Decoder(50, D, 2, 4, 128), lambda l: l.forward(tok, mem), (B, T, D)),
        "Adam": adam_step(),
        "Transformer": model_step(),
    }
    for name, call in kinds.items():
        stats = {"ok": 0, "busy": 0}
        lock = threading.Lock()
        start = threading.Barrier(2)

        def hammer():
            start.wait()
            for i in range(3000):
                try:
                    call()
                    key = "ok"
                except RuntimeError as e:
                    assert "in use by another thread" in str(e), str(e)
                    key = "busy"
                with lock:
                    stats[key] += 1
                    if stats["busy"] >= 3 and stats["ok"] >= 3:
                        return

        threads = [threading.Thread(target=hammer) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(name, stats["ok"], stats["busy"], flush=True)
    print("DONE")
"""


def test_two_threads_on_one_layer_get_an_error_not_a_crash():
    """Every bound class with forward/backward (and Adam, and the model) runs one call at a time:
    two threads hammering one object never crash; the loser gets RuntimeError."""
    proc = run_isolated(_HAMMER, timeout=600)
    assert_clean_exit(proc)
    assert "DONE" in proc.stdout, proc.stdout + proc.stderr
    for line in proc.stdout.splitlines()[:-1]:
        name, ok, busy = line.split()
        assert int(ok) > 0, line
        assert int(busy) > 0, f"{name}: the two threads never overlapped ({line})"


def test_idle_layer_works_again_after_a_refused_call():
    lin = tc.Linear(4, 3, dtype="float64")
    x = np.ones((2, 4))
    y = lin.forward(x)
    np.testing.assert_array_equal(lin.forward(x), y)
    lin.zero_grad()


# --- 2. backward uses what forward saw --------------------------------------------------------


def _grads(layer):
    return {n: p.grad.copy() for n, p in layer.parameters().items()}


def _as_list(out):
    return list(out) if isinstance(out, tuple) else [out]


rng0 = np.random.default_rng(0)
X = rng0.standard_normal((2, 5, 8))
MEM = rng0.standard_normal((2, 6, 8))
TOK = rng0.integers(1, V, (2, 5))

# name -> (make layer, forward(layer, inputs), inputs, dout shape)
MUTATION_CASES = {
    "Linear": (lambda: tc.Linear(8, 6, seed=1, dtype="float64"), lambda l, a: l.forward(a[0]), [X], (2, 5, 6)),
    "LayerNorm": (lambda: tc.LayerNorm(8, dtype="float64"), lambda l, a: l.forward(a[0]), [X], (2, 5, 8)),
    "LayerNorm.forward_residual": (
        lambda: tc.LayerNorm(8, dtype="float64"),
        lambda l, a: l.forward_residual(a[0], a[1]),
        [X, X * 2],
        (2, 5, 8),
    ),
    "ReLU": (lambda: tc.ReLU(dtype="float64"), lambda l, a: l.forward(a[0]), [X], (2, 5, 8)),
    "Dropout": (lambda: tc.Dropout(0.3, seed=2, dtype="float64"), lambda l, a: l.forward(a[0]), [X], (2, 5, 8)),
    "FeedForward": (
        lambda: tc.FeedForward(8, 16, dropout=0.2, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0], training=True),
        [X],
        (2, 5, 8),
    ),
    "ScaledDotProductAttention": (
        lambda: tc.ScaledDotProductAttention(dtype="float64"),
        lambda l, a: l.forward(a[0], a[1], a[2]),
        [X, MEM, MEM * 3],
        (2, 5, 8),
    ),
    "MultiHeadAttention self": (
        lambda: tc.MultiHeadAttention(8, 2, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0]),
        [X],
        (2, 5, 8),
    ),
    "MultiHeadAttention cross": (
        lambda: tc.MultiHeadAttention(8, 2, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0], a[1]),
        [X, MEM],
        (2, 5, 8),
    ),
    "EncoderLayer": (
        lambda: tc.EncoderLayer(8, 2, 16, dropout=0.1, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0], training=True),
        [X],
        (2, 5, 8),
    ),
    "EncoderLayer pre-norm": (
        lambda: tc.EncoderLayer(8, 2, 16, pre_norm=True, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0]),
        [X],
        (2, 5, 8),
    ),
    "DecoderLayer": (
        lambda: tc.DecoderLayer(8, 2, 16, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0], a[1]),
        [X, MEM],
        (2, 5, 8),
    ),
    "Embedding": (lambda: tc.Embedding(V, 8, seed=1, dtype="float64"), lambda l, a: l.forward(a[0]), [TOK], (2, 5, 8)),
    "PositionalEmbedding": (
        lambda: tc.PositionalEmbedding(V, 8, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0]),
        [TOK],
        (2, 5, 8),
    ),
    "Encoder": (
        lambda: tc.Encoder(V, 8, 1, 2, 16, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0]),
        [TOK],
        (2, 5, 8),
    ),
    "Decoder": (
        lambda: tc.Decoder(V, 8, 1, 2, 16, seed=1, dtype="float64"),
        lambda l, a: l.forward(a[0], a[1]),
        [TOK, MEM],
        (2, 5, 8),
    ),
}


@pytest.mark.parametrize("view", [False, True], ids=["array", "view"])
@pytest.mark.parametrize("name", list(MUTATION_CASES))
def test_backward_uses_what_forward_saw(name, view):
    """Changing the input arrays in place between forward and backward changes nothing."""
    make, forward, inputs, dout_shape = MUTATION_CASES[name]
    dout = np.random.default_rng(5).standard_normal(dout_shape)
    ref_layer = make()
    ref_out = forward(ref_layer, [a.copy() for a in inputs])
    ref_back = _as_list(ref_layer.backward(dout))

    layer = make()
    bases = [a.copy() for a in inputs]
    args = [b[...] if view else b for b in bases]  # a view shares the base's memory
    out = forward(layer, args)
    for b in bases:  # the caller reuses its buffers before backward
        b[...] = 7 if b.dtype.kind == "f" else 1
    back = _as_list(layer.backward(dout))
    # equal up to rounding (SIMD reductions may round differently at another address); a
    # mutated input would change them by O(1)
    close = dict(rtol=1e-12, atol=1e-12)
    for got, want in zip(_as_list(out), _as_list(ref_out)):
        np.testing.assert_allclose(got, want, **close)
    for got, want in zip(back, ref_back):
        if want is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, want, **close)
    ref_grads = _grads(ref_layer)
    for n, g in _grads(layer).items():
        np.testing.assert_allclose(g, ref_grads[n], err_msg=n, **close)


def test_transformer_backward_uses_what_forward_saw():
    src, tgt_in, _ = batch()
    dlogits = np.random.default_rng(3).standard_normal((2, 3, V))
    ref = small_model(seed=4)
    ref.forward(src.copy(), tgt_in.copy(), training=True)
    ref.backward(dlogits)
    m = small_model(seed=4)
    s, t = src.copy(), tgt_in.copy()
    m.forward(s, t, training=True)
    s[...] = 0
    t[...] = 1
    m.backward(dlogits)
    for n, p in m.parameters().items():
        np.testing.assert_allclose(p.grad, ref.parameters()[n].grad, rtol=1e-12, atol=1e-12, err_msg=n)


# --- 3. non-finite values ---------------------------------------------------------------------

NONFINITE = [np.nan, np.inf, -np.inf]


def _poison(a, value):
    a = np.array(a, dtype=np.float64)
    a.flat[a.size // 2] = value
    return a


@pytest.mark.parametrize("value", NONFINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("name", list(MUTATION_CASES))
def test_layers_refuse_nonfinite_inputs(name, value):
    make, forward, inputs, dout_shape = MUTATION_CASES[name]
    for i in range(len(inputs)):
        if inputs[i].dtype.kind != "f":
            continue
        args = [a.copy() for a in inputs]
        args[i] = _poison(args[i], value)
        with pytest.raises(ValueError, match="holds .* at flat index .*inputs must be finite"):
            forward(make(), args)
    layer = make()
    forward(layer, inputs)
    with pytest.raises(ValueError, match="dout holds"):
        layer.backward(_poison(np.ones(dout_shape), value))


@pytest.mark.parametrize(
    "name", [n for n in MUTATION_CASES if n not in ("ReLU", "Dropout", "ScaledDotProductAttention")]
)
def test_layers_refuse_nonfinite_weights(name):
    make, forward, inputs, _ = MUTATION_CASES[name]
    layer = make()
    pname, p = list(layer.parameters().items())[-1]
    p.value.flat[0] = np.nan
    with pytest.raises(NonFiniteError, match=f"weights are not finite: parameter '{pname}'"):
        forward(layer, inputs)


def test_nonfinite_error_is_a_floating_point_and_runtime_error():
    assert issubclass(NonFiniteError, FloatingPointError) and issubclass(NonFiniteError, RuntimeError)


@pytest.mark.parametrize("value", NONFINITE, ids=["nan", "inf", "-inf"])
def test_model_refuses_nonfinite_weights_everywhere(value):
    m = small_model()
    src, tgt_in, tgt_out = batch()
    m.train_step(src, tgt_in, tgt_out)
    m.parameters()["decoder.layers.0.norm2.weight"].value[1] = value
    before = {n: p.value.copy() for n, p in m.parameters().items()}
    name = "decoder.layers.0.norm2.weight"
    calls = {
        "forward": lambda: m.forward(src, tgt_in),
        "evaluate": lambda: m.evaluate(src, tgt_in, tgt_out),
        "train_step": lambda: m.train_step(src, tgt_in, tgt_out),
        "greedy_decode": lambda: m.greedy_decode(src, 1, 2, 5),
        "beam_search": lambda: m.beam_search(src, 1, 2, 5, beam_size=2),
    }
    for who, call in calls.items():
        with pytest.raises(NonFiniteError, match=f"{who}: the weights are not finite: parameter '{name}'"):
            call()
    assert m.step == 1
    for n, p in m.parameters().items():
        np.testing.assert_array_equal(p.value, before[n], err_msg=n)
    assert m.nonfinite_parameters() == [name]
    with pytest.raises(NonFiniteError, match=f"1 tensor hold NaN or infinite values: '{name}'"):
        m.check_finite("load_checkpoint")


def test_nonfinite_parameters_lists_adam_moments():
    m = small_model()
    m.train_step(*batch())
    assert m.nonfinite_parameters() == []
    m.check_finite()
    m.optimizer_state()["output.bias.v"].value[0] = np.inf
    assert m.nonfinite_parameters() == ["output.bias.v"]
    assert m.nonfinite_parameters(optimizer_state=False) == []
    # an update through that moment would be non-finite: refused, nothing changes
    before = {n: p.value.copy() for n, p in m.parameters().items()}
    with pytest.raises(NonFiniteError, match="no update was applied"):
        m.train_step(*batch())
    assert m.step == 1
    for n, p in m.parameters().items():
        np.testing.assert_array_equal(p.value, before[n], err_msg=n)


@pytest.mark.parametrize("clip", [0.0, 1.0], ids=["no_clip", "clip"])
def test_train_step_refuses_a_nonfinite_update_with_and_without_clipping(clip):
    """Without clipping the pass that computes the gradient norm also checks the update; with
    clipping Adam's own pass does. Either way: the same error, and nothing changes."""
    m = small_model(dtype="float32")
    m.configure_optimizer(warmup=10, clip_norm=clip)
    m.train_step(*batch())
    m.optimizer_state()["output.bias.v"].value[0] = np.inf
    before = {n: p.value.copy() for n, p in m.parameters().items()}
    state = {n: p.value.copy() for n, p in m.optimizer_state().items()}
    with pytest.raises(
        NonFiniteError,
        match=r"Transformer.train_step: the update \(learning rate .*\) would make "
        r"weights or Adam moments non-finite.*no update was applied",
    ):
        m.train_step(*batch())
    assert m.step == 1
    for n, p in m.parameters().items():
        np.testing.assert_array_equal(p.value, before[n], err_msg=n)
    for n, p in m.optimizer_state().items():
        np.testing.assert_array_equal(p.value, state[n], err_msg=n)


def test_train_step_with_nonfinite_loss_applies_no_update():
    m = small_model(dtype="float32")
    src, tgt_in, tgt_out = batch()
    m.train_step(src, tgt_in, tgt_out)
    # finite weights whose logits overflow float32
    m.parameters()["output.weight"].value[...] = 3e38
    before = {n: p.value.copy() for n, p in m.parameters().items()}
    with pytest.raises(NonFiniteError, match="Transformer.train_step: non-finite loss") as info:
        m.train_step(src, tgt_in, tgt_out)
    assert isinstance(info.value, FloatingPointError) and isinstance(info.value, RuntimeError)
    assert "no update was applied" in str(info.value)
    assert m.step == 1
    for n, p in m.parameters().items():
        np.testing.assert_array_equal(p.value, before[n], err_msg=n)
    with pytest.raises(NonFiniteError, match="Transformer.evaluate: non-finite loss"):
        m.evaluate(src, tgt_in, tgt_out)
    with pytest.raises(NonFiniteError, match="logits are not finite"):
        m.forward(src, tgt_in)
    with pytest.raises(NonFiniteError, match="greedy_decode: the logits of step 0 are not finite"):
        m.greedy_decode(src, 1, 2, 4)
    with pytest.raises(NonFiniteError, match="beam_search: the logits of step 0 are not finite"):
        m.beam_search(src, 1, 2, 4)


def test_a_diverging_run_stops_with_finite_weights():
    m = small_model(dtype="float32")
    m.configure_optimizer(fixed_lr=1e30)
    src, tgt_in, tgt_out = batch()
    with pytest.raises(NonFiniteError, match="train_step"):
        for _ in range(50):
            m.train_step(src, tgt_in, tgt_out)
    assert m.nonfinite_parameters() == []  # the last good step's weights


def test_attention_never_hides_nan_as_a_masked_row():
    # softmax: an all-NaN row is NaN (not zeros like a fully masked, all -inf row)
    out = tc.softmax(np.array([[np.nan, np.nan], [-np.inf, -np.inf], [np.nan, 1.0]]))
    assert np.isnan(out[0]).all() and np.isnan(out[2]).all()
    np.testing.assert_array_equal(out[1], [0, 0])
    # scores that overflow (all -inf without a mask) are refused, not turned into zero weights
    q = np.full((1, 2, 4), 1e20, np.float32)
    with pytest.raises(NonFiniteError, match="output is not finite"):
        tc.scaled_dot_product_attention(q, -q, np.ones((1, 2, 4), np.float32))
    # a fully masked row still gives zeros
    mask = np.ones((1, 2, 2), bool)
    out, w = tc.scaled_dot_product_attention(np.ones((1, 2, 4)), np.ones((1, 2, 4)), np.ones((1, 2, 4)), mask)
    assert not out.any() and not w.any()


# --- 4. sizes --------------------------------------------------------------------------------

ABSURD_CONSTRUCTORS = {
    "Linear": (lambda: tc.Linear(10**7, 10**7), r"in_features 10000000 x out_features 10000000"),
    "Embedding": (lambda: tc.Embedding(10**9, 10**6), r"vocab_size 1000000000 x d_model 1000000"),
    "PositionalEmbedding": (
        lambda: tc.PositionalEmbedding(10, 512, max_length=10**12),
        r"max_length 10\*\*12|max_length 1000000000000",
    ),
    "MultiHeadAttention": (lambda: tc.MultiHeadAttention(10**8, 1), r"d_model 100000000"),
    "FeedForward": (lambda: tc.FeedForward(10**6, 10**8), r"d_model 1000000, d_ff 100000000"),
    "EncoderLayer": (lambda: tc.EncoderLayer(10**6, 1, 8), r"d_model 1000000"),
    "DecoderLayer": (lambda: tc.DecoderLayer(10**6, 1, 8), r"d_model 1000000"),
    "Encoder": (lambda: tc.Encoder(10, 8, 10**12, 2, 8), r"n_layers 1000000000000"),
    "Decoder": (lambda: tc.Decoder(10, 8, 10**12, 2, 8), r"n_layers 1000000000000"),
    # (sizes beyond the Transformer's ranges are refused by them: tests/test_config.py)
    "Transformer d_model": (
        lambda: tc.Transformer(13, 13, d_model=16384, n_heads=1, d_ff=262144, n_layers=256),
        r"d_model 16384",
    ),
    "Transformer vocab": (lambda: tc.Transformer(10**12, 13, d_model=8, n_heads=2), r"src_vocab_size 1000000000000"),
    "Transformer max_length": (
        lambda: tc.Transformer(13, 13, d_model=8, n_heads=2, max_length=10**12),
        r"max_length 1000000000000",
    ),
    "Transformer n_layers": (
        lambda: tc.Transformer(13, 13, d_model=8192, n_heads=2, d_ff=262144, n_layers=256),
        r"n_layers 256",
    ),
    "positional_encoding": (lambda: tc.positional_encoding(10**9, 10**6), r"length 1000000000 x depth 1000000"),
}


@pytest.mark.parametrize("name", list(ABSURD_CONSTRUCTORS))
def test_absurd_sizes_are_refused_before_allocation(name):
    make, fragment = ABSURD_CONSTRUCTORS[name]
    with pytest.raises(ValueError, match=fragment) as info:
        make()
    assert "of memory available" in str(info.value)


def test_absurd_batches_are_refused_before_allocation():
    m = small_model()
    long_src = np.ones((1, 300_000), np.int64)
    with pytest.raises(ValueError, match="source length 300000.*memory available"):
        m.forward(long_src, np.ones((1, 2), np.int64))
    with pytest.raises(ValueError, match="memory available"):
        m.train_step(long_src, np.ones((1, 2), np.int64), np.ones((1, 2), np.int64))
    with pytest.raises(ValueError, match="memory available"):
        tc.Encoder(V, 8, 1, 2, 8).forward(long_src)
    with pytest.raises(ValueError, match="memory available"):
        tc.MultiHeadAttention(4, 1).forward(np.zeros((1, 300_000, 4)))
    with pytest.raises(ValueError, match="memory available"):
        tc.Linear(1, 10**6).forward(np.zeros((10**6, 1), np.float32))
    with pytest.raises(ValueError, match="memory available"):
        tc.look_ahead_mask(10**7)
    with pytest.raises(ValueError, match="memory available"):
        tc.MultiHeadAttention(4, 1).forward(np.zeros((1, 10**6, 4), np.float32), mask=np.zeros((1, 10**6), bool))


def test_decoding_sizes():
    m = small_model()
    src = np.ones((2, 3), np.int64)
    with pytest.raises(ValueError, match="greedy_decode: max_length 1000000000 .*memory available"):
        m.greedy_decode(src, 1, 2, 10**9)
    with pytest.raises(ValueError, match="beam_search: beam_size .* and max_length .*memory available"):
        m.beam_search(src, 1, 2, 10**8, beam_size=8)
    for beam in (10**6, 2**62, 2**63 - 1, 0, -3):  # 2 * beam_size must never overflow
        with pytest.raises(ValueError, match=r"beam_size must be in \[1, 1024\]"):
            m.beam_search(src, 1, 2, 5, beam_size=beam)
    # the largest beam works and gives a result for every sentence
    out = m.beam_search(src, 1, 2, 3, beam_size=1024, n_best=2)
    assert len(out) == 2 and all(len(h) == 2 for h in out)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: tc.Linear(HUGE, 3), "in_features"),
        (lambda: tc.Linear(3, 3, seed=HUGE), "seed"),
        (lambda: tc.Linear(3, 3, seed=-1), "seed"),
        (lambda: tc.Dropout(0.1, seed=HUGE), "seed"),
        (lambda: tc.Dropout(10**400), "rate"),
        (lambda: tc.LayerNorm(HUGE), "d_model"),
        (lambda: tc.LayerNorm(4, eps=10**400), "eps"),
        (lambda: tc.Embedding(HUGE, 4), "vocab_size"),
        (lambda: tc.PositionalEmbedding(4, 4, max_length=HUGE), "max_length"),
        (lambda: tc.MultiHeadAttention(8, HUGE), "n_heads"),
        (lambda: tc.FeedForward(8, HUGE), "d_ff"),
        (lambda: tc.EncoderLayer(8, 2, 8, dropout=10**400), "dropout"),
        (lambda: tc.DecoderLayer(8, 2, HUGE), "d_ff"),
        (lambda: tc.Encoder(HUGE, 8, 1, 2, 8), "vocab_size"),
        (lambda: tc.Decoder(4, 8, 1, 2, 8, max_length=-HUGE), "max_length"),
        (lambda: tc.Transformer(13, HUGE), "tgt_vocab_size"),
        (lambda: tc.Transformer(13, 13, d_ff=HUGE), "d_ff"),
        (lambda: tc.Transformer(13, 13, seed=HUGE), "seed"),
        (lambda: tc.Transformer(13, 13, dropout=10**400), "dropout"),
        (lambda: small_model().greedy_decode(np.ones((1, 2), int), 1, 2, HUGE), "max_length"),
        (lambda: small_model().greedy_decode(np.ones((1, 2), int), HUGE, 2, 4), "start_id"),
        (lambda: small_model().beam_search(np.ones((1, 2), int), 1, 2, 4, beam_size=HUGE), "beam_size"),
        (lambda: small_model().beam_search(np.ones((1, 2), int), 1, 2, 4, n_best=HUGE), "n_best"),
        (lambda: small_model().beam_search(np.ones((1, 2), int), 1, 2, 4, length_penalty=10**400), "length_penalty"),
        (lambda: small_model().configure_optimizer(warmup=HUGE), "warmup"),
        (lambda: small_model().configure_optimizer(fixed_lr=10**400), "fixed_lr"),
        (lambda: small_model().learning_rate(HUGE), "step"),
        (lambda: setattr(small_model(), "step", HUGE), "step"),
        (lambda: setattr(small_model(), "dropout_calls", HUGE), "dropout_calls"),
        (lambda: tc.positional_encoding(HUGE, 4), "length"),
        (lambda: tc.set_num_threads(HUGE), "n"),
        (lambda: tc.warmup_learning_rate(HUGE, 8), "step"),
        (
            lambda: tc.masked_cross_entropy(np.zeros((1, 3)), np.ones(1, int), label_smoothing=10**400),
            "label_smoothing",
        ),
        (lambda: tc.Adam(tc.Linear(2, 2).parameters()).step(10**400), "lr"),
        (lambda: setattr(tc.Dropout(0.1), "calls", HUGE), "calls"),
    ],
)
def test_integers_beyond_64_bits_name_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"\b{name}\b") as info:
        call()
    assert "Invoked with" not in str(info.value)  # not pybind11's list of signatures


@pytest.mark.parametrize(
    "call,fragment",
    [
        (lambda: tc.Linear(3.0, 3), "Linear: in_features must be an integer, got 3.0"),
        (lambda: tc.Linear("3", 3), "Linear: in_features must be an integer, got '3'"),
        (lambda: tc.Dropout("0.1"), r"Dropout: rate must be a number in \[0, 1\), got '0.1'"),
        (lambda: tc.Encoder(5, 8, 1, 2, 8, layout=3), "layout must be a str"),
        (lambda: small_model().greedy_decode(np.ones((1, 2), int), 1, 2, 4.5), "max_length must be an integer"),
        (lambda: tc.set_num_threads(2.0), "set_num_threads: n must be an integer >= 1, got 2.0"),
    ],
)
def test_wrong_argument_types_name_the_argument(call, fragment):
    with pytest.raises((TypeError, ValueError), match=fragment) as info:
        call()
    assert "Invoked with" not in str(info.value)


def test_memory_limit_can_be_lowered_by_the_environment():
    import os

    env = dict(os.environ, TRANSFORMER_CPP_MEMORY_LIMIT="1000000")
    proc = run_isolated(
        """
        import numpy as np, transformer_cpp as tc
        try:
            tc.Linear(1000, 1000)
        except ValueError as e:
            assert "more than the 976.6 KB of memory available" in str(e), e
            print("refused")
        tc.Linear(100, 100).forward(np.ones((2, 100), np.float32))
        print("OK")
    """,
        env=env,
    )
    assert_clean_exit(proc)
    assert proc.stdout.split() == ["refused", "OK"], proc.stdout + proc.stderr


def test_tokenizer_vocabulary_bounds():
    build = tc.SubwordTokenizer.build_from_corpus
    corpus = ["the cat sat on the mat", "¿qué tal?"]
    with pytest.raises(
        ValueError, match=rf"target_vocab_size {10**12} is too large; it must be at most {MAX_VOCAB_SIZE}"
    ):
        build(corpus, 10**12)
    with pytest.raises(ValueError, match="too large"):
        build(corpus, 2**64 + 1)
    n_bytes = len(set(" ".join(" " + s for s in corpus).encode("utf-8")))
    with pytest.raises(
        ValueError,
        match=rf"target_vocab_size 5 cannot hold the 4 special tokens and the {n_bytes} "
        rf"byte symbols this corpus uses; it must be at least {4 + n_bytes}",
    ):
        build(corpus, 5)
    tok = build(corpus, 4 + n_bytes, min_frequency=1)  # the minimum: the corpus round-trips
    for s in corpus:
        assert tok.decode(tok.encode(s)) == s
    with pytest.raises(ValueError, match="min_frequency"):
        build(corpus, 300, min_frequency=HUGE)


def test_huge_vocabulary_does_not_abort_the_interpreter():
    proc = run_isolated("""
        import transformer_cpp as tc
        for size in (10 ** 10, 2 ** 64, 2 ** 200):
            try:
                tc.SubwordTokenizer.build_from_corpus(["a b c"], size)
            except ValueError as e:
                assert "too large" in str(e)
        print("OK")
    """)
    assert_clean_exit(proc)


# --- 5. options that make no sense ------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        (dict(fixed_lr=float("nan")), "fixed_lr must be a finite number >= 0"),
        (dict(fixed_lr=float("inf")), "fixed_lr"),
        (dict(fixed_lr=-1e-3), "fixed_lr"),
        (dict(lr_scale=0.0), "lr_scale must be a finite number > 0"),
        (dict(lr_scale=float("nan")), "lr_scale"),
        (dict(clip_norm=-1.0), "clip_norm must be a finite number >= 0"),
        (dict(clip_norm=float("nan")), "clip_norm"),
        (dict(clip_norm=float("inf")), "clip_norm"),
        (dict(eps=0.0), "eps must be a finite number > 0"),
        (dict(eps=float("nan")), "eps"),
        (dict(beta1=1.0), r"beta1 must be a number in \[0, 1\), got 1.0"),
        (dict(beta2=float("nan")), "beta2"),
        (dict(warmup=0), r"warmup must be an integer in \[1, 1000000000\], got 0"),
        (dict(total_steps=-5), "total_steps must be an integer >= 0, got -5"),
        (dict(label_smoothing=float("nan")), "label_smoothing"),
        (dict(label_smoothing=1.0), "label_smoothing"),
    ],
)
def test_optimizer_options_are_refused(kwargs, fragment):
    m = small_model()
    before = m.optimizer_config
    with pytest.raises(ValueError, match=f"configure_optimizer: {fragment}"):
        m.configure_optimizer(**kwargs)
    assert m.optimizer_config == before  # nothing half-applied


@pytest.mark.parametrize("penalty", [float("inf"), float("nan"), -0.5, 1e300])
def test_length_penalty_is_checked(penalty):
    with pytest.raises(ValueError, match="length_penalty"):
        small_model().beam_search(np.ones((1, 3), int), 1, 2, 5, length_penalty=penalty)


def test_other_numeric_options_are_refused():
    lin = tc.Linear(2, 2)
    adam = tc.Adam(lin.parameters())
    with pytest.raises(ValueError, match="Adam.step: lr must be a finite number >= 0, got nan"):
        adam.step(float("nan"))
    with pytest.raises(ValueError, match="max_norm must be a finite number >= 0"):
        adam.clip_grad_norm(-1.0)
    with pytest.raises(ValueError, match="max_norm"):
        adam.clip_grad_norm(float("nan"))
    with pytest.raises(ValueError, match="eps must be a finite number"):
        tc.LayerNorm(4, eps=float("nan"))
    with pytest.raises(ValueError, match=r"Dropout: rate must be a number in \[0, 1\), got nan"):
        tc.Dropout(float("nan"))
    with pytest.raises(ValueError, match=r"Transformer: dropout must be a number in \[0, 1\), got nan"):
        tc.Transformer(13, 13, dropout=float("nan"))
    with pytest.raises(ValueError, match="layer_norm_eps must be a finite number"):
        tc.Transformer(13, 13, layer_norm_eps=float("inf"))
    with pytest.raises(ValueError, match="scale must be a finite number"):
        tc.warmup_learning_rate(1, 8, scale=float("nan"))
    with pytest.raises(ValueError, match="label_smoothing"):
        tc.masked_cross_entropy(np.zeros((1, 3)), np.ones(1, int), label_smoothing=float("nan"))
    with pytest.raises(ValueError, match="scale must be a finite number"):
        tc.Embedding(4, 2).forward(np.ones((1, 2), int), scale=float("inf"))
    with pytest.raises(ValueError, match=r"set_num_threads: n must be an integer in \[1, 1024\]"):
        tc.set_num_threads(10**6)


# --- 6. text that is not what it seems ------------------------------------------------------------


def test_text_spelling_a_special_token_is_ordinary_text():
    tok = tc.SubwordTokenizer.build_from_corpus(["hello world"] * 3, 300)
    for text in ("<end>", "a <end> b", "<pad>", "<start><unk> x"):
        ids = tok.encode(text)
        assert ids[0] == tok.start_id and ids[-1] == tok.end_id
        assert not set(ids[1:-1]) & tok.special_ids, (text, ids)  # never the special ids
        assert tok.decode(ids) == text
        again = tc.SubwordTokenizer.from_str(tok.to_str())  # a reloaded tokenizer too
        assert again.encode(text) == ids


def test_text_that_is_not_unicode_names_the_position():
    tok = tc.SubwordTokenizer.build_from_corpus(["hello world"] * 3, 300)
    bad = b"caf\xe9 ok".decode("utf-8", errors="surrogateescape")  # Latin-1 bytes read as UTF-8
    with pytest.raises(ValueError, match=r"encode: the text is not valid Unicode: .*'\\udce9' at position 3"):
        tok.encode(bad)
    with pytest.raises(ValueError, match=r"encode_batch: text 1 is not valid Unicode"):
        tok.encode_batch(["fine", bad])
    with pytest.raises(ValueError, match=r"tokens: the text is not valid Unicode"):
        tok.tokens(bad)
    with pytest.raises(ValueError, match=r"build_from_corpus: sentence 1 is not valid Unicode"):
        tc.SubwordTokenizer.build_from_corpus(["fine", bad], 300)


def test_nan_logits_in_rows_that_count_are_refused():
    logits = np.zeros((2, 4))
    logits[1, 2] = np.nan
    # row 1 is padding (target 0): ignored, as the loss of a padded batch must be
    assert tc.masked_accuracy(logits, np.array([1, 0])) == 0.0
    assert np.isfinite(tc.masked_cross_entropy(logits, np.array([1, 0]))[0])
    # a row that counts: an arg max over NaN means nothing
    with pytest.raises(NonFiniteError, match="masked_accuracy: the logits of row 1 are NaN"):
        tc.masked_accuracy(logits, np.array([1, 3]))
    with pytest.raises(NonFiniteError, match="masked_cross_entropy: the loss is not finite"):
        tc.masked_cross_entropy(logits, np.array([1, 3]))


def test_overflow_is_an_error_never_a_nan_gradient():
    # a fully masked query row has a zero gradient, never 0 * inf = NaN from its huge values
    mha = tc.MultiHeadAttention(4, 1, seed=3)
    x = np.zeros((1, 1, 4), np.float32)
    x[0, 0, 0] = 3.4e38
    mha.forward(x, mask=np.ones((1, 1, 1), bool))
    dx = mha.backward(np.ones((1, 1, 4), np.float32))
    assert np.isfinite(dx).all() and not dx.any()
    for n, p in mha.parameters().items():
        assert np.isfinite(p.grad).all(), n
    # finite but huge values elsewhere overflow: an error in forward or in backward
    lin = tc.Linear(4, 4, seed=1)
    lin.forward(np.full((2, 4), 1e30, np.float32))
    with pytest.raises(NonFiniteError, match="Linear.backward: the gradient of parameter 'weight' is not finite"):
        lin.backward(np.full((2, 4), 1e30, np.float32))


def test_helpers_name_bad_arguments():
    from transformer_cpp import kernels

    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*64\)"):
        kernels.fingerprint(np.zeros(3), seed=HUGE)
    with pytest.raises(TypeError, match="data must be a NumPy array"):
        kernels.fingerprint([1, 2, 3])
    with pytest.raises(ValueError, match="memory available"):
        tc.look_ahead_mask(10**400)


# --- 7. found by tools/hostile_campaign.py ---------------------------------------------------------


def test_softmax_of_plus_infinity_is_its_limit():
    out = tc.softmax(np.array([[np.inf, 0.0, 1.0], [np.inf, -np.inf, np.inf], [1.0, 2.0, 3.0]]))
    np.testing.assert_array_equal(out[0], [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(out[1], [0.5, 0.0, 0.5])
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(out[2], e / e.sum(), rtol=1e-12)
    assert np.isnan(tc.softmax(np.array([[np.inf, np.nan]]))).all()  # NaN still shows


def test_a_train_step_without_target_tokens_is_refused_and_changes_nothing():
    m = small_model()
    src, tgt_in, tgt_out = batch()
    m.train_step(src, tgt_in, tgt_out)
    before = {n: p.value.copy() for n, p in m.parameters().items()}
    with pytest.raises(ValueError, match="tgt_out holds no target token.*no update was applied"):
        m.train_step(src, tgt_in, np.zeros_like(tgt_out))
    assert m.step == 1
    for n, p in m.parameters().items():
        np.testing.assert_array_equal(p.value, before[n], err_msg=n)
    m.train_step(src, tgt_in, tgt_out)  # and the model trains on
    assert m.step == 2


def test_adam_refuses_an_update_that_is_not_finite():
    lin = tc.Linear(3, 3, seed=1)
    adam = tc.Adam(lin.parameters())
    before = {n: p.value.copy() for n, p in lin.parameters().items()}
    lin.parameters()["weight"].grad[0, 0] = np.nan
    with pytest.raises(NonFiniteError, match="Adam.step: the update .* no update was applied"):
        adam.step(1e-3)
    for n, p in lin.parameters().items():
        np.testing.assert_array_equal(p.value, before[n], err_msg=n)
    assert adam.step_count == 0


def test_unsigned_token_ids_beyond_int64_are_named_as_given():
    with pytest.raises(ValueError, match=r"tokens holds the token id 9223372036854775813 at flat index 1"):
        tc.Embedding(10, 4).forward(np.array([[1, 2**63 + 5]], np.uint64))
    out = tc.Embedding(10, 4, dtype="float64").forward(np.array([[1, 9]], np.uint64))  # small ones still work
    assert out.shape == (1, 2, 4)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: small_model().forward(np.ones((1, 3), int), np.ones((1, 2), int), training="no"), "training"),
        (lambda: small_model(pre_norm="no"), "pre_norm"),
        (lambda: small_model(share_embeddings="false"), "share_embeddings"),
        (lambda: small_model().nonfinite_parameters("yes"), "optimizer_state"),
        (lambda: tc.SubwordTokenizer.build_from_corpus(["a b c"] * 3, 300, lowercase="no"), "lowercase"),
        (
            lambda: tc.SubwordTokenizer.build_from_corpus(["a b c"] * 3, 300).encode("a", add_special_tokens="no"),
            "add_special_tokens",
        ),
        (
            lambda: tc.SubwordTokenizer.build_from_corpus(["a b c"] * 3, 300).decode([1, 5], skip_special_tokens=0),
            "skip_special_tokens",
        ),
    ],
)
def test_flags_must_be_booleans(call, name):
    """A string such as "no" is true in Python: a flag given one is refused, never taken as True."""
    with pytest.raises(TypeError, match=rf"{name} must be True or False"):
        call()


def test_fixed_learning_rate_decays_when_a_run_length_is_given():
    m = small_model()
    m.configure_optimizer(fixed_lr=1e-2)
    assert m.learning_rate(1) == m.learning_rate(10**6) == 1e-2
    m.configure_optimizer(fixed_lr=1e-2, total_steps=10, warmup=4000)  # no warm-up with a fixed rate
    np.testing.assert_allclose([m.learning_rate(s) for s in (1, 5, 10, 11)], [9e-3, 5e-3, 0.0, 0.0], atol=1e-15)
    with pytest.raises(ValueError, match="total_steps must be 0 .* or > warmup"):
        m.configure_optimizer(warmup=10, total_steps=10)


_ADDRESS_SPACE = """
    import resource, warnings
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import numpy as np, transformer_cpp as tc
    print("threads", tc.get_num_threads(), len(caught), flush=True)
    for make in (lambda: tc.Linear(30000, 30000), lambda: tc.positional_encoding(400_000, 1024, dtype="float64"),
                 lambda: tc.Transformer(32000, 32000, d_model=1024, n_layers=6, n_heads=16, d_ff=4096),
                 lambda: tc.set_num_threads(1024)):
        try:
            make()
            print("accepted")
        except ValueError as e:
            assert "memory available" in str(e) or "ulimit -v" in str(e), e
            print("refused")
    tc.set_num_threads(2)
    lin = tc.Linear(64, 64)
    print("ok", lin.forward(np.ones((512, 64), np.float32)).shape, flush=True)
"""


@needs_address_space_limit
@pytest.mark.parametrize("omp", ["1", "100000"])
def test_an_address_space_limit_is_a_memory_limit(omp):
    """Under ulimit -v (RLIMIT_AS) sizes that fit in the machine's memory but not in the address
    space are refused before allocation, like sizes beyond the memory; thread counts whose stacks
    do not fit too, and an OMP_NUM_THREADS that asks for too many is lowered, with a warning
    (OpenMP would otherwise kill the process at the first parallel loop)."""
    import os

    env = dict(os.environ, OMP_NUM_THREADS=omp)
    proc = run_isolated(_ADDRESS_SPACE, env=env)
    assert_clean_exit(proc)
    lines = proc.stdout.split("\n")
    _, threads, warned = lines[0].split()
    if omp == "1":
        assert (int(threads), int(warned)) == (1, 0), proc.stdout
    else:  # lowered to what the stacks of 2 GB can hold, and said so
        assert 1 < int(threads) < 1024 and int(warned) >= 1, proc.stdout
    assert lines[1:5] == ["refused"] * 4, proc.stdout + proc.stderr
    assert lines[5] == "ok (512, 64)"


_GIVEN_THREADS = """
    import resource, warnings
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import numpy as np, transformer_cpp as tc
    given = tc.get_num_threads()
    lin = tc.Linear(64, 64)
    lin.forward(np.ones((4096, 64), np.float32))  # the threads start
    ballast = np.ones(400 << 17)  # 400 MB: the room left is now too small for that many new stacks
    for n in (given, max(1, given // 2), given):  # a governor lowers the count, then goes back
        tc.set_num_threads(n)
        assert tc.get_num_threads() == n
        lin.forward(np.ones((4096, 64), np.float32))
    try:
        tc.set_num_threads(1024)
        print("accepted 1024")
    except ValueError as e:
        assert "ulimit -v" in str(e), e
    print("ok", given, flush=True)
"""


@needs_address_space_limit
def test_a_thread_count_once_given_can_be_set_again():
    """Under ulimit -v, the count OMP_NUM_THREADS was lowered to (or one set before) can be set
    again once memory has been used (the governor of Translator and Trainer lowers the count and
    goes back to it): only counts beyond what the process was given are checked against the
    address space. The Translator failed every sentence ('set_num_threads: 119 threads need 944 MB')."""
    import os

    proc = run_isolated(_GIVEN_THREADS, env=dict(os.environ, OMP_NUM_THREADS="100000"))
    assert_clean_exit(proc)
    words = proc.stdout.split()
    assert words[0] == "ok" and 1 < int(words[1]) < 1024, proc.stdout + proc.stderr


def test_positional_encoding_hands_over_its_table():
    a = tc.positional_encoding(7, 6)
    assert a.flags.writeable and a.shape == (7, 6)
    b = tc.positional_encoding(7, 6)
    a[...] = 0  # the tables are independent arrays
    assert b.any()


def test_a_pickled_or_copied_tokenizer_keeps_special_token_text_ordinary():
    import copy
    import pickle

    tok = tc.SubwordTokenizer.build_from_corpus(["hello world"] * 3, 300)
    for again in (pickle.loads(pickle.dumps(tok)), copy.deepcopy(tok), copy.copy(tok)):
        assert again == tok
        for text in ("a <end> b", "<pad>", "<start><unk>"):
            assert again.encode(text) == tok.encode(text)
            assert not set(again.encode(text)[1:-1]) & tok.special_ids


def test_tokenizer_files_directories_and_two_writers(tmp_path):
    import threading

    tok = tc.SubwordTokenizer.build_from_corpus(["hello world"] * 3, 300)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        tc.SubwordTokenizer.load(tmp_path)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        tok.save(tmp_path)
    errors = []

    def save():
        for _ in range(20):
            try:
                tok.save(tmp_path / "t.json")
            except Exception as exc:  # noqa: BLE001
                errors.append(exc)

    threads = [threading.Thread(target=save) for _ in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    assert tc.SubwordTokenizer.load(tmp_path / "t.json") == tok
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temporary file left behind
    with open(tmp_path / "big.json", "wb") as f:
        f.truncate(3 << 30)  # sparse: no disk used
    with pytest.raises(ValueError, match="more than any SubwordTokenizer file"):
        tc.SubwordTokenizer.load(tmp_path / "big.json")
    with pytest.raises(TypeError, match="expected a trained tokenizers.Tokenizer"):
        tc.SubwordTokenizer(object())


def test_the_last_step_count_is_an_error_not_an_overflow():
    m = small_model()
    src, tgt_in, tgt_out = batch()
    m.step = 2**63 - 1
    before = {n: p.value.copy() for n, p in m.parameters().items()}
    with pytest.raises(ValueError, match=r"train_step: the step count 9223372036854775807 is at its maximum"):
        m.train_step(src, tgt_in, tgt_out)
    with pytest.raises(ValueError, match="learning_rate: the step count 9223372036854775807 is at its maximum"):
        m.learning_rate()
    for n, p in m.parameters().items():
        np.testing.assert_array_equal(p.value, before[n], err_msg=n)
    assert m.step == 2**63 - 1
    adam = tc.Adam(tc.Linear(2, 2).parameters())
    adam.step_count = 2**63 - 1
    with pytest.raises(ValueError, match="Adam: the step count .* is at its maximum"):  # not "diverged"
        adam.step(1e-3)


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: tc.LayerNorm(4, eps=0.0), "LayerNorm: eps must be a finite number > 0, got 0"),
        (lambda: tc.EncoderLayer(8, 2, 16, eps=0.0), "EncoderLayer: eps must be a finite number > 0, got 0.0"),
        (lambda: small_model(layer_norm_eps=0.0), "Transformer: layer_norm_eps must be a finite number > 0, got 0"),
        (lambda: tc.Adam(tc.Linear(3, 2).parameters(), eps=0.0), "Adam: eps must be a finite number > 0, got 0"),
    ],
)
def test_an_epsilon_of_zero_is_refused(make, fragment):
    """eps = 0 was accepted and divided by zero later: a constant row made LayerNorm's output NaN,
    reported as an overflow ('the inputs or weights are too large'), and Adam's first step over a
    gradient that was 0 'diverged'. configure_optimizer already asked for eps > 0."""
    with pytest.raises(ValueError, match=re.escape(fragment)):
        make()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("clip", [0.0, 1.0], ids=["no_clip", "clip"])
def test_the_update_check_sees_every_element(dtype, clip):
    """The check that an update stays finite runs vectorised, 16 lanes at a time in chunks of 16,384
    elements with a scalar tail: a moment that makes one element's update overflow (finite inputs,
    an infinite result) is refused wherever that element sits — each lane, the chunk boundary, the
    tail — with and without clipping (two different passes)."""
    big = float(np.finfo(dtype).max)
    m = small_model(dtype=dtype, d_model=64, n_heads=2, d_ff=301)
    m.configure_optimizer(warmup=10, clip_norm=clip)
    m.train_step(*batch())
    # a learning rate so large that step size x (the largest finite moment) overflows whatever the
    # gradient; every other element's update stays finite (about 100)
    m.configure_optimizer(fixed_lr=100.0, clip_norm=clip)
    state = m.optimizer_state()
    weight = next(n[: -len(".m")] for n in state if n.endswith("linear1.weight.m"))
    bias = next(n[: -len(".m")] for n in state if n.endswith("linear1.bias.m"))
    assert state[weight + ".m"].value.size == 64 * 301 > 16384 and state[bias + ".m"].value.size == 301
    cases = [(weight, i) for i in (0, 5, 15, 16, 31, 16383, 16384, 16399, 64 * 301 - 1)]
    cases += [(bias, i) for i in (0, 15, 287, 288, 300)]  # 301 = 18 x 16 + 13: the last 13 are the tail
    for name, i in cases:
        m1, v1 = state[name + ".m"].value.reshape(-1), state[name + ".v"].value.reshape(-1)
        saved = m1[i], v1[i]
        m1[i], v1[i] = big, 0.0  # lr x m overflows
        assert m.nonfinite_parameters() == []
        with pytest.raises(NonFiniteError, match="no update was applied"):
            m.train_step(*batch())
        assert m.step == 1, (name, i)
        m1[i], v1[i] = saved
    m.train_step(*batch())  # restored: the next update goes through
    assert m.step == 2


def test_train_step_skips_the_weight_check_only_when_nothing_can_have_written_the_weights():
    """After a successful train_step (its update is checked element by element) the next
    train_step or evaluate skips its pass over every weight, as long as no parameters() view has
    been made or released since. The skip is visible only to a write behind the model's back: a NaN
    written through an address kept after its view died surfaces as a non-finite loss (still
    refused, no update applied) instead of the weight check's message. Any view since brings the
    check back."""
    import ctypes

    m = small_model()
    src, tgt_in, tgt_out = batch()
    name = "decoder.layers.0.norm2.weight"
    view = m.parameters()[name].value
    address = view.ctypes.data
    assert view.dtype == np.float64
    del view
    m.train_step(src, tgt_in, tgt_out)  # a view was released: checked, and now vouched for
    ctypes.c_double.from_address(address + 8).value = float("nan")  # behind the model's back
    with pytest.raises(NonFiniteError, match="train_step: non-finite loss.*no update was applied"):
        m.train_step(src, tgt_in, tgt_out)
    assert m.step == 1
    # the failed step proved nothing, so evaluate checks again
    with pytest.raises(NonFiniteError, match=f"evaluate: the weights are not finite: parameter '{name}'"):
        m.evaluate(src, tgt_in, tgt_out)
    ctypes.c_double.from_address(address + 8).value = 1.0
    m.train_step(src, tgt_in, tgt_out)
    assert m.step == 2
    # a view made (even if not written) withdraws the vouching: the next step checks
    params = m.parameters()
    ctypes.c_double.from_address(address + 8).value = float("nan")
    with pytest.raises(NonFiniteError, match=f"train_step: the weights are not finite: parameter '{name}'"):
        m.train_step(src, tgt_in, tgt_out)
    del params
