"""How the sum checks' tolerances sit between float32 rounding and bugs, at gpu-mode sizes (emulated, no GPU).

``reduction=`` checks allow ``atol + min(gamma_n, lam * sqrt(n) * u) * sum|terms|`` (compare.probable_bound): for each
tightened check, every usual float32 order of summation (a thread's loop, FMA, tiles, split-K with atomics, trees,
atomics in a random order) must use a small part of it (the *margin*: the largest |got - expected| / tolerance,
np.isclose's own test, so 1 fails), and the bugs a GPU run can hit at size (a lost update, a dropped product, a
stale operand, a lost partial) must fail. With the worst-case bound gamma_n (before) those bugs passed: 6.7 % of the
sum at n = 2**20. The margins measured are stated where they are asserted. lab12.SOFTMAX_BACKWARD (rtol/atol) too.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from gpulab import problems
from gpulab.exercises.cases import build_cases
from test_gpu_sizes import seq_matmul, strided_partials, tree_sum

F32 = np.float32
P = problems.all_problems()


@functools.lru_cache(maxsize=8)
def gpu_case(key: str, size):
    """The case the check builds for ``size`` at scale="gpu" (same seed: its index among the gpu sizes)."""
    p = P[key]
    sizes = list(p.gpu_sizes)
    k = sizes.index(size)
    return build_cases(p, sizes[: k + 1])[k]


def ratio(got, exp, rtol, tol) -> np.ndarray:
    """|got - exp| / (tol + rtol |exp|) per element: above 1 fails the check (got rounded to exp's dtype first)."""
    got = np.asarray(got).astype(exp.dtype).astype(np.float64)
    e = exp.astype(np.float64)
    return np.abs(got - e) / (np.asarray(tol, np.float64) + rtol * np.abs(e))


def fails(got, exp, rtol, tol) -> bool:
    return bool((ratio(got, exp, rtol, tol) > 1).any())


# ---------------------------------------------------------------------------------------------------
# float32 orders (NumPy, vectorised over the outputs)


def fma_matmul(A, B):
    """acc = fma(a, b, acc): the product exact (float64), one rounding per step."""
    C = np.zeros((A.shape[0], B.shape[1]), F32)
    A64, B64 = A.astype(np.float64), B.astype(np.float64)
    for k in range(A.shape[1]):
        C = (C + A64[:, k : k + 1] * B64[k : k + 1, :]).astype(F32)
    return C


def tile_matmul(A, B, tile: int = 32):
    """Each tile of k summed into a fresh float32 partial, then added to the accumulator."""
    C = np.zeros((A.shape[0], B.shape[1]), F32)
    for k0 in range(0, A.shape[1], tile):
        C += seq_matmul(A[:, k0 : k0 + tile], B[k0 : k0 + tile])
    return C


def splitk_matmul(A, B, splits: int = 8, seed: int = 0):
    """split-K: sequential partials, added by atomics in a random order per output element."""
    bounds = np.linspace(0, A.shape[1], splits + 1).astype(int)
    parts = np.stack([seq_matmul(A[:, a:b], B[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    order = np.argsort(np.random.default_rng(seed).random(parts.shape), axis=0)
    parts = np.take_along_axis(parts, order, axis=0)
    C = np.zeros(parts.shape[1:], F32)
    for part in parts:
        C += part
    return C


MATMUL_ORDERS = {"sequential": seq_matmul, "fma": fma_matmul, "tiles of 32": tile_matmul, "split-K 8": splitk_matmul}


def atomics(v, seed: int = 0):
    """One float32 running total, the values added in a random order."""
    return np.cumsum(v[np.random.default_rng(seed).permutation(v.size)], dtype=F32)[-1]


def padded(v, width: int) -> np.ndarray:
    buf = np.zeros(-(-v.size // width) * width, F32)
    buf[: v.size] = v
    return buf.reshape(-1, width)


def sum_orders(v) -> dict[str, F32]:
    """The ways a kernel sums a long vector: atomics per element, one thread, blocks of 64 (tree) or a grid-stride
    loop of 80 x 256 threads (tree per block) added by atomics, warp shuffles then a tree."""
    per_thread = np.cumsum(padded(v, 80 * 256), axis=0, dtype=F32)[-1]  # thread t: t, t + 20480, ...
    return {
        "atomics per element": atomics(v),
        "one thread": np.cumsum(v, dtype=F32)[-1],
        "blocks of 64, tree, atomics": atomics(tree_sum(padded(v, 64))),
        "grid-stride 80x256, tree, atomics": atomics(tree_sum(per_thread.reshape(80, 256))),
        "warp shuffles, tree of 8 warps, atomics": atomics(tree_sum(tree_sum(padded(v, 256).reshape(-1, 8, 32)))),
    }


def blocks_lost(v, fraction: float, width: int = 64, seed: int = 3) -> float:
    """A non-atomic ``total += block_sum``: ``fraction`` of the block sums overwritten by another block's update."""
    sums = padded(v, width).astype(np.float64).sum(axis=1)
    return float(sums[np.random.default_rng(seed).random(sums.size) >= fraction].sum())


# ---------------------------------------------------------------------------------------------------
# lab05.SUM_ATOMIC and lab06.GRAD_NORM: one sum of 2**20 terms (the worst case allowed 6.7 %)

N20 = 1 << 20


def test_sum_atomic_every_float32_order_uses_little_of_its_tolerance():
    case, p = gpu_case("lab05.SUM_ATOMIC", N20), P["lab05.SUM_ATOMIC"]
    (x,), (exp,), (tol,) = case.inputs, case.expected, case.atol
    margins = {name: float(ratio([s], exp, p.rtol, tol).max()) for name, s in sum_orders(x).items()}
    assert max(margins.values()) < 0.05, margins  # measured: 0.015 (one thread), 0.003 (atomics)
    assert float(tol[0]) < 1e-3 * float(exp[0])  # 6.1e-4 of the sum (was 0.067)


@pytest.mark.parametrize(
    "bug", ["5% low", "0.1% low", "1% of block sums lost", "0.5% of block sums lost", "last 1000 never added"]
)
def test_sum_atomic_fails_a_lost_update_at_gpu_size(bug):
    case, p = gpu_case("lab05.SUM_ATOMIC", N20), P["lab05.SUM_ATOMIC"]
    (x,), (exp,), (tol,) = case.inputs, case.expected, case.atol
    total = float(np.sum(x, dtype=np.float64))
    got = {
        "5% low": total * 0.95,
        "0.1% low": total * 0.999,
        "1% of block sums lost": blocks_lost(x, 0.01),
        "0.5% of block sums lost": blocks_lost(x, 0.005),
        "last 1000 never added": float(np.sum(x[:-1000], dtype=np.float64)),
    }[bug]
    assert fails([got], exp, p.rtol, tol), (bug, got, float(exp[0]), float(tol[0]))


@pytest.mark.parametrize("size", [N20, N20 + 3])
def test_grad_norm_every_float32_order_uses_little_of_its_tolerance(size):
    """Squares summed one after another err one way (rounding of small terms against a large total): 4e-4 of the
    sum at 2**20, 40x a sum of mixed signs. lam = 20 keeps that below a fifth of the tolerance."""
    case, p = gpu_case("lab06.GRAD_NORM", size), P["lab06.GRAD_NORM"]
    (g,), (exp,), (tol,) = case.inputs, case.expected, case.atol
    sq = g.astype(F32) * g.astype(F32)
    margins = {name: float(ratio([np.sqrt(s)], exp, p.rtol, tol).max()) for name, s in sum_orders(sq).items()}
    assert max(margins.values()) < 0.25, margins  # measured: 0.16 (one thread, atomics), 0.0014 (trees)
    assert float(tol[0]) < 2e-3 * float(exp[0])  # 1.2e-3 of the norm (was 0.067)


@pytest.mark.parametrize("bug", ["sum of squares 1% low", "1% of block sums lost", "sum of squares 10% low"])
def test_grad_norm_fails_a_lost_update_at_gpu_size(bug):
    case, p = gpu_case("lab06.GRAD_NORM", N20), P["lab06.GRAD_NORM"]
    (g,), (exp,), (tol,) = case.inputs, case.expected, case.atol
    sq = g.astype(np.float64) ** 2
    total = float(sq.sum())
    got = {
        "sum of squares 1% low": total * 0.99,
        "1% of block sums lost": blocks_lost(sq.astype(F32), 0.01, 256),
        "sum of squares 10% low": total * 0.9,
    }[bug]
    assert fails([np.sqrt(got)], exp, p.rtol, tol), (bug, np.sqrt(got), float(exp[0]), float(tol[0]))


# ---------------------------------------------------------------------------------------------------
# Sums of products: every order meets the tolerance (rows 0..63 of the large cases: the margin is per element)


ROWS = slice(0, 64)


def _vecmat(ins):  # y = x @ A: (1, M) @ (M, N); operands, bias, which output, which of its elements
    A, x = ins
    return x[None, :], A[:, :1024], None, 0, slice(0, 1024)


def _rows(ins, A, B, bias=None):
    return A[ROWS], B, bias, 0, ROWS


def _linear(output: int):
    def operands(ins):
        x, W, dout = ins
        if output == 0:  # dx = dout @ W: out terms
            return dout[ROWS], W, None, 0, ROWS
        if output == 1:  # dW = dout.T @ x: N terms
            return np.ascontiguousarray(dout.T[ROWS]), x, None, 1, ROWS
        return np.ones((1, dout.shape[0]), F32), dout, None, 2, slice(None)  # db: N terms

    return operands


SUMS_OF_PRODUCTS = {
    ("lab03.VECMAT", (8192, 4096)): _vecmat,
    ("lab03.MATMUL", (2048, 1024, 1536)): lambda ins: _rows(ins, *ins),
    ("lab04.MATMUL_TILED", (2048, 1024, 1536)): lambda ins: _rows(ins, *ins),
    ("lab03.DENSE_RELU", (64, 784, 128)): lambda ins: _rows(ins, ins[0], ins[1].T, ins[2]),
    ("lab03.DENSE_RELU", (1000, 512, 10)): lambda ins: _rows(ins, ins[0], ins[1].T, ins[2]),
    ("lab06.MATMUL_FP16", (512, 4096, 384)): lambda ins: _rows(ins, *(a.astype(F32) for a in ins)),
    ("lab06.MATMUL_FP16", (1000, 1000, 1000)): lambda ins: _rows(ins, *(a.astype(F32) for a in ins)),
    ("lab08.LINEAR_BACKWARD", (4096, 1024, 512, "dx")): _linear(0),
    ("lab08.LINEAR_BACKWARD", (4096, 1024, 512, "dW")): _linear(1),
    ("lab08.LINEAR_BACKWARD", (4096, 1024, 512, "db")): _linear(2),
}
# measured (largest over the orders): VECMAT 0.003, MATMUL 0.011, DENSE_RELU 0.009 / 0.006, MATMUL_FP16 0.081
# (inputs in [0, 1): errors of one sign) / 0.062, LINEAR_BACKWARD dx 0.016, dW 0.007, db 0.004


@pytest.mark.parametrize("key,size", sorted(SUMS_OF_PRODUCTS, key=str), ids=str)
def test_every_float32_order_of_a_sum_of_products_uses_little_of_its_tolerance(key, size):
    p = P[key]
    case = gpu_case(key, size[:3])
    A, B, bias, o, sl = SUMS_OF_PRODUCTS[key, size](case.inputs)
    rows = A.shape[0]
    exp, tol = case.expected[o][sl], case.atol[o][sl]
    margins = {}
    for name, order in MATMUL_ORDERS.items():
        if bias is not None:  # acc = b[j] first, then the products; ReLU
            got = np.maximum(order(np.hstack([np.ones((rows, 1), F32), A]), np.vstack([bias[None, :], B])), 0)
        else:
            got = order(A, B)
        margins[name] = float(ratio(got.reshape(exp.shape), exp, p.rtol, tol).max())
    assert max(margins.values()) < 0.2, margins


def _conv_operands(case):
    """lab08.CONV2D_BACKWARD's GEMM operands: d (N*Ho*Wo, F), cols (N*Ho*Wo, k*k*C), wmat (F, k*k*C)."""
    from gpulab.nn.ops import get

    x, w, dout, stride, pad = case.inputs
    n, f, ho, wo = dout.shape
    k = w.shape[2]
    cols, _, _ = get("numpy").im2col(x, k, k, stride, pad)
    d = np.ascontiguousarray(dout.transpose(0, 2, 3, 1).reshape(n * ho * wo, f))
    return d, np.ascontiguousarray(cols), np.ascontiguousarray(w.transpose(0, 2, 3, 1).reshape(f, -1))


CONV_GPU = (64, 32, 14, 14, 64, 3, 1, 1)


def test_conv2d_backward_every_float32_order_uses_little_of_its_tolerance():
    """dw, db: 12,544-term sums (filters 0..15 of dw); dx: 64 filters x 9 taps = 576 terms (the worst case allowed
    dx the 12,544-term tolerance)."""
    from gpulab.nn.ops import get

    p, case = P["lab08.CONV2D_BACKWARD"], gpu_case("lab08.CONV2D_BACKWARD", CONV_GPU)
    x, w, _, stride, pad = case.inputs
    (edx, edw, edb), (tdx, tdw, tdb) = case.expected, case.atol
    d, cols, wmat = _conv_operands(case)
    f, c, k, _ = w.shape
    dT = np.ascontiguousarray(d[:, :16].T)
    margins = {}
    for name, order in MATMUL_ORDERS.items():
        dw = order(dT, cols).reshape(16, k, k, c).transpose(0, 3, 1, 2)
        margins[f"dw {name}"] = float(ratio(dw, edw[:16], p.rtol, tdw[:16]).max())
    margins["db one thread"] = float(ratio(seq_matmul(np.ones((1, d.shape[0]), F32), d)[0], edb, p.rtol, tdb).max())
    margins["db atomics"] = max(
        float(ratio([atomics(d[:, j], j)], edb[j : j + 1], p.rtol, tdb[j : j + 1]).max()) for j in range(f)
    )
    dx = get("numpy").col2im(seq_matmul(d, wmat), x.shape, k, k, stride, pad)
    margins["dx gemm + col2im"] = float(ratio(dx, edx, p.rtol, tdx).max())
    # measured: dw 0.0022 (sequential, fma), db 0.0012, dx 0.0040
    assert max(margins.values()) < 0.05, margins


def _vecmat_bugs(case):
    A, x = (a.astype(np.float64) for a in case.inputs)
    y, k = x @ A, A.shape[0] // 2
    return {
        "last product dropped": (0, y - x[-1] * A[-1]),
        "x[k - 1] read for x[k] (a stale operand)": (0, y + (x[k - 1] - x[k]) * A[k]),
    }


def _linear_bugs(case):
    x, W, dout = (a.astype(np.float64) for a in case.inputs)
    return {
        "dx: last of 512 products dropped": (0, dout[:, :-1] @ W[:-1]),
        "dW: dout[k - 1] read for dout[k] (a stale operand)": (
            1,
            dout.T @ x + np.outer(dout[2047] - dout[2048], x[2048]),
        ),
        "db: last sample dropped": (2, dout[:-1].sum(axis=0)),
    }


def _conv_bugs(case):
    d, cols, wmat = (a.astype(np.float64) for a in _conv_operands(case))
    x, w, _, stride, pad = case.inputs
    f, c, k, _ = w.shape
    per = d.shape[0] // x.shape[0]
    lost = np.s_[6000:6016]  # one 16-term tile of the GEMM over the batch
    d_lost, cols_lost = np.delete(d, lost, 0), np.delete(cols, lost, 0)

    def dw(dd, cc):
        return (dd.T @ cc).reshape(f, k, k, c).transpose(0, 3, 1, 2)

    from gpulab.nn.ops import get

    return {
        "dw: last image left out": (1, dw(d[:-per], cols[:-per])),
        "db: last image left out": (2, d[:-per].sum(axis=0)),
        "dw: a 16-term tile lost": (1, dw(d_lost, cols_lost)),
        "db: a 16-term tile lost": (2, d_lost.sum(axis=0)),
        "dx: last filter left out": (0, get("numpy").col2im(d[:, :-1] @ wmat[:-1], x.shape, k, k, stride, pad)),
    }


# (check, size, bugs, bug): the largest fraction of elements in which the bug may go unseen (measured, and with the
# worst-case tolerance before). A bug that a race puts in a handful of elements is caught with 1 minus that chance.
BUGS = {
    ("lab03.VECMAT", (8192, 4096), "last product dropped"): 0.3,  # 19 % (100 %: the check passed)
    ("lab03.VECMAT", (8192, 4096), "x[k - 1] read for x[k] (a stale operand)"): 0.85,  # 77 % (100 %: passed)
    ("lab08.LINEAR_BACKWARD", (4096, 1024, 512), "dx: last of 512 products dropped"): 0.03,  # 1.3 % (13 %)
    (
        "lab08.LINEAR_BACKWARD",
        (4096, 1024, 512),
        "dW: dout[k - 1] read for dout[k] (a stale operand)",
    ): 0.25,  # 15 % (56 %)
    ("lab08.LINEAR_BACKWARD", (4096, 1024, 512), "db: last sample dropped"): 0.15,  # 8 % (48 %)
    ("lab08.CONV2D_BACKWARD", CONV_GPU, "dw: last image left out"): 0.06,  # 3.4 % (37 %)
    ("lab08.CONV2D_BACKWARD", CONV_GPU, "db: last image left out"): 0.06,  # 3.1 % (50 %)
    ("lab08.CONV2D_BACKWARD", CONV_GPU, "dw: a 16-term tile lost"): 0.2,  # 12 % (90 %)
    ("lab08.CONV2D_BACKWARD", CONV_GPU, "db: a 16-term tile lost"): 0.25,  # 16 % (100 %: the check passed)
    ("lab08.CONV2D_BACKWARD", CONV_GPU, "dx: last filter left out"): 0.01,  # 0.2 % (8 %)
}
BUG_MODELS = {"lab03.VECMAT": _vecmat_bugs, "lab08.LINEAR_BACKWARD": _linear_bugs, "lab08.CONV2D_BACKWARD": _conv_bugs}


@pytest.mark.parametrize("key,size,bug", sorted(BUGS, key=str), ids=str)
def test_a_wrong_sum_of_products_fails_in_most_elements_at_gpu_size(key, size, bug):
    p, case = P[key], gpu_case(key, size)
    o, got = BUG_MODELS[key](case)[bug]
    r = ratio(got, case.expected[o], p.rtol, case.atol[o])
    assert (r > 1).any(), f"{key} {bug}: the check passes"
    assert np.mean(r <= 1) <= BUGS[key, size, bug], f"{key} {bug}: unseen in {np.mean(r <= 1):.1%} of the elements"


# ---------------------------------------------------------------------------------------------------
# lab12.SOFTMAX_BACKWARD: ds = p * (dp - sum_j p_j dp_j), rtol 1e-4 and atol 1e-7 (was 1e-5: |ds| ~ 1e-4)

SOFTMAX_GPU = [(4096, 1000, 0), (1024, 1024, 1)]


def _row_dots(prod):
    tpb = problems.lab12.TPB
    order = np.argsort(np.random.default_rng(0).random(prod.shape), axis=1)
    return {
        "tree of strided partials": tree_sum(strided_partials(prod, tpb)),
        "one thread": np.cumsum(prod, axis=1, dtype=F32)[:, -1],
        "atomics": np.cumsum(np.take_along_axis(prod, order, axis=1), axis=1, dtype=F32)[:, -1],
    }


@pytest.mark.parametrize("size", SOFTMAX_GPU)
def test_softmax_backward_every_float32_order_uses_little_of_its_tolerance(size):
    p, case = P["lab12.SOFTMAX_BACKWARD"], gpu_case("lab12.SOFTMAX_BACKWARD", size)
    (pr, dp), exp = case.inputs, case.expected[0]
    margins = {}
    for name, dot in _row_dots(pr * dp).items():
        diff = dp - dot[:, None]
        forms = {
            "p * (dp - dot)": pr * diff,
            "fma": pr.astype(np.float64) * diff,
            "p * dp - p * dot": pr * dp - pr * dot[:, None],
        }
        for form, got in forms.items():
            margins[f"{name}, {form}"] = float(ratio(got, exp, p.rtol, p.atol).max())
    assert max(margins.values()) < 0.1, margins  # measured: 0.0084 (4096 x 1000), 0.034 (1024 x 1024, causal)


@pytest.mark.parametrize("size,unseen", [((4096, 1000, 0), 0.25), ((1024, 1024, 1), 0.65)])
def test_softmax_backward_fails_a_lost_partial_of_the_row_sum(size, unseen):
    """One of the TPB threads' partials of sum_j p_j dp_j lost (or added twice: a stale shared value) goes unseen in
    16 % / 55 % of the elements (87 % / 89 % with atol 1e-5; under the causal mask half the elements are exact
    zeros) and in at most 0.2 % of the rows (24 % / 12 %)."""
    p, case = P["lab12.SOFTMAX_BACKWARD"], gpu_case("lab12.SOFTMAX_BACKWARD", size)
    (pr, dp), exp = (a.astype(np.float64) for a in case.inputs), case.expected[0]
    prod = pr * dp
    part = prod[:, 0 :: problems.lab12.TPB].sum(axis=1)  # thread 0's partial
    for sign in (-1, 1):
        r = ratio(pr * (dp - (prod.sum(axis=1) + sign * part)[:, None]), exp, p.rtol, p.atol)
        assert np.mean(r <= 1) <= unseen, (sign, np.mean(r <= 1))
        assert np.mean((r <= 1).all(axis=1)) <= 0.005, (sign, np.mean((r <= 1).all(axis=1)))
