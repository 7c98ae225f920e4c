"""What the trainer shows: a tqdm progress bar per epoch and one line per epoch and event, on rank 0
only; without bars the lines go to the ``transformer_cpp.training`` logger (the command line shows
them, a library user may enable them). tqdm is imported only when a bar is shown."""

from __future__ import annotations

import logging
import sys
from typing import Any, Dict, Optional

from .._runtime import tqdm_class

__all__ = ["Progress", "EpochBar", "budget_left", "epoch_summary"]

logger = logging.getLogger(__package__)


#: The bar under a time budget: tqdm's own, without its estimate of the epoch's remaining time
#: (the budget, not the epoch, ends such a run: its time left is in the description).
TIMED_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}, {rate_fmt}{postfix}]"


def budget_left(seconds: float) -> str:
    """What a bar under a time budget says of it: ``"8:05 of the time budget left"`` (h:mm:ss
    from an hour on)."""
    s = max(int(seconds), 0)
    clock = f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    return f"{clock} of the time budget left"


class EpochBar:
    """The progress bar of one epoch (nothing without bars); close it when the epoch ends. A
    ``timed`` bar (a run under a time budget) shows the budget's time left, not the epoch's."""

    def __init__(
        self, shown: bool, total: int, initial: int, desc: str, unit: str = "batch", timed: bool = False
    ) -> None:
        self._bar: Optional[Any] = None
        self._desc = desc
        if shown:
            tqdm = tqdm_class()

            self._bar = tqdm(
                total=total,
                initial=initial,
                desc=desc,
                unit=unit,
                leave=True,
                dynamic_ncols=True,
                file=sys.stderr,
                bar_format=TIMED_FORMAT if timed else None,
            )

    def step(self, postfix: Dict[str, str], batches: int = 1, left: Optional[float] = None) -> None:
        """One step done, of ``batches`` batches: ``postfix`` is what the bar shows beside it (the
        running means, the lr), ``left`` the seconds left of the time budget (None: no budget)."""
        if self._bar is None:
            return
        if left is not None:
            self._bar.set_description(f"{self._desc} ({budget_left(left)})", refresh=False)
        self._bar.set_postfix(postfix, refresh=False)
        self._bar.update(batches)

    def finish(self, postfix: Dict[str, str]) -> None:
        """Show the epoch's values on the bar and close it."""
        if self._bar is None:
            return
        self._bar.set_postfix(postfix, refresh=True)
        self._bar.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class Progress:
    """The trainer's output: ``bars`` (the ``progress`` setting) on the root process (``is_root``)."""

    def __init__(self, bars: bool, is_root: bool) -> None:
        self.bars = bars and is_root
        self.is_root = is_root

    def epoch_bar(self, total: int, initial: int, desc: str, unit: str = "batch", timed: bool = False) -> EpochBar:
        return EpochBar(self.bars, total, initial, desc, unit, timed)

    def say(self, message: str) -> None:
        """One line: written between the bars, or logged at INFO without them; nothing off the root."""
        if not self.is_root:
            return
        if self.bars:
            tqdm = tqdm_class()

            tqdm.write(message, file=sys.stderr)
        else:
            logger.info("%s", message)


def epoch_summary(entry: Dict[str, Any], stopped: str, elapsed: float, values: str) -> str:
    """One line on an epoch's history entry: ``values`` (the task's words for its losses and
    validation), ``stopped`` (why the run ends here, or ""), ``elapsed`` (seconds of training in
    all)."""
    label = f"epoch {entry['epoch']}" + (f" ({stopped})" if stopped else "")
    return (
        f"{label}: {values}, {entry['seconds']:.1f} s, {entry['tokens_per_second']:.0f} tokens/s, "
        f"{elapsed / 60:.1f} min in all"
    )
