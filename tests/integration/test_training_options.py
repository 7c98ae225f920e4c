"""The training loop's early stopping (``patience``), gradient accumulation (``accumulate``) and
what its progress bar says under a time budget, for translation and the language model."""

from __future__ import annotations

import re

import logging
import os
import signal

import numpy as np
import pytest

from transformer_cpp.checkpoint import best_checkpoint, list_checkpoints
from transformer_cpp.task import LmTrainRequest, load_lm, new_lm_trainer, resume_lm_trainer
from transformer_cpp.training import TrainConfig, Trainer, TrainingInterrupted

from helpers.toy_task import saving_to, tiny_model, toy_config, write_tiny_text
from helpers.toy_task import data, one_thread, tok  # noqa: F401  (shared fixtures)


def _scores(trainer, values):
    """Make the translation task's validation BLEU the given values, one per validation."""
    given = iter(values)
    trainer.task.bleu = lambda model, sentences: float(next(given))


# --- early stopping ---------------------------------------------------------------------------


def test_patience_stops_after_validations_without_a_better_bleu_and_keeps_the_best(tok, data, tmp_path, caplog):
    make = saving_to(tok, tmp_path)
    trainer = Trainer(tiny_model(tok), data[0], data[1], toy_config(epochs=10, patience=2, keep_checkpoints=1), **make)
    _scores(trainer, [10, 20, 20, 15])  # a tie is no better: the 2nd validation without one is the 4th
    with caplog.at_level(logging.INFO, logger="transformer_cpp.training"):
        history = trainer.fit()
    assert history["epoch"]["epoch"] == [1, 2, 3, 4] and history["epoch"]["val_bleu"] == [10, 20, 20, 15]
    assert trainer.finished and trainer.epoch == 4
    # the best (the newer of the tie) survives the pruning and is the run's model; latest resumes
    assert trainer.best == {"bleu": 20.0, "checkpoint": "epoch-0003", "since": 2}
    assert best_checkpoint(tmp_path) == tmp_path / "epoch-0003"
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0003", "epoch-0004"]
    assert (tmp_path / "latest").read_text().strip() == "epoch-0004"
    stops = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopping early")]
    assert stops == [
        "stopping early: no better validation BLEU in the last 2 validations; the best is 20.00 "
        "(checkpoint epoch-0003, the run's model)"
    ]
    # resumed, the run stays stopped; with more patience it trains on
    again = Trainer.from_checkpoint(tmp_path, data[0], data[1])
    assert again.fit()["epoch"]["epoch"] == [1, 2, 3, 4]
    more = Trainer.from_checkpoint(tmp_path, data[0], data[1], patience=3)
    _scores(more, [12])
    assert more.fit()["epoch"]["epoch"] == [1, 2, 3, 4, 5] and more.best["since"] == 3


def test_patience_counts_validations_inside_an_epoch(tok, data, tmp_path):
    make = saving_to(tok, tmp_path)
    trainer = Trainer(tiny_model(tok), data[0], data[1], toy_config(epochs=5, eval_every=5, patience=1), **make)
    assert trainer.batches_per_epoch == 16
    _scores(trainer, [5, 4])
    history = trainer.fit()
    assert history["epoch"]["step"] == [5, 10] and trainer.model.step == 10  # stopped at the 2nd validation
    assert best_checkpoint(tmp_path) == tmp_path / "epoch-0001-batch-000005"
    assert (tmp_path / "latest").read_text().strip() == "epoch-0001-batch-000010"


def test_patience_needs_a_score_to_compare(tok, data):
    with pytest.raises(ValueError, match="^Trainer: patience 2 needs a validation BLEU to compare"):
        Trainer(tiny_model(tok), data[0], data[1], toy_config(patience=2, val_bleu_sentences=0))
    with pytest.raises(ValueError, match="patience must be an integer in"):
        TrainConfig(patience=-1)


def test_lm_patience_ranks_by_validation_bits_per_character(tmp_path, monkeypatch):
    text = write_tiny_text(tmp_path / "tiny.txt", 240)
    tiny = dict(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, seq_len=16, batch_size=8, eval_chars=512)
    request = LmTrainRequest(text=str(text), steps=40, eval_every=2, patience=2, threads=1, progress=False, **tiny)
    trainer = new_lm_trainer(request, tmp_path / "run", lambda _: None)
    given = iter([3.0, 2.5, 2.7, 2.6])
    monkeypatch.setattr(trainer.task, "evaluate", lambda model, part, chars=None: next(given))
    trainer.fit()
    assert trainer.history["epoch"]["val_bpc"] == [3.0, 2.5, 2.7, 2.6] and trainer.model.step == 8
    run = tmp_path / "run"
    assert best_checkpoint(run).name == "epoch-0001-batch-000004"  # the lowest bits per character
    assert load_lm(run).model.step == 4 and load_lm(run, optimizer=True).model.step == 8  # best; latest resumes


# --- gradient accumulation --------------------------------------------------------------------


def _model64(tok):
    return tiny_model(tok, d_model=16, seed=2, dtype="float64")


def test_accumulated_batches_train_as_the_larger_batch(tok, data):
    # 500 pairs: 16 batches of 32 (the last of 20), or 32 of 16 (the last of 4) taken two at a time,
    # in the same shuffled order: the same pairs in each step
    big = Trainer(_model64(tok), data[0], data[1], toy_config(epochs=2, batch_size=32, warmup=8))
    small = Trainer(_model64(tok), data[0], data[1], toy_config(epochs=2, batch_size=16, accumulate=2, warmup=8))
    assert (big.batches_per_epoch, small.batches_per_epoch) == (16, 32)
    a, b = big.fit(), small.fit()
    assert big.model.step == small.model.step == 32  # the schedule counts updates, not batches
    assert b["batch"]["step"] == a["batch"]["step"] == list(range(1, 33))
    np.testing.assert_allclose(b["batch"]["loss"], a["batch"]["loss"], rtol=1e-9)
    np.testing.assert_allclose(b["epoch"]["val_loss"], a["epoch"]["val_loss"], rtol=1e-9)
    assert b["epoch"]["lr"] == a["epoch"]["lr"]
    weights = {k: p.value for k, p in small.model.parameters().items()}
    for name, p in big.model.parameters().items():
        if name.endswith("key.bias"):  # its gradient is 0 (softmax ignores it) up to rounding, which Adam scales
            assert np.abs(weights[name]).max() < 1e-8 and np.abs(p.value).max() < 1e-8, name
        else:
            np.testing.assert_allclose(weights[name], p.value, rtol=1e-8, atol=1e-12, err_msg=name)


def test_an_accumulating_run_resumes_exactly(tok, data, tmp_path):
    def trainer(directory):
        return Trainer(
            tiny_model(tok, dropout=0.1),
            data[0],
            data[1],
            toy_config(epochs=2, accumulate=3),
            **saving_to(tok, directory),
        )

    reference = trainer(tmp_path / "ref")
    expected = reference.fit()
    assert reference.model.step == 2 * 6  # 16 batches an epoch: 5 steps of 3 and one of 1
    interrupted = trainer(tmp_path / "run")

    def press_ctrl_c(t):
        if t.model.step == 8:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(TrainingInterrupted) as info:
        interrupted.fit(on_batch_end=press_ctrl_c)
    assert info.value.checkpoint == tmp_path / "run" / "epoch-0002-batch-000006"  # 2 steps of 3 into epoch 2
    resumed = Trainer.from_checkpoint(tmp_path / "run", data[0], data[1])
    history = resumed.fit()
    assert history["batch"]["loss"] == expected["batch"]["loss"]  # bit for bit
    for name, p in reference.model.parameters().items():
        np.testing.assert_array_equal(resumed.model.parameters()[name].value, p.value, err_msg=name)


def test_lm_steps_count_accumulated_updates(tmp_path):
    text = write_tiny_text(tmp_path / "tiny.txt", 240)
    tiny = dict(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, seq_len=16, batch_size=4, eval_chars=256)
    request = LmTrainRequest(text=str(text), steps=3, accumulate=2, eval_every=100, threads=1, progress=False, **tiny)
    trainer = new_lm_trainer(request, tmp_path / "run", lambda _: None)
    trainer.fit()
    assert trainer.model.step == 3 and (trainer.epoch, trainer.batch_in_epoch) in ((0, 6), (1, 0))
    resumed = resume_lm_trainer(tmp_path / "run", {"steps": 5}, lambda _: None)
    resumed.fit()
    assert resumed.model.step == 5 and load_lm(tmp_path / "run").model.step == 5
    with pytest.raises(ValueError, match="accumulate cannot be changed"):
        resume_lm_trainer(tmp_path / "run", {"accumulate": 1}, lambda _: None)


def test_accumulation_is_refused_with_data_parallelism(tok, data):
    class TwoRanks:
        rank, size = 0, 2

        def train_step(self, *args, **kwargs):
            raise AssertionError("not reached")

        def dropout_seed(self, seed):
            return seed

    with pytest.raises(ValueError, match="^Trainer: accumulate 2 is not available with data parallelism"):
        Trainer(tiny_model(tok), data[0], data[1], toy_config(accumulate=2), parallel=TwoRanks())


# --- the progress bar under a time budget -----------------------------------------------------


def test_the_bar_under_a_time_budget_shows_its_time_left_not_an_epoch_total(tok, data, capsys):
    # the quick preset's "unbounded" 1000 epochs within a budget of minutes
    config = toy_config(epochs=1000, time_budget=90.0, max_steps=20, progress=True)
    Trainer(tiny_model(tok), data[0], None, config).fit()
    err = capsys.readouterr().err
    assert "epoch 2 (1:29:" in err and "of the time budget left)" in err
    assert "/1000" not in err
    assert "<" not in err  # no estimate of the epoch's remaining time: the budget ends the run


def test_the_bar_without_a_time_budget_keeps_the_epoch_total(tok, data, capsys):
    Trainer(tiny_model(tok), data[0], None, toy_config(epochs=2, progress=True)).fit()
    err = capsys.readouterr().err
    assert "epoch 2/2:" in err and "time budget" not in err and "<" in err


def test_train_announces_a_time_budget_without_the_presets_epoch_count(tmp_path, capsys):
    from transformer_cpp.cli import main

    from helpers.cli import QUICK, TINY_MODEL
    from helpers.toy_task import write_tatoeba_file

    data = write_tatoeba_file(tmp_path / "pairs.txt", n=200)
    args = ["train", *TINY_MODEL, *QUICK, "--data", str(data), "--time-budget", "30", "--val-bleu-sentences", "0"]
    # the preset's epoch count (the quick preset's 1000 stands for none) is not announced ...
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert re.search(r"training for 30 minutes \(epochs of about \d+ batch(es)?\); checkpoints in", err), err
    assert "up to" not in err
    # ... an --epochs given with the budget is, as a cap
    assert main([*args, "--out", str(tmp_path / "b"), "--epochs", "1"]) == 0
    err = capsys.readouterr().err
    assert re.search(
        r"training for 30 minutes \(epochs of about \d+ batch(es)?, at most 1 epoch\); checkpoints in", err
    ), err
