"""Training: TrainConfig, Trainer and its saved state, the training helpers."""

from __future__ import annotations

import json
import os
import re
import threading
from typing import Any, Dict

import numpy as np

import transformer_cpp as tc
from transformer_cpp import checkpoint as ck
from transformer_cpp import kernels
from transformer_cpp import training as tr

from .base import (
    CORPUS,
    encoded,
    Context,
    api,
    batch,
    err,
    raises,
    rtok,
    small,
    translator,
)


# --- training ------------------------------------------------------------------------------------


def _trainer(c, config: Any = None, ckpt: bool = False, n: int = 40, **kw: Any) -> Any:
    from ..toy_task import reversal_pairs, tiny_model

    tok = rtok()
    src, tgt = reversal_pairs(n, seed=1)
    enc = tc.encode_pairs(src, tgt, tok, tok, None)
    model = tiny_model(tok, d_model=16)
    cfg = config or tc.TrainConfig(epochs=1, batch_size=8, warmup=10, progress=False, val_bleu_sentences=0)
    return tc.Trainer(
        model,
        enc,
        kw.pop("valid", None),
        cfg,
        src_tokenizer=tok,
        tgt_tokenizer=tok,
        checkpoint_dir=(c.work / "run") if ckpt else None,
        **kw,
    )


err("TrainConfig: float epochs", lambda c: tc.TrainConfig(epochs=2.0), "epochs")
err(
    "TrainConfig: from_dict with an unknown key",
    lambda c: tc.TrainConfig.from_dict({"epochs": 1, "colour": 2}),
    "colour",
)
err(
    "TrainConfig: from_dict(None)",
    lambda c: tc.TrainConfig.from_dict(None),
    "TrainConfig.from_dict: expected a mapping",
    raises=TypeError,
)
err("TrainConfig: progress given as a string", lambda c: tc.TrainConfig(progress="no"), "progress")


@api("TrainConfig: decay applies to a fixed learning rate")
def _(c):
    base = dict(epochs=2, batch_size=8, fixed_lr=1e-3, progress=False, val_bleu_sentences=0, log_every=1)
    t = _trainer(c, tc.TrainConfig(decay=True, **base))
    t.fit()
    lrs = t.history["batch"]["lr"]
    assert len(lrs) == 10 and lrs[0] < 1e-3 and all(a > b for a, b in zip(lrs, lrs[1:])), f"decay ignored: {lrs}"
    assert lrs[-1] == 0.0  # the run's last step, as with the warm-up schedule
    constant = _trainer(c, tc.TrainConfig(**base))
    constant.fit()
    assert set(constant.history["batch"]["lr"]) == {1e-3}


# options that a token budget would ignore are refused, not ignored
for _name in ("drop_remainder", "bucket_by_length"):
    err(
        f"TrainConfig: {_name} with a token budget",
        (lambda n: lambda c: tc.TrainConfig(max_tokens=500, **{n: True}))(_name),
        f"TrainConfig: {_name} applies to batches of batch_size pairs; with max_tokens 500",
        raises=ValueError,
    )


@api("TrainConfig: drop_remainder and bucket_by_length without a token budget")
def _(c):
    for name in ("drop_remainder", "bucket_by_length"):
        assert getattr(tc.TrainConfig(max_tokens=0, **{name: True}), name) is True


err("Transformer: precision bf16 with float64", lambda c: small(precision="bf16"), "precision", "float64")
err("Transformer: precision 'BF16'", lambda c: small(dtype="float32", precision="BF16"), "precision")


@api("Transformer: bf16 training with a NaN weight")
def _(c):
    if not kernels.have_bf16():  # a CPU without AVX512_BF16 refuses the precision itself
        raises(lambda: small(dtype="float32", precision="bf16"), ValueError, "precision 'bf16' is not available")
        return
    m = small(dtype="float32", precision="bf16")
    m.parameters()["output.bias"].value[0] = np.nan
    raises(lambda: m.train_step(*batch()), (ValueError, RuntimeError), "output.bias")


err(
    "TrainConfig: fixed_lr set to NaN after construction",
    lambda c: setattr(tc.TrainConfig(), "fixed_lr", float("nan")),
    "fixed_lr",
)
err(
    "TrainConfig: max_tokens set after drop_remainder",
    lambda c: setattr(tc.TrainConfig(drop_remainder=True), "max_tokens", 500),
    "drop_remainder",
)
err("TrainConfig: adam_eps 10**400", lambda c: tc.TrainConfig(adam_eps=10**400), "adam_eps")
err(
    "adam: eps 0",
    lambda c: tc.Adam(tc.Linear(3, 2).parameters(), eps=0.0),
    "Adam: eps must be a finite number > 0, got 0",
    raises=ValueError,
)
err("Translator: adaptive_threads 'no'", lambda c: setattr(translator(c), "adaptive_threads", "no"), "adaptive_threads")
err(
    "Translator: max_output_tokens set to 'x' after construction",
    lambda c: setattr(translator(c), "max_output_tokens", "x"),
    "max_output_tokens",
)
err(
    "batches: drop_remainder with a token budget",
    lambda c: list(tc.batches(encoded(), max_tokens=20, drop_remainder=True)),
    "batches: drop_remainder applies to batches of batch_size pairs",
    raises=ValueError,
)


def _other_tokenizer_valid(c):
    big = tc.SubwordTokenizer.build_from_corpus(CORPUS, 300, min_frequency=1)
    valid = tc.encode_pairs(["the cat sat on the mat"] * 3, ["the mat"] * 3, big, big, None)
    return _trainer(c, valid=valid)


err(
    "Trainer: validation pairs encoded with another tokenizer",
    _other_tokenizer_valid,
    re.compile(r"Trainer: valid_data holds source token id \d+, outside the model's src_vocab_size"),
    raises=ValueError,
)
err("Trainer: valid_data as a list", lambda c: _trainer(c, valid=[1, 2]), "valid_data")
err("Trainer: config as a dict", lambda c: _trainer(c, config={"epochs": 1}), "TrainConfig")


@api("Trainer: checkpoint_dir that is a file", expect="error", match=("cannot be written",))
def _(c):
    (c.work / "run").write_text("x")
    return _trainer(c, ckpt=True)


def _vocab_mismatch(c):
    from ..toy_task import reversal_pairs

    tok = rtok()
    src, tgt = reversal_pairs(10)
    return tc.Trainer(
        tc.Transformer(tok.vocab_size + 1, tok.vocab_size, d_model=8, n_heads=2),
        tc.encode_pairs(src, tgt, tok, tok, None),
        src_tokenizer=tok,
        tgt_tokenizer=tok,
    )


err("Trainer: tokenizer and model vocabularies differ", _vocab_mismatch, "src_vocab_size")
err("Trainer: fit(epochs=2.5)", lambda c: _trainer(c).fit(epochs=2.5), "epochs")


@api("Trainer: the run lock is released when a callback raises")
def _(c):
    t = _trainer(c, ckpt=True)

    def boom(trainer: Any) -> None:
        raise KeyError("from the callback")

    try:
        t.fit(on_batch_end=boom)
    except KeyError:
        pass
    with ck.lock_run(c.work / "run"):
        pass
    t.fit()
    assert t.epoch == 1


@api("Trainer: fit in a thread")
def _(c):
    t = _trainer(c, ckpt=True)
    th = threading.Thread(target=t.fit)
    th.start()
    th.join()
    assert t.epoch == 1 and (c.work / "run" / "latest").exists()


@api("Trainer: a time budget of a microsecond")
def _(c):
    t = _trainer(
        c, tc.TrainConfig(epochs=3, batch_size=8, time_budget=1e-8, progress=False, val_bleu_sentences=0), ckpt=True
    )
    t.fit()
    e = t.history["epoch"]
    assert t.model.step >= 1 and e["loss"] and all(np.isfinite(x) and x > 0 for x in e["loss"]), e
    assert ck.latest_checkpoint(c.work / "run") is not None


def _damaged_state(c: Context, change: Dict[str, Any], fragment: str) -> None:
    """A damaged trainer state is refused naming the damage, and the trainer is as it was; the
    undamaged state then loads."""
    trained = _trainer(
        c, tc.TrainConfig(epochs=1, batch_size=8, warmup=10, progress=False, val_bleu_sentences=0, log_every=1)
    )
    trained.fit()
    fresh = _trainer(c)
    fresh.model.step = trained.model.step
    before = json.dumps(fresh.state_dict(), sort_keys=True)
    raises(
        lambda: fresh.load_state_dict(dict(trained.state_dict(), **change)),
        ValueError,
        "Trainer.load_state_dict",
        fragment,
    )
    assert json.dumps(fresh.state_dict(), sort_keys=True) == before
    fresh.load_state_dict(trained.state_dict())
    assert fresh.epoch == 1


for _name, _change, _fragment in [
    ("a negative epoch", dict(epoch=-3), "epoch must be an integer >= 0, got -3"),
    ("a negative batch position", dict(batch_in_epoch=-1), "batch_in_epoch must be an integer >= 0"),
    ("a batch position beyond the epoch", dict(batch_in_epoch=10**6), "batches into an epoch of 5 batches"),
    (
        "sums that are strings",
        dict(epoch_sums={"loss": "x", "correct": 0, "tokens": 0}),
        "epoch_sums.loss must be a finite number >= 0, got 'x'",
    ),
    ("a window without tokens", dict(window={"loss": 1.0, "correct": 0.5}), "it lacks 'window.tokens'"),
    ("a NaN clock", dict(elapsed=float("nan")), "elapsed must be a finite number >= 0, got nan"),
    ("a history that is a string", dict(history="none"), "history must be an object"),
    ("a history of numbers", dict(history={"batch": {"loss": 5}}), "history.batch.loss must be a list"),
    ("finished given as a string", dict(finished="yes"), "finished must be true or false"),
    ("a best score that is a string", dict(best={"bleu": "high"}), "best.bleu must be a finite number or null"),
]:
    api(f"Trainer: a state with {_name} is refused and changes nothing")(
        (lambda ch, f: lambda c: _damaged_state(c, ch, f))(_change, _fragment)
    )
err("Trainer: state of another format", lambda c: _trainer(c).load_state_dict({"format": "x"}), "trainer state")


@api("Trainer: resumed from a checkpoint loaded without its optimiser", expect="error", match=("optimiser",))
def _(c):
    t = _trainer(c, ckpt=True)
    t.fit()
    ckpt = tc.load_checkpoint(c.work / "run", optimizer=False)
    return tc.Trainer.from_checkpoint(ckpt, t.train_data)


@api("Trainer: resumed with other data", expect="error", match=("differ",))
def _(c):
    t = _trainer(c, ckpt=True)
    t.fit()
    other = _trainer(c, n=41).train_data
    return tc.Trainer.from_checkpoint(c.work / "run", other)


@api("Trainer: divergence without a run directory", expect="error", match=("diverged",))
def _(c):
    t = _trainer(c, tc.TrainConfig(epochs=3, batch_size=8, fixed_lr=1e30, progress=False, val_bleu_sentences=0))
    t.fit()


err(
    "bleu_of_encoded: limit -1",
    lambda c: tr.bleu_of_encoded(_rmodel(), encoded(), rtok(), limit=-1),
    "bleu_of_encoded: limit must be an integer >= 0",
)
err(
    "bleu_of_encoded: batch_size 0",
    lambda c: tr.bleu_of_encoded(_rmodel(), encoded(), rtok(), batch_size=0),
    "batch_size must be an integer >= 1",
)
err(
    "output_limit: negative length",
    lambda c: tr.output_limit(-5),
    "output_limit: source_tokens must be an integer >= 0, got -5",
)
err(
    "checkpoint_name: a float count",
    lambda c: ck.checkpoint_name(1.5),
    "checkpoint_name: epochs_done must be an integer >= 0, got 1.5",
)
err(
    "checkpoint_name: a string count",
    lambda c: ck.checkpoint_name("3"),
    "checkpoint_name: epochs_done must be an integer >= 0, got '3'",
)
err(
    "checkpoint_name: a negative batch count",
    lambda c: ck.checkpoint_name(1, -2),
    "checkpoint_name: batches_into_next_epoch must be an integer >= 0, got -2",
)


@api("output_limit and checkpoint_name: their documented values")
def _(c):
    assert tr.output_limit(4) == 16 and ck.checkpoint_name(3, 17) == "epoch-0004-batch-000017"


@api("split_by_source: generators")
def _(c):
    s = tc.split_by_source((x for x in ["a", "b", "c", "d"]), (y for y in ["w", "x", "y", "z"]), 0.25, 0.25)
    assert len(s.train) + len(s.valid) + len(s.test) + s.dropped == 4
    assert sorted(np.concatenate(s.parts()).tolist()) == [0, 1, 2, 3]


def _rmodel() -> Any:
    from ..toy_task import tiny_model

    return tiny_model(rtok())


@api("empty paths: the Python API refuses them in the same words and writes nothing")
def _(c):
    """An empty path (an unset shell variable) is never taken for the current directory: every path
    argument refuses it, naming itself."""
    from transformer_cpp.plotting import save_positional_encoding_figures

    cwd = c.work / "cwd"
    cwd.mkdir()
    os.chdir(cwd)
    tok = rtok()
    model = _rmodel()
    enc = tc.encode_pairs(["a b"], ["b a"], tok, tok, None)
    for call, who in [
        (
            lambda: tc.Trainer(
                model,
                enc,
                None,
                tc.TrainConfig(epochs=1, progress=False),
                src_tokenizer=tok,
                tgt_tokenizer=tok,
                checkpoint_dir="",
            ),
            "Trainer: checkpoint_dir",
        ),
        (lambda: tc.save_checkpoint("", model, tok, tok), "save_checkpoint: run_dir"),
        (lambda: tc.load_checkpoint(""), "checkpoint path"),
        (lambda: tc.Translator.from_checkpoint(""), "checkpoint path"),
        (lambda: tc.load_tatoeba(""), "load_tatoeba: path"),
        (lambda: tc.export_torch(c.run, ""), "export: out_dir"),
        (lambda: save_positional_encoding_figures(""), "save_positional_encoding_figures: out_dir"),
    ]:
        e = raises(call, ValueError)
        assert str(e).startswith(f"{who}: expected a path, got an empty string"), str(e)
    assert list(cwd.iterdir()) == []  # nothing written where the process runs


err("evaluate_loss: batch_size 0", lambda c: tr.evaluate_loss(small(), encoded(), 0), "batch_size")
