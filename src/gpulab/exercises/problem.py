"""An exercise as data: :class:`Problem` (what to compute, on which inputs, launched how, judged
how), its efficiency :class:`Budget` and the :class:`Case` s it is run on."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from .. import runtime
from ..errors import UsageError
from .compare import LAMBDA

__all__ = ["Budget", "Case", "Problem", "Tree", "random_arrays"]

Size = Any  # an int or a shape tuple, passed to the ``inputs`` function
Dim = tuple[int, ...]


@dataclass
class Budget:
    """Efficiency limits, checked in the simulator with :func:`gpulab.trace.trace` on one case.

    A kernel that is correct but over a limit gets half the points and a diagnosis. Every limit may
    be a number or a function of the case's size ``size -> number``:

    * ``reads_per_element={"A": 4}``: no element of argument ``A`` is read from global memory more
      than 4 times (tiled matmul: ``{"A": lambda s: ceil(s[2] / TILE), "B": ...}``);
    * ``reads_per_thread=`` / ``writes_per_thread=``: global reads / writes by one thread;
    * ``sectors={"A": 2.0, "C": 2.0}`` (or ``sectors=2.0`` for every array argument): coalescing.
      For each warp request (one load or store instruction of 32 lanes) the 32-byte sectors it
      touches are counted and divided by the ideal (the fewest sectors holding the distinct elements
      it needs: 4 for 32 consecutive float32, 1 when all lanes read one element). The limit is that
      ratio, for reads and for writes: 1.0 is perfect, 2.0 allows misaligned or half-used sectors, a
      kernel with x along rows of a 32-wide float32 array scores 8.0;
    * ``shared_bytes=``: shared memory of one block in bytes. Allow the padded tiles that avoid bank
      conflicts: two TILE x TILE float32 tiles padded by one column are
      ``shared_bytes=2 * TILE * (TILE + 1) * 4`` (see :func:`tile_bytes`);
    * ``barriers_per_thread=``: the most ``cuda.syncthreads()`` one thread may pass (a block sum with warp
      shuffles needs 1, a shared-memory tree of 128 threads 8);
    * ``atomics={"hist": 1024}``: ``cuda.atomic.*`` updates of a global array in the whole launch (a privatized
      histogram makes at most one per bin per block; one per value means the values went straight to global
      memory); ``atomics_per_thread=``: global atomic updates by one thread (one thread merging every bin of
      its block goes over it);
    * ``shared_reads_per_thread=``: the most shared-memory element reads one thread may make; usually
      :class:`Tree` (``Tree()``, ``Tree(trees=2)``), a limit that grows with log2 of the traced launch's threads
      per block: a tree reduction reads a few values per thread and step, a loop of one thread over the block's
      values reads one per thread of the block;
    * ``min_shuffles=``: the fewest warp shuffles (``cuda.shfl_*_sync``) the thread that made the most must have
      made: for exercises whose point is shuffles (a warp combines its 32 lanes in log2(32) = 5 steps, so 5);
      a kernel that reaches the right result without them gets half the points;
    * ``size=``: which case is traced (default: the largest);
    * ``names=``: the traced kernel's arguments as the limits name them, in order (default: the kernel's own
      parameter names): for a check whose learners name their parameters freely (the capstone's ops);
    * ``host_launch=True``: for a ``host=`` check, trace the launch of the kernel the host function makes (the
      capstone's ops, whose hosts launch the learner's kernel as training does). Without it a ``host=`` check has
      no budget (a host may compute without launching anything: the emulated gpu-size tier's stand-ins do);
    * ``writers_per_element={"cols": 1}``: the most threads that may write one element of an output (stores, not
      atomics): a kernel that computes each element once has one writer per element; a loop that ignores an axis
      of the launch (``cuda.grid(1)`` in a 2-D launch) has every row of threads write every element again. This
      one is not a budget: a kernel over it is "failed" with half the points (on a GPU it repeats its work once
      per row of threads), and in gpu mode it is traced in the simulator on the smallest case with two rows
      or more, when the ``host=`` function has ``on_kernel`` (:mod:`.writers`);
    * ``block=``: for a ``host=`` check of a grid-stride kernel (right for any launch), the one block the traced
      launch runs in place of the host's launch (the capstone's simulator launches have 8 threads, too few to
      count a warp's sectors): e.g. ``(32, 4)`` or ``32``. The host's own launch is traced without it;
    * ``grid=``: with ``block=``, the traced launch's grid (default one block): ``(1, 2)`` puts two blocks along
      y, so that a loop that ignores ``cuda.blockIdx.y`` repeats its work there and ``writers_per_element`` sees it;
    * ``hint=``: the advice for a kernel over any of these limits, in place of the generic one (which says to
      stage data in shared memory, or to allocate less of it): for an exercise whose fix is another, e.g. warp
      shuffles in place of shared memory. A dict ``{check name: hint}`` replaces only those checks' hints
      (``{"budget: reads of x": ...}``), for an exercise where one limit has its own fix and the others do not.
    """

    reads_per_element: dict[str, Any] = field(default_factory=dict)
    reads_per_thread: Any = None
    writes_per_thread: Any = None
    sectors: Any = field(default_factory=dict)
    shared_bytes: Any = None
    barriers_per_thread: Any = None
    atomics: dict[str, Any] = field(default_factory=dict)
    atomics_per_thread: Any = None
    shared_reads_per_thread: Any = None
    min_shuffles: Any = None
    size: Size = None
    names: Sequence[str] | None = None
    host_launch: bool = False
    block: Any = None
    grid: Any = None
    writers_per_element: dict[str, Any] = field(default_factory=dict)
    hint: str | dict[str, str] = ""


@dataclass(frozen=True)
class Tree:
    """A per-thread limit on shared-memory reads that grows as a tree reduction does: ``trees`` trees over the
    launch's ``threads`` per block, each ``per_step * log2(threads) + extra`` reads. A halving step reads at most
    ``per_step`` values in a thread (``buf[tx] += buf[tx + s]``: 2; ``if buf[tx + s] > buf[tx]: buf[tx] =
    buf[tx + s]``: 3); ``extra`` covers the reads around the tree (the result in ``buf[0]``, a warp's sums). A loop
    of one thread over the block's values reads ``threads`` values (128 in a block of 128, limit 25). ``what``
    names the algorithm in the verdict ("a tree", "a scan")."""

    per_step: int = 3
    extra: int = 4
    trees: int = 1
    what: str = "a tree"

    def limit(self, threads: int) -> int:
        """The most reads one thread may make in a block of ``threads`` threads."""
        return self.trees * (self.per_step * _log2(threads) + self.extra)

    def explain(self, threads: int) -> str:
        """The limit as the learner reads it: how it follows from the block size."""
        steps, limit = _log2(threads), self.limit(threads)
        if self.trees == 1:
            return (
                f"{self.what} over {threads} threads takes log2({threads}) = {steps} steps: at most "
                f"{self.per_step}*{steps}+{self.extra} = {limit} reads per thread"
            )
        return (
            f"{self.trees} trees over {threads} threads take log2({threads}) = {steps} steps each: at most "
            f"{self.trees}*({self.per_step}*{steps}+{self.extra}) = {limit} reads per thread"
        )


def _log2(n: int) -> int:
    """ceil(log2(n)) for n >= 1: the halving steps of a tree over n values."""
    return max(int(n) - 1, 0).bit_length()


def tile_bytes(tile: int, tiles: int = 2, itemsize: int = 4, pad: int = 1) -> int:
    """Bytes of ``tiles`` shared tiles of ``tile x (tile + pad)`` elements (a ``shared_bytes`` limit
    that accepts padded tiles as well as unpadded ones)."""
    return int(tiles * tile * (tile + pad) * itemsize)


@dataclass
class Case:
    """One input the kernel was run on."""

    size: Size
    seed: int
    inputs: tuple
    expected: tuple
    # Per-output allowed absolute error when the check uses ``reduction=`` (else None: rtol/atol).
    atol: tuple | None = None

    def describe(self) -> str:
        shapes = ", ".join(describe_arg(x) for x in self.inputs)
        return f"size={self.size!r}, seed={self.seed} (inputs: {shapes})"

    @property
    def square(self) -> bool:
        """Every 2-D input and output is square (so row/column mix-ups cannot show)."""
        arrays = [x for x in self.inputs + self.expected if isinstance(x, np.ndarray) and x.ndim >= 2]
        return bool(arrays) and all(len(set(x.shape)) == 1 for x in arrays) and len({x.shape[0] for x in arrays}) == 1


def describe_arg(x: Any) -> str:
    if isinstance(x, np.generic):
        return repr(x.item())
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{np.dtype(x.dtype).name}{tuple(x.shape)}"
    return repr(x)


def random_arrays(
    rng: np.random.Generator, *shapes: Any, dtype: Any = np.float32, low: float = -1.0, high: float = 1.0
) -> tuple[np.ndarray, ...]:
    """Uniform random arrays of the given shapes (helper for ``inputs=`` functions)."""
    return tuple((rng.uniform(low, high, size=s)).astype(dtype) for s in shapes)


_OPTIONS = (
    "threads",
    "launch",
    "host",
    "args",
    "points",
    "seed",
    "rtol",
    "atol",
    "reduction",
    "out_init",
    "out_names",
    "mistakes",
    "budget",
    "ptx",
    "race_check",
    "timeout",
    "given",
)


@dataclass
class Problem:
    """One exercise: what the kernel must compute, on which inputs, launched how, judged how.

    The fields are :func:`check_kernel`'s keywords; ``gpu_sizes`` are the sizes used in gpu mode
    (default: ``sizes``). ``problem.check(kernel)`` runs the checks at the sizes of the current mode;
    ``problem.check(kernel, scale="gpu")`` uses ``gpu_sizes`` in either mode (the emulated gpu-size
    tests). Keyword overrides replace fields for one run, e.g. ``host=emulated`` to check a NumPy
    emulation of the kernel in place of the kernel.
    """

    name: str
    spec: Callable[..., Any]
    inputs: Callable[[Size, np.random.Generator], Any]  # a tuple of arguments, or one array
    sizes: Sequence[Size]
    gpu_sizes: Sequence[Size] | None = None
    threads: Any = None
    launch: Callable[..., tuple[Any, Any]] | None = None
    host: Callable[..., Any] | None = None
    args: Callable[[tuple, tuple], tuple] | None = None
    points: float = 1
    seed: int = 0
    rtol: float = 1e-5
    atol: float = 1e-6
    reduction: int | tuple[int, ...] | Callable[..., Any] | None = None
    reduction_lambda: float = LAMBDA
    """The ``lam`` of the ``reduction=`` tolerance, :func:`.compare.probable_bound`: 10, or more for sums whose
    rounding errors share a sign (lab06.GRAD_NORM's squares)."""
    out_init: Any = None
    out_names: Sequence[str] | None = None
    mistakes: dict[str, Callable[..., Any]] | None = None
    budget: Budget | None = None
    ptx: str | None = None
    """A signature to compile the kernel for (``"void(float32[:], float32[:])"``), ``"auto"`` for the types of the
    first case's arguments (:func:`.ptxcheck.signature_for`), or None: no PTX check."""
    race_check: bool = True
    timeout: float = 30.0
    updated_inputs: Sequence[int] = ()
    """Inputs (by position) that the kernel or host function updates in place by design, e.g. RNG states it advances
    or buffers an all-reduce sums in place: not noted as changed (see :meth:`.run.Runner.changed`). An exercise whose
    kernel updates an array in place more often copies the input into an output (``args=``), which is never noted."""
    given: Sequence[Any] = ()
    """What the exercise hands the learner to build on (a gpulab kernel or function their code may call, e.g.
    lab 07's ``matmul``): :mod:`.own_code` refuses code that is or calls any other reference implementation."""
    usage: str = ""
    """For a Problem whose answer goes in through ``host=`` (defined with a reference stand-in, or with no launch at
    all): the call a learner writes, e.g.
    ``"L10.BUDGET.check(host=L10.budget_host(training_bytes, largest_batch))"``, quoted when a check is called without
    ``host=`` (see :meth:`check`)."""

    def sizes_for(self, scale: str | None = None) -> Sequence[Size]:
        """The sizes for ``scale`` ("gpu" or "simulator"; default: the current mode)."""
        scale = scale or runtime.mode()
        if scale not in ("gpu", "simulator"):
            raise UsageError(f"Problem {self.name}: scale must be 'gpu' or 'simulator', got {scale!r}")
        return list(self.gpu_sizes or self.sizes) if scale == "gpu" else list(self.sizes)

    def check(self, kernel: Any = None, *, scale: str | None = None, trusted: bool = False, **overrides: Any) -> Any:
        """Run the checks on ``kernel`` (see :func:`check_kernel`); returns a CheckResult. ``trusted=True``:
        ``kernel`` is gpulab's own reference, run by gpulab's tests (no own-code stage, see
        :func:`gpulab.exercises.check.run_problem`).

        A Problem defined with ``host=`` (gpulab's reference stand-in), or with none of ``threads=``, ``launch=``
        and ``host=``, checks the learner's function only when it comes through ``host=``: called without one
        (``check()``, or the function passed positionally) it refuses with a verdict naming :attr:`usage`; it runs
        its own ``host`` only for ``trusted=True``."""
        from .check import run_problem
        from .misuse import bad_option, own_options, reference_host_refused, refused

        unknown = set(overrides) - set(_OPTIONS) - {"sizes", "name"}
        if unknown:
            raise TypeError(f"Problem.check: unknown option(s) {sorted(unknown)}; valid: {sorted(_OPTIONS)}")
        for key, value in overrides.items():
            if (why := bad_option(key, value)) is not None:
                return refused(self.name, overrides.get("points", self.points), f"{self.name}.check: {why}")
        kw = dict(overrides)
        modes = ("threads", "launch", "host")
        if not trusted and all(kw.get(k) is None for k in modes):
            # a host here is gpulab's reference, which would pass whatever the learner wrote (or nothing); without
            # one the learner's function is the host, and only host= says so
            if self.host is not None or all(getattr(self, k) is None for k in modes):
                return reference_host_refused(self.name, self.usage, kernel, kw.get("points", self.points))
        if any(k in overrides for k in ("threads", "launch", "host")):
            for k in ("threads", "launch", "host"):
                kw.setdefault(k, None)
        kw.setdefault("sizes", self.sizes_for(scale))
        problem = dataclasses.replace(self, **{k: v for k, v in kw.items() if k != "name"})
        name = kw.get("name") or (None if kernel is not None else self.name)
        res = run_problem(problem, kernel if kernel is not None else problem.host, name, trusted=trusted)
        return own_options(overrides, res)
