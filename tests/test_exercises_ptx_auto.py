"""``ptx="auto"``: a lab exercise compiles the learner's kernel for the types of its first case's arguments, so a
kernel the simulator runs but no GPU compiles loses half its points in every lab, not only where a signature was
written by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import cuda, float32

from gpulab import problems
from gpulab.exercises.ptxcheck import signature_for


def test_the_signature_is_numbas_types_of_the_arguments():
    args = (np.zeros(3, np.float32), np.zeros((2, 3), np.float32)[:, ::2], 1.5, np.float32(2), 3, np.zeros(2, bool))
    assert signature_for(args) == "void(float32[:], float32[:, :], float64, float32, int64, bool[:])"
    assert signature_for((np.zeros(2, dtype=[("s0", "u8")]),)) is None  # a record array: named by hand
    assert signature_for(((1, 2),)) is None


@cuda.jit
def conv1d_fsum(x, w, out):  # right, but numba-cuda has no math.fsum: only the simulator (Python) runs it
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        acc = float32(0.0)
        for k in range(w.shape[0]):
            acc = math.fsum((acc, x[i + k] * w[k]))
        out[i] = acc


@cuda.jit
def conv1d_good(x, w, out):
    for i in range(cuda.grid(1), out.size, cuda.gridsize(1)):
        acc = float32(0.0)
        for k in range(w.shape[0]):
            acc += x[i + k] * w[k]
        out[i] = acc


@pytest.mark.ptx
def test_a_kernel_no_gpu_compiles_loses_half_in_lab07_too():
    assert problems.lab07.CONV1D.ptx == "auto"
    bad = problems.lab07.CONV1D.check(conv1d_fsum)
    assert bad.status == "failed" and bad.score == bad.max_score / 2, bad
    assert "NVVM rejected the kernel (void(float32[:], float32[:], float32[:]))" in bad.message, bad.message
    good = problems.lab07.CONV1D.check(conv1d_good)
    assert good.passed, good
    ptx = next(c for c in good.checks if c.name == "PTX")
    assert ptx.message.startswith("compiles to PTX as void(float32[:], float32[:], float32[:]) for sm_75 ("), ptx
