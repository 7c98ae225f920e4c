"""The benchmark's settings (:class:`BenchSettings`, each with its ``transformer-cpp bench``
option) and :func:`run_bench`, which runs the sections in order and prints the report; the
command line is :mod:`transformer_cpp.cli.bench`."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, replace
from typing import Any, Dict, Optional, Tuple

from .._checks import Limit
from .._runtime import build_info
from ..config import check_settings, choice_setting, flag_setting, setting
from ..training import MAX_SEED, MAX_THREADS
from .attention import run_attention_bench
from .busy import bench_busy
from .decoding import bench_decoding
from .gemm import bf16_gemm_peak, gemm_peak
from .machine import ISA_LEVELS, available_cores, isa_environment, log
from .marian import run_marian_bench
from .memory import measure_memory
from .mpi import bench_mpi_scaling
from .peers import import_ctranslate2_or_reason, import_torch
from .report import emit, format_report, jsonable, open_results
from .serving import bench_serving
from .shapes import QUICK_SHAPES, TUTORIAL_SHAPES, BenchShapes
from .training import bench_scaling, bench_training

__all__ = ["BENCH_DESCRIPTION", "BenchSettings", "run_bench"]

#: What ``transformer-cpp bench --help`` says the benchmark does.
BENCH_DESCRIPTION = (
    "Benchmark the C++ core against PyTorch (and CTranslate2) in one run: machine GEMM peak, "
    "training step, greedy decoding, peak memory and thread scaling, and the HTTP server's throughput "
    "with and without request batching; each figure beside PyTorch's and CTranslate2's, with their ratio."
)
_COUNT = 2**63 - 1


def _skip(what: str) -> Any:
    """A flag that leaves ``what`` out of the run."""
    return flag_setting(f"skip {what}")


@dataclass
class BenchSettings:
    """What one benchmark run measures and how (:func:`run_bench`'s settings)."""

    threads: Optional[int] = setting(
        None,
        limit=Limit(True, 1, MAX_THREADS),
        help="threads for every library (default: all cores available to the process)",
    )
    quick: bool = flag_setting("tiny shapes and few steps: a smoke test for CI")
    isa: Optional[str] = choice_setting(
        None,
        ISA_LEVELS,
        "hold this package, PyTorch (ATen, oneDNN, MKL) and CTranslate2 to one instruction-set level "
        "(the bench restarts itself with the variables that do it), e.g. avx2 to measure what a CPU "
        "without AVX-512 would see; a level above this CPU's is refused",
    )
    json: Optional[str] = setting(
        None,
        help="machine-readable results: to stdout (the table then goes to stderr) or to PATH",
        const="-",
        metavar="PATH",
    )
    steps: Optional[int] = setting(None, limit=Limit(True, 1, _COUNT), help="timed training steps per implementation")
    warmup: Optional[int] = setting(
        None, limit=Limit(True, 0, _COUNT), help="untimed training steps per implementation"
    )
    sentences: Optional[int] = setting(
        None, limit=Limit(True, 1, _COUNT), help="sentences per greedy-decoding batch size"
    )
    skip_memory: bool = _skip("the peak-memory child processes")
    skip_decode: bool = _skip("greedy decoding")
    skip_scaling: bool = _skip("the thread-scaling measurement")
    skip_busy: bool = _skip("the busy-machine measurement (a CPU hog on one core: 1 thread against all)")
    skip_serving: bool = _skip("the HTTP serving measurement")
    skip_mpi: bool = _skip("the MPI scaling section (1 process of N threads against N ranks; bench/mpi.py)")
    serving_only: bool = flag_setting("run only the HTTP serving measurement (batching against one at a time)")
    attention: bool = flag_setting(
        "only the attention kinds side by side: forward+backward time and peak memory against the "
        "sequence length (512 ... 16,384; causal, d_head 64, float32), per-token generation time against "
        "position (KV-cached softmax, linear attention's RNN form), activation memory against depth with and "
        "without reversible layers, and Transformer-XL evaluation with state reuse against recomputing; each "
        "measurement in its own process",
    )
    marian: bool = flag_setting(
        "only the MarianMT section: a random model of opus-mt-en-es's shapes (built with Transformers, "
        "no download) imported, decoded (beam 4 batch 32, greedy batch 1 and 32, every output the same length) "
        "and fine-tuned, against CTranslate2 (int8, float32) and PyTorch (generate, MarianMTModel training)",
    )
    marian_shapes: Optional[str] = setting(
        None,
        help="sizes of the MarianMT section as key=value,... (e.g. d_model=32,vocab=200,layers=1,heads=4,"
        "d_ff=64; see transformer_cpp.bench.marian.MarianShapes for every key); with --marian, --skip-decode "
        "and --skip-memory leave out its decoding and its training steps' memory",
        metavar="SIZES",
    )
    no_torch: bool = flag_setting("report transformer-cpp alone even if PyTorch is installed")
    no_ctranslate2: bool = flag_setting("leave CTranslate2 out")
    seed: int = setting(0, limit=Limit(True, 0, MAX_SEED), help="seed of weights and synthetic batches")

    def __post_init__(self) -> None:
        check_settings(self)


def _shapes_from_args(args: Any) -> BenchShapes:
    shapes = QUICK_SHAPES if args.quick else TUTORIAL_SHAPES
    changes = {k: getattr(args, k) for k in ("steps", "warmup", "sentences") if getattr(args, k) is not None}
    return replace(shapes, **changes)


def _restart_at_level(level: str) -> None:
    """Replace this process by the same command with every library held to ``level`` (the
    libraries read their variables when they load, which has already happened here)."""
    env = isa_environment(level)
    log(f"restarting with every library held to {level}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def _check_isa(args: Any) -> None:
    """Refuse an ``--isa`` level above this CPU's, and restart the process held to the level when
    its variables are not yet set."""
    if args.isa is not None:
        order = ("generic", "avx2", "avx512")
        cpu = str(build_info().get("isa_cpu", "generic"))
        if cpu in order and order.index(args.isa) > order.index(cpu):
            raise ValueError(f"--isa {args.isa}: this CPU's highest level is {cpu}; choose {cpu} or lower")
    if args.isa is not None and any(os.environ.get(k) != v for k, v in ISA_LEVELS[args.isa].items()):
        _restart_at_level(args.isa)


def _import_peers(args: Any, serving_only: bool) -> Tuple[Any, Optional[str], Any, Optional[str]]:
    """PyTorch and CTranslate2 (each None when disabled or not importable) and why each is missing:
    ``(torch, torch_reason, ctranslate2, ctranslate2_reason)``."""
    torch, torch_reason = (None, "disabled with --no-torch") if args.no_torch or serving_only else import_torch()
    ct2, ct2_reason = (
        (None, "disabled with --no-ctranslate2")
        if args.no_ctranslate2 or serving_only
        else import_ctranslate2_or_reason()
    )
    return torch, torch_reason, ct2, ct2_reason


def _start_results(
    args: Any, threads: int, torch: Any, torch_reason: Optional[str], ct2: Any, ct2_reason: Optional[str]
) -> Dict[str, Any]:
    """Set every library's threads and return the results' opening entries: the schema, the run's
    settings, the machine, the peers' versions and the notes on what is left out or not controlled."""
    results = open_results(args.quick, threads, torch, ct2)
    if torch is None:
        results["notes"].append(f"PyTorch comparisons skipped: {torch_reason}")
    if ct2 is None:
        results["notes"].append(f"CTranslate2 comparison skipped: {ct2_reason}")
    elif getattr(os, "RTLD_DEEPBIND", 0):
        results["notes"].append(
            "CTranslate2 imported with RTLD_DEEPBIND: it keeps its own OpenMP runtime instead of "
            "sharing (and throttling) the one PyTorch and this package use"
        )
    if "not controlled" in results["threads_set_by"]["numpy_blas"]:
        results["notes"].append("NumPy BLAS threads not controlled: the GEMM peak uses NumPy's default")
    return results


def _run_sections(
    results: Dict[str, Any],
    args: Any,
    shapes: BenchShapes,
    threads: int,
    torch: Any,
    ct2: Any,
    ct2_reason: Optional[str],
    serving_only: bool,
) -> None:
    """Run the measurements that ``args`` asks for, in the report's order, each into its entry of
    ``results`` (and a note for each one skipped)."""
    if not serving_only:
        log(f"GEMM peak ({shapes.gemm_n}^2 float32)")
        results["gemm"] = gemm_peak(shapes.gemm_n, shapes.gemm_repeats, args.seed)
        log(f"bf16 GEMM peak ({shapes.gemm_n}^2)")
        results["gemm_bf16"] = bf16_gemm_peak(shapes.gemm_n, shapes.gemm_repeats, args.seed, torch)
        log(f"training step ({shapes.name} shapes)")
        results["training"] = bench_training(
            shapes,
            results["gemm"]["gflops"],
            torch is not None,
            args.seed,
            bf16_peak_gflops=results["gemm_bf16"]["gflops"],
        )
    if not args.skip_decode and not serving_only:
        results["decoding"] = bench_decoding(shapes, threads, torch is not None, ct2 is not None, ct2_reason, args.seed)
    if not args.skip_memory and not serving_only:
        results["memory"] = measure_memory(shapes, threads, torch is not None, args.seed)
    if not args.skip_scaling and threads > 1 and not serving_only:
        results["scaling"] = bench_scaling(shapes, threads, torch is not None, args.seed)
    elif not args.skip_scaling and not serving_only:
        results["notes"].append("thread scaling skipped: only 1 thread")
    if not args.skip_busy and threads > 1 and not serving_only:
        results["busy_machine"] = bench_busy(shapes, threads, args.seed)
    if not args.skip_serving:
        results["serving"] = bench_serving(threads, bool(args.quick), args.seed)
        if "skipped" in results["serving"]:
            results["notes"].append(f"serving skipped: {results['serving']['skipped']}")

    if not args.skip_mpi and not serving_only:
        results["mpi_scaling"] = bench_mpi_scaling(
            bool(args.quick), ranks=max(threads, 2), rounds=1 if args.quick else 2, seed=args.seed
        )
        if "skipped" in results["mpi_scaling"]:
            results["notes"].append(f"MPI scaling skipped: {results['mpi_scaling']['skipped']}")


def _finish_results(results: Dict[str, Any], threads: int, t_start: float) -> None:
    """Add the elapsed time since ``t_start``, the load average at the end and whether the machine
    was busy to ``results``."""
    results["elapsed_s"] = time.perf_counter() - t_start
    try:
        results["machine"]["load_average_end"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        pass
    # Busy: other work was running (the 1-minute load at the end includes our own threads).
    cores = results["machine"]["cores"]
    results["busy"] = bool(
        results["machine"].get("load_average_start", 0) > 0.5 * cores
        or results["machine"].get("load_average_end", 0) > threads + 0.5 * cores
    )


def run_bench(args: Any) -> int:
    """Run the benchmark that ``args`` describes (a :class:`BenchSettings`, or parsed ``bench``
    options: the same names); print the table (and JSON). Returns 0."""
    _check_isa(args)
    threads = args.threads if args.threads is not None else available_cores()
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    shapes = _shapes_from_args(args)
    if args.attention:
        torch, _ = (None, None) if args.no_torch else import_torch()
        return run_attention_bench(threads, bool(args.quick), args.seed, torch is not None, args.json)

    if getattr(args, "marian", False):
        return run_marian_bench(args, threads)

    serving_only = bool(args.serving_only)  # nothing then compares with PyTorch or CTranslate2: left out
    torch, torch_reason, ct2, ct2_reason = _import_peers(args, serving_only)
    results = _start_results(args, threads, torch, torch_reason, ct2, ct2_reason)
    t_start = time.perf_counter()
    _run_sections(results, args, shapes, threads, torch, ct2, ct2_reason, serving_only)
    _finish_results(results, threads, t_start)
    results = jsonable(results)

    table = format_report(results)
    emit(results, table, args.json)
    return 0
