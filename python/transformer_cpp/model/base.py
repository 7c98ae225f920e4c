"""What both models share over their C++ core: construction from a config dict, parameters and
their checks, the optimiser's settings, state and counters, and the learning rate."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, List, Optional, Type, TypeVar, cast

from .. import _core
from .._delegated import SettableDelegated
from .._checks import flag as _flag

__all__ = ["CoreModel", "NonFiniteError"]

_Model = TypeVar("_Model", bound="CoreModel")

#: Raised when weights, a loss, a gradient norm or an output hold NaN or infinity (a diverged run,
#: a damaged checkpoint, an overflow). Both a ``FloatingPointError`` and a ``RuntimeError``.
NonFiniteError = _core.NonFiniteError


class CoreModel:
    """The members :class:`~transformer_cpp.model.Transformer` and
    :class:`~transformer_cpp.model.LanguageModel` share: each wraps one C++ model (``_core``) of
    the float type ``dtype``."""

    _core: Any
    dtype: str

    @classmethod
    def from_config(cls: Type[_Model], config: Dict[str, Any]) -> _Model:
        """Build from a dict as returned by :attr:`config` (unknown keys are an error)."""
        return cls(**config)

    @property
    def config(self) -> Dict[str, Any]:
        """The architecture as a JSON-serialisable dict, every field of the core's configuration
        and the ``dtype`` (``from_config`` rebuilds the model)."""
        c: Dict[str, Any] = self._core.config().to_dict()
        c["dtype"] = self.dtype
        return c

    def backward(self, dlogits: Any) -> None:
        """Accumulate every parameter gradient from ``d loss / d logits`` of the last forward."""
        self._core.backward(dlogits)

    def zero_grad(self) -> None:
        """Clear every parameter gradient."""
        self._core.zero_grad()

    def parameters(self) -> "OrderedDict[str, Any]":
        """Ordered dict ``hierarchical name -> Parameter`` with writable ``.value``/``.grad`` views,
        e.g. ``encoder.layers.0.self_attention.query.weight`` (a language model's names start at
        ``layers.``)."""
        return cast("OrderedDict[str, Any]", self._core.parameters())

    def num_parameters(self) -> int:
        """Number of trainable scalars."""
        return int(sum(p.value.size for p in self.parameters().values()))

    def nonfinite_parameters(self, optimizer_state: bool = True) -> List[str]:
        """Names of the parameters holding NaN or infinity (empty when all are finite), and with
        ``optimizer_state`` the Adam moments ``'<param>.m'`` / ``'<param>.v'`` that do."""
        flag = _flag(f"{type(self).__name__}.nonfinite_parameters", "optimizer_state", optimizer_state)
        return list(self._core.nonfinite_parameters(flag))

    def check_finite(self, who: Optional[str] = None, optimizer_state: bool = True) -> None:
        """Raise :class:`NonFiniteError` naming every parameter (and Adam moment) that holds NaN or
        infinity, e.g. after loading a checkpoint; ``who`` (default the class name) starts the
        message."""
        bad = self.nonfinite_parameters(optimizer_state)
        if bad:
            shown = ", ".join(repr(n) for n in bad[:10]) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
            raise NonFiniteError(
                f"{who or type(self).__name__}: {len(bad)} tensor{'s' if len(bad) > 1 else ''} hold NaN or "
                f"infinite values: {shown}"
            )

    @property
    def optimizer_config(self) -> Dict[str, Any]:
        """The optimiser's settings as a dict (``configure_optimizer(**optimizer_config)`` restores them)."""
        settings: Dict[str, Any] = self._core.optimizer_config().to_dict()
        return settings

    def optimizer_state(self) -> "OrderedDict[str, Any]":
        """Adam moments ``'<param>.m'`` / ``'<param>.v'`` -> Parameter with writable ``.value``."""
        return cast("OrderedDict[str, Any]", self._core.optimizer_state())

    step = SettableDelegated("_core", "Optimiser steps taken (settable, to resume).")
    dropout_calls = SettableDelegated("_core", "The dropout masks' counter (settable, to resume a run exactly).")

    def learning_rate(self, step: Optional[int] = None) -> float:
        """Learning rate at a 1-based ``step`` (default: the next step)."""
        if step is None:
            if self.step >= 2**63 - 1:
                raise ValueError(
                    f"{type(self).__name__}.learning_rate: the step count {self.step} is at its maximum "
                    "(2**63 - 1): there is no next step"
                )
            step = self.step + 1
        return float(self._core.learning_rate(step))

    @property
    def last_grad_norm(self) -> float:
        """Global gradient norm of the last ``train_step`` (before clipping)."""
        return float(self._core.last_grad_norm)
