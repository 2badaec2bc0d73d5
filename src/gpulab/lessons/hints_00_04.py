"""Hints for the exercises of lessons 00-04, two tiers each: the idea (no code), then an outline of the code.

``lessons.hint("01", "add")`` prints them one call at a time (:mod:`.hints`); :mod:`.problems` attaches them to
the exercises of :mod:`.ex_00_04`. ``FUNCTION_EXERCISES`` are the napkin-math functions these lessons check with
``lessons.check_function`` (no reference kernel: the worked lesson holds the answer); ``HINT_ONLY`` are tasks
without a check, whose last tier is the answer.
"""

from __future__ import annotations

__all__ = ["FUNCTION_EXERCISES", "HINTS", "HINT_ONLY"]

FUNCTION_EXERCISES = [("00", "conv_flops"), ("02", "fma_intensity"), ("04", "blocks_per_sm")]
HINT_ONLY = [("01", "block_shape")]

HINTS: dict[tuple[str, str], tuple[str, ...]] = {
    ("00", "conv_flops"): (
        "Every output value (h_out x w_out positions for each of the c_out filters) is one dot product over its "
        "window: k x k taps in each of the c_in input channels. A dot product of length L is L multiplies and L "
        "adds.",
        "return 2 * (the number of outputs) * (the length of one dot product), with outputs = h_out * w_out * "
        "c_out and length = k * k * c_in.",
    ),
    ("01", "add"): (
        "One thread per element: each thread works out its global index and handles that element. The grid is "
        "rounded up to whole blocks, so the threads past the end of the arrays must do nothing.",
        "take the thread's global index from the 1-D grid; check that it is inside out (the last block overhangs "
        "the end); then store the sum of a's and b's elements at that index into out.",
    ),
    ("01", "scale2d"): (
        "A 2-D grid: each thread owns one element (row, column). x is the fastest thread index and walks the "
        "columns, the last axis; guard both dimensions, since the grid overhangs both edges.",
        "take the column (x, the fastest index) and the row (y) from the 2-D grid, in that order; check the row "
        "against out's axis 0 and the column against its axis 1; then the thread writes alpha times its element of a "
        "to the same place in out.",
    ),
    ("01", "grid_stride"): (
        "The grid has fewer threads than there are elements: each thread handles several, starting at its own "
        "global index and stepping by the number of threads in the whole grid, so no two threads meet.",
        "one for loop over a range with three arguments: it starts at the thread's global index, stops at the "
        "number of elements, and steps by the number of threads in the whole grid (cuda.gridsize(1)); its body is "
        "add's one line. No separate guard: the range stops before the end.",
    ),
    ("01", "at"): (
        "A device function returns a value: the element when (i, j) lies inside a, else a float32 zero. Python "
        "(and numba) read a negative index as counting from the end, so test the lower bounds too.",
        "test both ends of both indices: a row index is valid from 0 to a.shape[0] - 1, a column index from 0 to "
        "a.shape[1] - 1 (a chained comparison reads like the maths). Inside, return the element; outside, return a "
        "float32 zero (a bare 0.0 is a float64 in Numba, and a device function returns one type).",
    ),
    ("01", "block_shape"): (
        "Idle threads appear only where a block hangs over an edge of the matrix: along x the 48 columns must be "
        "cut into whole blocks, and along y the 24 rows.",
        "bx must divide 48 and by must divide 24, with 64 <= bx * by <= 1024 threads per block.",
        "Shapes that work include (8, 8), (16, 4), (16, 8) and (48, 12).",
    ),
    ("02", "saxpy"): (
        "The same shape as add_kernel: one thread per element, a bounds guard, and one multiply-add per thread.",
        "as in add_kernel: the global index, a guard against out's size, then one line that scales the thread's "
        "element of x by alpha and adds its element of y.",
    ),
    ("02", "pipelined_saxpy"): (
        "Cut the arrays into chunks and give chunk k to stream k % n_streams: its copies in, its kernel and its "
        "copy out all go to that one stream, in that order, so one chunk's copies can overlap another chunk's "
        "kernel. Allocate each stream's device buffers once, before the loop: an allocation issued between two "
        "streams' commands keeps them from overlapping. Wait for everything once, after the loop.",
        "before the loop: a list of n_streams streams, and for each stream its own three device buffers (x, y, "
        "out), one chunk long. Loop over the chunk starts in steps of chunk; chunk number k uses stream k % n_streams "
        "and that stream's buffers. For each chunk: the slice of the host arrays it covers (the last one may be "
        "shorter), views of the buffers cut to that length, two copies in with stream=, the saxpy launch with the "
        "stream as the third value in its brackets (enough blocks of 128 threads for the chunk), and one copy back "
        "into out_h's slice with stream=. After the loop, synchronize once.",
    ),
    ("02", "transpose_naive"): (
        "One thread per element of a: it reads a[i, j] and writes it to out[j, i]. Let x walk the columns of a, "
        "so the reads are coalesced (the writes then are strided: the next exercise fixes that).",
        "the column (x) and the row (y) from the 2-D grid; guard them against a's shape (not out's: out has the "
        "axes the other way round); copy the thread's element of a into out with the two indices exchanged.",
    ),
    ("02", "transpose_tiled"): (
        "A block of 32 x 8 threads moves one 32 x 32 tile through shared memory: it reads the tile along rows of a "
        "(coalesced), waits, then writes along rows of out by reading the tile by columns. A tile 33 wide puts a "
        "column's 32 values in 32 different banks.",
        "a 32 x 33 float32 tile in shared memory; the block's tile starts at row blockIdx.y * 32 and column "
        "blockIdx.x * 32 of a. Load: each thread fills 4 rows of the tile (ty, ty + 8, ty + 16, ty + 24), reading "
        "along a row of a with tx, guarded against a's shape. A barrier. Store: the same 4 rows of out, whose tile "
        "starts where a's tile does with row and column exchanged; read the tile with its two indices exchanged, so "
        "that tx still walks along a row of out, guarded against out's shape.",
    ),
    ("02", "fma_intensity"): (
        "Arithmetic intensity is FLOPs per byte moved to or from global memory, counted per element.",
        "FLOPs: one multiply-add is 2. Bytes: three float32 loads (a, b, c) and one float32 store, 4 bytes each. "
        "Return FLOPs / bytes.",
    ),
    ("03", "matvec"): (
        "One thread per row of A: row i of A dotted with x, summed in a float32 variable and written once.",
        "the global index and a guard against y's size; a float32 accumulator starting at zero; a loop over the "
        "columns of A that adds the thread's row's element times the matching element of x; one store into y after "
        "the loop.",
    ),
    ("03", "matmul_naive"): (
        "One thread per element of C: C[i, j] is row i of A dotted with column j of B. x walks the columns of C, "
        "so neighbouring threads read neighbouring elements of each row of B.",
        "the column from x and the row from y of the 2-D grid, both guarded against C's shape; a float32 accumulator; "
        "a loop over the shared dimension (A's columns, B's rows) adding the products of row i of A with column j of "
        "B; one store into C after the loop.",
    ),
    ("03", "linear_relu"): (
        "The naive matmul with two additions: the sum starts at the bias of its output feature (one per column "
        "of Y), and only its positive part is kept.",
        "matmul_naive's shape with two changes: the accumulator starts at the bias of the thread's column (one bias "
        "per output feature), and the store keeps only the positive part (the larger of the sum and a float32 "
        "zero). W is (inputs, outputs): the loop walks down its column.",
    ),
    ("04", "blur3"): (
        "Each block stages its 32 elements plus one neighbour on each side (the halo) in shared memory, waits "
        "until all are there, then each thread averages three neighbours read from shared memory. Outside x "
        "counts as 0.",
        "a shared array of 34 float32: slot tx + 1 holds the thread's own element, the first and last slots the "
        "halo. Each thread loads its element (0 past the end); thread 0 also loads the element just before the "
        "block's first (0 before the start of x), and the block's last thread the one just after its last (0 past "
        "the end). A barrier. Then each thread inside x writes the mean of the three slots centred on its own.",
    ),
    ("04", "matmul_tiled"): (
        "Walk K in steps of 16. Each step the block loads a 16 x 16 tile of A and one of B into shared memory (one "
        "element per thread, 0 outside the matrices), waits, and every thread adds 16 products from the tiles; it "
        "waits again before the next step overwrites them.",
        "two 16 x 16 float32 shared tiles (one for A, one for B) and a float32 accumulator. Loop over K in steps of "
        "16. Each step: the thread loads one element of A's tile (its row, the step's start + tx) and one of B's (the "
        "step's start + ty, its column), 0 where that is outside the matrix; a barrier; 16 multiply-adds along the "
        "tiles' shared axis; a barrier again before the next step overwrites the tiles. After the loop, a guarded "
        "store into C.",
    ),
    ("04", "blocks_per_sm"): (
        "Four limits, each a whole number of blocks: threads (counted in whole warps), the SM's block limit, "
        "registers (allocated per warp in granules, per partition) and shared memory (per block plus the "
        "reserved part, in granules). The answer is the smallest.",
        "warps = ceil(threads / warp_size); by_threads = max_warps_per_sm // warps; regs per warp = "
        "registers_per_thread * warp_size rounded up to register_granularity; warps by registers = "
        "(registers_per_sm // partitions) // regs per warp * partitions; by_registers = that // warps; shared = "
        "(shared_bytes + reserved) rounded up to shared_granularity; by_shared = shared_per_sm // shared; return "
        "the min of by_threads, max_blocks_per_sm, by_registers, by_shared",
    ),
    ("04", "matmul_strip"): (
        "Each thread computes 4 outputs of one row of C, at columns W apart (W: the threads along x in the whole "
        "grid). One load of A[i, k] then serves 4 multiply-adds from registers, and the lanes of a warp still read "
        "neighbouring columns of B.",
        "a local array of 4 float32 accumulators, zeroed; column j0 and row i from the 2-D grid; W, the threads "
        "along x in the whole grid (grid dimension times block dimension). For each k: load the thread's element of "
        "A's row once into a local variable, then for each of the 4 outputs t (column j0 + t * W, if inside C) add "
        "that variable times B's element at row k of that column. After the loop, store each accumulator whose "
        "column is inside C.",
    ),
}
