"""The CNN engine's course kernels compute in float32, as their arrays (review 2, finding 8): learners copy them,
and the course's own float64-accumulator note (gpulab.exercises.precision) would flag ``acc = 0.0`` in a learner's
answer. Checked in the source (the note) and in the PTX NVVM makes for sm_75 (no ``.f64`` instruction)."""

from __future__ import annotations

import re

import pytest

from gpulab import ptx
from gpulab.exercises.precision import float64_literal_accumulators
from gpulab.kernels import nn_kernels
from gpulab.source import py_func

KERNELS = {py_func(k).__name__: (k, sig) for k, sig in nn_kernels.PTX_SIGNATURES}
# numba-cuda's xoroshiro128p_uniform_float32 converts its 64-bit draw through float64: library code, not the course's
LIBRARY_F64 = {"dropout_kernel": re.compile(r"(cvt\.rn\.f64\.u64|mul\.f64|cvt\.rn\.f32\.f64|\.reg \.f64)\s")}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_no_course_kernel_earns_the_float64_accumulator_note(name):
    assert float64_literal_accumulators(KERNELS[name][0]) == []


@pytest.mark.ptx
def test_the_compiled_course_kernels_have_no_float64_arithmetic():
    """Before: adam 51 lines with .f64, softmax_xent 112, col2im 24, maxpool_backward 20, im2col 19, gemm, relu and
    sum_rows 18 each, relu_backward 16 (sm_75 and sm_90 alike); after: none but dropout's library conversion."""
    texts = ptx.kernels_ptx(KERNELS.values(), cc=(7, 5))
    for name, text in texts.items():
        f64 = [ln.strip() for ln in text.splitlines() if ".f64" in ln]
        allowed = LIBRARY_F64.get(name)
        left = [ln for ln in f64 if not (allowed and allowed.match(ln))]
        assert not left, f"{name}: {len(left)} float64 lines in its PTX, e.g. {left[:3]}"
    assert [ln for ln in texts["dropout_kernel"].splitlines() if "mul.f64" in ln]  # the exception is still needed
