"""gpulab.transformer: attention from the course's kernels, the fused kernel, its byte counts, the backward
pass, and lesson 12's exercises. Kernels run in the simulator at small sizes (in gpu mode on CuPy arrays)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import lessons, runtime
from gpulab.gradcheck import check_layer, numerical_gradient, relative_error
from gpulab.kernels._launch import LaunchError
from gpulab.lessons import answers_12
from gpulab.transformer import attention, backward, flash

# (n, m, d, dv, causal): sizes that are not multiples of the 16-wide tiles, single rows and keys,
# more keys than queries (a causal offset m - n), d at the fused kernel's limit
SIZES = [
    (1, 1, 1, 1, False),
    (1, 1, 1, 1, True),
    (5, 7, 3, 4, False),
    (17, 20, 8, 5, True),
    (16, 16, 16, 16, True),
    (3, 37, 4, 3, True),
]


def qkv(n, m, d, dv, seed=0, big=1.0):
    rng = np.random.default_rng(seed)
    return (
        (rng.standard_normal((n, d)) * big).astype(np.float32),
        rng.standard_normal((m, d)).astype(np.float32),
        rng.standard_normal((m, dv)).astype(np.float32),
    )


def on_device(*arrays):
    return tuple(runtime.to_device(a) for a in arrays)


# ---------------------------------------------------------------------------------------------------
# reference, naive, fused


def test_reference_is_a_softmax_of_scaled_scores_with_the_offset_mask():
    q, k, v = (a.astype(np.float64) for a in qkv(3, 5, 4, 2))
    s = q @ k.T / 2.0
    mask = np.array([[j <= i + 2 for j in range(5)] for i in range(3)])
    p = np.where(mask, np.exp(s), 0.0)
    expected = (p / p.sum(axis=1, keepdims=True)) @ v
    assert np.allclose(attention.attention_reference(q, k, v, causal=True), expected, rtol=1e-12)
    assert np.array_equal(attention.causal_mask(3, 5), mask)


def test_causal_mask_offset_and_strict_give_the_mistaken_masks():
    """The known mistakes' masks (lesson 12 and lab 12) come from causal_mask: loop-written here, element by element."""
    n, m = 3, 5
    for offset, strict in [(0, False), (m - n + 1, False), (n - m, False), (m - n, True), (None, False)]:
        limit = m - n if offset is None else offset
        want = np.array([[(j < i + limit) if strict else (j <= i + limit) for j in range(m)] for i in range(n)])
        assert np.array_equal(attention.causal_mask(n, m, offset=offset, strict=strict), want), (offset, strict)


def test_reference_is_finite_for_logits_past_exps_range():
    q, k, v = qkv(4, 6, 8, 3, big=1e4)
    out = attention.attention_reference(q, k, v, causal=True)
    assert np.isfinite(out).all()


@pytest.mark.parametrize("n,m,d,dv,causal", SIZES)
def test_fused_kernel_matches_the_reference(n, m, d, dv, causal):
    q, k, v = qkv(n, m, d, dv, seed=n + m)
    got = runtime.to_host(flash.flash_attention(*on_device(q, k, v), causal=causal))
    np.testing.assert_allclose(got, attention.attention_reference(q, k, v, causal=causal), rtol=1e-4, atol=1e-5)


def test_fused_kernel_at_d_max_and_with_large_logits():
    q, k, v = qkv(18, 21, flash.DMAX, flash.DMAX, big=100.0)  # scores in the hundreds: exp would overflow
    got = runtime.to_host(flash.flash_attention(*on_device(q, k, v), causal=True))
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, attention.attention_reference(q, k, v, causal=True), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("n,m,d,dv,causal", [(5, 7, 3, 4, False), (17, 20, 8, 5, True)])
def test_naive_path_matches_the_reference_and_returns_the_weights(n, m, d, dv, causal):
    q, k, v = qkv(n, m, d, dv, seed=3)
    out, p = attention.attention_naive(*on_device(q, k, v), causal=causal)
    out, p = runtime.to_host(out), runtime.to_host(p)
    np.testing.assert_allclose(out, attention.attention_reference(q, k, v, causal=causal), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-5)
    if causal:
        assert (p[~attention.causal_mask(n, m)] == 0).all()


@pytest.mark.parametrize("scores", [None, answers_12.attention_scores_kernel], ids=["matmul+mask", "scores kernel"])
def test_naive_path_takes_the_learners_kernels(scores):
    """The lesson-12 scores kernel (exercise 1) and online softmax (32 threads per row) and the lesson-03 naive
    matmul plug in; 17 x 20 scores are not a whole number of the scores kernel's 16 x 16 blocks."""
    from gpulab.kernels.matmul import matmul_naive_kernel

    q, k, v = qkv(17, 20, 4, 3, seed=5, big=30.0)
    out, p = attention.attention_naive(
        *on_device(q, k, v),
        causal=True,
        scores_kernel=scores,
        matmul_kernel=matmul_naive_kernel,
        softmax_kernel=answers_12.online_softmax_kernel,
        softmax_threads=answers_12.SOFTMAX_TPB,
    )
    np.testing.assert_allclose(
        runtime.to_host(out), attention.attention_reference(q, k, v, causal=True), rtol=1e-3, atol=1e-4
    )
    assert (runtime.to_host(p)[~attention.causal_mask(17, 20)] == 0).all()


def test_launchers_refuse_what_they_cannot_compute():
    q, k, v = qkv(4, 3, 8, 8)
    with pytest.raises(LaunchError, match="m >= n"):
        flash.flash_attention(q, k, v, causal=True)
    with pytest.raises(LaunchError, match="same width d"):
        flash.flash_attention(q, k[:, :4].copy(), v)
    with pytest.raises(LaunchError, match="DMAX"):
        flash.flash_attention(*qkv(2, 2, flash.DMAX + 1, 1))
    with pytest.raises(TypeError, match="float32"):
        attention.attention_naive(q.astype(np.float64), k, v)


# ---------------------------------------------------------------------------------------------------
# FLOPs and bytes


def test_costs_count_each_step():
    c = attention.attention_costs(64, 16, m=80, dv=8)
    assert c.naive["QK^T"] == (2 * 64 * 80 * 16, 4 * (64 * 16 + 80 * 16 + 64 * 80))
    assert c.naive["PV"][0] == 2 * 64 * 80 * 8
    assert c.total("fused")[1] == 4 * (64 * 16 + 80 * 16 + 80 * 8 + 64 * 8)
    assert c.intensity("fused") > c.intensity("naive")
    causal = attention.attention_costs(64, 16, causal=True)
    assert causal.total("fused")[0] < attention.attention_costs(64, 16).total("fused")[0]
    assert "QK^T" in str(c) and "<table>" in c._repr_html_()


@pytest.mark.parametrize("n,m,d,dv,causal", [(16, 16, 16, 16, False), (9, 30, 8, 8, True)])
def test_traced_bytes_equal_the_prediction(n, m, d, dv, causal):
    """gpulab.trace counts every global access of each kernel; the prediction counts the kernels' loops."""
    predicted = flash.predicted_bytes(n, m, d, dv, causal=causal)
    measured = flash.measure_bytes(n, m, d, dv, causal=causal)
    assert measured == predicted
    assert measured.ratio == pytest.approx(predicted.ratio) and measured.ratio > 4  # 5.0 and 6.37 here


def test_measure_bytes_counts_the_kernel_it_is_given():
    """Lesson 12 counts the learner's fused kernel: the reference given explicitly counts as the default, and
    a kernel whose result is wrong is refused (its byte count would mean nothing)."""
    assert flash.measure_bytes(9, 12, 8, causal=True, kernel=flash.flash_attention_kernel) == flash.measure_bytes(
        9, 12, 8, causal=True
    )

    @cuda.jit
    def zeros_kernel(q, k, v, scale, causal, out):  # the fused signature and launch, a wrong result
        row = cuda.blockIdx.x * flash.BQ + cuda.threadIdx.y
        for c in range(cuda.threadIdx.x, out.shape[1], flash.BK):
            if row < out.shape[0]:
                out[row, c] = 0.0

    with pytest.raises(AssertionError, match="fused path's result differs"):
        flash.measure_bytes(9, 12, 8, causal=True, kernel=zeros_kernel)


def test_fused_advantage_grows_with_the_sequence():
    """The naive path's n x m traffic grows with n * m; the fused kernel's with n * m * d / BQ."""
    ratios = [flash.predicted_bytes(n, n, 64).ratio for n in (64, 1024, 8192)]
    assert ratios == sorted(ratios) and 2.5 < ratios[-1] < 3.1  # about (7 + 3*64/16 + 4) / (2*64/16)
    causal = flash.predicted_bytes(1024, 1024, 64, causal=True).ratio  # fused skips the tiles past the diagonal
    assert 5.0 < causal < 6.0


def test_bytes_table_and_benchmark_rows():
    rows = flash.bytes_table(4, 5, 2, causal=True)
    assert all(r["predicted"] == r["measured"] for r in rows) and rows[-1]["kernel"] == "ratio naive / fused"
    bench = flash.benchmark_attention(4, 2, causal=True, repeat=1)
    assert [r["path"].split()[0] for r in bench] == ["fused", "naive", "CuPy" if runtime.is_gpu() else "NumPy"]
    assert all(r["seconds"] > 0 and r["mode"] == runtime.mode() for r in bench)


# ---------------------------------------------------------------------------------------------------
# backward


def test_self_attention_layer_passes_the_finite_difference_check():
    errs = check_layer(backward.SelfAttention(6, 4, 3, causal=True), np.random.default_rng(1).standard_normal((5, 6)))
    assert max(errs.values()) < 1e-7, errs


@pytest.mark.parametrize("causal", [False, True])
def test_attention_backward_matches_finite_differences(causal):
    q, k, v = (a.astype(np.float64) for a in qkv(4, 6, 3, 2, seed=7))
    r = np.random.default_rng(8).standard_normal((4, 2))
    _, cache = backward.attention_forward(q, k, v, causal=causal)
    grads = backward.attention_backward(r, cache)
    for x, g in zip((q, k, v), grads):
        num = numerical_gradient(lambda: float((backward.attention_forward(q, k, v, causal=causal)[0] * r).sum()), x)
        assert relative_error(g, num) < 1e-7


def test_attention_backward_matches_pytorch():
    pytest.importorskip("torch")
    q, k, v = (a.astype(np.float64) for a in qkv(5, 7, 4, 3, seed=9))
    r = np.random.default_rng(10).standard_normal((5, 3))
    grads = backward.attention_backward(r, backward.attention_forward(q, k, v, causal=True)[1])
    for ours, theirs in zip(grads, backward.torch_gradients(q, k, v, r, causal=True)):
        assert relative_error(ours, theirs) < 1e-12


# ---------------------------------------------------------------------------------------------------
# lesson 12's exercises


@pytest.mark.parametrize("name", ["scores", "online_softmax"])
def test_lesson_references_pass(name):
    ex = lessons.exercise("12", name)
    res = ex.check(ex.reference, trusted=True)  # gpulab's own: no own-code stage
    assert res.passed and res.score == res.max_score, res


def test_lesson_fused_reference_passes_with_its_budget():
    res = lessons.exercise("12", "flash").check(flash.flash_attention_kernel, trusted=True)
    assert res.passed and res.score == res.max_score, res


@cuda.jit
def scores_masked_with_zero(q, k, scale, causal, s):
    j, i = cuda.grid(2)
    n = s.shape[0]
    m = s.shape[1]
    if i < n and j < m:
        acc = float32(0.0)
        for c in range(q.shape[1]):
            acc += q[i, c] * k[j, c]
        s[i, j] = 0.0 if (causal != 0 and j > i + (m - n)) else acc * scale


@cuda.jit
def softmax_merge_without_rescale(x, out):
    row = cuda.blockIdx.x
    tx = cuda.threadIdx.x
    s_max = cuda.shared.array(32, float32)
    s_sum = cuda.shared.array(32, float32)
    run_max = float32(-math.inf)
    run_sum = float32(0.0)
    for j in range(tx, x.shape[1], 32):
        xj = x[row, j]
        new_max = max(run_max, xj)
        if new_max != -math.inf:
            run_sum = run_sum * math.exp(run_max - new_max) + math.exp(xj - new_max)
        run_max = new_max
    s_max[tx] = run_max
    s_sum[tx] = run_sum
    cuda.syncthreads()  # partial pairs stored
    stride = 16
    while stride > 0:
        if tx < stride:
            s_sum[tx] += s_sum[tx + stride]  # the mistake: sums relative to different maxima
            s_max[tx] = max(s_max[tx], s_max[tx + stride])
        cuda.syncthreads()  # level merged
        stride //= 2
    for j in range(tx, x.shape[1], 32):
        out[row, j] = math.exp(x[row, j] - s_max[0]) / s_sum[0]


@pytest.mark.parametrize(
    "name,kernel,hint",
    [
        ("scores", scores_masked_with_zero, "-inf, not 0"),
        ("online_softmax", softmax_merge_without_rescale, "rescale each to the larger maximum"),
    ],
)
def test_lesson_mistakes_get_their_hint(name, kernel, hint):
    res = lessons.check("12", name, kernel)
    assert not res.passed and hint in res.hint, res


def test_lesson_fused_mistake_without_rescaling_is_named():
    """The reference's online softmax with alpha forced to 1 (emulated on the host, as the harness allows)."""
    problem = lessons.exercise("12", "flash").problem
    from gpulab.problems import lab12  # the mistakes lesson 12 and lab 12 share

    def no_rescale(q, k, v, scale, causal, out):  # the harness passes device arrays in gpu mode: NumPy on the host
        host = (runtime.to_host(a) for a in (q, k, v))
        out[...] = runtime.to_device(lab12._flash_no_rescale(*host, scale, causal))

    res = problem.check(host=no_rescale, race_check=False, budget=None)
    assert not res.passed and "alpha = exp(old max - new max)" in res.hint, res


def test_every_reference_kernel_of_lesson12_is_listed_for_ptx():
    listed = {k for k, _ in answers_12.PTX_SIGNATURES} | {k for k, _ in flash.PTX_SIGNATURES}
    refs = {e.reference for (les, _), e in lessons.EXERCISES.items() if les == "12"}
    kernels = {r for r in refs if hasattr(r, "py_func")}  # the backward pass's answer is NumPy on the host
    assert kernels <= listed and refs - kernels == {answers_12.attention_backward}


NEW_KERNELS = attention.PTX_SIGNATURES + flash.PTX_SIGNATURES + answers_12.PTX_SIGNATURES


def _key(kernel) -> str:
    from gpulab.source import py_func

    fn = py_func(kernel)
    return f"{fn.__module__}.{fn.__name__}"


@pytest.fixture(scope="module")
def compiled_new_kernels():
    """Lesson 12's kernels compiled for sm_75 and sm_90 in one NVVM process (one per target took about 2.5 s more)."""
    from gpulab import ptx
    from gpulab.source import py_func, standalone_source

    items = {
        _key(k): {"source": standalone_source(k), "name": py_func(k).__name__, "signature": sig}
        for k, sig in NEW_KERNELS
    }
    return ptx.compile_sources(items, ccs=((7, 5), (9, 0)))


@pytest.mark.ptx
@pytest.mark.parametrize(
    "kernel,signature", NEW_KERNELS, ids=lambda x: getattr(getattr(x, "py_func", x), "__name__", str(x))
)
def test_new_kernels_compile_to_ptx(kernel, signature, compiled_new_kernels):
    key = _key(kernel)
    for cc, res in compiled_new_kernels.items():
        assert res.get(key) == "ok", f"{key} ({signature}) for sm_{cc[0]}{cc[1]}: {res.get(key)}"


class _SpyModule:
    """numpy under another name, recording which of its functions were called."""

    def __init__(self) -> None:
        self.called: list[str] = []

    def __getattr__(self, name: str):
        self.called.append(name)
        return getattr(np, name)


def test_the_causal_mask_is_built_in_the_inputs_array_module(monkeypatch):
    """attention_forward builds its mask where its scores are (CuPy on a GPU): with a NumPy mask copied over, the bench
    of 2026-12-04 timed 9.8 ms for CuPy's attention at n = 4096 on an H200, 6.4 ms of it the host's mask."""
    spy = _SpyModule()
    assert np.array_equal(attention.causal_mask(4, 6, xp=spy), attention.causal_mask(4, 6))
    assert "arange" in spy.called
    spy.called.clear()
    monkeypatch.setattr(runtime, "array_module", lambda *arrays: spy)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((5, 4)).astype(np.float32) for _ in range(3))
    out, _ = backward.attention_forward(q, k, v, causal=True)
    assert "arange" in spy.called  # the mask came from the inputs' module, not from NumPy and a copy
    np.testing.assert_allclose(out, attention.attention_reference(q, k, v, causal=True), rtol=1e-5, atol=1e-6)
