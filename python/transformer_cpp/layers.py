"""The C++ layers, one factory per layer, choosing the float32 or float64 build by ``dtype``.

Every layer object has the same surface:

* ``forward(x, ...)`` — NumPy in, NumPy out (a copy; the layer keeps what backward needs);
* ``backward(dout)`` — returns the gradient of the input(s) and *accumulates* parameter gradients;
* ``parameters()`` — an ordered dict ``name -> Parameter`` whose ``.value`` and ``.grad`` are
  writable NumPy views of the C++ memory (writing ``.value[...]`` changes the layer);
* ``zero_grad()`` — the only thing that clears parameter gradients.

``float32`` is what models train with; ``float64`` exists so that tests can check every backward
pass against finite differences.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core

__all__ = ["Linear", "Dropout", "core_class"]


def core_class(name: str, dtype: Any = "float32") -> type:
    """The ``_core`` class ``name`` for ``dtype`` (``"float32"`` or ``"float64"``)."""
    try:
        dt = np.dtype(dtype).name
    except TypeError as exc:
        raise ValueError(f"{name}: dtype must be 'float32' or 'float64', got {dtype!r}") from exc
    if dt not in ("float32", "float64"):
        raise ValueError(f"{name}: dtype must be 'float32' or 'float64', got {dtype!r}")
    return getattr(_core, f"{name}_{dt}")


def Linear(in_features: int, out_features: int, bias: bool = True, *, seed: int = 0, dtype: Any = "float32"):
    """Dense layer ``y = x W^T + b``; ``W`` has shape ``(out_features, in_features)`` as in PyTorch.

    Weights are Glorot-uniform from ``seed``, the bias starts at zero.
    ``forward(x)`` maps ``(..., in_features)`` to ``(..., out_features)``.
    """
    return core_class("Linear", dtype)(in_features, out_features, bias, seed)


def Dropout(rate: float = 0.1, *, seed: int = 0, dtype: Any = "float32"):
    """Inverted dropout. ``forward(x, training=True)`` zeroes each element with probability ``rate``
    and scales the rest by ``1 / (1 - rate)``; with ``training=False`` it is the identity.
    Masks depend only on ``seed`` and the call count (``.calls``), never on the thread count."""
    return core_class("Dropout", dtype)(rate, seed)
