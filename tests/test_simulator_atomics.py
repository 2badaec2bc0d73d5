"""gpulab.simulator: integer ``cuda.atomic.*`` wrap around silently, as on a GPU, where NumPy's scalars would warn
"overflow encountered" (a count added to the 0xBAADF00D filler of a shared or local array); floats still warn."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numba import cuda, float32, int32, uint32

INT32_FILLER = -1163005939  # 0xBAADF00D read as int32
BIG = 2_000_000_000


@cuda.jit
def _shared_counts(out):
    s = cuda.shared.array(1, int32)  # never zeroed: starts with the filler
    cuda.atomic.add(s, 0, BIG)
    cuda.atomic.add(s, 0, BIG)  # past int32's maximum: wraps
    cuda.syncthreads()  # wait for every thread's atomics before reading the count
    if cuda.threadIdx.x == 0:
        out[0] = s[0]


@cuda.jit
def _local_unsigned(out):
    u = cuda.local.array(2, uint32)
    u[0] = 0
    u[1] = 4_000_000_000
    cuda.atomic.sub(u, 0, 1)  # below 0: wraps to the maximum
    cuda.atomic.add(u, 1, 4_000_000_000)  # past the maximum: wraps
    cuda.atomic.inc(u, 1, 4_294_967_295)
    out[0], out[1] = u[0], u[1]


@cuda.jit
def _float_overflow(out):
    f = cuda.shared.array(1, float32)
    f[0] = 3e38
    cuda.atomic.add(f, 0, float32(3e38))  # float32 overflow to inf: still a warning
    out[0] = f[0]


def _wrapped(values: list[int], dtype: type) -> np.ndarray:
    return np.array(values, dtype=np.int64).astype(dtype)  # two's complement, as a GPU's integer unit


def test_integer_atomics_on_the_filler_wrap_without_a_warning():
    out = np.zeros(1, np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any RuntimeWarning fails the launch
        _shared_counts[1, 1](out)
    assert out[0] == _wrapped([INT32_FILLER + 2 * BIG], np.int32)[0]


def test_unsigned_local_atomics_wrap_without_a_warning():
    out = np.zeros(2, np.uint32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _local_unsigned[1, 1](out)
    expected = _wrapped([-1, 8_000_000_000 + 1], np.uint32)
    np.testing.assert_array_equal(out, expected)


def test_float_atomics_still_warn_on_overflow_and_the_setting_does_not_leak():
    out = np.zeros(1, np.float32)
    with pytest.warns(RuntimeWarning, match="overflow"):
        _float_overflow[1, 1](out)
    assert np.isinf(out[0])
    with pytest.warns(RuntimeWarning, match="overflow"):  # outside an atomic, integer overflow warns as before
        np.int32(2**31 - 1) + np.int32(1)
