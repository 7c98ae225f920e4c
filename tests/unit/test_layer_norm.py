"""LayerNorm (and the element-wise ReLU): values, PyTorch parity, gradient checks, bad input."""

import numpy as np
import pytest
import torch

import transformer_cpp as tc
from transformer_cpp.layers import LayerNorm, ReLU
from helpers.gradcheck import check_layer

pytestmark = pytest.mark.torch  # the module imports PyTorch


def layer_norm_reference(x, weight, bias, eps):
    """Written from the definition: biased variance, eps inside the square root."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def randomise(ln, seed):
    rng = np.random.default_rng(seed)
    p = ln.parameters()
    p["weight"].value[:] = rng.uniform(0.5, 1.5, p["weight"].value.shape)
    p["bias"].value[:] = rng.standard_normal(p["bias"].value.shape)
    return p["weight"].value.copy(), p["bias"].value.copy()


def test_parameters_and_defaults():
    ln = LayerNorm(6)
    assert ln.eps == 1e-6 and ln.d_model == 6
    p = ln.parameters()
    assert list(p) == ["weight", "bias"]
    assert p["weight"].value.dtype == np.float32 and p["weight"].value.shape == (6,)
    np.testing.assert_array_equal(p["weight"].value, np.ones(6))
    np.testing.assert_array_equal(p["bias"].value, np.zeros(6))


def test_biased_variance_and_eps_inside_sqrt():
    ln = LayerNorm(2, eps=0.25, dtype="float64")
    # row [1, -1]: mean 0, biased variance 1 (the unbiased one would be 2)
    y = ln.forward(np.array([[1.0, -1.0]]))
    np.testing.assert_allclose(y, [[1 / np.sqrt(1.25), -1 / np.sqrt(1.25)]], rtol=1e-15)
    # a constant row normalises to zero, i.e. to the bias, with no NaN
    ln.parameters()["bias"].value[:] = [3.0, -2.0]
    np.testing.assert_array_equal(ln.forward(np.full((1, 2), 7.0)), [[3.0, -2.0]])


@pytest.mark.parametrize("dtype,tol", [("float32", 2e-6), ("float64", 1e-13)])
def test_forward_matches_numpy(dtype, tol):
    ln = LayerNorm(16, dtype=dtype)
    w, b = randomise(ln, 0)
    # (2, 3, 16) is the serial path; (64, 20, 16) = 20480 elements the parallel one
    for shape in [(2, 3, 16), (64, 20, 16)]:
        x = (np.random.default_rng(1).standard_normal(shape) * 3 + 1).astype(dtype)
        y = ln.forward(x)
        assert y.shape == shape and y.dtype == np.dtype(dtype)
        ref = layer_norm_reference(x.astype(np.float64), w, b, 1e-6)
        np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * 10)


def test_forward_and_backward_match_torch_float64():
    d = 32
    ln = LayerNorm(d, dtype="float64")
    w, b = randomise(ln, 2)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 40, d)) * 2 - 0.5  # 10240 rows * d: parallel path
    dout = rng.standard_normal(x.shape)

    ref = torch.nn.LayerNorm(d, eps=1e-6, dtype=torch.float64)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(w))
        ref.bias.copy_(torch.from_numpy(b))
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = ref(xt)
    yt.backward(torch.from_numpy(dout))

    y = ln.forward(x)
    dx = ln.backward(dout)
    p = ln.parameters()
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(p["weight"].grad, ref.weight.grad.numpy(), rtol=1e-11, atol=1e-10)
    np.testing.assert_allclose(p["bias"].grad, ref.bias.grad.numpy(), rtol=1e-11, atol=1e-10)


def test_forward_matches_torch_float32():
    d = 64
    ln = LayerNorm(d)
    w, b = randomise(ln, 4)
    x = np.random.default_rng(5).standard_normal((4, 30, d)).astype(np.float32)
    ref = torch.nn.LayerNorm(d, eps=1e-6)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(w))
        ref.bias.copy_(torch.from_numpy(b))
        yt = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ln.forward(x), yt, rtol=1e-5, atol=2e-6)


def test_gradients_float64():
    ln = LayerNorm(5, dtype="float64")
    randomise(ln, 6)
    x = np.random.default_rng(7).standard_normal((2, 3, 5))
    check_layer(ln, {"x": x}, lambda x: ln.forward(x), lambda d: {"x": ln.backward(d)})


def test_residual_gradients_float64():
    ln = LayerNorm(6, dtype="float64")
    randomise(ln, 8)
    rng = np.random.default_rng(9)
    a = rng.standard_normal((3, 2, 6))
    b = rng.standard_normal((3, 2, 6))

    def backward(d):
        dsum = ln.backward(d)
        return {"a": dsum, "b": dsum}

    check_layer(ln, {"a": a, "b": b}, lambda a, b: ln.forward_residual(a, b), backward)


def test_residual_equals_forward_of_the_sum():
    ln = LayerNorm(8, dtype="float64")
    randomise(ln, 10)
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 5, 8))
    d = rng.standard_normal((2, 5, 8))
    y1 = ln.forward_residual(a, b)
    dx1 = ln.backward(d)
    g1 = {k: p.grad.copy() for k, p in ln.parameters().items()}
    ln.zero_grad()
    y2 = ln.forward(a + b)
    dx2 = ln.backward(d)
    np.testing.assert_allclose(y1, y2, rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(dx1, dx2, rtol=1e-14, atol=1e-14)
    for k, p in ln.parameters().items():
        np.testing.assert_allclose(g1[k], p.grad, rtol=1e-14, atol=1e-14)


def test_gradients_accumulate_until_zero_grad():
    ln = LayerNorm(4, dtype="float64")
    x = np.random.default_rng(12).standard_normal((3, 4))
    d = np.random.default_rng(13).standard_normal((3, 4))
    ln.forward(x)
    ln.backward(d)
    g = ln.parameters()["weight"].grad.copy()
    ln.backward(d)
    np.testing.assert_allclose(ln.parameters()["weight"].grad, 2 * g, rtol=1e-15)
    ln.zero_grad()
    assert not ln.parameters()["weight"].grad.any() and not ln.parameters()["bias"].grad.any()


def test_parameter_gradients_do_not_depend_on_thread_count():
    x = np.random.default_rng(14).standard_normal((300, 64)).astype(np.float32)
    d = np.random.default_rng(15).standard_normal((300, 64)).astype(np.float32)
    n = tc.get_num_threads()
    grads = []
    try:
        for threads in (1, 2):
            tc.set_num_threads(threads)
            ln = LayerNorm(64)
            ln.forward(x)
            ln.backward(d)
            grads.append([p.grad.copy() for p in ln.parameters().values()])
    finally:
        tc.set_num_threads(n)
    for a, b in zip(*grads):
        np.testing.assert_array_equal(a, b)


def test_writing_parameters_changes_the_layer():
    ln = LayerNorm(3, dtype="float64")
    ln.parameters()["weight"].value[:] = 2.0
    x = np.array([[1.0, 2.0, 3.0]])
    np.testing.assert_allclose(ln.forward(x), 2 * layer_norm_reference(x, 1.0, 0.0, 1e-6), rtol=1e-14)


def test_layer_norm_bad_input():
    ln = LayerNorm(4)
    with pytest.raises(ValueError, match="last dimension 4"):
        ln.forward(np.zeros((2, 5), np.float32))
    with pytest.raises(TypeError, match="floating-point"):
        ln.forward(np.zeros((2, 4), np.int64))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        ln.forward(np.float32(1.0))
    with pytest.raises(RuntimeError, match="forward"):
        LayerNorm(4).backward(np.zeros((2, 4), np.float32))
    ln.forward(np.ones((2, 3, 4), np.float32))
    with pytest.raises(ValueError, match=r"shape of the last output \(2, 3, 4\)"):
        ln.backward(np.zeros((3, 2, 4), np.float32))
    with pytest.raises(ValueError, match="last dimension 4"):
        ln.backward(np.zeros((2, 3, 5), np.float32))
    with pytest.raises(ValueError, match="same shape"):
        ln.forward_residual(np.zeros((2, 4), np.float32), np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="d_model must be positive"):
        LayerNorm(0)
    with pytest.raises(ValueError, match="eps"):
        LayerNorm(4, eps=-1.0)
    with pytest.raises(ValueError, match="dtype"):
        LayerNorm(4, dtype="int32")


# --- ReLU ------------------------------------------------------------------------------------


def test_relu_values_and_shapes():
    x = np.array([[-2.0, -0.5, 0.0, 0.5, 3.0]], np.float32)
    r = ReLU()
    y = r.forward(x)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [[0, 0, 0, 0.5, 3.0]])
    big = np.random.default_rng(16).standard_normal((3, 100, 200)).astype(np.float32)  # parallel chunks
    np.testing.assert_array_equal(r.forward(big), np.maximum(big, 0))
    d = np.random.default_rng(17).standard_normal(big.shape).astype(np.float32)
    np.testing.assert_array_equal(r.backward(d), np.where(big > 0, d, 0))
    assert list(r.parameters()) == []


def test_relu_gradients_float64():
    r = ReLU(dtype="float64")
    rng = np.random.default_rng(18)
    # keep inputs at least 0.1 away from the kink so that central differences are exact
    x = rng.uniform(0.1, 1.0, (4, 3, 5)) * rng.choice([-1.0, 1.0], (4, 3, 5))
    check_layer(r, {"x": x}, lambda x: r.forward(x), lambda d: {"x": r.backward(d)})


def test_relu_bad_input():
    with pytest.raises(RuntimeError, match="forward"):
        ReLU().backward(np.zeros((2, 2), np.float32))
    r = ReLU()
    r.forward(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="shape"):
        r.backward(np.zeros((3, 2), np.float32))
    with pytest.raises(TypeError, match="floating-point"):
        r.forward(np.zeros((2, 3), bool))


def test_huge_finite_inputs_normalise_correctly_in_float32():
    """Squares of 1e30 overflow float32; the row must still be normalised, not zeroed."""
    import transformer_cpp as tc

    x = np.array([[[1e30, 0, 0, 0], [1e20, -3e20, 2e20, 5e19], [1.0, 2.0, 3.0, 4.0]]], dtype=np.float32)
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-6)
    out = tc.LayerNorm(4).forward(x)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
