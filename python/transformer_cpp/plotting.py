"""Figures for the positional encoding, attention, masks, the learning-rate schedule and training.

The module is split in two halves:

* **data functions** (``cosine_similarity_to``, ``ring_coordinates``, ``rotation_matrix``,
  ``pair_frequencies``, ``relative_position_error``, ``learning_rate_schedule``) return NumPy
  arrays or numbers; the tests check these.
* **drawing functions** return a :class:`matplotlib.figure.Figure`. They build figures with the
  object-oriented API (``matplotlib.figure.Figure``), never touch ``pyplot`` and never call
  ``show``: in Jupyter a figure displays when it is the value of a cell (after
  ``%matplotlib inline``), elsewhere call ``fig.savefig(path)``.

Matplotlib is imported only inside the drawing functions, so ``import transformer_cpp`` stays light.

Sin/cos pairs
-------------
Both layouts of :func:`transformer_cpp.positional_encoding` hold ``depth // 2`` pairs
``(sin(pos * w_i), cos(pos * w_i))`` with frequency ``w_i = 1 / 10000**(2i / depth)``:

* ``"interleaved"`` (paper, PyTorch): pair ``i`` is columns ``(2i, 2i+1)``; an odd depth leaves
  a last lone sin column that belongs to no pair.
* ``"concatenated"`` (TensorFlow tutorial): pair ``i`` is columns ``(i, depth/2 + i)``.
"""

from __future__ import annotations

import math
import numbers
import os
import pathlib
from typing import TYPE_CHECKING, Any, List, Literal, Mapping, Optional, Sequence, Tuple, Union, cast

import numpy as np

from ._checks import ANY as _ANY, choice as _choice, integer as _integer, number as _number, path as _path
from ._runtime import LAYOUT, positional_encoding

if TYPE_CHECKING:  # pragma: no cover - only for type checkers
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    # data
    "cosine_similarity_to",
    "ring_coordinates",
    "rotation_matrix",
    "pair_frequencies",
    "relative_position_error",
    "learning_rate_schedule",
    # figures
    "positional_encoding_heatmap",
    "cosine_similarity_plot",
    "rotating_rings_plot",
    "learning_rate_plot",
    "attention_heatmap",
    "mask_plot",
    "history_plot",
    "bleu_by_minutes_plot",
    "save_positional_encoding_figures",
]


# --------------------------------------------------------------------------------------------
# argument checks
# --------------------------------------------------------------------------------------------


def _layout(layout: object, who: str) -> str:
    return str(LAYOUT.check(who, "layout", layout))


def _matrix(array: object, name: str, who: str) -> np.ndarray:
    """A non-empty, finite 2-D float64 array."""
    try:
        out = np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{who}: {name} must be a 2-D array of numbers ({exc})") from None
    if out.ndim != 2:
        raise ValueError(f"{who}: {name} must be a 2-D array (positions, depth), got shape {out.shape}")
    if out.size == 0:
        raise ValueError(f"{who}: {name} is empty (shape {out.shape})")
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{who}: {name} contains NaN or infinity")
    return out


def _position(position: object, length: int, who: str, name: str = "position") -> int:
    position = _integer(who, name, position, _ANY)
    if not 0 <= position < length:
        raise ValueError(f"{who}: {name} {position} is out of range; the encoding has positions 0..{length - 1}")
    return position


def _pairs(pe: np.ndarray, layout: str, who: str) -> Tuple[np.ndarray, np.ndarray]:
    """Split an encoding ``(..., depth)`` into its sin and cos halves ``(..., depth // 2)`` each."""
    depth = pe.shape[-1]
    if depth < 2:
        raise ValueError(f"{who}: depth must be >= 2 to hold a sin/cos pair, got {depth}")
    if layout == "interleaved":
        half = depth // 2  # an odd depth leaves a lone sin column at the end: not a pair
        return pe[..., 0 : 2 * half : 2], pe[..., 1 : 2 * half : 2]
    if depth % 2:
        raise ValueError(f"{who}: the 'concatenated' layout needs an even depth, got {depth}")
    half = depth // 2
    return pe[..., :half], pe[..., half:]


# --------------------------------------------------------------------------------------------
# data functions
# --------------------------------------------------------------------------------------------


def cosine_similarity_to(pe: np.ndarray, position: int) -> np.ndarray:
    """Cosine similarity between row ``position`` of ``pe`` and every row.

    Args:
        pe: a positional encoding (or any matrix) of shape ``(length, depth)``.
        position: the reference row, ``0 <= position < length``.

    Returns:
        float64 array of shape ``(length,)``; entry ``p`` is
        ``<pe[position], pe[p]> / (|pe[position]| |pe[p]|)``, so it is 1 at ``position`` and lies
        in ``[-1, 1]``. A zero row has similarity 0 with everything.
    """
    who = "cosine_similarity_to"
    pe = _matrix(pe, "pe", who)
    position = _position(position, pe.shape[0], who)
    norms = np.linalg.norm(pe, axis=1)  # (length,)
    dots = pe @ pe[position]  # (length,)
    denom = norms * norms[position]
    sims = np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)
    return cast(np.ndarray, np.clip(sims, -1.0, 1.0))


def ring_coordinates(pe_row: np.ndarray, layout: str = "interleaved") -> Tuple[np.ndarray, np.ndarray]:
    """The ``depth // 2`` sin/cos pairs of one position.

    Args:
        pe_row: one row of a positional encoding, shape ``(depth,)``.
        layout: how the row stores its pairs, ``"interleaved"`` or ``"concatenated"``.

    Returns:
        ``(sin, cos)``, two float64 arrays of shape ``(depth // 2,)``. Point ``i`` is
        ``(cos[i], sin[i])`` on the unit circle, at angle ``pos * w_i`` from the x axis.
    """
    who = "ring_coordinates"
    layout = _layout(layout, who)
    row = np.asarray(pe_row, dtype=np.float64)
    if row.ndim != 1:
        raise ValueError(f"{who}: pe_row must be 1-D (one row of the encoding), got shape {row.shape}")
    sin, cos = _pairs(row, layout, who)
    return sin.copy(), cos.copy()


def pair_frequencies(depth: int) -> np.ndarray:
    """Angular frequency of each sin/cos pair: ``w_i = 1 / 10000**(2i / depth)``, ``i < depth // 2``.

    The same numbers serve both layouts: the concatenated layout writes its exponent as
    ``i / (depth/2)``, which equals ``2i / depth``.

    Returns:
        float64 array of shape ``(depth // 2,)``, from ``w_0 = 1`` (one radian per position) down
        to almost ``1/10000``.
    """
    depth = _integer("pair_frequencies", "depth", depth, 2)
    i = np.arange(depth // 2, dtype=np.float64)
    return 1.0 / np.power(10000.0, 2.0 * i / depth)


def rotation_matrix(k: float, frequency: float) -> np.ndarray:
    """The 2x2 matrix that moves a ``[sin, cos]`` pair ``k`` positions forward.

    With ``theta = k * frequency``::

        R(k) = [[ cos(theta), sin(theta)],
                [-sin(theta), cos(theta)]]

    Why this orientation: the angle-addition formulas give
    ``sin(a + theta) = cos(theta) sin(a) + sin(theta) cos(a)`` and
    ``cos(a + theta) = -sin(theta) sin(a) + cos(theta) cos(a)``; reading off the coefficients of
    ``(sin(a), cos(a))`` row by row gives the matrix above. It is the transpose of the textbook
    counter-clockwise rotation because the vector lists the sine (the y coordinate) *before* the
    cosine (the x coordinate); swapping the two axes turns a counter-clockwise turn into a
    clockwise one. In the ``(x=cos, y=sin)`` picture of :func:`rotating_rings_plot` the point
    still turns counter-clockwise by ``theta``. The matrix depends on ``k`` and the frequency
    only, never on the position ``pos`` it is applied at.

    Returns:
        float64 array of shape ``(2, 2)``.
    """
    k = _number("rotation_matrix", "k", k, -math.inf)
    frequency = _number("rotation_matrix", "frequency", frequency, -math.inf)
    theta = k * frequency
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, s], [-s, c]], dtype=np.float64)


def relative_position_error(pe: np.ndarray, k: int, layout: str = "interleaved") -> float:
    """How far the encoding is from ``PE(pos + k) = R(k) PE(pos)`` for every sin/cos pair.

    For every position ``pos`` with ``pos + k`` in range and every pair ``i``, rotate
    ``[sin, cos](pos)`` by :func:`rotation_matrix` ``(k, w_i)`` and compare with
    ``[sin, cos](pos + k)``.

    Args:
        pe: encoding of shape ``(length, depth)`` (``depth >= 2``) built with the given layout and
            the frequencies of :func:`pair_frequencies`.
        k: the offset; ``|k| < length`` (a negative ``k`` moves backwards).
        layout: ``"interleaved"`` or ``"concatenated"``.

    Returns:
        The largest absolute difference over all positions, pairs and both components. For a
        float32 encoding it is a few 1e-7 (rounding of the table), for float64 about 1e-13.
    """
    who = "relative_position_error"
    layout = _layout(layout, who)
    pe = _matrix(pe, "pe", who)
    length, depth = pe.shape
    k = _integer(who, "k", k, _ANY)
    if abs(k) >= length:
        raise ValueError(f"{who}: |k| must be smaller than the number of positions {length}, got k={k}")
    sin, cos = _pairs(pe, layout, who)  # (length, P) each
    omega = pair_frequencies(depth)  # (P,)
    src = slice(max(0, -k), length - max(0, k))  # positions pos with pos + k in range
    dst = slice(max(0, k), length - max(0, -k))
    theta = k * omega
    c, s = np.cos(theta), np.sin(theta)
    # R(k) @ [sin, cos] written out for every pair at once.
    sin_pred = c * sin[src] + s * cos[src]
    cos_pred = -s * sin[src] + c * cos[src]
    err = np.maximum(np.abs(sin_pred - sin[dst]), np.abs(cos_pred - cos[dst]))
    return float(err.max())


def learning_rate_schedule(d_model: int, warmup: int = 4000, steps: int = 20000) -> np.ndarray:
    """The warm-up schedule of the paper: ``lr = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)``.

    The rate grows linearly for ``warmup`` steps, peaks at ``step == warmup`` with value
    ``(d_model * warmup)**-0.5``, then decays like ``1/sqrt(step)``.

    Returns:
        float64 array of shape ``(steps,)``; entry ``j`` is the rate at step ``j + 1`` (steps count
        from 1).
    """
    who = "learning_rate_schedule"
    d_model = _integer(who, "d_model", d_model, 1)
    warmup = _integer(who, "warmup", warmup, 1)
    steps = _integer(who, "steps", steps, 1)
    step = np.arange(1, steps + 1, dtype=np.float64)
    return cast(np.ndarray, d_model**-0.5 * np.minimum(step**-0.5, step * warmup**-1.5))


# --------------------------------------------------------------------------------------------
# drawing helpers
# --------------------------------------------------------------------------------------------


def _figure(
    figsize: Tuple[float, float], layout: Optional[Literal["constrained", "compressed", "tight"]] = "constrained"
) -> "Figure":
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout=layout)


def _labels(labels: Optional[Sequence[Any]], n: int, name: str, who: str) -> Optional[List[str]]:
    if labels is None:
        return None
    labels = [str(x) for x in labels]
    if len(labels) != n:
        raise ValueError(f"{who}: {name} has {len(labels)} entries but the matrix has {n} along that axis")
    return labels


# --------------------------------------------------------------------------------------------
# positional-encoding figures
# --------------------------------------------------------------------------------------------


def positional_encoding_heatmap(
    pe: np.ndarray, position_axis: str = "x", cmap: str = "RdBu", title: Optional[str] = None
) -> "Figure":
    """Heat map of an encoding ``(length, depth)`` with a colour bar (values in ``[-1, 1]``).

    Args:
        pe: the encoding, shape ``(length, depth)``.
        position_axis: ``"x"`` puts positions along the x axis and depth up the y axis (the
            usual 2048 x 512 picture); ``"y"`` draws one row per token, position 0 at the top.
        cmap: a Matplotlib colour map name.
        title: figure title; a default naming the shape is used when ``None``.

    Returns:
        A figure with two axes: the map and its colour bar.
    """
    who = "positional_encoding_heatmap"
    pe = _matrix(pe, "pe", who)
    position_axis = _choice(who, "position_axis", position_axis, ("x", "y"))
    length, depth = pe.shape
    if position_axis == "x":
        fig = _figure((10, 4.5))
        ax = fig.add_subplot()
        image = ax.imshow(
            pe.T,
            aspect="auto",
            origin="lower",
            cmap=cmap,
            vmin=-1,
            vmax=1,
            extent=(-0.5, length - 0.5, -0.5, depth - 0.5),
        )
        ax.set_xlabel("position")
        ax.set_ylabel("depth (column of the encoding)")
    else:
        fig = _figure((9, 5))
        ax = fig.add_subplot()
        image = ax.imshow(pe, aspect="auto", origin="upper", cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
        ax.set_xlabel("depth (column of the encoding)")
        ax.set_ylabel("position (token)")
    ax.set_title(title if title is not None else f"Positional encoding, {length} positions x {depth} dimensions")
    fig.colorbar(image, ax=ax, label="value")
    return fig


def cosine_similarity_plot(
    pe: np.ndarray, position: int = 1000, zoom: Optional[Tuple[int, int]] = (950, 1050)
) -> "Figure":
    """Cosine similarity between ``pe[position]`` and every row: full range and a zoomed panel.

    Args:
        pe: encoding of shape ``(length, depth)`` with ``position < length``.
        position: the reference position.
        zoom: inclusive range ``(first, last)`` of positions for the second panel, inside the
            table; ``None`` draws only the full range.

    Returns:
        A figure with two axes (one when ``zoom`` is ``None``).
    """
    who = "cosine_similarity_plot"
    pe = _matrix(pe, "pe", who)
    length = pe.shape[0]
    sims = cosine_similarity_to(pe, position)
    if zoom is not None:
        if len(zoom) != 2:
            raise ValueError(f"{who}: zoom must be a pair (first, last) or None, got {zoom!r}")
        lo = _position(zoom[0], length, who, "zoom start")
        hi = _position(zoom[1], length, who, "zoom end")
        if lo >= hi:
            raise ValueError(f"{who}: zoom must satisfy first < last, got {zoom!r}")
    fig = _figure((11, 4) if zoom is not None else (7, 4))
    panels = fig.subplots(1, 2 if zoom is not None else 1, squeeze=False)[0]
    positions = np.arange(length)
    ax = panels[0]
    ax.plot(positions, sims, lw=0.8)
    ax.axvline(position, color="tab:red", lw=0.8, ls="--", label=f"position {position}")
    ax.set_xlabel("position")
    ax.set_ylabel("cosine similarity")
    ax.set_title(f"Similarity to position {position}")
    ax.legend(loc="lower right")
    if zoom is not None:
        ax.axvspan(lo, hi, color="tab:orange", alpha=0.2, lw=0)
        ax = panels[1]
        window = slice(lo, hi + 1)
        ax.plot(positions[window], sims[window], marker=".", ms=3, lw=0.8, color="tab:orange")
        ax.axvline(position, color="tab:red", lw=0.8, ls="--")
        ax.set_xlabel("position")
        ax.set_title(f"Zoom on positions {lo}-{hi}")
    return fig


def rotating_rings_plot(
    pe: np.ndarray, positions: Optional[Sequence[int]] = None, layout: str = "interleaved"
) -> "Figure":
    """The sin/cos pairs of a few positions as points on stacked unit circles in 3-D.

    For each position, pair ``i`` is drawn at ``(x, y, z) = (cos, sin, i)``: a point on the unit
    circle lying at height ``i``. Moving one position forward turns the point on ring ``i`` by
    ``w_i`` radians, so the low rings spin quickly and the deep ones hardly move; comparing the
    panels shows this. Each point is joined to the axis of the stack like the hand of a clock.

    Args:
        pe: encoding of shape ``(length, depth)`` built with ``layout``.
        positions: positions to draw, one subplot each (at most 8). ``None`` picks the powers of
            ten 1, 10, 100, 1000 that fit in the table.
        layout: ``"interleaved"`` or ``"concatenated"``.

    Returns:
        A figure with one 3-D axes per position.
    """
    who = "rotating_rings_plot"
    layout = _layout(layout, who)
    pe = _matrix(pe, "pe", who)
    length = pe.shape[0]
    if positions is None:
        positions = [p for p in (1, 10, 100, 1000) if p < length] or [length - 1]
    positions = [_position(p, length, who) for p in positions]
    if not 1 <= len(positions) <= 8:
        raise ValueError(f"{who}: give between 1 and 8 positions, got {len(positions)}")
    sin, cos = _pairs(pe, layout, who)  # (length, P) each; validates depth/layout
    n_pairs = sin.shape[1]

    from matplotlib import colormaps

    n = len(positions)
    ncols = n if n <= 3 else math.ceil(n / 2)
    nrows = math.ceil(n / ncols)
    fig = _figure((4.6 * ncols, 4.4 * nrows), layout=None)
    t = np.linspace(0.0, 2.0 * np.pi, 73)
    guide = range(0, n_pairs, max(1, math.ceil(n_pairs / 32)))  # at most 32 guide circles
    colors = colormaps["viridis"](np.linspace(0.0, 1.0, n_pairs))
    z = np.arange(n_pairs, dtype=np.float64)
    for j, pos in enumerate(positions):
        ax = fig.add_subplot(nrows, ncols, j + 1, projection="3d")
        for i in guide:
            ax.plot(np.cos(t), np.sin(t), np.full_like(t, i), color="0.8", lw=0.5)
        # a "clock hand" from the axis of the stack to the point on each ring
        for i in range(n_pairs):
            ax.plot([0.0, cos[pos, i]], [0.0, sin[pos, i]], [z[i], z[i]], color=colors[i], lw=0.7)
        ax.scatter(cos[pos], sin[pos], z, c=colors, s=12, depthshade=False)
        ax.set_xlim(-1.1, 1.1)
        ax.set_ylim(-1.1, 1.1)
        ax.set_zlim(0, max(n_pairs - 1, 1))
        ax.set_xlabel("cos")
        ax.set_ylabel("sin")
        ax.set_zlabel("pair i")
        ax.set_title(f"position {pos}")
        ax.view_init(elev=22, azim=-60)
    fig.suptitle(f"Sin/cos pairs of one position on {n_pairs} unit circles ({layout} layout)")
    fig.subplots_adjust(left=0.02, right=0.96, bottom=0.04, top=0.9, wspace=0.1, hspace=0.15)
    return fig


def save_positional_encoding_figures(out_dir: Union[str, os.PathLike[str]]) -> List[pathlib.Path]:
    """Render the positional-encoding figures to PNG files in ``out_dir`` (created if needed).

    Files: ``pe_heatmap_2048x512.png`` (depth on y, position on x), ``pe_cosine_similarity.png``
    (position 1000, zoom 950-1050), ``pe_tokens_50x256.png`` (one row per token) and
    ``pe_rotating_rings.png`` (positions 1, 10, 100, 1000 of a 2048 x 64 table). This is what
    ``transformer-cpp figures --out DIR`` runs. The files are marked as this program's (their PNG
    ``Software`` text); a file of one of these names that is not such a figure is never replaced
    (``FileExistsError`` naming it, before anything is drawn).

    Returns:
        The paths written, in that order.
    """
    who = "save_positional_encoding_figures"
    if not isinstance(out_dir, (str, os.PathLike)):  # (this module raises ValueError for every bad argument)
        raise ValueError(f"{who}: out_dir must be a path (str or os.PathLike), got {out_dir!r}")
    out = _path(f"{who}: out_dir", out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{who}: {str(out)!r} exists and is not a directory")
    names = ("pe_heatmap_2048x512.png", "pe_cosine_similarity.png", "pe_tokens_50x256.png", "pe_rotating_rings.png")
    for name in names:  # a file is written again only when it is one of these figures
        if (out / name).exists() or (out / name).is_symlink():
            reason = _not_our_figure(out / name)
            if reason is not None:
                raise FileExistsError(
                    f"{who}: '{out / name}' was not written by transformer-cpp ({reason}); it is left as it is: "
                    "move it elsewhere, or choose another output directory"
                )
    out.mkdir(parents=True, exist_ok=True)

    pe_big = positional_encoding(2048, 512)
    figures = zip(
        names,
        (
            positional_encoding_heatmap(pe_big, position_axis="x"),
            cosine_similarity_plot(pe_big, position=1000, zoom=(950, 1050)),
            positional_encoding_heatmap(positional_encoding(50, 256), position_axis="y"),
            rotating_rings_plot(positional_encoding(2048, 64), positions=(1, 10, 100, 1000)),
        ),
    )
    paths: List[pathlib.Path] = []
    for name, fig in figures:
        path = out / name
        fig.savefig(path, dpi=110, metadata={"Software": _SOFTWARE})
        paths.append(path)
    return paths


#: What the PNG files this module writes say in their ``Software`` text: the mark by which a figure
#: is recognised as this program's (and so may be written again).
_SOFTWARE = "transformer-cpp"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _not_our_figure(path: pathlib.Path) -> Optional[str]:
    """Why the existing ``path`` is not a PNG file this module wrote, or None when it is one (its
    ``Software`` text, a ``tEXt`` chunk before the image data, is :data:`_SOFTWARE`)."""
    if path.is_symlink():
        return "it is a symbolic link"
    if not path.is_file():
        return "it is not a regular file"
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)  # the text chunks come before the image data
    except OSError as exc:
        return f"it cannot be read: {exc.strerror or exc}"
    if not head.startswith(_PNG_SIGNATURE):
        return "it is not a PNG file"
    at = len(_PNG_SIGNATURE)
    while at + 8 <= len(head):
        size = int.from_bytes(head[at : at + 4], "big")
        kind = head[at + 4 : at + 8]
        if kind in (b"IDAT", b"IEND"):
            break
        if kind == b"tEXt":
            keyword, _, text = head[at + 8 : at + 8 + size].partition(b"\0")
            if keyword == b"Software" and text.decode("latin-1").startswith(_SOFTWARE):
                return None
        at += 12 + size
    return "it is a PNG file that transformer-cpp did not make"


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
