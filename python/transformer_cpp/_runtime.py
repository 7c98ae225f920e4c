"""Thin, typed wrappers over the runtime part of the C++ core (threads, build facts)."""

from __future__ import annotations

import math
import os
import warnings
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np


def _affordable_threads() -> int:
    """The most OpenMP threads whose stacks fit in half of the address space an rlimit (ulimit -v)
    leaves, at most 1024: the core's ``affordable_threads`` (runtime.cpp), computed here because
    it is needed before the core (and OpenMP with it) is loaded."""
    import resource

    most = 1024
    limits = [
        resource.getrlimit(r)[0] for r in (resource.RLIMIT_AS, getattr(resource, "RLIMIT_DATA", None)) if r is not None
    ]
    limits = [x for x in limits if x != resource.RLIM_INFINITY]
    if not limits:
        return most
    try:
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        used = 0
    stack = resource.getrlimit(resource.RLIMIT_STACK)[0]
    stack = 2 << 20 if stack == resource.RLIM_INFINITY else stack
    text = os.environ.get("OMP_STACKSIZE", "").strip()
    if text:
        number = text.rstrip("bBkKmMgG ")
        try:
            unit = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1 << 10)
            stack = int(float(number) * unit)
        except ValueError:
            pass
    room = max(0, min(limits) - used)
    return min(most, int(room / 2 / (stack + 65536)) + 1)


def _tame_thread_environment() -> None:
    """Lower OMP_NUM_THREADS before OpenMP reads it (when the core is loaded) if it asks for more
    threads than the core allows or the address space holds: OpenMP would kill the process at
    the first parallel loop (every thread started later begins with that count)."""
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    try:
        asked = int(text.split(",")[0]) if text else len(os.sched_getaffinity(0))
    except (ValueError, AttributeError, OSError):
        return  # OpenMP ignores (with a warning) what it cannot parse
    most = _affordable_threads()
    if asked > most:
        os.environ["OMP_NUM_THREADS"] = str(most)
        warnings.warn(
            f"transformer_cpp: OMP_NUM_THREADS asks for {asked} threads, more than the core allows (1024) "
            f"or the address space holds (ulimit -v); using {most}",
            RuntimeWarning,
            stacklevel=3,
        )


_tame_thread_environment()

from . import _core  # noqa: E402  (after the environment is tamed: OpenMP reads it when this loads)

__all__ = [
    "LAYOUT",
    "positional_encoding",
    "set_num_threads",
    "get_num_threads",
    "build_info",
    "memory_limit_bytes",
    "splitmix64",
    "ThreadGovernor",
    "governor_for",
]


from ._checks import integer as _integer, number as _number  # noqa: E402  (the core's Limit checks)

#: The positional-encoding layouts: those of the model's ``layout`` field.
LAYOUT = next(f.limit for f in _core.TransformerConfig.fields() if f.name == "layout")


def positional_encoding(length: int, depth: int, layout: str = "interleaved", dtype: str = "float32") -> np.ndarray:
    """The sinusoidal positional encoding of "Attention Is All You Need", computed in C++.

    Args:
        length: number of positions (rows), > 0.
        depth: model width (columns), > 0; even for ``layout="concatenated"``.
        layout: ``"interleaved"`` (the paper, PyTorch): ``PE[pos, 2i] = sin(pos / 10000**(2i/depth))``
            and ``PE[pos, 2i+1] = cos(...)`` of the same angle; or ``"concatenated"`` (the
            TensorFlow tutorial): all sines first, then all cosines, with angle
            ``pos / 10000**(i/(depth/2))`` for ``i < depth/2``.
        dtype: ``"float32"`` (default) or ``"float64"``.

    Returns:
        A NumPy array of shape ``(length, depth)``.

    Raises:
        ValueError: for non-positive sizes, an odd depth with the concatenated layout, or an
            unknown layout or dtype.
    """
    who = "positional_encoding"
    length = _integer(who, "length", length, 1)
    depth = _integer(who, "depth", depth, 1)
    layout = LAYOUT.check(who, "layout", layout)
    dtype = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    return _core.positional_encoding(length, depth, layout, dtype)


def set_num_threads(n: int) -> None:
    """Set how many threads the C++ core uses (OpenMP loops and Eigen's parallel GEMM)."""
    _core.set_num_threads(_integer("set_num_threads", "n", n, 1))


def get_num_threads() -> int:
    """The number of threads the C++ core will use."""
    return int(_core.get_num_threads())


def build_info() -> Dict[str, Any]:
    """What the extension was built with (compiler, flags, OpenMP, Eigen version and its SIMD
    level) and what runs here: ``"isa"``, the instruction-set level of the core's kernels
    (``"avx512"``, ``"avx2"`` or ``"generic"``: the highest this CPU has, or the one the
    ``TRANSFORMER_CPP_ISA`` environment variable forces), ``"isa_cpu"``, the CPU's own level, and
    ``"kernels"``, which kernel runs each product at that level (e.g. ``{"decode_float32": "avx2",
    "decode_int8": "avx2", "f32_gemm": "avx2", ...}``). Every other value is a string."""
    info: Dict[str, Any] = {}
    kernels: Dict[str, str] = {}
    for key, value in _core.build_info().items():
        if key.startswith("kernel."):
            kernels[key[len("kernel.") :]] = value
        else:
            info[key] = value
    info["kernels"] = kernels
    return info


def memory_limit_bytes() -> float:
    """Bytes this process may still use: what the core's memory checks compare a request with."""
    return float(_core._memory_limit_bytes())


def splitmix64(x: int) -> int:
    """splitmix64 of ``x`` (an integer in [0, 2**64)): the core's one seed mixer (random.hpp), so
    that seeds derived in Python are those the core would derive."""
    return int(_core._splitmix64(x))


class ThreadGovernor:
    """Chooses how many of ``most`` threads the core uses, by timing the work itself.

    OpenMP splits every loop into equal shares, one per thread. When another program holds one
    of the cores, the thread that shares it runs at a fraction of the speed and every loop waits
    for it: on a 2-core machine with one core busy, 2 threads ran a training step in 2.1-2.2 s
    against 1.4-1.5 s for 1 thread. No wait policy fixes that; using fewer threads does.

    The caller times units of repeated work (training steps, decoding batches) and reports each
    one with :meth:`record`: its seconds and its size (tokens, say). The governor keeps a
    window of seconds-per-unit at the current thread count and now and then *probes* a
    neighbouring count (one fewer, or one more when it is below ``most``) for a few units and
    moves when the neighbour is faster by ``margin``; a move to *more* threads is first confirmed:
    the current count is timed again for as many units right after, and the governor moves only
    if the neighbour beats that too (a spike in the window must not move it up). A probe is started on schedule (after
    ``first_probe`` units, then every ``interval`` units, the interval doubling up to
    ``max_interval`` after each probe that does not move) or at once when the current speed drops by ``slowdown`` (another program started).
    On a quiet machine the probes cost a fraction of a percent of the time (a few slower units
    every ``max_interval``).

    ``set_threads`` defaults to the core's :func:`set_num_threads`; tests pass their own.
    """

    most: int
    window: int
    probe_units: int
    settle_units: int
    min_interval: int
    max_interval: int
    margin: float
    slowdown: float
    current: int
    threads: int
    _set: Callable[[int], None]
    _interval: int
    _since_probe: int
    _probe_skip: int
    _direction: int
    _units: int

    def __init__(
        self,
        most: int,
        set_threads: Optional[Callable[[int], None]] = None,
        *,
        window: int = 16,
        probe_units: int = 4,
        settle_units: int = 1,
        first_probe: int = 6,
        interval: int = 40,
        max_interval: int = 1000,
        margin: float = 0.05,
        slowdown: float = 1.3,
    ) -> None:
        self.most = _integer("ThreadGovernor", "most", most, 1)
        for name, value in (
            ("window", window),
            ("probe_units", probe_units),
            ("first_probe", first_probe),
            ("interval", interval),
            ("max_interval", max_interval),
        ):
            _integer("ThreadGovernor", name, value, 1)
        _integer("ThreadGovernor", "settle_units", settle_units, 0)
        if max_interval < interval:
            raise ValueError(f"ThreadGovernor: max_interval ({max_interval}) must be >= interval ({interval})")
        margin = _number("ThreadGovernor", "margin", margin, 0, 1, high_open=True)
        slowdown = _number("ThreadGovernor", "slowdown", slowdown, 1, low_open=True)
        self._set = set_threads if set_threads is not None else set_num_threads
        self.window, self.probe_units, self.settle_units = window, probe_units, settle_units
        self.min_interval, self.max_interval = interval, max_interval
        self.margin, self.slowdown = margin, slowdown
        self.current = self.most  # the count in use outside probes
        self.threads = self.most  # the count the next unit runs with
        self._recent: Deque[float] = deque(maxlen=window)
        self._reference: Optional[float] = None  # seconds per unit when the last decision was made
        self._rebase = False  # set the reference again from the window once it is full
        self._interval = first_probe  # look around early once (a machine busy from the start), then rarely
        self._since_probe = 0
        self._probe: Optional[int] = None  # the count being probed
        self._probe_rates: List[float] = []
        self._probe_skip = 0
        # a probe that won, being confirmed: (its count, its median, its rates), and the current
        # count's rates measured again after it
        self._confirm: Optional[Tuple[int, float, List[float]]] = None
        self._confirm_rates: List[float] = []
        self._confirm_skip = 0
        self._direction = -1  # the next scheduled probe: -1 fewer threads, +1 more
        self.history: List[Tuple[int, int]] = []  # (units seen, threads) at every change
        self._units = 0
        self._set(self.most)

    @staticmethod
    def _median(values: Sequence[float]) -> float:
        ordered = sorted(values)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])

    def _use(self, n: int) -> None:
        if n != self.threads:
            self._set(n)
            self.threads = n

    def _neighbour(self) -> Optional[int]:
        """The count to probe next: alternately one fewer and one more, within [1, most]."""
        for step in (self._direction, -self._direction):
            n = self.current + step
            if 1 <= n <= self.most:
                self._direction = -step
                return n
        return None

    def _start_probe(self) -> None:
        n = self._neighbour()
        self._since_probe = 0
        if n is None:
            return
        self._probe, self._probe_rates, self._probe_skip = n, [], self.settle_units
        self._use(n)

    def _move(self, n: int, probed: float, probe_rates: Sequence[float]) -> None:
        """Take ``n`` threads, the probe's rates as the start of the new window."""
        self.current = n
        self._recent.clear()
        self._recent.extend(probe_rates)
        self._reference = probed
        self._rebase = True  # a few probe units are a rough reference: redo it from a full window
        self._interval = self.min_interval
        self.history.append((self._units, n))

    def _stay(self, here: float) -> None:
        """A probe that did not win: keep the current count and probe again later."""
        self._reference = here
        # below ``most``, look up again sooner: the other program may have ended
        cap = self.max_interval if self.current == self.most else max(self.min_interval, self.max_interval // 4)
        self._interval = min(self._interval * 2, cap)

    def record(self, seconds: float, units: float = 1.0) -> None:
        """Report one unit of work done with :attr:`threads` threads: ``seconds`` of wall time for
        ``units`` of work (> 0). Sets the thread count for the next unit."""
        if not (units > 0 and math.isfinite(seconds) and seconds >= 0):
            return  # nothing to learn from
        rate = seconds / units
        self._units += 1
        if self._probe is not None:
            if self._probe_skip > 0:  # the first unit after a change warms caches and threads
                self._probe_skip -= 1
                return
            self._probe_rates.append(rate)
            if len(self._probe_rates) < self.probe_units:
                return
            probed = self._median(self._probe_rates)
            here = self._median(self._recent) if self._recent else math.inf
            n, self._probe = self._probe, None
            if probed < here * (1.0 - self.margin) and n > self.current:
                # more threads look faster than the window: confirm against the current count
                # measured again now, so that a passing spike in the window does not move us up
                # (fewer threads are the safe side on a busy machine, and on a quiet one a probe
                # of fewer never wins: those moves are taken at once)
                self._confirm = (n, probed, list(self._probe_rates))
                self._confirm_rates, self._confirm_skip = [], self.settle_units
            elif probed < here * (1.0 - self.margin):
                self._move(n, probed, self._probe_rates)
            else:
                self._stay(here)
            self._use(self.current)
            return
        if self._confirm is not None:
            if self._confirm_skip > 0:
                self._confirm_skip -= 1
                return
            self._confirm_rates.append(rate)
            if len(self._confirm_rates) < self.probe_units:
                return
            n, probed, probe_rates = self._confirm
            fresh = self._median(self._confirm_rates)
            self._confirm = None
            if probed < fresh * (1.0 - self.margin):
                self._move(n, probed, probe_rates)
                self._use(n)
            else:
                self._recent.clear()
                self._recent.extend(self._confirm_rates)
                self._stay(fresh)
                self._rebase = True
            return
        self._recent.append(rate)
        self._since_probe += 1
        if self.most == 1:
            return
        if self._reference is None and len(self._recent) >= min(self.window, 4):
            self._reference = self._median(self._recent)
        if self._rebase and len(self._recent) == self.window:
            self._reference, self._rebase = self._median(self._recent), False
        tail = list(self._recent)[-4:]
        if self._reference is not None and len(tail) == 4 and self._median(tail) > self._reference * self.slowdown:
            self._interval = self.min_interval  # the machine changed: look around now
            self._direction = -1
            self._start_probe()
        elif self._since_probe >= self._interval and len(self._recent) >= 4:
            self._start_probe()


def governor_for(previous: Optional[ThreadGovernor], most: int, adaptive: bool) -> Optional[ThreadGovernor]:
    """The :class:`ThreadGovernor` to time the next units of work with, for an owner (a trainer, a
    translator) that keeps one across calls so that what it learnt about the machine carries over.

    ``previous`` (the owner's governor, or None) when it governs ``most`` threads, with the core
    set to its current choice again (other work may have run with another count meanwhile); a new
    governor when ``most`` changed; None when ``adaptive`` is off or ``most`` is 1 (nothing to
    choose)."""
    if not adaptive or most <= 1:
        return None
    if previous is None or previous.most != most:
        return ThreadGovernor(most)
    set_num_threads(previous.threads)
    return previous


def tqdm_class() -> Any:
    """tqdm's bar for where the program runs: the notebook widget under Jupyter when ipywidgets is
    installed, else the text bar, which Jupyter shows as well (``tqdm.auto`` would fall back to it
    with a warning that the widget is missing)."""
    import importlib.util

    if importlib.util.find_spec("ipywidgets") is None:
        from tqdm.std import tqdm as text_bar

        return text_bar
    from tqdm.auto import tqdm as auto_bar

    return auto_bar
