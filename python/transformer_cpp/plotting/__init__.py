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

from .data import (
    cosine_similarity_to,
    ring_coordinates,
    pair_frequencies,
    rotation_matrix,
    relative_position_error,
    learning_rate_schedule,
)
from .figures import (
    learning_rate_plot,
    history_plot,
    bleu_by_minutes_plot,
    attention_heatmap,
    mask_plot,
)
from .live import LivePlot
from .positional import (
    positional_encoding_heatmap,
    cosine_similarity_plot,
    rotating_rings_plot,
    save_positional_encoding_figures,
)

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
    "LivePlot",
    "save_positional_encoding_figures",
]
