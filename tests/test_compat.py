"""NumPy 2.5 removed ``np.row_stack``; numba-cuda (up to 0.30.4) registers a CUDA overload for it and failed to
compile any kernel. ``gpulab.compat`` gives the alias back. NumPy 2.5 needs Python 3.12, so here (any Python)
its absence is simulated by deleting the alias before numba-cuda loads."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

from gpulab.compat import keep_numba_cuda_compiling


def test_the_alias_is_added_only_where_numpy_lacks_it():
    old = types.SimpleNamespace(vstack=np.vstack, row_stack="numpy's own")
    assert keep_numba_cuda_compiling(old) is False and old.row_stack == "numpy's own"
    new = types.SimpleNamespace(vstack=np.vstack)  # NumPy 2.5
    assert keep_numba_cuda_compiling(new) is True and new.row_stack is np.vstack


_COMPILE = textwrap.dedent(
    """
    import numpy
    if hasattr(numpy, "row_stack"):
        del numpy.row_stack  # as NumPy 2.5
    {first}
    from numba import cuda

    def add(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    try:
        ptx, _ = cuda.compile_ptx(add, "void(float32[:], float32[:], float32[:])", cc=(7, 5))
        print("compiled" if ".entry" in ptx else "no entry")
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}")
    """
)


@pytest.mark.parametrize("first, expected", [("import gpulab", "compiled"), ("", "has no attribute 'row_stack'")])
def test_a_kernel_compiles_to_ptx_without_numpys_row_stack(first, expected):
    """With gpulab imported first the kernel compiles; without it numba-cuda fails as it did on NumPy 2.5 (the
    second case shows the test has teeth; if a future numba-cuda guards the overload, it compiles there too)."""
    env = {**os.environ, "GPULAB_DEVICE": "gpu", "GPULAB_COMPILE_ONLY": "1", "NUMBA_ENABLE_CUDASIM": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE.replace("{first}", first)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    out = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and out, proc.stderr[-2000:]
    if first or out[-1] != "compiled":
        assert expected in out[-1], out[-1]
