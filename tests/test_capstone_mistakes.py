"""Lab 09's verdicts on the mistakes learners make in the capstone's ops: each is named, none passes."""

import math

import numpy as np
import pytest
from numba import cuda, float32

from numba.cuda.random import xoroshiro128p_uniform_float32

from gpulab import capstone, nn
from gpulab.kernels import nn_ops as k

TILE = 16


@cuda.jit
def maxpool_first_image_only(x, out, arg, k, stride):  # n = 0: right for a batch of one image
    C, HO, WO = out.shape[1], out.shape[2], out.shape[3]
    for t in range(cuda.grid(1), C * HO * WO, cuda.gridsize(1)):
        c, i, j = t // (HO * WO), (t // WO) % HO, t % WO
        best, where = x[0, c, i * stride, j * stride], 0
        for a in range(k):
            for b in range(k):
                if x[0, c, i * stride + a, j * stride + b] > best:
                    best, where = x[0, c, i * stride + a, j * stride + b], a * k + b
        out[0, c, i, j], arg[0, c, i, j] = best, where


@cuda.jit
def maxpool_last_max(x, out, arg, k, stride):  # >= instead of >: the last maximum on ties
    N, C, HO, WO = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
    for t in range(cuda.grid(1), N * C * HO * WO, cuda.gridsize(1)):
        n, c, i, j = t // (C * HO * WO), (t // (HO * WO)) % C, (t // WO) % HO, t % WO
        best, where = x[n, c, i * stride, j * stride], 0
        for a in range(k):
            for b in range(k):
                if x[n, c, i * stride + a, j * stride + b] >= best:
                    best, where = x[n, c, i * stride + a, j * stride + b], a * k + b
        out[n, c, i, j], arg[n, c, i, j] = best, where


@cuda.jit
def relu_backward_at_zero(dout, y, dx):  # y >= 0: passes the gradient where the ReLU clipped
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        dx[i] = dout[i] if y[i] >= 0.0 else 0.0


def _xent(scale_by_n, subtract_max):
    @cuda.jit
    def xent(logits, labels, grad, losses):
        N, K = logits.shape[0], logits.shape[1]
        for r in range(cuda.grid(1), N, cuda.gridsize(1)):
            m = logits[r, 0]
            for q in range(1, K):
                m = max(m, logits[r, q])
            if not subtract_max:
                m = 0.0
            s = 0.0
            for q in range(K):
                s += math.exp(logits[r, q] - m)
            y = labels[r]
            losses[r] = math.log(s) - (logits[r, y] - m)
            for q in range(K):
                p = math.exp(logits[r, q] - m) / s - (1.0 if q == y else 0.0)
                grad[r, q] = p / N if scale_by_n else p

    return xent


def _adam(store_p, store_moments):
    @cuda.jit
    def adam(p, g, m, v, lr_t, b1, b2, eps_t):
        for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
            mi = b1 * m[i] + (1.0 - b1) * g[i]
            vi = b2 * v[i] + (1.0 - b2) * g[i] * g[i]
            if store_moments:
                m[i], v[i] = mi, vi
            q = p[i] - lr_t * mi / (math.sqrt(vi) + eps_t)
            if store_p:
                p[i] = q

    return adam


@cuda.jit
def matmul_one_barrier(A, B, C):  # lab 04's tiled matmul without the second cuda.syncthreads()
    sA = cuda.shared.array((TILE, TILE), float32)
    sB = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    j, i = cuda.grid(2)
    acc = float32(0.0)
    for t in range((A.shape[1] + TILE - 1) // TILE):
        kk0 = t * TILE
        sA[ty, tx] = A[i, kk0 + tx] if i < A.shape[0] and kk0 + tx < A.shape[1] else float32(0.0)
        sB[ty, tx] = B[kk0 + ty, j] if kk0 + ty < B.shape[0] and j < B.shape[1] else float32(0.0)
        cuda.syncthreads()  # wait until both tiles are loaded (the one after their use is missing)
        for kk in range(TILE):
            acc += sA[ty, kk] * sB[kk, tx]
    if i < C.shape[0] and j < C.shape[1]:
        C[i, j] = acc


@cuda.jit
def im2col_two_images(x, cols, kh, kw, stride, pad, ho, wo):  # the batch index stops at 1: right for N <= 2
    q0, r0 = cuda.grid(2)
    sq, sr = cuda.gridsize(2)
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    for r in range(r0, cols.shape[0], sr):
        n, i, j = min(r // (ho * wo), 1), (r // wo) % ho, r % wo
        for q in range(q0, cols.shape[1], sq):
            a, b, c = q // (kw * C), (q // C) % kw, q % C
            ih, iw = i * stride + a - pad, j * stride + b - pad
            cols[r, q] = x[n, c, ih, iw] if 0 <= ih < H and 0 <= iw < W else 0.0


def _grid_stride_4d(body):
    """A grid-stride kernel over dx's (n, c, h, w) for maxpool_backward, with ``body`` its loop's inner lines."""
    src = (
        "@cuda.jit\n"
        "def kern(dout, arg, dx, k, stride):\n"
        "    N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]\n"
        "    HO, WO = dout.shape[2], dout.shape[3]\n"
        "    for t in range(cuda.grid(1), N * C * H * W, cuda.gridsize(1)):\n"
        "        n, c, h, w = t // (C * H * W), (t // (H * W)) % C, (t // W) % H, t % W\n"
        "        acc = 0.0\n" + body + "        dx[n, c, h, w] = acc\n"
    )
    ns = {"cuda": cuda}
    exec(src, ns)  # noqa: S102 - test kernels built from one template
    return ns["kern"]


_WINDOWS = """        for a in range(k):
            if h - a >= 0 and (h - a) % stride == 0 and (h - a) // stride < HO:
                for b in range(k):
                    if w - b >= 0 and (w - b) % stride == 0 and (w - b) // stride < WO:
                        i, j = (h - a) // stride, (w - b) // stride
"""
POOL_BACKWARD = {
    "right": _WINDOWS
    + "                        if arg[n, c, i, j] == a * k + b:\n                            acc += dout[n, c, i, j]\n",
    "to all": _WINDOWS + "                        acc += dout[n, c, i, j]\n",
    "assigned": _WINDOWS
    + "                        if arg[n, c, i, j] == a * k + b:\n                            acc = dout[n, c, i, j]\n",
    "one window": """        i, j = h // stride, w // stride
        if i < HO and j < WO and h - i * stride < k and w - j * stride < k:
            if arg[n, c, i, j] == (h - i * stride) * k + w - j * stride:
                acc = dout[n, c, i, j]
""",
}


def _pool(start_at_zero=False, flat_arg=False):
    @cuda.jit
    def maxpool(x, out, arg, k, stride):
        N, C, HO, WO = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
        W = x.shape[3]
        for t in range(cuda.grid(1), N * C * HO * WO, cuda.gridsize(1)):
            n, c, i, j = t // (C * HO * WO), (t // (HO * WO)) % C, (t // WO) % HO, t % WO
            best, where = (0.0 if start_at_zero else x[n, c, i * stride, j * stride]), 0
            if flat_arg:
                where = i * stride * W + j * stride
            for a in range(k):
                for b in range(k):
                    if x[n, c, i * stride + a, j * stride + b] > best:
                        best = x[n, c, i * stride + a, j * stride + b]
                        where = (i * stride + a) * W + j * stride + b if flat_arg else a * k + b
            out[n, c, i, j], arg[n, c, i, j] = best, where

    return maxpool


def _im2col(channel_first=False, shift_by_pad=True):
    @cuda.jit
    def im2col(x, cols, kh, kw, stride, pad, ho, wo):
        q0, r0 = cuda.grid(2)
        sq, sr = cuda.gridsize(2)
        C, H, W = x.shape[1], x.shape[2], x.shape[3]
        for r in range(r0, cols.shape[0], sr):
            n, i, j = r // (ho * wo), (r // wo) % ho, r % wo
            for q in range(q0, cols.shape[1], sq):
                a, b, c = q // (kw * C), (q // C) % kw, q % C
                if channel_first:  # PyTorch's weight layout: q = (c*kh + a)*kw + b
                    c, a, b = q // (kh * kw), (q // kw) % kh, q % kw
                p = pad if shift_by_pad else 0
                ih, iw = i * stride + a - p, j * stride + b - p
                cols[r, q] = x[n, c, ih, iw] if 0 <= ih < H and 0 <= iw < W else 0.0

    return im2col


def _col2im(channel_first=False, stride_test=True):
    @cuda.jit
    def col2im(dcols, dx, kh, kw, stride, pad, ho, wo):
        N, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
        for t in range(cuda.grid(1), N * C * H * W, cuda.gridsize(1)):
            n, c, h, w = t // (C * H * W), (t // (H * W)) % C, (t // W) % H, t % W
            acc = 0.0
            for a in range(kh):
                ii = h + pad - a
                if ii >= 0 and (ii % stride == 0 or not stride_test) and ii // stride < ho:
                    for b in range(kw):
                        jj = w + pad - b
                        if jj >= 0 and (jj % stride == 0 or not stride_test) and jj // stride < wo:
                            q = (c * kh + a) * kw + b if channel_first else (a * kw + b) * C + c
                            acc += dcols[(n * ho + ii // stride) * wo + jj // stride, q]
            dx[n, c, h, w] = acc

    return col2im


def _xent_slip(kind):
    @cuda.jit
    def xent(logits, labels, grad, losses):
        N, K = logits.shape[0], logits.shape[1]
        for r in range(cuda.grid(1), N, cuda.gridsize(1)):
            m = logits[r, 0]
            for q in range(1, K):
                m = max(m, logits[r, q])
            s = 0.0
            for q in range(K):
                s += math.exp(logits[r, q] - m)
            y = labels[r]
            loss = math.log(s) - (logits[r, y] - m)
            if kind == "sign":
                loss = -loss
            elif kind == "label unshifted":
                loss = math.log(s) - logits[r, y]
            losses[r] = loss
            for q in range(K):
                onehot = 1.0 if q == y and kind != "no onehot" else 0.0
                grad[r, q] = (math.exp(logits[r, q] - m) / s - onehot) / N

    return xent


def _adam_slip(kind):
    @cuda.jit
    def adam(p, g, m, v, lr_t, b1, b2, eps_t):
        for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
            if kind == "old moments":
                p[i] -= lr_t * m[i] / (math.sqrt(v[i]) + eps_t)
            m[i] = b1 * m[i] + (1.0 - b1) * g[i]
            v[i] = b2 * v[i] + (1.0 - b2) * (g[i] if kind == "v from g" else g[i] * g[i])
            step = lr_t * m[i] / (math.sqrt(v[i]) + eps_t)
            if kind == "ascent":
                p[i] += step
            elif kind != "old moments":
                p[i] -= step

    return adam


@cuda.jit
def relu_backward_no_dout(dout, y, dx):  # the derivative alone, not times dout
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        dx[i] = 1.0 if y[i] > 0.0 else 0.0


@cuda.jit
def dropout_over_p(x, states, p, y):  # divided by the drop probability
    tid = cuda.grid(1)
    for i in range(tid, x.size, cuda.gridsize(1)):
        u = xoroshiro128p_uniform_float32(states, tid)
        y[i] = x[i] / p if u >= p else float32(0.0)


LIBRARY = {
    "matmul": k.gemm_kernel,
    "im2col": k.im2col_kernel,
    "col2im": k.col2im_kernel,
    "relu": k.relu_kernel,
    "relu_backward": k.relu_backward_kernel,
    "maxpool": k.maxpool_kernel,
    "maxpool_backward": k.maxpool_backward_kernel,
    "dropout_forward": k.dropout_kernel,
    "dropout_backward": k.dropout_kernel,
    "softmax_xent": k.softmax_xent_kernel,
    "adam_update": k.adam_kernel,
}


def test_an_element_never_written_is_named_not_called_a_race():
    res = capstone.Capstone().register("maxpool", maxpool_first_image_only)
    text = str(res)
    # before: the launcher's uninitialised output held garbage, read as "the result changes from run to run (a race)"
    assert not res.passed and "never written" in text and "race" not in text, text
    assert "launch: host function nn_ops.maxpool(...)" in text, text


def test_the_report_says_failed_for_a_failed_check_and_the_lab_says_which():
    cap = capstone.Capstone()
    cap.register("maxpool", maxpool_first_image_only)
    rows = {op: verdict for op, _, verdict in cap.rows()}
    assert rows["maxpool"] == "failed" and rows["relu"] == "not registered"  # before: "not registered" for both
    summary = cap.missing_summary()
    assert "- maxpool: its check failed" in summary and "- relu: not checked yet" in summary, summary
    # before: "course kernel (yours missing)" for a kernel that exists but failed its check
    whose = {op: who for op, who, _ in cap.rows()}
    assert whose["maxpool"] == "course kernel (yours did not pass its check)", whose
    assert whose["relu"] == "course kernel (yours missing)", whose
    assert "maxpool            course kernel (yours did not pass its check) failed" in str(cap.report())


@cuda.jit
def relu_backward_without_a_loop(dout, y, dx):  # no grid-stride loop: the check stops with an error
    i = cuda.grid(1)
    if i < dx.size:
        dx[i] = dout[i] if y[i] > 0.0 else 0.0


def test_a_kernel_refused_before_it_runs_fails_with_the_refusal_as_its_verdict():
    cap = capstone.Capstone()
    res = cap.register("relu_backward", relu_backward_without_a_loop)
    # before: status "error", "gpulab's code (gpulab/capstone.py, line 182, in run) refused your kernel ...: ..." and
    # an "input: size=1, seed=0" that had nothing to do with it
    assert res.status == "failed" and res.message.startswith("relu_backward's kernel must be a grid-stride loop"), res
    assert "gpulab's code" not in res.message and "input:" not in res.message, res
    summary = cap.missing_summary()
    assert "- relu_backward: its check failed: fix it with" in summary, summary
    assert "its check error" not in summary


@pytest.mark.parametrize(
    ("op", "kernel", "words"),
    [
        ("relu_backward", relu_backward_at_zero, "only where y[i] > 0"),
        ("maxpool", maxpool_last_max, "*first* maximum"),
        ("softmax_xent", _xent(scale_by_n=False, subtract_max=True), "divide grad by N"),
        ("softmax_xent", _xent(scale_by_n=True, subtract_max=False), "subtract the row's maximum"),
        ("adam_update", _adam(store_p=True, store_moments=False), "m is unchanged"),
        ("adam_update", _adam(store_p=False, store_moments=True), "p is unchanged"),
        # before this list's second part, each got only "expected ..., got ..." with no hint
        ("relu_backward", relu_backward_no_dout, "dx is the ReLU's derivative alone"),
        ("maxpool", _pool(start_at_zero=True), "a window of negative values gave 0"),
        ("maxpool", _pool(flat_arg=True), "arg is the position inside the window"),
        ("maxpool_backward", _grid_stride_4d(POOL_BACKWARD["to all"]), "dout went to every pixel of the window"),
        ("maxpool_backward", _grid_stride_4d(POOL_BACKWARD["one window"]), "only one window per pixel"),
        ("maxpool_backward", _grid_stride_4d(POOL_BACKWARD["assigned"]), "gets only the last one's dout"),
        ("im2col", _im2col(channel_first=True), "the columns are in channel-first order"),
        ("im2col", _im2col(shift_by_pad=False), "every tap is shifted by pad"),
        ("col2im", _col2im(channel_first=True), "dcols is read in channel-first order"),
        ("col2im", _col2im(stride_test=False), "ii % stride == 0"),
        ("softmax_xent", _xent_slip("sign"), "losses[r] has the wrong sign"),
        ("softmax_xent", _xent_slip("label unshifted"), "losses[r] is off by the row's maximum m"),
        ("softmax_xent", _xent_slip("no onehot"), "grad is the softmax alone"),
        ("adam_update", _adam_slip("old moments"), "previous step's moments"),
        ("adam_update", _adam_slip("v from g"), "v averages the squared gradient"),
        ("adam_update", _adam_slip("ascent"), "p moved up the gradient"),
        ("dropout_forward", dropout_over_p, "the kept values are x / p"),
        ("dropout_backward", dropout_over_p, "the kept values are dy / p"),
    ],
)
def test_a_common_mistake_fails_and_is_named(op, kernel, words):
    res = capstone.Capstone().register(op, kernel)
    assert not res.passed and words in str(res), str(res)


def test_a_tiled_matmul_without_its_second_barrier_fails_as_a_race():
    res = capstone.Capstone().register("matmul", matmul_one_barrier, block=(TILE, TILE))
    text = str(res)
    # before: K = 9 fitted in one tile, so the missing barrier was never reached and the kernel passed
    assert not res.passed and "race" in text and "square" not in text, text


def test_a_step_that_differs_names_the_op_with_verify():
    cap = capstone.Capstone()
    for op, kern in LIBRARY.items():
        cap.register(op, kern, trusted=True)
    assert cap.register("im2col", im2col_two_images).passed  # its check's batches hold at most 2 images
    x, y = np.random.default_rng(0).random((5, 1, 8, 8), dtype=np.float32), np.arange(5)

    def step(ops):
        model = nn.mnist_cnn(seed=0, image_size=8, channels=(2, 3), hidden=8, dropout=0.25, backend="kernels")
        nn.train_step(model.use_ops(ops), nn.SoftmaxCrossEntropy(), nn.Adam(model, lr=1e-2), x, y)

    step(cap.ops())  # no NaN: the wrong columns are other images' pixels, so only the weights tell
    with pytest.raises(capstone.CapstoneError, match=r"op 'im2col' on x \(5, 1, 8, 8\).*cols\["):
        step(cap.ops(verify=True))
    cap.register("im2col", k.im2col_kernel, trusted=True)
    step(cap.ops(verify=True))  # the course's kernels agree with themselves


@cuda.jit
def relu_backward_with_a_list(dout, y, dx):  # the simulator runs it; NVVM refuses the list
    for i in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
        keep = [0.0, 1.0]
        dx[i] = dout[i] * keep[1 if y[i] > 0.0 else 0]


def test_a_kernel_with_a_python_list_loses_half_its_check_points_at_the_check():
    """Before: 1/1 at its check (the capstone's checks launch through a host function, and the harness read the
    kernel's source only without one); the list showed only later, when check_ptx stopped the challenge."""
    res = capstone.Capstone().register("relu_backward", relu_backward_with_a_list)
    assert res.status == "failed" and res.score == 0.5, res
    assert "but GPU compile: line" in res.message and "a Python list" in res.message, res


def test_a_kernel_a_gpu_would_refuse_stops_the_challenge_naming_its_op():
    cap = capstone.Capstone()
    cap.kernels["relu_backward"] = relu_backward_with_a_list  # registered as the simulator ran it
    cap.register("relu", k.relu_kernel, trusted=True)
    with pytest.raises(capstone.CapstoneError, match=r"- relu_backward: line \d+ uses a Python list") as err:
        cap.check_ptx()
    assert str(err.value).startswith("relu_backward: the simulator ran this kernel"), err.value
    assert "- relu:" not in str(err.value)
    # before: "no lists, dicts, strings, objects or NumPy functions (np.maximum: use max)", but np.maximum compiles
    assert "np.maximum" not in str(err.value) and "`t = [x[i], 0.0]` does not compile" in str(err.value)


@cuda.jit
def relu_with_np_maximum(x, y):
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        y[i] = np.maximum(x[i], 0.0)


def test_a_kernel_calling_np_maximum_compiles_to_ptx():
    cap = capstone.Capstone()
    assert cap.register("relu", relu_with_np_maximum).passed
    cap.check_ptx()  # NVVM compiles np.maximum: no error


@pytest.mark.parametrize(
    ("op", "kernel"),
    [
        ("maxpool_backward", _grid_stride_4d(POOL_BACKWARD["right"])),
        ("maxpool", _pool()),
        ("im2col", _im2col()),
        ("col2im", _col2im()),
        ("softmax_xent", _xent_slip("right")),
        ("adam_update", _adam_slip("right")),
    ],
)
def test_the_templates_of_the_named_mistakes_pass_when_right(op, kernel):
    res = capstone.Capstone().register(op, kernel)
    assert res.passed and res.score == res.max_score, str(res)


@pytest.mark.parametrize("op", list(LIBRARY))
def test_the_course_kernels_keep_full_marks_beside_the_named_mistakes(op):
    res = capstone.Capstone().register(op, LIBRARY[op], trusted=True)
    assert res.passed and res.score == res.max_score, str(res)
