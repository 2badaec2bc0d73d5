"""Hints for the exercises of lessons 05-08, two tiers each: the idea (no code), then an outline of the code
(the outlines the learner stubs once carried as comments). ``lessons.hint("05", "dot_atomic")`` prints them one
call at a time (:mod:`.hints`); :mod:`.problems` attaches them to the exercises of :mod:`.ex_05_10` (lessons 07
and 08 from :mod:`.conv_backprop`), :mod:`.ex_05_histogram` and :mod:`.ex_08_dropout`.
"""

from __future__ import annotations

__all__ = ["FUNCTION_EXERCISES", "HINTS"]

FUNCTION_EXERCISES = [("08", "central_difference")]

HINTS: dict[tuple[str, str], tuple[str, ...]] = {
    # 05 · reductions, atomics, scans
    ("05", "dot_atomic"): (
        "Each thread makes one product and adds it into the one total. Many threads add to the same address at "
        "the same time, so the add must be indivisible (atomic): a plain += loses updates.",
        "the global index and a guard against the arrays' size; the product of the thread's elements of a and b; "
        "add it into total's one element (index 0) with cuda.atomic.add, whose arguments are the array, the index "
        "and the value.",
    ),
    ("05", "block_max"): (
        "A tree in shared memory: each thread loads one value (threads past the end load one that never wins a "
        "max), then at each step the first half of the still-active threads combine their value with the one s "
        "places further, halving s, until thread 0 holds the block's maximum. Every step ends at a barrier.",
        "buf = cuda.shared.array(TPB, float32); load (or -inf); syncthreads; halve s = TPB // 2, ..., 1 with a "
        "syncthreads after each step; thread 0 writes",
    ),
    ("05", "sum_two_per_thread"): (
        "Half the threads sit idle from the first step of a tree on. Give each block 2 * TPB elements instead, and "
        "let each thread add two of them, TPB apart, while loading; then the same tree, with + in place of max.",
        "i = cuda.blockIdx.x * (2 * TPB) + tx; add x[i] and x[i + TPB] where they exist, store in shared memory, "
        "then the tree as in exercise 2 (with +)",
    ),
    ("05", "warp_sum"): (
        "Two stages of shuffles. A warp sums its 32 values in registers: each lane adds the value of the lane "
        "offset above it, the offset halving from 16 to 1, and lane 0 ends with the warp's sum. The warps' sums "
        "meet in shared memory, and the first warp sums them the same way. Every lane must reach every shuffle "
        "(no early return).",
        "v = x[i] or 0 (no return: every lane shuffles); v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset) for "
        "offset 16, 8, 4, 2, 1; lane 0 -> warp_sums[warp]; syncthreads; warp 0: warp_sums[lane] or 0, the same "
        "five shuffles, lane 0 writes partial[cuda.blockIdx.x]",
    ),
    ("05", "histogram_privatized"): (
        "Give each block its own histogram in shared memory: zero it, count the block's values into it with "
        "atomics (contended only by the block's own threads), then add each non-zero bin into the global "
        "histogram with one atomic. A barrier between the phases.",
        "bins = cuda.shared.array(BINS, int32); zero (stride TPB); syncthreads; grid stride: "
        "cuda.atomic.add(bins, values[i], 1); syncthreads; merge the non-zero bins atomically",
    ),
    ("05", "scan_block"): (
        "A scan in log2(TPB) steps: at offsets 1, 2, 4, ... each thread adds the value offset places to its left, "
        "if there is one. Reading and writing one buffer in the same step races, so read one buffer and write the "
        "other, and swap them each step. The block's last value is its total.",
        "two buffers; at offset 1, 2, 4, ... < TPB: tx >= offset adds buf[src, tx - offset]; syncthreads after "
        "each step, then swap src and dst",
    ),
    ("05", "add_offsets"): (
        "Each element needs one more number: the total of every block before its own. scanned_sums is an "
        "inclusive scan of the block totals, so each of its entries already holds such a total; which entry "
        "covers exactly the blocks before yours, and what should the first block, with none before it, add?",
        "one thread per element, on the same grid as the block scan; guard the end of the array; read your block's "
        "index; every block but the first adds the one entry of scanned_sums that ends just before its own block "
        "to its element; the first block leaves its elements as they are",
    ),
    # 06 · CuPy, interop
    ("06", "squared_diff"): (
        "One thread per element does the whole expression: it reads x[i] and y[i] once each, squares their "
        "difference in a register and writes once.",
        "the global index and a guard; read the thread's elements of x and y once each, keep their difference in a "
        "local variable, and store that variable times itself.",
    ),
    ("06", "softplus"): (
        "log(1 + exp(x)) overflows for large x: exp(100) is inf in float32. Split off the large part: for x > 0, "
        "log(1 + exp(x)) = x + log(1 + exp(-x)), so exp only ever sees values <= 0.",
        "write it as two terms: one that is x for positive x and 0 otherwise, and log1p of exp of a value that is "
        "never positive, whatever the sign of x (which one?). math has exp and log1p; log1p keeps the digits where "
        "its argument is tiny. A bare 0.0 is a float64 in Numba: use float32(0.0).",
    ),
    ("06", "axpy_elementwise"): (
        "cupy.ElementwiseKernel takes typed parameter lists as text (inputs, then outputs, comma-separated; a "
        "scalar is declared like an array element), one line of C that computes one element, and a name.",
        "return a dict of four strings. in_params: the inputs, each a type and a name, comma-separated, in the "
        "order the kernel is called with (the scalar first); out_params: the one output, written the same way; "
        "operation: one C statement that assigns the output from the inputs, for one element; name: the kernel's "
        "name.",
    ),
    ("06", "leaky_relu"): (
        "One thread per element, guarded: positive values pass unchanged, the others are scaled by 0.01.",
        "i = cuda.grid(1); guard; read x[i] once into a local; its sign decides whether out[i] gets the value as it "
        "is or scaled by the small slope. Write the slope as float32(0.01): a bare 0.01 is a float64 in Numba, and "
        "would make the product float64.",
    ),
    ("06", "round_to_tf32"): (
        "Work on the bits (x.view(np.uint32)): TF32 keeps the sign, the 8 exponent bits and the top 10 mantissa "
        "bits, and drops the low 13. Round to nearest by adding just under half the weight of the last kept bit, "
        "plus that bit itself (so an exact tie rounds up only when it makes the kept bits even); a carry out of the "
        "mantissa simply raises the exponent. Then clear the low 13 bits and view the result as float32 again.",
        "view the array as uint32; pick out the last kept bit (bit 13) with a shift and a mask; add twelve 1 bits "
        "(just under half) plus that bit; clear the low 13 bits with a mask; view the result as float32 again. Make "
        "every constant an np.uint32, so that the sum stays uint32",
    ),
    # 07 · convolution
    ("07", "conv2d_single"): (
        "One thread per output pixel: its window starts at (i, j) in x (no padding). It sums the K x K products of "
        "the window and the filter in a float32 accumulator and writes once.",
        "j, i = cuda.grid(2); guard i < out.shape[0] and j < out.shape[1]; sum x[i + a, j + b] * w[a, b] over the "
        "taps into a float32 accumulator",
    ),
    ("07", "im2col_single"): (
        "cols has one row per output position and one column per filter tap: entry (r, q) is the value of x that "
        "tap q sees at output position r. One thread per entry of cols, x (the fastest index) along its columns.",
        "the tap q (a column of cols) from x and the output position r (a row of cols) from y of the 2-D grid, "
        "both guarded against cols' shape. Unflatten r into the output's row and column (Wo = x.shape[1] - K + 1 "
        "columns per row: integer division and remainder), and q into the tap's row and column offsets the same "
        "way with K. The entry is x at the output position moved by the tap's offsets.",
    ),
    ("07", "maxpool2x2"): (
        "One thread per output: output (i, j) is the largest of the four values of the 2 x 2 window whose "
        "top-left corner is x[2 * i, 2 * j].",
        "j, i = cuda.grid(2); guard; the max of the four values of window (i, j)",
    ),
    ("07", "conv2d_all_filters"): (
        "The same window serves every filter: load it once into registers (a local array), then loop over the "
        "filters, each a sum of K x K products with its own weights.",
        "j, i = cuda.grid(2) over (Ho, Wo); load the window into a local array once; then for each filter f: "
        "out[f, i, j] = sum of win[a, b] * w[f, a, b]",
    ),
    # 08 · backpropagation
    ("08", "central_difference"): (
        "The slope of f at x, estimated from two evaluations: the points x - h and x + h sit on either side of x, "
        "2h apart. Rise over run, with the run the whole distance between them.",
        "evaluate f once on each side of x, h away; subtract the left value from the right one; divide by the "
        "whole distance between the two points, in brackets: `a / 2 * h` divides by 2 and then multiplies by h",
    ),
    ("08", "bias_grad"): (
        "db is the column sum of dout. One thread per output feature walks down its column, over the batch; "
        "neighbouring threads then read neighbouring elements of each row.",
        "o = cuda.grid(1); guard; sum dout[n, o] over n",
    ),
    ("08", "linear_weight_grad"): (
        "dw = dout^T x: each dw[i, j] sums dout[n, i] * x[n, j] over the batch. One thread per element of dw, x "
        "along its columns (the input features).",
        "j, i = cuda.grid(2); guard both; sum dout[n, i] * x[n, j] over the batch n",
    ),
    ("08", "relu_backward"): (
        "The gradient passes through where the forward's output was positive, and is 0 elsewhere. One thread per "
        "element.",
        "i = cuda.grid(1); guard; dx[i] comes from dout[i], gated by the forward's output y[i]: which values of "
        "y[i] mean the ReLU let its input through, and on which side of that test does y[i] == 0 fall? Elsewhere "
        "the gradient is 0 (a float32).",
    ),
    ("08", "maxpool2x2_backward"): (
        "Gather, do not scatter: one thread per input pixel. The pixel belongs to window (i // 2, j // 2), and "
        "gets that window's gradient only if it was the window's winner (arg says which of the four won); else 0.",
        "j, i = cuda.grid(2) over dx; window (i // 2, j // 2) if it exists; dout of the window where arg == "
        "(i % 2) * 2 + j % 2, else 0",
    ),
    ("08", "dropout_forward"): (
        "Each thread owns one generator state and walks its elements in a grid-stride loop, drawing one number "
        "per element from its own state. Kept elements are scaled by 1 / (1 - p), so each output's expected "
        "value is its input.",
        "tid = cuda.grid(1); grid-stride loop over i; u = xoroshiro128p_uniform_float32(states, tid); kept where "
        "u >= p: y = x / (1 - p), mask = 1; else y = 0, mask = 0",
    ),
}
