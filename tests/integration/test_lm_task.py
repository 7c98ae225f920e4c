"""The language-model task end to end on a tiny text written here: the split, training, bits per
character, checkpoints, resuming exactly, seeded generation, the commands, and bad input."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from transformer_cpp import LanguageModel
from transformer_cpp.cli import main
from transformer_cpp.data.lm_text import CharVocabulary, split_text
from transformer_cpp.task import LmTrainRequest, bits_per_character, generate, load_lm, new_lm_trainer
from transformer_cpp.task import resume_lm_trainer

from helpers.toy_task import write_tiny_text

TINY = dict(
    d_model=16,
    n_layers=1,
    n_heads=2,
    d_ff=32,
    dropout=0.0,
    seq_len=16,
    batch_size=8,
    eval_chars=512,
    threads=1,
    adaptive_threads=False,
    warmup=10,
    lr_scale=0.1,
)


#: ``train-lm``'s options for a width-16 model of one block, batches of 4 windows of 16 characters,
#: validations of 256 characters, one thread.
_TINY_MODEL_ARGS = [
    "--d-model",
    "16",
    "--n-layers",
    "1",
    "--n-heads",
    "2",
    "--d-ff",
    "32",
    "--seq-len",
    "16",
    "--batch-size",
    "4",
    "--eval-chars",
    "256",
    "--threads",
    "1",
]


@pytest.fixture
def text_file(tmp_path):
    return write_tiny_text(tmp_path / "tiny.txt", 240)


def quiet(_: str) -> None:
    pass


def assert_resumed_exactly(resumed, text_file: Path, out: Path, steps: int, eval_every: int) -> None:
    """``resumed`` trained to its end ends with the weights of a TINY run on ``text_file`` of
    ``steps`` steps, validated every ``eval_every``, trained straight through into ``out``."""
    resumed.fit()
    straight = new_lm_trainer(
        LmTrainRequest(text=str(text_file), steps=steps, eval_every=eval_every, **TINY), out, quiet
    )
    straight.fit()
    for (name, p), q in zip(resumed.model.parameters().items(), straight.model.parameters().values()):
        np.testing.assert_array_equal(p.value, q.value, err_msg=name)


def test_split_cuts_at_line_starts_and_keeps_every_character():
    text = "".join(f"line {i}\n" for i in range(200))
    s = split_text(text, 0.05, 0.05)
    assert s.train + s.valid + s.test == text
    assert s.valid.startswith("line ") and s.test.startswith("line ")
    assert abs(len(s.test) - 0.05 * len(text)) < 10 and abs(len(s.valid) - 0.05 * len(text)) < 10
    with pytest.raises(ValueError, match="too short"):
        split_text("one line only")


def test_vocabulary_round_trip_and_unknown_characters():
    v = CharVocabulary.from_text("hello world")
    assert v.vocab_size == len(set("hello world")) + 1
    assert v.decode(v.encode("hello")) == "hello" and 0 not in v.encode("hello")
    assert CharVocabulary.from_str(v.to_str()).chars == v.chars
    with pytest.raises(ValueError, match="'z' at position 0 is not in the model's vocabulary"):
        v.encode("z")


def test_bits_per_character_is_the_mean_cross_entropy_over_every_character(text_file):
    trainer = new_lm_trainer(LmTrainRequest(text=str(text_file), steps=1, **TINY), text_file.parent / "run", quiet)
    ids = trainer.task.ids["valid"][:50]
    logits = trainer.model.forward(ids[None, :-1])[0].astype(np.float64)
    logp = (
        logits
        - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True))
        - logits.max(1, keepdims=True)
    )
    expected = -logp[np.arange(49), ids[1:]].mean() / math.log(2)
    # windows of 16 + 1: each character after the first scored once, with its context cut at 16
    assert bits_per_character(trainer.model, ids, 64) == pytest.approx(expected, rel=1e-5)
    assert bits_per_character(trainer.model, ids, 16) != pytest.approx(expected, rel=1e-9)


def test_train_checkpoint_resume_exactly_and_generate(text_file, tmp_path):
    out = tmp_path / "run"
    trainer = new_lm_trainer(LmTrainRequest(text=str(text_file), steps=30, eval_every=10, **TINY), out, quiet)
    trainer.fit()
    bpcs = trainer.history["epoch"]["val_bpc"]
    assert trainer.history["epoch"]["step"] == [10, 20, 30]
    assert len(bpcs) == 3 and all(math.isfinite(b) for b in bpcs)
    assert bpcs[-1] < bpcs[0] - 0.5  # learning
    assert (out / "latest").read_text().strip() == "epoch-0001-batch-000030"

    resumed = resume_lm_trainer(out, {"steps": 40}, quiet)
    assert resumed.model.step == 30
    assert_resumed_exactly(resumed, text_file, tmp_path / "b", steps=40, eval_every=10)

    ckpt = load_lm(out)
    assert ckpt.path.name == "epoch-0001-batch-000040"
    one = ckpt.generate("the ", 40, temperature=0.8, top_k=5, seed=3)
    assert one == ckpt.generate("the ", 40, temperature=0.8, top_k=5, seed=3)
    assert len(one) == 40 and set(one) <= set(ckpt.vocabulary.chars)
    assert one != ckpt.generate("the ", 40, temperature=0.8, top_k=5, seed=4)
    greedy = generate(ckpt.model, ckpt.vocabulary, "the ", 20, temperature=0)
    assert greedy == generate(ckpt.model, ckpt.vocabulary, "the ", 20, temperature=0, seed=9)


@pytest.mark.parametrize("kind", ["softmax", "linear"])
def test_generation_keeps_to_the_context_and_matches_the_full_forward(kind):
    vocabulary = CharVocabulary.from_text("abcdefg")
    lm = LanguageModel(
        vocabulary.vocab_size, d_model=8, n_layers=2, n_heads=2, d_ff=16, dropout=0.0, attention=kind, dtype="float64"
    )
    rng = np.random.default_rng(0)
    for p in lm.parameters().values():
        p.value[...] += 0.3 * rng.standard_normal(p.value.shape)
    window, keep = 8, 4
    got = generate(lm, vocabulary, "abc", 30, temperature=0, context=window)
    # the reference: the model run over the same context for every character (the key/value
    # caches, or the linear-attention state, restart from the last half of a full context)
    seq, fed, want = [int(i) for i in vocabulary.encode("abc")], 3, []
    for _ in range(30):
        logits = lm.forward(np.array([seq[-fed:]]))[0, -1]
        logits[0] = -np.inf
        nxt = int(np.argmax(logits))
        want.append(nxt)
        seq.append(nxt)
        fed = keep if fed >= window else fed + 1
    assert got == vocabulary.decode(want)
    sampled = generate(lm, vocabulary, "abc", 30, temperature=1.0, top_k=3, seed=5, context=window)
    assert sampled == generate(lm, vocabulary, "abc", 30, temperature=1.0, top_k=3, seed=5, context=window)


def test_commands_train_generate_evaluate(text_file, tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["--text", str(text_file), "--out", str(out), *_TINY_MODEL_ARGS, "--steps", "6", "--eval-every", "3"]
    assert main(["train-lm", *args]) == 0
    printed = capsys.readouterr()
    assert "step 6" in printed.err and "bits per character on the held-out test text" in printed.out
    assert "epoch 1/1:" in printed.err and "bpc=" in printed.err  # train's progress bar, the task's values
    assert main(["train-lm", *args]) == 1  # a run is there: --resume or another --out
    assert "--resume" in capsys.readouterr().err
    assert main(["train-lm", "--out", str(out), "--resume", "--steps", "8", "--threads", "1"]) == 0
    assert load_lm(out).model.step == 8
    capsys.readouterr()
    assert main(["generate", "--model", str(out), "--prompt", "the", "--max-output-tokens", "12", "--seed", "1"]) == 0
    first = capsys.readouterr().out
    assert main(["generate", "--model", str(out), "--prompt", "the", "--max-output-tokens", "12", "--seed", "1"]) == 0
    assert capsys.readouterr().out == first and first.startswith("the") and len(first.rstrip("\n")) == 15
    # nucleus sampling with a tiny p keeps only the most likely token: greedy, whatever the seed
    gen = ["generate", "--model", str(out), "--prompt", "the", "--max-output-tokens", "12", "--top-p", "1e-9"]
    assert main([*gen, "--seed", "1"]) == 0
    nucleus = capsys.readouterr().out
    assert main([*gen, "--seed", "2"]) == 0
    assert capsys.readouterr().out == nucleus
    assert main(["generate", "--model", str(out), "--prompt", "the", "--temperature", "0"]) == 0
    assert capsys.readouterr().out.startswith(nucleus.rstrip("\n")[:15])
    with pytest.raises(SystemExit):
        main([*gen[:-2], "--top-p", "1.5"])
    assert "--top-p: must be a number in (0, 1]" in capsys.readouterr().err
    assert main(["evaluate-lm", "--model", str(out)]) == 0
    assert "bits per character on the held-out test text" in capsys.readouterr().out


def four_steps(text_file: Path, out: Path, n_layers: int) -> list:
    """``train-lm``'s arguments for 4 steps of a width-16 model of ``n_layers`` blocks on ``text_file``."""
    tiny = ["--d-model", "16", "--n-layers", str(n_layers), "--n-heads", "2", "--d-ff", "32", "--seq-len", "16"]
    return ["--text", str(text_file), "--out", str(out), *tiny, "--batch-size", "4", "--steps", "4", "--threads", "1"]


def test_commands_with_linear_attention(text_file, tmp_path, capsys):
    out = tmp_path / "linear"
    args = four_steps(text_file, out, n_layers=1)
    assert main(["train-lm", *args, "--eval-chars", "256", "--attention", "linear"]) == 0
    assert "bits per character on the held-out test text" in capsys.readouterr().out
    run = load_lm(out)
    assert run.model.config["attention"] == "linear" and run.model.has_cached_step
    assert main(["generate", "--model", str(out), "--prompt", "the", "--max-output-tokens", "40", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("the") and len(text.rstrip("\n")) == 43
    assert main(["evaluate-lm", "--model", str(out)]) == 0
    assert "bits per character on the held-out test text" in capsys.readouterr().out


def test_commands_with_lsh_attention_and_reversible_blocks(text_file, tmp_path, capsys):
    out = tmp_path / "lsh"
    args = four_steps(text_file, out, n_layers=2)
    lsh = ["--attention", "lsh", "--lsh-hashes", "2", "--lsh-chunk", "4", "--lsh-buckets", "4", "--reversible"]
    assert main(["train-lm", *args, "--eval-chars", "256", *lsh]) == 0
    assert "bits per character on the held-out test text" in capsys.readouterr().out
    run = load_lm(out)
    config = run.model.config
    assert (config["attention"], config["lsh_hashes"], config["lsh_chunk"], config["lsh_buckets"]) == ("lsh", 2, 4, 4)
    assert config["reversible"] is True and not run.model.has_cached_step
    # generation runs the model over the window: the same seed, the same text
    generated = []
    for _ in range(2):
        assert (
            main(["generate", "--model", str(out), "--prompt", "the", "--max-output-tokens", "20", "--seed", "1"]) == 0
        )
        generated.append(capsys.readouterr().out)
    assert generated[0] == generated[1] and len(generated[0].rstrip("\n")) == 23
    assert main(["evaluate-lm", "--model", str(out)]) == 0
    assert "bits per character on the held-out test text" in capsys.readouterr().out
    # the architecture is the checkpoint's
    assert main(["train-lm", "--out", str(out), "--resume", "--steps", "6", "--no-reversible"]) == 1
    assert "reversible cannot be changed" in capsys.readouterr().err
    bad = ["train-lm", "--text", str(text_file), "--out", str(tmp_path / "b"), "--reversible", "--no-pre-norm"]
    assert main(bad) == 1
    assert "reversible=True needs pre_norm=True" in capsys.readouterr().err
    assert main(["train-lm", "--text", str(text_file), "--out", str(tmp_path / "c"), "--lsh-buckets", "5"]) == 1
    assert "lsh_buckets must be even" in capsys.readouterr().err


def test_foreign_files_in_the_run_directory_are_refused(text_file, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "latest").write_text("my notes, not a pointer\n")
    code = main(
        [
            "train-lm",
            "--text",
            str(text_file),
            "--out",
            str(out),
            "--steps",
            "1",
            "--d-model",
            "8",
            "--n-heads",
            "2",
            "--n-layers",
            "1",
            "--d-ff",
            "8",
            "--seq-len",
            "8",
        ]
    )
    assert code == 1 and "did not write" in capsys.readouterr().err
    assert (out / "latest").read_text() == "my notes, not a pointer\n"


def test_bad_input_gives_clear_errors(tmp_path, text_file, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n\n")
    assert main(["train-lm", "--text", str(empty), "--out", str(tmp_path / "e")]) == 1
    assert "holds no text" in capsys.readouterr().err
    with pytest.raises(ValueError, match="seq_len 100000 is too long"):
        new_lm_trainer(LmTrainRequest(text=str(text_file), seq_len=100000, d_model=8, n_heads=2), tmp_path / "s", quiet)
    with pytest.raises(ValueError, match=r"attention must be .*'softmax'.*got 'fast'"):
        LmTrainRequest(attention="fast")
    with pytest.raises(SystemExit) as bad_option:  # a bad command line, as for train: status 2
        main(["train-lm", "--text", str(text_file), "--out", str(tmp_path / "a"), "--attention", "fast"])
    assert bad_option.value.code == 2 and "'softmax'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="at most one of steps, time_budget and epochs"):
        LmTrainRequest(steps=3, epochs=1.0)
    assert main(["train-lm", "--text", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "m")]) == 1
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(ValueError, match="temperature"):
        trainer = new_lm_trainer(LmTrainRequest(text=str(text_file), steps=1, **TINY), tmp_path / "t", quiet)
        generate(trainer.model, trainer.task.vocabulary, "the", 3, temperature=-1)


# ---------------------------------------------------------------------------- runs written before the shared trainer


def _write_old_run(run, ckpt, request, source_text, history):
    """``ckpt`` (a loaded LmCheckpoint with its optimiser) as the language model's own saving code
    wrote a run before it trained through the shared trainer: the request and the text in
    trainer_state.json, a checkpoint named by the step alone, no data or train_config section."""
    import hashlib
    import json

    from safetensors.numpy import save

    def tensors(params, content):
        arrays = {n: np.ascontiguousarray(np.array(t.value, copy=True)) for n, t in params.items()}
        return save(arrays, metadata={"format": "transformer_cpp.checkpoint", "content": content})

    def digest(b):
        return hashlib.sha256(b).hexdigest()

    model = ckpt.model
    old_request = dict(request)
    old_request["keep"] = old_request.pop("keep_checkpoints")
    old_request.pop("average_last")
    old_request.pop("progress")
    old_request["checkpoint_every"] = 600.0
    state = {
        "step": model.step,
        "elapsed": 1.5,
        "history": history,
        "request": old_request,
        "text": {
            "source": "file",
            "attribution": "",
            "characters": len(source_text),
            "sha256": digest(source_text.encode()),
            "split": {},
        },
    }
    files = {
        "model.safetensors": tensors(model.parameters(), "weights"),
        "optimizer.safetensors": tensors(model.optimizer_state(), "adam"),
        "vocabulary.json": ckpt.vocabulary.to_str().encode("utf-8"),
        "trainer_state.json": json.dumps(state).encode("utf-8"),
    }
    config = {
        "format": "transformer_cpp.checkpoint",
        "version": 1,
        "kind": "language_model",
        "model": model.config,
        "optimizer": {
            "config": model.optimizer_config,
            "saved": True,
            "step": model.step,
            "dropout_calls": model.dropout_calls,
        },
        "run_id": "0123456789abcdef",
        "files": {f: {"bytes": len(b), "sha256": digest(b)} for f, b in sorted(files.items())},
    }
    name = f"epoch-0001-batch-{model.step:06d}"
    (run / name).mkdir(parents=True)
    for fname, payload in files.items():
        (run / name / fname).write_bytes(payload)
    (run / name / "config.json").write_text(json.dumps(config))
    (run / "latest").write_text(name + "\n")


def test_a_run_of_the_older_layout_resumes_exactly_generates_and_scores(text_file, tmp_path, capsys):
    # 12 steps with today's trainer, written out in the older layout, resumed to 20: the weights
    # of a run that was never stopped, bit for bit
    request = LmTrainRequest(text=str(text_file), steps=12, eval_every=6, **TINY)
    first = new_lm_trainer(request, tmp_path / "new", quiet)
    first.fit()
    ckpt = load_lm(tmp_path / "new", optimizer=True)
    old = tmp_path / "old"
    history = [{"step": 6, "elapsed": 0.7, "train_loss": 3.0, "train_bpc": 4.3, "valid_bpc": 4.2, "lr": 1e-3}]
    _write_old_run(old, ckpt, ckpt.request, text_file.read_text(encoding="utf-8"), history)

    read = load_lm(old)
    assert read.legacy is not None and read.legacy["step"] == 12 and read.request["keep_checkpoints"] == 3
    resumed = resume_lm_trainer(old, {"steps": 20}, quiet)
    assert resumed.model.step == 12 and resumed.elapsed == 1.5
    assert resumed.history["epoch"]["val_bpc"][0] == 4.2  # the older progress entries, kept
    assert_resumed_exactly(resumed, text_file, tmp_path / "b", steps=20, eval_every=6)
    assert load_lm(old).legacy is None and load_lm(old).model.step == 20  # written in today's layout

    fresh = tmp_path / "old2"
    _write_old_run(fresh, ckpt, ckpt.request, text_file.read_text(encoding="utf-8"), history)
    capsys.readouterr()
    assert (
        main(["generate", "--model", str(fresh), "--prompt", "the", "--max-output-tokens", "10", "--threads", "1"]) == 0
    )
    assert capsys.readouterr().out.startswith("the")
    assert main(["evaluate-lm", "--model", str(fresh), "--threads", "1"]) == 0
    assert "bits per character on the held-out test text" in capsys.readouterr().out


# ---------------------------------------------------------------------------- one run per task, one writer per run


@pytest.fixture
def translation_run(tmp_path):
    from helpers.toy_task import reversal_tokenizer, tiny_model

    from transformer_cpp.checkpoint import save_checkpoint

    tok = reversal_tokenizer()
    run = tmp_path / "translation"
    save_checkpoint(run, tiny_model(tok), tok, tok, optimizer=False)
    return run


def test_a_run_of_one_task_given_to_the_other_commands_says_so(text_file, tmp_path, translation_run, capsys):
    lm = tmp_path / "lm"
    assert main(["train-lm", "--text", str(text_file), "--out", str(lm), *_TINY_ARGS, "--steps", "2"]) == 0
    capsys.readouterr()
    for command in (["translate", "--model", str(lm), "a b"], ["evaluate", "--model", str(lm)]):
        assert main(command) == 1, command
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and f"transformer-cpp {command[0]}: error:" in lines[0], lines
        assert "holds a language model (trained by train-lm)" in lines[0] and "generate or evaluate-lm" in lines[0]
    for command in (["generate", "--model", str(translation_run)], ["evaluate-lm", "--model", str(translation_run)]):
        assert main(command) == 1, command
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and f"transformer-cpp {command[0]}: error:" in lines[0], lines
        assert "holds a translation model (trained by train)" in lines[0], lines
        assert "translate, evaluate or serve" in lines[0], lines


_TINY_ARGS = [*_TINY_MODEL_ARGS, "--no-progress"]


def test_a_second_writer_into_a_run_directory_fails_at_once(text_file, tmp_path, capsys):
    import os
    import subprocess
    import sys

    out = tmp_path / "run"
    code = (
        "import sys, time\nfrom transformer_cpp.checkpoint import lock_run\n"
        "with lock_run(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["train-lm", "--text", str(text_file), "--out", str(out), *_TINY_ARGS, "--steps", "2"]) == 1
        err = capsys.readouterr().err
        assert "another process" in err and "train-lm: error:" in err, err
        assert not (out / "latest").exists()
    finally:
        holder.kill()
        holder.wait()


def test_train_lm_speaks_trains_terms(text_file, tmp_path, capsys):
    out = tmp_path / "run"
    # the old spellings still work, each naming its replacement on standard error
    args = ["train-lm", "--text", str(text_file), "--out", str(out), *_TINY_ARGS, "--steps", "4", "--eval-every", "2"]
    assert main([*args, "--keep", "1", "--checkpoint-every", "600"]) == 0
    err = capsys.readouterr().err
    assert "--keep is deprecated and will be removed; use --keep-checkpoints" in err
    assert "--checkpoint-every is deprecated and will be removed; use --eval-every" in err
    assert [p.name for p in out.iterdir() if p.name.startswith("epoch-")] == ["epoch-0001-batch-000004"]  # kept 1
    assert main(["generate", "--model", str(out), "--max-tokens", "5", "--threads", "1"]) == 0
    printed = capsys.readouterr()
    assert "--max-tokens is deprecated and will be removed; use --max-output-tokens" in printed.err
    assert len(printed.out.rstrip("\n")) == 5
    # --time-budget is minutes, as for train: a resume with a budget already spent trains no more
    assert main(["train-lm", "--out", str(out), "--resume", "--time-budget", "0.0001", "--threads", "1"]) == 0
    assert load_lm(out).model.step == 4
    with pytest.raises(SystemExit) as bad:
        main(["train-lm", "--out", str(out), "--time-budget", "-1"])
    assert bad.value.code == 2 and "time_budget must be" in capsys.readouterr().err


def test_average_last_averages_the_runs_last_checkpoints(text_file, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--text", str(text_file), "--out", str(out), *_TINY_ARGS, "--steps", "4", "--eval-every", "2"]
    assert main(["train-lm", *args, "--keep-checkpoints", "0", "--average-last", "2"]) == 0
    assert "averaged the last 2 checkpoints" in capsys.readouterr().err
    two, four = load_lm(out / "epoch-0001-batch-000002"), load_lm(out / "epoch-0001-batch-000004")
    averaged = load_lm(out / "averaged")
    assert averaged.trainer_state is None and load_lm(out).path.name == "epoch-0001-batch-000004"
    for name, p in averaged.model.parameters().items():
        mean = (two.model.parameters()[name].value.astype(np.float64) + four.model.parameters()[name].value) / 2
        np.testing.assert_allclose(p.value, mean, rtol=1e-6, atol=1e-7, err_msg=name)  # float32 of a float64 mean
    assert main(["generate", "--model", str(out / "averaged"), "--max-output-tokens", "5", "--threads", "1"]) == 0
