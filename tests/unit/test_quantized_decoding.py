"""Low-precision decoding (``compute_type="int8" | "bf16"``): the kernels against their readable
references and against NumPy's definition of the rounding, the error each makes against float32
(a bound derived from the quantisation, not a fitted number), and the decoders, the Translator and
the command line with each compute type."""

import os
import subprocess
import sys

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp import kernels
from transformer_cpp.translate import Translator

from helpers.cli import SMALL_SAMPLED, run_cli, train_args
from helpers.toy_task import write_tatoeba_file

START, END = 1, 2
HAVE = {c: kernels.have_compute_type(c) for c in ("int8", "bf16")}
needs = {c: pytest.mark.skipif(not HAVE[c], reason=f"{c}: {kernels.compute_type_unsupported_reason(c)}") for c in HAVE}
LOW = [pytest.param("int8", marks=needs["int8"]), pytest.param("bf16", marks=needs["bf16"])]

# (R, N, K): odd sizes, a partial last panel (N % 32), K not a multiple of the word (4 int8, 2 bf16
# values), more words than one L1 block (K > 1024 int8, > 512 bf16), row counts across the register
# kernels' passes (6 rows for AVX-512 int8, 12 for bf16)
SHAPES = [(1, 1, 1), (1, 33, 5), (3, 31, 16), (12, 64, 130), (13, 70, 257), (30, 40, 1030), (5, 96, 512)]
# where the CPU has AMX: 16 rows or more and K a whole number of 64-byte tile rows run on the tiles
# (rows across the 16- and 32-row tile blocks, a partial last panel, K of one and of many tile
# steps); the last has rows enough but a K that is not (the register kernel)
AMX_SHAPES = [(16, 33, 64), (17, 64, 128), (31, 70, 256), (32, 32, 64), (45, 96, 512), (129, 40, 128), (20, 65, 2048)]
AMX_SHAPES += [(24, 40, 100)]


def amx_decoding(compute_type):
    """Whether the AMX tiles compute this compute type's products here (the kernel's name says so)."""
    return tc.build_info()["kernels"][f"decode_{compute_type}"].startswith("amx+")


def no_amx(compute_type):
    """The skip reason where the tiles do not compute this compute type's products."""
    kernel = tc.build_info()["kernels"][f"decode_{compute_type}"]
    why = f"; {kernels.amx_unsupported_reason()}" if compute_type == "bf16" else ""
    return f"{compute_type}: the products run on the {kernel} kernel, not on AMX tiles{why}"


def _data(R, N, K, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((R, K)).astype(np.float32)
    W = (rng.standard_normal((N, K)) * 0.1).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    return x, W, b


def _int8_codes(a):
    """NumPy's statement of the int8 rounding: per row, scale max|row| / 127, codes round(a * 127 /
    max|row|) (float32 arithmetic, ties to even) in [-127, 127]."""
    amax = np.abs(a).max(axis=1).astype(np.float32)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), np.float32(0)).astype(np.float32)
    q = np.clip(np.rint(a * inv[:, None]), -127, 127).astype(np.int64)
    return q, (amax / np.float32(127)).astype(np.float32)


def _magnitude(x, W, b):
    """|x| |W|^T + |b|: the size of the terms each output sums, for tolerances relative to it."""
    return np.abs(x).astype(np.float64) @ np.abs(W).astype(np.float64).T + np.abs(b)


@pytest.mark.parametrize("shape", SHAPES)
def test_int8_reference_is_the_stated_rounding(shape):
    x, W, b = _data(*shape)
    xq, xs = _int8_codes(x)
    wq, ws = _int8_codes(W)
    expected = (xq @ wq.T).astype(np.float64) * ws[None, :].astype(np.float64) * xs[:, None] + b
    ref = kernels.quantized_linear(x, W, b, "int8", "reference")
    np.testing.assert_allclose(ref, expected, rtol=0, atol=1e-6 * _magnitude(x, W, b).max())
    # the weight the kernel multiplies with: the codes times their scale
    np.testing.assert_array_equal(
        kernels.quantized_linear(x, W, b, "int8", "weight"), (wq * ws[:, None]).astype(np.float32)
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_bf16_reference_is_the_stated_rounding(shape):
    x, W, b = _data(*shape)
    expected = (kernels.round_to_bf16(x).astype(np.float64) @ kernels.round_to_bf16(W).astype(np.float64).T) + b
    ref = kernels.quantized_linear(x, W, b, "bf16", "reference")
    np.testing.assert_allclose(ref, expected, rtol=0, atol=1e-6 * _magnitude(x, W, b).max())
    np.testing.assert_array_equal(kernels.quantized_linear(x, W, b, "bf16", "weight"), kernels.round_to_bf16(W))


@pytest.mark.parametrize("compute_type", LOW)
@pytest.mark.parametrize("shape", SHAPES)
def test_kernel_equals_reference(compute_type, shape):
    x, W, b = _data(*shape, seed=1)
    got = kernels.quantized_linear(x, W, b, compute_type, "kernel")
    ref = kernels.quantized_linear(x, W, b, compute_type, "reference")
    assert got.shape == ref.shape == (shape[0], shape[1]) and got.dtype == np.float32
    # int8: the integer sums are exact, only the final scaling rounds (a few float32 ulps of the
    # terms); bf16: float32 sums in another order than the float64 reference
    tol = 1e-6 if compute_type == "int8" else 2e-5
    err = np.abs(got.astype(np.float64) - ref) / _magnitude(x, W, b)
    assert err.max() <= tol, (compute_type, shape, err.max())


@pytest.mark.parametrize("compute_type", LOW)
@pytest.mark.parametrize("shape", AMX_SHAPES)
def test_amx_tiles_and_the_register_kernel_agree(compute_type, shape, monkeypatch):
    if not amx_decoding(compute_type):
        pytest.skip(no_amx(compute_type))
    x, W, b = _data(*shape, seed=7)
    ref = kernels.quantized_linear(x, W, b, compute_type, "reference")
    amx = kernels.quantized_linear(x, W, b, compute_type, "kernel")
    monkeypatch.setenv("TRANSFORMER_CPP_DISABLE_AMX", "1")
    assert not amx_decoding(compute_type)
    register = kernels.quantized_linear(x, W, b, compute_type, "kernel")
    if compute_type == "int8":  # the same integer sums, scaled alike: equal to the bit
        np.testing.assert_array_equal(amx, register)
    for got in (amx, register):  # bf16: float32 sums in two orders, each within the reference's bound
        err = np.abs(got.astype(np.float64) - ref) / _magnitude(x, W, b)
        assert err.max() <= (1e-6 if compute_type == "int8" else 2e-5), (shape, err.max())


def test_amx_decoding_gives_the_register_kernels_beams(monkeypatch):
    # a model whose products have K a multiple of 64 and 20 sentences x 4 beams = 80 rows: the
    # tiles compute every product of the search, and int8 beams are those of the VNNI kernel
    if not amx_decoding("int8"):
        pytest.skip(no_amx("int8"))
    m = tc.Transformer(60, 53, d_model=64, n_layers=2, n_heads=4, d_ff=128, max_length=10, seed=3)
    src = np.random.default_rng(8).integers(3, 60, size=(20, 7))
    src[2, 3:] = 0
    amx = m.beam_search(src, START, END, 8, 4, 0.6, 2, compute_type="int8")
    monkeypatch.setenv("TRANSFORMER_CPP_DISABLE_AMX", "1")
    register = m.beam_search(src, START, END, 8, 4, 0.6, 2, compute_type="int8")
    flat = [[(tuple(int(t) for t in h[0]), float(h[1])) for h in hyps] for hyps in amx]
    assert flat == [[(tuple(int(t) for t in h[0]), float(h[1])) for h in hyps] for hyps in register]
    assert len({hyps[0][0] for hyps in flat}) > 3  # the sentences' beams differ


@pytest.mark.parametrize("shape", SHAPES)
def test_int8_error_against_float32_is_within_the_rounding_bound(shape):
    # |x - x'| <= max|x row| / 254 and |w - w'| <= max|w row| / 254 per element, so
    # |x.w - x'.w'| <= (max|x| sum|w| + max|w'| sum|x|) / 254; the float32 sums add rounding far below it
    x, W, b = _data(*shape, seed=2)
    exact = x.astype(np.float64) @ W.astype(np.float64).T + b
    got = kernels.quantized_linear(x, W, b, "int8", "reference")
    ax, aw = np.abs(x).max(axis=1), np.abs(W).max(axis=1)
    bound = (ax[:, None] * np.abs(W).sum(axis=1)[None, :] + aw[None, :] * np.abs(x).sum(axis=1)[:, None]) / 254
    assert (np.abs(got - exact) <= 1.0001 * bound + 1e-5).all()
    # and it is far from the bound's worst case on random data: about 1% of the terms' size
    assert (np.abs(got - exact) / _magnitude(x, W, b)).max() < 0.03


@pytest.mark.parametrize("compute_type", LOW)
def test_zero_rows_give_the_bias_and_nan_propagates(compute_type):
    x, W, b = _data(4, 40, 36, seed=3)
    x[1] = 0.0
    W[5] = 0.0
    y = kernels.quantized_linear(x, W, b, compute_type, "kernel")
    np.testing.assert_array_equal(y[1], b)
    np.testing.assert_array_equal(y[:, 5], np.full(4, b[5]))
    x[2, 7] = np.nan
    y = kernels.quantized_linear(x, W, b, compute_type, "kernel")
    assert np.isnan(y[2]).all() and np.isfinite(y[[0, 1, 3]]).all()


def test_kernel_function_checks_its_arguments():
    x, W, b = _data(2, 3, 4)
    with pytest.raises(ValueError, match="compute_type must be one of 'float32', 'int8', 'bf16'"):
        kernels.quantized_linear(x, W, b, "fp8")
    with pytest.raises(ValueError, match="compute_type must be 'int8' or 'bf16'"):
        kernels.quantized_linear(x, W, b, "float32")
    with pytest.raises(ValueError, match="kernel must be one of"):
        kernels.quantized_linear(x, W, b, "int8", "fast")
    assert kernels.have_compute_type("float32") and kernels.compute_type_unsupported_reason("float32") == ""


# ------------------------------------------------------------------------------------ decoding


def _model(pre_norm=False, seed=4):
    return tc.Transformer(
        60, 53, d_model=32, n_layers=2, n_heads=4, d_ff=48, max_length=10, seed=seed, pre_norm=pre_norm
    )


def _src(n=6, seed=5):
    src = np.random.default_rng(seed).integers(3, 60, size=(n, 7))
    src[1, 4:] = 0
    src[3, 2:] = 0
    return src


def assert_decodes_as_a_fresh_copy(m, src, compute_type):
    """``m`` decodes ``src`` as a freshly built model holding a copy of its weights: nothing cached
    from before a change of the weights is used."""
    fresh = _model(seed=999)
    for name, p in fresh.parameters().items():
        p.value[...] = m.parameters()[name].value
    np.testing.assert_array_equal(
        m.greedy_decode(src, START, END, 8, compute_type=compute_type),
        fresh.greedy_decode(src, START, END, 8, compute_type=compute_type),
    )


def _float_log_prob(model, src_row, tokens):
    """log p(tokens | src) by the float32 forward pass (the padding id excluded, as decoding does)."""
    tgt_in = np.array([[START] + list(tokens[:-1])])
    logits = model.forward(src_row[None], tgt_in)[0].astype(np.float64)
    logits[:, 0] = -np.inf
    m = logits.max(axis=1, keepdims=True)
    lsm = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
    return float(sum(lsm[i, t] for i, t in enumerate(tokens)))


@pytest.mark.parametrize("pre_norm", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("compute_type", LOW)
def test_low_precision_decoding_scores_match_float32(compute_type, pre_norm):
    # the decoder's own log-probabilities (from int8 / bf16 logits) of what it chose, against the
    # float32 forward pass on the same tokens: within 0.05 per token (the quantisation error of
    # the logits; a wrong layer or scale would be off by whole units)
    m = _model(pre_norm)
    src = _src()
    hyps = m.beam_search(src, START, END, 8, beam_size=1, length_penalty=0.0, compute_type=compute_type)
    for b, sent in enumerate(hyps):
        tokens, _, log_prob, _ = sent[0]
        exact = _float_log_prob(m, src[b][src[b] != 0] if b in (1, 3) else src[b], list(tokens))
        assert abs(log_prob - exact) <= 0.05 * len(tokens), (b, log_prob, exact)


@pytest.mark.parametrize("compute_type", LOW)
def test_low_precision_greedy_is_beam_one_and_independent_of_the_batch(compute_type):
    m = _model(seed=7)
    src = _src(seed=8)
    out = m.greedy_decode(src, START, END, 9, compute_type=compute_type)
    hyps = m.beam_search(src, START, END, 9, beam_size=1, length_penalty=0.0, compute_type=compute_type)
    for b in range(src.shape[0]):
        row = [int(v) for v in out[b] if v != 0]
        assert row == [int(v) for v in hyps[b][0][0]]
        # rows are quantised one by one: a sentence decodes the same alone as in a batch
        alone = m.greedy_decode(src[b : b + 1], START, END, 9, compute_type=compute_type)
        assert [int(v) for v in alone[0] if v != 0] == row


@pytest.mark.parametrize("compute_type", LOW)
def test_low_precision_weights_follow_changes_and_compute_type_switches(compute_type):
    m = _model(seed=9)
    src = _src(seed=10)
    first = m.greedy_decode(src, START, END, 8, compute_type=compute_type)
    m.greedy_decode(src, START, END, 8)  # float32 in between repacks
    np.testing.assert_array_equal(m.greedy_decode(src, START, END, 8, compute_type=compute_type), first)
    bias = m.parameters()["output.bias"].value
    bias[17] = 1e4  # token 17 now wins everywhere, in every precision
    assert (m.greedy_decode(src, START, END, 8, compute_type=compute_type) == 17).all()
    bias[17] = 0.0
    w = m.parameters()["decoder.layers.1.feed_forward.linear2.weight"].value
    w *= -3.0
    assert_decodes_as_a_fresh_copy(m, src, compute_type)


def test_decoders_refuse_bad_compute_types():
    m = _model()
    src = _src()
    with pytest.raises(ValueError, match=r"greedy_decode: compute_type must be 'float32', 'int8' or 'bf16', got 'fp8'"):
        m.greedy_decode(src, START, END, 5, compute_type="fp8")
    with pytest.raises(ValueError, match=r"beam_search: compute_type must be 'float32', 'int8' or 'bf16', got 'INT8'"):
        m.beam_search(src, START, END, 5, compute_type="INT8")
    with pytest.raises(TypeError, match="compute_type must be a str"):
        m.greedy_decode(src, START, END, 5, compute_type=8)
    m64 = tc.Transformer(60, 53, d_model=32, n_layers=1, n_heads=4, d_ff=48, dtype="float64")
    with pytest.raises(ValueError, match="compute_type 'int8' needs a float32 model"):
        m64.greedy_decode(src, START, END, 5, compute_type="int8")
    with pytest.raises(ValueError, match="compute_type 'bf16' needs a float32 model"):
        m64.beam_search(src, START, END, 5, compute_type="bf16")


UNSUPPORTED = r"""
import numpy as np, transformer_cpp as tc
from transformer_cpp import kernels
from transformer_cpp.translate import Translator
assert not kernels.have_compute_type("int8"), "int8 still supported"
print(kernels.compute_type_unsupported_reason("int8"))
m = tc.Transformer(60, 53, d_model=32, n_layers=1, n_heads=4, d_ff=48)
try:
    m.greedy_decode(np.array([[5, 6]]), 1, 2, 4, compute_type="int8")
except ValueError as e:
    print("decode:", e)
print("float32:", m.greedy_decode(np.array([[5, 6]]), 1, 2, 4).shape)
"""


def test_unsupported_cpu_is_a_clear_error():
    env = dict(os.environ, TRANSFORMER_CPP_DISABLE_INT8="1")
    r = subprocess.run([sys.executable, "-c", UNSUPPORTED], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    # the reason names the switch (checked first, at any instruction-set level), or a build
    # without the kernels (not x86-64)
    assert "TRANSFORMER_CPP_DISABLE_INT8 turns the int8 kernel off" in lines[0] or "this build has no" in lines[0]
    assert lines[1].startswith("decode: greedy_decode: compute_type 'int8' is not available: ")
    assert "use compute_type 'float32'" in lines[1]
    assert lines[2] == "float32: (1, 4)" or lines[2].startswith("float32: (1, ")


# ------------------------------------------------------------------------------------ Translator, CLI


def _translator(compute_type="float32"):
    from helpers.toy_task import reversal_tokenizer, tiny_model

    tok = reversal_tokenizer()
    return Translator(tiny_model(tok), tok, tok, src_lang=None, compute_type=compute_type)


@pytest.mark.parametrize("compute_type", LOW)
def test_translator_compute_type(compute_type):
    t = _translator(compute_type)
    assert t.compute_type == compute_type
    greedy = t.translate_batch(["a b c", "c a"], beam_size=1)
    beam = t.translate_batch(["a b c", "c a"], beam_size=3)
    assert len(greedy) == len(beam) == 2 and all(isinstance(s, str) for s in greedy + beam)
    t.compute_type = "float32"
    assert t.compute_type == "float32"


def test_translator_refuses_bad_compute_types():
    with pytest.raises(
        ValueError, match=r"Translator: compute_type must be one of 'float32', 'int8', 'bf16', got 'fp16'"
    ):
        _translator("fp16")
    t = _translator()
    with pytest.raises(TypeError, match="Translator: compute_type must be one of 'float32', 'int8', 'bf16', got None"):
        t.compute_type = None
    assert t.compute_type == "float32"


@needs["int8"]
@needs["bf16"]
def test_command_line_compute_type(tmp_path):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=250)
    run_dir = tmp_path / "run"
    r = run_cli(*train_args(data, run_dir, 1, SMALL_SAMPLED), timeout=600)
    assert r.returncode == 0, r.stderr
    outputs = {}
    for ct in ("float32", "int8", "bf16"):
        r = run_cli(
            "translate", "--model", str(run_dir), "--compute-type", ct, "The cat.", "A dog and a cat.", timeout=600
        )
        assert r.returncode == 0, r.stderr
        outputs[ct] = r.stdout.splitlines()
        assert len(outputs[ct]) == 2
    r = run_cli(
        "evaluate",
        "--model",
        str(run_dir),
        "--data",
        str(data),
        "--compute-type",
        "int8",
        "--limit",
        "10",
        "--beam-size",
        "2",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert "BLEU" in r.stdout and "beam size 2, compute type int8" in r.stdout
    # where the CPU lacks VNNI: one clear line, no traceback
    r = run_cli(
        "translate",
        "--model",
        str(run_dir),
        "--compute-type",
        "int8",
        "The cat.",
        env={"TRANSFORMER_CPP_DISABLE_INT8": "1"},
        timeout=600,
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "compute_type 'int8' is not available" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_command_line_refuses_an_unknown_compute_type():
    r = run_cli("translate", "--model", "nowhere", "--compute-type", "fp8", "hello", timeout=120)
    assert r.returncode != 0
    assert "--compute-type: Translator: compute_type must be one of 'float32', 'int8', 'bf16', got 'fp8'" in r.stderr


@pytest.mark.parametrize("compute_type", ["float32", pytest.param("int8", marks=needs["int8"])])
@pytest.mark.parametrize("batch", [1, 6])
def test_a_write_through_a_released_view_is_seen(compute_type, batch):
    # decodes skip the weight fingerprint and the finite scan while no train_step ran and no
    # parameter view was alive or released since the last decode; a view written and dropped at
    # once (no reference kept) must still be seen by the next decode
    m = _model(seed=11)
    src = _src(seed=12)[:batch]
    m.greedy_decode(src, START, END, 8, compute_type=compute_type)
    m.greedy_decode(src, START, END, 8, compute_type=compute_type)  # trusted: nothing changed
    m.parameters()["output.bias"].value[17] = 1e4
    assert (m.greedy_decode(src, START, END, 8, compute_type=compute_type) == 17).all()
    m.parameters()["output.bias"].value[17] = 0.0
    m.parameters()["decoder.layers.0.norm1.weight"].value[3] = np.nan
    with pytest.raises(tc.NonFiniteError, match="greedy_decode"):
        m.greedy_decode(src, START, END, 8, compute_type=compute_type)
    with pytest.raises(tc.NonFiniteError, match="greedy_decode"):  # still refused on the next call
        m.greedy_decode(src, START, END, 8, compute_type=compute_type)
    m.parameters()["decoder.layers.0.norm1.weight"].value[3] = 1.0
    m.greedy_decode(src, START, END, 8, compute_type=compute_type)
    # a training step changes the weights: the next decode equals a fresh model's with them
    tgt = np.random.default_rng(13).integers(3, 53, size=(batch, 6))
    tgt_in = np.concatenate([np.full((batch, 1), START), tgt[:, :-1]], axis=1)
    m.configure_optimizer(fixed_lr=0.05)
    m.train_step(src, tgt_in, tgt)
    assert_decodes_as_a_fresh_copy(m, src, compute_type)
