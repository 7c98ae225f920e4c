"""Fast paths against their readable references.

* train_step / evaluate compute only the rows the loss depends on ("padding removed"); the
  reference is the padded forward + masked_cross_entropy + backward.
* train_step's fused Adam pass (clipping factor applied while reading the gradient, gradients
  zeroed after use) against clipping the gradients and running the plain Adam update.
"""

import numpy as np
import pytest

import transformer_cpp as tc

from helpers.toy_task import float64_model


def batch(seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(3, 30, size=(4, 7))
    src[1, 4:] = 0
    src[3, 2:] = 0
    src[2, 3] = 0  # padding in the middle of a sentence too
    src[0, :] = 0  # and a sentence that is all padding
    src[0, 0] = 5
    tgt = rng.integers(3, 25, size=(4, 6))
    tgt[0, 3:] = 0
    tgt[2, 1:] = 0
    tgt[1, 2] = 0  # a padding input whose target is not padding
    return src, tgt[:, :-1].copy(), tgt[:, 1:].copy()


def model(pre_norm=False, dropout=0.3, share=False):
    return float64_model(pre_norm=pre_norm, dropout=dropout, share_embeddings=share)


def dense_reference(m, src, tgt_in, tgt_out):
    """loss and flat gradient of the padded forward/backward with the next dropout masks."""
    calls = m.dropout_calls
    loss, dlogits = tc.masked_cross_entropy(m.forward(src, tgt_in, training=True), tgt_out)
    m.zero_grad()
    m.backward(dlogits)
    m.dropout_calls = calls
    return loss, {k: p.grad.copy() for k, p in m.parameters().items()}


@pytest.mark.parametrize("pre_norm,share", [(False, False), (True, False), (False, True)])
def test_packed_train_step_equals_padded_forward_backward(pre_norm, share):
    m = model(pre_norm=pre_norm, share=share)
    src, tgt_in, tgt_out = batch()
    loss, grads = dense_reference(m, src, tgt_in, tgt_out)
    # the first Adam step stores m1 = (1 - beta1) * g: read the packed pass's gradient back from it
    m.configure_optimizer(fixed_lr=1e-300)
    packed_loss, _ = m.train_step(src, tgt_in, tgt_out)
    assert abs(packed_loss - loss) <= 1e-12 * abs(loss)
    state = m.optimizer_state()
    for name, g in grads.items():
        got = state[name + ".m"].value / 0.1
        np.testing.assert_allclose(got, g, rtol=0, atol=1e-12 * max(1.0, np.abs(g).max()), err_msg=name)
    assert abs(m.last_grad_norm - np.sqrt(sum((g**2).sum() for g in grads.values()))) < 1e-10


def test_packed_evaluate_equals_padded_loss_and_accuracy():
    m = model()
    src, tgt_in, tgt_out = batch(1)
    logits = m.forward(src, tgt_in)
    loss, acc = m.evaluate(src, tgt_in, tgt_out)
    assert abs(loss - tc.masked_cross_entropy(logits, tgt_out)[0]) < 1e-12
    assert acc == tc.masked_accuracy(logits, tgt_out)
    assert m.last_token_count == int((tgt_out != 0).sum())


def test_fused_adam_with_clipping_equals_clip_then_plain_adam():
    src, tgt_in, tgt_out = batch(2)
    a, b = model(dropout=0.0), model(dropout=0.0)
    for m in (a, b):
        m.configure_optimizer(warmup=10, clip_norm=0.5)
    # reference: padded gradients, clipped by hand, then Adam(...).step on the same parameters
    ref_opt = tc.Adam(b.parameters(), beta1=0.9, beta2=0.98, eps=1e-9)
    for step in range(1, 4):
        a.train_step(src, tgt_in, tgt_out)
        _, grads = dense_reference(b, src, tgt_in, tgt_out)
        norm = np.sqrt(sum((g**2).sum() for g in grads.values()))
        assert abs(norm - a.last_grad_norm) < 1e-10 * norm
        scale = min(1.0, 0.5 / norm)
        for p in b.parameters().values():
            p.grad[...] *= scale
        ref_opt.step(tc.warmup_learning_rate(step, 16, 10))
        # Adam divides by sqrt(v): for gradients that are rounding noise (the key bias, whose exact
        # gradient is 0) both runs move by ~lr * noise / |noise|, so allow 1e-8 — a wrong clipping
        # factor or update formula moves parameters by ~lr = 1e-2.
        for (name, pa), pb in zip(a.parameters().items(), b.parameters().values()):
            np.testing.assert_allclose(pa.value, pb.value, rtol=0, atol=1e-8, err_msg=f"step {step} {name}")
    # the fused pass leaves the gradients at zero for the next step
    assert all(not p.grad.any() for p in a.parameters().values())
