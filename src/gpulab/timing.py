"""Timing that tells the truth: warm up, synchronize, repeat, report the median.

GPU work is asynchronous: a kernel launch returns before the kernel has run. ``benchmark`` therefore
synchronizes the device before it starts the clock and after each call, and in gpu mode measures with
CUDA events recorded on the device. In simulator mode it uses :func:`time.perf_counter`, and the
result is labelled as a simulator timing (it says nothing about GPU speed).

This module is the learners' timing API (``from gpulab import timing``: ``timing.benchmark``, ``timing.interleaved``,
``timing.BenchResult``, ``timing.gbps``, ...). It holds the measuring itself (:func:`benchmark`, :func:`interleaved`,
:class:`BenchResult`, :func:`no_interface_sync`), the checks that refuse what cannot be timed, and the rates
(:func:`gbps`, :func:`gflops`). The device's name and the spec-sheet peaks a rate is compared with
(:func:`device_name`, :class:`DevicePeak`, :data:`PEAKS`, :func:`lookup_peak`, :func:`percent_of_peak`) live in
:mod:`gpulab.timing_peaks` and are re-exported here, so ``timing.PEAKS`` and the rest keep working.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import numbers
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Iterator

from . import runtime
from .errors import UsageError
from .timing_peaks import (  # re-exported: timing.<name> is the learners' API
    PEAKS as PEAKS,
    DevicePeak as DevicePeak,
    device_name as device_name,
    lookup_peak as lookup_peak,
    percent_of_peak as percent_of_peak,
)

__all__ = [
    "BenchResult",
    "DevicePeak",
    "PEAKS",
    "benchmark",
    "device_name",
    "gbps",
    "gflops",
    "interleaved",
    "lookup_peak",
    "no_interface_sync",
    "percent_of_peak",
]


@dataclass(frozen=True)
class BenchResult:
    """Seconds per call over ``repeat`` timed calls."""

    times: tuple[float, ...]
    mode: str
    clock: str
    label: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    @property
    def spread(self) -> float:
        """(max - min) / median: how much the fastest and slowest repeats disagree (0.05 means 5%). One slow
        outlier (another program on the GPU) makes it large: :attr:`iqr` is the robust figure."""
        return (self.max - self.min) / self.median if self.median > 0 else 0.0

    @property
    def iqr(self) -> float:
        """The interquartile range over the median: how much the middle half of the repeats disagree (0.05 means
        5%). One outlier barely moves it; 0.0 for a single run."""
        if len(self.times) < 2 or self.median <= 0:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.times, n=4, method="inclusive")
        return (q3 - q1) / self.median

    @property
    def slow_runs(self) -> tuple[float, ...]:
        """The repeats that took more than 3x the median, as multiples of it: a run another program slowed down
        (it shared the GPU, or the CPU in simulator mode), not the code's own speed."""
        m = self.median
        return tuple(t / m for t in self.times if m > 0 and t > 3 * m)

    def __str__(self) -> str:
        where = "GPU" if self.mode == "gpu" else "simulator (CPU, not a GPU timing)"
        name = f"{self.label}: " if self.label else ""
        text = (
            f"{name}median {_fmt(self.median)}, min {_fmt(self.min)}, interquartile range {self.iqr:.0%} of the "
            f"median over {len(self.times)} runs [{where}, {self.clock}]"
        )
        slow = self.slow_runs
        if slow:
            runs = "one run" if len(slow) == 1 else f"{len(slow)} runs"
            shared = "GPU" if self.mode == "gpu" else "CPU"
            text += (
                f" ({runs} up to {max(slow):.0f}x slower than the median: another program was probably using the "
                f"{shared}; the median leaves it out)"
            )
        return text


def _fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


_SYNC_FLAG = "CUDA_ARRAY_INTERFACE_SYNC"


def _numba_configs() -> list[Any]:
    """numba's config modules that hold ``CUDA_ARRAY_INTERFACE_SYNC`` (numba-cuda's, and numba's own in
    older releases): only those already imported, so this never imports numba itself."""
    found: list[Any] = []
    for name in ("numba.cuda.core.config", "numba.core.config"):
        mod = sys.modules.get(name)
        if mod is None and name == "numba.cuda.core.config" and "numba.cuda" in sys.modules:
            try:
                mod = importlib.import_module(name)
            except ImportError:
                mod = None
        if mod is not None and hasattr(mod, _SYNC_FLAG) and all(mod is not f for f in found):
            found.append(mod)  # (numba-cuda 0.30's numba.cuda.core.config is numba.core.config: once)
    return found


@contextlib.contextmanager
def no_interface_sync() -> Iterator[None]:
    """Switch off numba's per-argument stream sync for the timed window, then restore it.

    With ``NUMBA_CUDA_ARRAY_INTERFACE_SYNC=1`` (the default) every launch of a Numba kernel on CuPy
    arrays synchronizes CuPy's stream once per CuPy argument: host round trips that would fall inside
    the CUDA-event window, so short kernels would look slower than they are, and a comparison with
    CuPy/cuBLAS (which do not sync) would be skewed. :func:`benchmark` synchronizes the whole device
    just before the window, so there is nothing pending to wait for, and these syncs only add host
    time. Everything gpulab launches on CuPy arrays runs on the default stream, in order, so correctness holds
    (lesson 02's streams carry numba device arrays, which these syncs never concern).
    """
    configs = _numba_configs()
    saved = [getattr(c, _SYNC_FLAG) for c in configs]
    for c in configs:
        setattr(c, _SYNC_FLAG, False)
    try:
        yield
    finally:
        for c, value in zip(configs, saved):
            setattr(c, _SYNC_FLAG, value)


def _events() -> tuple[Any, Any]:
    """A (start, end) pair of CUDA events (tests replace this)."""
    from numba import cuda

    return cuda.event(), cuda.event()


def _elapsed_s(start: Any, end: Any) -> float:
    from numba import cuda

    return float(cuda.event_elapsed_time(start, end)) / 1e3


def benchmark(
    fn: Callable[..., Any],
    *args: Any,
    warmup: int = 1,
    repeat: int = 5,
    label: str = "",
    **kwargs: Any,
) -> BenchResult:
    """Time ``fn(*args, **kwargs)``: ``warmup`` untimed calls, then ``repeat`` timed ones.

    In gpu mode each call is bracketed by CUDA events and the device is synchronized, so the
    time covers the GPU work, not just the launch; numba's per-argument stream syncs for CuPy arrays
    are switched off inside the window (:func:`no_interface_sync`), so host round trips are not
    counted. The events go on the default stream (numba's legacy one), so a host function that queues work on
    streams of its own (``cuda.stream()``: blocking streams) is timed until that work is done, whether or not it
    synchronizes itself (lesson 02's ``pipelined_saxpy`` does: then the window is its host time, launches and
    waits included). Returns a :class:`BenchResult` in seconds.
    """
    _check_call(fn, kwargs)
    repeat = _whole("repeat", repeat, 1, "use repeat=5 for a stable median.")
    warmup = _whole("warmup", warmup, 0, "use warmup=1 (the first call compiles the kernel).")
    for _ in range(warmup):
        fn(*args, **kwargs)
    runtime.synchronize()
    times: list[float] = []
    if runtime.is_gpu():
        for _ in range(repeat):
            start, end = _events()
            with no_interface_sync():  # the device was synchronized just before: nothing to wait for
                start.record()
                fn(*args, **kwargs)
                end.record()
            end.synchronize()
            runtime.synchronize()
            times.append(_elapsed_s(start, end))
        clock = "CUDA events"
    else:
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn(*args, **kwargs)
            times.append(time.perf_counter() - t0)
        clock = "perf_counter"
    return BenchResult(tuple(times), runtime.mode(), clock, label)


def interleaved(calls: dict[str, Callable[[], Any]], *, rounds: int = 5, repeat: int = 3) -> dict[str, BenchResult]:
    """Time several calls in alternating rounds, to compare them: each round runs :func:`benchmark` on each call in
    turn (``repeat`` runs, no warm-up: compile and check them first) and keeps the median, so that a busy moment of
    the device (another program, a clock that drops as it heats) falls on all of them alike, not on one. Returns a
    :class:`BenchResult` per name whose ``times`` are its rounds' medians, in round order (so ``a.times[i] /
    b.times[i]`` is round i's ratio)."""
    rounds = _whole("rounds", rounds, 1, "use rounds=5.")
    times: dict[str, list[float]] = {name: [] for name in calls}
    mode = clock = ""
    for _ in range(rounds):
        for name, fn in calls.items():
            r = benchmark(fn, warmup=0, repeat=repeat)
            times[name].append(r.median)
            mode, clock = r.mode, r.clock
    clock = f"{clock}, median of {repeat} per round"
    return {name: BenchResult(tuple(t), mode, clock, name) for name, t in times.items()}


_OPTIONS = ("warmup", "repeat", "label")


def _whole(name: str, value: Any, low: int, fix: str) -> int:
    """``repeat=`` / ``warmup=`` as a count: a whole number >= ``low`` (not 2.5, "5" or None)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UsageError(f"{name} must be a whole number >= {low}, but got {value!r} ({type(value).__name__}); {fix}")
    if value < low:
        word = "at least 1" if low == 1 else f"{low} or more"
        raise UsageError(f"{name} must be {word} (got {value}); {fix}")
    return int(value)


def _check_call(fn: Any, kwargs: dict[str, Any]) -> None:
    """Refuse what benchmark cannot time: a value (what a launch or a call returned) instead of the function, a
    kernel without its launch configuration, or a keyword that ``fn`` does not take (a misspelt ``repeat=``)."""
    from .source import py_func

    example = "benchmark(add_kernel[blocks, threads], a, b, out) or benchmark(kernels.add, x, y)"
    if not callable(fn):
        if fn is None:
            what = "None, the value a launch add_kernel[blocks, threads](...) (or a function without return) returns"
        elif hasattr(fn, "shape"):
            what = f"an array of shape {tuple(fn.shape)}, the result of a call"
        else:
            what = f"a {type(fn).__name__} ({fn!r:.40})"
        raise UsageError(
            f"benchmark times a call it makes itself: pass the function and its arguments separately, {example}. "
            f"It was given {what}."
        )
    if _unlaunched(fn):
        name = getattr(py_func(fn), "__name__", "kernel")
        raise UsageError(
            f"benchmark was given the kernel {name} without its launch configuration: pass the launch, "
            f"benchmark({name}[blocks, threads], ...), then its arguments (the brackets, without calling it)."
        )
    import inspect

    try:
        params = inspect.signature(py_func(fn)).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): let the call say
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    for key in kwargs:
        if key not in names:
            import difflib

            close = difflib.get_close_matches(key, _OPTIONS, n=1, cutoff=0.6)
            guess = f" Did you mean {close[0]}=?" if close else ""
            fn_name = getattr(py_func(fn), "__name__", "the function")
            raise UsageError(
                f"benchmark's own options are warmup=, repeat= and label=; {key}= would be passed on to "
                f"{fn_name}(), which does not take it.{guess}"
            )


def _unlaunched(fn: Any) -> bool:
    """A ``@cuda.jit`` kernel itself rather than its launch ``kernel[blocks, threads]``: numba-cuda's dispatcher
    (which has ``configure``), or the simulator's kernel before any launch configured it."""
    if getattr(fn, "_device", False) or getattr(getattr(fn, "targetoptions", None), "get", lambda k: False)("device"):
        return False
    if type(fn).__name__ == "FakeCUDAKernel":
        return getattr(fn, "grid_dim", None) is None
    return callable(getattr(fn, "configure", None)) and hasattr(fn, "py_func")


def gbps(nbytes: float, seconds: float | BenchResult) -> float:
    """Achieved bandwidth in GB/s (10^9 bytes per second) for ``nbytes`` moved in ``seconds`` (a number, or a
    :class:`BenchResult`, whose median is used)."""
    return _rate("gbps", "nbytes", nbytes, seconds)


def gflops(flops: float, seconds: float | BenchResult) -> float:
    """Achieved throughput in GFLOP/s for ``flops`` floating-point operations in ``seconds`` (a number, or a
    :class:`BenchResult`, whose median is used)."""
    return _rate("gflops", "flops", flops, seconds)


def _rate(fn: str, name: str, amount: Any, seconds: Any) -> float:
    """``amount / seconds / 1e9``, with the arguments checked: ``seconds`` a number > 0 (a BenchResult gives its
    median), ``amount`` a number (not an array, not a BenchResult: the arguments swapped)."""
    call = f"{fn}({name}, seconds)"
    if isinstance(seconds, BenchResult):
        seconds = seconds.median
    if isinstance(amount, BenchResult):
        raise UsageError(f"{call}: the count comes first, then the time; it was given the benchmark result first.")
    amount, seconds = (float(v) if tuple(getattr(v, "shape", (0,))) == () else v for v in (amount, seconds))  # 0-d
    if hasattr(amount, "nbytes") and hasattr(amount, "shape"):
        fix = "x.nbytes, the byte count" if fn == "gbps" else "the number of operations (e.g. 2 * n)"
        raise UsageError(
            f"{call}: {name} is a number; it was given an array of shape {tuple(amount.shape)}: pass {fix}."
        )
    for what, value in ((name, amount), ("seconds", seconds)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            hint = " (for a benchmark result pass r.median, or r itself)" if what == "seconds" else ""
            raise UsageError(
                f"{call}: {what} must be a number{hint}; it was given {type(value).__name__} {value!r:.40}."
            )
    if not seconds > 0 or not math.isfinite(seconds):
        raise UsageError(f"{call}: seconds must be a time > 0; it was given {seconds}.")
    if amount < 0:
        raise UsageError(f"{call}: {name} must be >= 0; it was given {amount:g}.")
    if 0 < amount < 1:  # less than one byte or operation: a time, the arguments swapped
        unit = "byte" if fn == "gbps" else "operation"
        raise UsageError(
            f"{call}: {name}={amount:g} is less than one {unit}, which looks like a time: are the arguments swapped? "
            f"The count comes first, then the seconds: {fn}(x.nbytes, r.median)."
        )
    return float(amount) / float(seconds) / 1e9
