"""The training logs other programs read: log.csv (its rows are the history's, a resume appends),
TensorBoard event files, and the notebook's live plot."""

from __future__ import annotations

import glob
import os
import signal
import sys

import pytest

import transformer_cpp as tc
from transformer_cpp.plotting import LivePlot
from transformer_cpp.training import TrainConfig, Trainer, TrainingInterrupted
from transformer_cpp.training.logs import LOG_FILE, TENSORBOARD_DIR, columns, read_log

from helpers.toy_task import reversal_pairs, tiny_model
from helpers.toy_task import one_thread, tok  # noqa: F401  (shared fixtures)


@pytest.fixture(scope="module")
def data(tok):
    src, tgt = reversal_pairs(300, seed=3)
    return tc.encode_pairs(src[:260], tgt[:260], tok, tok, 8), tc.encode_pairs(src[260:], tgt[260:], tok, tok, 8)


def _trainer(tok, data, out, epochs=2, **kw):
    config = TrainConfig(epochs=epochs, batch_size=32, warmup=20, log_every=3, progress=False, **kw)
    return Trainer(tiny_model(tok), data[0], data[1], config, src_tokenizer=tok, tgt_tokenizer=tok, checkpoint_dir=out)


def _rows(out, kind):
    return [r for r in read_log(out / LOG_FILE) if r["kind"] == kind]


def test_csv_rows_are_the_history(tok, data, tmp_path):
    trainer = _trainer(tok, data, tmp_path, epochs=2, val_bleu_sentences=10)
    history = trainer.fit()
    with open(tmp_path / LOG_FILE, encoding="utf-8") as f:
        header = f.readline().strip().split(",")
    assert header == columns(("val_loss", "val_accuracy", "val_bleu"))
    assert header[-1] == "elapsed_seconds" and header[:3] == ["kind", "step", "epoch"]
    steps = _rows(tmp_path, "step")
    assert [int(r["step"]) for r in steps] == history["batch"]["step"]
    assert [float(r["loss"]) for r in steps] == history["batch"]["loss"]  # repr: exact
    assert [float(r["lr"]) for r in steps] == history["batch"]["lr"]
    assert all(float(r["tokens_per_second"]) > 0 for r in steps)
    assert all(r["val_loss"] == "" for r in steps)
    elapsed = [float(r["elapsed_seconds"]) for r in steps]
    assert elapsed == sorted(elapsed) and elapsed[0] > 0
    per_epoch = trainer.batches_per_epoch
    assert [float(r["epoch"]) for r in steps] == [round(s / per_epoch, 4) for s in history["batch"]["step"]]
    epochs = _rows(tmp_path, "epoch")
    assert [int(r["epoch"]) for r in epochs] == [1, 2]
    assert [float(r["val_loss"]) for r in epochs] == history["epoch"]["val_loss"]
    assert [float(r["val_bleu"]) for r in epochs] == history["epoch"]["val_bleu"]
    assert [int(r["step"]) for r in epochs] == history["epoch"]["step"]
    assert float(epochs[-1]["elapsed_seconds"]) >= float(steps[-1]["elapsed_seconds"])


def test_csv_survives_an_interruption_and_a_resume(tok, data, tmp_path):
    whole = tmp_path / "whole"
    _trainer(tok, data, whole, epochs=2).fit()
    cut = tmp_path / "cut"
    trainer = _trainer(tok, data, cut, epochs=2)

    def stop(t):  # Ctrl-C in the middle of the second epoch
        if t.model.step == t.batches_per_epoch + 4:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(TrainingInterrupted):
        trainer.fit(on_batch_end=stop)
    before = read_log(cut / LOG_FILE)
    # a killed process may have logged past its checkpoint: those rows go, the resumed run logs them again
    with open(cut / LOG_FILE, "a", encoding="utf-8") as f:
        f.write("step,999,9.0,1.0,0.5,0.001,100.0,,,,1.0\n")
    resumed = Trainer.from_checkpoint(cut, data[0], data[1])
    resumed.fit()
    rows = read_log(cut / LOG_FILE)
    assert rows[: len(before)] == before  # appended, not truncated
    reference = read_log(whole / LOG_FILE)
    assert [(r["kind"], r["step"], r["loss"], r["val_loss"]) for r in rows] == [
        (r["kind"], r["step"], r["loss"], r["val_loss"]) for r in reference
    ]
    steps = [int(r["step"]) for r in rows if r["kind"] == "step"]
    assert steps == resumed.history["batch"]["step"]


def test_a_trainer_without_a_run_directory_writes_no_log(tok, data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _trainer(tok, data, None, epochs=1).fit()
    assert list(tmp_path.iterdir()) == []


def test_tensorboard_event_files_read_back(tok, data, tmp_path):
    from tensorboard.backend.event_processing import event_file_loader  # the test extra has it

    trainer = _trainer(tok, data, tmp_path, epochs=1)
    history = trainer.fit()
    files = glob.glob(str(tmp_path / TENSORBOARD_DIR / "events.out.tfevents.*"))
    assert len(files) == 1
    scalars = {}
    for event in event_file_loader.EventFileLoader(files[0]).Load():
        for value in event.summary.value:
            scalars.setdefault(value.tag, []).append((event.step, value.tensor.float_val[0]))
    assert [s for s, _ in scalars["train/loss"]] == history["batch"]["step"]
    assert [v for _, v in scalars["train/loss"]] == pytest.approx(history["batch"]["loss"], rel=1e-6)
    assert [v for _, v in scalars["validation/loss"]] == pytest.approx(history["epoch"]["val_loss"], rel=1e-6)
    assert {"train/lr", "train/tokens_per_second", "epoch/loss", "validation/accuracy"} <= set(scalars)


def test_without_tensorboard_the_csv_is_written_and_one_line_said(tok, data, tmp_path, monkeypatch, caplog):
    from transformer_cpp.training import logs

    monkeypatch.setitem(sys.modules, "tensorboard", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "tensorboard.summary", None)
    monkeypatch.setattr(logs, "_said_unavailable", False)
    with caplog.at_level("INFO", logger="transformer_cpp.training"):
        _trainer(tok, data, tmp_path / "a", epochs=1).fit()
        _trainer(tok, data, tmp_path / "b", epochs=1).fit()
    said = [r.getMessage() for r in caplog.records if "TensorBoard" in r.getMessage()]
    assert len(said) == 1 and "pip install tensorboard" in said[0]
    assert not (tmp_path / "a" / TENSORBOARD_DIR).exists() and _rows(tmp_path / "a", "epoch")


def test_live_plot_draws_loss_and_bleu_into_a_figure(tok, data):
    import matplotlib

    matplotlib.use("Agg")
    trainer = _trainer(tok, data, None, epochs=2, val_bleu_sentences=10)
    history = trainer.fit()
    plot = LivePlot()
    fig = plot.draw(history)
    loss_axes, bleu_axes = fig.axes[0], fig.axes[3]
    lines = {line.get_label(): line for line in loss_axes.get_lines()}
    assert list(lines["train loss (batch)"].get_ydata()) == history["batch"]["loss"]
    assert list(lines["train loss (batch)"].get_xdata()) == history["batch"]["step"]
    bleu = [line for line in bleu_axes.get_lines() if len(line.get_ydata())]
    assert list(bleu[0].get_ydata()) == history["epoch"]["val_bleu"]
    assert plot.figure is fig


def test_live_plot_is_a_no_op_outside_a_notebook(tok, data):
    plot = LivePlot()
    trainer = _trainer(tok, data, None, epochs=1)
    trainer.fit(on_batch_end=plot, on_epoch_end=plot)
    assert plot.figure is None and plot.shown == 0


def test_a_run_directory_with_only_side_files_is_removed_when_its_command_fails(tmp_path):
    from transformer_cpp.training import RunDirectory

    run = RunDirectory(tmp_path / "run", "--out")
    with pytest.raises(RuntimeError, match="before the first checkpoint"):
        with run.removed_unless_used():
            run.check_writable()
            with run.lock():
                for name in ("config.yaml", LOG_FILE):
                    (run.path / name).write_text("x\n", encoding="utf-8")
                (run.path / TENSORBOARD_DIR).mkdir()
                (run.path / TENSORBOARD_DIR / "events.out.tfevents.1").write_bytes(b"")
                raise RuntimeError("before the first checkpoint")
    assert not run.path.exists()
    run.path.mkdir()
    (run.path / LOG_FILE).write_text("x\n", encoding="utf-8")
    (run.path / "notes.txt").write_text("the user's\n", encoding="utf-8")
    run.remove_if_unused()
    assert sorted(p.name for p in run.path.iterdir()) == [LOG_FILE, "notes.txt"]
