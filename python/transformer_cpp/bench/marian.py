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

import os
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict

from .machine import log
from .marian_decoding import bench_marian_decoding
from .marian_model import (
    END_ID,
    FULL_MARIAN,
    QUICK_MARIAN,
    SUPPRESSED,
    MarianShapes,
    build_marian_directory,
    parse_marian_shapes,
)
from .marian_report import format_marian
from .marian_training import (
    bench_marian_training,
    measure_import,
    measure_training_memory,
)
from .peers import import_ctranslate2_or_reason, import_torch
from .report import emit, jsonable, open_results

__all__ = [
    "FULL_MARIAN",
    "QUICK_MARIAN",
    "MarianShapes",
    "bench_marian",
    "build_marian_directory",
    "parse_marian_shapes",
    "run_marian_bench",
]


def bench_marian(
    s: MarianShapes,
    threads: int,
    with_torch: bool,
    with_ct2: bool,
    seed: int = 0,
    decode: bool = True,
    memory: bool = True,
) -> Dict[str, Any]:
    """The three measurements of this module on one random model (built in a temporary
    directory, removed at the end); see the module's description. Without ``decode`` the
    decoding is left out, without ``memory`` the training steps' memory children."""
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
        if decode:
            out["decoding"] = bench_marian_decoding(paths["decoding"], s, threads, with_torch, with_ct2, seed)
        out["training"] = bench_marian_training(paths["model"], s, with_torch, seed)
        if memory:
            out["training"]["memory"] = measure_training_memory(paths["model"], s, threads, with_torch, seed)
        out["model"]["parameters"] = out["training"].pop("parameters")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for section in ("decoding", "training"):
        out["notes"] += (out.get(section) or {}).pop("notes", [])
    return out


def run_marian_bench(args: Any, threads: int) -> int:
    """``bench --marian``: run :func:`bench_marian`, print the report, write JSON like the bench."""
    shapes = parse_marian_shapes(getattr(args, "marian_shapes", None), QUICK_MARIAN if args.quick else FULL_MARIAN)
    torch, torch_reason = import_torch()
    if torch is None:
        raise ValueError(f"bench --marian builds its model with Transformers and PyTorch: {torch_reason}")
    try:
        import transformers
    except ImportError as exc:
        raise ValueError(f"bench --marian builds its model with Transformers, which is not installed ({exc})") from None
    ct2, ct2_reason = (
        (None, "disabled with --no-ctranslate2") if args.no_ctranslate2 else import_ctranslate2_or_reason()
    )
    results = open_results(args.quick, threads, torch, ct2)
    results["transformers_version"] = transformers.__version__
    if ct2 is None:
        results["notes"].append(f"CTranslate2 comparison skipped: {ct2_reason}")
    if args.no_torch:
        results["notes"].append(
            "PyTorch comparisons skipped: disabled with --no-torch (the model is still built with it)"
        )
    t_start = time.perf_counter()
    marian = bench_marian(
        shapes,
        threads,
        not args.no_torch,
        ct2 is not None,
        args.seed,
        decode=not args.skip_decode,
        memory=not args.skip_memory,
    )
    results["notes"] += marian.pop("notes")
    results["marian"] = marian
    results["elapsed_s"] = time.perf_counter() - t_start
    try:
        results["machine"]["load_average_end"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        pass
    results = jsonable(results)
    table = format_marian(results)
    emit(results, table, args.json)
    return 0
