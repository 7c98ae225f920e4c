"""The thread governor (``_runtime.ThreadGovernor``): on a simulated machine whose speed per
thread count is known, it finds the faster count, follows a change of load, and costs little
when nothing changes. The governor is pure bookkeeping, so no clock is involved."""

import numpy as np
import pytest

from transformer_cpp._runtime import ThreadGovernor


class Machine:
    """Seconds per unit of work for each thread count, with a little multiplicative noise."""

    def __init__(self, speeds, seed=0, noise=0.03):
        self.speeds = dict(speeds)
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.calls = []

    def set_threads(self, n):
        self.calls.append(n)

    def seconds(self, threads, units):
        return self.speeds[threads] * units * (1 + self.noise * self.rng.standard_normal())


def run(governor, machine, steps, units_rng=None):
    used = []
    rng = units_rng or np.random.default_rng(1)
    for _ in range(steps):
        n = governor.threads
        units = float(rng.integers(1000, 1500))  # batches of different sizes: rates are per unit
        used.append(n)
        governor.record(machine.seconds(n, units), units)
    return used


QUIET = {1: 1.8e-4, 2: 1.0e-4}  # 2 threads 1.8x faster than 1
BUSY = {1: 1.5e-4, 2: 2.2e-4}  # one core held by another program: 2 threads slower (measured ratio)


def test_quiet_machine_stays_on_all_threads_and_probes_rarely():
    m = Machine(QUIET)
    g = ThreadGovernor(2, m.set_threads)
    used = run(g, m, 6000)
    assert g.current == 2 and g.history == []
    fewer = used.count(1)
    # probes at intervals 40, 80, ... up to 1000 units, 5 units each (1 settling + 4 timed)
    assert 0 < fewer <= 5 * 12, fewer
    # the cost: the extra time of those units, against all units on 2 threads
    extra = fewer * (QUIET[1] - QUIET[2]) / (len(used) * QUIET[2])
    assert extra < 0.01, extra


def test_busy_machine_moves_to_one_thread_and_back():
    m = Machine(QUIET)
    g = ThreadGovernor(2, m.set_threads)
    run(g, m, 300)
    assert g.current == 2
    m.speeds = BUSY  # another program takes a core
    used = run(g, m, 300)
    assert g.current == 1
    switched = used.index(1) if 1 in used else None
    assert switched is not None and switched <= 6  # the slowdown starts a probe at once
    # after the move nearly every unit runs on 1 thread (probes of 2 are the exception)
    assert used[20:].count(2) <= 0.15 * len(used[20:])
    time_busy = sum(BUSY[n] for n in used)
    assert time_busy < 1.0 * len(used) * BUSY[1] * 1.1  # within 10% of always-1 on the busy machine
    m.speeds = QUIET  # the other program ends
    used = run(g, m, 600)
    assert g.current == 2
    assert used[-300:].count(2) >= 0.97 * 300


def test_busy_from_the_start_settles_on_one_thread():
    m = Machine(BUSY)
    g = ThreadGovernor(2, m.set_threads)
    used = run(g, m, 1000)
    assert g.current == 1
    total = sum(BUSY[n] for n in used)
    assert total <= len(used) * BUSY[1] * 1.08, total / (len(used) * BUSY[1])


def test_walks_down_more_than_one_step():
    # 8 threads with 3 cores busy: 5 is best
    speeds = {n: 1.0 / min(n, 5) * (1.0 if n <= 5 else 1.0 + 0.5 * (n - 5)) for n in range(1, 9)}
    m = Machine(speeds, noise=0.01)
    g = ThreadGovernor(8, m.set_threads, interval=10)
    run(g, m, 3000)
    assert g.current == 5


def test_one_thread_never_changes_anything():
    m = Machine({1: 1.0})
    g = ThreadGovernor(1, m.set_threads)
    used = run(g, m, 500)
    assert set(used) == {1} and m.calls == [1]


def test_bad_reports_are_ignored_and_bad_counts_refused():
    m = Machine(QUIET)
    g = ThreadGovernor(2, m.set_threads)
    for seconds, units in [(float("nan"), 1.0), (1.0, 0.0), (-1.0, 5.0), (float("inf"), 1.0)]:
        g.record(seconds, units)
    assert g.threads == 2 and g.current == 2
    for bad, error in ((0, ValueError), (-1, ValueError), (2.5, TypeError), (True, TypeError), ("2", TypeError)):
        with pytest.raises(error, match="most must be an integer >= 1"):
            ThreadGovernor(bad, m.set_threads)


@pytest.mark.parametrize(
    "kw, fragment",
    [
        (dict(window=0), "window must be an integer >= 1, got 0"),
        (dict(probe_units=0), "probe_units must be an integer >= 1, got 0"),
        (dict(interval=50, max_interval=10), "max_interval (10) must be >= interval (50)"),
        (dict(settle_units=-1), "settle_units must be an integer >= 0"),
        (dict(margin=float("nan")), "margin must be a number in [0, 1)"),
        (dict(margin=1.0), "margin"),
        (dict(slowdown=1.0), "slowdown must be a finite number > 1"),
        (dict(slowdown=float("inf")), "slowdown"),
    ],
)
def test_nonsense_settings_are_refused(kw, fragment):
    """A window of 0 failed at the first report (the median of nothing); a NaN margin never moved."""
    with pytest.raises(ValueError) as info:
        ThreadGovernor(2, Machine(QUIET).set_threads, **kw)
    assert fragment in str(info.value), str(info.value)


def test_settings_of_the_wrong_type_are_a_type_error():
    """The one message format of a setting (Limit): a count that is not an integer is a TypeError."""
    with pytest.raises(TypeError, match=r"probe_units must be an integer >= 1, got 2\.5"):
        ThreadGovernor(2, Machine(QUIET).set_threads, probe_units=2.5)
    for kw in (dict(margin="0.1"), dict(slowdown=None), dict(window=True)):
        with pytest.raises(TypeError, match="ThreadGovernor: "):
            ThreadGovernor(2, Machine(QUIET).set_threads, **kw)


def test_a_passing_spike_does_not_move_the_governor():
    """Decoding batches of 30 ms on a busy machine where 2 threads are 7% slower than 1: a few slow
    units at 1 thread start a probe of 2 threads, which beats the spiked window. The current count
    is timed again after a probe that wins, and the move is made only against that, so the
    governor stays at 1 thread."""
    speeds = {1: 1.0, 2: 1.07}  # one core busy: 2 threads a little slower
    g = ThreadGovernor(2, lambda n: None, window=4, first_probe=6)
    spike = {"units": 0}

    def unit():
        n = g.threads
        seconds = speeds[n] * (1.4 if (spike["units"] > 0 and n == 1) else 1.0)
        if spike["units"] > 0 and n == 1:
            spike["units"] -= 1
        g.record(seconds, 1.0)

    for _ in range(30):
        unit()
    # a real gain is still taken (a move to fewer threads needs no confirmation)
    assert g.current == 1 and g.history and g.history[0][1] == 1
    moves = len(g.history)
    spike["units"] = 4  # four slow units at 1 thread: the slowdown starts a probe of 2 at once
    for _ in range(4):
        unit()
    assert g.threads == 2  # probing
    for _ in range(40):
        unit()
    assert g.current == 1 and len(g.history) == moves, g.history
