"""Property-based fuzzing (Hypothesis) of the public API: layers (the token layers and stacks
too), the Transformer (forward, training, decoding), Adam, functions, the tokenizer, the
Translator, the options of TrainConfig and Translator against the command line's, sentence
cleaning and data files, with random shapes, dtypes, sizes, values (NaN, infinity, huge,
negative), strings and bytes.

The property is always the same: a clear exception (ValueError, TypeError or RuntimeError, with a
message that is not pybind11's list of signatures) or a correct result (right shape, finite
values, equal to a NumPy reference or to the documented rule where there is one, never an output
for input that had to be refused, and input that is valid never refused) — never a crash, a hang
or a MemoryError. A translation is one line whatever the model emits; an option says the same in
the Python API and on the command line; a data file's lines are all counted.

Every case that reaches the C++ core runs in a worker subprocess, so that a crash fails one
example (which Hypothesis then shrinks) instead of killing the test run. The worker runs with
TRANSFORMER_CPP_MEMORY_LIMIT at 512 MB and one thread: an absurd size can never take the
machine's memory, only be refused. The pure-Python cases (options, cleaning, data files) run in
the test process. The number of examples (4,100 in all) is bounded so that the whole file takes
about half a minute (under 20 s of CPU); TRANSFORMER_CPP_FUZZ_SCALE multiplies it for a longer
session.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import textwrap
import unicodedata

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

# TRANSFORMER_CPP_FUZZ_SCALE=10 runs ten times as many examples (a longer fuzzing session).
# The examples are derandomized (the same every run, so CI is reproducible); set
# TRANSFORMER_CPP_FUZZ_RANDOM=1 to explore new ones.
SCALE = float(os.environ.get("TRANSFORMER_CPP_FUZZ_SCALE", "1"))
FUZZ = settings(
    deadline=None,
    database=None,
    print_blob=True,
    derandomize=os.environ.get("TRANSFORMER_CPP_FUZZ_RANDOM") != "1",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)

# --- the worker -----------------------------------------------------------------------------------

WORKER = r"""
import pickle, struct, sys
import numpy as np
import transformer_cpp as tc

_out = sys.stdout.buffer
sys.stdout = sys.stderr  # nothing may write into the protocol


def _recv():
    head = sys.stdin.buffer.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(sys.stdin.buffer.read(n))


def _send(obj):
    data = pickle.dumps(obj)
    _out.write(struct.pack("<Q", len(data)) + data)
    _out.flush()


def _finite(x):
    if isinstance(x, (tuple, list)):
        return all(_finite(y) for y in x)
    return x is None or bool(np.all(np.isfinite(x)))


def _shape(x):
    if isinstance(x, (tuple, list)):
        return [_shape(y) for y in x]
    return None if x is None else list(np.shape(x))


def layer(name, ctor_args, ctor_kw, fwd_args, fwd_kw):
    obj = getattr(tc, name)(*ctor_args, **ctor_kw)
    out = obj.forward(*fwd_args, **fwd_kw)
    r = {"finite": _finite(out), "shape": _shape(out), "ref": None}
    if name in ("Linear", "LayerNorm", "ReLU"):
        x = np.asarray(fwd_args[0], np.float64)
        p = {k: v.value.astype(np.float64) for k, v in obj.parameters().items()}
        if name == "Linear":
            ref = x @ p["weight"].T + p["bias"]
        elif name == "ReLU":
            ref = np.maximum(x, 0)
        else:  # on x / s with eps / s**2, the same value without overflow for huge rows (1e300)
            with np.errstate(all="ignore"):
                scale = np.max(np.abs(x), axis=-1, keepdims=True)
                scale = np.where((scale > 0) & np.isfinite(scale), scale, 1.0)
                y = x / scale
                mu = y.mean(-1, keepdims=True)
                ref = (y - mu) / np.sqrt(((y - mu) ** 2).mean(-1, keepdims=True) + obj.eps / scale ** 2) \
                    * p["weight"] + p["bias"]
        with np.errstate(all="ignore"):
            r["ref"] = bool(np.all(np.isfinite(ref))) and bool(np.allclose(out, ref, rtol=2e-3, atol=2e-3))
    main = out[0] if isinstance(out, tuple) else out
    back = obj.backward(np.ones_like(main))
    r["back_finite"] = _finite(back)
    r["back_shape"] = _shape(back)
    return r


def function(name, args, kw):
    out = getattr(tc, name)(*args, **kw)
    r = {"finite": _finite(out) if not isinstance(out, float) else bool(np.isfinite(out)), "ref": None}
    if name == "softmax":
        x = np.asarray(args[0], np.float64)
        with np.errstate(all="ignore"):
            m = x.max(-1, keepdims=True)
            # a row holding +inf: the limit, equal weights on its +inf entries; a row of -inf only
            # (fully masked): zeros
            e = np.where(np.isposinf(m), (x == m).astype(np.float64), np.exp(x - m))
            ref = np.where(np.isneginf(m), 0.0, e / e.sum(-1, keepdims=True))
        r["ref"] = bool(np.allclose(out, ref, rtol=1e-3, atol=1e-6, equal_nan=True))
        r["finite"] = _finite(out)
    return r


def model(config, calls):
    m = tc.Transformer(**config)
    results = []
    for method, args, kw in calls:
        if method == "poison":  # one weight becomes NaN or infinite (a damaged checkpoint)
            params = list(m.parameters().values())
            p = params[args[0] % len(params)].value
            p.flat[args[0] % p.size] = args[1]
            results.append({"method": method})
            continue
        if method == "configure_optimizer":
            m.configure_optimizer(*args, **kw)
            results.append({"method": method})
            continue
        out = getattr(m, method)(*args, **kw)
        r = {"method": method, "step": m.step, "nonfinite": m.nonfinite_parameters()}
        if method in ("forward",):
            r.update(finite=_finite(out), shape=_shape(out))
        elif method in ("train_step", "evaluate"):
            r.update(finite=bool(np.isfinite(out[0]) and np.isfinite(out[1])), loss=float(out[0]))
        elif method == "greedy_decode":
            r.update(shape=_shape(out), ids=np.asarray(out).ravel().tolist())
        elif method == "beam_search":
            r.update(n=[len(h) for h in out], ids=[t for hyps in out for h in hyps for t in h[0].tolist()],
                     finite=all(np.isfinite(h[1]) and np.isfinite(h[2]) for hyps in out for h in hyps))
        results.append(r)
    return results


def tokenizer(corpus, vocab, texts, ids):
    tok = tc.SubwordTokenizer.build_from_corpus(corpus, vocab, min_frequency=1)
    again = tc.SubwordTokenizer.from_str(tok.to_str())
    pairs = [(t, tok.decode(tok.encode(t)), again.decode(again.encode(t))) for t in texts]
    decoded = tok.decode(ids) if ids is not None else None
    return {"vocab_size": tok.vocab_size, "pairs": pairs, "decoded": decoded}


def token_layer(name, ctor_args, ctor_kw, tokens, fwd_kw, memory):
    obj = getattr(tc, name)(*ctor_args, **ctor_kw)
    out = obj.forward(tokens, memory, **fwd_kw) if name == "Decoder" else obj.forward(tokens, **fwd_kw)
    r = {"finite": _finite(out), "shape": _shape(out), "ref": None}
    if name == "Embedding":
        w = obj.parameters()["weight"].value.astype(np.float64)
        with np.errstate(all="ignore"):
            ref = w[np.asarray(tokens)] * float(fwd_kw.get("scale", 1.0))
        r["ref"] = bool(np.allclose(out, ref, rtol=1e-5, atol=1e-6))
    back = obj.backward(np.ones_like(out))
    r["back_finite"] = _finite(back)
    r["grads_finite"] = all(bool(np.all(np.isfinite(p.grad))) for p in obj.parameters().values())
    return r


def adam(dtype, kw, clip, lr, bad_grad):
    lin = tc.Linear(4, 3, dtype=dtype)
    lin.forward(np.linspace(-1, 1, 8).reshape(2, 4))
    lin.backward(np.ones((2, 3)))
    if bad_grad is not None:
        lin.parameters()["weight"].grad.flat[1] = bad_grad
    opt = tc.Adam(lin.parameters(), **kw)
    before = {k: p.value.copy() for k, p in lin.parameters().items()}
    r = {"norm": None, "step_error": None}
    try:
        if clip is not None:
            r["norm"] = float(opt.clip_grad_norm(clip))
        opt.step(lr)
    except Exception as exc:  # what it refused must have changed nothing
        r["step_error"] = [type(exc).__name__, str(exc)]
        r["unchanged"] = all(np.array_equal(before[k], p.value) for k, p in lin.parameters().items())
    r["finite"] = all(bool(np.all(np.isfinite(p.value))) for p in lin.parameters().values())
    return r


_TOKENIZER = []


def translate(sentences, src_lang, options, seed, favour):
    if not _TOKENIZER:
        corpus = ["the cat and the dog.", "el gato y el perro.", "¿Qué tal? ¡Muy bien!", "a house, a tree"] * 3
        _TOKENIZER.append(tc.SubwordTokenizer.build_from_corpus(corpus, 300, min_frequency=1))
    tok = _TOKENIZER[0]
    model = tc.Transformer(tok.vocab_size, tok.vocab_size, d_model=8, n_layers=1, n_heads=2, d_ff=16, dropout=0.0,
                           seed=seed)
    if favour is not None:  # a model that prefers one token: any byte, a line break among them
        model.parameters()["output.bias"].value[favour % tok.vocab_size] = 50.0
    translator = tc.Translator(model, tok, tok, src_lang=src_lang)
    return {"out": translator.translate_batch(sentences, **options)}


while True:
    msg = _recv()
    if msg is None:
        break
    fn, args = msg
    try:
        _send(("ok", globals()[fn](*args)))
    except Exception as exc:  # the property is checked in the test process
        _send(("raised", [c.__name__ for c in type(exc).__mro__], str(exc)))
"""


class Worker:
    """A long-lived interpreter running WORKER; one request at a time, restarted after a crash."""

    TIMEOUT = 60.0

    def __init__(self) -> None:
        self.proc = None
        self.log = tempfile.TemporaryFile()

    def start(self) -> None:
        env = dict(
            os.environ,
            TRANSFORMER_CPP_MEMORY_LIMIT=str(512 << 20),
            OMP_NUM_THREADS="1",
            TOKENIZERS_PARALLELISM="false",
            PYTHONWARNINGS="ignore",
        )
        self.log.seek(0)
        self.log.truncate()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
        )

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            ready, _, _ = select.select([self.proc.stdout], [], [], self.TIMEOUT)
            if not ready:
                self.proc.kill()
                raise AssertionError(f"the worker hung for {self.TIMEOUT:.0f} s")
            chunk = os.read(self.proc.stdout.fileno(), n - len(data))
            if not chunk:
                self.proc.wait()
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")[-3000:]
                raise AssertionError(
                    f"the worker crashed (return code {self.proc.returncode}, negative = killed by a signal)\n{err}"
                )
            data += chunk
        return data

    def __call__(self, fn: str, *args):
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        data = pickle.dumps((fn, args))
        try:
            self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
            self.proc.stdin.flush()
            (n,) = struct.unpack("<Q", self._read(8))
            return pickle.loads(self._read(n))
        except BaseException:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc = None
            raise

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()


ALLOWED = ("ValueError", "TypeError", "RuntimeError")  # NonFiniteError is a RuntimeError


def outcome(result):
    """'ok' and the summary, or 'raised' after checking that the exception is a clear one."""
    if result[0] == "ok":
        return "ok", result[1]
    _, mro, message = result
    assert any(a in mro for a in ALLOWED), f"{mro[0]} is not a clear error: {message}"
    assert "MemoryError" not in mro, message
    assert message.strip(), f"{mro[0]} without a message"
    assert "incompatible function arguments" not in message and "Invoked with" not in message, message
    return "raised", message


# --- strategies -----------------------------------------------------------------------------------
#
# A case is valid except, often, for one thing that is broken ("what" below): a size, an input's
# shape or dtype, its values, an option. Breaking one thing at a time keeps about half the cases
# on the success path (whose result is checked) and makes every failure easy to read.

SPECIAL = st.sampled_from([np.nan, np.inf, -np.inf, 1e30, -1e30, 1e300, 3.4e38, 5e-324, -0.0])
BAD_SIZES = st.sampled_from([0, -1, -(2**63), 2**63, 2**70, 10**9, 10**12, 2.5, "8", None, True])
BAD_FLOATS = st.sampled_from([np.nan, np.inf, -np.inf, -1.0, 1e300, 10**400, "0.1", None])


def broken(draw, *things):
    """Which one thing to break in this case (None: nothing, about half the time)."""
    return draw(st.sampled_from([None] * len(things) + list(things)))


@st.composite
def float_array(draw, shape, poison=False):
    """Finite values in [-3, 3]; with `poison`, a few NaN / infinite / huge / tiny ones too."""
    arr = draw(hnp.arrays(np.float64, shape, elements=st.floats(-3, 3)))
    if poison and arr.size:
        for _ in range(draw(st.integers(1, min(3, arr.size)))):
            arr.flat[draw(st.integers(0, arr.size - 1))] = draw(SPECIAL)
    return arr


@st.composite
def bad_input(draw, good_shape):
    """Anything but a finite float array of `good_shape`: another shape or rank, another dtype, a
    string, None, nested lists."""
    shape = draw(st.one_of(st.just(good_shape), hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)))
    arr = draw(float_array(shape))
    kind = draw(st.sampled_from(["float32", "float16", "list", "int64", "bool", "complex64", "str", "none", "object"]))
    with np.errstate(all="ignore"):
        if kind in ("float32", "float16", "complex64"):
            return arr.astype(kind)
        if kind == "int64":
            return arr.astype(np.int64)
        if kind == "bool":
            return arr > 0
        if kind == "list":
            return arr.tolist()
        if kind == "object":
            return arr.astype(object)
        return None if kind == "none" else "not an array"


def nonfinite(x) -> bool:
    """Whether a float input holds NaN or infinity (which must be refused)."""
    try:
        a = np.asarray(x)
    except Exception:
        return False
    return a.dtype.kind == "f" and not bool(np.all(np.isfinite(a)))


# --- layers ---------------------------------------------------------------------------------------


@st.composite
def layer_case(draw):
    name = draw(
        st.sampled_from(
            [
                "Linear",
                "LayerNorm",
                "ReLU",
                "Dropout",
                "FeedForward",
                "MultiHeadAttention",
                "EncoderLayer",
                "DecoderLayer",
                "ScaledDotProductAttention",
            ]
        )
    )
    what = broken(draw, "size", "input", "values", "option")
    d = draw(st.sampled_from([4, 8]))
    b, t, s = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    heads = draw(st.sampled_from([1, 2]))
    kw = {"dtype": draw(st.sampled_from(["float32", "float64"]))}
    fwd_kw = {}
    args = {
        "Linear": [d, draw(st.sampled_from([3, 6]))],
        "LayerNorm": [d],
        "ReLU": [],
        "ScaledDotProductAttention": [],
        "Dropout": [draw(st.sampled_from([0.0, 0.1, 0.5]))],
        "FeedForward": [d, 16],
        "MultiHeadAttention": [d, heads],
        "EncoderLayer": [d, heads, 8],
        "DecoderLayer": [d, heads, 8],
    }[name]
    if what == "size" and args and not isinstance(args[0], float):
        args[draw(st.integers(0, len(args) - 1))] = draw(st.one_of(BAD_SIZES, st.just(3)))  # 3: heads do not divide
    if name in ("Dropout", "FeedForward"):
        fwd_kw["training"] = draw(st.booleans())
    if what == "option" and name in ("LayerNorm", "Dropout", "FeedForward", "EncoderLayer"):
        bad = draw(BAD_FLOATS)
        if name == "LayerNorm":
            kw["eps"] = bad
        else:
            kw["dropout" if name != "Dropout" else "rate"] = bad
            if name == "Dropout":
                args = []

    shapes = [(b, t, d)]
    if name == "DecoderLayer" or (name == "MultiHeadAttention" and draw(st.booleans())):
        shapes.append((b, s, d))
    if name == "ScaledDotProductAttention":
        shapes += [(b, s, d), (b, s, d)]
    inputs = [draw(float_array(sh)) for sh in shapes]
    if what in ("input", "values"):
        i = draw(st.integers(0, len(inputs) - 1))
        inputs[i] = draw(bad_input(shapes[i])) if what == "input" else draw(float_array(shapes[i], poison=True))
    fwd = inputs[:1] if name == "MultiHeadAttention" else inputs
    if name == "MultiHeadAttention" and len(inputs) > 1:
        fwd_kw["memory"] = inputs[1]
    if name in ("MultiHeadAttention", "EncoderLayer", "ScaledDotProductAttention") and draw(st.booleans()):
        tk = shapes[-1][1]
        mask_shape = draw(
            st.sampled_from([(b, t, tk), (t, tk), (b, 1, tk)] + ([(3,), (b, t + 1, tk)] if what == "option" else []))
        )
        fwd_kw["mask"] = draw(hnp.arrays(bool, mask_shape))
    return name, args, kw, fwd, fwd_kw


@settings(FUZZ, max_examples=int(800 * SCALE))
@given(case=layer_case())
def test_fuzz_layers(worker, case):
    name, args, kw, fwd, fwd_kw = case
    status, info = outcome(worker("layer", name, args, kw, fwd, fwd_kw))
    event(f"{name} {status}")
    if status == "raised":
        return
    floats = [a for a in fwd + [fwd_kw.get("memory")] if a is not None]
    assert not any(nonfinite(a) for a in floats), f"{name} accepted a non-finite input: {info}"
    assert info["finite"], f"{name} gave a non-finite output without an error: {info}"
    assert info["back_finite"], f"{name}.backward gave a non-finite gradient: {info}"
    assert info["ref"] in (None, True), f"{name} differs from the NumPy reference: {info}"


# --- functions ------------------------------------------------------------------------------------


def some_size(draw, *good):
    return draw(st.one_of(st.sampled_from(good), st.sampled_from(good), st.sampled_from(good), BAD_SIZES))


@st.composite
def function_case(draw):
    name = draw(
        st.sampled_from(
            [
                "softmax",
                "masked_cross_entropy",
                "masked_accuracy",
                "positional_encoding",
                "look_ahead_mask",
                "padding_mask",
                "warmup_learning_rate",
            ]
        )
    )
    if name == "softmax":
        shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=5))
        return name, [draw(st.one_of(float_array(shape), float_array(shape, poison=True), bad_input(shape)))], {}
    if name in ("masked_cross_entropy", "masked_accuracy"):
        n, v = draw(st.integers(1, 4)), draw(st.integers(1, 6))
        logits = draw(
            st.one_of(float_array((n, v)), float_array((n, v)), float_array((n, v), poison=True), bad_input((n, v)))
        )
        targets = draw(
            st.one_of(
                hnp.arrays(np.int64, (n,), elements=st.integers(0, v - 1)),
                hnp.arrays(np.int64, (n,), elements=st.integers(-2, v + 1)),
                st.just("x"),
            )
        )
        kw = {}
        if name == "masked_cross_entropy":
            kw["label_smoothing"] = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0, -0.1, np.nan]))
        return name, [logits, targets], kw
    if name == "positional_encoding":
        return (
            name,
            [some_size(draw, 1, 7, 50), some_size(draw, 2, 8)],
            {"layout": draw(st.sampled_from(["interleaved", "concatenated", "interleaved", "sideways", 3]))},
        )
    if name == "look_ahead_mask":
        return name, [some_size(draw, 1, 5, 100)], {}
    if name == "padding_mask":
        return name, [draw(st.one_of(hnp.arrays(np.int64, (2, 3), elements=st.integers(0, 3)), bad_input((2, 3))))], {}
    return (
        name,
        [some_size(draw, 1, 100), some_size(draw, 8, 512)],
        {"warmup": some_size(draw, 1, 4000), "scale": draw(st.sampled_from([1.0, 0.5, 1.0, np.nan, -1.0]))},
    )


@settings(FUZZ, max_examples=int(400 * SCALE))
@given(case=function_case())
def test_fuzz_functions(worker, case):
    name, args, kw = case
    status, info = outcome(worker("function", name, args, kw))
    event(f"{name} {status}")
    if status == "raised":
        return
    if name in ("masked_cross_entropy", "masked_accuracy", "warmup_learning_rate", "positional_encoding"):
        assert info["finite"], f"{name} returned a non-finite value: {info}"
        assert not any(nonfinite(v) for v in kw.values()), f"{name} accepted the option {kw}"
    if name in ("masked_cross_entropy", "masked_accuracy"):
        # rows of padding targets (0) are ignored; a NaN in a row that counts must be refused
        logits, targets = np.asarray(args[0], np.float64), np.asarray(args[1])
        assert not np.isnan(logits[targets != 0]).any(), f"{name} accepted NaN logits in a row that counts"
    if name == "softmax":
        assert info["ref"], f"softmax differs from NumPy: {info}"


# --- the Transformer ------------------------------------------------------------------------------


@st.composite
def bad_tokens(draw, vocab, shape):
    """Token ids that must be refused: out of range, negative, float, wrong rank, empty, a string,
    an unsigned id that wraps to a negative int64."""
    good = draw(hnp.arrays(np.int64, shape, elements=st.integers(0, vocab - 1)))
    kind = draw(st.sampled_from(["range", "negative", "float", "rank", "empty", "str", "uint64"]))
    if kind in ("range", "negative"):
        good.flat[draw(st.integers(0, good.size - 1))] = vocab + draw(st.integers(0, 3)) if kind == "range" else -1
        return good
    if kind == "float":
        return good.astype(np.float64)
    if kind == "rank":
        return good.ravel()
    if kind == "empty":
        return good[:, :0]
    if kind == "uint64":
        out = good.astype(np.uint64)
        out.flat[0] = np.uint64(2**63 + 1)
        return out
    return "1 2 3"


CONFIG_FIELDS = [
    "src_vocab_size",
    "tgt_vocab_size",
    "d_model",
    "n_layers",
    "n_heads",
    "d_ff",
    "max_length",
    "dropout",
    "layer_norm_eps",
]


@st.composite
def model_case(draw):
    sv, tv = draw(st.sampled_from([11, 13])), draw(st.sampled_from([11, 13]))
    config = dict(
        src_vocab_size=sv,
        tgt_vocab_size=tv,
        d_model=draw(st.sampled_from([4, 8])),
        n_layers=draw(st.sampled_from([1, 2])),
        n_heads=draw(st.sampled_from([1, 2])),
        d_ff=8,
        dropout=draw(st.sampled_from([0.0, 0.1])),
        max_length=draw(st.sampled_from([4, 16])),
        pre_norm=draw(st.booleans()),
        share_embeddings=draw(st.booleans()),
        dtype=draw(st.sampled_from(["float32", "float64"])),
        layer_norm_eps=1e-6,
        precision=draw(st.sampled_from(["float32", "float32", "bf16"])),
    )
    what = broken(draw, "config", "tokens", "decode", "optimizer", "weights")
    if what == "config":
        field = draw(st.sampled_from(CONFIG_FIELDS + ["precision"]))
        if field == "precision":  # bf16 with float64 is refused too
            config[field] = draw(st.sampled_from(["BF16", "fp8", "", None, 16]))
        else:
            config[field] = draw(
                BAD_FLOATS if field in ("dropout", "layer_norm_eps") else st.one_of(BAD_SIZES, st.just(3))
            )
    b, s, t = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    arrays = {
        "src": draw(hnp.arrays(np.int64, (b, s), elements=st.integers(0, sv - 1))),
        "tgt_in": draw(hnp.arrays(np.int64, (b, t), elements=st.integers(0, tv - 1))),
        "tgt_out": draw(hnp.arrays(np.int64, (b, t), elements=st.integers(0, tv - 1))),
    }
    if what == "tokens":
        key = draw(st.sampled_from(list(arrays)))
        arrays[key] = draw(bad_tokens(sv if key == "src" else tv, arrays[key].shape))
    src, tgt_in, tgt_out = arrays["src"], arrays["tgt_in"], arrays["tgt_out"]
    calls = []
    if what == "optimizer":
        field, value = draw(
            st.sampled_from(
                [
                    ("fixed_lr", np.nan),
                    ("fixed_lr", -1.0),
                    ("fixed_lr", np.inf),
                    ("clip_norm", -1.0),
                    ("clip_norm", np.inf),
                    ("warmup", 0),
                    ("label_smoothing", 1.0),
                    ("lr_scale", 0.0),
                    ("eps", np.nan),
                    ("total_steps", -1),
                    ("beta1", 1.0),
                    ("warmup", 2**70),
                ]
            )
        )
        calls.append(("configure_optimizer", [], {field: value}))
    elif draw(st.booleans()):
        calls.append(
            (
                "configure_optimizer",
                [],
                {"fixed_lr": draw(st.sampled_from([0.0, 1e-3, 1e30])), "clip_norm": draw(st.sampled_from([0.0, 1.0]))},
            )
        )
    if what == "weights":
        calls.append(("poison", [draw(st.integers(0, 1000)), draw(st.sampled_from([np.nan, np.inf, -np.inf]))], {}))
    for _ in range(draw(st.integers(1, 3))):
        method = draw(
            st.sampled_from(["forward", "evaluate", "train_step", "train_step", "greedy_decode", "beam_search"])
        )
        if method == "forward":
            calls.append((method, [src, tgt_in], {"training": draw(st.booleans())}))
        elif method in ("evaluate", "train_step"):
            calls.append((method, [src, tgt_in, tgt_out], {}))
        else:
            start, end, kw = 1, 2, {"max_length": draw(st.sampled_from([1, 3, 6]))}
            if method == "beam_search":
                kw.update(
                    beam_size=draw(st.sampled_from([1, 2, 3, 1024])),
                    n_best=draw(st.sampled_from([1, 2])),
                    length_penalty=draw(st.sampled_from([0.0, 0.6, 2.0])),
                )
            if what == "decode":
                field = draw(
                    st.sampled_from(
                        ["start", "end", "max_length"]
                        + (["beam_size", "length_penalty", "n_best"] if method == "beam_search" else [])
                    )
                )
                bad = (
                    draw(BAD_FLOATS)
                    if field == "length_penalty"
                    else draw(st.one_of(BAD_SIZES, st.just(tv), st.just(1025) if field == "beam_size" else st.just(-1)))
                )
                if field == "start":
                    start = bad
                elif field == "end":
                    end = bad
                else:
                    kw[field] = bad
            calls.append((method, [src, start, end], kw))
    return config, calls


def valid_tokens(a, vocab) -> bool:
    return (
        isinstance(a, np.ndarray)
        and a.dtype.kind in "iu"
        and a.ndim == 2
        and a.size > 0
        and int(a.min()) >= 0
        and int(a.max()) < vocab
    )


def good_int(v, lo, hi) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


@settings(FUZZ, max_examples=int(600 * SCALE))
@given(case=model_case())
def test_fuzz_transformer(worker, case):
    config, calls = case
    status, info = outcome(worker("model", config, calls))
    event(f"{status}: " + " ".join(c[0] for c in calls))
    if status == "raised":
        return
    sv, tv = config["src_vocab_size"], config["tgt_vocab_size"]
    assert all(good_int(config[k], 1, 64) for k in CONFIG_FIELDS[:7]), f"accepted the configuration {config}"
    assert config["d_model"] % config["n_heads"] == 0 and 0 <= config["dropout"] < 1, config
    assert config["precision"] == "float32" or (config["precision"] == "bf16" and config["dtype"] == "float32"), config
    assert not any(c[0] == "poison" for c in calls), "ran with non-finite weights"
    for (method, args, kw), r in zip(calls, info):
        if method == "configure_optimizer":
            assert all(np.isfinite(v) and v >= 0 for v in kw.values()), f"configure_optimizer accepted {kw}"
            assert kw.get("warmup", 1) >= 1 and kw.get("label_smoothing", 0) < 1 and kw.get("beta1", 0) < 1
            assert kw.get("lr_scale", 1) > 0 and kw.get("eps", 1) > 0 and kw.get("warmup", 1) < 2**63, kw
            continue
        src = args[0]
        assert valid_tokens(src, sv), f"{method} accepted source ids {src!r}"
        assert r["nonfinite"] == [], f"{method} left non-finite weights {r['nonfinite']}"
        if method == "forward":
            assert valid_tokens(args[1], tv) and r["finite"], f"forward: {r}"
            assert r["shape"] == [src.shape[0], args[1].shape[1], tv], r
        elif method in ("evaluate", "train_step"):
            assert valid_tokens(args[1], tv) and valid_tokens(args[2], tv), f"{method} accepted bad ids"
            assert r["finite"], f"{method} returned a non-finite loss without an error: {r}"
        else:
            start, end = args[1], args[2]
            assert good_int(start, 1, tv - 1) and good_int(end, 1, tv - 1), f"{method} accepted ids {start}, {end}"
            assert good_int(kw["max_length"], 1, 64), f"{method} accepted max_length {kw['max_length']}"
            assert all(0 <= i < tv for i in r["ids"]), f"{method} produced ids out of range: {r}"
            if method == "greedy_decode":
                assert r["shape"][0] == src.shape[0] and r["shape"][1] <= kw["max_length"], r
            else:
                assert good_int(kw["beam_size"], 1, 1024), f"beam_search accepted beam_size {kw['beam_size']}"
                assert good_int(kw["n_best"], 1, kw["beam_size"]), f"beam_search accepted n_best {kw['n_best']}"
                assert np.isfinite(kw["length_penalty"]) and kw["length_penalty"] >= 0, kw
                assert r["n"] == [kw["n_best"]] * src.shape[0] and r["finite"], f"beam_search: {r}"


# --- the tokenizer --------------------------------------------------------------------------------

# text holding a lone surrogate (what bytes that are not UTF-8 become with surrogateescape)
SURROGATES = st.builds(
    lambda a, c, b: a + c + b,
    st.text(max_size=5),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    st.text(max_size=5),
)
NICE_TEXT = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        ["<end>", "a <pad> b", "<start><unk>", "¿Qué tal?", "e\u0301", "\x00\t\n", "  two  spaces ", "ﬁ Å"]
    ),
)


@st.composite
def tokenizer_case(draw):
    corpus = draw(st.lists(NICE_TEXT, min_size=1, max_size=4).filter(lambda c: any(x.strip() for x in c)))
    vocab = draw(st.sampled_from([260, 300, 1000, 2**20]))
    texts = draw(st.lists(NICE_TEXT, max_size=4))
    ids = draw(st.one_of(st.none(), st.lists(st.integers(0, 259), max_size=6)))
    what = broken(draw, "corpus", "vocab", "text", "ids")
    if what == "corpus":
        corpus = draw(
            st.one_of(
                st.just("one string"),
                st.just([]),
                st.just(["", "  "]),
                st.lists(st.one_of(NICE_TEXT, st.integers(), st.none(), SURROGATES), min_size=1, max_size=3),
            )
        )
    elif what == "vocab":
        vocab = draw(st.sampled_from([0, -5, 4, 5, 9, 20, 2**20 + 1, 10**10, 2**64, 2.5, "300", None]))
    elif what == "text":
        texts = draw(st.lists(st.one_of(NICE_TEXT, SURROGATES, st.integers(), st.none()), min_size=1, max_size=3))
    elif what == "ids":
        ids = draw(
            st.one_of(
                st.lists(st.integers(-5, 10**6), min_size=1, max_size=4),
                st.lists(st.one_of(st.floats(), st.text(max_size=2), st.booleans()), min_size=1, max_size=3),
                st.just("abc"),
                st.just(5),
            )
        )
    return corpus, vocab, texts, ids


@settings(FUZZ, max_examples=int(300 * SCALE))
@given(case=tokenizer_case())
def test_fuzz_tokenizer(worker, case):
    corpus, vocab, texts, ids = case
    status, info = outcome(worker("tokenizer", corpus, vocab, texts, ids))
    event(f"tokenizer {status}")
    if status == "raised":
        return
    assert good_int(vocab, 5, 2**20), f"built a tokenizer with target_vocab_size {vocab!r}"
    assert info["vocab_size"] <= vocab
    for text, decoded, reloaded in info["pairs"]:
        assert isinstance(text, str) and decoded == reloaded, "a saved and reloaded tokenizer decodes differently"
        if vocab >= 260:  # every byte is in the vocabulary: NFC text round-trips exactly
            assert decoded == unicodedata.normalize("NFC", text), (text, decoded)
    if ids is not None:
        assert all(good_int(i, 0, info["vocab_size"] - 1) for i in ids), f"decoded ids {ids}"


# --- token layers: embeddings, encoder and decoder stacks ------------------------------------------


@st.composite
def token_layer_case(draw):
    name = draw(st.sampled_from(["Embedding", "PositionalEmbedding", "Encoder", "Decoder"]))
    what = broken(draw, "size", "tokens", "memory", "option")
    v, d = draw(st.sampled_from([11, 13])), draw(st.sampled_from([4, 8]))
    b, t, s = draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 4))
    max_length = draw(st.sampled_from([2, 8, 64]))  # the positional table is a cache: shorter than t grows
    kw = {"dtype": draw(st.sampled_from(["float32", "float64"]))}
    args = {
        "Embedding": [v, d],
        "PositionalEmbedding": [v, d, max_length],
        "Encoder": [v, d, 1, 2, 8, 0.0, max_length],
        "Decoder": [v, d, 1, 2, 8, 0.0, max_length],
    }[name]
    if what == "size":
        sizes = [i for i, a in enumerate(args) if not isinstance(a, float)]
        args[draw(st.sampled_from(sizes))] = draw(st.one_of(BAD_SIZES, st.just(3)))  # 3: heads do not divide
    tokens = draw(hnp.arrays(np.int64, (b, t), elements=st.integers(0, v - 1)))
    if what == "tokens":
        tokens = draw(bad_tokens(v, (b, t)))
    fwd_kw = {}
    if name == "Embedding" and draw(st.booleans()):
        fwd_kw["scale"] = draw(
            st.sampled_from([1.0, 2.5, 0.0, -1.0] + ([np.nan, np.inf, 1e300, "2"] if what == "option" else []))
        )
    if name in ("Encoder", "Decoder"):
        fwd_kw["training"] = draw(st.booleans())
        if what == "option":
            args[5] = draw(BAD_FLOATS)  # dropout
    memory = None
    if name == "Decoder":
        memory = draw(float_array((b, s, d), poison=what == "memory"))
        if what == "memory" and draw(st.booleans()):
            memory = draw(bad_input((b, s, d)))
        if draw(st.booleans()):
            shape = draw(st.sampled_from([(b, s)] + ([(b, s + 1), (s,)] if what == "option" else [])))
            fwd_kw["source_padding"] = draw(hnp.arrays(bool, shape))
    return name, args, kw, tokens, fwd_kw, memory


@settings(FUZZ, max_examples=int(300 * SCALE))
@given(case=token_layer_case())
def test_fuzz_token_layers(worker, case):
    name, args, kw, tokens, fwd_kw, memory = case
    status, info = outcome(worker("token_layer", name, args, kw, tokens, fwd_kw, memory))
    event(f"{name} {status}")
    if status == "raised":
        return
    v, d = args[0], args[1]
    assert good_int(v, 1, 64) and good_int(d, 1, 64), f"{name} accepted the sizes {args}"
    assert all(good_int(a, 1, 64) for a in args[2:] if not isinstance(a, float)), f"{name} accepted {args}"
    if name in ("Encoder", "Decoder"):
        assert d % args[3] == 0 and 0 <= args[5] < 1, f"{name} accepted {args}"
    empty = isinstance(tokens, np.ndarray) and tokens.ndim == 2 and tokens.dtype.kind in "iu" and tokens.size == 0
    assert valid_tokens(tokens, v) or (empty and "Embedding" in name), f"{name} accepted the token ids {tokens!r}"
    if name == "Decoder":  # a list or another real dtype of the right shape is taken as it is (like Linear's)
        m = np.asarray(memory) if memory is not None else None
        assert (
            m is not None
            and m.dtype.kind in "fiub"
            and m.ndim == 3
            and m.shape[0] == tokens.shape[0]
            and m.shape[1] > 0
            and m.shape[2] == d
            and not nonfinite(m)
        ), f"Decoder accepted the memory {memory!r}"
    scale = fwd_kw.get("scale", 1.0)
    assert isinstance(scale, float) and np.isfinite(scale), f"Embedding accepted scale {scale!r}"
    assert info["shape"] == [tokens.shape[0], tokens.shape[1], d], info
    assert info["finite"] and info["back_finite"] and info["grads_finite"], f"{name}: non-finite values {info}"
    assert info["ref"] in (None, True), f"Embedding differs from weight[tokens] * scale: {info}"


# --- Adam -----------------------------------------------------------------------------------------


@st.composite
def adam_case(draw):
    what = broken(draw, "beta", "eps", "lr", "clip", "grad")
    kw = {}
    if what == "beta":
        kw[draw(st.sampled_from(["beta1", "beta2"]))] = draw(
            st.sampled_from([1.0, -0.1, np.nan, np.inf, 0.0, 0.999, "0.9", None])
        )
    if what == "eps":
        kw["eps"] = draw(st.sampled_from([0.0, -1e-9, np.nan, np.inf, 1e-300, 1e300, "1e-9"]))
    lr = draw(st.sampled_from([1e-3, 0.0, 1.0]))
    if what == "lr":
        lr = draw(st.sampled_from([np.nan, np.inf, -1e-3, 1e30, 1e300, 10**400, "0.1", None]))
    clip = draw(st.sampled_from([None, None, 1.0, 0.0, 1e-30]))
    if what == "clip":
        clip = draw(BAD_FLOATS)
    bad_grad = draw(SPECIAL) if what == "grad" else None
    return draw(st.sampled_from(["float32", "float64"])), kw, clip, lr, bad_grad


@settings(FUZZ, max_examples=int(200 * SCALE))
@given(case=adam_case())
def test_fuzz_adam(worker, case):
    dtype, kw, clip, lr, bad_grad = case
    status, info = outcome(worker("adam", dtype, kw, clip, lr, bad_grad))
    event(f"Adam {status}")
    if status == "raised":
        return
    assert all(isinstance(kw[b], float) and 0 <= kw[b] < 1 for b in ("beta1", "beta2") if b in kw), (
        f"Adam accepted {kw}"
    )
    assert "eps" not in kw or (isinstance(kw["eps"], float) and 0 < kw["eps"] < np.inf), f"Adam accepted {kw}"
    with np.errstate(all="ignore"):
        stored = None if bad_grad is None else np.asarray(bad_grad).astype(dtype)  # 1e300 is infinite in float32
    if info["step_error"] is not None:  # refused, naming why, and nothing changed
        kind, message = info["step_error"]
        assert kind in ("ValueError", "TypeError", "NonFiniteError"), info
        assert message.strip() and "Invoked with" not in message, info
        assert info["unchanged"], f"a refused step changed the weights: {info}"
        return
    assert info["finite"], f"Adam made the weights non-finite without an error: {info}"
    assert isinstance(lr, float) and 0 <= lr < np.inf, f"Adam.step accepted the learning rate {lr!r}"
    assert clip is None or (isinstance(clip, float) and 0 <= clip < np.inf), f"clip_grad_norm accepted {clip!r}"
    assert stored is None or np.isfinite(stored), f"Adam stepped over the gradient {bad_grad!r}"


# --- the Translator -------------------------------------------------------------------------------

SENTENCE = st.one_of(
    NICE_TEXT,
    st.text(max_size=30),
    st.sampled_from(["", "   ", "a\nb", "x\r\ny", "\u2028", "Mr. Smith.", "U.S.A. is big.", "¿Vienes?\t¡Sí!"]),
)
GOOD_OPTIONS = {
    "beam_size": [1, 1, 2, 3],
    "length_penalty": [0.0, 0.6, 2.0],
    "max_output_tokens": [None, 1, 4],
    "batch_size": [1, 2, 64],
}


@st.composite
def translate_case(draw):
    what = broken(draw, "sentence", "sentences", "option", "language")
    sentences = draw(st.lists(SENTENCE, max_size=4))
    if what == "sentence":
        sentences.insert(
            draw(st.integers(0, len(sentences))),
            draw(st.one_of(SURROGATES, st.integers(), st.none(), st.binary(max_size=4))),
        )
    elif what == "sentences":
        sentences = draw(st.sampled_from(["one string", None, 5]))
    options = {name: draw(st.sampled_from(good)) for name, good in GOOD_OPTIONS.items() if draw(st.booleans())}
    if what == "option":
        name = draw(st.sampled_from(list(GOOD_OPTIONS) + ["return_attention"]))
        if name == "length_penalty":
            options[name] = draw(st.one_of(BAD_FLOATS, st.just(10.5)))
        elif name == "return_attention":
            options[name] = draw(st.sampled_from(["yes", 1, 0, None]))
        else:
            options[name] = draw(st.one_of(BAD_SIZES, st.just(10**6 if name != "beam_size" else 1025)))
    src_lang = draw(st.sampled_from(["en", "es", None]))
    if what == "language":
        src_lang = draw(st.sampled_from(["klingon", 3, ""]))
    return sentences, src_lang, options, draw(st.integers(0, 3)), draw(st.one_of(st.none(), st.integers(0, 299)))


def valid_option(name, value) -> bool:
    if name == "return_attention":
        return isinstance(value, bool)
    if name == "length_penalty":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 10
    if name == "max_output_tokens" and value is None:
        return True
    high = {"beam_size": 1024, "max_output_tokens": 100_000, "batch_size": 100_000}[name]
    return good_int(value, 1, high)


@settings(FUZZ, max_examples=int(300 * SCALE))
@given(case=translate_case())
def test_fuzz_translator(worker, case):
    """Any sentences and options: a clear error, or one line of text per sentence (whatever the
    model emits: a model that prefers any one token, a line break among them, too); valid input
    is never refused."""
    sentences, src_lang, options, seed, favour = case
    status, info = outcome(worker("translate", sentences, src_lang, options, seed, favour))
    event(f"translate {status}")
    valid = (
        isinstance(sentences, list)
        and all(isinstance(s, str) and not any("\ud800" <= c <= "\udfff" for c in s) for s in sentences)
        and src_lang in ("en", "es", None)
        and all(valid_option(k, v) for k, v in options.items())
    )
    if status == "raised":
        assert not valid, f"refused valid input: {info}"
        return
    assert valid, f"translated input that had to be refused: {sentences!r} {src_lang!r} {options}"
    out = info["out"]
    assert isinstance(out, list) and len(out) == len(sentences), out
    for text in out:
        assert isinstance(text, str) and text == " ".join(text.split()), f"not one clean line: {text!r}"


# --- options: the Python API and the command line say the same --------------------------------------

TRAIN_FLAGS = {
    "epochs": "--epochs",
    "time_budget": "--time-budget",
    "threads": "--threads",
    "batch_size": "--batch-size",
    "max_tokens": "--max-tokens",
    "warmup": "--warmup",
    "lr_scale": "--lr-scale",
    "fixed_lr": "--fixed-lr",
    "label_smoothing": "--label-smoothing",
    "clip_norm": "--clip-norm",
    "beta1": "--beta1",
    "beta2": "--beta2",
    "adam_eps": "--adam-eps",
    "seed": "--seed",
    "log_every": "--log-every",
    "keep_checkpoints": "--keep-checkpoints",
    "val_bleu_sentences": "--val-bleu-sentences",
    "average_last": "--average-last",
    "patience": "--patience",
    "accumulate": "--accumulate",
}
ANY_VALUE = st.one_of(
    st.integers(-10, 10**7),
    st.integers(-(2**80), 2**80),
    st.sampled_from([0, 1, -1, 2**63 - 1, 2**63, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-2, 2),
    st.sampled_from([True, False, None, "1", "yes", b"1", [1], np.int32(7), np.float32(0.5)]),
)


@settings(FUZZ, max_examples=int(600 * SCALE))
@given(owner=st.sampled_from(["TrainConfig", "Translator"]), data=st.data())
def test_fuzz_options_api_and_command_line(owner, data):
    """Every numeric setting of TrainConfig and decoding option of Translator, any value: refused
    with a message naming it, or taken exactly (no rounding 2.7 to 2, no string read as a
    number) and within its documented range; the command line's option, given the same number,
    refuses it or takes it alike, with the same message."""
    import contextlib
    import io
    import math

    from transformer_cpp import cli
    from transformer_cpp.training import TrainConfig
    from transformer_cpp.translate import Translator

    cls = TrainConfig if owner == "TrainConfig" else Translator
    # the numbers and flags (Limit.flag()); a choice's values are the command line's own choices
    names = sorted(n for n, limit in cls.LIMITS.items() if limit.kind != "choice")
    name = data.draw(st.sampled_from(names))
    value = data.draw(ANY_VALUE)
    event(f"{owner}.{name}")
    api_error = None
    try:
        got = TrainConfig(**{name: value}).__dict__[name] if owner == "TrainConfig" else Translator.check(name, value)
    except (ValueError, TypeError) as exc:
        api_error = str(exc)
        assert api_error.startswith(f"{owner}: ") and name in api_error, api_error
    if api_error is None:
        if cls.LIMITS[name].kind == "flag":
            assert isinstance(value, (bool, np.bool_)) and got is bool(value), (name, value, got)
        elif value is None:
            assert name in ("threads", "max_output_tokens") and got is None, (name, got)
        else:
            limit = cls.LIMITS[name]
            assert not isinstance(value, (bool, str, bytes, list)), f"{owner} took {name}={value!r}"
            exact = value if limit.integer else float(value)  # an int for a float setting: the nearest float
            assert type(got) is (int if limit.integer else float) and got == exact and math.isfinite(got), (value, got)
            assert got > limit.low if limit.low_open else got >= limit.low, (name, got)
            assert got < limit.high if limit.high_open else got <= limit.high, (name, got)
    if owner == "TrainConfig":
        flag = TRAIN_FLAGS.get(name)
    else:
        flag = {
            "beam_size": "--beam-size",
            "length_penalty": "--length-penalty",
            "max_output_tokens": "--max-output-tokens",
            "batch_size": "--batch-size",
            "sampling_topk": "--sampling-topk",
            "sampling_topp": "--sampling-topp",
            "sampling_temperature": "--sampling-temperature",
            "seed": "--seed",
        }.get(name)  # a flag (force_end) is --force-end / --no-force-end on the command line
    integer = cls.LIMITS[name].integer
    if (
        flag is None
        or isinstance(value, (bool, np.bool_))
        or not isinstance(value, (int, float))
        or (integer and not isinstance(value, int))
        or (not integer and not isinstance(value, float))
        or (name == "epochs" and value == 0)
    ):  # the command line asks for at least one epoch
        return
    # the option, then one the command line always refuses: nothing runs whether or not it takes the
    # first; argparse converts options in order, so the error names the first one it refuses
    if owner == "TrainConfig":
        argv, sentinel = ["train", f"{flag}={value!r}", "--d-model=0"], "argument --d-model: "
    else:
        argv, sentinel = ["translate", "--model", "m", f"{flag}={value!r}", "--threads=0"], "argument --threads: "
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit):
        cli.main(argv)
    refused = err.getvalue().strip().split(" error: ", 1)[1]
    refused = refused[: refused.rindex(" (see ")]  # the parser's pointer to --help, after the message
    cli_error = None if refused.startswith(sentinel) else refused
    if cli_error is not None:
        assert cli_error.startswith(f"argument {flag}: "), cli_error
        cli_error = cli_error[len(f"argument {flag}: ") :]
    assert cli_error == api_error, f"{flag} {value!r}: the command line says {cli_error!r}, the API {api_error!r}"


# --- text in: cleaning and data files ---------------------------------------------------------------


@settings(FUZZ, max_examples=int(300 * SCALE))
@given(
    text=st.one_of(st.text(max_size=40), NICE_TEXT, SURROGATES, st.integers(), st.none(), st.binary(max_size=4)),
    lang=st.sampled_from(["en", "es", "English", "klingon", None]),
)
def test_fuzz_clean_sentence(text, lang):
    """Any text: one stripped line with single spaces; text that is not valid Unicode, a value
    that is not text or an unknown language is a clear error."""
    from transformer_cpp.text import clean_sentence

    try:
        out = clean_sentence(text, lang) if lang is not None else clean_sentence(text)
    except (TypeError, ValueError) as exc:
        event("clean_sentence raised")
        assert str(exc).strip(), type(exc)
        assert not isinstance(text, str) or lang == "klingon" or any("\ud800" <= c <= "\udfff" for c in text), exc
        return
    event("clean_sentence ok")
    assert isinstance(text, str) and lang != "klingon"
    assert isinstance(out, str) and out == " ".join(out.split()), repr(out)


TEXT_PIECES = [
    b"The cat.",
    b"El gato.",
    b"a",
    b" ",
    b"  ",
    "\u00e9".encode(),
    "\u00bfQu\u00e9?".encode(),
    b"\x00",
    "\u2028".encode(),
    b"CC-BY 2.0",
]
BAD_PIECES = [b"\xe9", b"\xff", b"\x81", b"\x85", b"\xc3", b"\xef\xbb\xbf", b"\r", b"\t"]
LINE_ENDS = [b"\n", b"\n", b"\r\n", b"\r", b"\n\n", b"\r\r\n"]


@st.composite
def pairs_file(draw):
    """Lines of 'field<TAB>field[<TAB>attribution]' in UTF-8 with any line ends, some with a piece
    that is not valid UTF-8 (or a stray tab or CR), some without a tab or a side."""

    def field():
        parts = draw(st.lists(st.sampled_from(TEXT_PIECES), max_size=3))
        if draw(st.integers(0, 9)) == 0:
            parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from(BAD_PIECES)))
        return b"".join(parts)

    lines = []
    for _ in range(draw(st.integers(0, 8))):
        tabs = draw(st.sampled_from([b"\t", b"\t", b"\t", b"", b"\t\t"]))
        lines.append(
            field()
            + tabs
            + field()
            + (b"\t" + field() if draw(st.booleans()) else b"")
            + draw(st.sampled_from(LINE_ENDS))
        )
    data = b"".join(lines)
    if data and draw(st.booleans()):
        data = data.rstrip(b"\r\n")  # no line end after the last line
    if draw(st.integers(0, 9)) == 0:
        data = b"\xef\xbb\xbf" + data  # a byte-order mark
    return data


def _expected_load(data: bytes, encoding: str, errors: str):
    """What load_tatoeba must make of ``data``: (kept pairs, undecodable line numbers), by its spec."""
    import re

    lines = re.split(rb"\r\n|\r|\n", data)
    if lines and lines[-1] == b"":
        lines.pop()
    pairs, bad = [], []
    for number, raw in enumerate(lines, 1):
        try:
            line = raw.decode(encoding)
        except UnicodeDecodeError:
            bad.append(number)
            continue
        line = line.lstrip("\ufeff") if number == 1 else line
        if "\t" in line:
            fields = line.split("\t")
            if fields[0].strip() and fields[1].strip():
                pairs.append((fields[0].strip(), fields[1].strip()))
    return pairs, bad, len(lines)


@settings(FUZZ, max_examples=int(300 * SCALE))
@given(
    data=pairs_file(),
    encoding=st.sampled_from(["utf-8", "utf-8", "latin-1", "cp1252"]),
    errors=st.sampled_from(["strict", "skip"]),
)
def test_fuzz_load_tatoeba(tmp_path_factory, data, encoding, errors):
    """A data file of any bytes: the pairs its lines hold (any line end), every line counted, an
    undecodable line an error naming it (or, with errors='skip', left out and reported), never a
    field with a tab or a line break in it."""
    from transformer_cpp.data import load_tatoeba

    path = tmp_path_factory.mktemp("fuzz-data", numbered=True) / "pairs.txt"
    path.write_bytes(data)
    pairs, bad, n_lines = _expected_load(data, encoding, errors)
    try:
        loaded = load_tatoeba(path, encoding=encoding, errors=errors)
    except ValueError as exc:
        event(f"load_tatoeba raised ({encoding}, {errors})")
        message = str(exc)
        if bad and errors == "strict":
            assert f"line {bad[0]} is not valid {encoding}" in message, message
        else:
            assert not pairs and "no valid sentence pair" in message, (pairs, message)
        return
    event(f"load_tatoeba ok ({encoding}, {errors})")
    assert not (bad and errors == "strict"), f"read undecodable lines {bad} with errors='strict'"
    assert list(zip(loaded.sources, loaded.targets)) == pairs
    stats = loaded.stats
    assert stats.read == n_lines and stats.kept == len(pairs) and stats.kept + stats.skipped == stats.read, stats
    assert stats.undecodable_lines == bad, stats
    for field_ in loaded.sources + loaded.targets:
        assert field_ == field_.strip() and not set(field_) & {"\t", "\n", "\r"}, repr(field_)
