"""Bad input raises a Python exception with a clear message and never crashes the interpreter.

Scenarios that could corrupt memory (a backward after a forward that was rejected half-way) run in
a subprocess, so that a crash fails one test instead of killing the test run."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import transformer_cpp as tc

SRC_V, TGT_V, MAXLEN = 11, 13, 6


@pytest.fixture
def model():
    return tc.Transformer(SRC_V, TGT_V, d_model=8, n_layers=1, n_heads=2, d_ff=12, max_length=MAXLEN)


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    return rng.integers(1, SRC_V, (2, 4)), rng.integers(1, TGT_V, (2, 3)), rng.integers(1, TGT_V, (2, 3))


def run_isolated(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; a segfault shows up as a negative return code."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


def assert_clean_exit(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (
        f"the interpreter died with return code {proc.returncode} "
        f"(negative = killed by a signal)\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    )
    assert "OK" in proc.stdout, proc.stdout + proc.stderr


# --- token ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["src", "tgt_in", "tgt_out"])
@pytest.mark.parametrize("value", [SRC_V + 5, -1])
def test_token_ids_out_of_range(model, batch, where, value):
    src, tgt_in, tgt_out = (a.copy() for a in batch)
    {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}[where][1, 2] = value
    with pytest.raises(ValueError, match=f"{value}.*out of range"):
        model.train_step(src, tgt_in, tgt_out)
    with pytest.raises(ValueError, match="out of range"):
        model.evaluate(src, tgt_in, tgt_out)
    if where != "tgt_out":
        with pytest.raises(ValueError, match="out of range"):
            model.forward(src, tgt_in)
    assert model.step == 0  # nothing was applied


def test_target_id_equal_to_vocab_size_is_out_of_range(model, batch):
    src, tgt_in, tgt_out = batch
    with pytest.raises(ValueError, match=f"token id {TGT_V} is out of range for vocabulary size {TGT_V}"):
        model.forward(src, np.full_like(tgt_in, TGT_V))
    with pytest.raises(ValueError, match=f"token id {SRC_V} is out of range for vocabulary size {SRC_V}"):
        model.forward(np.full_like(src, SRC_V), tgt_in)


def test_huge_unsigned_ids_are_out_of_range(model, batch):
    src, tgt_in, _ = batch
    big = src.astype(np.uint64)
    big[0, 0] = np.uint64(2**63 + 5)  # wraps to a negative int64
    with pytest.raises(ValueError, match="token id 9223372036854775813 .*beyond any vocabulary"):
        model.forward(big, tgt_in)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, bool, object])
def test_tokens_must_be_integers(model, batch, dtype):
    src, tgt_in, tgt_out = batch
    with pytest.raises(TypeError, match="src must hold integer token ids"):
        model.forward(src.astype(dtype), tgt_in)
    with pytest.raises(TypeError, match="tgt_in must hold integer token ids"):
        model.forward(src, tgt_in.astype(dtype))
    with pytest.raises(TypeError, match="tgt_out must hold integer token ids"):
        model.train_step(src, tgt_in, tgt_out.astype(dtype))


def test_other_integer_dtypes_are_accepted(model, batch):
    src, tgt_in, tgt_out = batch
    ref = model.forward(src, tgt_in)
    for dt in (np.int32, np.uint8, np.int16):
        np.testing.assert_array_equal(model.forward(src.astype(dt), tgt_in.astype(dt)), ref)
    # lists and non-contiguous views work too
    np.testing.assert_array_equal(model.forward(src.tolist(), tgt_in.tolist()), ref)
    wide = np.zeros((2, 8), int)
    wide[:, ::2] = src
    np.testing.assert_array_equal(model.forward(wide[:, ::2], tgt_in), ref)


def test_strings_are_rejected(model, batch):
    with pytest.raises(TypeError, match="integer"):
        model.forward("hello", batch[1])


@pytest.mark.parametrize("shape", [(4,), (1, 2, 4), ()])
def test_token_rank(model, batch, shape):
    src, tgt_in, tgt_out = batch
    bad = np.ones(shape, int)
    with pytest.raises(ValueError, match="src must have 2 dimensions"):
        model.forward(bad, tgt_in)
    with pytest.raises(ValueError, match="tgt_in must have 2 dimensions"):
        model.forward(src, bad)
    with pytest.raises(ValueError, match="tgt_out must have 2 dimensions"):
        model.train_step(src, tgt_in, bad)


def test_mismatched_batches(model, batch):
    src, tgt_in, tgt_out = batch
    with pytest.raises(ValueError, match="src has batch size 3 but tgt_in has 2"):
        model.forward(np.ones((3, 4), int), tgt_in)
    with pytest.raises(ValueError, match="batch size"):
        model.train_step(np.ones((3, 4), int), tgt_in, tgt_out)
    with pytest.raises(ValueError, match="tgt_out has shape"):
        model.train_step(src, tgt_in, np.ones((3, 3), int))
    with pytest.raises(ValueError, match="tgt_out has shape"):
        model.evaluate(src, tgt_in, np.ones((2, 4), int))


def test_empty_batches(model, batch):
    src, tgt_in, _ = batch
    with pytest.raises(ValueError, match="empty batch"):
        model.forward(np.ones((2, 0), int), tgt_in)
    with pytest.raises(ValueError, match="empty batch"):
        model.forward(np.ones((0, 4), int), np.ones((0, 3), int))


def test_sequences_longer_than_max_length_are_accepted(model, batch):
    """max_length is the positional table's first size, a cache: longer sequences extend it."""
    src, tgt_in, tgt_out = batch
    long = np.ones((2, 3 * MAXLEN + 1), int)
    assert model.forward(long, tgt_in).shape == (2, tgt_in.shape[1], TGT_V)
    loss, _ = model.train_step(src, long, long)
    assert np.isfinite(loss)
    enc = tc.Encoder(SRC_V, 8, 1, 2, 12, max_length=3)
    assert enc.forward(np.ones((1, 40), int)).shape == (1, 40, 8)
    dec = tc.Decoder(TGT_V, 8, 1, 2, 12, max_length=3)
    assert dec.forward(np.ones((1, 40), int), np.zeros((1, 2, 8), np.float32)).shape == (1, 40, 8)


# --- construction -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: tc.MultiHeadAttention(10, 4),
        lambda: tc.EncoderLayer(10, 4, 12),
        lambda: tc.DecoderLayer(10, 4, 12),
        lambda: tc.Encoder(SRC_V, 10, 1, 4, 12),
        lambda: tc.Decoder(SRC_V, 10, 1, 4, 12),
        lambda: tc.Transformer(SRC_V, TGT_V, d_model=10, n_heads=4),
        lambda: tc.MultiHeadAttention(10, 4, dtype="float64"),
    ],
    ids=["mha", "encoder_layer", "decoder_layer", "encoder", "decoder", "transformer", "mha64"],
)
def test_d_model_not_divisible_by_heads(make):
    with pytest.raises(ValueError, match="d_model 10 is not divisible by n_heads 4"):
        make()


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        (dict(n_heads=0), "n_heads"),
        (dict(d_model=0), "d_model"),
        (dict(n_layers=0), "n_layers"),
        (dict(d_ff=-1), "d_ff"),
        (dict(max_length=0), "max_length"),
        (dict(dropout=1.0), "dropout"),
        (dict(dropout=-0.1), "dropout"),
        (dict(layout="sideways"), "layout"),
        (dict(d_model=2.5), "d_model"),
    ],
)
def test_bad_model_configuration(kwargs, fragment):
    # TypeError for a value of the wrong type (2.5 for an integer), ValueError for one out of range
    with pytest.raises(TypeError if kwargs == dict(d_model=2.5) else ValueError, match=fragment):
        tc.Transformer(SRC_V, TGT_V, **kwargs)


def test_bad_layer_configuration():
    with pytest.raises(ValueError, match="positive"):
        tc.MultiHeadAttention(8, 0)
    with pytest.raises(ValueError, match=r"FeedForward: dropout must be a number in \[0, 1\), got 1.0"):
        tc.FeedForward(8, 12, dropout=1.0)
    with pytest.raises(ValueError, match="n_layers"):
        tc.Encoder(SRC_V, 8, 0, 2, 12)
    with pytest.raises(ValueError, match="dtype"):
        tc.MultiHeadAttention(8, 2, dtype="int32")


# --- backward before forward, wrong gradients ---------------------------------------------------


@pytest.mark.parametrize(
    "make,name",
    [
        (lambda: tc.ScaledDotProductAttention(), "scaled_dot_product_attention"),
        (lambda: tc.MultiHeadAttention(8, 2), "MultiHeadAttention"),
        (lambda: tc.FeedForward(8, 12), "FeedForward"),
        (lambda: tc.EncoderLayer(8, 2, 12), "EncoderLayer"),
        (lambda: tc.DecoderLayer(8, 2, 12), "DecoderLayer"),
        (lambda: tc.Encoder(SRC_V, 8, 1, 2, 12), "Encoder"),
        (lambda: tc.Decoder(TGT_V, 8, 1, 2, 12), "Decoder"),
        (lambda: tc.Transformer(SRC_V, TGT_V, d_model=8, n_layers=1, n_heads=2, d_ff=12), "Transformer"),
    ],
)
def test_backward_before_forward(make, name):
    layer = make()
    with pytest.raises(RuntimeError, match=f"{name}.backward: call forward\\(\\) first"):
        layer.backward(np.zeros((2, 3, 8 if name != "Transformer" else TGT_V), np.float32))


def test_backward_with_wrong_gradient_shape_or_dtype(model, batch):
    src, tgt_in, _ = batch
    model.forward(src, tgt_in)
    with pytest.raises(ValueError, match=r"dlogits must have shape \(2, 3, 13\)"):
        model.backward(np.zeros((2, 4, TGT_V), np.float32))
    with pytest.raises(TypeError, match="floating-point"):
        model.backward(np.zeros((2, 3, TGT_V), np.int64))
    mha = tc.MultiHeadAttention(8, 2)
    mha.forward(np.zeros((2, 3, 8), np.float32))
    with pytest.raises(ValueError, match="output's shape"):
        mha.backward(np.zeros((2, 4, 8), np.float32))
    layer = tc.DecoderLayer(8, 2, 12)
    layer.forward(np.zeros((2, 3, 8), np.float32), np.zeros((2, 5, 8), np.float32))
    with pytest.raises(ValueError, match="output's shape"):
        layer.backward(np.zeros((3, 3, 8), np.float32))


# --- float inputs of the layers -----------------------------------------------------------------


def test_layer_inputs_must_be_float_arrays_of_the_right_shape():
    mha = tc.MultiHeadAttention(8, 2)
    with pytest.raises(TypeError, match="floating-point"):
        mha.forward(np.zeros((2, 3, 8), np.int64))
    with pytest.raises(ValueError, match=r"\(batch, length, d_model\)"):
        mha.forward(np.zeros((3, 8), np.float32))
    with pytest.raises(ValueError, match="last dimension 8"):
        mha.forward(np.zeros((2, 3, 9), np.float32))
    with pytest.raises(ValueError, match="memory has batch size 3 but x has 2"):
        mha.forward(np.zeros((2, 3, 8), np.float32), np.zeros((3, 4, 8), np.float32))
    with pytest.raises(ValueError, match="last dimension 8"):
        tc.FeedForward(8, 12).forward(np.zeros((2, 7), np.float32))
    with pytest.raises(ValueError, match="memory has batch size"):
        tc.DecoderLayer(8, 2, 12).forward(np.zeros((2, 3, 8), np.float32), np.zeros((1, 3, 8), np.float32))
    with pytest.raises(ValueError, match="memory has batch size"):
        tc.Decoder(TGT_V, 8, 1, 2, 12).forward(np.ones((2, 3), int), np.zeros((1, 3, 8), np.float32))
    # a float32 array given to a float64 layer is converted, not rejected
    mha64 = tc.MultiHeadAttention(8, 2, dtype="float64")
    x = np.random.default_rng(0).standard_normal((2, 3, 8))
    np.testing.assert_allclose(
        mha64.forward(x.astype(np.float32)), mha64.forward(x.astype(np.float32).astype(np.float64))
    )


def test_scaled_dot_product_attention_shape_mismatch_message():
    """k and v of different lengths (or q and k of different widths) are named in the message,
    not reported as a failed NumPy reshape."""
    with pytest.raises(ValueError, match="q, k, v"):
        tc.scaled_dot_product_attention(np.zeros((2, 3, 4)), np.zeros((2, 5, 4)), np.zeros((2, 4, 4)))
    with pytest.raises(ValueError, match="q, k, v"):
        tc.scaled_dot_product_attention(np.zeros((2, 3, 4)), np.zeros((2, 5, 3)), np.zeros((2, 5, 3)))


# --- masks --------------------------------------------------------------------------------------


def test_bad_mask_shapes():
    x = np.zeros((2, 3, 8), np.float32)
    mem = np.zeros((2, 5, 8), np.float32)
    mha = tc.MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"does not broadcast to \(B, Tq, Tk\) = \(2, 3, 3\)"):
        mha.forward(x, mask=np.zeros((2, 4, 3), bool))
    with pytest.raises(ValueError, match=r"\(2, 3, 5\)"):
        mha.forward(x, mem, mask=np.zeros((2, 3, 3), bool))  # a self-attention mask for cross-attention
    with pytest.raises(ValueError, match=r"\(B, 1, Tq, Tk\)"):
        mha.forward(x, mask=np.zeros((2, 2, 3, 3), bool))  # per-head masks are not supported
    with pytest.raises(ValueError, match="must broadcast"):
        mha.forward(x, mask=np.zeros(3, bool))
    with pytest.raises(TypeError, match="boolean or numeric"):
        mha.forward(x, mask=np.array([["a"] * 3] * 3))
    with pytest.raises(ValueError, match="does not broadcast"):
        tc.EncoderLayer(8, 2, 12).forward(x, mask=np.zeros((3, 3, 3), bool))
    layer = tc.DecoderLayer(8, 2, 12)
    with pytest.raises(ValueError, match="does not broadcast"):
        layer.forward(x, mem, self_mask=np.zeros((2, 3, 5), bool))
    with pytest.raises(ValueError, match="does not broadcast"):
        layer.forward(x, mem, cross_mask=np.zeros((2, 3, 3), bool))
    with pytest.raises(ValueError, match=r"source_padding must have shape \(2, 5\)"):
        tc.Decoder(TGT_V, 8, 1, 2, 12).forward(np.ones((2, 3), int), mem, source_padding=np.zeros((2, 4), bool))
    with pytest.raises(ValueError, match="does not broadcast"):
        tc.scaled_dot_product_attention(
            np.zeros((2, 3, 4)), np.zeros((2, 5, 4)), np.zeros((2, 5, 4)), np.zeros((2, 3, 4), bool)
        )


# --- NaN ----------------------------------------------------------------------------------------


def test_nan_logits_raise():
    logits = np.zeros((2, 3, 5), np.float32)
    logits[1, 2, 4] = np.nan
    with pytest.raises(RuntimeError, match="not finite"):
        tc.masked_cross_entropy(logits, np.ones((2, 3), int))
    logits[1, 2, 4] = np.inf
    with pytest.raises(RuntimeError, match="not finite"):
        tc.masked_cross_entropy(logits, np.ones((2, 3), int))


def test_nan_in_the_model_raises_and_applies_no_update(model, batch):
    src, tgt_in, tgt_out = batch
    model.train_step(src, tgt_in, tgt_out)
    model.parameters()["output.bias"].value[3] = np.nan
    before = {n: p.value.copy() for n, p in model.parameters().items()}
    step = model.step
    with pytest.raises(RuntimeError, match="not finite"):
        model.train_step(src, tgt_in, tgt_out)
    with pytest.raises(RuntimeError, match="not finite"):
        model.evaluate(src, tgt_in, tgt_out)
    assert model.step == step
    for n, p in model.parameters().items():
        np.testing.assert_array_equal(p.value, before[n], err_msg=n)


# --- no crash after a rejected forward ------------------------------------------------------------
#
# A layer keeps pointers into the arrays of its last forward until backward. When a later forward
# is rejected, the layer must keep those arrays alive (or refuse the backward): the arrays below are
# large enough (2 MB) that NumPy returns their memory to the system when they are freed, so reading
# them after that is a segfault rather than silent garbage.


def test_backward_after_rejected_cross_attention_forward():
    assert_clean_exit(
        run_isolated("""
        import numpy as np, transformer_cpp as tc
        rng = np.random.default_rng(0)
        m = tc.MultiHeadAttention(64, 2, dtype="float64")
        x = rng.standard_normal((64, 64, 64))
        dout = rng.standard_normal((64, 64, 64))
        fresh = tc.MultiHeadAttention(64, 2, dtype="float64")
        fresh.forward(x)
        expected = fresh.backward(dout)
        m.forward(x.copy())                      # the layer's only reference to this input
        try:
            m.forward(x, memory=np.zeros((64, 4, 9)))  # rejected: memory has the wrong width
        except ValueError:
            pass
        try:
            got = m.backward(dout)
        except RuntimeError:
            print("OK")                          # refusing is fine
        else:
            # otherwise it is the backward of the last accepted (self-attention) forward
            assert isinstance(got, np.ndarray), type(got)
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
            print("OK")
    """)
    )


def test_backward_after_rejected_decoder_forward():
    assert_clean_exit(
        run_isolated("""
        import numpy as np, transformer_cpp as tc
        rng = np.random.default_rng(0)
        dec = tc.Decoder(50, 64, 1, 2, 64, dropout=0.0, dtype="float64")
        tgt = rng.integers(1, 50, (64, 30))
        dec.forward(tgt, rng.standard_normal((64, 40, 64)))
        for bad in (dict(source_padding=np.zeros((64, 41))), dict(tokens=np.full((64, 30), 99))):
            try:
                dec.forward(bad.get("tokens", tgt), rng.standard_normal((64, 40, 64)),
                            source_padding=bad.get("source_padding"))
            except ValueError:
                pass
            try:
                dmem = dec.backward(np.ones((64, 30, 64)))
                assert dmem.shape == (64, 40, 64) and np.all(np.isfinite(dmem))
            except RuntimeError:
                pass
        print("OK")
    """)
    )


def test_backward_after_rejected_model_forward():
    """The encoder accepts the new batch, the decoder rejects its target ids: the model must not
    run a backward that mixes the decoder's old state with the encoder's new one."""
    assert_clean_exit(
        run_isolated("""
        import numpy as np, transformer_cpp as tc
        rng = np.random.default_rng(0)
        m = tc.Transformer(50, 50, d_model=64, n_layers=1, n_heads=2, d_ff=64, dropout=0.0, dtype="float64")
        m.forward(rng.integers(1, 50, (64, 40)), rng.integers(1, 50, (64, 30)))
        tgt = rng.integers(1, 50, (80, 30))
        tgt[0, 0] = 99
        try:
            m.forward(rng.integers(1, 50, (80, 60)), tgt)
        except ValueError:
            pass
        try:
            m.backward(np.ones((64, 30, 50)))
        except (RuntimeError, ValueError) as e:
            assert "forward" in str(e) or "shape" in str(e), e
        print("OK")
    """)
    )


def test_failed_train_step_then_backward_is_safe():
    assert_clean_exit(
        run_isolated("""
        import numpy as np, transformer_cpp as tc
        rng = np.random.default_rng(0)
        m = tc.Transformer(50, 50, d_model=64, n_layers=1, n_heads=2, d_ff=64, dropout=0.0)
        src, tgt = rng.integers(1, 50, (64, 40)), rng.integers(1, 50, (64, 30))
        m.forward(src, tgt)
        for bad_src, bad_tgt, bad_out in [(src, tgt, np.full((64, 30), 77)),
                                          (rng.integers(1, 50, (8, 60)), np.full((8, 5), 99), np.ones((8, 5), int))]:
            try:
                m.train_step(bad_src, bad_tgt, bad_out)
            except ValueError:
                pass
            try:
                m.backward(np.ones((64, 30, 50), np.float32))
            except (RuntimeError, ValueError):
                pass
        print("OK")
    """)
    )
