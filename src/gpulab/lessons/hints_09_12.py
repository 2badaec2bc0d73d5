"""Hints for the exercises of lessons 09-12, two tiers each: the idea (no code), then an outline of the code
(for 09, 10 and 12 the outlines the learner stubs once carried as comments). ``lessons.hint("09", "confusion")``
prints them one call at a time (:mod:`.hints`); :mod:`.problems` attaches them to the exercises of
:mod:`.ex_09_10`, :mod:`.ex_09_splitk`, :mod:`.ex_11`, :mod:`.ex_12` and :mod:`.ex_12_backward`.
"""

from __future__ import annotations

__all__ = ["HINTS"]

HINTS: dict[tuple[str, str], tuple[str, ...]] = {
    # 09 · training a CNN
    ("09", "cnn_forward_macs"): (
        "Count each layer as (its outputs) x (the work per output). A convolution output is one pixel of one "
        "filter over a 3 x 3 window of every input channel; a linear layer is n_in x n_out. Follow the image size "
        "through the layers: padding 1 keeps it through a convolution, each 2 x 2 pool halves it.",
        "c1, c2 = channels; each conv: (output pixels x filters) x (input channels x 3 x 3); each linear: n_in x n_out",
    ),
    ("09", "train_step"): (
        "A step is what you did by hand in lesson 08, in the order the gradients need: the forward pass gives the "
        "logits, the loss compares them with the labels, the backward pass sends d loss / d logits back through "
        "every layer, and only then can the optimizer move the weights along those gradients.",
        "four calls in this order, then the return: the model's forward on the batch's images gives the logits; "
        "the loss function of the logits and the labels gives the loss; the model's backward is given the loss's "
        "own backward (d loss / d logits); the optimizer's step moves the weights. Return the loss and the "
        "logits.",
    ),
    ("09", "matmul_splitk"): (
        "Lesson 04's tiled kernel with one change: block (x, y, z) walks only slice z of K's tiles, not all of "
        "them, and writes its sum into partials[z] (the launcher adds the S partials). The slices are whole tiles: "
        "per = ceil(tiles / S) tiles each, so the last ones may be short or empty; an empty slice still writes its "
        "zeros.",
        "j, i = cuda.grid(2); z = cuda.blockIdx.z; tiles = ceil(K / 16); per = ceil(tiles / S) with S = "
        "partials.shape[0]; for t in range(z * per, min(tiles, (z + 1) * per)): load the two tiles at k0 = t * 16 "
        "(zeros past the edges), syncthreads, 16 multiply-adds, syncthreads; after the loop, guarded: "
        "partials[z, i, j] = acc",
    ),
    ("09", "confusion"): (
        "One thread per image: find its prediction (the first largest logit, as np.argmax), then add 1 to the "
        "cell (true label, prediction). Many images land in one cell, so the add must be atomic.",
        "r = cuda.grid(1); guard; best = index of the first largest logits[r, k]; atomic add 1 to m[labels[r], best]",
    ),
    # 10 · scaling up
    ("10", "unscale"): (
        "One thread per element multiplies by 1 / scale. A thread that finds inf or nan counts it into "
        "found_inf[0]; many threads may find one at the same time, so the count is an atomic add.",
        "i = cuda.grid(1); guard; the unscaled value comes from grads[i] and inv_scale (already 1 / scale: which "
        "one operation undoes the scaling?); store it in out[i]; then ask of that value whether it is inf or nan "
        "(math.isinf, math.isnan), and if so add 1 to found_inf[0] atomically: many threads may find one at once.",
    ),
    ("10", "ring_allreduce"): (
        "N devices in a ring, each buffer cut into N chunks. First the chunks travel round the ring being added "
        "to (reduce-scatter, N-1 steps), until each device holds one complete sum; then the complete chunks "
        "travel round once more, overwriting (all-gather, N-1 steps). All devices send at once: copy every "
        "message before applying any.",
        "copy, cut into N chunks; N-1 reduce-scatter steps (add), N-1 all-gather steps (overwrite); count device "
        "0's bytes",
    ),
    # 11 · energy, cost, hardware
    ("11", "joules_per_image"): (
        "Energy is power integrated over time. With samples at uneven times, each interval contributes its length "
        "times the mean of its two end samples (the trapezoid rule); divide the total by the images.",
        "the intervals' lengths are the differences of neighbouring times (np.diff); an interval's mean power is "
        "the average of the samples at its two ends (the watts without the last sample, and without the first); "
        "sum length times mean power over the intervals, then divide by the number of images.",
    ),
    ("11", "attainable"): (
        "The roofline: a kernel is bound either by compute (the peak, flat) or by memory (bandwidth times "
        "intensity, rising with it), and attains the lower of the two. Mind the units, and work on whole arrays.",
        "np.minimum(the peak in GFLOP/s (TFLOP/s x 1e3), bandwidth in GB/s x intensity)",
    ),
    ("11", "cost_per_epoch"): (
        "Time first: an epoch takes images / images_per_second seconds, and the price is per hour.",
        "seconds = images / images_per_second; hours = seconds / 3600; return hours * usd_per_hour",
    ),
    ("11", "pe_step"): (
        "All PEs move at once, so build new arrays from the old ones: a moves one column right (column 0 takes "
        "a_in), b moves one row down (row 0 takes b_in), and every PE adds the product of its new a and b.",
        "two new arrays shaped like the registers (np.empty_like). Column 0 of the new a takes a_in, and every "
        "other column the old column to its left (one slice of each, shifted by one); row 0 of the new b takes b_in, "
        "and every other row the old row above. Return the two new arrays and the accumulator plus their "
        "element-wise product.",
    ),
    # 12 · transformers
    ("12", "scores"): (
        "One thread per score: s[i, j] is row i of q dotted with row j of k, times scale. With the causal mask, "
        "query i sees keys up to i + (m - n); the others get -inf, which the softmax turns into weight 0.",
        "j, i = cuda.grid(2); guard i < n and j < m; masked -> -inf, else dot(q[i], k[j]) * scale",
    ),
    ("12", "online_softmax"): (
        "One block per row, three phases: each thread keeps a running (max, sum) over its columns, rescaling the "
        "sum whenever the max grows; the block merges the 32 pairs in a shared-memory tree, rescaling both sums "
        "to the larger max; then each thread writes exp(x - max) / sum for its columns.",
        "row = blockIdx.x; each thread: running (max, sum) over columns tx, tx + 32, ...; shared s_max, s_sum; tree "
        "merge with a syncthreads after each level; then out[row, j] = exp(x[row, j] - max) / sum",
    ),
    ("12", "flash"): (
        "The two gaps are exercise 2's online softmax, one tile of keys at a time: for this row, find the tile's "
        "largest score, rescale what was summed so far (row_sum and the accumulator) to the new maximum, then add "
        "each key's exp(score - max) to row_sum and that weight times the key's value row to the accumulator. At "
        "the end, divide the accumulator by row_sum.",
        "2c: the tile's largest score in this row (a loop over the tile's keys) and the new running maximum; while "
        "that is still -inf (no visible key yet) there is nothing to add. Otherwise: rescale row_sum and every "
        "accumulator by exp(old maximum - new maximum); for each key of the tile, its weight is exp(score - new "
        "maximum): add it to row_sum, and the weight times the key's value row to the accumulators (accumulator a "
        "holds column tx + a * BK, only the columns below dv); keep the new maximum. 3: for a row that exists, each "
        "accumulator divided by row_sum goes to its column of out.",
    ),
    ("12", "attention_backward"): (
        "Nothing hands you P: run the forward pass first (the scaled scores, then their row softmax). Then walk it "
        "backwards one line at a time, each gradient the shape of its variable: out = P v is a matmul (it gives "
        "dv and dP), the softmax turns dP into dS row by row (with each row's sum of P * dP), and S = q k^T / "
        "sqrt(d) is a matmul with a constant factor, in which k appears transposed.",
        "S and P (n x n), as in the forward pass; dv (n x d) from P transposed and dout; dP (n x n) from dout and v "
        "transposed; dS = P times (dP minus the column of row sums of P * dP); dq (n x d) from dS and k, dk (n x d) "
        "from dS transposed and q, both times 1/sqrt(d); return the three as a tuple (dq, dk, dv)",
    ),
}
