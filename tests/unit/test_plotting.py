"""transformer_cpp.plotting: the data behind each figure, then that each figure builds.

Pixels are not compared; the numbers the figures draw are.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.figure import Figure

import transformer_cpp as tc
from transformer_cpp import plotting as P

LAYOUTS = ["interleaved", "concatenated"]


@pytest.fixture(scope="module")
def pe_small() -> np.ndarray:
    return tc.positional_encoding(200, 64)


@pytest.fixture(scope="module")
def pe_big() -> np.ndarray:
    return tc.positional_encoding(2048, 512)


def test_import_does_not_load_pyplot() -> None:
    code = "import sys, transformer_cpp, transformer_cpp.plotting; print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------
# data functions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("position", [0, 1, 57, 199])
def test_cosine_similarity(pe_small: np.ndarray, position: int) -> None:
    sims = P.cosine_similarity_to(pe_small, position)
    assert sims.shape == (200,)
    assert sims[position] == pytest.approx(1.0, abs=1e-12)
    assert np.all(sims <= 1.0) and np.all(sims >= -1.0)
    assert np.argmax(sims) == position
    # the similarity of p to q equals that of q to p
    for other in (0, 13, 199):
        assert P.cosine_similarity_to(pe_small, other)[position] == pytest.approx(sims[other], abs=1e-12)


def test_cosine_similarity_depends_on_distance_only(pe_big: np.ndarray) -> None:
    """<PE(p), PE(q)> = sum_i cos((p - q) w_i): symmetric around the reference and shift invariant."""
    d = np.arange(1, 1001)  # 1000 - d and 1000 + d are both inside the 2048-row table
    sims = P.cosine_similarity_to(pe_big, 1000)
    np.testing.assert_allclose(sims[1000 - d], sims[1000 + d], atol=1e-6)
    np.testing.assert_allclose(P.cosine_similarity_to(pe_big, 40)[40 + d], sims[1000 + d], atol=1e-6)


def test_cosine_similarity_matches_definition() -> None:
    rng = np.random.default_rng(0)
    m = rng.normal(size=(6, 5))
    m[4] = 0.0  # a zero row has similarity 0
    sims = P.cosine_similarity_to(m, 2)
    for q in range(6):
        expected = 0.0 if q == 4 else m[2] @ m[q] / (np.linalg.norm(m[2]) * np.linalg.norm(m[q]))
        assert sims[q] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_ring_coordinates_lie_on_unit_circles(layout: str) -> None:
    pe = tc.positional_encoding(300, 128, layout=layout)
    omega = P.pair_frequencies(128)
    for pos in (0, 1, 17, 299):
        sin, cos = P.ring_coordinates(pe[pos], layout=layout)
        assert sin.shape == cos.shape == (64,)
        np.testing.assert_allclose(sin**2 + cos**2, 1.0, atol=1e-6)
        np.testing.assert_allclose(sin, np.sin(pos * omega), atol=1e-6)
        np.testing.assert_allclose(cos, np.cos(pos * omega), atol=1e-6)


def test_ring_coordinates_odd_interleaved_drops_lone_sine() -> None:
    pe = tc.positional_encoding(5, 7)
    sin, cos = P.ring_coordinates(pe[3])
    assert sin.shape == cos.shape == (3,)
    np.testing.assert_array_equal(sin, pe[3, [0, 2, 4]])
    np.testing.assert_array_equal(cos, pe[3, [1, 3, 5]])


def test_pair_frequencies() -> None:
    omega = P.pair_frequencies(512)
    assert omega.shape == (256,)
    assert omega[0] == 1.0
    np.testing.assert_allclose(omega, 10000.0 ** (-2.0 * np.arange(256) / 512), rtol=1e-14)
    assert np.all(np.diff(omega) < 0)
    assert omega[-1] > 1e-4
    assert P.pair_frequencies(7).shape == (3,)


@pytest.mark.parametrize("k,w", [(0, 1.0), (1, 1.0), (5, 0.1), (-3, 0.5), (17.5, 0.01)])
def test_rotation_matrix(k: float, w: float) -> None:
    r = P.rotation_matrix(k, w)
    assert r.shape == (2, 2)
    np.testing.assert_allclose(r @ r.T, np.eye(2), atol=1e-15)  # orthogonal
    assert np.linalg.det(r) == pytest.approx(1.0)  # a rotation, not a reflection
    a = 0.731
    np.testing.assert_allclose(r @ [np.sin(a), np.cos(a)], [np.sin(a + k * w), np.cos(a + k * w)], atol=1e-14)
    # R(j) R(k) = R(j + k)
    np.testing.assert_allclose(P.rotation_matrix(2, w) @ r, P.rotation_matrix(k + 2, w), atol=1e-14)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("k", [1, 2, 7, 50, 333, 1000, 2047, -5])
def test_relative_position_error_is_small(pe_big: np.ndarray, layout: str, k: int) -> None:
    pe = pe_big if layout == "interleaved" else tc.positional_encoding(2048, 512, layout=layout)
    assert P.relative_position_error(pe, k, layout=layout) < 1e-5


@pytest.mark.parametrize("layout", LAYOUTS)
def test_relative_position_error_float64(layout: str) -> None:
    pe = tc.positional_encoding(1000, 64, layout=layout, dtype="float64")
    for k in (1, 10, 999):
        assert P.relative_position_error(pe, k, layout=layout) < 1e-10


def test_relative_position_error_detects_wrong_layout_or_table() -> None:
    pe = tc.positional_encoding(100, 32, layout="concatenated")
    assert P.relative_position_error(pe, 3, layout="interleaved") > 0.1
    noisy = tc.positional_encoding(100, 32) + np.random.default_rng(0).normal(0, 1e-3, (100, 32))
    assert P.relative_position_error(noisy, 3) > 1e-4
    assert P.relative_position_error(tc.positional_encoding(10, 7), 2) < 1e-5  # odd interleaved


@pytest.mark.parametrize("d_model,warmup", [(512, 4000), (128, 100), (64, 1)])
def test_learning_rate_schedule(d_model: int, warmup: int) -> None:
    lr = P.learning_rate_schedule(d_model, warmup=warmup, steps=3 * warmup + 10)
    assert lr.shape == (3 * warmup + 10,)
    assert int(np.argmax(lr)) == warmup - 1  # entry j is step j + 1
    assert lr.max() == pytest.approx(d_model**-0.5 * warmup**-0.5, rel=1e-12)
    step = np.arange(1, lr.size + 1)
    expected = d_model**-0.5 * np.minimum(step**-0.5, step * warmup**-1.5)
    np.testing.assert_allclose(lr, expected, rtol=1e-12)
    assert lr[0] == pytest.approx(d_model**-0.5 * warmup**-1.5)


def test_learning_rate_schedule_default_warmup() -> None:
    lr = P.learning_rate_schedule(512, steps=10000)
    assert int(np.argmax(lr)) == 3999


# ---------------------------------------------------------------------------------------------
# bad arguments
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda pe: P.cosine_similarity_to(pe, 200), "out of range"),
        (lambda pe: P.cosine_similarity_to(pe, -1), "out of range"),
        (lambda pe: P.cosine_similarity_to(pe[0], 0), "2-D"),
        (lambda pe: P.ring_coordinates(pe, "interleaved"), "1-D"),
        (lambda pe: P.ring_coordinates(pe[0], "rows"), "layout must be 'interleaved' or 'concatenated', got 'rows'"),
        (lambda pe: P.ring_coordinates(np.ones(5), "concatenated"), "even depth"),
        (lambda pe: P.pair_frequencies(1), ">= 2"),
        (lambda pe: P.rotation_matrix(np.nan, 1.0), "finite"),
        (lambda pe: P.relative_position_error(pe, 200), "smaller than"),
        (lambda pe: P.relative_position_error(pe, 2, layout="x"), "layout must be 'interleaved' or 'concatenated'"),
        (lambda pe: P.learning_rate_schedule(0), ">= 1"),
        (lambda pe: P.learning_rate_schedule(512, warmup=0), ">= 1"),
        (lambda pe: P.positional_encoding_heatmap(pe, position_axis="z"), "'x' or 'y'"),
        (lambda pe: P.positional_encoding_heatmap(np.full((3, 4), np.nan)), "NaN"),
        (lambda pe: P.cosine_similarity_plot(pe), "out of range"),
        (lambda pe: P.cosine_similarity_plot(pe, position=100, zoom=(90, 80)), "first < last"),
        (lambda pe: P.cosine_similarity_plot(pe, position=100, zoom=(90, 500)), "out of range"),
        (lambda pe: P.rotating_rings_plot(pe, positions=(1, 500)), "out of range"),
        (lambda pe: P.rotating_rings_plot(pe, positions=()), "between 1 and 8"),
        (lambda pe: P.attention_heatmap(np.ones(4)), r"\(T_q, T_k\)"),
        (lambda pe: P.attention_heatmap(np.ones((2, 3)), x_labels=["a"]), "x_labels has 1"),
        (lambda pe: P.mask_plot(np.full((3, 3), 0.5)), "0/1"),
        (lambda pe: P.mask_plot(np.ones((2, 3, 3))), "2-D"),
        (lambda pe: P.history_plot([1, 2]), "dict"),
        (lambda pe: P.save_positional_encoding_figures(42), "path"),
    ],
)
def test_bad_arguments_raise_value_error(pe_small: np.ndarray, call, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call(pe_small)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda pe: P.cosine_similarity_to(pe, 1.0), "cosine_similarity_to: position must be an integer, got 1.0"),
        (lambda pe: P.learning_rate_schedule(512, steps=2.5), "steps must be an integer >= 1, got 2.5"),
        (lambda pe: P.positional_encoding_heatmap(pe, position_axis=0), "position_axis must be 'x' or 'y', got 0"),
    ],
)
def test_arguments_of_the_wrong_type_raise_type_error(pe_small: np.ndarray, call, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        call(pe_small)


def test_save_refuses_a_file_as_directory(tmp_path) -> None:
    target = tmp_path / "file.txt"
    target.write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        P.save_positional_encoding_figures(target)


# ---------------------------------------------------------------------------------------------
# figures: each returns a Figure with the expected number of axes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("position_axis", ["x", "y"])
def test_positional_encoding_heatmap(pe_small: np.ndarray, position_axis: str) -> None:
    fig = P.positional_encoding_heatmap(pe_small, position_axis=position_axis, title="t")
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2  # the map and its colour bar
    ax = fig.axes[0]
    assert ax.get_title() == "t"
    assert "position" in (ax.get_xlabel() if position_axis == "x" else ax.get_ylabel())
    image = ax.get_images()[0].get_array()
    assert image.shape == ((64, 200) if position_axis == "x" else (200, 64))


def test_cosine_similarity_plot(pe_big: np.ndarray) -> None:
    fig = P.cosine_similarity_plot(pe_big, position=1000, zoom=(950, 1050))
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2
    x, y = fig.axes[1].get_lines()[0].get_data()
    np.testing.assert_array_equal(x, np.arange(950, 1051))
    np.testing.assert_allclose(y, P.cosine_similarity_to(pe_big, 1000)[950:1051])
    assert len(P.cosine_similarity_plot(pe_big, zoom=None).axes) == 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rotating_rings_plot(layout: str) -> None:
    pe = tc.positional_encoding(128, 16, layout=layout)
    fig = P.rotating_rings_plot(pe, positions=(1, 10, 100), layout=layout)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 3
    assert all(ax.name == "3d" for ax in fig.axes)
    assert len(P.rotating_rings_plot(pe, layout=layout).axes) == 3  # default: 1, 10, 100 fit in 128


def test_learning_rate_plot() -> None:
    fig = P.learning_rate_plot(512, 4000, 12000)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 1
    x, y = fig.axes[0].get_lines()[0].get_data()
    np.testing.assert_allclose(y, P.learning_rate_schedule(512, 4000, 12000))
    assert len(P.learning_rate_plot([128, 512], 100, 500).axes[0].get_lines()) == 3  # 2 curves + warmup line


def test_attention_heatmap_single_and_heads() -> None:
    rng = np.random.default_rng(0)
    w = rng.random((5, 7))
    w /= w.sum(-1, keepdims=True)
    fig = P.attention_heatmap(w, x_labels=list("abcdefg"), y_labels=list("vwxyz"), title="attn")
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2  # map + colour bar
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == list("abcdefg")
    heads = rng.random((6, 5, 7))
    fig = P.attention_heatmap(heads, title="six heads")
    assert len(fig.axes) == 6 + 1  # one per head (unused grid cells removed) + colour bar
    assert len(P.attention_heatmap(heads[None]).axes) == 7  # a batch of one is accepted


def test_mask_plot() -> None:
    look_ahead = np.triu(np.ones((6, 6), dtype=bool), k=1)
    fig = P.mask_plot(look_ahead, title="look-ahead")
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2
    np.testing.assert_array_equal(fig.axes[0].get_images()[0].get_array(), look_ahead.astype(float))
    assert len(P.mask_plot(look_ahead.astype(np.float32)[None, None]).axes) == 2


HISTORY = {
    "batch": {
        "step": [1, 2, 3, 4, 5, 6],
        "loss": [5.0, 4.0, 3.5, 3.0, 2.8, 2.5],
        "accuracy": [0.1, 0.2, 0.25, 0.3, 0.33, 0.4],
        "lr": [1e-4, 2e-4, 3e-4, 4e-4, 5e-4, 6e-4],
    },
    "epoch": {
        "epoch": [1, 2],
        "loss": [4.2, 2.8],
        "accuracy": [0.2, 0.35],
        "val_loss": [3.9, 3.0],
        "val_accuracy": [0.22, 0.3],
    },
}


@pytest.mark.parametrize(
    "history",
    [
        HISTORY,
        {"batch": HISTORY["batch"]},
        {"epoch": HISTORY["epoch"]},
        {"batch": {"step": [], "loss": []}, "epoch": {}},
        {},
        {"batch": {"loss": [3.0, 2.0]}, "epoch": {"epoch": [1], "val_loss": [2.5]}},
    ],
    ids=["full", "batch-only", "epoch-only", "empty-lists", "empty", "partial"],
)
def test_history_plot(history: dict) -> None:
    fig = P.history_plot(history)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 4
    assert [ax.get_title() for ax in fig.axes] == ["loss", "accuracy", "learning rate", "validation BLEU"]


def test_history_plot_draws_the_numbers() -> None:
    fig = P.history_plot(HISTORY)
    loss_ax, acc_ax, lr_ax, bleu_ax = fig.axes
    x, y = loss_ax.get_lines()[0].get_data()
    np.testing.assert_array_equal(x, HISTORY["batch"]["step"])
    np.testing.assert_array_equal(y, HISTORY["batch"]["loss"])
    assert len(loss_ax.get_lines()) == 3  # batch, epoch train, epoch validation
    np.testing.assert_array_equal(lr_ax.get_lines()[0].get_data()[1], HISTORY["batch"]["lr"])
    assert not bleu_ax.get_lines()  # HISTORY has no validation BLEU
    with_bleu = {"epoch": {"epoch": [1, 2], "val_bleu": [10.0, 20.0], "minutes": [1.5, 3.0]}}
    np.testing.assert_array_equal(P.history_plot(with_bleu).axes[3].get_lines()[0].get_data()[1], [10.0, 20.0])
    fig = P.bleu_by_minutes_plot({"a": with_bleu, "b": with_bleu})
    assert len(fig.axes[0].get_lines()) == 2
    np.testing.assert_array_equal(fig.axes[0].get_lines()[0].get_data()[0], [1.5, 3.0])
    with pytest.raises(ValueError, match="no matching 'minutes' and 'val_bleu'"):
        P.bleu_by_minutes_plot({"a": HISTORY})


def test_figures_render_to_png(pe_small: np.ndarray, tmp_path) -> None:
    """Drawing actually works (Agg canvas), not only building the artists."""
    figs = [
        P.positional_encoding_heatmap(pe_small),
        P.rotating_rings_plot(pe_small, positions=(3,)),
        P.attention_heatmap(np.eye(4)),
        P.mask_plot(np.eye(4)),
        P.history_plot(HISTORY),
        P.learning_rate_plot(64, 10, 50),
    ]
    for i, fig in enumerate(figs):
        path = tmp_path / f"{i}.png"
        fig.savefig(path, dpi=40)
        assert path.stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# saving and the command line
# ---------------------------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_save_positional_encoding_figures(tmp_path) -> None:
    out = tmp_path / "new" / "figs"
    paths = P.save_positional_encoding_figures(out)
    assert len(paths) == 4
    assert len({p.name for p in paths}) == 4
    for path in paths:
        assert path.parent == out
        assert path.suffix == ".png"
        data = path.read_bytes()
        assert len(data) > 1000 and data.startswith(PNG_MAGIC)
    assert P.save_positional_encoding_figures(str(out)) == paths  # str accepted, overwrite is fine


def test_cli_figures(tmp_path) -> None:
    out = tmp_path / "cli-figs"
    env = dict(os.environ, MPLBACKEND="Agg")
    result = subprocess.run(
        [sys.executable, "-m", "transformer_cpp", "figures", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 4
    assert all(p.stat().st_size > 0 for p in pngs)
    for p in pngs:
        assert str(p) in result.stdout
