"""``transformer-cpp bench --marian``: this package against CTranslate2 and PyTorch at the shapes of
a published OPUS-MT model (Helsinki-NLP/opus-mt-en-es).

The model is built here with Transformers' ``MarianConfig`` / ``MarianMTModel`` and random
weights (``torch.manual_seed(seed)``; nothing is downloaded): d_model 512, 6+6 layers, 8 heads,
d_ff 2048, one shared vocabulary of 65,001 ids, swish, ``scale_embedding``, the output tied to
the embedding, ``final_logits_bias``, Marian's special ids (padding = decoder start = 65,000, end
0, unknown 1). It is saved with ``save_pretrained`` (``model.safetensors``) beside a minimal
Marian tokenizer (a small SentencePiece model, ``vocab.json`` naming all 65,001 ids,
``tokenizer_config.json``), so that the directory reads like a published one: CTranslate2's own
``TransformersConverter`` converts it, :func:`~transformer_cpp.pretrained.import_pretrained`
imports it. The engines are fed token ids (CTranslate2 their names): no text is tokenized.

Three measurements (:func:`bench_marian`), every library at the bench's thread count:

1. **Import** (:mod:`.marian_training`, child processes): the seconds and the peak memory of
   ``load_marian`` and of ``import_pretrained`` (read, tokenizers, hashes, checkpoint written),
   each in a fresh process, against the size of ``model.safetensors``.
2. **Decoding** (:mod:`.marian_decoding`): beam 4 at batch 32, greedy at batch 1 and at batch 32, of random source
   sentences. This package (``Transformer.beam_search`` / ``greedy_decode``, the searches the
   ``Translator`` runs) in float32, int8 and bf16 where the CPU has them; CTranslate2
   (``translate_batch``) int8 and float32 on the converted model; Transformers' ``generate`` in
   PyTorch float32 and, where the CPU has AVX512_BF16, bfloat16. Every output has exactly
   ``steps`` tokens: the decoding copy of the model holds -10,000 in ``final_logits_bias`` at the
   end id and at padding, so no engine can end a sentence early (checked: the report gives each
   engine's token count). Engines take turns batch by batch after one untimed batch each.
3. **Fine-tuning step** (:mod:`.marian_training`): the saved model read by ``load_marian`` and trained by ``train_step``
   (float32, and bf16 where the CPU has AVX512_BF16) against ``MarianMTModel`` trained with
   ``torch.optim.Adam`` (float32, and bf16 autocast), both with label-smoothed (0.1)
   cross-entropy over the non-padding targets and the same fixed learning rate, alternating step
   by step on the same random batches; target tokens per second; peak memory of each in a child
   process (:func:`transformer_cpp.bench.memory.peak_rss`).

:class:`MarianShapes` holds every size (``--marian-shapes key=value,...`` changes any; ``--quick``
starts from tiny ones). The report is :func:`transformer_cpp.bench.marian_report.format_marian`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .machine import log, machine_facts, set_all_threads
from .report import JSON_SCHEMA_VERSION, jsonable

__all__ = [
    "FULL_MARIAN",
    "QUICK_MARIAN",
    "MarianShapes",
    "bench_marian",
    "build_marian_directory",
    "main",
    "parse_marian_shapes",
    "run_marian_bench",
]

#: What the decoding copy's ``final_logits_bias`` holds at the end id and at padding.
SUPPRESSED = -1.0e4
END_ID, UNK_ID = 0, 1  # Marian's; padding (= decoder start) is the last id


@dataclass(frozen=True)
class MarianShapes:
    """Every size of the Marian section."""

    vocab: int = 65_001  # one vocabulary shared by source, target and output
    d_model: int = 512
    layers: int = 6  # encoder layers = decoder layers
    heads: int = 8
    d_ff: int = 2048
    max_positions: int = 512
    steps: int = 32  # tokens of every decoded output
    src_min: int = 8  # shortest source sentence, end token included
    src_max: int = 30
    beam: int = 4
    batch: int = 32  # sentences per batch of the batched decodes and of a training step
    beam_sentences: int = 64  # beam search at batch `batch` (0: not run)
    greedy1_sentences: int = 16  # greedy at batch 1 (0: not run)
    greedy_batch_sentences: int = 64  # greedy at batch `batch` (0: not run)
    train_min: int = 4  # shortest training sentence (source; targets 0.8-1.25x its length)
    train_max: int = 40
    warmup: int = 1  # untimed training steps per engine
    train_steps: int = 3  # timed training steps per engine
    memory_steps: int = 2  # training steps in each memory child

    @property
    def pad(self) -> int:
        return self.vocab - 1

    def decode_runs(self) -> List[Tuple[str, int, int, int]]:
        """``(name, beam, batch, sentences)`` of each decoding measurement that runs."""
        runs = [
            (f"beam{self.beam}_batch{self.batch}", self.beam, self.batch, self.beam_sentences),
            ("greedy_batch1", 1, 1, self.greedy1_sentences),
            (f"greedy_batch{self.batch}", 1, self.batch, self.greedy_batch_sentences),
        ]
        return [r for r in runs if r[3] > 0]


FULL_MARIAN = MarianShapes()
QUICK_MARIAN = MarianShapes(
    vocab=200,
    d_model=32,
    layers=1,
    heads=4,
    d_ff=64,
    max_positions=64,
    steps=6,
    src_min=3,
    src_max=9,
    batch=4,
    beam_sentences=8,
    greedy1_sentences=3,
    greedy_batch_sentences=8,
    train_min=3,
    train_max=8,
    warmup=1,
    train_steps=2,
    memory_steps=1,
)

_AT_LEAST = {"vocab": 8, "src_min": 2, "train_min": 2, "d_model": 2}
_MAY_BE_ZERO = ("beam_sentences", "greedy1_sentences", "greedy_batch_sentences", "warmup")


def parse_marian_shapes(text: Optional[str], base: MarianShapes = FULL_MARIAN) -> MarianShapes:
    """``base`` with the ``key=value,...`` of ``text`` (the ``--marian-shapes`` option) applied;
    ``ValueError`` naming a key that is unknown or a value that is not allowed."""
    if not text:
        return base
    names = [f.name for f in fields(MarianShapes)]
    changes: Dict[str, int] = {}
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in names:
            raise ValueError(f"--marian-shapes: {part.strip()!r} is not key=value with a key among {', '.join(names)}")
        low = 0 if key in _MAY_BE_ZERO else _AT_LEAST.get(key, 1)
        try:
            number = int(value)
        except ValueError:
            number = low - 1
        if number < low:
            raise ValueError(f"--marian-shapes: {key} must be an integer >= {low}, got {value.strip()!r}")
        changes[key] = number
    s = replace(base, **changes)
    if s.d_model % s.heads or s.d_model % 2:
        raise ValueError(f"--marian-shapes: d_model ({s.d_model}) must be even and divisible by heads ({s.heads})")
    if s.src_max < s.src_min or s.train_max < s.train_min:
        raise ValueError("--marian-shapes: src_max and train_max must be >= src_min and train_min")
    longest = max(s.src_max, (s.train_max * 5 + 3) // 4 + 1, s.steps + 1)
    if longest > s.max_positions:
        raise ValueError(f"--marian-shapes: max_positions ({s.max_positions}) must be >= {longest}, the longest sequence")
    return s


def _marian_config(s: MarianShapes) -> Any:
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=s.vocab,
        decoder_vocab_size=s.vocab,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        d_model=s.d_model,
        encoder_layers=s.layers,
        decoder_layers=s.layers,
        encoder_attention_heads=s.heads,
        decoder_attention_heads=s.heads,
        encoder_ffn_dim=s.d_ff,
        decoder_ffn_dim=s.d_ff,
        max_position_embeddings=s.max_positions,
        activation_function="swish",
        scale_embedding=True,
        dropout=0.1,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=s.pad,
        decoder_start_token_id=s.pad,
        eos_token_id=END_ID,
        forced_eos_token_id=None,
    )


def _write_tokenizer(directory: Path, s: MarianShapes, seed: int) -> None:
    """A minimal Marian tokenizer: one small SentencePiece model (source.spm = target.spm, learnt
    from random letters), ``vocab.json`` naming every id (``</s>`` 0, ``<unk>`` 1, ``<pad>`` last)
    and ``tokenizer_config.json`` (languages en -> es)."""
    import sentencepiece as spm

    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnop")
    lines = [" ".join("".join(rng.choice(letters, size=int(rng.integers(2, 7)))) for _ in range(10)) for _ in range(300)]
    with tempfile.TemporaryDirectory(prefix="tcpp-spm-") as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(lines), encoding="utf-8")
        spm.SentencePieceTrainer.train(
            input=str(corpus),
            model_prefix=str(Path(tmp) / "sp"),
            vocab_size=40,
            model_type="unigram",
            hard_vocab_limit=False,
            minloglevel=2,
            unk_id=UNK_ID,
            eos_id=END_ID,
            bos_id=-1,
            pad_id=-1,
        )
        model = (Path(tmp) / "sp.model").read_bytes()
    for side in ("source", "target"):
        (directory / f"{side}.spm").write_bytes(model)
    vocab = {"</s>": END_ID, "<unk>": UNK_ID, **{f"\u2581w{i}": i for i in range(2, s.pad)}, "<pad>": s.pad}
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    config = {
        "tokenizer_class": "MarianTokenizer",
        "source_lang": "en",
        "target_lang": "es",
        "separate_vocabs": False,
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": s.max_positions,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def build_marian_directory(s: MarianShapes, root: Path, seed: int = 0) -> Dict[str, Path]:
    """The random MarianMT model of ``s`` saved twice under ``root``: ``"model"`` as built (what
    is imported and fine-tuned) and ``"decoding"`` with the end id and padding suppressed in
    ``final_logits_bias`` (every decoded output then has exactly ``s.steps`` tokens); both with
    the minimal tokenizer of :func:`_write_tokenizer`."""
    import torch
    from transformers import MarianMTModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.manual_seed(seed)
    model = MarianMTModel(_marian_config(s)).eval()
    paths = {"model": root / "marian", "decoding": root / "marian-fixed-length"}
    model.save_pretrained(paths["model"])
    _write_tokenizer(paths["model"], s, seed)
    with torch.no_grad():
        model.final_logits_bias[0, END_ID] = SUPPRESSED
        model.final_logits_bias[0, s.pad] = SUPPRESSED
    model.save_pretrained(paths["decoding"])
    for name in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json"):
        shutil.copyfile(paths["model"] / name, paths["decoding"] / name)
    return paths


def random_sources(rng: np.random.Generator, s: MarianShapes, count: int) -> List[List[int]]:
    """``count`` source sentences of ``s.src_min``-``s.src_max`` ids, the end id last."""
    out = []
    for _ in range(count):
        n = int(rng.integers(s.src_min, s.src_max + 1))
        out.append([int(x) for x in rng.integers(UNK_ID + 1, s.pad, size=n - 1)] + [END_ID])
    return out


def pad_rows(rows: List[List[int]], pad: int) -> np.ndarray:
    """Rows as one int64 matrix, padded at the end with ``pad``."""
    out = np.full((len(rows), max(len(r) for r in rows)), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def bench_marian(
    s: MarianShapes, threads: int, with_torch: bool, with_ct2: bool, seed: int = 0, quick: bool = False
) -> Dict[str, Any]:
    """The three measurements of this module on one random model (built in a temporary
    directory, removed at the end); see the module's description."""
    from .marian_decoding import bench_marian_decoding
    from .marian_training import bench_marian_training, measure_import, measure_training_memory

    out: Dict[str, Any] = {"shapes": asdict(s), "notes": []}
    root = Path(tempfile.mkdtemp(prefix="tcpp-marian-"))
    try:
        log(f"building a random MarianMT model (d_model {s.d_model}, {s.layers}+{s.layers} layers, vocab {s.vocab:,})")
        t0 = time.perf_counter()
        paths = build_marian_directory(s, root, seed)
        size = (paths["model"] / "model.safetensors").stat().st_size
        out["model"] = {
            "checkpoint_mb": size / 2**20,
            "built_s": time.perf_counter() - t0,
            "fixed_length": f"final_logits_bias {SUPPRESSED:g} at the end id {END_ID} and at padding {s.pad} "
            "in the decoding copy: every output has exactly `steps` tokens",
        }
        out["import"] = measure_import(paths["model"], s, threads, seed, size)
        out["decoding"] = bench_marian_decoding(paths["decoding"], s, threads, with_torch, with_ct2, seed)
        out["training"] = bench_marian_training(paths["model"], s, with_torch, seed)
        out["training"]["memory"] = measure_training_memory(paths["model"], s, threads, with_torch, seed)
        out["model"]["parameters"] = out["training"].pop("parameters")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for section in ("decoding", "training"):
        out["notes"] += out[section].pop("notes", [])
    return out


def run_marian_bench(args: Any, threads: int) -> int:
    """``bench --marian``: run :func:`bench_marian`, print the report, write JSON like the bench."""
    from .marian_report import format_marian
    from .peers import import_ctranslate2_or_reason, import_torch

    shapes = parse_marian_shapes(getattr(args, "marian_shapes", None), QUICK_MARIAN if args.quick else FULL_MARIAN)
    torch, torch_reason = import_torch()
    if torch is None:
        raise ValueError(f"bench --marian builds its model with Transformers and PyTorch: {torch_reason}")
    try:
        import transformers
    except ImportError as exc:
        raise ValueError(f"bench --marian builds its model with Transformers, which is not installed ({exc})") from None
    ct2, ct2_reason = (None, "disabled with --no-ctranslate2") if args.no_ctranslate2 else import_ctranslate2_or_reason()
    how = set_all_threads(threads, torch)
    results: Dict[str, Any] = {
        "schema": JSON_SCHEMA_VERSION,
        "quick": bool(args.quick),
        "threads": threads,
        "threads_set_by": how,
        "machine": machine_facts(),
        "notes": [],
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "ctranslate2_version": getattr(ct2, "__version__", None),
    }
    if ct2 is None:
        results["notes"].append(f"CTranslate2 comparison skipped: {ct2_reason}")
    if args.no_torch:
        results["notes"].append("PyTorch comparisons skipped: disabled with --no-torch (the model is still built with it)")
    t_start = time.perf_counter()
    marian = bench_marian(shapes, threads, not args.no_torch, ct2 is not None, args.seed, bool(args.quick))
    results["notes"] += marian.pop("notes")
    results["marian"] = marian
    results["elapsed_s"] = time.perf_counter() - t_start
    try:
        results["machine"]["load_average_end"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        pass
    results = jsonable(results)
    table = format_marian(results)
    if args.json == "-":
        print(table, file=sys.stderr)
        print(json.dumps(results, indent=2))
    else:
        print(table)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(results, f, indent=2)
                f.write("\n")
            print(f"results written to {args.json}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m transformer_cpp.bench.marian --child KIND --model DIR ...``: one memory
    measurement in a fresh process, printed as a JSON line (the parent process runs these)."""
    from .marian_training import MARIAN_CHILDREN, run_marian_child

    p = argparse.ArgumentParser(prog="python -m transformer_cpp.bench.marian")
    p.add_argument("--child", choices=MARIAN_CHILDREN, required=True)
    p.add_argument("--model", required=True, help="the saved MarianMT directory")
    p.add_argument("--shapes", required=True, help="MarianShapes as JSON")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    s = MarianShapes(**json.loads(args.shapes))
    print(json.dumps(jsonable(run_marian_child(args.child, Path(args.model), s, args.threads, args.seed))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
