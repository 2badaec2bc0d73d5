"""Lab 06's checks at their gpu-mode sizes with the GPU's arithmetic emulated in NumPy (the tier of
tests/test_gpu_sizes.py, for lab06; no GPU needed).

Each emulation computes what a correct kernel computes on a GPU, in float32 and in the kernel's order: the
matmul adds exact float32 products of float16 inputs one k after another (the naive kernel's loop), Adam uses
another algebraic form than the spec (Chainer's ``m += (1 - beta1) * (g - m)``), GELU and its derivative are float32
with the cube of a clamped x (a NumPy tanh in place of the GPU's tanhf; tanhf 2 ulp off in a test of its own), the
norm sums the squares in float32 strided per thread and then in a tree (a reduction kernel's order) or one after
another (the least favourable usual order). The tier has teeth: a float16 accumulator fails the matmul's bound at
K = 4096.

``EMULATIONS`` is keyed like tests/test_gpu_sizes.py's and self-contained (it imports nothing from there), so
that file can merge it.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from gpulab import problems

F32 = np.float32
L = problems.lab06


def seq_matmul_f32(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """C = A @ B with one float32 accumulator per output, adding k = 0, 1, ... in order."""
    C = np.zeros((A.shape[0], B.shape[1]), F32)
    tmp = np.empty_like(C)
    for k in range(A.shape[1]):
        np.multiply(A[:, k : k + 1], B[k : k + 1, :], out=tmp)  # float32 product (exact for float16 inputs)
        C += tmp
    return C


def _bias_relu(x, b, out):
    out[...] = np.maximum(x + b, F32(0))  # x, out: the transposed views; b broadcasts along the columns


def _matmul_fp16(A, B, C):
    C[...] = seq_matmul_f32(A.astype(F32), B.astype(F32))


def _adam(p, g, m, v, lr_t, beta1, beta2, eps, m_out, v_out, p_out):
    one = F32(1)
    m1 = m + (one - beta1) * (g - m)
    v1 = v + (one - beta2) * (g * g - v)
    m_out[...], v_out[...] = m1, v1
    p_out[...] = p - lr_t * m1 / (np.sqrt(v1) + eps)


def _grad_norm_tree(g, norm, threads: int = 512):
    """Each of ``threads`` threads sums squares t, t + threads, ... in float32, then a shared-memory tree."""
    sq = g.astype(F32) * g.astype(F32)
    acc = np.zeros(threads, F32)
    for start in range(0, sq.size, threads):
        chunk = sq[start : start + threads]
        acc[: chunk.size] += chunk
    s = threads // 2
    while s > 0:
        acc[:s] += acc[s : 2 * s]
        s //= 2
    norm[...] = np.sqrt(acc[:1])


def _grad_norm_sequential(g, norm):
    sq = g.astype(F32) * g.astype(F32)
    total = np.cumsum(sq, dtype=F32)[-1:] if sq.size else np.zeros(1, F32)
    norm[...] = np.sqrt(total)


def tanhf(u: np.ndarray, ulps) -> np.ndarray:
    """CUDA's tanhf, documented to err by up to 2 ulp: the correctly rounded tanh moved by ``ulps`` ulp (a number, or
    "random" for -2..2 per element), except where it saturates to +-1 (|u| >= 9), and never outside [-1, 1]."""
    t = np.tanh(u.astype(np.float64)).astype(F32)
    if isinstance(ulps, str):
        ulps = np.random.default_rng(0).integers(-2, 3, size=t.shape)
    k = np.where(np.abs(u) < 9.0, np.broadcast_to(ulps, t.shape), 0)
    for step in range(2):
        t = np.where(np.abs(k) > step, np.nextafter(t, np.where(k > 0, F32(2), F32(-2))).astype(F32), t)
    return np.clip(t, F32(-1), F32(1))


def _gelu32(x, grad: bool = False, ulps=None, form: str = "solution"):
    """The float32 GELU (or its derivative) with the cube of x clamped to [-10, 10], as the lab's solution; ``ulps``:
    tanh by :func:`tanhf` (else NumPy's, within 1 ulp). ``form`` of the derivative: the solution's
    ``(1 - t * t)``, ``"(1-t)(1+t)"``, or ``"fma"`` (its last multiply-add fused)."""
    c, a, h, one = F32(0.7978845608), F32(0.044715), F32(0.5), F32(1)
    xc = np.clip(x, F32(-10), F32(10))
    u = c * (xc + a * xc * xc * xc)
    t = np.tanh(u) if ulps is None else tanhf(u, ulps)
    if not grad:
        return h * x * (one + t)
    du = c * (one + F32(0.134145) * xc * xc)
    if form == "fma":  # fma(h * xc * du, 1 - t * t, h * (1 + t)): one rounding
        return ((h * xc * du).astype(np.float64) * (one - t * t) + h * (one + t)).astype(F32)
    sech2 = (one - t) * (one + t) if form == "(1-t)(1+t)" else one - t * t
    return h * (one + t) + h * xc * sech2 * du


def _gelu(x, out):  # tanh 2 ulp up wherever it does not saturate: CUDA tanhf's documented worst
    out[...] = _gelu32(x, ulps=2)


def _gelu_grad(x, out):
    out[...] = _gelu32(x, grad=True, ulps=2)


def _gelu_layer(x, y, dydx):
    y[...], dydx[...] = _gelu32(x, ulps=2), _gelu32(x, grad=True, ulps=2)


EMULATIONS = {
    "lab06.BIAS_RELU_VIEW": _bias_relu,
    "lab06.MATMUL_FP16": _matmul_fp16,
    "lab06.ADAM": _adam,
    "lab06.GRAD_NORM": _grad_norm_tree,
    "lab06.GELU": _gelu,
    "lab06.GELU_GRAD": _gelu_grad,
    "lab06.GELU_LAYER": _gelu_layer,
}
ALL = problems.all_problems()


def gpu_check(key: str, host=None, **overrides):
    return ALL[key].check(host=host or EMULATIONS[key], scale="gpu", race_check=False, ptx=None, **overrides)


def test_every_lab06_problem_has_an_emulation():
    assert set(EMULATIONS) == {k for k in ALL if k.startswith("lab06.")}


@pytest.mark.parametrize("key", sorted(EMULATIONS))
def test_lab06_check_passes_a_faithful_float32_emulation_at_gpu_sizes(key):
    res = gpu_check(key)
    assert res.passed, res
    assert len(res.checks) >= len(ALL[key].gpu_sizes)


def test_grad_norm_bound_holds_for_a_sequential_float32_sum_at_gpu_sizes():
    res = gpu_check("lab06.GRAD_NORM", host=_grad_norm_sequential)
    assert res.passed, res


@functools.lru_cache(maxsize=2)
def _gpu_cases(key: str):
    from gpulab.exercises.cases import build_cases

    return build_cases(ALL[key], list(ALL[key].gpu_sizes))


@pytest.mark.parametrize("ulps", [2, -2])
@pytest.mark.parametrize("key", ["lab06.GELU", "lab06.GELU_GRAD"])
def test_gelu_tolerances_hold_with_cuda_tanhf_2_ulp_off(key, ulps):
    """CUDA's tanhf errs by up to 2 ulp (NumPy's tanh: 1 at most). Near x = -5 the derivative's two terms cancel, so
    the tanh error is multiplied: with a tanh 2 ulp off every derivative form uses at most 0.54 of atol 5e-6 (GELU
    0.38 of its 1e-6), at x = -5.155 and -4.929 among the 2**20 inputs; 0.23 (0.15) with NumPy's tanh."""
    p = ALL[key]
    forms = ["solution", "(1-t)(1+t)", "fma"] if key.endswith("GRAD") else ["solution"]
    worst = 0.0
    for case in _gpu_cases(key):
        (x,), exp = case.inputs, case.expected[0].astype(np.float64)
        for form in forms:
            with np.errstate(over="ignore", invalid="ignore"):
                got = _gelu32(x, grad=key.endswith("GRAD"), ulps=ulps, form=form).astype(np.float64)
            fin = np.isfinite(exp)
            assert np.array_equal(got[~fin], exp[~fin]), (form, case.size)
            worst = max(worst, float((np.abs(got - exp)[fin] / (p.atol + p.rtol * np.abs(exp[fin]))).max()))
    assert worst < 0.7, worst  # 2 ulp everywhere is the documented worst case: 0.54 measured


def test_gpu_sizes_reach_long_sums_and_large_arrays():
    assert max(k for _, k, _ in L.MATMUL_FP16.gpu_sizes) == 4096
    assert max(L.GRAD_NORM.gpu_sizes) >= 1 << 20
    assert max(n for n, _ in L.ADAM.gpu_sizes) >= 1 << 20
    assert max(r * c for r, c in L.BIAS_RELU_VIEW.gpu_sizes) >= 4_000_000


def _acc16(A, B, C):
    C[...] = L._acc16(A, B)


def _products16(A, B, C):
    C[...] = L._products16(A, B)


def test_float16_accumulation_fails_at_gpu_k_with_its_hint():
    """The teeth: at K = 4096 (8 rows of the gpu-size case) a float16 accumulator misses the bound by far."""
    res = gpu_check("lab06.MATMUL_FP16", host=_acc16, sizes=[(8, 4096, 384)])
    assert not res.passed and res.status == "failed", res
    assert "float16 accumulator" in res.hint
    good = gpu_check("lab06.MATMUL_FP16", sizes=[(8, 4096, 384)])
    assert good.passed, good


def test_float16_products_are_caught_by_the_short_sums_in_both_modes():
    """Products rounded to float16 (then a float32 sum) are caught where K is small: at K = 4096 the float32
    bound (4097 * 2**-24 of the sum of |products|) is wider than their rounding errors, which mostly cancel, so
    the gpu-mode sizes keep short sums too."""
    for scale in ("simulator", "gpu"):
        res = L.MATMUL_FP16.check(host=_products16, scale=scale, race_check=False, ptx=None)
        assert not res.passed and "rounded to float16" in res.hint, (scale, res)
    assert gpu_check("lab06.MATMUL_FP16", host=_products16, sizes=[(8, 4096, 384)]).passed
