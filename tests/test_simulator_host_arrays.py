"""On the host, the simulator's device arrays offer what numba-cuda's offer on a GPU (gpulab.simulator.host_arrays).

Before, ``cuda.to_device(a).sum()``, ``.copy()`` and ``d * 2`` ran NumPy's on the CPU in simulator mode and failed
on a GPU (numba-cuda's DeviceNDArray has no NumPy methods and no arithmetic), and ``d == x`` compared elementwise
where a GPU compares identities.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import gpulab
from gpulab.simulator.host_arrays import DEVICE_ARRAY_NAMES, DeviceArrayAttributeError

pytestmark = pytest.mark.skipif(gpulab.is_gpu(), reason="the simulator's arrays (numba-cuda's own on a GPU)")

from numba import cuda  # noqa: E402  (after gpulab: it picks the mode)


@pytest.fixture
def d():
    return cuda.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))


@pytest.mark.parametrize("name", ["sum", "max", "copy", "astype", "fill", "tolist", "item", "get", "mean"])
def test_numpy_only_attributes_are_refused_with_what_to_do(d, name):
    with pytest.raises(DeviceArrayAttributeError) as err:
        getattr(d, name)
    text = str(err.value)
    assert f"no attribute {name!r} on a GPU" in text
    assert "copy_to_host()" in text
    assert not hasattr(d, name)  # an AttributeError: hasattr answers as on a GPU


@pytest.mark.parametrize("expr", ["d * 2", "2 + d", "d - d", "d / 3", "-d", "d @ d", "d ** 2"])
def test_arithmetic_is_refused_as_on_a_gpu(d, expr):
    with pytest.raises(TypeError, match="unsupported (unary )?operand type"):
        eval(expr)


def test_ordering_is_refused_and_equality_compares_identities(d):
    with pytest.raises(TypeError, match="'<' not supported"):
        d < 1  # noqa: B015
    other = cuda.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert (d == d) is True and (d == other) is False and (d != other) is True
    assert {d: 1}[d] == 1  # hashable, as numba-cuda's arrays


def test_what_a_device_array_has_still_works(d):
    assert (d.shape, d.size, d.ndim, d.dtype, d.strides) == ((2, 3), 6, 2, np.float32, (12, 4))
    assert d.copy_to_host().sum() == 15 and d[1].copy_to_host().tolist() == [3.0, 4.0, 5.0]
    assert d.reshape(3, 2).shape == (3, 2) and d.T.shape == (3, 2) and d.nbytes == 24
    assert np.asarray(d).sum() == 15  # numba-cuda's __array__ copies to the host


def test_squeeze_gives_a_device_array_view_as_on_a_gpu():
    """numba-cuda's squeeze returns a DeviceNDArray view; the simulator forwarded it to NumPy (a host array)."""
    d = cuda.to_device(np.arange(3, dtype=np.float32).reshape(1, 3, 1))
    s = d.squeeze()
    assert type(s) is type(d) and s.shape == (3,) and not hasattr(s, "sum")
    assert d.squeeze(axis=0).shape == (3, 1) and d.squeeze(axis=(0, 2)).shape == (3,)
    s[1] = 7  # a view: the original sees the write, as on a GPU
    assert d.copy_to_host().ravel().tolist() == [0.0, 7.0, 2.0]
    with pytest.raises(ValueError):
        d.squeeze(axis=1)  # an axis of size 3


def test_kernels_still_read_shapes_sizes_and_records():
    @cuda.jit
    def k(a, out):
        j, i = cuda.grid(2)
        if i < a.shape[0] and j < a.shape[1]:
            out[i, j] = a[i, j] * 2 + a.size + a.ndim

    d = cuda.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    out = cuda.device_array_like(d)
    k[(1, 1), (4, 4)](d, out)
    assert out.copy_to_host().tolist() == [[8.0, 10.0, 12.0], [14.0, 16.0, 18.0]]

    rec = np.zeros(3, dtype=[("x", np.float32), ("y", np.int32)])

    @cuda.jit
    def fields(r):
        i = cuda.grid(1)
        if i < r.shape[0]:
            r[i].x = 1.5
            r[i].y = i

    dr = cuda.to_device(rec)
    fields[1, 4](dr)
    host = dr.copy_to_host()
    assert host["x"].tolist() == [1.5] * 3 and host["y"].tolist() == [0, 1, 2]


def test_the_names_are_numba_cudas_device_array_names():
    """DEVICE_ARRAY_NAMES holds DeviceNDArray's public methods, properties and __init__ attributes, read from
    numba-cuda's real class (importable without a GPU when the simulator is off)."""
    code = (
        "import json, inspect\n"
        "from numba.cuda.cudadrv import devicearray as d\n"
        "names = {n for n in dir(d.DeviceNDArray) if not n.startswith('_')}\n"
        "src = inspect.getsource(d.DeviceNDArrayBase.__init__)\n"
        "names |= {n for n in ('shape', 'strides', 'dtype', 'size', 'ndim', 'gpu_data', 'stream', 'alloc_size')"
        " if f'self.{n} =' in src}\n"
        "print(json.dumps(sorted(names)))\n"
    )
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        pytest.skip(f"numba-cuda's device array class does not import here: {out.stderr.strip()[-200:]}")
    assert set(json.loads(out.stdout.strip().splitlines()[-1])) == set(DEVICE_ARRAY_NAMES)


def test_a_numpy_operand_gets_its_turn_as_on_a_gpu(d):
    """numba-cuda's DeviceNDArray has no operators and object's ==, so Python hands ``d - x``, ``d == x``,
    ``d < x`` to the NumPy operand's reflected method, which converts ``d`` with ``__array__`` (a copy to the host):
    on a GPU these give NumPy arrays (checked with the real class, only copy_to_host replaced)."""
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = np.ones((2, 3), dtype=np.float32)
    assert isinstance(d == x, np.ndarray) and (d == x).tolist() == (host == x).tolist()
    assert (d != x).tolist() == (host != x).tolist() and (d < x).tolist() == (host < x).tolist()
    assert (d - x).tolist() == (host - x).tolist() and (d * np.float32(2)).tolist() == (host * 2).tolist()
    assert (d >= x).tolist() == (host >= x).tolist() and (d @ x.T).tolist() == (host @ x.T).tolist()
    assert (d == 1) is False and (d != 1) is True  # nothing elementwise takes a Python scalar: identities
    e = d
    e += x  # no in-place operator on a GPU: Python rebinds e to x's sum, a NumPy array
    assert isinstance(e, np.ndarray) and e.tolist() == (host + x).tolist()
    for expr in ("d * 2", "d + d", "d + [1]", "d += 1"):
        with pytest.raises(TypeError, match="unsupported operand type"):
            exec(expr, {"d": d})
    with pytest.raises(TypeError, match="'<' not supported"):
        d < 1  # noqa: B015


def test_a_mapped_array_is_a_numpy_array_on_the_host_as_on_a_gpu():
    """cuda.mapped_array gives a MappedNDArray on a GPU: a NumPy array (np.ndarray subclass) in host memory that
    kernels also see, with every NumPy method and operator; the simulator gives its device array class."""
    m = cuda.mapped_array((2, 3), dtype=np.float32)
    m[:] = 1
    m.fill(2)
    assert m.sum() == 12 and (m * 2).sum() == 24 and (m == 2).all() and m[1:].max() == 2
    assert m.reshape(6).astype(np.float64).tolist() == [2.0] * 6 and m.copy_to_host().tolist() == [[2.0] * 3] * 2

    @cuda.jit
    def add_one(a):
        j, i = cuda.grid(2)
        if i < a.shape[0] and j < a.shape[1]:
            a[i, j] += 1

    add_one[(1, 1), (4, 4)](m)
    assert m.tolist() == [[3.0] * 3] * 2  # the kernel wrote the host's memory
    assert not hasattr(cuda.device_array(3), "sum")  # device arrays stay strict
    assert m[:1].squeeze().sum() == 9  # a mapped view keeps NumPy's methods
