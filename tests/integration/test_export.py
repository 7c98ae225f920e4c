"""``transformer-cpp export``: the CTranslate2 export gives our greedy tokens, the PyTorch export's
module (loaded from the written files, in a process where transformer_cpp cannot be imported)
gives our logits and tokens, and bad arguments are one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import transformer_cpp as tc
from transformer_cpp import bench, export
from transformer_cpp.checkpoint import save_checkpoint
from transformer_cpp.training import output_limit
from transformer_cpp.translate import Translator

from helpers.cli import run_main
from helpers.toy_task import SYMBOLS, reversal_pairs, two_layer_model
from helpers.toy_task import one_thread, tok  # noqa: F401  (shared fixtures)

# Largest |logit difference| allowed. The logits are of size ~10; the same sums taken in another
# order differ by ~1e-5 in float32 and ~1e-14 in float64 (measured: 9e-6 and 8e-15).
LOGIT_TOLERANCE = {"float32": 1e-4, "float64": 1e-12}

VARIANTS = {
    "paper": dict(),
    "tied-concatenated": dict(share_embeddings=True, layout="concatenated"),
    "pre-norm-float64": dict(pre_norm=True, dtype="float64"),
    "pre-norm": dict(pre_norm=True),
}


def _train(tok, steps: int = 150, **arch) -> tc.Transformer:
    """A two-layer model trained for a few steps on the reversal task: it has learnt something,
    not everything, so its outputs have many lengths and some run to the output limit."""
    src, tgt = reversal_pairs(512, seed=0)
    enc = tc.encode_pairs(src, tgt, tok, tok, 8)
    return two_layer_model(tok.vocab_size, tok.vocab_size, enc, 512, steps, **arch)


def _sentences(n: int = 60) -> list:
    """Held-out sentences of 1 to 8 symbols (longer than any training pair, too)."""
    rng = np.random.default_rng(99)
    return [" ".join(rng.choice(list(SYMBOLS), size=int(rng.integers(1, 9)))) for _ in range(n)]


@pytest.fixture(scope="module")
def runs(tok, tmp_path_factory):
    """One run directory per variant: ``{name: (run directory, model)}``."""
    root = tmp_path_factory.mktemp("export-runs")
    out = {}
    for name, arch in VARIANTS.items():
        model = _train(tok, **arch)
        run = root / name
        save_checkpoint(run, model, tok, tok, data={"src_lang": "en", "tgt_lang": "en"}, optimizer=False)
        out[name] = (run, model)
    return out


def _ours(run: Path, sentences: list, max_length=None) -> list:
    """Our greedy output ids (end token included) through the Translator, as translate prints them."""
    translator = Translator.from_checkpoint(run, max_output_tokens=max_length)
    return [t.target_ids for t in translator.translate_batch(sentences, return_attention=True)]


def _check_varied(outputs: list, cut: bool = False) -> None:
    """The comparison means something: outputs of several lengths, some finished, and with ``cut``
    some stopped by the output limit."""
    assert len({len(o) for o in outputs}) >= 3, outputs
    assert any(o and o[-1] == 2 for o in outputs), outputs
    assert not cut or any(o and o[-1] != 2 for o in outputs), outputs


# ------------------------------------------------------------------------------------ CTranslate2


@pytest.mark.parametrize("variant", ["paper", "tied-concatenated", "pre-norm"])
def test_ctranslate2_export_gives_our_greedy_tokens(runs, tok, tmp_path, variant):
    run, _ = runs[variant]
    out = export.export_ctranslate2(run, tmp_path / "ct2")
    assert out == tmp_path / "ct2"
    info = json.loads((out / "transformer_cpp.json").read_text())
    assert info["to"] == "ctranslate2" and info["exact"] and info["quantization"] == "float32"
    assert info["exported_from"] == str(run / "epoch-0000")

    import ctranslate2
    from tokenizers import Tokenizer

    source_tokenizer = Tokenizer.from_file(str(out / "source_tokenizer.json"))
    translator = ctranslate2.Translator(str(out), device="cpu", intra_threads=1)
    sentences = _sentences()
    pieces = [source_tokenizer.encode(" " + s, add_special_tokens=False).tokens for s in sentences]
    for cap in (None, 4):  # our output limit, then a limit that cuts the longer outputs
        ours = _ours(run, sentences, max_length=cap)
        _check_varied(ours, cut=cap is not None)
        limits = [output_limit(len(p) + 2) if cap is None else cap for p in pieces]  # + start and end
        results = translator.translate_batch(
            pieces, max_decoding_length=max(limits), return_end_token=True, **info["translate_batch_options"]
        )
        theirs = [[tok.token_to_id(t) for t in r.hypotheses[0]][:n] for r, n in zip(results, limits)]
        assert theirs == ours, cap
        texts = Translator.from_checkpoint(run, max_output_tokens=cap).translate_batch(sentences)
        assert [tok.decode(t) for t in theirs] == texts


def test_ctranslate2_quantized_export(runs, tok, tmp_path):
    run, model = runs["paper"]
    full = export.export_ctranslate2(run, tmp_path / "float32")
    small = export.export_ctranslate2(run, tmp_path / "int8", quantization="int8")
    saved = (full / "model.bin").stat().st_size - (small / "model.bin").stat().st_size
    assert saved > 0.5 * 4 * model.num_parameters()  # most weights went from 4 bytes to 1
    info = json.loads((small / "transformer_cpp.json").read_text())
    assert info["quantization"] == "int8" and info["exact"] is False
    import ctranslate2
    from tokenizers import Tokenizer

    pieces = Tokenizer.from_file(str(small / "source_tokenizer.json")).encode(" a b c", add_special_tokens=False).tokens
    result = ctranslate2.Translator(str(small), device="cpu", intra_threads=1).translate_batch(
        [pieces], max_decoding_length=8, **info["translate_batch_options"]
    )
    assert result[0].hypotheses[0] and all(tok.token_to_id(t) is not None for t in result[0].hypotheses[0])


def test_bench_uses_the_export_converter():
    assert bench.convert_to_ctranslate2 is export.convert_to_ctranslate2


# ------------------------------------------------------------------------------------ PyTorch

# Runs in a fresh interpreter in which importing transformer_cpp fails: the export must stand alone.
_TORCH_CHECK = textwrap.dedent("""
    import importlib.util, json, sys
    import numpy as np
    sys.modules["transformer_cpp"] = None  # any import of it now raises ImportError
    out, work = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("exported", out + "/transformer_torch.py")
    tt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tt)
    import torch
    torch.set_num_threads(1)
    model = tt.load(out)
    src_tok, tgt_tok = tt.load_tokenizers(out)
    data = np.load(work + "/inputs.npz")
    with torch.no_grad():
        logits = model(torch.from_numpy(data["src"]), torch.from_numpy(data["tgt_in"])).numpy()
    greedy = tt.greedy_decode(model, torch.from_numpy(data["src"]), 1, 2, int(data["max_length"])).numpy()
    sentences = json.load(open(work + "/sentences.json"))
    texts = tt.translate(model, src_tok, tgt_tok, sentences)
    ids = [tt.encode(src_tok, s, 1, 2) for s in sentences]
    np.savez(work + "/outputs.npz", logits=logits, greedy=greedy)
    json.dump({"texts": texts, "ids": ids, "dtype": str(logits.dtype),
               "names": sorted(model.state_dict())}, open(work + "/outputs.json", "w"))
""")


@pytest.mark.torch
@pytest.mark.parametrize("variant", ["paper", "tied-concatenated", "pre-norm-float64"])
def test_torch_export_reproduces_our_logits_and_tokens(runs, tok, tmp_path, variant):
    run, model = runs[variant]
    out = export.export_torch(run, tmp_path / "torch")
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.safetensors",
        "source_tokenizer.json",
        "target_tokenizer.json",
        "transformer_torch.py",
    ]
    sentences = _sentences()
    src = tc.encode_pairs(sentences, sentences, tok, tok, None).src  # (B, S), 0-padded
    tgt_in = tc.encode_pairs(sentences, [" ".join(s.split()[::-1]) for s in sentences], tok, tok, None).tgt[:, :-1]
    tgt_in = np.ascontiguousarray(tgt_in)
    max_length = 12
    work = tmp_path / "work"
    work.mkdir()
    np.savez(work / "inputs.npz", src=src, tgt_in=tgt_in, max_length=max_length)
    (work / "sentences.json").write_text(json.dumps(sentences))
    proc = subprocess.run(
        [sys.executable, "-c", _TORCH_CHECK, str(out), str(work)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stderr
    got = np.load(work / "outputs.npz")
    facts = json.loads((work / "outputs.json").read_text())

    dtype = model.config["dtype"]
    assert facts["dtype"] == dtype
    assert facts["names"] == sorted(model.parameters())  # the state dict is ours, name for name
    ours_logits = model.forward(src, tgt_in)
    assert np.abs(ours_logits).max() > 3  # a trained model, not all-zero logits
    worst = float(np.abs(got["logits"].astype(np.float64) - ours_logits).max())
    assert worst <= LOGIT_TOLERANCE[dtype], f"logits differ by up to {worst:.3g}"
    ours_greedy = model.greedy_decode(src, tok.start_id, tok.end_id, max_length)
    np.testing.assert_array_equal(got["greedy"], ours_greedy)
    _check_varied([[int(v) for v in row if v] for row in ours_greedy])
    assert facts["ids"] == [tok.encode(s) for s in sentences]
    assert facts["texts"] == Translator.from_checkpoint(run).translate_batch(sentences)


def test_torch_export_needs_no_torch(runs, tmp_path):
    """Writing the PyTorch export needs neither torch nor ctranslate2 (blocked here)."""
    run, _ = runs["paper"]
    result = run_main(
        "export", "--model", str(run), "--to", "torch", str(tmp_path / "out"), blocked=("torch", "ctranslate2")
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "model.safetensors").is_file()


# ------------------------------------------------------------------------------------ errors


def _one_line_error(result: subprocess.CompletedProcess, status: int, *fragments: str) -> None:
    assert result.returncode == status, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_command_line_export(runs, tmp_path):
    run, _ = runs["paper"]
    result = run_main(
        "export", "--model", str(run), "--to", "ctranslate2", str(tmp_path / "ct2"), "--quantization", "int8"
    )
    assert result.returncode == 0, result.stderr
    assert f"exported to ctranslate2: {tmp_path / 'ct2'}" in result.stdout
    assert json.loads((tmp_path / "ct2" / "transformer_cpp.json").read_text())["quantization"] == "int8"
    (tmp_path / "empty").mkdir()  # an existing empty directory is fine
    result = run_main("export", "--model", str(run), "--to", "torch", str(tmp_path / "empty"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "empty" / "transformer_torch.py").is_file()


def test_bad_arguments_are_one_line_errors(runs, tmp_path):
    run, _ = runs["paper"]
    out = str(tmp_path / "out")
    # the command line itself (status 2)
    _one_line_error(run_main("export", "--model", str(run), out), 2, "--to")
    _one_line_error(run_main("export", "--model", str(run), "--to", "onnx", out), 2, "--to", "invalid choice", "onnx")
    _one_line_error(run_main("export", "--to", "torch", out), 2, "--model")
    _one_line_error(run_main("export", "--model", str(run), "--to", "torch"), 2, "OUT")
    _one_line_error(
        run_main("export", "--model", str(run), "--to", "ctranslate2", out, "--quantization", "int3"),
        2,
        "--quantization",
        "int3",
        "int8",
    )
    # what only the command can see (status 1)
    _one_line_error(
        run_main("export", "--model", str(run), "--to", "torch", out, "--quantization", "int8"),
        1,
        "--quantization is for --to ctranslate2",
    )
    _one_line_error(
        run_main("export", "--model", str(tmp_path / "nowhere"), "--to", "torch", out),
        1,
        "no such checkpoint directory",
    )
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    for to in ("torch", "ctranslate2"):
        _one_line_error(
            run_main("export", "--model", str(run), "--to", to, str(taken)),
            1,
            str(taken),
            "already exists and is not empty",
        )
    assert [p.name for p in taken.iterdir()] == ["keep.txt"]
    _one_line_error(
        run_main("export", "--model", str(run), "--to", "torch", str(tmp_path / "no" / "such" / "dir")),
        1,
        "no such directory",
    )
    _one_line_error(
        run_main("export", "--model", str(run), "--to", "ctranslate2", out, blocked=("ctranslate2",)),
        1,
        "CTranslate2 is not installed",
        "pip install 'transformer-cpp[ctranslate2]'",
    )
    # nothing was left behind by the failures: no output, no temporary directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_python_api_checks_first(runs, tmp_path):
    run, _ = runs["paper"]
    with pytest.raises(ValueError, match="unknown quantization 'int3'.*int8"):
        export.export_ctranslate2(run, tmp_path / "a", quantization="int3")
    with pytest.raises(tc.CheckpointError, match="no such checkpoint directory"):
        export.export_torch(tmp_path / "nowhere", tmp_path / "b")
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="not a directory"):
        export.export_torch(run, tmp_path / "file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
