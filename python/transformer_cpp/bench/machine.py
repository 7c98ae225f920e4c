"""Machine facts and thread control for the benchmark.

:func:`set_all_threads` uses one thread count in our core, NumPy's BLAS and PyTorch: it calls
``transformer_cpp.set_num_threads``, sets ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``/... for child
processes and limits NumPy's BLAS through ``threadpoolctl`` when it is installed, else through
OpenBLAS' own ``*_set_num_threads`` entry point found with ``ctypes`` (NumPy is already imported
by ``transformer_cpp`` before the bench can run, so the environment variables come too late for
it). :func:`machine_facts` is the report's header: CPU, cores, load, versions, build.
"""

from __future__ import annotations

import ctypes
import os
import re
import platform
import sys
from typing import Any, Dict, Optional

import numpy as np

from .._runtime import build_info, set_num_threads
from .._version import __version__

__all__ = [
    "ISA_LEVELS",
    "ISA_VARIABLES",
    "SOFTWARE",
    "THREAD_ENV",
    "available_cores",
    "isa_environment",
    "log",
    "machine_facts",
    "set_all_threads",
]

#: What the benchmark's tables, notes and labels call this package.
SOFTWARE = "transformer-cpp"


def available_cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


# the thread-count variables OpenMP and the BLAS libraries read (set for child processes)
THREAD_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


# Instruction-set levels the bench can force, and for each the variables that hold every library to
# it: this package (TRANSFORMER_CPP_ISA), PyTorch's own kernels (ATEN_CPU_CAPABILITY), oneDNN
# inside PyTorch (ONEDNN_MAX_CPU_ISA, and DNNL_ for older releases), MKL (MKL_ENABLE_INSTRUCTIONS)
# and CTranslate2 (CT2_FORCE_CPU_ISA). So a larger CPU can measure what an AVX2 laptop would see.
ISA_LEVELS = {
    "avx512": {
        "TRANSFORMER_CPP_ISA": "avx512",
        "ATEN_CPU_CAPABILITY": "avx512",
        "ONEDNN_MAX_CPU_ISA": "ALL",
        "DNNL_MAX_CPU_ISA": "ALL",
        "MKL_ENABLE_INSTRUCTIONS": "AVX512",
        "CT2_FORCE_CPU_ISA": "AVX512",
    },
    "avx2": {
        "TRANSFORMER_CPP_ISA": "avx2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "DNNL_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "CT2_FORCE_CPU_ISA": "AVX2",
    },
    "generic": {
        "TRANSFORMER_CPP_ISA": "generic",
        "ATEN_CPU_CAPABILITY": "default",
        "ONEDNN_MAX_CPU_ISA": "SSE41",
        "DNNL_MAX_CPU_ISA": "SSE41",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
        "CT2_FORCE_CPU_ISA": "GENERIC",
    },
}
ISA_VARIABLES = tuple(ISA_LEVELS["avx2"])


def isa_environment(level: str) -> Dict[str, str]:
    """This process's environment with every library held to instruction-set ``level``."""
    if level not in ISA_LEVELS:
        raise ValueError(f"isa must be one of {', '.join(ISA_LEVELS)}, got {level!r}")
    env = dict(os.environ)
    env.update(ISA_LEVELS[level])
    return env


def _openblas_set_threads(n: int) -> Optional[str]:
    """Call ``openblas_set_num_threads`` (any symbol prefix/suffix) in every OpenBLAS loaded here."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    done = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in (
            "scipy_openblas_set_num_threads64_",
            "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_",
            "openblas_set_num_threads",
        ):
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn.restype = None
                fn(int(n))
                done.append(f"{os.path.basename(path)}:{symbol}")
                break
    return ", ".join(done) or None


def set_all_threads(n: int, torch_module: Any = None) -> Dict[str, str]:
    """Use ``n`` threads in our core, NumPy's BLAS and (if given) PyTorch; returns how each was set."""
    for key in THREAD_ENV:
        os.environ[key] = str(n)  # for child processes
    how = {"transformer_cpp": "set_num_threads"}
    set_num_threads(n)
    blas = None
    try:
        from threadpoolctl import threadpool_limits  # type: ignore

        threadpool_limits(limits=n, user_api="blas")
        blas = "threadpoolctl"
    except ImportError:
        found = _openblas_set_threads(n)
        if found:
            blas = f"ctypes {found}"
    how["numpy_blas"] = blas or "not controlled (install threadpoolctl); NumPy's default thread count"
    if torch_module is not None:
        torch_module.set_num_threads(n)
        how["torch"] = "torch.set_num_threads"
    return how


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts() -> Dict[str, Any]:
    """CPU, cores, load and library versions, for the report header."""
    facts: Dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": available_cores(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "transformer_cpp": __version__,
        "build": {
            k: v for k, v in build_info().items() if k in ("compiler", "flags", "openmp", "simd", "isa", "kernels")
        },
        "isa_environment": {k: os.environ[k] for k in ISA_VARIABLES if k in os.environ},
    }
    try:
        facts["load_average_start"] = round(os.getloadavg()[0], 2)
    except OSError:  # pragma: no cover
        pass
    return facts


def log(msg: str) -> None:
    """A progress line on standard error (the report goes to standard output); the engines' keys
    (``ours``, ``ours_int8``, ...) are named as the report names them."""
    msg = re.sub(r"\bours(?:_(int8|bf16))?\b", lambda m: f"{SOFTWARE} {m.group(1)}" if m.group(1) else SOFTWARE, msg)
    print(f"[bench] {msg}", file=sys.stderr, flush=True)
