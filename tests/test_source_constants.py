"""gpulab.source.standalone_source rebuilds a kernel's number and tuple constants with their types, so the PTX check
compiles what the learner's notebook defined (a tuple constant once cost half the points: "could not collect")."""

import math

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import ptx
from gpulab.source import _literal, standalone_source

SHAPE = (64, 1)
HALF = np.float32(0.5)
BIG = math.inf
STEPS = np.int32(3)
NESTED = ((1, 2), (3.5, -0.0))
ON = True


@cuda.jit
def uses_constants(x, out):
    buf = cuda.shared.array(SHAPE[0], float32)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    buf[t] = x[i] * HALF if i < x.size else 0
    cuda.syncthreads()
    acc = float32(0)
    for k in range(STEPS):
        acc += buf[(t + k) % SHAPE[0]] * NESTED[1][0]
    if i < x.size and ON:
        out[i] = min(acc, BIG)


@pytest.mark.parametrize(
    "value", [SHAPE, HALF, BIG, -math.inf, STEPS, NESTED, ON, (), (7,), np.float64(1e-300), np.bool_(True), 2**70]
)
def test_each_literal_makes_the_same_value_and_type(value):
    ns = {}
    exec(f"import numpy\nv = {_literal(value)}", ns)
    assert type(ns["v"]) is type(value) and repr(ns["v"]) == repr(value)


@pytest.mark.parametrize("value", [[1, 2], {"a": 1}, np.zeros(2), (1, "a"), "text", None])
def test_other_values_have_no_literal(value):
    assert _literal(value) is None


@pytest.mark.ptx
def test_a_kernel_with_tuple_and_numpy_constants_compiles():
    src = standalone_source(uses_constants)
    assert "SHAPE = (64, 1)" in src and "HALF = numpy.float32(0.5)" in src and "BIG = float('inf')" in src
    res = ptx.compile_sources(
        {"k": {"source": src, "name": "uses_constants", "signature": "void(float32[:], float32[:])"}}
    )
    assert res == {"k": "ok"}
