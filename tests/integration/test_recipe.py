"""What makes a translator hold up on new sentences: honest splits, sampling, length policy,
evaluation on a pairs file, checkpoint averaging, the time budget, best checkpoints, resuming."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from transformer_cpp import data as tdata
from transformer_cpp.checkpoint import average_checkpoints, best_checkpoint, list_checkpoints, load_checkpoint
from transformer_cpp.training import TrainConfig, Trainer, bleu_of_encoded, output_limit
from transformer_cpp.translate import LongInputWarning, Translator

from helpers.cli import QUICK, TINY_MODEL, run_cli
from helpers.toy_task import one_thread, reversal_pairs, tiny_model, tok, write_tatoeba_file  # noqa: F401


# ------------------------------------------------------------------------------------ splitting


def translation_corpus(n_sources: int = 300, seed: int = 0):
    """English sentences with 1-4 Spanish translations each, some Spanish shared across sources."""
    rng = np.random.default_rng(seed)
    src, tgt = [], []
    for i in range(n_sources):
        for k in range(int(rng.integers(1, 5))):
            src.append(f"Sentence number {i}." if k % 2 else f"sentence  NUMBER {i}.")  # case/spacing variants
            tgt.append(f"Frase {i} versión {k}." if rng.random() > 0.1 else f"Frase común {int(rng.integers(0, 20))}.")
    return src, tgt


def key(text: str) -> str:
    return " ".join(text.casefold().split())


def test_split_by_source_has_no_leak():
    src, tgt = translation_corpus()
    split = tdata.split_by_source(src, tgt, valid_fraction=0.1, test_fraction=0.15, seed=3)
    train, valid, test = split.parts()
    train_sources = {key(src[i]) for i in train}
    train_targets = {key(tgt[i]) for i in train}
    assert test.size and valid.size and train.size
    # no test (or validation) source sentence occurs in training, whatever its case or spacing
    assert not train_sources & {key(src[i]) for i in test}
    assert not train_sources & {key(src[i]) for i in valid}
    assert not {key(src[i]) for i in valid} & {key(src[i]) for i in test}
    # no reference of the test or validation part is a training target; none of test in validation
    assert not train_targets & {key(tgt[i]) for i in test}
    assert not train_targets & {key(tgt[i]) for i in valid}
    assert not {key(tgt[i]) for i in valid} & {key(tgt[i]) for i in test}
    # every translation of a test source is in the test part; pairs are only ever dropped from train/valid
    test_sources = {key(src[i]) for i in test}
    assert set(test) == {i for i in range(len(src)) if key(src[i]) in test_sources}
    assert len(train) + len(valid) + len(test) + split.dropped == len(src)
    assert split.dropped > 0  # the shared "Frase común" references force some out
    assert abs(len(test) - 0.15 * len(src)) <= 4  # whole groups of at most 4 pairs


def test_split_by_source_is_deterministic_by_seed():
    src, tgt = translation_corpus()
    a = tdata.split_by_source(src, tgt, 0.1, 0.1, seed=1)
    b = tdata.split_by_source(src, tgt, 0.1, 0.1, seed=1)
    c = tdata.split_by_source(src, tgt, 0.1, 0.1, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a.parts(), b.parts()))
    assert not np.array_equal(a.test, c.test)


def test_split_by_source_rejects_bad_fractions():
    with pytest.raises(ValueError, match=r"test_fraction must be a number in \[0, 1\), got 1.5"):
        tdata.split_by_source(["a"], ["b"], 0.1, 1.5)
    with pytest.raises(ValueError, match="sources but"):
        tdata.split_by_source(["a", "b"], ["b"], 0.1, 0.1)


# ------------------------------------------------------------------------------------ sampling


def test_num_samples_draws_a_seeded_random_sample(tmp_path):
    path = write_tatoeba_file(tmp_path / "pairs.txt", n=200)
    lines = path.read_text(encoding="utf-8").splitlines()
    first = tdata.load_tatoeba(path, num_samples=50, sampling="first")
    assert first.sources == [ln.split("\t")[0] for ln in lines[:50]]
    a = tdata.load_tatoeba(path, num_samples=50)
    b = tdata.load_tatoeba(path, num_samples=50, seed=0)
    c = tdata.load_tatoeba(path, num_samples=50, seed=1)
    assert len(a) == 50 and a.sources == b.sources and a.sources != c.sources
    assert a.sources != first.sources
    # the sample is a subset of the file, kept in file order, attributions aligned
    position = {ln: i for i, ln in enumerate(lines)}
    rows = [position["\t".join(p)] for p in zip(a.sources, a.targets, a.attributions)]
    assert rows == sorted(rows) and len(set(rows)) == 50
    assert len(tdata.load_tatoeba(path, num_samples=10_000)) == 200
    with pytest.raises(ValueError, match="sampling must be 'random' or 'first', got"):
        tdata.load_tatoeba(path, num_samples=5, sampling="last")


# ------------------------------------------------------------------------------------ length


def test_length_percentiles_and_limit():
    lengths = list(range(1, 1001))  # 1..1000
    pct = tdata.length_percentiles(lengths)
    assert pct[50.0] == 500 and pct[99.5] == 995 and pct[100.0] == 1000
    assert tdata.length_limit(lengths, 99.9) == 999
    assert sum(n <= tdata.length_limit(lengths, 99.5) for n in lengths) / len(lengths) >= 0.995


def _split_with(train_src, train_tgt, lines=None):
    from transformer_cpp.task import Split

    split = Split(train=(train_src, train_tgt), valid=([], []), test=([], []))
    if lines is not None:
        split.lines = {"train": lines, "valid": [], "test": []}
    return split


def test_an_outlier_pair_does_not_set_the_automatic_length(tok):
    from transformer_cpp.task import AUTOMATIC_LENGTH_CAP, choose_max_length, encode_split

    src, tgt = reversal_pairs(300, seed=4)
    huge = " ".join(["a b c"] * 40_000)  # 120,000 words: no tokenizing needed to know it is too long
    long = " ".join(["a b c"] * 30)  # 90 tokens: far longer than the rest, shorter than the cap
    src, tgt = src + [huge, long], tgt + ["c b a", long]
    lines = list(range(2, 2 + len(src)))  # the line of each pair in its data file
    said = []
    limit = choose_max_length(_split_with(src, tgt, lines), tok, tok, 0, said.append)
    longest = max(len(t) for t in tok.encode_batch(src[:300] + tgt[:300]))
    assert limit == longest < AUTOMATIC_LENGTH_CAP
    message = said[-1]
    assert f"line {lines[300]} (at least 120,002 tokens)" in message and f"line {lines[301]} (" in message
    assert "2 pair(s) far longer than the rest" in message and "--max-length" in message
    encoded = encode_split(_split_with(src, tgt), "train", tok, tok, limit)
    assert len(encoded) == 300 and encoded.removed == 2 and list(encoded.indices) == list(range(300))
    # a limit given is applied as given, and the enormous pair is still not tokenized
    said.clear()
    assert choose_max_length(_split_with(src, tgt), tok, tok, 200, said.append) == 200
    assert "keeps 99.67% of the training pairs" in said[-1]
    # without line numbers, a pair is named by its place in the training part
    said.clear()
    choose_max_length(_split_with(src, tgt), tok, tok, 0, said.append)
    assert "training pair 301 (at least 120,002 tokens)" in said[-1]


def test_train_with_one_enormous_line_names_it_and_trains_on_the_rest(tmp_path):
    data = write_tatoeba_file(tmp_path / "pairs.txt", n=300)
    lines = data.read_text(encoding="utf-8").splitlines()
    huge = " ".join(["the cat and the dog"] * 30_000)
    lines.insert(150, f"{huge}.\t{huge}.\tCC-BY")
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_cli(
        "train", "--preset", "tiny", "--d-model", "16", "--d-ff", "32", "--n-layers", "1", "--n-heads", "2",
        "--batch-size", "64", "--warmup", "20", "--vocab-size", "300", "--no-progress", "--threads", "1",
        "--data", str(data), "--num-samples", "0", "--epochs", "1", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "data file line 151 (at least 150,00" in result.stderr and "left out of training" in result.stderr
    record = json.loads((tmp_path / "run" / "epoch-0001" / "config.json").read_text())["data"]
    assert record["max_length"] < 64 and record["pairs_loaded"] == 301


def test_token_batches_respect_the_budget(tok):
    src, tgt = reversal_pairs(500, seed=4)
    enc = tdata.encode_pairs(src, tgt, tok, tok, None)
    plan = tdata.batch_plan(enc, max_tokens=60, seed=0, epoch=2)
    rows = np.concatenate(plan)
    assert sorted(rows.tolist()) == list(range(len(enc)))  # every pair once
    longest = np.maximum(enc.src_lengths, enc.tgt_lengths)
    for idx in plan:
        assert len(idx) * longest[idx].max() <= 60 or len(idx) == 1
    assert [len(p) for p in plan] != [len(p) for p in tdata.batch_plan(enc, max_tokens=60, seed=0, epoch=3)] or not all(
        np.array_equal(x, y) for x, y in zip(plan, tdata.batch_plan(enc, max_tokens=60, seed=0, epoch=3))
    )
    # padding stays small: batches hold sentences of similar length
    padded = sum(len(idx) * longest[idx].max() for idx in plan)
    assert padded <= 1.2 * longest.sum()


def test_long_inputs_are_translated_whole(tok):
    model = tiny_model(tok, max_length=8)  # a positional table of 8 rows, as a cache
    translator = Translator(model, tok, tok, src_lang=None, trained_length=7)
    sentence = " ".join(["a", "b", "c", "d", "e", "f"] * 9)[:-1] + " a"  # 55 symbols, far beyond 8
    with pytest.warns(LongInputWarning, match="more than any training pair"):
        t = translator.translate(sentence, return_attention=True)
    assert len(t.source_ids) == len(tok.encode(sentence)) == 57  # nothing cut
    assert len(t.target_ids) <= output_limit(57)
    assert t.cross_attention().shape[-1] == 57
    # the output limit follows the input: 1.5 x source tokens + 10
    assert output_limit(10) == 25 and output_limit(57) == 95
    src = np.array([tok.encode("a b")])
    out = model.greedy_decode(src, tok.start_id, tok.end_id, 40)  # longer than the table too
    assert out.shape[1] <= 40


def test_fifty_word_sentence_translates_and_matches_forward(tok):
    """Positions beyond the initial table use the same sinusoids as a model built with a larger table."""
    small = tiny_model(tok, max_length=4)
    big = tiny_model(tok, max_length=128)
    for (name, p), q in zip(small.parameters().items(), big.parameters().values()):
        q.value[...] = p.value
    src = np.array([tok.encode(" ".join(["c"] * 50))])
    tgt = np.array([[tok.start_id] + [tok.encode("a", add_special_tokens=False)[0]] * 60])
    np.testing.assert_allclose(small.forward(src, tgt), big.forward(src, tgt), rtol=1e-5, atol=1e-5)
    assert np.array_equal(
        small.greedy_decode(src, tok.start_id, tok.end_id, 80), big.greedy_decode(src, tok.start_id, tok.end_id, 80)
    )


# ------------------------------------------------------------------------------------ training helpers


def reversal_trainer(tok, out, config, n=2100):
    src, tgt = reversal_pairs(n, seed=1)
    train = tdata.encode_pairs(src[:2000], tgt[:2000], tok, tok, None)
    valid = tdata.encode_pairs(src[2000:], tgt[2000:], tok, tok, None)
    return Trainer(
        tiny_model(tok, dropout=0.0),
        train,
        valid,
        config,
        src_tokenizer=tok,
        tgt_tokenizer=tok,
        checkpoint_dir=out,
        data_info={"src_lang": None, "tgt_lang": None},
    )


def test_validation_bleu_best_pointer_and_averaging(tok, tmp_path):
    config = TrainConfig(
        epochs=6,
        batch_size=32,
        warmup=100,
        lr_scale=1.0,
        progress=False,
        val_bleu_sentences=60,
        average_last=3,
        keep_checkpoints=2,
    )
    trainer = reversal_trainer(tok, tmp_path / "run", config)
    history = trainer.fit()
    bleus = history["epoch"]["val_bleu"]
    assert len(bleus) == 6 and max(bleus) > 50  # the reversal task is being learned
    # BLEU is sacrebleu's on the decoded validation pairs
    assert bleus[-1] == pytest.approx(
        bleu_of_encoded(load_checkpoint(tmp_path / "run" / "epoch-0006").model, trainer.valid_data, tok, 60)
    )
    # the best checkpoint survives pruning, whatever its age; the pointer names it
    best = best_checkpoint(tmp_path / "run")
    assert best is not None and (best / "config.json").is_file()
    names = {p.name for p in list_checkpoints(tmp_path / "run")}
    assert trainer.best["checkpoint"] in names and bleus[int(trainer.best["checkpoint"][6:10]) - 1] == max(bleus)
    assert {"epoch-0005", "epoch-0006"} <= names  # keep_checkpoints=2, plus the best one
    assert len(names) <= 3
    assert best.name in (trainer.best["checkpoint"], "averaged")


def test_average_checkpoints_is_the_mean_and_translates(tok, tmp_path):
    config = TrainConfig(
        epochs=3, batch_size=64, warmup=30, lr_scale=1.0, progress=False, val_bleu_sentences=0, keep_checkpoints=0
    )
    reversal_trainer(tok, tmp_path / "run", config).fit()
    paths = list_checkpoints(tmp_path / "run")
    assert len(paths) == 3
    path, model = average_checkpoints(paths, tmp_path / "run")
    assert path.name == "averaged" and (tmp_path / "run" / "latest").read_text().strip() == "epoch-0003"
    loaded = [load_checkpoint(p, optimizer=False).model.parameters() for p in paths]
    averaged = load_checkpoint(path, optimizer=False)
    for name, p in averaged.model.parameters().items():
        mean = np.mean([m[name].value.astype(np.float64) for m in loaded], axis=0)
        np.testing.assert_allclose(p.value, mean, rtol=1e-6, atol=1e-7)
        assert np.array_equal(p.value, model.parameters()[name].value)
    out = Translator.from_checkpoint(path).translate("a b c")
    assert isinstance(out, str)
    # from the command line, and "best" can be pointed at it
    result = run_cli("average", "--model", str(tmp_path / "run"), "--last", "2", "--mark-best")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run" / "best").read_text().strip() == "averaged"


def test_time_budget_stops_on_time_with_a_checkpoint(tok, tmp_path):
    budget_minutes = 0.05  # 3 seconds
    config = TrainConfig(
        epochs=10_000,
        batch_size=8,
        warmup=10,
        progress=False,
        time_budget=budget_minutes,
        decay=True,
        val_bleu_sentences=20,
    )
    trainer = reversal_trainer(tok, tmp_path / "run", config)
    t0 = time.perf_counter()
    trainer.fit()
    took = time.perf_counter() - t0
    assert trainer.finished and 0.9 * budget_minutes * 60 <= trainer.elapsed <= budget_minutes * 60 + 1.5
    assert took < budget_minutes * 60 + 3
    ckpt = load_checkpoint(tmp_path / "run", optimizer=True)
    assert ckpt.trainer_state["finished"] and ckpt.model.step == trainer.model.step
    # the decay was fitted to the budget: the learning rate is near 0 at the end
    peak = trainer.model.learning_rate(config.warmup)
    assert trainer.model.learning_rate(trainer.model.step) < 0.25 * peak
    # resuming a finished run does nothing more
    again = Trainer.from_checkpoint(tmp_path / "run", trainer.train_data, trainer.valid_data)
    step = again.model.step
    again.fit()
    assert again.model.step == step
    # ... unless the budget is raised: it trains on until the new budget is spent
    more = Trainer.from_checkpoint(tmp_path / "run", trainer.train_data, trainer.valid_data, time_budget=0.08)
    more.fit()
    assert more.model.step > step and more.finished and more.elapsed >= 0.9 * 0.08 * 60


# ------------------------------------------------------------------------------------ command line


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("recipe")
    data = write_tatoeba_file(root / "pairs.txt", n=600)
    args = [*TINY_MODEL, "--max-tokens", "400", *QUICK, "--data", str(data), "--out", str(root / "run")]
    result = run_cli("train", *args, "--epochs", "2")
    assert result.returncode == 0, result.stderr
    return root, data, args, result


def test_train_reports_lengths_split_and_bleu(cli_run):
    root, _, _, result = cli_run
    assert "99.5% <=" in result.stderr and "split by source sentence" in result.stderr
    assert "val_bleu" in result.stderr
    cfg = json.loads((root / "run" / "epoch-0002" / "config.json").read_text())
    assert cfg["data"]["split"] == "by-source" and cfg["data"]["sampling"] == "first"  # the tiny preset's
    assert isinstance(cfg["data"]["max_length"], int) and cfg["data"]["split_seed"] == 0


def test_resume_with_the_same_command(cli_run):
    root, _, args, _ = cli_run
    result = run_cli("train", *args, "--epochs", "3", "--resume")
    assert result.returncode == 0, result.stderr
    assert (root / "run" / "latest").read_text().strip() == "epoch-0003"
    # an option that conflicts with the run is refused, by name
    result = run_cli("train", *args, "--epochs", "4", "--resume", "--label-smoothing", "0.3", "--d-model", "64")
    assert result.returncode == 1 and "--label-smoothing 0.3 (the run has 0.0)" in result.stderr
    assert "--d-model 64 (the run has 32)" in result.stderr and "Traceback" not in result.stderr


def test_resume_applies_every_setting_it_may_change(cli_run, tmp_path):
    """Each option that ``--resume`` accepts takes effect (none is accepted and ignored)."""
    import shutil

    from transformer_cpp.task import CHANGEABLE_ON_RESUME

    root, _, args, _ = cli_run
    out = args.index("--out") + 1
    first, second = tmp_path / "a", tmp_path / "b"
    for copy in (first, second):
        shutil.copytree(root / "run", copy)
    done = int((first / "latest").read_text().strip().split("-")[1])  # 2, or 3 after another test resumed

    given = ["--epochs", str(done + 2), "--keep-checkpoints", "1", "--time-budget", "30", "--no-adaptive-threads"]
    given += ["--patience", "5"]
    result = run_cli("train", *args[:out], str(first), *args[out + 1 :], *given, "--resume")
    assert result.returncode == 0, result.stderr
    newest = f"epoch-{done + 2:04d}"
    saved = json.loads((first / newest / "config.json").read_text())["train_config"]
    assert (saved["epochs"], saved["keep_checkpoints"], saved["time_budget"]) == (done + 2, 1, 30.0)
    assert saved["patience"] == 5
    assert (saved["threads"], saved["progress"], saved["adaptive_threads"]) == (1, False, False)
    kept = {p.name for p in list_checkpoints(first)}  # the newest one, and the best (never pruned)
    assert newest in kept and kept - {best_checkpoint(first).name, "averaged"} <= {newest}, kept

    result = run_cli(
        "train",
        *args[:out],
        str(second),
        *args[out + 1 :],
        "--epochs",
        str(done + 1),
        "--average-last",
        "3",
        "--resume",
    )
    assert result.returncode == 0, result.stderr
    names = [p.name for p in list_checkpoints(second) if p.name != "averaged"]
    averaged = json.loads((second / "averaged" / "config.json").read_text())
    assert averaged["data"]["averaged_from"] == names[-3:]
    saved = json.loads((second / f"epoch-{done + 1:04d}" / "config.json").read_text())["train_config"]
    assert saved["average_last"] == 3
    covered = {"epochs", "keep_checkpoints", "time_budget", "threads", "progress", "average_last", "patience"}
    assert set(CHANGEABLE_ON_RESUME) == covered  # a setting added there gets a check here


def test_evaluate_names_and_leaves_out_a_pair_it_cannot_translate(cli_run, tmp_path):
    root, _, _, _ = cli_run
    huge = " ".join(["the cat and the dog"] * 20_000)  # too long for the memory of any decoder here
    pairs = tmp_path / "pairs.txt"
    pairs.write_text(
        f"The cat and the dog.\tEl gato y el perro.\n{huge}.\tEl gato.\nThe tree and the car.\tEl árbol y el coche.\n",
        encoding="utf-8",
    )
    hyps = tmp_path / "hyps.txt"
    result = run_cli("evaluate", "--model", str(root / "run"), "--pairs", str(pairs), "--output", str(hyps))
    assert result.returncode == 0, result.stderr
    assert f"line 2 of {pairs} cannot be scored here, left out" in result.stderr
    assert "2 sentence pairs (1 left out: see above)" in result.stdout
    outputs = hyps.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(outputs) == 3 and outputs[1] == "" and outputs[0] and outputs[2]  # one line per pair
    # the scores are those of the other pairs alone
    alone = tmp_path / "alone.txt"
    alone.write_text("".join(line + "\n" for i, line in enumerate(pairs.read_text().splitlines()) if i != 1))
    again = run_cli("evaluate", "--model", str(root / "run"), "--pairs", str(alone))
    assert again.returncode == 0, again.stderr

    def scores(text):
        return [line for line in text.splitlines() if line.startswith(("BLEU", "chrF", "loss", "accuracy"))]

    assert scores(result.stdout) == scores(again.stdout)


def test_evaluate_on_a_pairs_file_equals_sacrebleu(cli_run, tmp_path):
    import sacrebleu

    root, _, _, _ = cli_run
    pairs = tmp_path / "new.txt"
    pairs.write_text(
        "The cat and the dog.\tEl gato y el perro.\tCC-BY\nThe tree and the car.\tEl árbol y el coche.\n"
        "The bird and the book.\tEl pájaro y el libro.\n",
        encoding="utf-8",
    )
    hyps = tmp_path / "hyps.txt"
    result = run_cli(
        "evaluate",
        "--model",
        str(root / "run"),
        "--pairs",
        str(pairs),
        "--output",
        str(hyps),
        "--beam-size",
        "2",
        "--batch-size",
        "2",
    )
    assert result.returncode == 0, result.stderr
    outputs = hyps.read_text(encoding="utf-8").splitlines()
    refs = ["El gato y el perro.", "El árbol y el coche.", "El pájaro y el libro."]
    assert len(outputs) == 3
    expected = sacrebleu.corpus_bleu(outputs, [refs])
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("BLEU"))
    assert float(line.split()[1]) == pytest.approx(expected.score, abs=0.006)
    assert "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp" in line


def test_validation_bleu_subset_is_spread_over_the_whole_split():
    """The file is sorted by length: the BLEU subset must reach the long end, not only the first pairs."""
    n = 10
    rows = [[1, 10 + i, 20 + i, 30 + i, 40 + i, 50 + i, 2] for i in range(n)]
    ids = np.array(rows, dtype=np.int64)
    lengths = np.full(n, 7, dtype=np.int64)
    encoded = tdata.EncodedPairs(
        src=ids,
        tgt=ids.copy(),
        src_lengths=lengths,
        tgt_lengths=lengths.copy(),
        indices=np.arange(n),
        removed=0,
        max_length=None,
    )
    seen = []

    class EchoModel:
        def greedy_decode(self, src, start_id, end_id, limit, compute_type="float32", max_lengths=None):
            seen.extend(int(v) - 10 for v in src[:, 1])
            return src[:, 1:]

    class WordTokenizer:
        start_id, end_id = 1, 2

        def decode(self, ids):
            return " ".join(f"w{int(v)}" for v in ids if int(v) > 2)

    assert bleu_of_encoded(EchoModel(), encoded, WordTokenizer(), limit=4) == pytest.approx(100.0)
    assert seen == [0, 3, 6, 9]
    seen.clear()
    bleu_of_encoded(EchoModel(), encoded, WordTokenizer())
    assert seen == list(range(n))
