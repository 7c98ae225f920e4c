"""The language model with relative attention and a segment memory (Transformer-XL): float64
gradients against central differences with the memory as a constant input, memory 0 against the
model without memory, segment-by-segment evaluation against one forward over the concatenated
text, the generation step, the consecutive-stripe batches and the bits-per-character walk, and bad
input."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.layer_checks import check_lm_gradients, tokens_for
from helpers.toy_task import write_tiny_text
from transformer_cpp import LanguageModel
from transformer_cpp.task.lm_evaluation import bits_per_character, segments, stripes

SMALL = dict(d_model=8, n_layers=2, n_heads=2, d_ff=12, dropout=0.0, attention="relative")


def perturbed(lm: LanguageModel, seed: int = 1) -> LanguageModel:
    # u, v and the biases start at 0: move every weight off its initial point
    rng = np.random.default_rng(seed)
    for p in lm.parameters().values():
        p.value[...] += 0.05 * rng.standard_normal(p.value.shape)
    return lm


@pytest.mark.parametrize("pre_norm", [True, False])
def test_gradients_with_a_memory_match_central_differences_float64(pre_norm):
    lm = perturbed(LanguageModel(7, dtype="float64", seed=3, memory_length=5, pre_norm=pre_norm, **SMALL))
    first, second = tokens_for(7, (2, 7), seed=2), tokens_for(7, (2, 5), seed=4)
    lm.evaluate_loss(first)  # the memory: the last 5 of the 6 input positions of each block
    assert lm.memory_held == 5
    lm.memory_update = False  # from here on a constant input
    lm.compute_gradients(second, training=False)
    assert lm.memory_held == 5
    grads = {name: np.array(p.grad) for name, p in lm.parameters().items()}
    assert {"layers.0.self_attention.u", "layers.1.self_attention.position.weight"} <= set(grads)
    assert check_lm_gradients(lm, second, per_parameter=3, seed=5) >= 40


def test_the_memory_changes_the_loss_and_no_memory_is_memory_zero():
    first, second = tokens_for(9, (2, 9), seed=1), tokens_for(9, (2, 7), seed=2)
    with_memory = perturbed(LanguageModel(9, dtype="float64", seed=2, memory_length=6, **SMALL))
    without = perturbed(LanguageModel(9, dtype="float64", seed=2, memory_length=0, **SMALL))
    # the first segment: both start empty
    np.testing.assert_allclose(with_memory.forward(first), without.forward(first), rtol=1e-12, atol=1e-12)
    # memory 0 keeps nothing: the second segment is scored as a fresh model scores it
    fresh = without.forward(second)
    np.testing.assert_allclose(fresh, perturbed(LanguageModel(9, dtype="float64", seed=2, **SMALL)).forward(second))
    assert without.memory_held == 0
    # with a memory the second segment sees the first: other logits
    assert with_memory.memory_held == 6
    assert np.abs(with_memory.forward(second) - fresh).max() > 1e-3
    # setting the length (to 0, or to any other) empties the memory
    with_memory.memory_length = 0
    np.testing.assert_allclose(with_memory.forward(second), fresh, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pre_norm", [True, False])
def test_segments_with_memory_equal_one_forward_over_the_concatenation(pre_norm):
    # with a memory as long as everything before, each segment's queries see exactly what they see
    # in one causal forward over the whole text; relative positions make the logits equal
    lm = perturbed(LanguageModel(11, dtype="float64", seed=5, pre_norm=pre_norm, **SMALL))
    text = tokens_for(11, (3, 12), seed=6)
    whole = lm.forward(text)
    lm.memory_length = 8
    pieces = [lm.forward(text[:, k : k + 4]) for k in range(0, 12, 4)]
    assert lm.memory_held == 8
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), whole, rtol=1e-10, atol=1e-12)
    # a memory of 4 (one segment) is the same for the second segment, not for the third
    lm.memory_length = 4
    pieces = [lm.forward(text[:, k : k + 4]) for k in range(0, 12, 4)]
    np.testing.assert_allclose(pieces[1], whole[:, 4:8], rtol=1e-10, atol=1e-12)
    assert np.abs(pieces[2] - whole[:, 8:]).max() > 1e-6


def test_float32_training_steps_carry_the_memory():
    lm = LanguageModel(6, d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, seed=0, attention="relative")
    lm.memory_length = 8
    lm.configure_optimizer(fixed_lr=3e-3)
    text = np.tile(np.array([1, 2, 3, 4, 5], dtype=np.int64), (2, 40))
    losses = []
    for step in range(60):
        k = step % 10
        if k == 0:
            lm.reset_memory()
        losses.append(lm.train_step(text[:, k * 8 : k * 8 + 9]))
        assert lm.memory_held == 8
    assert losses[-1] < 0.3 * losses[0]


@pytest.mark.parametrize("pre_norm", [True, False])
def test_generation_step_equals_the_full_forward(pre_norm):
    lm = perturbed(LanguageModel(9, dtype="float64", seed=4, pre_norm=pre_norm, **SMALL))
    assert lm.has_cached_step
    tokens = tokens_for(9, (2, 20), seed=8)
    full = lm.forward(tokens)
    lm.start_generation(2, 20)
    for t in range(20):
        np.testing.assert_allclose(lm.generation_step(tokens[:, t]), full[:, t], rtol=1e-10, atol=1e-12)
    # the window slides on past the capacity: no error, finite logits
    assert np.isfinite(lm.generation_step(tokens[:, 0])).all()


def test_clamp_len_changes_only_the_positions_farther_than_it():
    lm = perturbed(LanguageModel(9, dtype="float64", seed=6, **SMALL))
    tokens = tokens_for(9, (2, 10), seed=3)
    plain = lm.forward(tokens)
    assert lm.clamp_len is None
    lm.clamp_len = 9  # the longest distance of 10 positions: nothing is clamped
    np.testing.assert_allclose(lm.forward(tokens), plain, rtol=1e-12, atol=1e-12)
    lm.clamp_len = 3
    clamped = lm.forward(tokens)
    # position t attends to distances 0 ... t: up to t = 3 every distance is within the clamp
    np.testing.assert_allclose(clamped[:, :4], plain[:, :4], rtol=1e-12, atol=1e-12)
    assert np.abs(clamped[:, 4:] - plain[:, 4:]).max(axis=-1).min() > 1e-6
    # the generation step encodes distances with the same clamp
    lm.start_generation(2, 10)
    for t in range(10):
        np.testing.assert_allclose(lm.generation_step(tokens[:, t]), clamped[:, t], rtol=1e-10, atol=1e-12)
    lm.clamp_len = None
    np.testing.assert_allclose(lm.forward(tokens), plain, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="clamp_len"):
        lm.clamp_len = -1
    with pytest.raises(ValueError, match="clamp_len needs attention 'relative'"):
        LanguageModel(5, d_model=8, n_heads=2, n_layers=1, d_ff=8).clamp_len = 4


def test_stripes_and_segments_score_every_label_once():
    ids = np.arange(1, 104, dtype=np.int64)  # 102 labels
    block = stripes(ids, 4)
    assert block.shape == (4, 27)
    labels = np.concatenate([row[1:][row[1:] != 0] for row in block])
    np.testing.assert_array_equal(labels, ids[1:])
    windows = segments(block, 10)
    assert [w.shape for w in windows] == [(4, 11)] * 3
    # segment k + 1 continues segment k in every row
    for a, b in zip(windows, windows[1:]):
        np.testing.assert_array_equal(a[:, -1], b[:, 0])
    scored = np.concatenate([w[:, 1:] for w in windows], axis=1)
    np.testing.assert_array_equal(np.sort(scored[scored != 0]), ids[1:])


def test_bits_per_character_with_memory_counts_every_character_and_restores_the_length():
    lm = perturbed(LanguageModel(9, seed=1, memory_length=3, **SMALL))
    ids = tokens_for(9, (1, 101), seed=3)[0]
    zero = bits_per_character(lm, ids, 8, batch_size=3, memory_length=0)
    long = bits_per_character(lm, ids, 8, batch_size=3, memory_length=40)
    assert lm.memory_length == 3 and lm.memory_held == 0
    assert np.isfinite(zero) and np.isfinite(long) and zero != long
    # memory 0 with one stripe: the same as scoring each window alone
    lm.memory_length = 0
    nats = 0.0
    for w in segments(stripes(ids, 1), 8):
        loss, n = lm.evaluate_loss(w)
        nats += loss * n
    lm.memory_length = 3
    assert bits_per_character(lm, ids, 8, batch_size=1, memory_length=0) == pytest.approx(
        nats / 100 / np.log(2), rel=1e-5
    )


def test_bad_input_is_refused_with_clear_errors():
    with pytest.raises(ValueError, match="memory_length 4 needs attention 'relative'"):
        LanguageModel(5, d_model=8, n_heads=2, memory_length=4)
    with pytest.raises(ValueError, match="memory_length"):
        LanguageModel(5, d_model=8, n_heads=2, attention="relative", memory_length=-1)
    soft = LanguageModel(5, d_model=8, n_heads=2, n_layers=1, d_ff=8)
    with pytest.raises(ValueError, match="needs attention 'relative'"):
        soft.memory_length = 3
    with pytest.raises(ValueError, match="needs attention 'relative'"):
        bits_per_character(soft, np.array([1, 2, 3, 4]), 2, memory_length=2)
    lm = LanguageModel(5, d_model=8, n_heads=2, n_layers=1, d_ff=8, attention="relative", memory_length=4)
    with pytest.raises(ValueError, match="memory_length"):
        lm.memory_length = -2
    lm.forward(tokens_for(5, (2, 3)))
    with pytest.raises(ValueError, match="the memory holds 2 sequences, the batch has 3.*reset_memory"):
        lm.forward(tokens_for(5, (3, 3)))
    lm.reset_memory()
    assert lm.forward(tokens_for(5, (3, 3))).shape == (3, 3, 5)


# ------------------------------------------------------------------ the task and the commands


@pytest.fixture
def text_file(tmp_path):
    return write_tiny_text(tmp_path / "tiny.txt", 120)


def test_training_batches_walk_consecutive_stripes_and_reset_when_they_wrap(text_file, tmp_path):
    from transformer_cpp.task import LmTrainRequest, new_lm_trainer

    tiny = dict(d_model=8, n_layers=1, n_heads=2, d_ff=16, dropout=0.0, threads=1, adaptive_threads=False)
    request = LmTrainRequest(
        text=str(text_file), attention="relative", memory_length=8, seq_len=8, batch_size=4, steps=3, **tiny
    )
    trainer = new_lm_trainer(request, tmp_path / "run", lambda _: None)
    task = trainer.task
    train = task.ids["train"]
    width = len(train) // 4
    k, count = task.segment_of(1)
    assert (k, count) == (0, (width - 1) // 8)
    previous = None
    for step in range(1, count + 1):
        batch = task.batch(step)
        # row b, segment k: characters [b * width + 8k, b * width + 8k + 9) of the training text
        for b in range(4):
            start = b * width + 8 * (step - 1)
            np.testing.assert_array_equal(batch[b], train[start : start + 9])
        if previous is not None:
            np.testing.assert_array_equal(batch[:, 0], previous[:, -1])
        previous = batch
    assert task.segment_of(count + 1) == (0, count)  # the stripes start again
    assert task.steps_per_epoch == count  # an epoch is one walk along the stripes
    np.testing.assert_array_equal(task.batch(count + 1), task.batch(1))
    trainer.fit()
    assert trainer.model.memory_length == 8
    assert trainer.model.memory_held == 0  # the last evaluation empties it


def test_commands_with_relative_attention_and_memory(text_file, tmp_path, capsys):
    from transformer_cpp.cli import main
    from transformer_cpp.task import load_lm

    out = tmp_path / "xl"
    tiny = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--d-ff", "32", "--seq-len", "8"]
    args = ["--text", str(text_file), "--out", str(out), *tiny, "--batch-size", "4", "--steps", "4", "--threads", "1"]
    assert main(["train-lm", *args, "--eval-chars", "256", "--attention", "relative", "--memory-length", "8"]) == 0
    assert "bits per character on the held-out test text" in capsys.readouterr().out
    run = load_lm(out)
    assert run.model.config["attention"] == "relative" and run.model.memory_length == 8
    assert main(["generate", "--model", str(out), "--prompt", "the", "--max-output-tokens", "40", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("the") and len(text.rstrip("\n")) == 43
    scores = {}
    for m in ("0", "8", "32"):
        assert main(["evaluate-lm", "--model", str(out), "--memory-length", m]) == 0
        printed = capsys.readouterr().out
        assert f"memory {m})" in printed
        scores[m] = float(printed.split()[0])
    assert len(set(scores.values())) == 3
    with pytest.raises(SystemExit) as stop:  # refused at the door
        main(["evaluate-lm", "--model", str(out), "--memory-length", "-1"])
    assert stop.value.code == 2
    assert "argument --memory-length: memory_length must be an integer in [0, " in capsys.readouterr().err
    # a memory of 32 with the distances clamped at 4: another score than without the clamp
    assert main(["evaluate-lm", "--model", str(out), "--memory-length", "32", "--clamp-len", "4"]) == 0
    printed = capsys.readouterr().out
    assert "memory 32, distances clamped at 4)" in printed
    assert float(printed.split()[0]) != scores["32"]
    with pytest.raises(SystemExit) as stop:
        main(["evaluate-lm", "--model", str(out), "--clamp-len", "-3"])
    assert stop.value.code == 2
    assert "argument --clamp-len: clamp_len must be an integer in [0, " in capsys.readouterr().err
    soft = tmp_path / "soft"
    assert (
        main(["train-lm", "--text", str(text_file), "--out", str(soft), *tiny, "--steps", "1", "--threads", "1"]) == 0
    )
    capsys.readouterr()
    assert main(["evaluate-lm", "--model", str(soft), "--memory-length", "4"]) == 1
    assert "needs a model with attention 'relative'" in capsys.readouterr().err
    assert main(["evaluate-lm", "--model", str(soft), "--clamp-len", "4"]) == 1
    assert "--clamp-len needs a model with attention 'relative'" in capsys.readouterr().err
    assert main(["train-lm", *args[:2], "--out", str(tmp_path / "bad"), "--memory-length", "4"]) == 1
    assert "needs attention 'relative'" in capsys.readouterr().err
