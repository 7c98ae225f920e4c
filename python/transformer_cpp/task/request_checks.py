"""Checks of the ``training=`` settings a :class:`TrainRequest` carries, before they reach
:class:`~transformer_cpp.training.TrainConfig`: one clear error naming the setting."""

from __future__ import annotations

import difflib
from dataclasses import fields
from typing import Any, Mapping

from ..training import TrainConfig

#: TrainConfig fields that TrainRequest takes as its own arguments, not inside ``training=``.
REQUEST_ARGUMENTS = ("threads", "progress", "adaptive_threads")


def check_training_settings(training: Mapping[str, Any]) -> None:
    """Raise ``TypeError`` naming the first key of ``training`` that TrainConfig lacks (with the
    closest valid name) or that TrainRequest takes as its own argument."""
    names = [f.name for f in fields(TrainConfig) if f.name not in REQUEST_ARGUMENTS]
    for key in training:
        if key in REQUEST_ARGUMENTS:
            raise TypeError(
                f"TrainRequest: give {key!r} as TrainRequest({key}=...), not inside training= "
                f"(training= holds {', '.join(names)})"
            )
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"TrainRequest: unknown setting {key!r} in training={hint} (allowed: {', '.join(names)})")
