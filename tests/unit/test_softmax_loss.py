"""softmax, softmax_backward, masked_cross_entropy and masked_accuracy."""

import numpy as np
import pytest
import torch

from transformer_cpp.functional import masked_accuracy, masked_cross_entropy, softmax, softmax_backward
from helpers.gradcheck import TOLERANCE, numeric_grad, rel_error

pytestmark = pytest.mark.torch  # the module imports PyTorch


# --- references written from the definitions ---------------------------------------------------


def softmax_reference(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def cross_entropy_reference(logits, targets, eps=0.0):
    """(loss, dlogits) with q = (1 - eps) onehot + eps / V, averaged over targets != 0."""
    v = logits.shape[-1]
    x = logits.reshape(-1, v).astype(np.float64)
    t = targets.reshape(-1)
    m = x.max(axis=1, keepdims=True)
    logp = x - (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))
    q = np.full(x.shape, eps / v)
    q[np.arange(len(t)), t] += 1 - eps
    keep = t != 0
    n = keep.sum()
    loss = float(-(q * logp).sum(axis=1)[keep].sum() / n) if n else 0.0
    grad = (np.exp(logp) - q) * keep[:, None] / max(n, 1)
    return loss, grad.reshape(logits.shape)


def random_problem(shape, vocab, seed, pad_fraction=0.3):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(shape + (vocab,)) * 2
    targets = rng.integers(1, vocab, size=shape)
    targets[rng.random(shape) < pad_fraction] = 0
    return logits, targets


# --- softmax -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-6), (np.float64, 1e-14)])
def test_softmax_matches_numpy(dtype, tol):
    rng = np.random.default_rng(0)
    for shape in [(3, 7), (2, 4, 5, 9), (40, 30, 20)]:  # the last one takes the parallel path
        x = (rng.standard_normal(shape) * 5).astype(dtype)
        y = softmax(x)
        assert y.shape == shape and y.dtype == dtype
        np.testing.assert_allclose(y, softmax_reference(x), rtol=tol * 10, atol=tol)
        np.testing.assert_allclose(y.sum(-1), 1.0, rtol=tol * 10)


def test_softmax_is_stable_and_handles_masked_rows():
    x = np.array(
        [
            [1000.0, 1001.0, 999.0],  # large logits: no overflow
            [-np.inf, 0.0, -np.inf],  # partly masked
            [-np.inf, -np.inf, -np.inf],
        ]
    )  # fully masked: zeros, not NaN
    for dtype in (np.float32, np.float64):
        y = softmax(x.astype(dtype))
        assert np.isfinite(y).all()
        np.testing.assert_allclose(y[0], softmax_reference([0.0, 1.0, -1.0]), rtol=1e-6)
        np.testing.assert_array_equal(y[1], [0.0, 1.0, 0.0])
        np.testing.assert_array_equal(y[2], [0.0, 0.0, 0.0])


def test_softmax_does_not_modify_its_input():
    x = np.random.default_rng(1).standard_normal((4, 5))
    x0 = x.copy()
    softmax(x)
    np.testing.assert_array_equal(x, x0)


def test_softmax_backward_gradient_check_float64():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4, 6))
    w = rng.standard_normal(x.shape)
    analytic = softmax_backward(softmax(x), w)
    numeric = numeric_grad(lambda: float(np.sum(softmax(x) * w)), x)
    assert rel_error(analytic, numeric) <= TOLERANCE


def test_softmax_backward_matches_numpy():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 20, 30))
    dy = rng.standard_normal(x.shape)
    y = softmax(x)
    ref = y * (dy - (dy * y).sum(-1, keepdims=True))
    np.testing.assert_allclose(softmax_backward(y, dy), ref, rtol=1e-12, atol=1e-14)
    y32, dy32 = y.astype(np.float32), dy.astype(np.float32)
    out = softmax_backward(y32, dy32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-6)


def test_softmax_bad_input():
    with pytest.raises(TypeError, match="floating-point"):
        softmax(np.ones((2, 3), np.int64))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        softmax(np.float64(1.0))
    with pytest.raises(ValueError, match="same shape"):
        softmax_backward(np.ones((2, 3)), np.ones((3, 2)))


# --- masked cross-entropy ------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_cross_entropy_matches_numpy(eps):
    logits, targets = random_problem((4, 7), 11, seed=4)
    loss, dlogits = masked_cross_entropy(logits, targets, label_smoothing=eps)
    ref_loss, ref_grad = cross_entropy_reference(logits, targets, eps)
    assert isinstance(loss, float)
    assert dlogits.shape == logits.shape and dlogits.dtype == np.float64
    assert loss == pytest.approx(ref_loss, rel=1e-13)
    np.testing.assert_allclose(dlogits, ref_grad, rtol=1e-12, atol=1e-16)
    # padding rows have no gradient
    assert not dlogits[targets == 0].any()


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_cross_entropy_matches_torch(eps):
    logits, targets = random_problem((8, 30), 700, seed=5)  # 168,000 logits: parallel path
    lt = torch.from_numpy(logits).requires_grad_(True)
    ref = torch.nn.functional.cross_entropy(
        lt.reshape(-1, 700), torch.from_numpy(targets).reshape(-1), ignore_index=0, label_smoothing=eps
    )
    ref.backward()
    loss, dlogits = masked_cross_entropy(logits, targets, label_smoothing=eps)
    assert loss == pytest.approx(ref.item(), rel=1e-12)
    np.testing.assert_allclose(dlogits, lt.grad.numpy(), rtol=1e-10, atol=1e-16)
    # float32: same numbers to float precision
    loss32, d32 = masked_cross_entropy(logits.astype(np.float32), targets, label_smoothing=eps)
    assert d32.dtype == np.float32
    assert loss32 == pytest.approx(ref.item(), rel=1e-5)
    np.testing.assert_allclose(d32, lt.grad.numpy(), rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_cross_entropy_gradient_check_float64(eps):
    logits, targets = random_problem((3, 5), 6, seed=6, pad_fraction=0.4)
    assert (targets == 0).any() and (targets != 0).any()
    _, dlogits = masked_cross_entropy(logits, targets, label_smoothing=eps)
    numeric = numeric_grad(lambda: masked_cross_entropy(logits, targets, label_smoothing=eps)[0], logits)
    assert rel_error(dlogits, numeric) <= TOLERANCE


def test_cross_entropy_two_dimensional_and_without_gradient():
    logits, targets = random_problem((9,), 5, seed=7)
    loss, dlogits = masked_cross_entropy(logits, targets)
    ref_loss, ref_grad = cross_entropy_reference(logits, targets)
    assert loss == pytest.approx(ref_loss, rel=1e-13)
    np.testing.assert_allclose(dlogits, ref_grad, rtol=1e-12, atol=1e-16)
    loss2, none = masked_cross_entropy(logits, targets, compute_grad=False)
    assert none is None and loss2 == pytest.approx(loss, rel=1e-15)


def test_cross_entropy_gradients_are_independent_arrays():
    # the gradient buffer of a dropped result is reused; one that is still held must not change
    a, ta = random_problem((3, 4), 6, seed=12)
    b, tb = random_problem((3, 4), 6, seed=13)
    _, da = masked_cross_entropy(a, ta)
    kept = da.copy()
    for _ in range(3):
        _, db = masked_cross_entropy(b, tb)
        del db
    np.testing.assert_array_equal(da, kept)
    _, db = masked_cross_entropy(b, tb)
    np.testing.assert_allclose(db, cross_entropy_reference(b, tb)[1], rtol=1e-12, atol=1e-16)
    np.testing.assert_array_equal(da, kept)


def test_cross_entropy_all_padding_is_zero():
    logits = np.random.default_rng(8).standard_normal((2, 3, 4)).astype(np.float32)
    loss, dlogits = masked_cross_entropy(logits, np.zeros((2, 3), np.int64), label_smoothing=0.1)
    assert loss == 0.0 and dlogits.shape == (2, 3, 4) and not dlogits.any()


def test_cross_entropy_ignores_non_finite_padding_rows():
    logits, targets = random_problem((2, 4), 5, seed=9, pad_fraction=0.0)
    targets[0, 1] = 0
    logits[0, 1] = np.nan
    loss, dlogits = masked_cross_entropy(logits, targets)
    assert np.isfinite(loss) and np.isfinite(dlogits).all()


def test_cross_entropy_bad_input():
    logits, targets = random_problem((2, 3), 5, seed=10, pad_fraction=0.0)
    bad = logits.copy()
    bad[1, 2, 3] = np.nan
    with pytest.raises(RuntimeError, match="not finite"):
        masked_cross_entropy(bad, targets)
    bad[1, 2, 3] = np.inf
    with pytest.raises(RuntimeError, match="not finite"):
        masked_cross_entropy(bad.astype(np.float32), targets)
    with pytest.raises(ValueError, match="target id 5 at row 1 is out of range for 5 classes"):
        masked_cross_entropy(logits, np.array([[1, 5, 0], [1, 1, 1]]))
    with pytest.raises(ValueError, match="target id -1 .*out of range"):
        masked_cross_entropy(logits, np.array([[1, 1, 0], [1, -1, 1]]))
    with pytest.raises(TypeError, match="integer"):
        masked_cross_entropy(logits, targets.astype(np.float64))
    with pytest.raises(TypeError, match="floating-point"):
        masked_cross_entropy(logits.astype(np.int64), targets)
    with pytest.raises(ValueError, match=r"targets must have shape \(2, 3\)"):
        masked_cross_entropy(logits, np.ones((3, 2), np.int64))
    with pytest.raises(ValueError, match="dimensions"):
        masked_cross_entropy(logits, np.ones(6, np.int64))
    with pytest.raises(ValueError, match=r"\(N, V\) or \(B, T, V\)"):
        masked_cross_entropy(np.ones(5), np.ones((), np.int64))
    with pytest.raises(ValueError, match="label_smoothing"):
        masked_cross_entropy(logits, targets, label_smoothing=1.5)


# --- accuracy ----------------------------------------------------------------------------------


def test_masked_accuracy():
    logits, targets = random_problem((6, 9), 4, seed=11)
    keep = targets != 0
    ref = float((logits.argmax(-1) == targets)[keep].mean())
    assert masked_accuracy(logits, targets) == pytest.approx(ref, abs=1e-15)
    assert masked_accuracy(logits.astype(np.float32), targets) == pytest.approx(ref, abs=1e-15)
    # logits that put the mass on the target are always right
    perfect = np.eye(4)[targets] * 10.0
    assert masked_accuracy(perfect, targets) == 1.0
    # ties go to the first maximum, as numpy.argmax and torch.argmax
    tie = np.array([[1.0, 3.0, 3.0, 0.0]])
    assert masked_accuracy(tie, np.array([1])) == 1.0
    assert masked_accuracy(tie, np.array([2])) == 0.0
    assert masked_accuracy(logits, np.zeros_like(targets)) == 0.0
    with pytest.raises(ValueError, match="out of range"):
        masked_accuracy(logits, np.full_like(targets, 4))
    with pytest.raises(ValueError, match="targets must have shape"):
        masked_accuracy(logits, targets[:, :3])
