"""What the trainer shows: a tqdm progress bar per epoch and one line per epoch and event, on rank 0
only; without bars the lines go to the ``transformer_cpp.training`` logger (the command line shows
them, a library user may enable them). tqdm is imported only when a bar is shown."""

from __future__ import annotations

import logging
import sys
from typing import Any, Dict, Optional

__all__ = ["Progress", "EpochBar", "epoch_summary"]

logger = logging.getLogger(__package__)


class EpochBar:
    """The progress bar of one epoch (nothing without bars); close it when the epoch ends."""

    def __init__(self, shown: bool, total: int, initial: int, desc: str) -> None:
        self._bar: Optional[Any] = None
        if shown:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=total,
                initial=initial,
                desc=desc,
                unit="batch",
                leave=True,
                dynamic_ncols=True,
                file=sys.stderr,
            )

    def step(self, sums: Dict[str, float], model: Any) -> None:
        """One batch done: the epoch's running sums (token-weighted) and the model's learning rate."""
        if self._bar is None:
            return
        n = max(sums["tokens"], 1)
        self._bar.set_postfix(
            loss=f"{sums['loss'] / n:.4f}",
            acc=f"{sums['correct'] / n:.4f}",
            lr=f"{model.learning_rate(model.step):.2e}",
            refresh=False,
        )
        self._bar.update(1)

    def finish(self, entry: Dict[str, Any]) -> None:
        """Show the epoch's history entry on the bar and close it."""
        if self._bar is None:
            return
        self._bar.set_postfix(
            loss=f"{entry['loss']:.4f}", acc=f"{entry['accuracy']:.4f}", lr=f"{entry['lr']:.2e}", refresh=True
        )
        self._bar.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class Progress:
    """The trainer's output: ``bars`` (the ``progress`` setting) on the root process (``is_root``)."""

    def __init__(self, bars: bool, is_root: bool) -> None:
        self.bars = bars and is_root
        self.is_root = is_root

    def epoch_bar(self, total: int, initial: int, desc: str) -> EpochBar:
        return EpochBar(self.bars, total, initial, desc)

    def say(self, message: str) -> None:
        """One line: written between the bars, or logged at INFO without them; nothing off the root."""
        if not self.is_root:
            return
        if self.bars:
            from tqdm.auto import tqdm

            tqdm.write(message, file=sys.stderr)
        else:
            logger.info("%s", message)


def epoch_summary(entry: Dict[str, Any], finished: bool, elapsed: float) -> str:
    """One line on an epoch's history entry (``finished``: the time budget is spent; ``elapsed``:
    seconds of training in all)."""
    val = ""
    if "val_loss" in entry:
        val = f", val_loss {entry['val_loss']:.4f}, val_acc {entry['val_accuracy']:.4f}"
    if "val_bleu" in entry:
        val += f", val_bleu {entry['val_bleu']:.2f}"
    label = f"epoch {entry['epoch']}" + (" (time budget spent)" if finished else "")
    return (
        f"{label}: loss {entry['loss']:.4f}, acc {entry['accuracy']:.4f}{val}, "
        f"{entry['seconds']:.1f} s, {entry['tokens_per_second']:.0f} tokens/s, "
        f"{elapsed / 60:.1f} min in all"
    )
