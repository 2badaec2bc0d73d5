"""``python -m gpulab doctor``: what is installed, which mode gpulab picked and why, what the GPU is,
and known fixes for the usual breakages."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import platform
import sys

from . import runtime

__all__ = ["main", "report"]

FIXES = [
    ("No module named 'numba.cuda' / numba's built-in CUDA target is deprecated",
     "pip install 'numba-cuda[cu12]' (or [cu13] for a CUDA 13 driver); gpulab needs the numba-cuda package."),
    ("NVIDIA CUDA Python bindings not found",
     "pip install 'numba-cuda[cu12]': the [cu12]/[cu13] extra brings cuda-bindings, NVVM and NVRTC."),
    ("CUDA_ERROR_UNSUPPORTED_PTX_VERSION / 'provided PTX was compiled with an unsupported toolchain'",
     "the NVVM that compiled the kernel is newer than the driver: install the numba-cuda extra that "
     "matches `nvidia-smi`'s CUDA version ([cu12] for 12.x drivers), or update the driver. On Colab, "
     "do not upgrade numba-cuda or the nvidia-* wheels: use the versions Colab ships."),
    ("CUDA driver version is insufficient for CUDA runtime version",
     "the driver is older than the toolkit wheels: install cupy-cuda12x / numba-cuda[cu12] for a 12.x "
     "driver, or update the NVIDIA driver."),
    ("mode: simulator on a machine with a GPU",
     "`nvidia-smi` must work in the same environment (container: run with --gpus all); on Colab pick "
     "Runtime > Change runtime type > T4 GPU, then restart the session."),
    ("'gpulab cannot switch mode' after changing GPULAB_DEVICE",
     "restart the kernel: numba fixes its CUDA target at first import."),
]


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def _numba_cuda_origin() -> str:
    try:
        from numba import cuda
    except Exception as exc:  # pragma: no cover - printed for the learner
        return f"cannot import numba.cuda: {exc}"
    path = getattr(cuda, "__file__", "") or ""
    return "numba-cuda package" if "numba_cuda" in path else f"numba's built-in (deprecated): {path}"


def _gpu_lines() -> list[str]:
    from numba import cuda

    lines = []
    try:
        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        cc = dev.compute_capability
        sms = dev.MULTIPROCESSOR_COUNT
        free, total = cuda.current_context().get_memory_info()
        lines += [
            f"gpu: {name}",
            f"compute capability: {cc[0]}.{cc[1]}",
            f"SMs: {sms}",
            f"memory: {total / 2**30:.1f} GiB total, {free / 2**30:.1f} GiB free",
        ]
        from .timing import lookup_peak

        peak = lookup_peak(name)
        if peak:
            lines.append(f"peaks (spec sheet): {peak.dram_gbps:g} GB/s DRAM, {peak.fp32_tflops:g} TFLOP/s FP32, "
                         f"{peak.fp16_tensor_tflops:g} TFLOP/s FP16 tensor")
        else:
            lines.append("peaks: this device is not in gpulab's peak table; % of peak will not be shown")
        try:
            rt = cuda.runtime.get_version()
            lines.append(f"CUDA runtime: {rt[0]}.{rt[1]}")
        except Exception:
            pass
    except Exception as exc:
        lines.append(f"gpu: could not open the device: {exc}")
    return lines


def report() -> tuple[list[str], bool]:
    """The doctor's report as lines, and whether everything needed works."""
    ok = True
    mode = runtime.mode()
    probe = runtime.last_probe()
    lines = [
        f"mode: {mode}",
        f"why: {runtime.mode_reason()}",
        f"python: {platform.python_version()} ({sys.executable})",
        f"gpulab: {_version('gpulab')}",
        f"numba: {_version('numba')}",
        f"numba-cuda: {_version('numba-cuda')}",
        f"numba.cuda comes from: {_numba_cuda_origin()}",
        f"cuda-bindings: {_version('cuda-bindings')}",
        f"cupy: {_version('cupy-cuda12x') if _version('cupy-cuda12x') != 'not installed' else _version('cupy-cuda13x') if _version('cupy-cuda13x') != 'not installed' else _version('cupy')}",
        f"numpy: {_version('numpy')}",
        f"ipywidgets: {_version('ipywidgets')}",
        f"plotly: {_version('plotly')}",
        f"driver: {probe.driver_version_str} ({probe.reason})",
    ]
    if "numba-cuda package" not in lines[6]:
        ok = False
    if mode == "gpu":
        lines += _gpu_lines()
    else:
        lines += [
            "simulator can: run every kernel (threads, blocks, shared memory, syncthreads, atomics) on the CPU,",
            "  check results, and catch out-of-bounds indexing with a message naming the thread",
            "simulator cannot: give meaningful timings (about 10,000x slower than a GPU), run CuPy,",
            "  or use tensor cores; lessons shrink their sizes and show recorded GPU results instead",
        ]
    return lines, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpulab doctor", description=__doc__)
    parser.add_argument("--no-fixes", action="store_true", help="do not print the list of known fixes")
    args = parser.parse_args(argv)
    try:
        lines, ok = report()
    except runtime.ModeError as exc:
        print(f"mode: error\n{exc}")
        return 1
    print("\n".join(lines))
    if not args.no_fixes:
        print("\nknown fixes:")
        for symptom, fix in FIXES:
            print(f"- {symptom}:\n    {fix}")
    return 0 if ok else 1
