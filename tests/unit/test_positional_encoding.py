"""transformer_cpp.positional_encoding against the formula written independently in NumPy,
plus the runtime helpers (threads, build facts, ``--version``).

Tolerances:

* float32 tables: 1e-6 absolute. The C++ code evaluates the angle and the sine in double and rounds
  once at the end; rounding a value in [-1, 1] to float32 moves it by at most 2**-25 ~ 3e-8 (half an
  ulp at magnitude 0.5..1). If the angle were computed in float32 instead, then near position 2048
  the angle (~2000 rad) would carry a rounding error of up to half an ulp of a number just below 2048,
  2**-14 ~ 6e-5, and so would the sine. 1e-6 sits well above the correct rounding and far below that mistake.
* float64 tables: 1e-10 absolute. Angles reach ~2048 rad, and ``std::pow`` / NumPy's ``power`` may
  differ in the last bit, so the angle can differ by ~2048 * 2.2e-16 ~ 5e-13 and the sine by the same;
  1e-10 leaves room for that and would still catch any float32 step.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import transformer_cpp as tc

EVEN_SIZES = [(1, 2), (3, 4), (7, 6), (50, 256), (100, 64), (2048, 512)]
ODD_DEPTHS = [(1, 1), (4, 3), (9, 7), (50, 255)]


def reference(length: int, depth: int, layout: str) -> np.ndarray:
    """The formula, in float64, with its own loop structure (one column at a time)."""
    pos = np.arange(length, dtype=np.float64)
    out = np.empty((length, depth), dtype=np.float64)
    if layout == "interleaved":
        for col in range(depth):
            i = col // 2
            angle = pos / 10000.0 ** (2.0 * i / depth)
            out[:, col] = np.sin(angle) if col % 2 == 0 else np.cos(angle)
    else:
        half = depth // 2
        for col in range(depth):
            i = col % half
            angle = pos / 10000.0 ** (i / half)
            out[:, col] = np.sin(angle) if col < half else np.cos(angle)
    return out


# ---------------------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
@pytest.mark.parametrize("length,depth", EVEN_SIZES)
def test_float32_matches_formula(length: int, depth: int, layout: str) -> None:
    pe = tc.positional_encoding(length, depth, layout=layout)
    assert pe.shape == (length, depth)
    assert pe.dtype == np.float32
    np.testing.assert_allclose(pe, reference(length, depth, layout), rtol=0, atol=1e-6)


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
@pytest.mark.parametrize("length,depth", [(3, 4), (50, 256), (2048, 512)])
def test_float64_matches_formula(length: int, depth: int, layout: str) -> None:
    pe = tc.positional_encoding(length, depth, layout=layout, dtype="float64")
    assert pe.shape == (length, depth)
    assert pe.dtype == np.float64
    np.testing.assert_allclose(pe, reference(length, depth, layout), rtol=0, atol=1e-10)


def test_float64_is_more_accurate_than_float32() -> None:
    ref = reference(2048, 512, "interleaved")
    err32 = np.abs(tc.positional_encoding(2048, 512).astype(np.float64) - ref).max()
    err64 = np.abs(tc.positional_encoding(2048, 512, dtype="float64") - ref).max()
    assert err64 < 1e-10 < err32 < 1e-6


def test_dtype_accepts_numpy_dtypes() -> None:
    assert tc.positional_encoding(2, 4, dtype=np.float64).dtype == np.float64
    assert tc.positional_encoding(2, 4, dtype=np.dtype("float32")).dtype == np.float32


def test_default_layout_is_interleaved() -> None:
    np.testing.assert_array_equal(tc.positional_encoding(10, 8), tc.positional_encoding(10, 8, layout="interleaved"))


def test_known_values() -> None:
    pe = tc.positional_encoding(2, 4, dtype="float64")
    # position 0: sin 0 = 0, cos 0 = 1 in every pair.
    np.testing.assert_array_equal(pe[0], [0.0, 1.0, 0.0, 1.0])
    # position 1, pair 0 has frequency 1; pair 1 has 1/10000^(2/4) = 1/100.
    np.testing.assert_allclose(pe[1], [np.sin(1.0), np.cos(1.0), np.sin(0.01), np.cos(0.01)], atol=1e-15)


def test_layouts_hold_the_same_numbers() -> None:
    inter = tc.positional_encoding(64, 32, layout="interleaved")
    concat = tc.positional_encoding(64, 32, layout="concatenated")
    np.testing.assert_array_equal(inter[:, 0::2], concat[:, :16])
    np.testing.assert_array_equal(inter[:, 1::2], concat[:, 16:])


@pytest.mark.parametrize("length,depth", ODD_DEPTHS)
def test_odd_depth_interleaved(length: int, depth: int) -> None:
    """An odd width is allowed in the interleaved layout: the last column is a sine with no cosine."""
    pe = tc.positional_encoding(length, depth, layout="interleaved")
    assert pe.shape == (length, depth)
    ref = reference(length, depth, "interleaved")
    np.testing.assert_allclose(pe, ref, rtol=0, atol=1e-6)
    i = depth // 2
    lone_sin = np.sin(np.arange(length) / 10000.0 ** (2.0 * i / depth))
    np.testing.assert_allclose(pe[:, -1], lone_sin, rtol=0, atol=1e-6)


def test_rows_have_constant_norm() -> None:
    pe = tc.positional_encoding(500, 128, dtype="float64")
    np.testing.assert_allclose(np.linalg.norm(pe, axis=1), np.sqrt(64), rtol=1e-12)


def test_result_is_a_fresh_writable_array() -> None:
    a = tc.positional_encoding(4, 4)
    a[:] = 7
    assert tc.positional_encoding(4, 4)[0, 0] == 0.0


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,words",
    [
        (dict(length=0, depth=4), ["length must be an integer >= 1, got 0"]),
        (dict(length=-3, depth=4), ["length must be an integer >= 1, got -3"]),
        (dict(length=4, depth=0), ["depth must be an integer >= 1, got 0"]),
        (dict(length=4, depth=-1), ["depth must be an integer >= 1, got -1"]),
        (dict(length=4, depth=5, layout="concatenated"), ["concatenated", "even"]),
        (dict(length=4, depth=4, layout="sinusoidal"), ["interleaved", "concatenated"]),
        (dict(length=4, depth=4, dtype="int32"), ["float32", "float64"]),
    ],
)
def test_bad_arguments_raise_value_error(kwargs: dict, words: list) -> None:
    with pytest.raises(ValueError) as info:
        tc.positional_encoding(**kwargs)
    message = str(info.value)
    assert "positional_encoding" in message
    for word in words:
        assert word in message, f"{word!r} missing from {message!r}"


@pytest.mark.parametrize(
    "kwargs,words",
    [
        (dict(length=2.0, depth=4), "length must be an integer >= 1, got 2.0"),
        (dict(length=4, depth=8.5), "depth must be an integer >= 1, got 8.5"),
        (dict(length=True, depth=4), "length must be an integer >= 1, got True"),
        (dict(length=4, depth=True), "depth must be an integer >= 1, got True"),
    ],
)
def test_arguments_of_the_wrong_type_raise_type_error(kwargs: dict, words: str) -> None:
    with pytest.raises(TypeError, match=f"^positional_encoding: {words}$"):
        tc.positional_encoding(**kwargs)


# ---------------------------------------------------------------------------------------------
# threads and build facts
# ---------------------------------------------------------------------------------------------


def test_num_threads_round_trip() -> None:
    before = tc.get_num_threads()
    assert isinstance(before, int) and before >= 1
    try:
        tc.set_num_threads(1)
        assert tc.get_num_threads() == 1
        tc.set_num_threads(2)
        assert tc.get_num_threads() == 2
        # results do not depend on the thread count
        tc.set_num_threads(1)
        one = tc.positional_encoding(300, 64)
        tc.set_num_threads(2)
        np.testing.assert_array_equal(one, tc.positional_encoding(300, 64))
    finally:
        tc.set_num_threads(before)
    assert tc.get_num_threads() == before


@pytest.mark.parametrize("n", [0, -2, 1.5, "2", None, True])
def test_set_num_threads_rejects_bad_values(n: object) -> None:
    before = tc.get_num_threads()
    error = ValueError if type(n) is int else TypeError  # out of range, or not an integer
    with pytest.raises(error, match=r"set_num_threads: n must be an integer >= 1, got"):
        tc.set_num_threads(n)
    assert tc.get_num_threads() == before


BUILD_KEYS = ("compiler", "flags", "openmp", "eigen_version", "simd")


def test_build_info_keys() -> None:
    info = tc.build_info()
    assert isinstance(info, dict)
    for key in BUILD_KEYS:
        assert key in info, f"build_info() lacks {key!r}"
        assert isinstance(info[key], str) and info[key].strip(), f"build_info()[{key!r}] is empty"


def test_version_command_prints_build_info() -> None:
    env = dict(os.environ, MPLBACKEND="Agg")
    result = subprocess.run(
        [sys.executable, "-m", "transformer_cpp", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert tc.__version__ in out
    info = tc.build_info()
    for key in BUILD_KEYS:
        assert key in out
        assert info[key] in out
