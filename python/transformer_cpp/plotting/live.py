"""A live plot of training in a notebook: :class:`LivePlot`, a callback of
:meth:`Trainer.fit <transformer_cpp.training.Trainer.fit>` that redraws :func:`~.figures.history_plot`
(loss, accuracy, learning rate, validation BLEU) while the run trains::

    live = LivePlot()
    trainer.fit(on_batch_end=live, on_epoch_end=live)

In a Jupyter (IPython kernel) session it replaces the cell's output with the new figure every
``every`` seconds of training when new history entries have come in, and after every epoch;
anywhere else (a script, a terminal, the command line) it does nothing. :meth:`LivePlot.draw`
draws a history into a figure wherever it runs.
"""

from __future__ import annotations

import importlib
import math
import sys
import time
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, Tuple

from .figures import history_plot

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["LivePlot", "in_notebook"]


def in_notebook() -> bool:
    """Whether this process is an IPython kernel (a Jupyter notebook, say): IPython is imported
    and its shell has a kernel. IPython is never imported here."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = getattr(ipython, "get_ipython", lambda: None)()
    return shell is not None and getattr(shell, "kernel", None) is not None


class LivePlot:
    """Redraw the training history in a notebook while :meth:`Trainer.fit` runs.

    Pass the same object as ``on_batch_end`` and ``on_epoch_end``; outside a notebook it does
    nothing.

    Args:
        every: the fewest seconds between two redraws inside an epoch (each epoch's end redraws).

    Attributes:
        figure: the figure drawn last (None before the first).
        shown: how many times a figure was displayed.
    """

    def __init__(self, every: float = 5.0) -> None:
        if isinstance(every, bool) or not isinstance(every, (int, float)) or not every >= 0:
            raise ValueError(f"LivePlot: every must be a number of seconds >= 0, got {every!r}")
        self.every = float(every)
        self.figure: Optional["Figure"] = None
        self.shown = 0
        self._last = -math.inf
        self._drawn: Tuple[int, int] = (-1, -1)

    def __call__(self, trainer: Any, entry: Optional[Mapping[str, Any]] = None) -> None:
        """The callback: ``(trainer)`` after a step, ``(trainer, entry)`` after an epoch."""
        if not in_notebook():
            return
        history = trainer.history
        rows = (len(history["batch"]["step"]), len(history["epoch"]["epoch"]))
        now = time.monotonic()
        if rows == self._drawn or (entry is None and now - self._last < self.every):
            return
        self.show(history)
        self._drawn, self._last = rows, now

    def draw(self, history: Mapping[str, Mapping[str, Sequence[float]]]) -> "Figure":
        """A figure of ``history`` (:func:`~.figures.history_plot`), kept as :attr:`figure`."""
        self.figure = history_plot(history)
        return self.figure

    def show(self, history: Mapping[str, Mapping[str, Sequence[float]]]) -> None:
        """Draw ``history`` and display it in place of the cell's previous output."""
        display = importlib.import_module("IPython.display")
        figure = self.draw(history)
        display.clear_output(wait=True)
        display.display(figure)
        self.shown += 1
