"""How the task's steps speak: a ``report`` callback that takes one line (:func:`say` to standard
error, :func:`quiet` to nobody), :class:`TaskError` for a problem the user can fix, and
:class:`Silent` for a step that failed on another rank of a data-parallel run."""

from __future__ import annotations

import sys
from typing import Callable

__all__ = ["Report", "Silent", "TaskError", "quiet", "say"]

Report = Callable[[str], None]


def say(message: str) -> None:
    """The default ``report``: one line on standard error."""
    print(message, file=sys.stderr, flush=True)


def quiet(message: str) -> None:
    """A ``report`` that says nothing."""


class TaskError(ValueError):
    """A problem the user can fix: the data, the settings asked for, the run directory."""


class Silent(Exception):
    """A setup step failed on another rank of a data-parallel run, and rank 0 says what."""
