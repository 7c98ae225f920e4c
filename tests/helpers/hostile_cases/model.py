"""The Transformer: token ids, decoding options, step counts, copies, threads and memory limits."""

from __future__ import annotations

import copy
import os
import pickle
import re
import threading
from typing import Any, Dict, List

import numpy as np

import transformer_cpp as tc

from .base import (
    assert_close,
    linear_ref,
    HUGE,
    V,
    Context,
    api,
    assert_unchanged,
    batch,
    churn,
    err,
    raises,
    rand,
    rtok,
    script,
    small,
    translator,
    weights,
)


# --- the Transformer -----------------------------------------------------------------------------


@api("model: logits not overwritten by the next forward")
def _(c):
    m = small()
    a = m.forward(np.ones((1, 3), int), np.ones((1, 2), int))
    keep = a.copy()
    m.forward(np.full((1, 3), 5), np.full((1, 2), 4))
    assert np.array_equal(a, keep), "the first logits changed"


@api("model: attention weights survive the model and the next forward")
def _(c):
    m = small()
    m.forward(np.ones((1, 3), int), np.ones((1, 2), int))
    w = m.attention_weights()
    keep = {k: v.copy() for k, v in w.items()}
    m.forward(np.full((1, 3), 5), np.full((1, 2), 4))
    del m
    churn()
    for k, v in w.items():
        assert np.array_equal(v, keep[k]), f"{k} changed"


@api("model: greedy output not overwritten by the next decode")
def _(c):
    m = small(seed=3)
    a = m.greedy_decode(np.ones((1, 3), int), 1, 2, 5)
    keep = a.copy()
    m.greedy_decode(np.full((2, 4), 7), 1, 2, 6)
    assert np.array_equal(a, keep)


@api("model: parameter views outlive the model")
def _(c):
    m = small()
    v = m.parameters()["output.weight"].value
    keep = v.copy()
    del m
    churn()
    assert np.array_equal(v, keep), "the view changed after the model was freed"


@api("model: train_step on a batch of padding targets is refused and changes nothing")
def _(c):
    m = small()
    src, tgt_in, tgt_out = batch()
    m.train_step(src, tgt_in, tgt_out)
    before = weights(m)
    raises(
        lambda: m.train_step(src, tgt_in, np.zeros_like(tgt_out)),
        ValueError,
        re.compile("tgt_out holds no target token.*no update was applied"),
    )
    assert m.step == 1
    assert_unchanged(m, before)
    m.train_step(src, tgt_in, tgt_out)  # and the model trains on
    assert m.step == 2


@api("model: evaluate on a batch of padding targets", expect="either")
def _(c):
    m = small()
    src, tgt_in, tgt_out = batch()
    loss, acc = m.evaluate(src, tgt_in, np.zeros_like(tgt_out))
    assert m.last_token_count == 0, m.last_token_count
    assert np.isfinite(loss) or np.isnan(loss), loss


SRC_V, TGT_V = 11, 13


def _tiny() -> Any:
    return tc.Transformer(SRC_V, TGT_V, d_model=8, n_layers=1, n_heads=2, d_ff=12, max_length=6)


def _tiny_batch() -> Any:
    rng = np.random.default_rng(0)
    return rng.integers(1, SRC_V, (2, 4)), rng.integers(1, TGT_V, (2, 3)), rng.integers(1, TGT_V, (2, 3))


def _out_of_range(where: str, value: int) -> None:
    m = _tiny()
    src, tgt_in, tgt_out = _tiny_batch()
    {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out}[where][1, 2] = value
    raises(lambda: m.train_step(src, tgt_in, tgt_out), ValueError, re.compile(f"{value}.*out of range"))
    raises(lambda: m.evaluate(src, tgt_in, tgt_out), ValueError, "out of range")
    if where != "tgt_out":
        raises(lambda: m.forward(src, tgt_in), ValueError, "out of range")
    assert m.step == 0  # nothing was applied


for _where in ("src", "tgt_in", "tgt_out"):
    for _value in (SRC_V + 5, -1):
        api(f"model: token id {_value} in {_where} is refused by train_step, evaluate and forward")(
            (lambda w, v: lambda c: _out_of_range(w, v))(_where, _value)
        )
err(
    "model: target ids equal to the vocabulary size",
    lambda c: _tiny().forward(_tiny_batch()[0], np.full((2, 3), TGT_V)),
    f"token id {TGT_V} is out of range for vocabulary size {TGT_V}",
    raises=ValueError,
)
err(
    "model: source ids equal to the vocabulary size",
    lambda c: _tiny().forward(np.full((2, 4), SRC_V), _tiny_batch()[1]),
    f"token id {SRC_V} is out of range for vocabulary size {SRC_V}",
    raises=ValueError,
)


def _huge_unsigned_src(c: Context) -> Any:
    src, tgt_in, _ = _tiny_batch()
    big = src.astype(np.uint64)
    big[0, 0] = np.uint64(2**63 + 5)  # wraps to a negative int64
    return _tiny().forward(big, tgt_in)


err(
    "model: a uint64 source id beyond int64",
    _huge_unsigned_src,
    re.compile("token id 9223372036854775813 .*beyond any vocabulary"),
    raises=ValueError,
)


def _non_integer_tokens(dtype: Any) -> None:
    m = _tiny()
    src, tgt_in, tgt_out = _tiny_batch()
    raises(lambda: m.forward(src.astype(dtype), tgt_in), TypeError, "src must hold integer token ids")
    raises(lambda: m.forward(src, tgt_in.astype(dtype)), TypeError, "tgt_in must hold integer token ids")
    raises(lambda: m.train_step(src, tgt_in, tgt_out.astype(dtype)), TypeError, "tgt_out must hold integer token ids")


for _dtype in (np.float64, np.float32, bool, object):
    api(f"model: {np.dtype(_dtype).name} token ids are refused, naming the argument")(
        (lambda d: lambda c: _non_integer_tokens(d))(_dtype)
    )
err("model: a string as token ids", lambda c: _tiny().forward("hello", _tiny_batch()[1]), "integer", raises=TypeError)


def _token_rank(shape: Any) -> None:
    m = _tiny()
    src, tgt_in, tgt_out = _tiny_batch()
    bad = np.ones(shape, int)
    raises(lambda: m.forward(bad, tgt_in), ValueError, "src must have 2 dimensions")
    raises(lambda: m.forward(src, bad), ValueError, "tgt_in must have 2 dimensions")
    raises(lambda: m.train_step(src, tgt_in, bad), ValueError, "tgt_out must have 2 dimensions")


for _shape in ((4,), (1, 2, 4), ()):
    api(f"model: token ids of shape {_shape} are refused")((lambda s: lambda c: _token_rank(s))(_shape))


@api("model: batches that do not match are refused")
def _(c):
    m = _tiny()
    src, tgt_in, tgt_out = _tiny_batch()
    raises(lambda: m.forward(np.ones((3, 4), int), tgt_in), ValueError, "src has batch size 3 but tgt_in has 2")
    raises(lambda: m.train_step(np.ones((3, 4), int), tgt_in, tgt_out), ValueError, "batch size")
    raises(lambda: m.train_step(src, tgt_in, np.ones((3, 3), int)), ValueError, "tgt_out has shape")
    raises(lambda: m.evaluate(src, tgt_in, np.ones((2, 4), int)), ValueError, "tgt_out has shape")
    assert m.step == 0


err(
    "model: an empty source",
    lambda c: _tiny().forward(np.ones((2, 0), int), _tiny_batch()[1]),
    "empty batch",
    raises=ValueError,
)
err(
    "model: a batch of no sentences",
    lambda c: _tiny().forward(np.ones((0, 4), int), np.ones((0, 3), int)),
    "empty batch",
    raises=ValueError,
)


@api("model: sequences longer than max_length extend the positional table")
def _(c):
    m = _tiny()
    src, tgt_in, _ = _tiny_batch()
    long = np.ones((2, 3 * 6 + 1), int)
    assert m.forward(long, tgt_in).shape == (2, tgt_in.shape[1], TGT_V)
    loss, _ = m.train_step(src, long, long)
    assert np.isfinite(loss)
    enc = tc.Encoder(SRC_V, 8, 1, 2, 12, max_length=3)
    assert enc.forward(np.ones((1, 40), int)).shape == (1, 40, 8)
    dec = tc.Decoder(TGT_V, 8, 1, 2, 12, max_length=3)
    assert dec.forward(np.ones((1, 40), int), np.zeros((1, 2, 8), np.float32)).shape == (1, 40, 8)


for _kwargs, _fragment, _type in [
    (dict(n_heads=0), "n_heads", ValueError),
    (dict(d_model=0), "d_model", ValueError),
    (dict(n_layers=0), "n_layers", ValueError),
    (dict(d_ff=-1), "d_ff", ValueError),
    (dict(max_length=0), "max_length", ValueError),
    (dict(dropout=1.0), "dropout", ValueError),
    (dict(dropout=-0.1), "dropout", ValueError),
    (dict(layout="sideways"), "layout", ValueError),
    (dict(d_model=2.5), "d_model", TypeError),  # the wrong type, not a value out of range
]:
    _key, _val = next(iter(_kwargs.items()))
    err(
        f"model: {_key}={_val!r}",
        (lambda kw: lambda c: tc.Transformer(SRC_V, TGT_V, **kw))(_kwargs),
        _fragment,
        raises=_type,
    )


def _backward_with(dlogits: np.ndarray) -> Any:
    m = _tiny()
    src, tgt_in, _ = _tiny_batch()
    m.forward(src, tgt_in)
    return m.backward(dlogits)


err(
    "model: backward with dlogits of the wrong shape",
    lambda c: _backward_with(np.zeros((2, 4, TGT_V), np.float32)),
    "dlogits must have shape (2, 3, 13)",
    raises=ValueError,
)
err(
    "model: backward with integer dlogits",
    lambda c: _backward_with(np.zeros((2, 3, TGT_V), np.int64)),
    "floating-point",
    raises=TypeError,
)


@api("model: float32 dlogits into a float64 model", expect="either")
def _(c):
    a, b = small(seed=1), small(seed=1)
    src, tgt_in, _ = batch()
    d = rand(2, 3, V)
    a.forward(src, tgt_in, training=True)
    b.forward(src, tgt_in, training=True)
    a.backward(d)
    b.backward(d.astype(np.float32))
    for n, p in a.parameters().items():
        assert_close(b.parameters()[n].grad, p.grad, 1e-5)


@api("model: other integer dtypes, lists and strided ids give the same results")
def _(c):
    m = _tiny()
    src, tgt_in, tgt_out = _tiny_batch()
    ref = m.forward(src, tgt_in)
    for dt in (np.int32, np.uint8, np.int16):
        np.testing.assert_array_equal(m.forward(src.astype(dt), tgt_in.astype(dt)), ref)
    np.testing.assert_array_equal(m.forward(src.tolist(), tgt_in.tolist()), ref)
    wide = np.zeros((2, 8), int)
    wide[:, ::2] = src
    np.testing.assert_array_equal(m.forward(wide[:, ::2], tgt_in), ref)
    src, tgt_in, tgt_out = batch(b=4)
    a = small(seed=2).evaluate(src, tgt_in, tgt_out)
    b = small(seed=2).evaluate(src.astype(np.int32), tgt_in.astype(np.int32), tgt_out.astype(np.int32))
    assert_close(a, b, 1e-12)
    a = small(seed=2).evaluate(src[::2], tgt_in[::2], tgt_out[::2])
    b = small(seed=2).evaluate(
        np.ascontiguousarray(src[::2]), np.ascontiguousarray(tgt_in[::2]), np.ascontiguousarray(tgt_out[::2])
    )
    assert_close(a, b, 1e-12)


@api("model: boolean ids", expect="either")
def _(c):
    m = small()
    out = m.forward(np.array([[True, True]]), np.array([[True]]))
    assert_close(out, m.forward(np.array([[1, 1]]), np.array([[1]])), 1e-12)


# a string such as "no" is true in Python: a flag given one is refused, never taken as True
for _name, _call in [
    ("training", lambda: small().forward(np.ones((1, 3), int), np.ones((1, 2), int), training="no")),
    ("pre_norm", lambda: small(pre_norm="no")),
    ("share_embeddings", lambda: small(share_embeddings="false")),
    ("optimizer_state", lambda: small().nonfinite_parameters("yes")),
]:
    err(
        f"model: {_name} given as a string",
        (lambda call: lambda c: call())(_call),
        f"{_name} must be True or False",
        raises=TypeError,
    )


@api("model: decoding a source of padding only", expect="either")
def _(c):
    out = small(seed=1).greedy_decode(np.zeros((2, 3), int), 1, 2, 4)
    assert np.all(out >= 0) and np.all(out < V)


err("model: decoding float ids", lambda c: small().greedy_decode(np.ones((1, 3)), 1, 2, 4), "src")


@api("model: beam 1 with length penalty 0 equals greedy")
def _(c):
    m = small(seed=5)
    src = np.random.default_rng(1).integers(1, V, (3, 4))
    greedy = m.greedy_decode(src, 1, 2, 6)
    beams = m.beam_search(src, 1, 2, 6, beam_size=1, length_penalty=0.0)
    for row, hyps in zip(greedy, beams):
        want = [int(t) for t in row if t != 0]
        assert [int(t) for t in hyps[0][0]] == want, (hyps[0][0], want)


@api("model: beam wider than the vocabulary")
def _(c):
    hyps = small(seed=5).beam_search(np.ones((1, 3), int), 1, 2, 4, beam_size=50, n_best=3)
    for tokens, score, logp, finished in hyps[0]:
        assert all(0 < t < V for t in tokens), tokens
        assert np.isfinite(score) and np.isfinite(logp)


err("model: n_best 0", lambda c: small().beam_search(np.ones((1, 3), int), 1, 2, 4, n_best=0), "n_best")


@api("model: decoding never emits padding")
def _(c):
    m = small(seed=9)
    m.parameters()["output.bias"].value[0] = 1e3  # padding is by far the most likely token
    out = m.greedy_decode(np.ones((2, 3), int), 1, 2, 5)
    for row in out.tolist():  # padding only after the end token, never generated
        if 0 in row:
            k = row.index(0)
            assert k > 0 and row[k - 1] == 2 and not any(row[k:]), row


err("model: negative step", lambda c: setattr(small(), "step", -1), "step")


@api("model: train_step at step 2**63 - 1 is refused and changes nothing")
def _(c):
    m = small()
    src, tgt_in, tgt_out = batch()
    m.step = 2**63 - 1
    before = weights(m)
    raises(
        lambda: m.train_step(src, tgt_in, tgt_out),
        ValueError,
        "train_step: the step count 9223372036854775807 is at its maximum",
    )
    assert_unchanged(m, before)
    assert m.step == 2**63 - 1


def _adam_at_last_step(c):
    adam = tc.Adam(tc.Linear(2, 2).parameters())
    adam.step_count = 2**63 - 1
    return adam.step(1e-3)


err("adam: step at step_count 2**63 - 1", _adam_at_last_step, re.compile("Adam: the step count .* is at its maximum"))
err(
    "model: learning rate of the step after 2**63 - 1",
    lambda c: (lambda m: (setattr(m, "step", 2**63 - 1), m.learning_rate()))(small()),
    "learning_rate: the step count 9223372036854775807 is at its maximum",
    raises=ValueError,
)
err("model: float step", lambda c: setattr(small(), "step", 2.5), "step")
err("model: negative dropout_calls", lambda c: setattr(small(), "dropout_calls", -1), "dropout_calls")
err(
    "model: total_steps equal to warmup",
    lambda c: small().configure_optimizer(warmup=10, total_steps=10),
    "total_steps",
)
err("model: warmup given as a string", lambda c: small().configure_optimizer(warmup="10"), "warmup")
err("model: warmup True", lambda c: small().configure_optimizer(warmup=True), "warmup")
err("model: dtype float16", lambda c: tc.Transformer(V, V, d_model=8, n_heads=2, dtype="float16"), "dtype")
err("model: vocabulary of 1", lambda c: tc.Transformer(1, V, d_model=8, n_heads=2), "src_vocab_size")
err(
    "model: from_config with an unknown key",
    lambda c: tc.Transformer.from_config(dict(small().config, colour="red")),
    "colour",
)
err(
    "model: from_config with a string size",
    lambda c: tc.Transformer.from_config(dict(small().config, d_model="8")),
    "d_model",
)
err("model: pickled", lambda c: pickle.dumps(small()), "pickle")


@api("model: deep copy", expect="either")
def _(c):
    m = small(seed=1)
    m2 = copy.deepcopy(m)
    m2.parameters()["output.bias"].value[...] = 5.0
    assert not np.all(m.parameters()["output.bias"].value == 5.0), "the copy shares the original's weights"


@api("model: learning rate at step 2**62")
def _(c):
    lr = small().learning_rate(2**62)
    assert np.isfinite(lr) and lr >= 0, lr


err("set_num_threads: 0", lambda c: tc.set_num_threads(0), "n")
err("set_num_threads: True", lambda c: tc.set_num_threads(True), "n")
err("positional_encoding: bad layout", lambda c: tc.positional_encoding(4, 4, layout="spiral"), "layout")


@api("positional_encoding: odd depth follows the formula")
def _(c):
    pe = np.asarray(tc.positional_encoding(5, 3), dtype=np.float64)
    pos = np.arange(5)[:, None]
    i = np.arange(3)[None, :]
    angle = pos / np.power(10000.0, (2 * (i // 2)) / 3.0)
    want = np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
    assert_close(pe, want, 1e-6)


@api("threads: one translator from two threads")
def _(c):
    t = translator(c)
    sentences = ["The cat and the dog.", "The tree and the bird.", "The car and the book."]
    want = [t.translate(s) for s in sentences]
    got: Dict[int, Any] = {}
    errors: List[str] = []

    def work(k: int) -> None:
        for j in range(20):
            try:
                got[(k, j)] = t.translate(sentences[(k + j) % 3]), (k + j) % 3
            except RuntimeError as exc:
                if "in use" not in str(exc):
                    errors.append(str(exc))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    [th.start() for th in threads]
    [th.join() for th in threads]
    assert not errors, errors[0]
    for text, i in got.values():
        assert text == want[i], (text, want[i])


@api("threads: one tokenizer from four threads")
def _(c):
    tok = rtok()
    want = tok.encode("a b c d e f")
    bad: List[Any] = []

    def work() -> None:
        for _ in range(200):
            if tok.encode("a b c d e f") != want:
                bad.append(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    [th.start() for th in threads]
    [th.join() for th in threads]
    assert not bad


@api("threads: reading parameters while another thread trains")
def _(c):
    m = small(dtype="float32")
    src, tgt_in, tgt_out = batch()
    stop = threading.Event()

    def train() -> None:
        for _ in range(200):
            m.train_step(src, tgt_in, tgt_out)
        stop.set()

    th = threading.Thread(target=train)
    th.start()
    while not stop.is_set():
        for p in m.parameters().values():
            float(p.value.sum())
    th.join()
    assert m.step == 200 and not m.nonfinite_parameters()


@api("threads: set_num_threads while another thread works")
def _(c):
    lin = tc.Linear(64, 64, seed=1, dtype="float64")
    x = rand(256, 64)
    want = linear_ref(lin, x)
    done = threading.Event()
    out: List[Any] = []

    def work() -> None:
        for _ in range(30):
            out.append(lin.forward(x).copy())
        done.set()

    th = threading.Thread(target=work)
    th.start()
    while not done.is_set():
        tc.set_num_threads(2)
        tc.set_num_threads(1)
    th.join()
    for o in out:
        assert_close(o, want, 1e-12)


@api("memory: TRANSFORMER_CPP_MEMORY_LIMIT set by the program")
def _(c):
    os.environ["TRANSFORMER_CPP_MEMORY_LIMIT"] = "1000000"  # read at each check
    raises(lambda: tc.Linear(1000, 1000), ValueError, "more than the 976.6 KB of memory available")
    tc.Linear(100, 100).forward(np.ones((2, 100), np.float32))


@api("memory: a forward pass larger than the address-space limit", expect="error", match=("memory",))
def _(c):
    m = tc.Transformer(50, 50, d_model=64, n_layers=1, n_heads=4, d_ff=64)
    return m.forward(np.ones((64, 2000), int), np.ones((64, 2000), int))  # ~8 GB of attention weights


_ADDRESS_SPACE = """
import resource, warnings
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import numpy as np, transformer_cpp as tc
threads, warned = tc.get_num_threads(), len(caught)
if OMP == "1":
    assert (threads, warned) == (1, 0), (threads, warned)
else:  # lowered to what the stacks of 2 GB can hold, and said so
    assert 1 < threads < 1024 and warned >= 1, (threads, warned)
for make in (
    lambda: tc.Linear(30000, 30000),  # 3.6 GB of weights (7.2 GB with gradients)
    lambda: tc.positional_encoding(400_000, 1024, dtype="float64"),  # 3.2 GB
    lambda: tc.Transformer(32000, 32000, d_model=1024, n_layers=6, n_heads=16, d_ff=4096),
    lambda: tc.set_num_threads(1024),  # their stacks
):
    try:
        make()
    except ValueError as e:
        assert "memory available" in str(e) or "ulimit -v" in str(e), e
    else:
        raise AssertionError("accepted a size beyond the address space")
tc.set_num_threads(2)
lin = tc.Linear(64, 64)
assert lin.forward(np.ones((512, 64), np.float32)).shape == (512, 64)
print("OK")
"""

# Under ulimit -v (RLIMIT_AS) sizes that fit in the machine's memory but not in the address space
# are refused before allocation, like sizes beyond the memory; thread counts whose stacks do not
# fit too, and an OMP_NUM_THREADS that asks for too many is lowered, with a warning (OpenMP would
# otherwise kill the process at the first parallel loop).
for _omp in ("1", "100000"):
    script(
        f"memory: an address-space limit is a memory limit (OMP_NUM_THREADS={_omp})",
        f"OMP = {_omp!r}\n" + _ADDRESS_SPACE,
        env={"OMP_NUM_THREADS": _omp},
        needs_rlimit=True,
    )

# The count OMP_NUM_THREADS was lowered to (or one set before) can be set again once memory has
# been used (the thread governor of Translator and Trainer lowers the count and goes back to it):
# only counts beyond what the process was given are checked against the address space.
script(
    "memory: a thread count once given can be set again under an address-space limit",
    """
import resource, warnings
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import numpy as np, transformer_cpp as tc
given = tc.get_num_threads()
assert 1 < given < 1024, given
lin = tc.Linear(64, 64)
lin.forward(np.ones((4096, 64), np.float32))  # the threads start
ballast = np.ones(400 << 17)  # 400 MB: the room left is now too small for that many new stacks
for n in (given, max(1, given // 2), given):  # a governor lowers the count, then goes back
    tc.set_num_threads(n)
    assert tc.get_num_threads() == n
    lin.forward(np.ones((4096, 64), np.float32))
try:
    tc.set_num_threads(1024)
except ValueError as e:
    assert "ulimit -v" in str(e), e
print("OK")
""",
    env={"OMP_NUM_THREADS": "100000"},
    needs_rlimit=True,
)


# --- backward uses what forward saw; no crash after a rejected forward ------------------------------


@api("model: backward uses what forward saw")
def _(c):
    src, tgt_in, _ = batch()
    dlogits = np.random.default_rng(3).standard_normal((2, 3, V))
    ref = small(seed=4)
    ref.forward(src.copy(), tgt_in.copy(), training=True)
    ref.backward(dlogits)
    m = small(seed=4)
    s, t = src.copy(), tgt_in.copy()
    m.forward(s, t, training=True)
    s[...] = 0
    t[...] = 1
    m.backward(dlogits)
    for n, p in m.parameters().items():
        np.testing.assert_allclose(p.grad, ref.parameters()[n].grad, rtol=1e-12, atol=1e-12, err_msg=n)


# A layer keeps pointers into the arrays of its last forward until backward. When a later forward is
# rejected, the layer must keep those arrays alive (or refuse the backward): the arrays below are
# large enough (2 MB) that NumPy returns their memory to the system when they are freed, so reading
# them after that is a segmentation fault rather than silent garbage.


@api("multi-head attention: backward after a rejected cross-attention forward")
def _(c):
    rng = np.random.default_rng(0)
    m = tc.MultiHeadAttention(64, 2, dtype="float64")
    x = rng.standard_normal((64, 64, 64))
    dout = rng.standard_normal((64, 64, 64))
    fresh = tc.MultiHeadAttention(64, 2, dtype="float64")
    fresh.forward(x)
    expected = fresh.backward(dout)
    m.forward(x.copy())  # the layer's only reference to this input
    raises(lambda: m.forward(x, memory=np.zeros((64, 4, 9))), ValueError)  # memory of the wrong width
    try:
        got = m.backward(dout)
    except RuntimeError:
        return  # refusing is fine
    # otherwise it is the backward of the last accepted (self-attention) forward
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@api("decoder: backward after a rejected forward")
def _(c):
    rng = np.random.default_rng(0)
    dec = tc.Decoder(50, 64, 1, 2, 64, dropout=0.0, dtype="float64")
    tgt = rng.integers(1, 50, (64, 30))
    dec.forward(tgt, rng.standard_normal((64, 40, 64)))
    for bad in (dict(source_padding=np.zeros((64, 41))), dict(tokens=np.full((64, 30), 99))):
        raises(
            lambda: dec.forward(
                bad.get("tokens", tgt), rng.standard_normal((64, 40, 64)), source_padding=bad.get("source_padding")
            ),
            ValueError,
        )
        try:
            dmem = dec.backward(np.ones((64, 30, 64)))
        except RuntimeError:
            continue
        assert dmem.shape == (64, 40, 64) and np.all(np.isfinite(dmem))


@api("model: backward after a forward the decoder rejected")
def _(c):
    """The encoder accepts the new batch, the decoder rejects its target ids: the model must not run
    a backward that mixes the decoder's old state with the encoder's new one."""
    rng = np.random.default_rng(0)
    m = tc.Transformer(50, 50, d_model=64, n_layers=1, n_heads=2, d_ff=64, dropout=0.0, dtype="float64")
    m.forward(rng.integers(1, 50, (64, 40)), rng.integers(1, 50, (64, 30)))
    tgt = rng.integers(1, 50, (80, 30))
    tgt[0, 0] = 99
    raises(lambda: m.forward(rng.integers(1, 50, (80, 60)), tgt), ValueError, "99")
    try:
        m.backward(np.ones((64, 30, 50)))
    except (RuntimeError, ValueError) as e:
        assert "forward" in str(e) or "shape" in str(e), e


@api("model: backward after a failed train_step")
def _(c):
    rng = np.random.default_rng(0)
    m = tc.Transformer(50, 50, d_model=64, n_layers=1, n_heads=2, d_ff=64, dropout=0.0)
    src, tgt = rng.integers(1, 50, (64, 40)), rng.integers(1, 50, (64, 30))
    m.forward(src, tgt)
    for bad_src, bad_tgt, bad_out in [
        (src, tgt, np.full((64, 30), 77)),
        (rng.integers(1, 50, (8, 60)), np.full((8, 5), 99), np.ones((8, 5), int)),
    ]:
        raises(lambda: m.train_step(bad_src, bad_tgt, bad_out), ValueError, "out of range")
        try:
            m.backward(np.ones((64, 30, 50), np.float32))
        except (RuntimeError, ValueError):
            pass


# --- non-finite weights, moments, losses and updates ------------------------------------------------


def _refuses_nonfinite_weights_everywhere(value: float) -> None:
    m = small()
    src, tgt_in, tgt_out = batch()
    m.train_step(src, tgt_in, tgt_out)
    name = "decoder.layers.0.norm2.weight"
    m.parameters()[name].value[1] = value
    before = weights(m)
    calls = {
        "forward": lambda: m.forward(src, tgt_in),
        "evaluate": lambda: m.evaluate(src, tgt_in, tgt_out),
        "train_step": lambda: m.train_step(src, tgt_in, tgt_out),
        "greedy_decode": lambda: m.greedy_decode(src, 1, 2, 5),
        "beam_search": lambda: m.beam_search(src, 1, 2, 5, beam_size=2),
    }
    for who, call in calls.items():
        raises(call, tc.NonFiniteError, f"{who}: the weights are not finite: parameter '{name}'")
    assert m.step == 1
    assert_unchanged(m, before)
    assert m.nonfinite_parameters() == [name]
    raises(
        lambda: m.check_finite("load_checkpoint"), tc.NonFiniteError, f"1 tensor hold NaN or infinite values: '{name}'"
    )


for _value in ("nan", "inf", "-inf"):
    api(f"model: a {_value} weight is refused by every call, which changes nothing")(
        (lambda v: lambda c: _refuses_nonfinite_weights_everywhere(float(v)))(_value)
    )


@api("model: nonfinite_parameters lists Adam's moments; an update through one is refused")
def _(c):
    m = small()
    m.train_step(*batch())
    assert m.nonfinite_parameters() == []
    m.check_finite()
    m.optimizer_state()["output.bias.v"].value[0] = np.inf
    assert m.nonfinite_parameters() == ["output.bias.v"]
    assert m.nonfinite_parameters(optimizer_state=False) == []
    before = weights(m)
    raises(lambda: m.train_step(*batch()), tc.NonFiniteError, "no update was applied")
    assert m.step == 1
    assert_unchanged(m, before)


def _nonfinite_update(clip: float) -> None:
    """Without clipping the pass that computes the gradient norm also checks the update; with
    clipping Adam's own pass does. Either way: the same error, and nothing changes."""
    m = small(dtype="float32")
    m.configure_optimizer(warmup=10, clip_norm=clip)
    m.train_step(*batch())
    m.optimizer_state()["output.bias.v"].value[0] = np.inf
    before = weights(m)
    state = {n: p.value.copy() for n, p in m.optimizer_state().items()}
    raises(
        lambda: m.train_step(*batch()),
        tc.NonFiniteError,
        re.compile(
            r"Transformer.train_step: the update \(learning rate .*\) would make "
            r"weights or Adam moments non-finite.*no update was applied"
        ),
    )
    assert m.step == 1
    assert_unchanged(m, before)
    for n, p in m.optimizer_state().items():
        np.testing.assert_array_equal(p.value, state[n], err_msg=n)


api("model: a non-finite update is refused without clipping")(lambda c: _nonfinite_update(0.0))
api("model: a non-finite update is refused with clipping")(lambda c: _nonfinite_update(1.0))


@api("model: a non-finite loss applies no update")
def _(c):
    m = small(dtype="float32")
    src, tgt_in, tgt_out = batch()
    m.train_step(src, tgt_in, tgt_out)
    m.parameters()["output.weight"].value[...] = 3e38  # finite weights whose logits overflow float32
    before = weights(m)
    e = raises(lambda: m.train_step(src, tgt_in, tgt_out), tc.NonFiniteError, "Transformer.train_step: non-finite loss")
    assert isinstance(e, FloatingPointError) and isinstance(e, RuntimeError)  # both kinds of caller catch it
    assert "no update was applied" in str(e)
    assert m.step == 1
    assert_unchanged(m, before)
    raises(lambda: m.evaluate(src, tgt_in, tgt_out), tc.NonFiniteError, "Transformer.evaluate: non-finite loss")
    raises(lambda: m.forward(src, tgt_in), tc.NonFiniteError, "logits are not finite")
    raises(
        lambda: m.greedy_decode(src, 1, 2, 4), tc.NonFiniteError, "greedy_decode: the logits of step 0 are not finite"
    )
    raises(lambda: m.beam_search(src, 1, 2, 4), tc.NonFiniteError, "beam_search: the logits of step 0 are not finite")


@api("model: a diverging run stops with the last good step's finite weights")
def _(c):
    m = small(dtype="float32")
    m.configure_optimizer(fixed_lr=1e30)
    src, tgt_in, tgt_out = batch()

    def train() -> None:
        for _ in range(50):
            m.train_step(src, tgt_in, tgt_out)

    raises(train, tc.NonFiniteError, "train_step")
    assert m.nonfinite_parameters() == []


def _update_check_sees_every_element(dtype: str, clip: float) -> None:
    """The check that an update stays finite runs vectorised, 16 lanes at a time in chunks of 16,384
    elements with a scalar tail: a moment that makes one element's update overflow (finite inputs,
    an infinite result) is refused wherever that element sits (each lane, the chunk boundary, the
    tail), with and without clipping (two different passes)."""
    big = float(np.finfo(dtype).max)
    m = small(dtype=dtype, d_model=64, n_heads=2, d_ff=301)
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
        raises(lambda: m.train_step(*batch()), tc.NonFiniteError, "no update was applied")
        assert m.step == 1, (name, i)
        m1[i], v1[i] = saved
    m.train_step(*batch())  # restored: the next update goes through
    assert m.step == 2


for _dtype in ("float32", "float64"):
    for _clip in (0.0, 1.0):
        api(f"model: the update check sees every element ({_dtype}, {'clip' if _clip else 'no clip'})")(
            (lambda d, cl: lambda c: _update_check_sees_every_element(d, cl))(_dtype, _clip)
        )


@api("model: a write behind the model's back after its views died is still refused")
def _(c):
    """After a successful train_step (its update is checked element by element) the next train_step
    or evaluate skips its pass over every weight, as long as no parameters() view has been made or
    released since. The skip is visible only to a write behind the model's back: a NaN written
    through an address kept after its view died surfaces as a non-finite loss (still refused, no
    update applied) instead of the weight check's message. Any view since brings the check back."""
    import ctypes

    m = small()
    src, tgt_in, tgt_out = batch()
    name = "decoder.layers.0.norm2.weight"
    view = m.parameters()[name].value
    address = view.ctypes.data
    assert view.dtype == np.float64
    del view
    m.train_step(src, tgt_in, tgt_out)  # a view was released: checked, and now vouched for
    ctypes.c_double.from_address(address + 8).value = float("nan")  # behind the model's back
    raises(
        lambda: m.train_step(src, tgt_in, tgt_out),
        tc.NonFiniteError,
        re.compile("train_step: non-finite loss.*no update was applied"),
    )
    assert m.step == 1
    # the failed step proved nothing, so evaluate checks again
    raises(
        lambda: m.evaluate(src, tgt_in, tgt_out),
        tc.NonFiniteError,
        f"evaluate: the weights are not finite: parameter '{name}'",
    )
    ctypes.c_double.from_address(address + 8).value = 1.0
    m.train_step(src, tgt_in, tgt_out)
    assert m.step == 2
    # a view made (even if not written) withdraws the vouching: the next step checks
    params = m.parameters()
    ctypes.c_double.from_address(address + 8).value = float("nan")
    raises(
        lambda: m.train_step(src, tgt_in, tgt_out),
        tc.NonFiniteError,
        f"train_step: the weights are not finite: parameter '{name}'",
    )
    del params


# --- decoding sizes and options ----------------------------------------------------------------------


@api("model: decoding sizes beyond the memory and beams beyond 1024 are refused; beam 1024 works")
def _(c):
    m = small()
    src = np.ones((2, 3), np.int64)
    raises(
        lambda: m.greedy_decode(src, 1, 2, 10**9),
        ValueError,
        re.compile("greedy_decode: max_length 1000000000 .*memory available"),
    )
    raises(
        lambda: m.beam_search(src, 1, 2, 10**8, beam_size=8),
        ValueError,
        re.compile("beam_search: beam_size .* and max_length .*memory available"),
    )
    for beam in (10**6, 2**62, 2**63 - 1, 0, -3):  # 2 * beam_size must never overflow
        raises(lambda: m.beam_search(src, 1, 2, 5, beam_size=beam), ValueError, "beam_size must be in [1, 1024]")
    out = m.beam_search(src, 1, 2, 3, beam_size=1024, n_best=2)
    assert len(out) == 2 and all(len(h) == 2 for h in out)


for _penalty in ("inf", "nan", "-0.5", "1e300"):
    err(
        f"model: length_penalty {_penalty}",
        (lambda p: lambda c: small().beam_search(np.ones((1, 3), int), 1, 2, 5, length_penalty=p))(float(_penalty)),
        "length_penalty",
        raises=ValueError,
    )


@api("model: a fixed learning rate decays when a run length is given")
def _(c):
    m = small()
    m.configure_optimizer(fixed_lr=1e-2)
    assert m.learning_rate(1) == m.learning_rate(10**6) == 1e-2
    m.configure_optimizer(fixed_lr=1e-2, total_steps=10, warmup=4000)  # no warm-up with a fixed rate
    np.testing.assert_allclose([m.learning_rate(s) for s in (1, 5, 10, 11)], [9e-3, 5e-3, 0.0, 0.0], atol=1e-15)
    raises(
        lambda: m.configure_optimizer(warmup=10, total_steps=10),
        ValueError,
        re.compile("total_steps must be 0 .* or > warmup"),
    )


def _optimizer_option_refused(kwargs: Dict[str, Any], fragment: str) -> None:
    m = small()
    before = m.optimizer_config
    raises(lambda: m.configure_optimizer(**kwargs), ValueError, f"configure_optimizer: {fragment}")
    assert m.optimizer_config == before  # nothing half-applied


for _kwargs, _fragment in [
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
    (dict(beta1=1.0), "beta1 must be a number in [0, 1), got 1.0"),
    (dict(beta2=float("nan")), "beta2"),
    (dict(warmup=0), "warmup must be an integer in [1, 1000000000], got 0"),
    (dict(total_steps=-5), "total_steps must be an integer >= 0, got -5"),
    (dict(label_smoothing=float("nan")), "label_smoothing"),
    (dict(label_smoothing=1.0), "label_smoothing"),
]:
    _key, _val = next(iter(_kwargs.items()))
    api(f"model: configure_optimizer({_key}={_val!r}) is refused and changes nothing")(
        (lambda kw, f: lambda c: _optimizer_option_refused(kw, f))(_kwargs, _fragment)
    )


# --- sizes beyond the memory, integers beyond 64 bits, options that make no sense ---------------------

for _name, (_make, _fragment) in {
    "Linear": (lambda: tc.Linear(10**7, 10**7), "in_features 10000000 x out_features 10000000"),
    "Embedding": (lambda: tc.Embedding(10**9, 10**6), "vocab_size 1000000000 x d_model 1000000"),
    "PositionalEmbedding": (
        lambda: tc.PositionalEmbedding(10, 512, max_length=10**12),
        re.compile(r"max_length 10\*\*12|max_length 1000000000000"),
    ),
    "MultiHeadAttention": (lambda: tc.MultiHeadAttention(10**8, 1), "d_model 100000000"),
    "FeedForward": (lambda: tc.FeedForward(10**6, 10**8), "d_model 1000000, d_ff 100000000"),
    "EncoderLayer": (lambda: tc.EncoderLayer(10**6, 1, 8), "d_model 1000000"),
    "DecoderLayer": (lambda: tc.DecoderLayer(10**6, 1, 8), "d_model 1000000"),
    "Encoder": (lambda: tc.Encoder(10, 8, 10**12, 2, 8), "n_layers 1000000000000"),
    "Decoder": (lambda: tc.Decoder(10, 8, 10**12, 2, 8), "n_layers 1000000000000"),
    # (sizes beyond the Transformer's ranges are refused by them: tests/unit/test_config.py)
    "Transformer d_model": (
        lambda: tc.Transformer(13, 13, d_model=16384, n_heads=1, d_ff=262144, n_layers=256),
        "d_model 16384",
    ),
    "Transformer vocab": (lambda: tc.Transformer(10**12, 13, d_model=8, n_heads=2), "src_vocab_size 1000000000000"),
    "Transformer max_length": (
        lambda: tc.Transformer(13, 13, d_model=8, n_heads=2, max_length=10**12),
        "max_length 1000000000000",
    ),
    "Transformer n_layers": (
        lambda: tc.Transformer(13, 13, d_model=8192, n_heads=2, d_ff=262144, n_layers=256),
        "n_layers 256",
    ),
    "positional_encoding": (lambda: tc.positional_encoding(10**9, 10**6), "length 1000000000 x depth 1000000"),
}.items():
    err(
        f"memory: {_name} of an absurd size is refused before allocation",
        (lambda make: lambda c: make())(_make),
        _fragment,
        "of memory available",
        raises=ValueError,
    )

_LONG = np.ones((1, 300_000), np.int64)
for _name, _call in {
    "a model's source of 300,000 tokens": lambda: small().forward(_LONG, np.ones((1, 2), np.int64)),
    "a train_step's source of 300,000 tokens": lambda: small().train_step(
        _LONG, np.ones((1, 2), np.int64), np.ones((1, 2), np.int64)
    ),
    "an encoder's input of 300,000 tokens": lambda: tc.Encoder(V, 8, 1, 2, 8).forward(_LONG),
    "attention over 300,000 positions": lambda: tc.MultiHeadAttention(4, 1).forward(np.zeros((1, 300_000, 4))),
    "a linear layer's output of 10**12 values": lambda: tc.Linear(1, 10**6).forward(np.zeros((10**6, 1), np.float32)),
    "a look-ahead mask of 10**7 positions": lambda: tc.look_ahead_mask(10**7),
    "a mask over 10**6 positions": lambda: tc.MultiHeadAttention(4, 1).forward(
        np.zeros((1, 10**6, 4), np.float32), mask=np.zeros((1, 10**6), bool)
    ),
}.items():
    err(
        f"memory: {_name} is refused before allocation",
        (lambda call: lambda c: call())(_call),
        "memory available",
        raises=ValueError,
    )
err(
    "memory: the source length is named",
    lambda c: small().forward(_LONG, np.ones((1, 2), np.int64)),
    re.compile("source length 300000.*memory available"),
    raises=ValueError,
)

# an integer beyond 64 bits is named, never answered with pybind11's list of signatures
for _name, _call, _arg in [
    ("Linear in_features", lambda: tc.Linear(HUGE, 3), "in_features"),
    ("Linear seed", lambda: tc.Linear(3, 3, seed=HUGE), "seed"),
    ("Linear seed -1", lambda: tc.Linear(3, 3, seed=-1), "seed"),
    ("Dropout seed", lambda: tc.Dropout(0.1, seed=HUGE), "seed"),
    ("Dropout rate", lambda: tc.Dropout(10**400), "rate"),
    ("LayerNorm d_model", lambda: tc.LayerNorm(HUGE), "d_model"),
    ("LayerNorm eps", lambda: tc.LayerNorm(4, eps=10**400), "eps"),
    ("Embedding vocab_size", lambda: tc.Embedding(HUGE, 4), "vocab_size"),
    ("PositionalEmbedding max_length", lambda: tc.PositionalEmbedding(4, 4, max_length=HUGE), "max_length"),
    ("MultiHeadAttention n_heads", lambda: tc.MultiHeadAttention(8, HUGE), "n_heads"),
    ("FeedForward d_ff", lambda: tc.FeedForward(8, HUGE), "d_ff"),
    ("EncoderLayer dropout", lambda: tc.EncoderLayer(8, 2, 8, dropout=10**400), "dropout"),
    ("DecoderLayer d_ff", lambda: tc.DecoderLayer(8, 2, HUGE), "d_ff"),
    ("Encoder vocab_size", lambda: tc.Encoder(HUGE, 8, 1, 2, 8), "vocab_size"),
    ("Decoder max_length", lambda: tc.Decoder(4, 8, 1, 2, 8, max_length=-HUGE), "max_length"),
    ("Transformer tgt_vocab_size", lambda: tc.Transformer(13, HUGE), "tgt_vocab_size"),
    ("Transformer d_ff", lambda: tc.Transformer(13, 13, d_ff=HUGE), "d_ff"),
    ("Transformer seed", lambda: tc.Transformer(13, 13, seed=HUGE), "seed"),
    ("Transformer dropout", lambda: tc.Transformer(13, 13, dropout=10**400), "dropout"),
    ("greedy_decode max_length", lambda: small().greedy_decode(np.ones((1, 2), int), 1, 2, HUGE), "max_length"),
    ("greedy_decode start_id", lambda: small().greedy_decode(np.ones((1, 2), int), HUGE, 2, 4), "start_id"),
    ("beam_search beam_size", lambda: small().beam_search(np.ones((1, 2), int), 1, 2, 4, beam_size=HUGE), "beam_size"),
    ("beam_search n_best", lambda: small().beam_search(np.ones((1, 2), int), 1, 2, 4, n_best=HUGE), "n_best"),
    (
        "beam_search length_penalty",
        lambda: small().beam_search(np.ones((1, 2), int), 1, 2, 4, length_penalty=10**400),
        "length_penalty",
    ),
    ("configure_optimizer warmup", lambda: small().configure_optimizer(warmup=HUGE), "warmup"),
    ("configure_optimizer fixed_lr", lambda: small().configure_optimizer(fixed_lr=10**400), "fixed_lr"),
    ("learning_rate step", lambda: small().learning_rate(HUGE), "step"),
    ("Transformer.step", lambda: setattr(small(), "step", HUGE), "step"),
    ("Transformer.dropout_calls", lambda: setattr(small(), "dropout_calls", HUGE), "dropout_calls"),
    ("positional_encoding length", lambda: tc.positional_encoding(HUGE, 4), "length"),
    ("set_num_threads n", lambda: tc.set_num_threads(HUGE), "n"),
    ("warmup_learning_rate step", lambda: tc.warmup_learning_rate(HUGE, 8), "step"),
    (
        "masked_cross_entropy label_smoothing",
        lambda: tc.masked_cross_entropy(np.zeros((1, 3)), np.ones(1, int), label_smoothing=10**400),
        "label_smoothing",
    ),
    ("Adam.step lr", lambda: tc.Adam(tc.Linear(2, 2).parameters()).step(10**400), "lr"),
    ("Dropout.calls", lambda: setattr(tc.Dropout(0.1), "calls", HUGE), "calls"),
]:
    err(
        f"beyond 64 bits: {_name}",
        (lambda call: lambda c: call())(_call),
        re.compile(rf"\b{_arg}\b"),
        raises=ValueError,
    )

for _name, _call, _fragment in [
    ("Linear in_features 3.0", lambda: tc.Linear(3.0, 3), "Linear: in_features must be an integer, got 3.0"),
    ("Linear in_features '3'", lambda: tc.Linear("3", 3), "Linear: in_features must be an integer, got '3'"),
    ("Dropout rate '0.1'", lambda: tc.Dropout("0.1"), "Dropout: rate must be a number in [0, 1), got '0.1'"),
    ("Encoder layout 3", lambda: tc.Encoder(5, 8, 1, 2, 8, layout=3), "layout must be a str"),
    (
        "greedy_decode max_length 4.5",
        lambda: small().greedy_decode(np.ones((1, 2), int), 1, 2, 4.5),
        "max_length must be an integer",
    ),
    ("set_num_threads 2.0", lambda: tc.set_num_threads(2.0), "set_num_threads: n must be an integer >= 1, got 2.0"),
]:
    err(f"wrong type: {_name}", (lambda call: lambda c: call())(_call), _fragment, raises=(TypeError, ValueError))

for _name, _call, _fragment in [
    (
        "Adam.step(nan)",
        lambda: tc.Adam(tc.Linear(2, 2).parameters()).step(float("nan")),
        "Adam.step: lr must be a finite number >= 0, got nan",
    ),
    (
        "clip_grad_norm(-1)",
        lambda: tc.Adam(tc.Linear(2, 2).parameters()).clip_grad_norm(-1.0),
        "max_norm must be a finite number >= 0",
    ),
    ("clip_grad_norm(nan)", lambda: tc.Adam(tc.Linear(2, 2).parameters()).clip_grad_norm(float("nan")), "max_norm"),
    ("LayerNorm eps nan", lambda: tc.LayerNorm(4, eps=float("nan")), "eps must be a finite number"),
    ("Dropout rate nan", lambda: tc.Dropout(float("nan")), "Dropout: rate must be a number in [0, 1), got nan"),
    (
        "Transformer dropout nan",
        lambda: tc.Transformer(13, 13, dropout=float("nan")),
        "Transformer: dropout must be a number in [0, 1), got nan",
    ),
    (
        "Transformer layer_norm_eps inf",
        lambda: tc.Transformer(13, 13, layer_norm_eps=float("inf")),
        "layer_norm_eps must be a finite number",
    ),
    (
        "warmup_learning_rate scale nan",
        lambda: tc.warmup_learning_rate(1, 8, scale=float("nan")),
        "scale must be a finite number",
    ),
    (
        "masked_cross_entropy label_smoothing nan",
        lambda: tc.masked_cross_entropy(np.zeros((1, 3)), np.ones(1, int), label_smoothing=float("nan")),
        "label_smoothing",
    ),
    (
        "Embedding scale inf",
        lambda: tc.Embedding(4, 2).forward(np.ones((1, 2), int), scale=float("inf")),
        "scale must be a finite number",
    ),
    ("set_num_threads 10**6", lambda: tc.set_num_threads(10**6), "set_num_threads: n must be an integer in [1, 1024]"),
    (
        "Transformer layer_norm_eps 0",
        lambda: small(layer_norm_eps=0.0),
        "Transformer: layer_norm_eps must be a finite number > 0, got 0",
    ),
]:
    err(f"nonsense: {_name}", (lambda call: lambda c: call())(_call), _fragment, raises=ValueError)
