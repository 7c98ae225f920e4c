"""The decoding kernels (few-row and packed-panel products, argmax) against NumPy.

The packed-panel kernel is what every decoding step with 4+ rows runs; these tests cover its
edges directly: row counts across the 12-row blocks, output widths that leave a partial last
32-wide panel, and K that is not a multiple of the 128-wide k blocks.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp import kernels

from helpers.kernels import splits_512bit_fma

# At the generic instruction-set level (TRANSFORMER_CPP_ISA=generic, CPUs without AVX2 + FMA, other
# architectures) there is no few-row kernel and "packed" is the plain loop; both are still checked.
HAVE_KERNELS = kernels.have_decode_kernels()


def reference(x, W, b):
    return x.astype(np.float64) @ W.astype(np.float64).T + b.astype(np.float64)


def tolerance(x, W):
    # float32 sums of K products: error grows like sqrt(K) * eps * |x||w|
    scale = np.abs(x).max() * np.abs(W).max() * np.sqrt(x.shape[1])
    return 4e-6 * scale


@pytest.mark.parametrize("rows", [1, 3, 4, 11, 12, 13, 24, 32, 37])
@pytest.mark.parametrize("n_out, k_in", [(32, 16), (251, 64), (513, 200), (96, 384), (1000, 512)])
def test_packed_linear_matches_numpy(rows, n_out, k_in):
    rng = np.random.default_rng(rows * 1000 + n_out + k_in)
    x = rng.standard_normal((rows, k_in)).astype(np.float32)
    W = rng.standard_normal((n_out, k_in)).astype(np.float32)
    b = rng.standard_normal(n_out).astype(np.float32)
    ref = reference(x, W, b)
    for kernel in ("packed", "packed_reference"):
        y = kernels.decode_linear(x, W, b, kernel)
        assert y.shape == (rows, n_out)
        assert np.abs(y - ref).max() < tolerance(x, W), kernel


@pytest.mark.parametrize("rows", [1, 4, 5, 17, 64])
@pytest.mark.parametrize("n_out, k_in", [(3, 16), (250, 64), (517, 512)])
def test_few_rows_linear_matches_numpy(rows, n_out, k_in):
    rng = np.random.default_rng(rows + n_out + k_in)
    x = rng.standard_normal((rows, k_in)).astype(np.float32)
    W = rng.standard_normal((n_out, k_in)).astype(np.float32)
    b = rng.standard_normal(n_out).astype(np.float32)
    if not HAVE_KERNELS:
        with pytest.raises(ValueError, match="no few_rows kernel"):
            kernels.decode_linear(x, W, b, "few_rows")
        return
    y = kernels.decode_linear(x, W, b, "few_rows")
    assert np.abs(y - reference(x, W, b)).max() < tolerance(x, W)


def test_packed_linear_writes_only_its_outputs():
    # the last panel is partial (70 = 2*32 + 6): a wrong mask would write past column 69 or leave
    # garbage in it; every output must equal the reference, including the first and last column
    rng = np.random.default_rng(0)
    x = rng.standard_normal((13, 48)).astype(np.float32)
    W = rng.standard_normal((70, 48)).astype(np.float32)
    b = np.arange(70, dtype=np.float32)
    y = kernels.decode_linear(x, W, b, "packed")
    ref = reference(x, W, b)
    assert np.abs(y[:, -6:] - ref[:, -6:]).max() < tolerance(x, W)
    assert np.abs(y[:, :1] - ref[:, :1]).max() < tolerance(x, W)


def test_decode_linear_rejects_bad_shapes():
    x = np.zeros((2, 16), np.float32)
    with pytest.raises(ValueError, match="last dimension"):
        kernels.decode_linear(x, np.zeros((3, 8), np.float32), np.zeros(3, np.float32), "packed")
    with pytest.raises(ValueError, match="kernel"):
        kernels.decode_linear(x, np.zeros((3, 16), np.float32), np.zeros(3, np.float32), "nope")
    with pytest.raises(ValueError, match="K % 16" if HAVE_KERNELS else "no few_rows kernel"):
        kernels.decode_linear(
            np.zeros((2, 8), np.float32), np.zeros((3, 8), np.float32), np.zeros(3, np.float32), "few_rows"
        )


@pytest.mark.parametrize("n", [1, 2, 15, 16, 17, 33, 15499])
def test_first_argmax_is_the_first_largest(n):
    rng = np.random.default_rng(n)
    v = rng.standard_normal(n).astype(np.float32)
    assert kernels.first_argmax(v) == int(np.argmax(v))
    # ties: the first occurrence wins, in the vector body and in the tail
    v[:] = 0.0
    v[n // 2] = 1.0
    v[n - 1] = 1.0
    assert kernels.first_argmax(v) == n // 2
    # -inf everywhere except one place; a NaN is never the answer when a number exists
    v[:] = -np.inf
    v[n - 1] = -5.0
    if n > 1:
        v[0] = np.nan
    assert kernels.first_argmax(v) == n - 1


def test_fingerprint_sees_every_single_change():
    # the packed decoder weights are reused only while the fingerprint of the model's weights is
    # unchanged: any one changed element (any position, any lane, the tail, -0.0 for 0.0) must
    # change it
    rng = np.random.default_rng(0)
    w = rng.standard_normal(10_007).astype(np.float32)  # not a multiple of the 64-word block
    base = kernels.fingerprint(w)
    assert kernels.fingerprint(w.copy()) == base
    assert kernels.fingerprint(w, 1) != base  # the seed matters
    for i in list(rng.integers(0, w.size, 200)) + [0, 1, 127, 128, w.size - 2, w.size - 1]:
        changed = w.copy()
        changed[i] = np.nextafter(changed[i], np.float32(np.inf))  # the smallest possible change
        assert kernels.fingerprint(changed) != base, i
    z = np.zeros(300, np.float32)
    nz = z.copy()
    nz[299] = -0.0
    assert kernels.fingerprint(z) != kernels.fingerprint(nz)
    # the length is part of it: trailing zero bytes are not ignored
    assert kernels.fingerprint(np.zeros(5, np.uint8)) != kernels.fingerprint(np.zeros(6, np.uint8))
    with pytest.raises(ValueError, match="contiguous"):
        kernels.fingerprint(w[::2])


# ------------------------------------------------------------------ instruction-set levels

LEVELS = ("generic", "avx2", "avx512")

AT_LEVEL = r"""
import json, numpy as np, transformer_cpp as tc
from transformer_cpp import kernels
rng = np.random.default_rng(7)
out = {"info": tc.build_info(), "errors": {}}
for rows, n_out, k_in in [(1, 70, 64), (3, 251, 128), (6, 33, 16), (13, 517, 272), (32, 96, 384)]:
    x = rng.standard_normal((rows, k_in)).astype(np.float32)
    W = rng.standard_normal((n_out, k_in)).astype(np.float32)
    b = rng.standard_normal(n_out).astype(np.float32)
    ref = x.astype(np.float64) @ W.astype(np.float64).T + b
    scale = np.abs(x).max() * np.abs(W).max() * np.sqrt(k_in)
    names = ["packed"] + (["few_rows"] if kernels.have_decode_kernels() and k_in % 16 == 0 else [])
    for kernel in names:
        err = float(np.abs(kernels.decode_linear(x, W, b, kernel) - ref).max() / scale)
        out["errors"][f"{kernel} {rows}x{n_out}x{k_in}"] = err
    if kernels.have_compute_type("int8"):
        got = kernels.quantized_linear(x, W, b, "int8", "kernel")
        want = kernels.quantized_linear(x, W, b, "int8", "reference")
        magnitude = np.abs(x).astype(np.float64) @ np.abs(W).astype(np.float64).T + np.abs(b)
        out["errors"][f"int8 {rows}x{n_out}x{k_in}"] = float((np.abs(got - want) / magnitude).max())
if kernels.have_f32_kernel():
    a = rng.standard_normal((37, 300)).astype(np.float32)
    b = rng.standard_normal((300, 45)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).max() * np.abs(b).max() * np.sqrt(300)
    out["errors"]["f32_gemm 37x45x300"] = float(np.abs(kernels.f32_matmul(a, b) - ref).max() / scale)
v = rng.standard_normal(1001).astype(np.float32)
v[[10, 700]] = 9.0
v[3] = np.nan
out["argmax"] = kernels.first_argmax(v)
print(json.dumps(out))
"""


def _run_at(level, script=AT_LEVEL):
    env = dict(os.environ, TRANSFORMER_CPP_ISA=level)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)


def test_build_info_names_the_level_and_the_kernels():
    info = tc.build_info()
    assert info["isa"] in LEVELS and info["isa_cpu"] in LEVELS
    assert LEVELS.index(info["isa"]) <= LEVELS.index(info["isa_cpu"])
    kernels_run = info["kernels"]
    assert set(kernels_run) >= {"f32_gemm", "bf16_gemm", "decode_float32", "decode_int8", "decode_bf16"}
    expected = {"generic": "eigen", "avx2": "avx2", "avx512": "avx512"}[info["isa"]]
    assert kernels_run["decode_float32"] == expected
    assert kernels.have_decode_kernels() == (info["isa"] != "generic")


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_the_cpu_has_gives_the_reference_products(level):
    cpu = tc.build_info()["isa_cpu"]
    if LEVELS.index(level) > LEVELS.index(cpu):
        pytest.skip(f"this CPU's level is {cpu}")
    r = _run_at(level)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["info"]["isa"] == level and out["info"]["isa_cpu"] == cpu
    assert out["info"]["kernels"]["decode_float32"] == {"generic": "eigen"}.get(level, level)
    if os.environ.get("TRANSFORMER_CPP_DISABLE_F32_KERNEL", "0") in ("", "0"):
        # the AVX2 kernel where the CPU splits 512-bit multiply-adds (see test_f32_gemm.py)
        wide = "avx2" if splits_512bit_fma() else "avx512"
        assert out["info"]["kernels"]["f32_gemm"] == {"generic": "eigen", "avx512": wide}.get(level, level)
        assert ("f32_gemm 37x45x300" in out["errors"]) == (level != "generic")
    if level != "generic":
        assert out["info"]["kernels"]["decode_int8"] != "unavailable"
        assert any(k.startswith("few_rows") for k in out["errors"])
    # float32: sums in another order than float64 (see tolerance() above); int8: exact integer
    # sums, only the final scaling rounds
    for name, err in out["errors"].items():
        assert err < (1e-6 if name.startswith("int8") else 4e-6), (level, name, err)
    assert out["argmax"] == 10


def test_a_level_above_the_cpu_or_an_unknown_one_is_refused_at_import():
    r = _run_at("avx9000", "import transformer_cpp")
    assert r.returncode != 0
    assert "TRANSFORMER_CPP_ISA must be 'avx512', 'avx2', 'neon' or 'generic', got 'avx9000'" in r.stderr
    cpu = tc.build_info()["isa_cpu"]
    if cpu == "avx512":
        pytest.skip("no level above this CPU's")
    above = LEVELS[LEVELS.index(cpu) + 1]
    r = _run_at(above.upper(), "import transformer_cpp")
    assert r.returncode != 0
    assert f"TRANSFORMER_CPP_ISA={above.upper()} asks for more than this CPU" in r.stderr
    assert f"its level is '{cpu}'" in r.stderr
