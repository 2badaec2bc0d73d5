"""The exercise harness: run a learner's CUDA kernel against a NumPy spec and explain what went wrong.

Modelled on GPU-Puzzles' ``lib.py``: the learner writes a kernel body, the harness launches it on
several seeded random inputs (sizes that are not multiples of the block size, size 1, empty,
non-square) and compares every output with a NumPy reference::

    from gpulab.exercises import check_kernel

    @cuda.jit
    def add_kernel(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    result = check_kernel(
        add_kernel,
        spec=lambda a, b: a + b,                     # NumPy reference: inputs -> expected output(s)
        inputs=lambda n, rng: (rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)),
        sizes=[1, 7, 100, 300],                      # each size is passed to ``inputs`` with its own seed
        threads=[128, 32],                           # one thread per output element; block sizes to try
        points=2,
    )
    result          # a table in Jupyter; str(result) is the same as text
    assert result.passed, result

An exercise can also be data: ``Problem(name, spec, inputs, sizes, gpu_sizes=..., <the same
keywords>)``, checked with ``problem.check(kernel)``.

How a kernel is launched (exactly one of):

* ``threads=T`` (an int or tuple, or a list of them): one thread per element of the first output,
  **x along the last (contiguous) axis**: for an output of shape ``(rows, cols)`` and
  ``threads=(bx, by)`` the grid is ``(ceil(cols / bx), ceil(rows / by))``, matching
  ``j, i = cuda.grid(2)`` with ``out[i, j]`` (i the row). A list means "any of these block shapes
  must work"; the cases cycle through them. A kernel written the other way (``i, j =
  cuda.grid(2)``, x along rows) that fails because of it (elements never written, an index past
  the end, a transposed result) is tried with x and y exchanged; if it is correct that way the verdict
  says so, shows what the course's launch gives and names the fix (``j, i = cuda.grid(2)``), but it is
  not a pass: every later launch (a lesson's next cells, gpulab's launchers, the capstone) puts x along
  the columns. It earns half the points, and ``details["orientation"] == "exchanged"``.
* ``launch=fn``: ``fn(*args) -> (griddim, blockdim)`` is called with the kernel's arguments, for
  kernels whose grid is not one thread per element (grid-stride loops, one block per row, ...).
  2-D launches are tried with x and y exchanged too.
* ``host=fn``: ``fn(*args)`` launches the kernel(s) itself (a learner's host function).

The kernel's arguments are ``(*inputs, *outputs)`` unless ``args=fn(inputs, outputs) -> tuple`` says
otherwise; messages use the kernel's own parameter names (``C[3, 4]``). Outputs are filled with a
value the kernel does not produce (NaN; the smallest integer; bool outputs run once filled with
False and once with True), so elements never written are seen; ``out_init=0`` starts them at zero
instead (for ``cuda.atomic.add``). NaN expected and NaN got agree. In gpu mode outputs sit at the
front of a larger buffer whose tail is checked afterwards (writes beyond ``n``).

What is checked (the pipeline in :mod:`.check`), and the verdict a learner gets:

* the placeholder ``raise NotImplementedError`` -> "not implemented yet", 0 points, no crash;
* run (:mod:`.run`): each launch has a deadline (``timeout`` seconds; the check's own extra runs, such as the
  race check's logged run, get at most 60 s and never more than ``timeout``); stuck simulator threads are
  stopped; an ``IndexError`` names the thread and block ("indexed past the end: missing bounds
  guard?"); the launch in the verdict is the one that failed. An exception is placed by its traceback
  (:mod:`.frames`; explained by :mod:`.raised`, or :mod:`.raised_elsewhere` outside the learner's lines): a line
  of the learner's code, gpulab's own code called with the learner's kernel (named, with the learner's line that
  led there), a launch that failed on the
  kernel's parameters before any line of it ran, or Numba's code that gpulab's code called for something
  else (a transfer, a synchronisation: named as such, not as a launch). What the kernel prints is kept
  aside (:mod:`.output`; on a GPU, CUDA's printf, by capturing file descriptor 1): the verdict shows its
  first 5 lines and how many more there were;
* compare (:mod:`.compare`): ``rtol``/``atol``, or ``reduction=n``: a float64 reference and the
  float32 rounding bound for sums of n terms (:func:`.compare.probable_bound`: ``min(gamma_n, 10 sqrt(n) u)``);
* diagnose (:mod:`.diagnose`, :mod:`.specific`): output untouched, elements never written, off-by-one at an edge,
  shifted, transposed (also non-square), an input read transposed (``B[j, k]`` for ``B[k, j]``),
  the last partial tile of K dropped, inf/NaN from overflow (softmax without the max subtracted),
  a unit slip (the answer times 1000, 3600, 3.6e6, 2**30 / 1e9, ... in every element: :mod:`.units`),
  "correct on square inputs, wrong on non-square", or the exercise's own
  ``mistakes={hint: wrong_spec}`` (``wrong_spec`` returns the output the mistake gives, or a list of the
  outputs it can give, e.g. one per loop bound a correct kernel may use). A shape error raised in the learner's
  array code (a matmul, a broadcast, a reshape: :mod:`.shapes`) is shown with the shapes the code was given, by
  argument name, and those each output must have; its hint is that of the named mistake that raises the same
  error on the same input (``lambda x, W, dout: dout @ W.T``) or gives a result of the shape that was stored
  into an output, else one about the operation;
* races (:mod:`.races`, simulator): an instrumented run logs every shared-memory access and output
  write with its thread and barrier epoch; it names the race and which barrier is missing (after
  the load, or before the next overwrite), two threads writing one output without
  ``cuda.atomic`` (or computing the same index), and ``cuda.syncthreads()`` inside a branch that
  not all threads of a block take (unequal barrier counts: a deadlock or undefined on a GPU); for a wrong
  result also memory nobody set (:mod:`.unset`: a shared element read before any thread wrote it, atomics or
  ``+=`` into outputs that are not zeroed). Cases are also re-run with another thread schedule and block shape;
* budgets (:mod:`.budgets`, simulator): ``budget=Budget(...)``: reads per element, per thread,
  coalescing (32-byte sectors per warp request vs the ideal), shared memory per block, barriers and atomics,
  shared-memory reads per thread (a tree reduction's log2 steps, :class:`Tree`, not one thread's loop over the
  block) and, for exercises about them, a minimum of warp shuffles; and one writer per output element
  (:mod:`.writers`, ``Budget(writers_per_element=...)``: a loop that ignores an axis of the launch repeats its
  work; in gpu mode traced in the simulator on a small case);
* PTX (:mod:`.ptxcheck`): ``ptx="void(float32[:], ...)"`` compiles the kernel's source with NVVM in
  a child process (no GPU needed): it is real CUDA, not only Python the simulator accepts.

Scoring: all checks pass -> ``points``; correct but over budget, not compilable, correct only with x and y
exchanged, or repeating its work (several threads write one element) -> half; else 0. In a lab cell,
:func:`gpulab.grading.report` counts that half once for every check of the function, hidden checks that skip
budgets and PTX included.
A mistake in the exercise itself (zero threads, a spec returning a scalar, an ``inputs`` function
returning the wrong type) is status "setup error", addressed to the exercise's author.
"""

from __future__ import annotations

from ..source import kernel_source, standalone_source
from .check import check_kernel
from .compare import rounding_bound
from .problem import Budget, Case, Problem, Tree, random_arrays, tile_bytes
from .result import Check, CheckResult
from .run import KernelTimeout, SetupError

__all__ = [
    "Budget",
    "Case",
    "Check",
    "CheckResult",
    "KernelTimeout",
    "Problem",
    "SetupError",
    "Tree",
    "check_kernel",
    "kernel_source",
    "random_arrays",
    "rounding_bound",
    "standalone_source",
    "tile_bytes",
]
