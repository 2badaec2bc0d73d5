"""``python -m gpulab bench kernels|cnn``: measured throughput, never asserted in tests.

Each benchmark suite is a module here with ``main(argv) -> int``.
"""

from __future__ import annotations

import importlib
import sys

SUITES = {
    "kernels": ("gpulab.bench.kernels", "each reference kernel's GB/s or GFLOP/s, % of peak and of CuPy/cuBLAS"),
    "cnn": ("gpulab.bench.cnn", "CNN training throughput (images/s), optionally against PyTorch"),
    "lessons": ("gpulab.bench.lessons", "the GPU figures lessons 00, 06, 07 and 09 show from a recording"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m gpulab bench {kernels,cnn,lessons} [options]\n")
        for name, (_, help_) in SUITES.items():
            print(f"  {name:<8} {help_}")
        return 0
    if argv[0] not in SUITES:
        print(f"gpulab bench: unknown suite {argv[0]!r}; choose one of: {', '.join(SUITES)}.", file=sys.stderr)
        return 2
    return int(importlib.import_module(SUITES[argv[0]][0]).main(argv[1:]) or 0)
