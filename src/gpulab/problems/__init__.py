"""The labs' exercises as data: one :class:`gpulab.exercises.Problem` per graded kernel.

A lab's test cell is one line, ``problems.lab03.MATMUL.check(matmul_kernel)``, and the tests and
graders import the same definitions. Each Problem states the inputs it tries in simulator mode
(``sizes``) and in gpu mode (``gpu_sizes``); ``problem.check(host=emulation, scale="gpu")`` runs the
gpu-mode sizes with a NumPy stand-in for the kernel (``tests/test_gpu_sizes.py``).

Conventions (the course's): x is the fastest thread index and walks the last, contiguous axis, so
2-D kernels use ``j, i = cuda.grid(2)`` with ``i`` the row and are launched with grids
``(ceil(cols / bx), ceil(rows / by))``; matmul, convolution and gradient checks compare with a
float64 reference within the float32 rounding bound of their sums (``reduction=``); 2-D kernels
carry a coalescing budget (32-byte sectors per warp access, at most twice the ideal).
"""

from . import lab01, lab02, lab03, lab04, lab05, lab06, lab07, lab08, lab10, lab12
from ._common import LABS, all_problems, grid_2d, launch_1d, launch_2d, pad_to_blocks

__all__ = [
    "LABS",
    "all_problems",
    "grid_2d",
    "launch_1d",
    "launch_2d",
    "pad_to_blocks",
    "lab01",
    "lab02",
    "lab03",
    "lab04",
    "lab05",
    "lab06",
    "lab07",
    "lab08",
    "lab10",
    "lab12",
]
