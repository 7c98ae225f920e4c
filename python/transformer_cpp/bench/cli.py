"""The benchmark's command line: ``transformer-cpp bench`` (:func:`add_bench_parser`, wired by
:mod:`transformer_cpp.cli`) and ``python -m transformer_cpp.bench`` (:func:`main`); both parse the
same options and call :func:`run_bench`, which runs the sections in order and prints the report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from typing import Any, Dict, List, Optional

from .._runtime import build_info
from ..options import count_option, threads_option
from .busy import bench_busy
from .decoding import bench_decoding
from .gemm import bf16_gemm_peak, gemm_peak
from .machine import ISA_LEVELS, available_cores, isa_environment, log, machine_facts, set_all_threads
from .memory import MEMORY_CHILDREN, child_memory, measure_memory
from .peers import import_ctranslate2_or_reason, import_torch
from .report import JSON_SCHEMA_VERSION, evaluate_targets, format_report, jsonable
from .serving import bench_serving
from .shapes import QUICK_SHAPES, TUTORIAL_SHAPES, BenchShapes
from .training import bench_scaling, bench_training

__all__ = ["add_bench_parser", "main", "run_bench"]


_DESCRIPTION = (
    "Benchmark the C++ core against PyTorch (and CTranslate2) in one run: machine GEMM peak, "
    "training step, greedy decoding, peak memory and thread scaling, and the HTTP server's throughput "
    "with and without request batching; each ratio is shown beside the one the package is built to "
    "reach on a CPU with AVX-512 (the 'target' column)."
)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads",
        type=threads_option(),
        default=None,
        help="threads for every library (default: all cores available to the process)",
    )
    p.add_argument("--quick", action="store_true", help="tiny shapes and few steps: a smoke test for CI")
    p.add_argument(
        "--isa",
        choices=tuple(ISA_LEVELS),
        default=None,
        help="hold this package, PyTorch (ATen, oneDNN, MKL) and CTranslate2 to one instruction-set level "
        "(the bench restarts itself with the variables that do it), e.g. avx2 to measure what a CPU "
        "without AVX-512 would see; a level above this CPU's is refused",
    )
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help="machine-readable results: to stdout (the table then goes to stderr) or to PATH",
    )
    p.add_argument(
        "--steps", type=count_option("steps", 1), default=None, help="timed training steps per implementation"
    )
    p.add_argument(
        "--warmup", type=count_option("warmup", 0), default=None, help="untimed training steps per implementation"
    )
    p.add_argument(
        "--sentences", type=count_option("sentences", 1), default=None, help="sentences per greedy-decoding batch size"
    )
    p.add_argument("--skip-memory", action="store_true", help="skip the peak-memory child processes")
    p.add_argument("--skip-decode", action="store_true", help="skip greedy decoding")
    p.add_argument("--skip-scaling", action="store_true", help="skip the thread-scaling measurement")
    p.add_argument(
        "--skip-busy",
        action="store_true",
        help="skip the busy-machine measurement (a CPU hog on one core: 1 thread against all)",
    )
    p.add_argument("--skip-serving", action="store_true", help="skip the HTTP serving measurement")
    p.add_argument(
        "--skip-mpi",
        action="store_true",
        help="skip the MPI scaling section (1 process of N threads against N ranks; bench/mpi.py)",
    )
    p.add_argument(
        "--serving-only",
        action="store_true",
        help="run only the HTTP serving measurement (batching against one at a time)",
    )
    p.add_argument(
        "--attention",
        action="store_true",
        help="only the attention kinds side by side: forward+backward time and peak memory against the "
        "sequence length (512 ... 16,384; causal, d_head 64, float32), per-token generation time against "
        "position (KV-cached softmax, linear attention's RNN form), activation memory against depth with and "
        "without reversible layers, and Transformer-XL evaluation with state reuse against recomputing; each "
        "measurement in its own process",
    )
    p.add_argument("--no-torch", action="store_true", help="report ours alone even if PyTorch is installed")
    p.add_argument("--no-ctranslate2", action="store_true", help="leave CTranslate2 out")
    p.add_argument("--seed", type=count_option("seed", 0), default=0, help="seed of weights and synthetic batches")
    p.add_argument("--child-memory", choices=MEMORY_CHILDREN, default=None, help=argparse.SUPPRESS)


def add_bench_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``bench`` subcommand on an ``argparse`` subparsers object; sets ``func``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "bench", help="benchmark the C++ core against PyTorch (and CTranslate2)", description=_DESCRIPTION
    )
    _add_arguments(p)
    p.set_defaults(func=run_bench)
    return p


def _shapes_from_args(args: argparse.Namespace) -> BenchShapes:
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


def run_bench(args: argparse.Namespace) -> int:
    """Run the benchmark described by parsed ``args``; print the table (and JSON). Returns 0."""
    if args.isa is not None:
        order = ("generic", "avx2", "avx512")
        cpu = str(build_info().get("isa_cpu", "generic"))
        if cpu in order and order.index(args.isa) > order.index(cpu):
            raise ValueError(f"--isa {args.isa}: this CPU's highest level is {cpu}; choose {cpu} or lower")
    if args.isa is not None and any(os.environ.get(k) != v for k, v in ISA_LEVELS[args.isa].items()):
        _restart_at_level(args.isa)
    threads = args.threads if args.threads is not None else available_cores()
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    shapes = _shapes_from_args(args)
    if args.child_memory:
        print(json.dumps(jsonable(child_memory(args.child_memory, shapes, threads, args.seed))), flush=True)
        return 0

    if args.attention:
        from .attention import run_attention_bench

        torch, _ = (None, None) if args.no_torch else import_torch()
        return run_attention_bench(threads, bool(args.quick), args.seed, torch is not None, args.json)

    serving_only = bool(args.serving_only)
    if serving_only:  # nothing compares with PyTorch or CTranslate2: leave them out
        args.no_torch = args.no_ctranslate2 = True
    torch, torch_reason = (None, "disabled with --no-torch") if args.no_torch else import_torch()
    ct2, ct2_reason = (
        (None, "disabled with --no-ctranslate2") if args.no_ctranslate2 else import_ctranslate2_or_reason()
    )
    how = set_all_threads(threads, torch)
    results: Dict[str, Any] = {
        "schema": JSON_SCHEMA_VERSION,
        "quick": bool(args.quick),
        "threads": threads,
        "threads_set_by": how,
        "machine": machine_facts(),
        "notes": [],
        "torch_version": getattr(torch, "__version__", None),
        "ctranslate2_version": getattr(ct2, "__version__", None),
    }
    if torch is None:
        results["notes"].append(f"PyTorch comparisons skipped: {torch_reason}")
    if ct2 is None:
        results["notes"].append(f"CTranslate2 comparison skipped: {ct2_reason}")
    elif getattr(os, "RTLD_DEEPBIND", 0):
        results["notes"].append(
            "CTranslate2 imported with RTLD_DEEPBIND: it keeps its own OpenMP runtime instead of "
            "sharing (and throttling) the one PyTorch and this package use"
        )
    if "not controlled" in how["numpy_blas"]:
        results["notes"].append("NumPy BLAS threads not controlled: the GEMM peak uses NumPy's default")
    t_start = time.perf_counter()

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
        results["memory"] = measure_memory(shapes, threads, torch is not None, bool(args.quick), args.seed)
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
        from .mpi import bench_mpi_scaling  # imported when needed: `python -m transformer_cpp.bench.mpi` runs it

        results["mpi_scaling"] = bench_mpi_scaling(
            bool(args.quick), ranks=max(threads, 2), rounds=1 if args.quick else 2, seed=args.seed
        )
        if "skipped" in results["mpi_scaling"]:
            results["notes"].append(f"MPI scaling skipped: {results['mpi_scaling']['skipped']}")
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
    results["targets"] = evaluate_targets(results)
    results = jsonable(results)

    table = format_report(results)
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
    """``python -m transformer_cpp.bench [options]`` (the options of ``transformer-cpp bench``)."""
    parser = argparse.ArgumentParser(prog="python -m transformer_cpp.bench", description=_DESCRIPTION)
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_bench(args)
    except ValueError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
