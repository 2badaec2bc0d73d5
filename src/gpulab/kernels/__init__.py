"""Reference CUDA kernels of the course, one module per family, with host launchers.

Every module lists ``PTX_SIGNATURES``; :func:`all_ptx_signatures` gathers them for the PTX tier,
which compiles each kernel for real GPUs (the simulator alone is not proof that a kernel is CUDA).
"""

from __future__ import annotations

from types import ModuleType

from ..source import py_func
from . import elementwise
from ._launch import LaunchError, blocks_for, ceil_div, check_launch, conv_out_size
from .elementwise import add, add_grid_stride_kernel, add_kernel
from . import matmul as matmul_family
from .matmul import (
    MATMUL_KERNELS,
    matmul,
    matmul_naive_kernel,
    matmul_reference,
    matmul_regtiled_kernel,
    matmul_tiled_kernel,
)
from . import memory, reduce
from .elementwise import saxpy, saxpy_kernel, scale2d, scale2d_kernel
from .memory import copy, copy_kernel, strided_copy_kernel, transpose, transpose_naive_kernel, transpose_tiled_kernel
from .reduce import (
    count_above,
    count_above_kernel,
    max_tree,
    max_tree_kernel,
    softmax_rows,
    softmax_rows_kernel,
    sum_atomic,
    sum_atomic_kernel,
    sum_reduce,
    sum_tree,
    sum_tree_kernel,
    sum_warp,
    sum_warp_kernel,
)

from . import nn_ops  # noqa: E402  (the CNN engine's kernels: im2col, pooling, ReLU, softmax-xent)
from . import conv  # noqa: E402  (direct convolution, lesson 07)

from . import scan  # noqa: E402  (prefix sums, lesson 05)
from . import histogram as histogram_family  # noqa: E402  (histograms: atomics under contention, lesson 05)
from . import splitk  # noqa: E402  (split-K matmul: the kernels backend's GEMM for a small C and a long K)
from .histogram import histogram, histogram_global_kernel, histogram_shared_kernel  # noqa: E402

FAMILIES: tuple[ModuleType, ...] = (
    elementwise,
    memory,
    reduce,
    matmul_family,
    nn_ops,
    conv,
    scan,
    histogram_family,
    splitk,
)

__all__ = [
    "FAMILIES",
    "MATMUL_KERNELS",
    "LaunchError",
    "add",
    "add_grid_stride_kernel",
    "add_kernel",
    "all_ptx_signatures",
    "blocks_for",
    "ceil_div",
    "check_launch",
    "conv_out_size",
    "copy",
    "copy_kernel",
    "count_above",
    "count_above_kernel",
    "histogram",
    "histogram_family",
    "histogram_global_kernel",
    "histogram_shared_kernel",
    "matmul",
    "matmul_family",
    "matmul_naive_kernel",
    "matmul_reference",
    "max_tree",
    "max_tree_kernel",
    "matmul_regtiled_kernel",
    "matmul_tiled_kernel",
    "memory",
    "reduce",
    "saxpy",
    "saxpy_kernel",
    "scan",
    "scale2d",
    "scale2d_kernel",
    "softmax_rows",
    "softmax_rows_kernel",
    "strided_copy_kernel",
    "splitk",
    "sum_atomic",
    "sum_atomic_kernel",
    "sum_reduce",
    "sum_tree",
    "sum_tree_kernel",
    "sum_warp",
    "sum_warp_kernel",
    "transpose",
    "transpose_naive_kernel",
    "transpose_tiled_kernel",
]


def all_ptx_signatures() -> list[tuple[str, object, str]]:
    """``(qualified name, kernel, signature)`` for every kernel in every family."""
    out = []
    for mod in FAMILIES:
        for kernel, sig in mod.PTX_SIGNATURES:
            name = getattr(kernel, "__name__", None) or getattr(py_func(kernel), "__name__", "?")
            out.append((f"{mod.__name__.rsplit('.', 1)[-1]}.{name}", kernel, sig))
    return out
