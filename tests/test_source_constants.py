"""gpulab.source.standalone_source rebuilds a kernel's number and tuple constants with their types, so the PTX check
compiles what the learner's notebook defined (a tuple constant once cost half the points: "could not collect")."""

import enum
import math
from math import exp

import numba
import numpy as np
import pytest
from numba import cuda, float32

from gpulab import ptx
from gpulab.exercises.ptxcheck import ptx_check
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


f32 = numba.float32  # a numba type under another name
DT = np.float32  # a NumPy scalar type
TABLE = np.array([0.5, 1.5, 2.5], dtype=np.float32)  # a small table the kernel reads


class Op(enum.IntEnum):
    SCALE = 2


FACTORS = [1.0, 2.0]  # a list: no GPU kernel can read it


@cuda.jit
def uses_imports(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = exp(x[i]) * f32(TABLE[i % 3]) + DT(1)


def make_scaler(scale, shift):
    @cuda.jit
    def scaled(x, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = x[i] * scale + shift[1]

    return scaled


@cuda.jit
def uses_enum(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * Op.SCALE


@cuda.jit
def uses_list(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] * FACTORS[1]


@pytest.mark.parametrize(
    "value", [SHAPE, HALF, BIG, -math.inf, STEPS, NESTED, ON, (), (7,), np.float64(1e-300), np.bool_(True), 2**70]
)
def test_each_literal_makes_the_same_value_and_type(value):
    ns = {}
    exec(f"import numpy\nv = {_literal(value)}", ns)
    assert type(ns["v"]) is type(value) and repr(ns["v"]) == repr(value)


@pytest.mark.parametrize(
    "value", [[1, 2], {"a": 1}, np.zeros(5000), (1, "a"), "text", None, Op.SCALE, np.longdouble(1.5), np.zeros(2, "U1")]
)
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


@pytest.mark.ptx
def test_imports_under_other_names_numpy_types_tables_and_a_factorys_numbers_compile():
    scaled = make_scaler(np.float32(3), (0.5, 1.5))
    sources = {"imports": standalone_source(uses_imports), "factory": standalone_source(scaled)}
    assert "from math import exp" in sources["imports"] and "from numba import float32 as f32" in sources["imports"]
    assert "DT = numpy.float32" in sources["imports"] and "TABLE = numpy.array([0.5, 1.5, 2.5]" in sources["imports"]
    assert "scale = numpy.float32(3.0)" in sources["factory"] and "shift = (0.5, 1.5)" in sources["factory"]
    sig = "void(float32[:], float32[:])"
    names = {"imports": "uses_imports", "factory": "scaled"}
    items = {k: {"source": src, "name": names[k], "signature": sig} for k, src in sources.items()}
    assert ptx.compile_sources(items) == {"imports": "ok", "factory": "ok"}


def test_what_the_check_cannot_rebuild_is_not_checked_and_a_list_is_refused():
    sig = "void(float32[:], float32[:])"
    enum_check = ptx_check(uses_enum, sig)  # numba compiles it; the check cannot rebuild an IntEnum: no penalty
    assert enum_check.passed and enum_check.message.startswith("not checked: the kernel's source could not be rebuilt")
    list_check = ptx_check(uses_list, sig)
    assert not list_check.passed
    assert (
        "the global 'FACTORS', a list" in list_check.message and "a GPU kernel cannot use a list" in list_check.message
    )
    assert "FACTORS = (1.0, 2.0, 3.0)" in list_check.hint


def test_rebuilding_a_source_imports_nothing():
    """labs grade calls a module replaced during a check tampering: `import numba.types` rebinds numba.types, which
    once cost lab 01's blur its 3 points there."""
    import sys

    scaled = make_scaler(np.float32(3), (0.5, 1.5))
    before = {name: id(mod) for name, mod in sys.modules.items()}
    for kernel in (uses_imports, scaled, uses_constants):
        standalone_source(kernel)
    assert {name: id(mod) for name, mod in sys.modules.items()} == before
