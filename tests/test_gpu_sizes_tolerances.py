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
from test_gpu_sizes import seq_matmul, tree_sum

F32 = np.float32
P = problems.all_problems()


@functools.lru_cache(maxsize=4)
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
