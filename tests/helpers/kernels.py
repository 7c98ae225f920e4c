"""Marks for tests that need a kernel the CPU running them may lack; the reason names what is missing."""

from __future__ import annotations

import pytest

from transformer_cpp import kernels

HAVE_BF16 = kernels.have_bf16()
needs_bf16 = pytest.mark.skipif(not HAVE_BF16, reason=f"no bfloat16 kernel here: {kernels.bf16_unsupported_reason()}")

# The bf16 kernels this CPU can run, each by name (kernels.bf16_matmul's `kernel`): the
# AVX512_BF16 one wherever bf16 runs, and the AMX tiles where the CPU and OS have them.
BF16_KERNELS = (["avx512_bf16"] + (["amx"] if kernels.have_amx(ignore_environment=True) else [])) if HAVE_BF16 else []
