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
        "i = cuda.grid(1); if i is inside out (i < out.size): out[i] = a[i] + b[i]",
    ),
    ("01", "scale2d"): (
        "A 2-D grid: each thread owns one element (row, column). x is the fastest thread index and walks the "
        "columns, the last axis; guard both dimensions, since the grid overhangs both edges.",
        "j, i = cuda.grid(2) (j: column, i: row); if i < out.shape[0] and j < out.shape[1]: out[i, j] = alpha * "
        "a[i, j]",
    ),
    ("01", "grid_stride"): (
        "The grid has fewer threads than there are elements: each thread handles several, starting at its own "
        "global index and stepping by the number of threads in the whole grid, so no two threads meet.",
        "for i in range(cuda.grid(1), out.size, cuda.gridsize(1)): out[i] = a[i] + b[i]",
    ),
    ("01", "at"): (
        "A device function returns a value: the element when (i, j) lies inside a, else a float32 zero. Python "
        "(and numba) read a negative index as counting from the end, so test the lower bounds too.",
        "if 0 <= i < a.shape[0] and 0 <= j < a.shape[1]: return a[i, j]; otherwise return float32(0.0) (a bare 0.0 "
        "is a float64 in Numba)",
    ),
    ("01", "block_shape"): (
        "Idle threads appear only where a block hangs over an edge of the matrix: along x the 48 columns must be "
        "cut into whole blocks, and along y the 24 rows.",
        "bx must divide 48 and by must divide 24, with 64 <= bx * by <= 1024 threads per block.",
        "Shapes that work include (8, 8), (16, 4), (16, 8) and (48, 12).",
    ),
    ("02", "saxpy"): (
        "The same shape as add_kernel: one thread per element, a bounds guard, and one multiply-add per thread.",
        "i = cuda.grid(1); if i < out.size: out[i] = alpha * x[i] + y[i]",
    ),
    ("02", "pipelined_saxpy"): (
        "Cut the arrays into chunks and give chunk k to stream k % n_streams: its copies in, its kernel and its "
        "copy out all go to that one stream, in that order, so one chunk's copies can overlap another chunk's "
        "kernel. Allocate each stream's device buffers once, before the loop: an allocation issued between two "
        "streams' commands keeps them from overlapping. Wait for everything once, after the loop.",
        "streams = [cuda.stream() for each of n_streams]; bufs = [[cuda.device_array(chunk, np.float32) for x, y "
        "and out] for each stream]; for k, start over the chunks: s = streams[k % n_streams]; part = slice(start, "
        "min(start + chunk, n)); x_d, y_d, out_d = (b[:size] for b in bufs[k % n_streams]); "
        "x_d.copy_to_device(x_h[part], stream=s), the same for y; saxpy[(size + 127) // 128, 128, s](alpha, x_d, "
        "y_d, out_d); out_d.copy_to_host(out_h[part], stream=s); after the loop: cuda.synchronize()",
    ),
    ("02", "transpose_naive"): (
        "One thread per element of a: it reads a[i, j] and writes it to out[j, i]. Let x walk the columns of a, "
        "so the reads are coalesced (the writes then are strided: the next exercise fixes that).",
        "j, i = cuda.grid(2); if i < a.shape[0] and j < a.shape[1]: out[j, i] = a[i, j]",
    ),
    ("02", "transpose_tiled"): (
        "A block of 32 x 8 threads moves one 32 x 32 tile through shared memory: it reads the tile along rows of a "
        "(coalesced), waits, then writes along rows of out by reading the tile by columns. A tile 33 wide puts a "
        "column's 32 values in 32 different banks.",
        "tile = cuda.shared.array((32, 33), float32); col0 = cuda.blockIdx.x * 32, row0 = cuda.blockIdx.y * 32; "
        "for r in ty, ty + 8, ty + 16, ty + 24: guarded tile[r, tx] = a[row0 + r, col0 + tx]; syncthreads; for "
        "the same r: guarded out[col0 + r, row0 + tx] = tile[tx, r]",
    ),
    ("02", "fma_intensity"): (
        "Arithmetic intensity is FLOPs per byte moved to or from global memory, counted per element.",
        "FLOPs: one multiply-add is 2. Bytes: three float32 loads (a, b, c) and one float32 store, 4 bytes each. "
        "Return FLOPs / bytes.",
    ),
    ("03", "matvec"): (
        "One thread per row of A: row i of A dotted with x, summed in a float32 variable and written once.",
        "i = cuda.grid(1); if i < y.size: acc = float32(0.0); for k in range(A.shape[1]): acc += A[i, k] * x[k]; "
        "then y[i] = acc",
    ),
    ("03", "matmul_naive"): (
        "One thread per element of C: C[i, j] is row i of A dotted with column j of B. x walks the columns of C, "
        "so neighbouring threads read neighbouring elements of each row of B.",
        "j, i = cuda.grid(2); guard i < C.shape[0] and j < C.shape[1]; acc = float32(0.0); for k in "
        "range(A.shape[1]): acc += A[i, k] * B[k, j]; C[i, j] = acc",
    ),
    ("03", "linear_relu"): (
        "The naive matmul with two additions: the sum starts at the bias of its output feature (one per column "
        "of Y), and only its positive part is kept.",
        "j, i = cuda.grid(2); guard both; acc = b[j]; for k: acc += X[i, k] * W[k, j]; Y[i, j] = max(acc, "
        "float32(0.0))",
    ),
    ("04", "blur3"): (
        "Each block stages its 32 elements plus one neighbour on each side (the halo) in shared memory, waits "
        "until all are there, then each thread averages three neighbours read from shared memory. Outside x "
        "counts as 0.",
        "buf = cuda.shared.array(34, float32); buf[tx + 1] = x[i] (0.0 past the end); thread 0 also buf[0] = "
        "x[i - 1] (0.0 at i = 0); the block's last thread also buf[tx + 2] = x[i + 1] (0.0 past the end); "
        "syncthreads; if i < n: out[i] = (buf[tx] + buf[tx + 1] + buf[tx + 2]) / 3",
    ),
    ("04", "matmul_tiled"): (
        "Walk K in steps of 16. Each step the block loads a 16 x 16 tile of A and one of B into shared memory (one "
        "element per thread, 0 outside the matrices), waits, and every thread adds 16 products from the tiles; it "
        "waits again before the next step overwrites them.",
        "sA, sB = cuda.shared.array((16, 16), float32); j, i = cuda.grid(2); acc = 0; for k0 in range(0, K, 16): "
        "sA[ty, tx] = A[i, k0 + tx] (or 0); sB[ty, tx] = B[k0 + ty, j] (or 0); syncthreads; for k in range(16): "
        "acc += sA[ty, k] * sB[k, tx]; syncthreads; after the loop, guarded C[i, j] = acc",
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
        "acc = cuda.local.array(4, float32), zeroed; j0, i = cuda.grid(2); W = cuda.gridDim.x * cuda.blockDim.x; "
        "if i < rows: for k: a = A[i, k]; for t in range(4): j = j0 + t * W; if j < cols: acc[t] += a * B[k, j]; "
        "then write each C[i, j0 + t * W] that exists",
    ),
}
