import numpy as np
import pytest

import transformer_cpp as tc
from helpers.gradcheck import check_layer, rel_error


def test_linear_matches_numpy_and_shapes():
    lin = tc.Linear(5, 3, seed=1)
    x = np.random.default_rng(0).standard_normal((2, 4, 5)).astype(np.float32)
    p = lin.parameters()
    assert list(p) == ["weight", "bias"]
    assert p["weight"].value.shape == (3, 5) and p["bias"].value.shape == (3,)
    p["bias"].value[:] = [0.5, -1.0, 2.0]
    y = lin.forward(x)
    assert y.shape == (2, 4, 3) and y.dtype == np.float32
    np.testing.assert_allclose(y, x @ p["weight"].value.T + p["bias"].value, rtol=1e-5, atol=1e-6)


def test_linear_gradients_float64():
    lin = tc.Linear(4, 3, seed=2, dtype="float64")
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    lin.parameters()["bias"].value[:] = np.random.default_rng(2).standard_normal(3)
    check_layer(lin, {"x": x}, lambda x: lin.forward(x), lambda d: {"x": lin.backward(d)})


def test_linear_gradients_accumulate_until_zero_grad():
    lin = tc.Linear(3, 2, dtype="float64")
    x = np.ones((4, 3))
    d = np.ones((4, 2))
    lin.forward(x)
    lin.backward(d)
    g1 = lin.parameters()["weight"].grad.copy()
    lin.backward(d)
    np.testing.assert_allclose(lin.parameters()["weight"].grad, 2 * g1)
    lin.zero_grad()
    assert not lin.parameters()["weight"].grad.any()


def test_linear_bad_input():
    lin = tc.Linear(4, 3)
    with pytest.raises(ValueError, match="last dimension 4"):
        lin.forward(np.zeros((2, 5), np.float32))
    with pytest.raises(TypeError, match="floating-point"):
        lin.forward(np.zeros((2, 4), np.int64))
    with pytest.raises(RuntimeError, match="forward"):
        tc.Linear(4, 3).backward(np.zeros((2, 3), np.float32))
    lin.forward(np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="shape"):
        lin.backward(np.zeros((3, 3), np.float32))
    with pytest.raises(ValueError, match="positive"):
        tc.Linear(0, 3)
    with pytest.raises(ValueError, match="dtype"):
        tc.Linear(2, 3, dtype="int8")


def test_dropout_statistics_scaling_and_determinism():
    x = np.ones((200, 100), np.float32)
    d = tc.Dropout(0.25, seed=3)
    y = d.forward(x, training=True)
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01  # 20,000 draws: std of the mean is 0.003
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    np.testing.assert_array_equal(d.forward(x, training=False), x)
    # the same seed and call count give the same mask; the next call a different one
    d2 = tc.Dropout(0.25, seed=3)
    np.testing.assert_array_equal(d2.forward(x, training=True), y)
    assert not np.array_equal(d2.forward(x, training=True), y)
    d2.calls = 0
    np.testing.assert_array_equal(d2.forward(x, training=True), y)


def _splitmix64(x):
    """splitmix64 written out in NumPy (uint64 arithmetic wraps modulo 2**64), x an array."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _reference_mask(rows, cols, rate, seed, stream, call):
    """The scale factors of the `call`-th training forward: element i of the flattened (rows, cols)
    input is dropped when counter_uniform(seed, stream, call, i) < rate (random.hpp), a uniform
    from the top 53 bits of four chained splitmix64 mixes."""
    key = np.array([seed ^ 0x5851F42D4C957F2D], np.uint64)
    for part in (stream, call):
        key = _splitmix64(key) ^ np.uint64(part)
    key = _splitmix64(key)
    bits = _splitmix64(key ^ np.arange(rows * cols, dtype=np.uint64))
    u = (bits >> np.uint64(11)).astype(np.float64) * (1.0 / 2.0**53)
    return np.where(u < rate, 0.0, 1.0 / (1.0 - rate)).reshape(rows, cols)


@pytest.mark.parametrize("cols", [1, 63, 64, 65, 130])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rate", [0.3, 0.25, 0.1])
def test_dropout_mask_is_the_counter_hash(cols, dtype, rate):
    """Each element's keep/drop decision is the counter hash of its index, whatever the row
    width (the mask is kept as bits, a row starting a new 64-bit word) and the rate (0.25 * 2^53
    is a whole number, 0.3 * 2^53 and 0.1 * 2^53 are not: the core compares the draw's bits with
    a threshold): forward and backward multiply by exactly the reference's factors, call after call."""
    rows, seed = 37, 11
    d = tc.Dropout(rate, seed=seed, dtype=dtype)
    rng = np.random.default_rng(cols)
    x = rng.standard_normal((rows, cols)).astype(dtype)
    for call in range(3):
        mask = _reference_mask(rows, cols, rate, seed, 0, call).astype(dtype)
        np.testing.assert_array_equal(d.forward(x, training=True), x * mask)
        g = rng.standard_normal((rows, cols)).astype(dtype)
        np.testing.assert_array_equal(d.backward(g), g * mask)
    assert d.calls == 3
    # an inference forward is the identity, and its backward too
    np.testing.assert_array_equal(d.forward(x, training=False), x)
    np.testing.assert_array_equal(d.backward(x), x)


@pytest.mark.parametrize("d_ff", [64, 100])
def test_feed_forward_training_forward_is_relu_then_the_reference_mask(d_ff):
    """The feed-forward's hidden layer in training is ReLU, then dropout with the counter hash's
    mask of the layer's own stream (ReLU and dropout run as one pass): its output equals the
    readable reference y = (relu(x W1^T + b1) * mask) W2^T + b2, call after call."""
    rate, seed = 0.4, 5
    ff = tc.FeedForward(24, d_ff, dropout=rate, seed=seed, dtype="float64")
    p = {k: v.value for k, v in ff.parameters().items()}
    x = np.random.default_rng(d_ff).standard_normal((13, 24))
    stream = int(_splitmix64(np.array([seed + 3], np.uint64))[0])  # its dropout's stream (feed_forward.cpp)
    for call in range(2):
        mask = _reference_mask(13, d_ff, rate, seed, stream, call)
        h = np.maximum(x @ p["linear1.weight"].T + p["linear1.bias"], 0.0) * mask
        want = h @ p["linear2.weight"].T + p["linear2.bias"]
        np.testing.assert_allclose(ff.forward(x, training=True), want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        ff.forward(x, training=False),
        np.maximum(x @ p["linear1.weight"].T + p["linear1.bias"], 0.0) @ p["linear2.weight"].T + p["linear2.bias"],
        rtol=0,
        atol=1e-12,
    )


def test_dropout_same_mask_for_any_thread_count():
    x = np.ones((300, 300), np.float32)
    n = tc.get_num_threads()
    try:
        tc.set_num_threads(1)
        a = tc.Dropout(0.5, seed=7).forward(x, training=True)
        tc.set_num_threads(2)
        b = tc.Dropout(0.5, seed=7).forward(x, training=True)
    finally:
        tc.set_num_threads(n)
    np.testing.assert_array_equal(a, b)


def test_dropout_backward_uses_the_forward_mask():
    d = tc.Dropout(0.5, seed=1, dtype="float64")
    x = np.random.default_rng(0).standard_normal((6, 7))
    y = d.forward(x, training=True)
    g = np.random.default_rng(1).standard_normal((6, 7))
    dx = d.backward(g)
    mask = np.where(y != 0, 2.0, 0.0)
    assert rel_error(dx, g * mask) < 1e-15
    with pytest.raises(ValueError, match="rate"):
        tc.Dropout(1.0)
