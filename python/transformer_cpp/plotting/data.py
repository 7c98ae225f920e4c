"""The data behind the figures: NumPy arrays and numbers (the tests check these), and the
argument checks the drawing functions share."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, List, Literal, Optional, Sequence, Tuple, cast

import numpy as np

from .._checks import ANY as _ANY, integer as _integer, number as _number
from .._runtime import LAYOUT

if TYPE_CHECKING:  # pragma: no cover - only for type checkers
    from matplotlib.figure import Figure


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
