"""CuPy and Numba together: ElementwiseKernel, RawKernel, ``__cuda_array_interface__`` and cuBLAS precisions.

Lesson 06 uses this module. Everything that needs CuPy calls :func:`require_cupy`, which explains
what to do when CuPy is absent (always, in simulator mode). What does not need a GPU works everywhere:

* the NumPy references of the CuPy kernels (:func:`squared_diff_reference`, :func:`relu_reference`);
* :func:`array_interface` / :func:`data_pointer`, which read ``__cuda_array_interface__`` on the GPU and
  its host twin ``__array_interface__`` in the simulator (same keys: shape, typestr, data, strides);
* :func:`emulate_matmul`, a NumPy model of what FP32, TF32 and FP16 tensor-core matmuls do to the
  numbers (TF32 keeps 10 mantissa bits of each input, FP16 stores inputs and output in half
  precision; both accumulate in FP32), so the accuracy side of the trade can be seen without a GPU.
"""

from __future__ import annotations

import contextlib
from typing import Any
from collections.abc import Iterator

import numpy as np

from . import runtime

__all__ = [
    "PRECISIONS",
    "RELU_RAW_SOURCE",
    "SQUARED_DIFF_SPEC",
    "array_interface",
    "cublas_compute_type",
    "data_pointer",
    "emulate_matmul",
    "make_relu_raw_kernel",
    "make_squared_diff_kernel",
    "matmul_precision",
    "nccl_status",
    "precision_benchmark",
    "precision_errors",
    "relu_raw",
    "relu_reference",
    "require_cupy",
    "require_nccl",
    "round_to_tf32",
    "squared_diff_reference",
    "tf32_supported",
]

PRECISIONS = ("fp32", "tf32", "fp16")

# ---------------------------------------------------------------------------------------------
# CuPy availability
# ---------------------------------------------------------------------------------------------


def require_cupy() -> Any:
    """Return the ``cupy`` module, or raise a ModuleNotFoundError that says what to do."""
    if not runtime.is_gpu():
        raise ModuleNotFoundError(
            "This needs CuPy on a CUDA GPU, but gpulab is in simulator mode (no GPU here). The "
            "notebook shows the code and runs the NumPy equivalent instead; run it on a GPU machine "
            "(or Colab with a T4 runtime) to execute the CuPy version."
        )
    try:
        import cupy
    except ImportError as exc:
        raise ModuleNotFoundError(
            f"CuPy is not installed ({exc}). Install the wheel matching your CUDA version: "
            "`pip install cupy-cuda12x` for CUDA 12 or `pip install cupy-cuda13x` for CUDA 13 (in a clone of "
            "gpulab: `pip install -e '.[gpu-cu12]'`, which adds the CUDA wheels; Colab already has CuPy)."
        ) from None
    return cupy


def _cuda_major() -> int:
    """12 or 13: the CUDA major version CuPy was built for (12 when it cannot tell)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.runtimeGetVersion()) // 1000
    except Exception:  # noqa: BLE001 - only used to name the right wheel in a message
        return 12


def nccl_status() -> tuple[bool, str]:
    """Whether CuPy can use NCCL (multi-GPU collectives), and a sentence that says so truthfully.

    CuPy's wheels do not include NCCL: it comes from the ``nvidia-nccl-cu12`` / ``nvidia-nccl-cu13``
    wheel (the ``gpu-cu12`` / ``gpu-cu13`` extras install it), which CuPy finds at import. Lesson 10
    calls this before its multi-GPU cell. Never raises.
    """
    if not runtime.is_gpu():
        return False, "NCCL needs CUDA GPUs; in simulator mode the all-reduce is simulated with NumPy."
    try:
        from cupy.cuda import nccl
    except ImportError as exc:
        return False, f"CuPy is not installed, so NCCL cannot be used ({exc})."
    if getattr(nccl, "available", False):
        return True, "NCCL is available to CuPy."
    major = _cuda_major()
    return False, (
        f"CuPy found no NCCL library: CuPy's wheels do not include NCCL. Install it with "
        f"`pip install nvidia-nccl-cu{major}` (in a clone of gpulab: `pip install -e '.[gpu-cu{major}]'`), then "
        "restart the kernel. One GPU needs no NCCL; the single-GPU parts of this lesson run without it."
    )


def require_nccl() -> Any:
    """``cupy.cuda.nccl``, or a RuntimeError with :func:`nccl_status`'s true message."""
    ok, message = nccl_status()
    if not ok:
        raise RuntimeError(message)
    from cupy.cuda import nccl

    return nccl


# ---------------------------------------------------------------------------------------------
# ElementwiseKernel: write only the per-element body, CuPy writes the loop and the indexing
# ---------------------------------------------------------------------------------------------

SQUARED_DIFF_SPEC = {
    "in_params": "float32 x, float32 y",
    "out_params": "float32 z",
    "operation": "z = (x - y) * (x - y)",
    "name": "squared_diff",
}


def squared_diff_reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """NumPy reference of the ElementwiseKernel: ``(x - y) ** 2`` element by element."""
    d = np.asarray(x, dtype=np.float32) - np.asarray(y, dtype=np.float32)
    return d * d


def make_squared_diff_kernel() -> Any:
    """Build ``cupy.ElementwiseKernel(**SQUARED_DIFF_SPEC)`` (compiled by CuPy on first call)."""
    cupy = require_cupy()
    return cupy.ElementwiseKernel(
        SQUARED_DIFF_SPEC["in_params"],
        SQUARED_DIFF_SPEC["out_params"],
        SQUARED_DIFF_SPEC["operation"],
        SQUARED_DIFF_SPEC["name"],
    )


# ---------------------------------------------------------------------------------------------
# RawKernel: a whole CUDA C kernel, compiled by NVRTC, launched with an explicit grid
# ---------------------------------------------------------------------------------------------

RELU_RAW_SOURCE = r"""
extern "C" __global__
void relu_forward(const float* x, float* y, const int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;   // same index as cuda.grid(1) in Numba
    if (i < n) {                                      // bounds guard for the last block
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    }
}
"""


def relu_reference(x: np.ndarray) -> np.ndarray:
    """NumPy reference of the RawKernel: ``max(x, 0)``."""
    return np.maximum(np.asarray(x, dtype=np.float32), np.float32(0))


def make_relu_raw_kernel() -> Any:
    """Compile :data:`RELU_RAW_SOURCE` with ``cupy.RawKernel`` (NVRTC, cached by CuPy)."""
    cupy = require_cupy()
    return cupy.RawKernel(RELU_RAW_SOURCE, "relu_forward")


def relu_raw(x: Any, *, threads_per_block: int = 256) -> Any:
    """Launch the RawKernel ReLU on a contiguous float32 CuPy array; returns a new array."""
    from .kernels._launch import blocks_for, check_array, check_launch

    cupy = require_cupy()
    check_array("x", x, dtype="float32")
    x = cupy.ascontiguousarray(x)
    y = cupy.empty_like(x)
    n = int(x.size)
    if n == 0:
        return y
    blocks = blocks_for(n, threads_per_block)
    check_launch(blocks, threads_per_block)
    make_relu_raw_kernel()((blocks,), (threads_per_block,), (x, y, np.int32(n)))
    return y


# ---------------------------------------------------------------------------------------------
# __cuda_array_interface__: how Numba, CuPy, PyTorch... share one buffer without copying
# ---------------------------------------------------------------------------------------------


def array_interface(a: Any) -> dict[str, Any]:
    """The array-interface dict of ``a``: ``__cuda_array_interface__`` for device arrays (CuPy, Numba
    on a GPU), ``__array_interface__`` for host arrays (NumPy, and the simulator's device arrays,
    which wrap NumPy). Both hold ``shape``, ``typestr``, ``data`` = (pointer, read_only), ``version``.
    """
    if hasattr(a, "__cuda_array_interface__"):
        return dict(a.__cuda_array_interface__)
    host = getattr(a, "_ary", a)  # the simulator's FakeCUDAArray wraps a NumPy array
    if hasattr(host, "__array_interface__"):
        return dict(host.__array_interface__)
    raise TypeError(
        f"{type(a).__name__} exposes neither __cuda_array_interface__ nor __array_interface__, so no "
        "library can share its memory. Pass a NumPy, CuPy or Numba device array."
    )


def data_pointer(a: Any) -> int:
    """The address of ``a``'s first element (device address on a GPU, host address otherwise)."""
    return int(array_interface(a)["data"][0])


# ---------------------------------------------------------------------------------------------
# FP32, TF32 and FP16 matrix multiplication
# ---------------------------------------------------------------------------------------------


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}.")


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """Round float32 values to TF32 (8-bit exponent, 10-bit mantissa), round to nearest, ties to even
    (IEEE's default rounding); the result is stored back as float32.

    CUDA's own conversion (``cvt.rna.tf32.f32``, ``__float_to_tf32``) rounds ties away from zero instead,
    and a tensor core given raw float32 bits ignores the low 13 (truncation): the first differs from this
    only on exact ties, the second by at most one unit in the last kept bit.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    lsb = (bits >> np.uint32(13)) & np.uint32(1)  # lowest mantissa bit TF32 keeps
    rounded = (bits + np.uint32(0x0FFF) + lsb) & np.uint32(0xFFFFE000)
    out = np.where(np.isfinite(x), rounded, bits).astype(np.uint32)
    return out.view(np.float32)


def emulate_matmul(a: np.ndarray, b: np.ndarray, precision: str) -> np.ndarray:
    """What cuBLAS computes for ``a @ b`` in each precision, modelled with NumPy on the CPU.

    fp32: float32 inputs, float32 accumulation.  tf32: inputs rounded to TF32, float32 accumulation.
    fp16: inputs and output in float16, float32 accumulation (tensor cores' FP16 mode).
    """
    _check_precision(precision)
    a32, b32 = np.asarray(a, dtype=np.float32), np.asarray(b, dtype=np.float32)
    if precision == "fp32":
        return a32 @ b32
    if precision == "tf32":
        return round_to_tf32(a32) @ round_to_tf32(b32)
    a16, b16 = a32.astype(np.float16).astype(np.float32), b32.astype(np.float16).astype(np.float32)
    return (a16 @ b16).astype(np.float16)


@contextlib.contextmanager
def cublas_compute_type(precision: str) -> Iterator[None]:
    """Within the block, CuPy's float32 matmuls use TF32 tensor cores (``"tf32"``) or plain FP32
    (``"fp32"``); the previous setting is restored afterwards. ``"fp16"`` changes nothing: the dtype
    of the arrays (float16) already selects the FP16 tensor-core path.
    """
    _check_precision(precision)
    require_cupy()
    linalg = _linalg()
    before = linalg.get_compute_type(np.float32)
    wanted = {"tf32": linalg.COMPUTE_TYPE_TF32, "fp32": linalg.COMPUTE_TYPE_DEFAULT}.get(precision, before)
    if precision == "tf32" and not tf32_supported():
        # A GPU before Ampere (a T4 is 7.5) has no TF32: cuBLAS runs FP32 either way, and asking for TF32
        # would only make CuPy print a UserWarning into the lesson. tf32_supported() says so instead.
        wanted = linalg.COMPUTE_TYPE_DEFAULT
    linalg.set_compute_type(np.float32, wanted)
    try:
        yield
    finally:
        linalg.set_compute_type(np.float32, before)


def _linalg() -> Any:
    """CuPy's cuBLAS settings module (tests replace it)."""
    from cupy._core import _routines_linalg

    return _routines_linalg


def tf32_supported() -> bool:
    """Whether TF32 requests really use TF32 tensor cores: compute capability 8.0 (Ampere) or newer.

    On older GPUs (a T4 is 7.5) cuBLAS runs them in plain FP32, so "tf32" results equal "fp32" ones.
    In simulator mode :func:`emulate_matmul` models TF32 rounding, so this is True.
    """
    if not runtime.is_gpu():
        return True
    from numba import cuda

    return cuda.get_current_device().compute_capability >= (8, 0)


def matmul_precision(a: Any, b: Any, precision: str) -> Any:
    """``a @ b`` in the given precision: on the GPU through cuBLAS (CuPy), in the simulator through
    :func:`emulate_matmul`. Inputs are float32; the fp16 result is float16."""
    _check_precision(precision)
    if not runtime.is_gpu():
        return emulate_matmul(runtime.to_host(a), runtime.to_host(b), precision)
    cupy = require_cupy()
    a, b = cupy.asarray(a, dtype=cupy.float32), cupy.asarray(b, dtype=cupy.float32)
    if precision == "fp16":
        return a.astype(cupy.float16) @ b.astype(cupy.float16)
    with cublas_compute_type(precision):
        return a @ b


def precision_errors(n: int, *, seed: int = 0) -> dict[str, float]:
    """Relative error (max |C - C_ref| / max |C_ref|) of an n x n matmul in each precision against a
    float64 reference, with inputs uniform in [-1, 1]. Real cuBLAS in gpu mode, NumPy model otherwise."""
    from .kernels._launch import count

    n = count("n", n, example="n is the matrix size, e.g. precision_errors(256).")
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = float(np.abs(ref).max())
    a_d, b_d = runtime.to_device(a), runtime.to_device(b)
    out = {}
    for p in PRECISIONS:
        c = runtime.to_host(matmul_precision(a_d, b_d, p)).astype(np.float64)
        out[p] = float(np.abs(c - ref).max() / scale)
    return out


def precision_benchmark(n: int, *, repeat: int = 5) -> list[dict[str, Any]]:
    """Time an n x n x n matmul in FP32, TF32 and FP16 on the GPU (CuPy/cuBLAS, CUDA events).

    Returns one row per precision: ``precision, n, seconds, tflops, rel_error``. GPU only: in
    simulator mode a timing would say nothing about tensor cores, so this raises instead.
    """
    cupy = require_cupy()
    from .timing import benchmark

    errors = precision_errors(min(n, 1024))
    cupy.random.seed(0)
    a = cupy.random.random_sample((n, n), dtype=cupy.float32) * 2 - 1
    b = cupy.random.random_sample((n, n), dtype=cupy.float32) * 2 - 1
    inputs = {"fp32": (a, b), "tf32": (a, b), "fp16": (a.astype(cupy.float16), b.astype(cupy.float16))}
    rows = []
    for p in PRECISIONS:
        x, y = inputs[p]
        if p == "fp16":
            res = benchmark(cupy.matmul, x, y, warmup=2, repeat=repeat, label=f"matmul {p} n={n}")
        else:
            with cublas_compute_type(p):
                res = benchmark(cupy.matmul, x, y, warmup=2, repeat=repeat, label=f"matmul {p} n={n}")
        rows.append(
            {
                "precision": p,
                "n": n,
                "seconds": res.median,
                "tflops": 2.0 * n**3 / res.median / 1e12,
                "rel_error": errors[p],
            }
        )
    return rows
