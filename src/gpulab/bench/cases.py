"""The cases of ``gpulab bench kernels``: each kernel, at a size, as a :class:`Problem` to run, check and time.

A :class:`Case` names a launcher in :mod:`gpulab.kernels` and builds its Problem: inputs, the call, a
check against NumPy (or the library's product), the work a perfect kernel does (bytes or FLOPs), and a
library baseline doing the same work (a CuPy/NumPy copy, or cuBLAS/NumPy ``matmul``).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import numpy as np

from .. import runtime
from ..kernels._launch import ceil_div

__all__ = ["CASES", "Case", "LADDERS", "Problem", "cases", "clear_draws"]

# The size ladders of ``bench kernels`` on a GPU, by the kind of case (:attr:`Case.ladder`). Each timed call costs a
# launch from Python, about 130 us on an H200 with CuPy arguments (2026-12-04, `bench kernels` prints this machine's
# floor first): 2**24 floats copied (128 MB moved) took 162 us there, mostly launch, and 2**28 (2 GB) about 0.9 ms.
# "stream": memory-bound cases, up to 2**28 elements (1 GiB per array) where the device has room; "atomic": one
# float32 running total, whose rounding error grows with n (at 2**28 it stalls near 2**24 and the check fails) and
# whose time is the atomics' (30 ms at 2**24), not the launch's; "matmul": sides 1024-4096 (the naive kernel took
# 0.1 s at 4096; at 16384 it would take seconds).
LADDERS: dict[str, list[int]] = {
    "stream": [1 << 20, 1 << 24, 1 << 28],
    "atomic": [1 << 20, 1 << 22, 1 << 24],
    "matmul": [1 << 20, 1 << 22, 1 << 24],
}


@dataclass
class Problem:
    """One kernel at one size: how to run it, what it must return, how much work it does."""

    run: Callable[[], Any]
    check: Callable[[Any], None]
    work: float  # bytes (GB/s) or FLOPs (GFLOP/s)
    shape: tuple[int, ...]
    baseline: Callable[[], Any]
    baseline_work: float


@dataclass(frozen=True)
class Case:
    """A benchmarked kernel: its family (the results section), metric and problem builder; its size ladder on a GPU
    (a key of :data:`LADDERS`) and how many float32 arrays of about ``n`` elements it holds on the device at once,
    the library baseline's included (``bench kernels`` skips a size that does not fit in free device memory)."""

    name: str
    section: str
    metric: str  # "GB/s" or "GFLOP/s"
    launcher: str
    build: Callable[[Callable[..., Any], int, np.random.Generator], Problem]
    ladder: str = "stream"
    arrays: int = 4

    def device_bytes(self, n: int) -> int:
        """Device memory the case needs at ``n`` elements (its arrays, float32)."""
        return self.arrays * int(n) * 4


def _xp() -> Any:
    return runtime.xp()


def _copy_baseline(nbytes_each_way: int) -> tuple[Callable[[], Any], float]:
    """The library's copy of the same number of bytes (read + write)."""
    xp = _xp()
    n = max(1, nbytes_each_way // 4)
    src, dst = xp.ones(n, dtype=np.float32), xp.empty(n, dtype=np.float32)
    return (lambda: xp.copyto(dst, src)), 2.0 * n * 4


# Host inputs drawn in this run, by (method, size, generator state before the draw): the cases at 2**28 elements
# draw the same 1 GiB arrays (copy, its strided twin, add and softmax the same normals), and one draw took 1-3 s of
# CPU. Served again with the generator moved on as the draw moved it: the same values as drawing again.
# ``bench kernels`` empties it when it ends (:func:`clear_draws`).
_DRAWS: dict[tuple[str, int, str], tuple[Any, Any]] = {}


def clear_draws() -> None:
    """Forget the inputs drawn so far (their host memory is freed)."""
    _DRAWS.clear()


def _draw(rng: np.random.Generator, method: str, shape: tuple[int, ...]) -> np.ndarray:
    """``rng.<method>(shape, dtype=float32)``, served from :data:`_DRAWS` when drawn before. Every case only reads it
    (not made read-only: the simulator copies a NumPy argument back into it after each launch)."""
    n = math.prod(shape)
    key = (method, n, repr(rng.bit_generator.state))
    if key not in _DRAWS:
        values = getattr(rng, method)(n, dtype=np.float32)
        _DRAWS[key] = (values, rng.bit_generator.state)
    values, after = _DRAWS[key]
    rng.bit_generator.state = after
    return values.reshape(shape)


def _close(expected: Any, rtol: float = 1e-5, atol: float = 1e-5) -> Callable[[Any], None]:
    def check(got: Any) -> None:
        got_h = np.asarray(runtime.to_host(got) if not np.isscalar(got) else got)
        if rtol == atol == 0 and np.array_equal(got_h, expected):
            return  # exact and equal: np.testing's comparison took 4.7 s of CPU at 2**26 floats, this 0.04 s
        np.testing.assert_allclose(got_h, expected, rtol=rtol, atol=atol)

    return check


def _close_rows(expected: np.ndarray, rows: np.ndarray, rtol: float, atol: float) -> Callable[[Any], None]:
    """A check of the result's ``rows`` only against ``expected`` (those rows' reference): at 2**28 elements a whole
    float64-free reference and NumPy's comparison of 1 GiB arrays took several GiB of host memory."""

    def check(got: Any) -> None:
        np.testing.assert_allclose(np.asarray(runtime.to_host(got))[rows], expected, rtol=rtol, atol=atol)

    return check


# Rows of a softmax result checked: spread over the whole matrix (the first, the last and evenly between).
CHECKED_ROWS = 4096


def _square(n: int) -> int:
    return max(1, int(round(math.sqrt(n))))


def _build_copy(stride: int) -> Callable[..., Problem]:
    def build(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
        x_h = _draw(rng, "standard_normal", (n,))
        x = runtime.to_device(x_h)
        n_out = ceil_div(n, stride)
        out = _xp().empty(n_out, dtype=np.float32)
        base, base_work = _copy_baseline(n_out * 4)
        # A perfect strided copy still moves only the useful bytes: n_out reads + n_out writes.
        return Problem(
            lambda: fn(x, out, stride=stride), _close(x_h[::stride], 0, 0), 2.0 * n_out * 4, (n,), base, base_work
        )

    return build


def _build_transpose(kernel_name: str) -> Callable[..., Problem]:
    def build(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
        side = _square(n)
        a_h = _draw(rng, "standard_normal", (side, side + 1))  # not square: catches swapped axes
        a = runtime.to_device(a_h)
        out = _xp().empty(a_h.shape[::-1], dtype=np.float32)
        kern = importlib.import_module("gpulab.kernels.memory").__dict__.get(kernel_name)
        if kern is None:
            raise LookupError(f"gpulab.kernels.memory has no {kernel_name}")
        base, base_work = _copy_baseline(a_h.size * 4)
        return Problem(
            lambda: fn(a, out, kernel=kern), _close(a_h.T, 0, 0), 2.0 * a_h.size * 4, a_h.shape, base, base_work
        )

    return build


def _build_sum(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
    x_h = _draw(rng, "random", (n,))  # positive: the float32 sum stays well conditioned
    x = runtime.to_device(x_h)
    expected = float(x_h.sum(dtype=np.float64))  # float64 accumulation without a float64 copy (2 GiB at 2**28)
    base, base_work = _copy_baseline(n * 4)
    # sum_atomic adds into one float32 running total in whatever order the warps arrive: at n = 2**24 the total
    # passes 2**23, where float32's spacing is 1, and its error reaches 1.25e-4 of the sum (a running total in
    # shuffled order, 1 of 30 orders over 1e-4; 6.5e-5 in index order). rtol=1e-3, as lesson 05 allows atomics.
    return Problem(lambda: fn(x), _close(expected, rtol=1e-3, atol=1e-3), 1.0 * n * 4, (n,), base, base_work)


def _build_softmax(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
    rows = _square(n)
    cols = max(1, n // rows)
    x_h = _draw(rng, "standard_normal", (rows, cols))
    checked = np.unique(np.linspace(0, rows - 1, min(rows, CHECKED_ROWS)).astype(np.int64))
    xs = x_h[checked]
    e = np.exp(xs - xs.max(axis=1, keepdims=True))
    expected = e / e.sum(axis=1, keepdims=True)
    x = runtime.to_device(x_h)
    out = _xp().empty_like(x)
    base, base_work = _copy_baseline(x_h.size * 4)
    check = _close_rows(expected, checked, rtol=1e-4, atol=1e-6)
    return Problem(lambda: fn(x, out), check, 2.0 * x_h.size * 4, x_h.shape, base, base_work)


def _build_add(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
    a_h, b_h = _draw(rng, "standard_normal", (n,)), _draw(rng, "standard_normal", (n,))
    a, b = runtime.to_device(a_h), runtime.to_device(b_h)
    out = _xp().empty(n, dtype=np.float32)
    base, base_work = _copy_baseline(n * 4)
    return Problem(lambda: fn(a, b, out), _close(a_h + b_h, 0, 0), 3.0 * n * 4, (n,), base, base_work)


def _build_matmul(kernel_name: str) -> Callable[..., Problem]:
    def build(fn: Callable[..., Any], n: int, rng: np.random.Generator) -> Problem:
        side = _square(n)
        M, K, N = side, side + 3, side + 1  # not multiples of the tile size
        a_h = rng.standard_normal((M, K), dtype=np.float32)
        b_h = rng.standard_normal((K, N), dtype=np.float32)
        a, b = runtime.to_device(a_h), runtime.to_device(b_h)
        out = _xp().empty((M, N), dtype=np.float32)
        xp = runtime.array_module(a)
        # The reference is the library's product (cuBLAS on a GPU, FP32 with TF32 off; NumPy here):
        # a float64 product on the CPU would take longer than the whole benchmark at GPU sizes.
        expected = runtime.to_host(xp.matmul(a, b))
        flops = 2.0 * M * N * K
        return Problem(
            lambda: fn(a, b, out, kernel=kernel_name),
            _close(expected, rtol=1e-3, atol=1e-3 * math.sqrt(K)),
            flops,
            (M, K, N),
            lambda: xp.matmul(a, b, out=out),
            flops,
        )

    return build


def _matmul_kernel_names() -> list[str]:
    try:
        return list(importlib.import_module("gpulab.kernels.matmul").MATMUL_KERNELS)
    except (ImportError, AttributeError):
        return []


def cases() -> list[Case]:
    """Every benchmark case (matmul cases follow ``MATMUL_KERNELS`` as it is now)."""
    out = [
        Case("copy", "copy", "GB/s", "copy", _build_copy(1)),
        Case("copy_stride4", "copy", "GB/s", "copy", _build_copy(4)),
        Case("transpose_naive", "transpose", "GB/s", "transpose", _build_transpose("transpose_naive_kernel")),
        Case("transpose_tiled", "transpose", "GB/s", "transpose", _build_transpose("transpose_tiled_kernel")),
        Case("add", "elementwise", "GB/s", "add", _build_add, arrays=5),
        Case("sum_atomic", "reduce", "GB/s", "sum_atomic", _build_sum, ladder="atomic", arrays=3),
        Case("sum_tree", "reduce", "GB/s", "sum_tree", _build_sum, arrays=3),
        Case("sum_warp", "reduce", "GB/s", "sum_warp", _build_sum, arrays=3),
        Case("sum_reduce", "reduce", "GB/s", "sum_reduce", _build_sum, arrays=3),
        Case("softmax_rows", "reduce", "GB/s", "softmax_rows", _build_softmax),
    ]
    out += [
        Case(f"matmul_{k}", "matmul", "GFLOP/s", "matmul", _build_matmul(k), ladder="matmul")
        for k in _matmul_kernel_names()
    ]
    return out


CASES = cases  # the list is built on call: kernels written later are picked up
