"""Tests run in simulator mode unless the environment says otherwise (make gpu-check sets gpu)."""

import os

os.environ.setdefault("GPULAB_DEVICE", "simulator")

import gpulab  # noqa: E402,F401  (fix the mode before any test imports numba)
