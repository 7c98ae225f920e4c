"""The positional-encoding figures of the paper's section 3.5 and the file writer that saves them."""

from __future__ import annotations

import math
import os
import pathlib
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

import numpy as np

from .._checks import choice as _choice, path as _path
from .._runtime import positional_encoding
from .data import _figure, _layout, _matrix, _pairs, _position, cosine_similarity_to

if TYPE_CHECKING:  # pragma: no cover - only for type checkers
    from matplotlib.figure import Figure


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
