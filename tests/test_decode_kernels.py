"""The decoding kernels (few-row and packed-panel products, argmax) against NumPy.

The packed-panel kernel is what every decoding step with 4+ rows runs; these tests cover its
edges directly: row counts across the 12-row blocks, output widths that leave a partial last
32-wide panel, and K that is not a multiple of the 128-wide k blocks.
"""

import numpy as np
import pytest

from transformer_cpp import kernels

# Builds without AVX-512 (-Ccmake.define.TRANSFORMER_CPP_NATIVE=OFF, other CPUs) have no few-row
# kernel, and their "packed" product is the plain loop; both are still checked below.
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
