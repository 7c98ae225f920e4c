"""Reformer's LSH self-attention: against a readable NumPy reference of the whole algorithm (hash,
sort, chunk, look one chunk back, self mask, rounds combined by their log-partitions), against
full shared-QK attention when one chunk covers the sequence, gradients against central
differences (float64, the hash frozen), float32 against float64, and bad input."""

import numpy as np
import pytest

import transformer_cpp as tc
from helpers.layer_checks import check_accumulated, check_against_numeric, grads_of, parameter_items
from helpers.layer_checks import check_input_errors, randomise_parameters

TOL64 = 1e-10  # float64 against the NumPy reference: a few hundred roundings on O(1) values
TOL32 = 1e-4  # float32 against float64, relative to max |value|


# --- readable references ------------------------------------------------------------------------


def projections(params, x, n_heads):
    """Shared-QK heads: queries q, keys k = q / ||q|| (0 for q = 0) and values, each (B, H, T, d_k)."""
    b, t, d = x.shape
    dk = d // n_heads

    def heads(a):
        return a.reshape(b, t, n_heads, dk).transpose(0, 2, 1, 3)

    q = heads(x @ params["query.weight"].T + params["query.bias"])
    v = heads(x @ params["value.weight"].T + params["value.bias"])
    norm = np.linalg.norm(q, axis=-1, keepdims=True)
    k = np.where(norm > 0, q / np.where(norm > 0, norm, 1.0), 0.0)
    return q, k, v


def output_projection(params, heads_out):
    b, h, t, dk = heads_out.shape
    ctx = heads_out.transpose(0, 2, 1, 3).reshape(b, t, h * dk)
    return ctx @ params["output.weight"].T + params["output.bias"]


def allowed_pairs(t, causal):
    """allowed[i, j]: query i may attend to key j: an earlier position (causal) or any other one.
    A query attends to itself only when nothing else is allowed anywhere (see attend)."""
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    return j < i if causal else j != i


def attend(scores, live, v):
    """softmax over the live keys of each row -> (output, log-partition); a row with no live key
    gives log-partition -inf and output 0."""
    s = np.where(live, scores, -np.inf)
    mx = s.max(axis=-1, keepdims=True)
    dead = np.isneginf(mx)
    e = np.where(live, np.exp(s - np.where(dead, 0.0, mx)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    z = np.where(dead, -np.inf, mx + np.log(np.where(dead, 1.0, total)))[..., 0]
    return (e / np.where(dead, 1.0, total)) @ v, z


def full_shared_qk_attention(params, x, n_heads, causal):
    """Every query against every key with the same self rule: another key if there is one."""
    q, k, v = projections(params, x, n_heads)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    out, z = attend(scores, allowed_pairs(x.shape[1], causal), v)
    out = np.where(np.isneginf(z)[..., None], v, out)  # nothing else to attend to: itself
    return output_projection(params, out)


def lsh_buckets(k, rotations):
    """h(k) = argmax([kR; -kR]) for each round: k (T, d_k), rotations (n_hashes, d_k, n_b/2)."""
    rotated = np.einsum("td,rdn->rtn", k, rotations)
    return np.argmax(np.concatenate([rotated, -rotated], axis=-1), axis=-1)  # (n_hashes, T)


def lsh_reference(params, x, rotations, n_heads, chunk, causal):
    """LSH attention as Reformer §2 and App. A describe it, with dense (T, T) masks for clarity.

    Round r: sort positions by (bucket, position), chunk the sorted order; query i sees key j when
    j's chunk is i's chunk or the one before (Eq. 5). A pair met in N rounds gets log N subtracted
    from its score (each key counted once), each round gives an output o_r and log-partition z_r,
    and the rounds are combined with weights softmax_r(z_r) (Eqs. 12-16). A query that sees no
    other key in any round attends to itself. Returns (output, buckets (B, H, n_hashes, T))."""
    b, t, _ = x.shape
    q, k, v = projections(params, x, n_heads)
    n_hashes = rotations.shape[1]
    out = np.zeros_like(q)
    all_buckets = np.zeros((b, n_heads, n_hashes, t), dtype=np.int64)
    allowed = allowed_pairs(t, causal)
    for bi in range(b):
        for h in range(n_heads):
            buckets = lsh_buckets(k[bi, h], rotations[h])
            all_buckets[bi, h] = buckets
            chunk_of = np.empty((n_hashes, t), dtype=np.int64)
            for r in range(n_hashes):
                order = np.lexsort((np.arange(t), buckets[r]))  # by bucket, then position
                chunk_of[r, order] = np.arange(t) // chunk
            ci, cj = chunk_of[:, :, None], chunk_of[:, None, :]
            window = (cj == ci) | (cj == ci - 1)  # (n_hashes, T_query, T_key)
            count = window.sum(axis=0)  # rounds in which each pair meets
            scores = q[bi, h] @ k[bi, h].T / np.sqrt(q.shape[-1])
            corrected = scores - np.log(np.maximum(count, 1))
            rounds = [attend(corrected, window[r] & allowed, v[bi, h]) for r in range(n_hashes)]
            o_r = np.stack([o for o, _ in rounds])  # (n_hashes, T, d_k)
            z_r = np.stack([z for _, z in rounds])  # (n_hashes, T)
            zmax = z_r.max(axis=0)
            alone = np.isneginf(zmax)
            weights = np.exp(z_r - np.where(alone, 0.0, zmax))
            weights = np.where(alone, 0.0, weights / np.where(alone, 1.0, weights.sum(axis=0)))
            out[bi, h] = np.where(alone[:, None], v[bi, h], np.einsum("rt,rtd->td", weights, o_r))
    return output_projection(params, out), all_buckets


def union_reference(params, x, buckets, n_heads, chunk, causal):
    """The same layer written as one softmax over the union of the rounds' windows: what the
    log N correction and the log-partition weights amount to."""
    b, t, _ = x.shape
    q, k, v = projections(params, x, n_heads)
    out = np.zeros_like(q)
    allowed = allowed_pairs(t, causal)
    for bi in range(b):
        for h in range(n_heads):
            seen = np.zeros((t, t), bool)
            for bk in buckets[bi, h]:
                order = np.lexsort((np.arange(t), bk))
                ch = np.empty(t, np.int64)
                ch[order] = np.arange(t) // chunk
                seen |= (ch[None, :] == ch[:, None]) | (ch[None, :] == ch[:, None] - 1)
            scores = q[bi, h] @ k[bi, h].T / np.sqrt(q.shape[-1])
            o, z = attend(scores, seen & allowed, v[bi, h])
            out[bi, h] = np.where(np.isneginf(z)[:, None], v[bi, h], o)
    return output_projection(params, out)


def params_of(layer):
    return {name: p.value.astype(np.float64) for name, p in layer.parameters().items()}


def make_layer(d, h, dtype="float64", seed=3, **kw):
    layer = tc.LSHSelfAttention(d, h, seed=seed, dtype=dtype, **kw)
    randomise_parameters(layer, seed + 10)
    return layer


# --- exactness ----------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("n_hashes,chunk", [(1, 9), (3, 9), (2, 50)])
def test_one_chunk_equals_full_shared_qk_attention(causal, n_hashes, chunk):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 9, 8))
    layer = make_layer(8, 2, chunk=chunk, n_hashes=n_hashes, n_buckets=2, causal=causal)
    y = layer.forward(x)
    ref = full_shared_qk_attention(params_of(layer), x, 2, causal)
    np.testing.assert_allclose(y, ref, rtol=0, atol=TOL64)


CASES = [
    # (B, T, d, heads, chunk, n_hashes, n_buckets, causal)
    (2, 24, 8, 2, 4, 1, None, False),
    (2, 24, 8, 2, 4, 3, None, True),
    (1, 37, 6, 1, 5, 4, 8, False),  # the last chunk is shorter
    (3, 16, 12, 3, 3, 2, 4, True),
    (1, 20, 4, 1, 2, 8, 16, True),
    (2, 5, 4, 2, 2, 2, 2, False),
    (1, 300, 4, 1, 16, 2, None, True),  # hashed in blocks of rows (tuning::kLshHashRows = 256)
]


@pytest.mark.parametrize("case", CASES)
def test_matches_numpy_reference(case):
    b, t, d, h, chunk, n_hashes, n_buckets, causal = case
    rng = np.random.default_rng(t * 7 + d)
    x = rng.standard_normal((b, t, d))
    layer = make_layer(d, h, chunk=chunk, n_hashes=n_hashes, n_buckets=n_buckets, causal=causal)
    y = layer.forward(x)
    rotations = layer.rotations()
    nb = n_buckets or 2 * max(1, t // chunk)
    assert rotations.shape == (h, n_hashes, d // h, nb // 2)
    ref, buckets = lsh_reference(params_of(layer), x, rotations, h, chunk, causal)
    np.testing.assert_array_equal(layer.buckets(), buckets)
    assert len(np.unique(buckets)) > 1  # the hash splits the sequence: the test is not one window
    np.testing.assert_allclose(y, ref, rtol=0, atol=TOL64)
    # the rounds combined by their log-partitions = one softmax over the union of the windows
    np.testing.assert_allclose(y, union_reference(params_of(layer), x, buckets, h, chunk, causal), rtol=0, atol=TOL64)


def test_lsh_differs_from_full_attention_when_chunks_are_small():
    """With many buckets and small chunks a query sees only part of the sequence."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 32, 8))
    layer = make_layer(8, 1, chunk=4, n_hashes=1)
    y = layer.forward(x)
    assert np.abs(y - full_shared_qk_attention(params_of(layer), x, 1, False)).max() > 1e-3


def test_attends_to_itself_only_when_nothing_else():
    """Causal position 0 has no other key: its output is its own value (through W_o)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 10, 4))
    layer = make_layer(4, 1, chunk=2, n_hashes=2, causal=True)
    y = layer.forward(x)
    p = params_of(layer)
    v0 = x[:, 0] @ p["value.weight"].T + p["value.bias"]
    np.testing.assert_allclose(y[:, 0], v0 @ p["output.weight"].T + p["output.bias"], rtol=0, atol=TOL64)
    # a single position, causal or not
    y1 = layer.forward(x[:, :1], causal=False)
    np.testing.assert_allclose(y1[:, 0], y[:, 0], rtol=0, atol=TOL64)


def test_causal_output_does_not_depend_on_later_positions():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 16, 8))
    layer = make_layer(8, 2, chunk=16, n_hashes=2, causal=True)
    layer.freeze_hash = True
    y = layer.forward(x)
    x2 = x.copy()
    x2[:, 10:] = rng.standard_normal((1, 6, 8))
    np.testing.assert_allclose(layer.forward(x2)[:, :10], y[:, :10], rtol=0, atol=TOL64)


def test_projections_match_multi_head_attention_with_the_same_seed():
    lsh = tc.LSHSelfAttention(8, 2, seed=5, dtype="float64")
    mha = tc.MultiHeadAttention(8, 2, seed=5, dtype="float64")
    assert list(lsh.parameters()) == [f"{n}.{w}" for n in ("query", "value", "output") for w in ("weight", "bias")]
    for name, p in lsh.parameters().items():
        np.testing.assert_array_equal(p.value, mha.parameters()[name].value)


# --- the hash -----------------------------------------------------------------------------------


def test_hash_is_drawn_from_seed_and_call_count():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 16, 8))
    layer = make_layer(8, 2, chunk=4, n_hashes=2)
    assert layer.calls == 0 and not layer.freeze_hash
    y0 = layer.forward(x)
    r0 = layer.rotations()
    assert layer.calls == 1
    layer.forward(x)
    assert not np.array_equal(layer.rotations(), r0)  # a new forward, new rotations
    layer.calls = 0
    np.testing.assert_array_equal(layer.forward(x), y0)  # the count replays the hash exactly
    np.testing.assert_array_equal(layer.rotations(), r0)
    layer.freeze_hash = True
    layer.calls = 0
    for _ in range(2):
        np.testing.assert_array_equal(layer.forward(x), y0)
    assert layer.calls == 0
    # N(0, 1) entries
    big = make_layer(8, 2, chunk=1, n_hashes=4, n_buckets=512)
    big.forward(x)
    r = big.rotations()
    assert abs(r.mean()) < 0.05 and abs(r.std() - 1) < 0.05
    # the buckets are hashes of the keys: every bucket index in range
    b = big.buckets()
    assert b.shape == (1, 2, 4, 16) and b.min() >= 0 and b.max() < 512


def test_results_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 20, 8))
    threads = tc.get_num_threads()
    results = []
    for n in (1, 2):
        tc.set_num_threads(n)
        try:
            layer = make_layer(8, 2, chunk=4, n_hashes=3, causal=True)
            y = layer.forward(x)
            results.append((y, layer.backward(np.ones_like(y))))
        finally:
            tc.set_num_threads(threads)
    for a, b in zip(results[0], results[1]):
        np.testing.assert_array_equal(a, b)


def test_results_are_the_same_in_every_run():
    """Fresh layers on the same input, one after another, give bit-identical results: nothing the
    vectorised loops read or round depends on where a buffer happened to be allocated."""
    x = np.random.default_rng(7).standard_normal((3, 20, 8))
    threads = tc.get_num_threads()
    runs = []
    tc.set_num_threads(1)  # one thread: the allocations vary the most from run to run
    try:
        for _ in range(30):
            layer = make_layer(8, 2, chunk=4, n_hashes=3, causal=True)
            y = layer.forward(x)
            runs.append((y, layer.backward(np.ones_like(y))))
    finally:
        tc.set_num_threads(threads)
    for y, dx in runs[1:]:
        np.testing.assert_array_equal(y, runs[0][0])
        np.testing.assert_array_equal(dx, runs[0][1])


# --- gradients ----------------------------------------------------------------------------------


@pytest.mark.parametrize("causal,n_hashes", [(False, 2), (True, 3)])
def test_gradients(causal, n_hashes):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 10, 8))
    layer = make_layer(8, 2, chunk=3, n_hashes=n_hashes, n_buckets=4, causal=causal)
    layer.freeze_hash = True  # every evaluation hashes with the same rotations
    w = rng.standard_normal((2, 10, 8))

    def loss():
        return float(np.sum(layer.forward(x) * w))

    layer.zero_grad()
    layer.forward(x)
    b = layer.buckets()
    assert len(np.unique(b)) > 1
    dx = layer.backward(w)
    assert dx.shape == x.shape
    grads = {n: p.grad.copy() for n, p in layer.parameters().items()}
    items = {"x": (x, dx), **parameter_items(layer, grads)}
    check_against_numeric(loss, items)
    layer.forward(x)
    np.testing.assert_array_equal(layer.buckets(), b)  # no perturbation moved a bucket


def test_gradient_accumulates_and_zero_grad_clears():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 8, 4))
    layer = make_layer(4, 1, chunk=2, n_hashes=2)
    layer.freeze_hash = True
    dout = rng.standard_normal((1, 8, 4))
    layer.forward(x)
    layer.backward(dout)
    once = grads_of(layer)
    layer.forward(x)
    layer.backward(dout)
    check_accumulated(layer, once, rtol=1e-12, atol=0)


# --- float32 ------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_float32_matches_float64(causal):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 24, 8))
    dout = rng.standard_normal((2, 24, 8))
    l64 = make_layer(8, 2, chunk=4, n_hashes=3, causal=causal)
    l32 = tc.LSHSelfAttention(8, 2, chunk=4, n_hashes=3, causal=causal, seed=3, dtype="float32")
    for name, p in l32.parameters().items():
        p.value[...] = l64.parameters()[name].value
    y64, y32 = l64.forward(x), l32.forward(x.astype(np.float32))
    assert y32.dtype == np.float32
    np.testing.assert_array_equal(l32.buckets(), l64.buckets())
    np.testing.assert_allclose(l32.rotations(), l64.rotations(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(y32, y64, rtol=0, atol=TOL32 * np.abs(y64).max())
    dx64, dx32 = l64.backward(dout), l32.backward(dout.astype(np.float32))
    np.testing.assert_allclose(dx32, dx64, rtol=0, atol=TOL32 * np.abs(dx64).max())
    for name, p in l32.parameters().items():
        g = l64.parameters()[name].grad
        np.testing.assert_allclose(p.grad, g, rtol=0, atol=TOL32 * np.abs(g).max())


# float32 chunk products on a register-tiled loop where the right side's width is a multiple of 16
# (with AVX2 + FMA; Eigen's GEMM otherwise): d_k 32 with chunks of 16 takes it for most products,
# with a shorter last chunk and a row count not a multiple of 4; d_k 10 takes Eigen's for most.
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d,h,chunk", [(64, 2, 16), (20, 2, 16), (64, 4, 8)])
def test_float32_chunk_products_match_float64(causal, d, h, chunk):
    rng = np.random.default_rng(12)
    x, dout = rng.standard_normal((2, 2, 77, d))
    l64 = tc.LSHSelfAttention(d, h, chunk=chunk, n_hashes=3, causal=causal, seed=5, dtype="float64")
    l32 = tc.LSHSelfAttention(d, h, chunk=chunk, n_hashes=3, causal=causal, seed=5, dtype="float32")
    for name, p in l32.parameters().items():
        p.value[...] = l64.parameters()[name].value
    pairs = [(l32.forward(x.astype(np.float32)), l64.forward(x))]
    np.testing.assert_array_equal(l32.buckets(), l64.buckets())
    pairs.append((l32.backward(dout.astype(np.float32)), l64.backward(dout)))
    pairs += [(p.grad, l64.parameters()[n].grad) for n, p in l32.parameters().items()]
    for a, b in pairs:
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL32 * np.abs(b).max())


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,words",
    [
        (dict(n_buckets=5), ValueError, "n_buckets must be an even integer"),
        (dict(n_buckets=0), ValueError, "n_buckets"),
        (dict(chunk=0), ValueError, "chunk must be"),
        (dict(n_hashes=0), ValueError, "n_hashes must be"),
        (dict(n_hashes=1000), ValueError, "n_hashes must be"),
        (dict(chunk=2.5), TypeError, "chunk"),
        (dict(causal="yes"), TypeError, "causal"),
        (dict(seed=-1), ValueError, "seed"),
    ],
)
def test_bad_settings(kwargs, exc, words):
    with pytest.raises(exc, match="LSHSelfAttention") as info:
        tc.LSHSelfAttention(8, 2, **kwargs)
    assert words in str(info.value)


def test_bad_input():
    layer = tc.LSHSelfAttention(8, 2, chunk=4, dtype="float64")
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        tc.LSHSelfAttention(10, 4)
    with pytest.raises(RuntimeError, match="forward"):
        layer.backward(np.zeros((1, 4, 8)))
    with pytest.raises(RuntimeError, match="forward"):
        layer.rotations()
    check_input_errors(layer, (1, 4, 8))
    x = np.zeros((1, 4, 8))
    x[0, 1, 2] = np.nan
    with pytest.raises(ValueError, match="x"):
        layer.forward(x)
    with pytest.raises(TypeError, match="causal"):
        layer.forward(np.zeros((1, 4, 8)), causal=1.5)
    y = layer.forward(np.ones((1, 4, 8)))
    with pytest.raises(ValueError, match="dout must have the output's shape"):
        layer.backward(np.zeros((1, 5, 8)))
    assert layer.backward(np.ones_like(y)).shape == (1, 4, 8)
    with pytest.raises(ValueError, match="calls"):
        layer.calls = -1
    with pytest.raises(TypeError, match="freeze_hash"):
        layer.freeze_hash = "no"
    with pytest.raises(ValueError, match="dtype"):
        tc.LSHSelfAttention(8, 2, dtype="float16")


# --- the kernel alone (LSHAttention) ------------------------------------------------------------


def heads_to_rows(a):
    """(B, H, T, d_k) -> (B, T, H * d_k): the layer's rows."""
    b, h, t, dk = a.shape
    return a.transpose(0, 2, 1, 3).reshape(b, t, h * dk)


@pytest.mark.parametrize("causal", [False, True])
def test_kernel_equals_the_layer_between_its_projections(causal):
    # the layer is its projections around the kernel: the kernel on the layer's Q and V, with the
    # same seed, gives the layer's heads forward and the layer's gradients backward
    rng = np.random.default_rng(21)
    d, h = 16, 2
    x, dout = rng.standard_normal((2, 2, 30, d))
    layer = make_layer(d, h, chunk=4, n_hashes=3, causal=causal)
    params = params_of(layer)
    q, _, v = projections(params, x, h)
    kernel = tc.LSHAttention(chunk=4, n_hashes=3, seed=3, dtype="float64")
    out = kernel.forward(q, v, causal=causal)
    assert out.shape == q.shape
    y = layer.forward(x)
    np.testing.assert_array_equal(kernel.buckets(), layer.buckets())
    np.testing.assert_allclose(output_projection(params, out), y, rtol=0, atol=TOL64)
    # backward: dctx = dout W_o in heads; dx = dQ W_q + dV W_v
    dctx = (dout @ params["output.weight"]).reshape(2, 30, h, d // h).transpose(0, 2, 1, 3)
    dq, dv = kernel.backward(dctx)
    dx = heads_to_rows(dq) @ params["query.weight"] + heads_to_rows(dv) @ params["value.weight"]
    np.testing.assert_allclose(layer.backward(dout), dx, rtol=0, atol=TOL64)


@pytest.mark.parametrize("causal,n_hashes", [(False, 2), (True, 3)])
def test_kernel_gradients(causal, n_hashes):
    rng = np.random.default_rng(22)
    qk, v, w = rng.standard_normal((3, 2, 2, 10, 4))
    kernel = tc.LSHAttention(chunk=3, n_hashes=n_hashes, n_buckets=4, seed=5, dtype="float64")

    def loss():
        kernel.calls = 0  # every evaluation hashes with the same rotations
        return float(np.sum(kernel.forward(qk, v, causal=causal) * w))

    loss()
    b = kernel.buckets()
    assert len(np.unique(b)) > 1
    dqk, dv = kernel.backward(w)
    check_against_numeric(loss, {"qk": (qk, dqk), "v": (v, dv)})
    loss()
    np.testing.assert_array_equal(kernel.buckets(), b)  # no perturbation moved a bucket


@pytest.mark.parametrize("causal", [False, True])
def test_kernel_float32_matches_float64(causal):
    # d_k 64 and chunks of 64 as the bench runs it, with a shorter last chunk
    rng = np.random.default_rng(23)
    qk, v, dout = rng.standard_normal((3, 1, 2, 333, 64))
    k64 = tc.LSHAttention(chunk=64, n_hashes=4, seed=6, dtype="float64")
    k32 = tc.LSHAttention(chunk=64, n_hashes=4, seed=6, dtype="float32")
    y64, y32 = k64.forward(qk, v, causal), k32.forward(qk.astype(np.float32), v.astype(np.float32), causal)
    assert y32.dtype == np.float32
    np.testing.assert_array_equal(k32.buckets(), k64.buckets())
    pairs = [(y32, y64)] + list(zip(k32.backward(dout.astype(np.float32)), k64.backward(dout)))
    for a, b in pairs:
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL32 * np.abs(b).max())


def test_kernel_bad_input():
    kernel = tc.LSHAttention(chunk=4, dtype="float64")
    with pytest.raises(ValueError, match="LSHAttention: n_buckets must be an even integer"):
        tc.LSHAttention(n_buckets=3)
    with pytest.raises(ValueError, match="LSHAttention.*n_hashes"):
        tc.LSHAttention(n_hashes=0)
    with pytest.raises(RuntimeError, match="forward"):
        kernel.backward(np.zeros((1, 1, 4, 8)))
    with pytest.raises(RuntimeError, match="forward"):
        kernel.buckets()
    with pytest.raises(ValueError, match="one shape"):
        kernel.forward(np.zeros((1, 2, 4, 8)), np.zeros((1, 2, 5, 8)))
    with pytest.raises(ValueError, match="qk"):
        kernel.forward(np.zeros((2, 4, 8)), np.zeros((2, 4, 8)))
    bad = np.zeros((1, 2, 4, 8))
    bad[0, 1, 2, 3] = np.inf
    with pytest.raises(ValueError, match="v"):
        kernel.forward(np.ones((1, 2, 4, 8)), bad)
    y = kernel.forward(np.ones((1, 2, 4, 8)), np.ones((1, 2, 4, 8)))
    with pytest.raises(ValueError, match="dout must have the output's shape"):
        kernel.backward(np.zeros((1, 2, 5, 8)))
    dqk, dv = kernel.backward(np.ones_like(y))
    assert dqk.shape == dv.shape == y.shape
