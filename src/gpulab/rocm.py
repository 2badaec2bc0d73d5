"""CUDA and ROCm side by side (lesson 11): what carries over to AMD GPUs and what does not.

HIP, ROCm's C++ dialect, mirrors the CUDA runtime API name for name (``cudaMalloc`` -> ``hipMalloc``), and
device code (``__global__``, ``threadIdx``, ``__syncthreads``) is spelled the same. AMD's ``hipify-perl``
translates CUDA sources by exactly such renames; :func:`hipify` applies the few renames this course's
code needs, so the two versions can be read next to each other.
"""

from __future__ import annotations

import html
import re

__all__ = ["CARRIES_OVER", "RELU_HOST_CUDA", "hipify", "side_by_side"]

# Renames in the order applied (longer names first). A subset of hipify-perl's table.
HIPIFY: list[tuple[str, str]] = [
    ("#include <cuda_runtime.h>", "#include <hip/hip_runtime.h>"),
    ("cudaMemcpyHostToDevice", "hipMemcpyHostToDevice"),
    ("cudaMemcpyDeviceToHost", "hipMemcpyDeviceToHost"),
    ("cudaDeviceSynchronize", "hipDeviceSynchronize"),
    ("cudaGetErrorString", "hipGetErrorString"),
    ("cudaGetLastError", "hipGetLastError"),
    ("cudaSuccess", "hipSuccess"),
    ("cudaError_t", "hipError_t"),
    ("cudaMemcpy", "hipMemcpy"),
    ("cudaMalloc", "hipMalloc"),
    ("cudaFree", "hipFree"),
]

RELU_HOST_CUDA = r"""#include <cuda_runtime.h>
#include <cstdio>

extern "C" __global__
void relu_forward(const float* x, float* y, const int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
    }
}

int main()
{
    const int n = 1 << 20;
    float *x, *y;
    cudaMalloc(&x, n * sizeof(float));
    cudaMalloc(&y, n * sizeof(float));
    // ... cudaMemcpy the input from the host ...
    relu_forward<<<(n + 255) / 256, 256>>>(x, y, n);
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) printf("%s\n", cudaGetErrorString(err));
    cudaFree(x);
    cudaFree(y);
    return 0;
}
"""

CARRIES_OVER: list[tuple[str, str, str]] = [
    (
        "CuPy arrays, ElementwiseKernel, RawKernel",
        "carries over",
        "CuPy has ROCm builds (cupy-rocm-*); a RawKernel's "
        "CUDA C source compiles with hipRTC, because HIP device code is spelled the same",
    ),
    (
        "CUDA C / C++ programs",
        "carries over, translated",
        "hipify-perl / hipify-clang rename the runtime API; hipcc compiles the result for AMD (and NVIDIA) GPUs",
    ),
    ("cuBLAS, cuDNN, NCCL", "counterparts", "hipBLAS / rocBLAS, MIOpen, RCCL, with near-identical calls"),
    ("PyTorch, JAX", "carries over", "ROCm builds of both; torch.cuda.* names work on AMD GPUs"),
    (
        "Numba's CUDA target (@cuda.jit, this course's kernels)",
        "does not carry over",
        "numba-cuda generates NVVM "
        "IR for NVIDIA's PTX; Numba's old ROCm target was removed years ago (AMD's experimental numba-hip "
        "is a separate project)",
    ),
    ("Warp-level code that assumes 32 lanes", "needs care", "AMD data-center GPUs (CDNA) run 64-wide wavefronts"),
]


def hipify(source: str) -> str:
    """The HIP form of a CUDA C source: the runtime API renamed, device code unchanged."""
    out = source
    for cuda, hip in HIPIFY:
        out = re.sub(rf"\b{re.escape(cuda)}\b" if cuda[0].isalpha() else re.escape(cuda), hip, out)
    return out


def side_by_side(cuda: str, hip: str | None = None) -> str:
    """HTML: the CUDA source and its HIP form in two columns, lines that differ highlighted."""
    hip = hipify(cuda) if hip is None else hip
    a, b = cuda.splitlines(), hip.splitlines()
    rows = []
    for k in range(max(len(a), len(b))):
        left, right = (a[k] if k < len(a) else ""), (b[k] if k < len(b) else "")
        style = ' style="background:#fff3c4"' if left != right else ""
        rows.append(
            f"<tr{style}><td><pre style='margin:0'>{html.escape(left)}</pre></td>"
            f"<td><pre style='margin:0'>{html.escape(right)}</pre></td></tr>"
        )
    return (
        "<table style='font-size:11px'><tr><th>CUDA</th><th>HIP (ROCm), by renaming</th></tr>"
        + "".join(rows)
        + "</table>"
    )
