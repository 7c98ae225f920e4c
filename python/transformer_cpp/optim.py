"""The optimiser: Adam over the parameters of one or more layers, in C++."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Iterable, Union

import numpy as np

from .layers import CoreObject, core_class

if TYPE_CHECKING:
    from ._core import Parameter

__all__ = ["Adam"]


class Adam(CoreObject):
    """Adam over the parameters of one or more layers (``torch.optim.Adam`` with bias correction).

    Args:
        parameters: the ordered dict returned by a layer's ``parameters()`` (its keys name the
            state) or a list of ``Parameter`` objects (named by ``Parameter.name``, prefixed with
            their index if names repeat). All must share one dtype, which picks the float32 or
            float64 optimiser.
        beta1, beta2, eps: as in the paper (0.9, 0.98, 1e-9).

    ``step(lr)`` updates the layers' memory in place; ``clip_grad_norm(max_norm) -> norm`` scales
    the gradients to a global L2 norm; ``step_count`` is settable; ``state()`` is an ordered dict of
    writable views ``"<name>.m"`` / ``"<name>.v"`` of the moments for checkpoints. The optimiser
    keeps the layers alive.
    """

    def __init__(
        self,
        parameters: Union[Mapping[str, Parameter], Iterable[Parameter]],
        beta1: float = 0.9,
        beta2: float = 0.98,
        eps: float = 1e-9,
    ) -> None:
        if isinstance(parameters, Mapping):
            first = next(iter(parameters.values()), None)
        else:
            parameters = list(parameters)
            first = parameters[0] if parameters else None
        if first is None:
            raise ValueError("Adam: got no parameters to optimise")
        value = getattr(first, "value", None)
        if value is None:
            raise TypeError(
                f"Adam: parameters must be Parameter objects (from a layer's parameters()), got {type(first).__name__}"
            )
        super().__init__(core_class("Adam", value.dtype)(parameters, beta1, beta2, eps))

    def step(self, lr: float) -> None:
        """One update with learning rate ``lr`` (increments ``step_count`` first)."""
        self._core.step(lr)

    def clip_grad_norm(self, max_norm: float) -> float:
        """Global L2 norm of all gradients; scales them by ``max_norm / norm`` when it is larger.
        Returns the norm before clipping."""
        return float(self._core.clip_grad_norm(max_norm))

    def state(self) -> "OrderedDict[str, np.ndarray]":
        """Ordered dict ``"<param>.m"`` / ``"<param>.v"`` -> writable views of the moments."""
        moments: OrderedDict[str, np.ndarray] = self._core.state()
        return moments

    def reset_state(self) -> None:
        """Zero the moments and the step count."""
        self._core.reset_state()

    def __len__(self) -> int:
        return len(self._core)

    def __repr__(self) -> str:
        return f"Adam({len(self)} parameters, beta1={self.beta1}, beta2={self.beta2}, eps={self.eps})"
