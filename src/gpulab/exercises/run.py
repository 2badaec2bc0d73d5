"""Launching a kernel on one case: launch shapes (x along the last axis), output buffers filled so
that unwritten elements show, a deadline, and stopping stuck simulator threads."""

from __future__ import annotations

import math

import sys
import threading
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import numpy as np

from .. import runtime, simulator
from ..simulator.blocks import reversed_order
from ..simulator.stopping import KernelTimeout
from ..kernels._launch import ceil_div
from ..source import py_func
from .compare import Changed, fills, first_change, unwritten
from .frames import origin, source_line
from .problem import Case, Dim, Problem

__all__ = [
    "Hang",
    "KernelTimeout",
    "Launch",
    "OutOfBounds",
    "Runner",
    "SetupError",
    "extra_run_limit",
    "grid_for",
    "guard_elements",
    "run_with_deadline",
    "source_line",
]

GUARD = 64  # fewest elements of guard zone after each output (and input) in gpu mode (see guard_elements)
GUARD_MAX = 1 << 22  # most elements of one guard zone (16 MB of float32): beyond, a guard is a cost on every run
BLOCK_REACH = 1023  # how far past an axis a whole-block grid reaches: a block has at most 1024 threads along x or y
STOP_TRIES = 50  # tries of 0.1 s that _stop makes to end a worker's simulator threads, and as many for the worker


def guard_elements(shape: tuple[int, ...]) -> int:
    """Elements of the guard zone after an array of ``shape`` in gpu mode: room for everything a kernel without a
    bounds guard can touch past the array's end when its grid covers the array with whole blocks (up to
    ``BLOCK_REACH`` past each axis; with x and y exchanged, the longer of the last two axes' lengths on either).
    Past the zone such a kernel would write into other arrays of CuPy's pool or off the allocation (an illegal
    address that breaks the process's CUDA context); inside it, the write is seen and named (:class:`OutOfBounds`).
    At least ``GUARD``, at most ``GUARD_MAX``."""
    dims = [int(d) for d in shape] or [1]
    size = int(np.prod(dims))
    longest = max(1, *dims[-2:])  # an empty axis still gets one block
    reach = [max(d, 1) + BLOCK_REACH for d in dims[:-2]] + [longest + BLOCK_REACH] * len(dims[-2:])
    strides = [int(np.prod(dims[k + 1 :])) for k in range(len(dims))]
    last = sum((r - 1) * st for r, st in zip(reach, strides))
    return int(min(GUARD_MAX, max(GUARD, last + 1 - size)))


class SetupError(Exception):
    """The exercise's own setup is wrong (its spec, inputs, launch or threads), not the learner's code."""


class Hang(Exception):
    """The launch did not finish in time; ``args[0]`` lists the simulator threads that were stopped."""


class OutOfBounds(Exception):
    """The kernel wrote into the guard zone after an output (gpu mode): ``args = (output, launch)``."""


def as_dim(x: Any) -> Dim:
    return tuple(int(v) for v in x) if isinstance(x, (tuple, list)) else (int(x),)


def grid_for(shape: tuple[int, ...], threads: Dim) -> tuple[Dim, Dim]:
    """One thread per element, x along the LAST axis: ``(rows, cols)`` with ``threads=(bx, by)``
    gives the grid ``(ceil(cols / bx), ceil(rows / by))``. Leading axes beyond the block's
    dimensions are folded into its last one."""
    t = tuple(threads)
    rev = list(tuple(shape)[::-1]) or [1]
    if len(rev) > len(t):
        rev = rev[: len(t) - 1] + [int(np.prod(rev[len(t) - 1 :]))]
    rev += [1] * (len(t) - len(rev))
    return tuple(max(1, ceil_div(rev[d], t[d])) for d in range(len(t))), t


def swap(grid: Any, block: Any) -> tuple[Dim, Dim]:
    """The other orientation of a 2-D (or 3-D) launch: x and y exchanged."""
    g, b = as_dim(grid), as_dim(block)
    n = max(len(g), len(b), 2)
    g, b = g + (1,) * (n - len(g)), b + (1,) * (n - len(b))
    return (g[1], g[0]) + g[2:], (b[1], b[0]) + b[2:]


@dataclass(frozen=True)
class Launch:
    """Which launch of a case: the ``threads=`` option (cycled) and the orientation."""

    option: int = 0
    swapped: bool = False


def fresh_input(x: np.ndarray) -> Any:
    """A fresh copy of an input for one run; in gpu mode on the device and followed by a zeroed guard zone, so
    that a kernel without a bounds guard reads memory of its own: an empty CuPy array has a null pointer, and
    reading it is an illegal address that breaks the process's CUDA context (every later launch fails)."""
    if not runtime.is_gpu():
        return np.array(x)
    buf = runtime.xp().zeros(x.size + guard_elements(x.shape), dtype=x.dtype)
    buf[: x.size] = runtime.to_device(np.ascontiguousarray(x).reshape(-1))
    return buf[: x.size].reshape(x.shape)


def _guard_untouched(tail: Any, fill: Any) -> bool:
    """Whether every element of a guard zone still holds ``fill``, computed by the zone's own array module (on the
    GPU in gpu mode: one value comes back, not the zone)."""
    return bool(unwritten(tail, fill).all())


EXTRA_RUN_S = 60.0
"""The most the check waits for one of its own extra runs of a kernel after the cases (:func:`extra_run_limit`)."""


def extra_run_limit(p: Problem) -> float:
    """Seconds the check gives one extra run of the kernel (the race check's run that logs every access, a run on
    copies of the inputs): ``EXTRA_RUN_S``, or less when the caller gave each launch less. ``p.timeout`` is that
    limit per launch (``check_kernel(timeout=)``, ``Problem.timeout``), which ``labs grade --timeout S`` lowers to
    0.8 x S, and to what is left of it in a cell where a check already timed out (:mod:`gpulab.grading.kernel_time`):
    an extra run must not hold a graded cell past its limit."""
    return min(EXTRA_RUN_S, p.timeout)


def run_with_deadline(fn: Callable[[], Any], timeout: float) -> Any:
    """``fn()`` in a worker thread; :class:`Hang` after ``timeout`` seconds (stuck simulator threads
    are stopped with :class:`KernelTimeout`). A worker an earlier call could not stop is stopped again and waited for
    first (:func:`gpulab.simulator.settle`: the simulator runs one kernel at a time)."""
    simulator.settle()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller
            box["error"] = exc

    worker = threading.Thread(target=target, name="gpulab-check", daemon=True)
    worker.start()
    try:
        worker.join(timeout)
    except BaseException:  # an interrupt (Jupyter's stop button) lands here, not in the worker: stop it too
        _stop(worker)
        raise
    if worker.is_alive():
        raise Hang(_stop(worker))
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _stop(worker: threading.Thread) -> list[str]:
    """Stop a worker of :func:`run_with_deadline` and the simulator threads it started; returns those stopped.
    ``STOP_TRIES`` tries of 0.1 s for its simulator threads, as many for the worker itself; one still running then
    is left to :func:`gpulab.simulator.settle` (the next check, or the next launch from the host)."""
    stuck: list[str] = []
    if runtime.is_simulator():
        for _ in range(STOP_TRIES):  # a thread may be between bytecodes that ignore the request: retry
            stopped = simulator.stop_threads(KernelTimeout)
            stuck = stuck or stopped
            worker.join(0.1)
            if not worker.is_alive():
                break
    # A host= function (plain Python) that never returns: stop the worker itself, so that no thread
    # keeps spinning after the verdict. (A GPU kernel cannot be stopped this way; the verdict says so.)
    for _ in range(STOP_TRIES):
        if not simulator.stop_thread(worker, KernelTimeout):
            break
        worker.join(0.1)
    if worker.is_alive():  # the next check, or launch, stops it again and waits
        simulator.leave_running(worker)
    return stuck


class Runner:
    """Launches one problem's kernel (or host function) on its cases."""

    def __init__(self, problem: Problem, kernel: Any, fn_name: str, names: list[str]) -> None:
        self.p, self.kernel, self.fn_name, self.names = problem, kernel, fn_name, names
        # input index -> its first element a run changed (the kernel got that array itself, not a view the exercise's
        # args= made of it: an RNG state it advances, a buffer it updates in place, are the exercise's design)
        self.changed: dict[int, Changed] = {}
        self._watched: set[int] = set()  # the cases whose inputs were compared after a run (once per case)
        self.thread_options: list[Dim] = []
        if problem.threads is not None:
            t = problem.threads
            self.thread_options = [as_dim(x) for x in t] if isinstance(t, list) else [as_dim(t)]
            bad = [o for o in self.thread_options if not o or min(o) < 1]
            if bad or not self.thread_options:
                raise SetupError(
                    f"threads={problem.threads!r}: every block shape needs at least one thread "
                    "along each dimension, e.g. threads=128 or threads=(16, 16)."
                )

    def can_swap(self, case: Case) -> bool:
        """A 2-D launch the harness chooses, or a host function's that it can exchange (``host.launch_config``,
        see :meth:`config`), so x and y can be exchanged."""
        if self.p.host is not None and getattr(self.p.host, "launch_config", None) is None:
            return False
        _, call = self.host_call(case)
        grid, block = self.config(case, call, Launch())
        g, b = as_dim(grid), as_dim(block)
        if len(g) < 2 and len(b) < 2:
            return False
        sg, sb = swap(g, b)
        return (sg, sb) != (g + (1,) * (len(sg) - len(g)), b + (1,) * (len(sb) - len(b)))  # else: nothing to try

    def config(self, case: Case, call: tuple, launch: Launch) -> tuple[Any, Any]:
        """(griddim, blockdim) for this case; a bad configuration is the exercise's SetupError. A host function
        that launches the kernel once per call may say how: ``host.launch_config(*call)`` returns its (grid,
        block), and ``host(*call, swapped=True)`` launches it with x and y exchanged (the capstone's matmul
        in blocks), so that a kernel right only that way is recognised as with a launch the harness picks."""
        from ..kernels._launch import check_launch

        if self.thread_options:
            option = self.thread_options[launch.option % len(self.thread_options)]
            grid, block = grid_for(case.expected[0].shape, option)
        else:
            how = self.p.launch if self.p.host is None else getattr(self.p.host, "launch_config", None)
            try:
                grid, block = how(*call)  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001
                raise SetupError(f"the exercise's launch= function failed: {type(exc).__name__}: {exc}") from exc
        if launch.swapped:
            grid, block = swap(grid, block)
        try:
            check_launch(grid, block)
        except Exception as exc:  # noqa: BLE001
            raise SetupError(f"the exercise launches [{grid}, {block}], which CUDA refuses: {exc}") from exc
        return grid, block

    def run(
        self,
        case: Case,
        launch: Launch = Launch(),
        interval: float | None = None,
        fill_run: int = 0,
        fill: Any = None,
    ) -> tuple[tuple[np.ndarray, ...], str]:
        """Launch once; returns (host outputs, launch description). The outputs start filled with ``fills``' value
        for ``fill_run``, or with ``fill`` when given (the diagnosis's zero-filled run)."""
        p, xp = self.p, runtime.xp()
        # a fresh copy per run: a kernel that writes into its inputs must not change the next run's data
        dev_in = tuple(fresh_input(x) if isinstance(x, np.ndarray) else x for x in case.inputs)
        bufs, outs, used = [], [], []
        for e in case.expected:
            options = fills(e, p.out_init)
            value = options[fill_run % len(options)] if fill is None else fill
            buf = xp.full(e.size + (guard_elements(e.shape) if runtime.is_gpu() else 0), value, dtype=e.dtype)
            bufs.append(buf)
            outs.append(buf[: e.size].reshape(e.shape))
            used.append(value)
        call = tuple(p.args(dev_in, tuple(outs))) if p.args else dev_in + tuple(outs)
        if p.host is not None:
            config = None
            desc = f"host function {getattr(p.host, '__name__', 'host')}(...)"
            host = p.host
            go = lambda: host(*call)  # noqa: E731
            if launch.swapped:  # can_swap said the host can (its launch_config)
                desc += " with x and y exchanged"
                go = lambda: host(*call, swapped=True)  # noqa: E731
        else:
            griddim, blockdim = config = self.config(case, call, launch)
            desc = f"{self.fn_name}[{griddim}, {blockdim}]"
            go = lambda: self.kernel[griddim, blockdim](*call)  # noqa: E731
        old = sys.getswitchinterval()
        try:
            if interval is not None and runtime.is_simulator():
                sys.setswitchinterval(interval)  # Python threads (blocks Numba runs) switch more often
                with reversed_order():  # blocks run in turn take their threads last to first
                    run_with_deadline(go, p.timeout)
            elif runtime.is_simulator():
                run_with_deadline(go, p.timeout)
            else:

                def go_and_wait() -> None:
                    go()
                    runtime.synchronize()  # errors and hangs show up here on a GPU

                run_with_deadline(go_and_wait, p.timeout)
        except (Hang, SetupError):
            raise
        except Exception as exc:
            exc.gpulab_launch = desc  # type: ignore[attr-defined]
            exc.gpulab_config = config  # type: ignore[attr-defined]
            found = origin(exc)  # where it was raised: the traceback walked once
            exc.gpulab_line = found.line if found.kind == "yours" else None  # type: ignore[attr-defined]
            exc.gpulab_function = found.function  # type: ignore[attr-defined]
            exc.gpulab_origin = found  # type: ignore[attr-defined]
            exc.gpulab_kernel = getattr(py_func(self.kernel), "__name__", self.fn_name)  # type: ignore[attr-defined]
            raise
        finally:
            sys.setswitchinterval(old)
        got = []
        for buf, e, fill, name in zip(bufs, case.expected, used, self.names):
            tail = buf[e.size :]  # the guard zone (gpu mode), checked where it is: it can be 16 MB per output
            if tail.size and not _guard_untouched(tail, fill):
                raise OutOfBounds(name, desc)
            h = np.asarray(runtime.to_host(buf[: e.size]))
            got.append(h.reshape(e.shape))
        if id(case) not in self._watched:
            self._watched.add(id(case))
            self._compare_inputs(case, dev_in, call)
        return tuple(got), desc

    def _compare_inputs(self, case: Case, dev_in: tuple, call: tuple) -> None:
        """Record in ``changed`` each input array of ``case`` that the run changed, among those the kernel (or
        host function) was handed as they are. A copy of the case's input was handed over, so the case's array is
        the copy from before the launch; in gpu mode this costs one transfer of the input back to the host."""
        for k, (x, d) in enumerate(zip(case.inputs, dev_in)):
            if k in self.changed or k in self.p.updated_inputs or not isinstance(x, np.ndarray):
                continue
            if not any(a is d for a in call):
                continue
            found = first_change(x, np.asarray(runtime.to_host(d)))
            if found is not None:
                self.changed[k] = found

    def most_threads(self, cases: list[Case], launch: Launch) -> int | None:
        """The most threads per block of any launch the check makes of the kernel on ``cases`` (every ``threads=``
        option; else each case's ``launch=`` or ``host.launch_config``); None for a host function that does not say
        how it launches."""
        if self.p.host is not None and getattr(self.p.host, "launch_config", None) is None:
            return None
        if self.thread_options:  # cycled over the cases, the race stage's runs take the others: any may launch
            return max(math.prod(o) for o in self.thread_options)
        most = 0
        for case in cases:
            try:
                _, block = self.config(case, self.host_call(case)[1], launch)
            except SetupError:  # not a launch the check made
                continue
            most = max(most, math.prod(as_dim(block)))
        return most or None

    def host_call(self, case: Case) -> tuple[tuple[np.ndarray, ...], tuple]:
        """NumPy outputs and the kernel's arguments, for instrumented runs in the simulator."""
        outs = tuple(np.full(e.shape, fills(e, self.p.out_init)[0], dtype=e.dtype) for e in case.expected)
        ins = tuple(np.array(x) if isinstance(x, np.ndarray) else x for x in case.inputs)
        return outs, (tuple(self.p.args(ins, outs)) if self.p.args else ins + outs)
