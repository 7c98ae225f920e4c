"""Trainer and TrainConfig: batches, metrics, history, loss falls, exact resume (also after Ctrl-C)."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp.checkpoint import list_checkpoints
from transformer_cpp.plotting import history_plot
from transformer_cpp.training import TrainConfig, Trainer, TrainingInterrupted, evaluate_loss

from helpers.cli import run_locked_elsewhere
from helpers.toy_task import reversal_pairs, saving_to, threads, tiny_model, toy_config
from helpers.toy_task import data, one_thread, tok  # noqa: F401  (shared fixtures)


# --- TrainConfig ------------------------------------------------------------------------------


def test_train_config_defaults_and_round_trip():
    c = TrainConfig()
    assert (c.batch_size, c.warmup, c.keep_checkpoints, c.epochs) == (64, 4000, 5, 10)
    assert TrainConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match="unknown setting"):
        TrainConfig.from_dict({"epochs": 1, "learning_rate": 3})


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(epochs=-1), "epochs"),
        (dict(warmup=0), "warmup"),
        (dict(label_smoothing=1.0), "label_smoothing"),
        (dict(clip_norm=-1.0), "clip_norm"),
        (dict(threads=0), "threads"),
        # every value the command line refuses, the Python API refuses with the same message
        (dict(fixed_lr=float("nan")), r"TrainConfig: fixed_lr must be a finite number >= 0, got nan$"),
        (dict(clip_norm=float("inf")), r"TrainConfig: clip_norm must be a finite number >= 0, got inf$"),
        (dict(label_smoothing=float("nan")), r"TrainConfig: label_smoothing must be a number in \[0, 1\), got nan$"),
        (dict(lr_scale=0.0), r"TrainConfig: lr_scale must be a finite number > 0, got 0.0$"),
        (dict(beta2=1.0), r"beta2 must be a number in \[0, 1\)"),
        (dict(adam_eps=0.0), "adam_eps must be a finite number > 0"),
        (dict(seed=2**70), r"seed must be an integer in \[0, 9223372036854775807\], got 1180591620717411303424$"),
        (dict(epochs=10**30), r"epochs must be an integer in \[0, 1000000\]"),
        (dict(warmup=np.int64(0)), "warmup must be an integer in"),
        (dict(time_budget=1e300), "time_budget"),
        (dict(adam_eps=10**400), "TrainConfig: adam_eps must be a finite number > 0, got 1000"),  # not OverflowError
    ],
)
def test_train_config_rejects_bad_values(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kw)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(batch_size=2.5), r"^TrainConfig: batch_size must be an integer in \[1, 1000000\], got 2.5$"),
        (dict(log_every=True), r"^TrainConfig: log_every must be an integer in \[1, 1000000000\], got True$"),
        (dict(lr_scale="1"), r"^TrainConfig: lr_scale must be a finite number > 0, got '1'$"),
        (dict(decay="no"), r"^TrainConfig: decay must be True or False, got 'no'$"),
        (dict(adaptive_threads=1), r"^TrainConfig: adaptive_threads must be True or False, got 1$"),
    ],
)
def test_train_config_rejects_values_of_the_wrong_type(kw, match):
    """A value of the wrong type is a TypeError, with the message of a value out of range."""
    with pytest.raises(TypeError, match=match):
        TrainConfig(**kw)


def test_train_config_check_and_limits():
    assert TrainConfig.check("batch_size", np.int32(7)) == 7 and type(TrainConfig.check("batch_size", 7)) is int
    assert TrainConfig.check("lr_scale", 2) == 2.0 and TrainConfig.check("threads", None) is None
    assert TrainConfig.LIMITS["label_smoothing"].describe() == "a number in [0, 1)"
    assert TrainConfig.LIMITS["fixed_lr"].describe() == "a finite number >= 0"
    assert set(TrainConfig.LIMITS) | {
        "decay",
        "bucket_by_length",
        "drop_remainder",
        "adaptive_threads",
        "progress",
        "init_from",
    } == {f for f in TrainConfig().to_dict()}  # every setting is checked
    with pytest.raises(ValueError, match="unknown setting 'learning_rate'"):
        TrainConfig.check("learning_rate", 1)


def test_train_config_optimizer_settings_are_the_cores():
    """TrainConfig writes the optimiser's settings out as fields; they are the core's table's
    (OPTIMIZER_FIELDS with an option), by option name, with its types, defaults, limits and help,
    so that a field added to the table is noticed here."""
    from dataclasses import fields

    from transformer_cpp.config import OPTIMIZER_FIELDS, option_fields, python_type

    table = option_fields(OPTIMIZER_FIELDS)
    ours = [f for f in fields(TrainConfig)][-len(table) :]
    assert [f.name for f in ours] == [f.option for f in table]
    assert [f.type for f in ours] == [python_type(f).__name__ for f in table]
    assert [f.default for f in ours] == [f.default for f in table]
    assert all(TrainConfig.LIMITS[f.option] is f.limit for f in table)
    assert all(f.help in (TrainConfig.__doc__ or "") for f in table)
    assert "total_steps" not in TrainConfig.LIMITS  # the trainer fits it to the run
    assert TrainConfig().optimizer_settings() == {f.name: f.default for f in table}


def test_trainer_configures_the_optimizer(tok, data):
    model = tiny_model(tok)
    Trainer(model, data[0], config=toy_config(warmup=123, lr_scale=0.25, clip_norm=1.5, label_smoothing=0.1))
    oc = model.optimizer_config
    assert (oc["warmup"], oc["lr_scale"], oc["clip_norm"], oc["label_smoothing"]) == (123, 0.25, 1.5, 0.1)
    assert (oc["beta1"], oc["beta2"], oc["eps"]) == (0.9, 0.98, 1e-9)


def test_trainer_rejects_bad_arguments(tok, data):
    model = tiny_model(tok)
    with pytest.raises(TypeError, match="EncodedPairs"):
        Trainer(model, [[1, 2]])
    with pytest.raises(ValueError, match="tokenizer"):
        Trainer(model, data[0], checkpoint_dir="somewhere")
    with pytest.raises(ValueError, match=r"time_budget must be a number of minutes in \[0, 1000000\]"):
        TrainConfig(time_budget=float("nan"))
    # pairs longer than the positional table are fine: the table is a cache that grows
    long = tc.encode_pairs(["a b c d e f a b c"], ["a"], tok, tok, None)
    Trainer(model, long, config=TrainConfig(progress=False, epochs=1)).fit()


# --- batches ----------------------------------------------------------------------------------


def test_epoch_batches_teacher_forcing_and_shuffling(tok, data):
    train = data[0]
    trainer = Trainer(tiny_model(tok), train, config=toy_config())
    first = list(trainer.epoch_batches(0))
    assert len(first) == trainer.batches_per_epoch == -(-len(train) // 32)
    for b in first:
        rows = train.tgt[b.indices]
        width = b.tgt_in.shape[1] + 1
        np.testing.assert_array_equal(b.tgt_in, rows[:, : width - 1])  # tgt[:, :-1]
        np.testing.assert_array_equal(b.tgt_out, rows[:, 1:width])  # tgt[:, 1:]
        assert (b.tgt_in[:, 0] == tok.start_id).all()
    order0 = np.concatenate([b.indices for b in first])
    assert sorted(order0) == list(range(len(train)))  # every pair once
    again = np.concatenate([b.indices for b in trainer.epoch_batches(0)])
    other = np.concatenate([b.indices for b in trainer.epoch_batches(1)])
    np.testing.assert_array_equal(order0, again)  # seeded
    assert not np.array_equal(order0, other)  # reshuffled every epoch
    reseeded = Trainer(tiny_model(tok), train, config=toy_config(seed=7))
    assert not np.array_equal(order0, np.concatenate([b.indices for b in reseeded.epoch_batches(0)]))


def test_drop_remainder_and_bucketing(tok, data):
    train = data[0]
    assert len(train) % 32  # so that there is a remainder to drop
    dropped = Trainer(tiny_model(tok), train, config=toy_config(drop_remainder=True))
    sizes = [len(b) for b in dropped.epoch_batches(0)]
    assert dropped.batches_per_epoch == len(sizes) == len(train) // 32 and set(sizes) == {32}

    def padding(trainer):
        return sum(int((b.tgt_out == 0).sum()) for b in trainer.epoch_batches(0))

    plain = Trainer(tiny_model(tok), train, config=toy_config())
    bucketed = Trainer(tiny_model(tok), train, config=toy_config(bucket_by_length=True))
    assert padding(bucketed) < padding(plain)


# --- metrics and history ----------------------------------------------------------------------


def test_evaluate_loss_is_token_weighted(tok, data):
    valid = data[1]
    model = tiny_model(tok)
    loss, acc, tokens = evaluate_loss(model, valid, batch_size=16)
    assert tokens == int(np.count_nonzero(valid.tgt[:, 1:]))
    losses, accs, counts = [], [], []
    for b in tc.batches(valid, 16, shuffle=False):
        lo, ac = model.evaluate(b.src, b.tgt_in, b.tgt_out)
        losses.append(lo)
        accs.append(ac)
        counts.append(model.last_token_count)
    assert len(set(counts)) > 1  # batches differ in token count, so weighting matters
    assert loss == pytest.approx(np.average(losses, weights=counts), rel=1e-12)
    assert acc == pytest.approx(np.average(accs, weights=counts), rel=1e-12)
    assert loss != pytest.approx(np.mean(losses), rel=1e-9)
    # one batch holding everything gives the same loss
    whole, _, _ = evaluate_loss(model, valid, batch_size=len(valid))
    assert whole == pytest.approx(loss, rel=1e-5)


def test_training_lowers_the_loss_and_records_history(tok, data):
    train, valid = data
    trainer = Trainer(tiny_model(tok, dropout=0.1), train, valid, toy_config(epochs=3, log_every=4))
    history = trainer.fit()
    e, b = history["epoch"], history["batch"]
    steps = 3 * trainer.batches_per_epoch
    assert e["epoch"] == [1, 2, 3] and e["step"] == [steps // 3, 2 * steps // 3, steps]
    assert trainer.model.step == steps and trainer.epoch == 3 and trainer.batch_in_epoch == 0
    assert e["loss"][-1] < 0.6 * e["loss"][0]
    assert e["val_loss"][-1] < 0.8 * e["val_loss"][0]
    assert e["val_accuracy"][-1] > e["val_accuracy"][0]
    # the recorded validation numbers are what evaluate_loss gives now
    val_loss, val_acc, _ = evaluate_loss(trainer.model, valid, 32)
    assert (e["val_loss"][-1], e["val_accuracy"][-1]) == pytest.approx((val_loss, val_acc), rel=1e-12)
    assert all(s > 0 for s in e["seconds"]) and all(t > 0 for t in e["tokens_per_second"])
    tokens = int(np.count_nonzero(train.tgt[:, 1:]))
    assert e["tokens_per_second"][0] == pytest.approx(tokens / e["seconds"][0], rel=1e-9)
    # one batch entry per 4 steps, at steps 4, 8, ...; the learning rate of that step
    assert b["step"] == list(range(4, steps + 1, 4))
    assert b["lr"] == [trainer.model.learning_rate(s) for s in b["step"]]
    assert len(b["loss"]) == len(b["accuracy"]) == len(b["step"])
    fig = history_plot(history)
    assert len(fig.axes) == 4


def test_fit_is_reproducible(tok, data):
    runs = []
    for _ in range(2):
        trainer = Trainer(tiny_model(tok, dropout=0.1), data[0], None, toy_config(epochs=1))
        runs.append(trainer.fit()["batch"]["loss"])
    assert runs[0] == runs[1]


# --- exact resume -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference_run(tok, data):
    """Three uninterrupted epochs with dropout on; every step's loss is logged."""
    trainer = Trainer(tiny_model(tok, dropout=0.1), data[0], data[1], toy_config(epochs=3))
    history = trainer.fit()
    weights = {k: p.value.copy() for k, p in trainer.model.parameters().items()}
    return history, weights


def _assert_same_run(history, weights, reference):
    ref_history, ref_weights = reference
    assert history["batch"]["loss"] == ref_history["batch"]["loss"]  # bit for bit
    assert history["batch"]["step"] == ref_history["batch"]["step"]
    for key in ("loss", "accuracy", "val_loss", "val_accuracy", "step", "epoch"):
        assert history["epoch"][key] == ref_history["epoch"][key], key
    for name, value in ref_weights.items():
        np.testing.assert_array_equal(weights[name], value, err_msg=name)


def _saving(tok, data, directory, epochs):
    """A Trainer of a tiny model (dropout 0.1) on ``data`` (train, validation) for ``epochs``
    epochs, saving its checkpoints into ``directory``."""
    return Trainer(
        tiny_model(tok, dropout=0.1), data[0], data[1], toy_config(epochs=epochs), **saving_to(tok, directory)
    )


def test_resume_after_an_epoch_is_exact(tok, data, tmp_path, reference_run):
    first = _saving(tok, data, tmp_path, epochs=1)
    first.fit()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0001"]
    del first
    resumed = Trainer.from_checkpoint(tmp_path, data[0], data[1], epochs=3)
    assert (resumed.epoch, resumed.batch_in_epoch) == (1, 0)
    assert resumed.config.epochs == 3 and resumed.config.warmup == 50
    history = resumed.fit()
    _assert_same_run(history, {k: p.value for k, p in resumed.model.parameters().items()}, reference_run)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0001", "epoch-0002", "epoch-0003"]


def test_ctrl_c_saves_the_exact_position_and_resume_continues(tok, data, tmp_path, reference_run):
    trainer = _saving(tok, data, tmp_path, epochs=3)
    stop_at = trainer.batches_per_epoch + 5  # the 5th batch of epoch 2
    previous = signal.getsignal(signal.SIGINT)

    def press_ctrl_c(t):
        if t.model.step == stop_at:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(TrainingInterrupted) as info:
        trainer.fit(on_batch_end=press_ctrl_c)
    assert signal.getsignal(signal.SIGINT) is previous  # the handler is restored
    assert info.value.checkpoint == tmp_path / "epoch-0002-batch-000005"
    assert isinstance(info.value, KeyboardInterrupt)
    assert (trainer.epoch, trainer.batch_in_epoch, trainer.model.step) == (1, 5, stop_at)
    assert (tmp_path / "latest").read_text().strip() == "epoch-0002-batch-000005"

    resumed = Trainer.from_checkpoint(tmp_path, data[0], data[1])
    assert (resumed.epoch, resumed.batch_in_epoch, resumed.model.step) == (1, 5, stop_at)
    history = resumed.fit()
    _assert_same_run(history, {k: p.value for k, p in resumed.model.parameters().items()}, reference_run)
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["epoch-0001", "epoch-0002-batch-000005", "epoch-0002", "epoch-0003"]


def test_interrupted_fit_continues_in_memory(tok, data, reference_run):
    trainer = Trainer(tiny_model(tok, dropout=0.1), data[0], data[1], toy_config(epochs=3))

    def stop(t):
        if t.model.step == 7:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(TrainingInterrupted) as info:
        trainer.fit(on_batch_end=stop)
    assert info.value.checkpoint is None
    history = trainer.fit()
    _assert_same_run(history, {k: p.value for k, p in trainer.model.parameters().items()}, reference_run)


def test_resume_refuses_other_data(tok, data, tmp_path):
    Trainer(tiny_model(tok), data[0], None, toy_config(epochs=1), **saving_to(tok, tmp_path)).fit()
    src, tgt = reversal_pairs(500, seed=99)
    other = tc.encode_pairs(src, tgt, tok, tok, 8)
    with pytest.raises(ValueError, match="train data differ"):
        Trainer.from_checkpoint(tmp_path, other)
    with pytest.raises(ValueError, match="batches into an epoch|data differ"):
        state = Trainer.from_checkpoint(tmp_path, data[0]).state_dict()
        state["batch_in_epoch"] = 10_000
        Trainer(tiny_model(tok), data[0]).load_state_dict(state)


def test_epoch_checkpoints_keep_the_newest(tok, data, tmp_path):
    trainer = Trainer(
        tiny_model(tok), data[0], None, toy_config(epochs=4, keep_checkpoints=2), **saving_to(tok, tmp_path)
    )
    seen = []
    trainer.fit(on_epoch_end=lambda t, entry: seen.append((entry["epoch"], t.last_checkpoint.name)))
    assert seen == [(1, "epoch-0001"), (2, "epoch-0002"), (3, "epoch-0003"), (4, "epoch-0004")]
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0003", "epoch-0004"]


def test_second_ctrl_c_stops_at_once(tok, data, tmp_path):
    trainer = Trainer(tiny_model(tok), data[0], None, toy_config(epochs=2), **saving_to(tok, tmp_path))
    previous = signal.getsignal(signal.SIGINT)

    def press_twice(t):
        if t.model.step == 3:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt) as info:
        trainer.fit(on_batch_end=press_twice)
    assert not isinstance(info.value, TrainingInterrupted)  # no clean stop, no new checkpoint
    assert signal.getsignal(signal.SIGINT) is previous
    assert list_checkpoints(tmp_path) == []


def test_from_checkpoint_needs_a_training_checkpoint(tok, data, tmp_path):
    from transformer_cpp.checkpoint import CheckpointError, save_checkpoint

    save_checkpoint(tmp_path, tiny_model(tok), tok, tok)  # no trainer state, no training settings
    with pytest.raises(CheckpointError, match="no trainer state"):
        Trainer.from_checkpoint(tmp_path, data[0])


# --- runs that cannot train, or stop diverging ------------------------------------------------


def test_a_run_whose_batches_are_all_dropped_is_refused(tok, data):
    model = tiny_model(tok)
    with pytest.raises(
        ValueError,
        match=r"Trainer: no training batch: 500 training pair\(s\) make no complete batch "
        r"of batch_size 501 and drop_remainder",
    ):
        Trainer(model, data[0], config=toy_config(batch_size=501, drop_remainder=True))
    assert model.step == 0
    Trainer(model, data[0], config=toy_config(batch_size=500, drop_remainder=True))  # one complete batch is enough


def test_a_diverging_run_stops_with_the_last_good_state(tok, data, tmp_path):
    from transformer_cpp.checkpoint import load_checkpoint, nonfinite_tensors
    from transformer_cpp.training import TrainingDiverged

    trainer = Trainer(
        tiny_model(tok), data[0], data[1], toy_config(fixed_lr=1e30, epochs=2), **saving_to(tok, tmp_path)
    )
    with pytest.raises(
        TrainingDiverged,
        match=r"training diverged at step (\d+) \(epoch 1, batch \1\): .*non-finite.*; "
        r"the state before it is saved in .*epoch-0001-batch-0+\d+; a lower "
        r"learning rate",
    ) as info:
        trainer.fit()
    step = trainer.model.step
    assert step >= 1 and info.value.checkpoint == trainer.last_checkpoint
    saved = load_checkpoint(info.value.checkpoint)  # loads: its weights are finite
    assert saved.model.step == step and saved.trainer_state["batch_in_epoch"] == step
    assert not nonfinite_tensors(saved.model.parameters())
    # without a run directory nothing is saved, and the message says so
    plain = Trainer(tiny_model(tok), data[0], None, toy_config(fixed_lr=1e30))
    with pytest.raises(TrainingDiverged, match="nothing was saved") as info:
        plain.fit()
    assert info.value.checkpoint is None


class _Exploding:
    """A model whose weights become NaN at one step (and whose loss is then NaN): what a core
    that did not refuse the update would leave."""

    def __init__(self, model, at_step):
        self.__dict__.update(_model=model, _at=at_step)

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __setattr__(self, name, value):
        setattr(self._model, name, value)

    def train_step(self, *args):
        if self._model.step + 1 == self._at:
            next(iter(self._model.parameters().values())).value[0, 0] = np.nan
            self._model.step += 1
            return float("nan"), 0.0
        return self._model.train_step(*args)


def test_non_finite_weights_are_never_saved_the_last_good_checkpoint_is_named(tok, data, tmp_path):
    from transformer_cpp.training import TrainingDiverged

    trainer = Trainer(
        _Exploding(tiny_model(tok), at_step=20), data[0], None, toy_config(epochs=3), **saving_to(tok, tmp_path)
    )
    with pytest.raises(
        TrainingDiverged,
        match=r"at step 20 \(epoch 2, batch 4\): the loss is nan; the weights are "
        r"not finite .*the last good checkpoint is .*epoch-0001",
    ) as info:
        trainer.fit()
    assert info.value.checkpoint.name == "epoch-0001"
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0001"]
    assert (tmp_path / "latest").read_text().strip() == "epoch-0001"


def test_checkpoint_dir_is_checked_before_any_work(tok, data, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError, match=r"Trainer: checkpoint_dir '.*file/run' cannot be written"):
        Trainer(tiny_model(tok), data[0], config=toy_config(), **saving_to(tok, tmp_path / "file" / "run"))


def test_fit_holds_the_run_directory_lock(tok, data, tmp_path):
    import subprocess
    import sys

    from transformer_cpp.checkpoint import RunLockedError, lock_run

    probe = (
        "import sys, transformer_cpp.checkpoint as ck\ntry:\n    with ck.lock_run(sys.argv[1]): print('free')\n"
        "except ck.RunLockedError as e: print('locked')"
    )
    seen = []

    def try_from_another_process(t):
        if t.model.step == 2:
            seen.append(
                subprocess.run(
                    [sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True
                ).stdout.strip()
            )

    trainer = Trainer(tiny_model(tok), data[0], None, toy_config(epochs=1), **saving_to(tok, tmp_path))
    trainer.fit(on_batch_end=try_from_another_process)
    assert seen == ["locked"]
    with run_locked_elsewhere(tmp_path):
        step = trainer.model.step
        with pytest.raises(RunLockedError, match="in use by another process"):
            trainer.fit(epochs=2)
        assert trainer.model.step == step  # refused before any step
    with lock_run(tmp_path):  # released by fit, and by the holder's death
        pass


def test_fit_governs_threads_and_gives_them_back(tok, data):
    """With two threads asked for, a Trainer times its steps through a ThreadGovernor (one per
    Trainer, kept across fits) and leaves the core with the two threads after fit; with
    adaptive_threads off there is none."""
    with threads(1):
        trainer = Trainer(tiny_model(tok), data[0], None, toy_config(epochs=1, threads=2))
        trainer.fit()
        governor = trainer._governor
        assert governor is not None and governor.most == 2 and governor._units == trainer.model.step
        assert tc.get_num_threads() == 2
        trainer.fit(epochs=2)
        assert trainer._governor is governor and governor._units == trainer.model.step
        fixed = Trainer(tiny_model(tok), data[0], None, toy_config(epochs=1, threads=2, adaptive_threads=False))
        fixed.fit()
        assert fixed._governor is None and tc.get_num_threads() == 2


def test_train_config_checks_a_setting_changed_after_construction():
    """config.fixed_lr = nan (or a string flag) was taken as it was and reached the run."""
    c = TrainConfig(drop_remainder=True)
    for name, value, match in [
        ("fixed_lr", float("nan"), r"TrainConfig: fixed_lr must be a finite number >= 0"),
        ("batch_size", -5, r"batch_size must be an integer in \[1, 1000000\], got -5"),
        ("adaptive_threads", "no", "adaptive_threads must be True or False"),
        ("max_tokens", 100, "drop_remainder applies to batches of batch_size pairs"),
    ]:
        with pytest.raises(TypeError if name == "adaptive_threads" else ValueError, match=match):
            setattr(c, name, value)
    assert c == TrainConfig(drop_remainder=True)  # nothing refused was kept
    c.epochs, c.lr_scale = np.int64(3), 2
    assert (type(c.epochs), c.lr_scale, type(c.lr_scale)) == (int, 2.0, float)


def test_steps_in_one_process_agree_with_themselves():
    """Without data parallelism the steps' agreements are this process's own values."""
    from transformer_cpp.training.steps import LocalSteps, steps_for

    steps = steps_for(None)
    assert isinstance(steps, LocalSteps) and steps.is_root and steps.world_size == 1 and steps.parallel is None
    assert steps.any(True, "a check") and not steps.any(False, "a check")
    assert steps.broadcast((None, {"loss": 1.0}), "a broadcast") == (None, {"loss": 1.0})
    assert steps.stop_after_step(True) and not steps.stop_after_step(False)
    with pytest.raises(TypeError, match="parallel must be a transformer_cpp.distributed.DataParallel or None"):
        steps_for(object())


def test_run_directory(tok, data, tmp_path):
    """A RunDirectory knows whether it holds a run, and removes itself when a command that created
    it fails before writing anything but its lock."""
    from transformer_cpp.training import RunDirectory

    run = RunDirectory(tmp_path / "run", "--out")
    assert not run.holds_run()
    with pytest.raises(RuntimeError, match="no checkpoint yet"):
        with run.removed_unless_used():
            run.check_writable()
            with run.lock():
                raise RuntimeError("no checkpoint yet")
    assert not run.path.exists()
    trainer = Trainer(tiny_model(tok), data[0], None, toy_config(epochs=1), **saving_to(tok, run.path))
    trainer.fit()
    assert trainer.checkpoint_dir == run.path and run.holds_run()
    run.remove_if_unused()  # it holds a checkpoint: kept
    assert run.checkpoints() == run.checkpoints(trainer.run_id) == [trainer.last_checkpoint]
    with pytest.raises(OSError, match="--out '.*' cannot be written"):
        RunDirectory(trainer.last_checkpoint / "config.json" / "x", "--out").check_writable()
