"""Marks for tests that need a kernel the CPU running them may lack; the reason names what is missing."""

from __future__ import annotations

import pytest

from transformer_cpp import kernels

HAVE_BF16 = kernels.have_bf16()
needs_bf16 = pytest.mark.skipif(not HAVE_BF16, reason=f"no bfloat16 kernel here: {kernels.bf16_unsupported_reason()}")
