"""Marks for tests that need a kernel the CPU running them may lack; the reason names what is missing."""

from __future__ import annotations

import pytest

from transformer_cpp import kernels

HAVE_BF16 = kernels.have_bf16()
needs_bf16 = pytest.mark.skipif(not HAVE_BF16, reason=f"no bfloat16 kernel here: {kernels.bf16_unsupported_reason()}")

# The bf16 kernels this CPU can run, each by name (kernels.bf16_matmul's `kernel`): the
# AVX512_BF16 one wherever bf16 runs, and the AMX tiles where the CPU and OS have them.
BF16_KERNELS = (["avx512_bf16"] + (["amx"] if kernels.have_amx(ignore_environment=True) else [])) if HAVE_BF16 else []


def splits_512bit_fma() -> bool:
    """Whether /proc/cpuinfo names an AMD CPU of family 25 (19h: Zen 3 and Zen 4, whose cores run
    a 512-bit multiply-add as two 256-bit halves); False where the file is not there."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            head = f.read().split("\n\n")[0]
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in head.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return fields.get("vendor_id") == "AuthenticAMD" and fields.get("cpu family") == "25"
