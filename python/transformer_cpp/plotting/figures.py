"""Figures of training (the learning-rate schedule, the history, BLEU by minutes) and of attention and masks."""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Sequence, Union, cast

import numpy as np

from .data import _figure, _labels, learning_rate_schedule

if TYPE_CHECKING:  # pragma: no cover - only for type checkers
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


# --------------------------------------------------------------------------------------------
# training figures
# --------------------------------------------------------------------------------------------


def learning_rate_plot(d_model: Union[int, Sequence[int]] = 512, warmup: int = 4000, steps: int = 20000) -> "Figure":
    """The learning-rate schedule of :func:`learning_rate_schedule` against the step.

    Args:
        d_model: model width, or several widths to compare (one curve each).
        warmup: warm-up steps; a dotted line marks the peak.
        steps: number of steps drawn.

    Returns:
        A figure with one axes.
    """
    # numbers.Integral admits NumPy integers too, but mypy cannot narrow the Union with it
    widths = [cast(int, d_model)] if isinstance(d_model, numbers.Integral) else list(cast(Sequence[int], d_model))
    if not widths:
        raise ValueError("learning_rate_plot: d_model must be an integer or a non-empty sequence of integers")
    curves = [(w, learning_rate_schedule(w, warmup, steps)) for w in widths]
    fig = _figure((7, 4))
    ax = fig.add_subplot()
    step = np.arange(1, int(steps) + 1)
    for w, lr in curves:
        ax.plot(step, lr, label=f"d_model = {w}")
    ax.axvline(warmup, color="0.5", ls=":", lw=1, label=f"warmup = {warmup}")
    ax.set_xlabel("training step")
    ax.set_ylabel("learning rate")
    ax.set_title("lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)")
    ax.legend()
    return fig


def _series(section: Mapping[str, Any], key: str) -> np.ndarray:
    values = section.get(key) if isinstance(section, Mapping) else None
    if values is None:
        return np.zeros(0)
    return cast(np.ndarray, np.asarray(list(values), dtype=np.float64).ravel())


def history_plot(history: Mapping[str, Mapping[str, Sequence[float]]]) -> "Figure":
    """Training curves from a ``Trainer`` history: loss, accuracy and learning rate panels.

    ``history`` looks like ``{"batch": {"step", "loss", "accuracy", "lr"},
    "epoch": {"epoch", "loss", "accuracy", "val_loss", "val_accuracy"}}`` (each a list). Missing
    keys and empty lists are fine; a panel with nothing to show says so.

    Per-batch values are drawn against the step. Per-epoch values are drawn on the same panels at
    the step where each epoch ended, estimated as ``epoch * last_step / last_epoch`` (epochs of
    equal length, the batch log covering the whole run); without batch data they are drawn
    against the epoch number.

    Returns:
        A figure with four axes: loss, accuracy, learning rate, validation BLEU.
    """
    who = "history_plot"
    if not isinstance(history, Mapping):
        raise ValueError(
            f"{who}: history must be a dict with 'batch' and/or 'epoch' entries, got {type(history).__name__}"
        )
    batch = history.get("batch") or {}
    epoch = history.get("epoch") or {}

    b_step = _series(batch, "step")
    e_num = _series(epoch, "epoch")

    def batch_x(values: np.ndarray) -> np.ndarray:
        # Use the logged steps when they line up with the values, else count from 1.
        return b_step if len(b_step) == len(values) else np.arange(1, len(values) + 1, dtype=np.float64)

    def epoch_x(values: np.ndarray) -> np.ndarray:
        x = e_num if len(e_num) == len(values) else np.arange(1, len(values) + 1, dtype=np.float64)
        if len(b_step) and len(x) and x.max() > 0:
            return cast(np.ndarray, x * (b_step.max() / x.max()))
        return x

    x_label = "step" if len(b_step) or any(len(_series(batch, k)) for k in ("loss", "accuracy", "lr")) else "epoch"

    fig = _figure((17, 3.8))
    axes = fig.subplots(1, 4)
    for ax, key, name in ((axes[0], "loss", "loss"), (axes[1], "accuracy", "accuracy")):
        drawn = False
        values = _series(batch, key)
        if len(values):
            ax.plot(batch_x(values), values, lw=0.7, alpha=0.6, label=f"train {name} (batch)")
            drawn = True
        for prefix, label, style in (("", "train", "o-"), ("val_", "validation", "s--")):
            values = _series(epoch, prefix + key)
            if len(values):
                ax.plot(epoch_x(values), values, style, ms=4, label=f"{label} {name} (epoch)")
                drawn = True
        ax.set_title(name)
        ax.set_xlabel(x_label)
        if drawn:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, f"no {name} recorded", ha="center", va="center", transform=ax.transAxes, color="0.5")
    ax = axes[2]
    lr = _series(batch, "lr")
    if len(lr):
        ax.plot(batch_x(lr), lr, color="tab:green")
    else:
        ax.text(0.5, 0.5, "no learning rate recorded", ha="center", va="center", transform=ax.transAxes, color="0.5")
    ax.set_title("learning rate")
    ax.set_xlabel("step")
    ax = axes[3]
    bleu = _series(epoch, "val_bleu")
    if len(bleu):
        ax.plot(epoch_x(bleu), bleu, "s--", ms=4, color="tab:purple", label="validation BLEU (greedy)")
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no validation BLEU recorded", ha="center", va="center", transform=ax.transAxes, color="0.5")
    ax.set_title("validation BLEU")
    ax.set_xlabel(x_label)
    return fig


def bleu_by_minutes_plot(runs: Mapping[str, Mapping[str, Any]]) -> "Figure":
    """Validation BLEU against training minutes for several runs (``label -> history``), as in
    ``docs/experiments.md``: each run's ``epoch`` entries ``minutes`` and ``val_bleu``."""
    who = "bleu_by_minutes_plot"
    if not isinstance(runs, Mapping) or not runs:
        raise ValueError(f"{who}: expected a non-empty dict label -> history")
    # the legend goes below the axes (one line per run), so the figure grows with the runs
    fig = _figure((9, 4.5 + 0.12 * len(runs)))
    ax = fig.subplots()
    for label, history in runs.items():
        epoch = history.get("epoch") or {} if isinstance(history, Mapping) else {}
        minutes, bleu = _series(epoch, "minutes"), _series(epoch, "val_bleu")
        if len(minutes) != len(bleu) or not len(bleu):
            raise ValueError(f"{who}: run {label!r} has no matching 'minutes' and 'val_bleu' series")
        ax.plot(minutes, bleu, "o-", ms=3, label=str(label))
    ax.set_xlabel("training minutes")
    ax.set_ylabel("validation BLEU (greedy)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    return fig


# --------------------------------------------------------------------------------------------
# attention and masks
# --------------------------------------------------------------------------------------------


def _label_axes(ax: "Axes", x_labels: Optional[List[str]], y_labels: Optional[List[str]]) -> None:
    if x_labels is not None:
        ax.set_xticks(range(len(x_labels)), x_labels, rotation=90)
    if y_labels is not None:
        ax.set_yticks(range(len(y_labels)), y_labels)


def attention_heatmap(
    weights: np.ndarray,
    x_labels: Optional[Sequence[Any]] = None,
    y_labels: Optional[Sequence[Any]] = None,
    title: Optional[str] = None,
) -> "Figure":
    """Attention weights as a heat map: queries down the rows, keys along the columns.

    Args:
        weights: ``(T_q, T_k)`` for one head, or ``(heads, T_q, T_k)`` for a grid of heads (up to
            four per row) sharing one colour scale. Leading axes of size 1 (a batch of one) are
            dropped.
        x_labels: ``T_k`` labels for the keys (e.g. source tokens).
        y_labels: ``T_q`` labels for the queries (e.g. target tokens).
        title: figure title.

    Returns:
        A figure with one axes per head plus one colour bar.
    """
    who = "attention_heatmap"
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{who}: weights must be an array of numbers ({exc})") from None
    while w.ndim > 3 and w.shape[0] == 1:
        w = w[0]
    if w.ndim not in (2, 3) or w.size == 0:
        raise ValueError(f"{who}: weights must have shape (T_q, T_k) or (heads, T_q, T_k), got {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError(f"{who}: weights contain NaN or infinity")
    heads = w[None] if w.ndim == 2 else w
    n_heads, t_q, t_k = heads.shape
    xl = _labels(x_labels, t_k, "x_labels", who)
    yl = _labels(y_labels, t_q, "y_labels", who)
    ncols = min(n_heads, 4)
    nrows = math.ceil(n_heads / ncols)
    cell = 0.28 if max(t_q, t_k) <= 30 else 0.12
    width = max(3.5, min(4.5, cell * t_k + 1.5))
    height = max(3.0, min(4.5, cell * t_q + 1.2))
    fig = _figure((width * ncols + 1.0, height * nrows + (0.4 if title else 0)))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    vmax = max(float(heads.max()), 1e-12)
    vmin = min(0.0, float(heads.min()))
    for h, ax in enumerate(axes):
        if h >= n_heads:
            fig.delaxes(ax)
            continue
        image = ax.imshow(heads[h], cmap="viridis", vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
        _label_axes(ax, xl, yl)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        if n_heads > 1:
            ax.set_title(f"head {h}")
    fig.colorbar(image, ax=list(axes[:n_heads]), label="attention weight")
    if title is not None:
        if n_heads == 1:
            axes[0].set_title(title)
        else:
            fig.suptitle(title)
    return fig


def mask_plot(mask: np.ndarray, title: Optional[str] = None) -> "Figure":
    """A 2-D mask (booleans or 0/1) as black-and-white cells: 1/True dark, 0/False light.

    Args:
        mask: shape ``(rows, cols)``, e.g. a look-ahead mask ``(T, T)``; leading axes of size 1
            (``(1, 1, T, T)`` as broadcast in attention) are dropped.
        title: axes title.

    Returns:
        A figure with two axes: the mask and a two-level colour bar.
    """
    who = "mask_plot"
    m = np.asarray(mask)
    while m.ndim > 2 and m.shape[0] == 1:
        m = m[0]
    if m.ndim != 2 or m.size == 0:
        raise ValueError(f"{who}: mask must be 2-D (after dropping leading axes of size 1), got shape {np.shape(mask)}")
    if m.dtype != np.bool_:
        try:
            values = m.astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"{who}: mask must hold booleans or 0/1 values, got dtype {m.dtype}") from None
        if not np.all((values == 0) | (values == 1)):
            raise ValueError(f"{who}: mask must hold booleans or 0/1 values only")
        m = values
    m = m.astype(np.float64)
    rows, cols = m.shape

    from matplotlib.colors import ListedColormap

    fig = _figure((max(3.5, min(7.0, 0.3 * cols + 2.0)), max(3.0, min(6.5, 0.3 * rows + 1.2))))
    ax = fig.add_subplot()
    image = ax.imshow(m, cmap=ListedColormap(["#f4f4f4", "#2b2b2b"]), vmin=0, vmax=1, interpolation="nearest")
    if max(rows, cols) <= 40:  # cell borders help when cells are big enough to see
        ax.set_xticks(np.arange(-0.5, cols, 1), minor=True)
        ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
        ax.grid(which="minor", color="0.6", lw=0.5)
        ax.tick_params(which="minor", length=0)
    ax.set_xlabel("key position (column)")
    ax.set_ylabel("query position (row)")
    ax.set_title(title if title is not None else f"mask {rows} x {cols}")
    bar = fig.colorbar(image, ax=ax, ticks=[0.25, 0.75], shrink=0.6)
    bar.ax.set_yticklabels(["0 / False", "1 / True"])
    return fig
