"""The capstone's coalescing budgets (lab 09): which arrays of an op's kernel must be accessed along their
contiguous axis, and the advice for a kernel that is not.

A grid-stride kernel is right for any launch, so a kernel with x (the fastest thread index) along the rows, or a
flat index decoded with the row fastest, computes the right result; only its memory traffic shows the mistake:
a warp's 32 lanes touch 32 rows, one 32-byte sector each, where 4 sectors hold 32 neighbouring float32. Each
check traces one launch in the simulator (:class:`gpulab.exercises.Budget`): a 2-D grid-stride kernel in
:data:`TRACE_GRID_2D` blocks of :data:`TRACE_BLOCK_2D` threads, a 1-D one in one block of :data:`TRACE_BLOCK_1D`
(the checks' own launches have 8, too few to fill a warp), a one-thread-per-output matmul as its check launched it
(blocks of TILE x TILE). The arrays are named as
the course kernel's parameters (:data:`gpulab.capstone.COURSE_KERNELS`), whatever the learner called them.
Measured 2026-12-03 in simulator mode: the course's kernels and lab 09's solutions use at most 1.17x the ideal
sectors (lab 03's plain matmul in 16 x 16 blocks 1.29x), the same kernels with the row fastest 6.7-8x (lab 04's
tiled matmul with x along the rows 3.3x); the limit is 2x, as in labs 03, 04 and 07.

softmax_xent takes one row (sample) per step by design (K = 10 classes), so a warp's reads of logits and writes of
grad land a row apart: 8x the ideal sectors for the course's own kernel (7.98x and 8.00x at 128 x 10), and a
correct kernel with one step per element (t = r * K + k) writes losses at 3.2x. Only labels has a budget: the
course's kernel reads it at 1.00x, the one-step-per-element kernel at 1.60x (at most 2x: a warp's few rows may
straddle one sector boundary), and a kernel that gives each thread a contiguous chunk of rows (r from t * per)
instead of a grid stride at 4.00x (traced at :data:`TALL_XENT` in one block of 32: 4 rows per thread).

The two ops launched in 2-D (matmul, im2col) also count the threads that write each element of their output
(``writers_per_element``, :mod:`gpulab.exercises.writers`): a 1-D grid-stride loop, ``for t in range(cuda.grid(1),
cols.size, cuda.gridsize(1))``, is right in a 2-D launch, but every row of threads repeats it (``cuda.grid(1)``
counts x only). Training's launch on a GPU has about one row of threads per row of the output (the first
convolution's im2col at batch 128: 100,352 rows, so each element is written 100,352 times); the traced launch has 4
rows of threads in 2 blocks (a one-thread-per-output matmul: its check's TILE x TILE blocks), so such a loop writes
each element 4 times there, and a loop that ignores cuda.blockIdx.y twice. That check is "failed" with half the
points, not "over budget": the kernel is not registered, as it would make training crawl on a GPU.
"""

from __future__ import annotations

from .exercises import Budget

__all__ = ["BUDGETS", "TRACE_BLOCK_1D", "TRACE_BLOCK_2D", "TRACE_GRID_2D", "TALL_COL2IM", "TALL_POOL", "TALL_XENT"]

TRACE_BLOCK_2D = (32, 2)  # one warp per row of the block: x walks 32 columns
TRACE_GRID_2D = (1, 2)  # two blocks along y: 4 rows of threads, each of which must take its own rows
TRACE_BLOCK_1D = 32
# Tall inputs, traced: a warp's 32 neighbouring t cover 32 rows (of 40 bytes for maxpool's out, 80 for the dx of
# col2im and maxpool_backward) when the row is fastest (32 sectors), 4 or 5 sectors when the column is; the checks'
# other inputs are so small that a whole image fits in a few sectors either way.
TALL_COL2IM = (1, 1, 34, 20, 3, 1, 1)  # dx (1, 1, 34, 20)
TALL_POOL = (1, 1, 66, 20, 2, 2)  # out (1, 1, 33, 10); maxpool_backward's dx (1, 1, 66, 20)
TALL_XENT = (128, 10)  # 128 rows: in one traced block of 32 threads, a chunk of 4 rows per thread

_LIMIT = 2.0


def _flat_hint(out: str, fast: str, rows: str, shape: str) -> str:
    return (
        f"neighbouring steps t, t + 1 (neighbouring threads) should write neighbouring elements of {out}'s last axis: "
        f"decode t in C order with {fast} fastest, {shape}. With {rows} fastest a warp's writes land a whole row "
        "apart, one memory sector each: the right result at several times the memory traffic."
    )


BUDGETS: dict[str, Budget] = {
    "matmul": Budget(
        sectors={"a": _LIMIT, "b": _LIMIT, "c": _LIMIT},
        host_launch=True,  # the check's host launches the learner's kernel as training does
        names=("a", "b", "c"),
        block=TRACE_BLOCK_2D,  # a one-thread-per-output matmul (block=) is traced as its check launched it
        grid=TRACE_GRID_2D,
        writers_per_element={"c": 1},
        hint="x, the fastest thread index, must give the column j of C (its contiguous axis), so that neighbouring "
        "threads read neighbouring elements of B's and A's rows and write neighbouring elements of C: "
        "`j, i = cuda.grid(2)` (grid-stride: `j0, i0 = cuda.grid(2)`, `sj, si = cuda.gridsize(2)`); "
        "`i, j = cuda.grid(2)` takes the row from x, and a warp's loads and stores land a row apart.",
    ),
    "im2col": Budget(
        sectors={"cols": _LIMIT},  # x's reads are strided by design: cols has the channel fastest
        host_launch=True,
        names=("x", "cols", "kh", "kw", "stride", "pad", "ho", "wo"),
        block=TRACE_BLOCK_2D,
        grid=TRACE_GRID_2D,
        writers_per_element={"cols": 1},
        hint="x, the fastest thread index, must walk the columns q of cols (its contiguous axis): "
        "`q0, r0 = cuda.grid(2)` and `sq, sr = cuda.gridsize(2)`, the loop over the rows r outside, over q "
        "inside. `r0, q0 = cuda.grid(2)` puts a warp's 32 writes in 32 rows of cols, one memory sector each.",
    ),
    "col2im": Budget(
        sectors={"dx": _LIMIT},  # dcols's reads are a gather, strided by design
        host_launch=True,
        names=("dcols", "dx", "kh", "kw", "stride", "pad", "ho", "wo"),
        block=TRACE_BLOCK_1D,
        size=TALL_COL2IM,
        hint=_flat_hint("dx", "w", "h", "w = t % W, h = (t // W) % H, c = (t // (H * W)) % C, n = t // (C * H * W)"),
    ),
    "maxpool": Budget(
        sectors={"out": _LIMIT, "arg": _LIMIT},
        host_launch=True,
        names=("x", "out", "arg", "k", "stride"),
        block=TRACE_BLOCK_1D,
        size=TALL_POOL,
        hint=_flat_hint(
            "out", "j", "i", "j = t % WO, i = (t // WO) % HO, c = (t // (HO * WO)) % C, n = t // (C * HO * WO)"
        ),
    ),
    "maxpool_backward": Budget(
        sectors={"dx": _LIMIT},
        host_launch=True,
        names=("dout", "arg", "dx", "k", "stride"),
        block=TRACE_BLOCK_1D,
        size=TALL_POOL,
        hint=_flat_hint("dx", "w", "h", "w = t % W, h = (t // W) % H, c = (t // (H * W)) % C, n = t // (C * H * W)"),
    ),
    "softmax_xent": Budget(
        sectors={"labels": _LIMIT},  # logits and grad a row apart by design, losses scattered in a correct kernel
        host_launch=True,
        names=("logits", "labels", "grad", "losses"),
        block=TRACE_BLOCK_1D,
        size=TALL_XENT,
        hint="neighbouring threads should take neighbouring rows: step with a grid stride, `for r in "
        "range(cuda.grid(1), N, cuda.gridsize(1)):`, not over a contiguous chunk of rows per thread (r from t * per): "
        "with chunks a warp's 32 reads of labels (and writes of losses) land `per` rows apart, one memory sector each.",
    ),
}
