"""``transformer-cpp bench``: the C++ core against PyTorch (and CTranslate2) in one run.

Everything runs in this process with one thread count for every library (default: all cores the
process may use), except the peak-memory measurement, which needs a fresh process per
implementation, the serving section's HTTP clients and the MPI section's ranks. One module per
concern:

1. **Machine GEMM peak** (:mod:`.gemm`): float32 ``2048 x 2048`` matrix products in NumPy (best
   of several), the practical ceiling for dense compute on this machine; and the **bfloat16 GEMM
   peak** measured the same way, the best of PyTorch's bfloat16 ``matmul`` (oneDNN) and our
   bf16 kernel (AMX tiles or AVX512_BF16): what bf16 training runs against.
2. **Training step** (:mod:`.training`) at the ``tutorial`` preset shapes (:mod:`.shapes`: batch
   64, sentences of 4-15 tokens with realistic padding, d_model 512, 4+4 layers, d_ff 512, 8
   heads, vocabularies 14,000/15,500, dropout 0.1, Adam): ``Transformer.train_step`` against the
   same architecture in ``torch.nn`` (:mod:`transformer_cpp.torch_reference`, driven by
   :class:`.peers.TorchTrainer`) with ``torch.optim.Adam``, started from the same weights and fed
   the same batches, alternating step by step. Non-padding target tokens per second, the ratio,
   achieved model GFLOP/s (see :func:`.shapes.forward_matmul_flops`) and the fraction of the GEMM
   peak. The low-precision peers alternate in the same loop: ours with ``precision="bf16"`` and
   PyTorch under ``torch.autocast("cpu", dtype=torch.bfloat16)``, both from the same weights
   (their fraction of the bf16 peak is reported).
3. **Greedy decoding** (:mod:`.decoding`) of random source sentences at batch 1 and 32:
   ``Transformer.greedy_decode`` (C++, key/value cache) against the PyTorch tutorial loop
   (:func:`transformer_cpp.torch_reference.tutorial_greedy_decode`: encode once, re-run the
   decoder on the growing prefix at every step, the loop of
   :func:`transformer_cpp.translate.greedy_reference`) and CTranslate2 on the same weights
   (converted by :func:`transformer_cpp.export.convert_to_ctranslate2`, the converter of
   ``transformer-cpp export``; the conversion is checked to give identical outputs first,
   :func:`.peers.check_ctranslate2_exact`). The low-precision peers run in the same rotation on
   the same batches: ours with ``compute_type="int8"`` and ``"bf16"``, and CTranslate2 with
   ``compute_type="int8"`` (its CPU recommendation; the same converted model, quantised when
   loaded).
4. **Peak memory** (:mod:`.memory`) of training steps, ours and PyTorch's, each in a child
   process (:mod:`.child`; peak RSS from ``VmHWM``), **thread scaling** of the training step (1
   thread against all threads, :func:`.training.bench_scaling`) and a **busy machine**
   (:mod:`.busy`: one core taken by a CPU hog; 1 thread, all threads fixed and all threads
   governed).
5. **Serving** (:mod:`.serving`): requests per second and p50/p99 latency of the HTTP server
   (:mod:`transformer_cpp.serve`) at 32 concurrent clients (in a child process) on a random model
   of the ``tiny`` preset, with request batching against ``--max-batch 1`` (needs the ``serve``
   extra, else skipped with a note; ``--serving-only`` runs just this section).
6. **MPI scaling** (:mod:`.mpi`, imported only when it runs): one process of N threads against N
   ranks of one thread (needs the ``mpi`` extra, else skipped with a note).

7. **MarianMT** (:mod:`.marian`, only with ``--marian``, which runs this section alone): a random
   model of Helsinki-NLP/opus-mt-en-es's shapes built with Transformers (no download), imported
   (``load_marian``, ``import_pretrained``: seconds and peak memory against the checkpoint's size),
   decoded with a fixed output length (beam 4 at batch 32, greedy at batch 1 and 32) by this
   package, CTranslate2 (int8, float32; converted by its ``TransformersConverter``) and
   Transformers' ``generate``, and fine-tuned (``train_step`` against ``MarianMTModel`` with
   ``torch.optim.Adam``, float32 and bf16, with peak memory); ``--marian-shapes`` sets its sizes.

Thread control (:mod:`.machine`): ``--threads N`` sets every library to ``N`` threads
(:func:`.machine.set_all_threads`). The table is made in :mod:`.report`; the settings
(:class:`BenchSettings`) and :func:`run_bench` in :mod:`.run`, the command line in
:mod:`transformer_cpp.cli.bench`.

Use it as ``transformer-cpp bench`` or ``python -m transformer_cpp.bench`` (``--quick`` for tiny
shapes, ``--json [PATH]`` for machine-readable results). Nothing here asserts timings; the table
gives each figure of this package beside PyTorch's and CTranslate2's and their ratio. Importing this package
imports neither PyTorch nor CTranslate2: they are loaded when a section needs them.
"""

from __future__ import annotations

from .busy import bench_busy
from .run import BENCH_DESCRIPTION, BenchSettings, run_bench
from .decoding import bench_decoding
from .gemm import bf16_gemm_peak, gemm_peak
from .machine import available_cores, set_all_threads
from .memory import measure_memory
from .peers import CTranslate2Greedy, TorchTrainer, check_ctranslate2_exact, convert_to_ctranslate2, trim_outputs
from .report import JSON_SCHEMA_VERSION, format_report
from .serving import bench_serving
from .shapes import (
    END_ID,
    QUICK_SHAPES,
    START_ID,
    TUTORIAL_SHAPES,
    Batch,
    BenchShapes,
    forward_matmul_flops,
    make_batches,
    pad,
    random_sentences,
    useful_forward_flops,
)
from .training import bench_scaling, bench_training, build_ours

__all__ = [
    "END_ID",
    "JSON_SCHEMA_VERSION",
    "QUICK_SHAPES",
    "START_ID",
    "TUTORIAL_SHAPES",
    "BENCH_DESCRIPTION",
    "Batch",
    "BenchSettings",
    "BenchShapes",
    "CTranslate2Greedy",
    "TorchTrainer",
    "available_cores",
    "bench_busy",
    "bench_decoding",
    "bench_scaling",
    "bench_serving",
    "bench_training",
    "bf16_gemm_peak",
    "build_ours",
    "check_ctranslate2_exact",
    "convert_to_ctranslate2",
    "forward_matmul_flops",
    "format_report",
    "gemm_peak",
    "make_batches",
    "measure_memory",
    "pad",
    "random_sentences",
    "run_bench",
    "set_all_threads",
    "trim_outputs",
    "useful_forward_flops",
]
