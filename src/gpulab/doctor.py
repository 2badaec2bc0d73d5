"""``python -m gpulab doctor``: what is installed, which mode gpulab picked and why, what the GPU is,
and known fixes for the usual breakages."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import platform
import sys
from typing import Any

from . import runtime

__all__ = ["configure", "main", "report", "run"]

FIXES = [
    (
        "No module named 'numba.cuda' / numba's built-in CUDA target is deprecated",
        "pip install 'numba-cuda[cu12]' (or [cu13] for a CUDA 13 driver); gpulab needs the numba-cuda package.",
    ),
    (
        "NVIDIA CUDA Python bindings not found",
        "pip install 'numba-cuda[cu12]': the [cu12]/[cu13] extra brings cuda-bindings, NVVM and NVRTC.",
    ),
    (
        "CUDA_ERROR_UNSUPPORTED_PTX_VERSION / 'provided PTX was compiled with an unsupported toolchain'",
        "the NVVM that compiled the kernel is newer than the driver: install the numba-cuda extra that "
        "matches `nvidia-smi`'s CUDA version ([cu12] for 12.x drivers), or update the driver. On Colab, "
        "do not upgrade numba-cuda or the nvidia-* wheels: use the versions Colab ships.",
    ),
    (
        "CUDA driver version is insufficient for CUDA runtime version",
        "the driver is older than the toolkit wheels: install cupy-cuda12x / numba-cuda[cu12] for a 12.x "
        "driver, or update the NVIDIA driver.",
    ),
    (
        "mode: simulator on a machine with a GPU",
        "`nvidia-smi` must work in the same environment (container: run with --gpus all); on Colab pick "
        "Runtime > Change runtime type > T4 GPU, then restart the session.",
    ),
    (
        "a kernel: FAILED ... 'nvvm not found' / libNVVM cannot be found / libdevice not found",
        "numba-cuda compiles kernels with NVVM: pip install 'numba-cuda[cu12]' (or [cu13] to match the driver), "
        "or point CUDA_HOME at a CUDA toolkit folder that has nvvm/ (e.g. /usr/local/cuda), then restart the "
        "kernel.",
    ),
    (
        "'gpulab cannot switch mode' after changing GPULAB_DEVICE",
        "restart the kernel: numba fixes its CUDA target at first import.",
    ),
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
        from .timing import device_name

        dev = cuda.get_current_device()
        name = device_name()
        cc = dev.compute_capability
        sms = dev.MULTIPROCESSOR_COUNT
        free, total = cuda.current_context().get_memory_info()
        lines += [
            f"gpu: {name}",
            f"compute capability: {cc[0]}.{cc[1]}",
            f"SMs: {sms}",
            f"memory: {total / 2**30:.1f} GiB total, {free / 2**30:.1f} GiB free",
        ]
        from .exercises.ptxcheck import TARGET  # the oldest architecture the course supports: sm_75, a T4

        if tuple(cc) < TARGET:
            lines.append(
                f"compute capability {cc[0]}.{cc[1]} is older than {TARGET[0]}.{TARGET[1]} (a T4, Colab's), the "
                f"oldest GPU the course supports: its checks compile kernels for sm_{TARGET[0]}{TARGET[1]} and it "
                "is tested on 7.5 and 9.0, so a kernel that passes may use what this GPU lacks. Lessons may still "
                "run; for the course, use a GPU of 7.5 or newer (Colab's T4) or simulator mode"
            )
        from .timing import lookup_peak

        peak = lookup_peak(name)
        if peak:
            lines.append(
                f"peaks ({peak.basis}): {peak.dram_gbps:g} GB/s DRAM, {peak.fp32_tflops:g} TFLOP/s FP32, "
                f"{peak.fp16_tensor_tflops:g} TFLOP/s FP16 tensor"
            )
        else:
            from .hardware import missing_row_note

            lines.append(f"peaks: {missing_row_note(name)}; % of peak will not be shown")
        try:
            rt = cuda.runtime.get_version()
            lines.append(f"CUDA runtime: {rt[0]}.{rt[1]}")
        except Exception:
            pass
    except Exception as exc:
        lines.append(f"gpu: could not open the device: {exc}")
    return lines


def _kernel_lines() -> tuple[list[str], bool]:
    """Gpu mode: where numba-cuda finds NVVM and libdevice, and whether a one-line kernel compiles and runs (the
    first thing every lesson does; a missing NVVM fails here rather than in the middle of a lesson)."""
    lines = [f"CUDA_HOME: {os.environ.get('CUDA_HOME') or os.environ.get('CUDA_PATH') or '(not set)'}"]
    try:
        from numba.cuda.cuda_paths import get_cuda_paths

        paths = get_cuda_paths()
        lines += [f"{lib}: {paths[lib].info} (found by: {paths[lib].by})" for lib in ("nvvm", "libdevice")]
    except Exception as exc:  # noqa: BLE001 - printed: numba-cuda's lookup differs between versions
        lines.append(f"nvvm, libdevice: not read ({type(exc).__name__}: {str(exc)[:300]})")
    try:
        import numpy as np
        from numba import cuda

        @cuda.jit
        def _one(a: Any) -> None:
            a[0] = 1.0

        d = cuda.device_array(1, dtype=np.float32)
        _one[1, 1](d)
        if d.copy_to_host()[0] != 1.0:
            raise RuntimeError("the kernel ran but did not write its output")
    except Exception as exc:  # noqa: BLE001 - printed for the learner, with the known fixes below
        lines.append(f"a kernel: FAILED to compile or run: {type(exc).__name__}: {str(exc)[:800]}")
        return lines, False
    lines.append("a kernel: compiled by numba-cuda and ran on the GPU")
    return lines, True


def _cupy_version() -> str:
    for dist in ("cupy-cuda12x", "cupy-cuda13x", "cupy"):
        if _version(dist) != "not installed":
            return f"{_version(dist)} ({dist})"
    return "not installed"


def _mode_lines() -> tuple[str | None, list[str]]:
    """The mode and why; when GPULAB_DEVICE cannot be honoured, what is wrong and what to do."""
    try:
        return runtime.mode(), [f"mode: {runtime.mode()}", f"why: {runtime.mode_reason()}"]
    except runtime.ModeError as exc:
        return None, [
            "mode: none - gpulab cannot start in the mode that was asked for:",
            f"  {exc.message}",  # the message without "run doctor": this is doctor
            f"  GPULAB_DEVICE is {os.environ.get('GPULAB_DEVICE')!r}; gpu, simulator and auto (the default, "
            "gpu when a GPU is found) are the modes.",
        ]


def _in_turn_line() -> str:
    """Whether this Python lets the simulator run a block's threads in turn (gpulab reads kernels' bytecode, which
    CPython changes between versions): when it cannot, kernels with a barrier run on Numba's Python threads."""
    try:
        from .kernels.cooperative import _reverse_in_block_kernel
        from .simulator.in_turn import plan

        found = plan(_reverse_in_block_kernel.py_func)
    except Exception as exc:  # noqa: BLE001 - printed for the learner
        found, why = None, f"{type(exc).__name__}: {exc}"
    else:
        why = "a kernel with cuda.syncthreads() could not be read as a generator"
    if found is not None and found[1]:
        return "simulator blocks: a block's threads run in turn, barrier by barrier (the fast path)"
    return (
        f"simulator blocks: NOT in turn on Python {platform.python_version()} ({why}): kernels with a barrier run "
        "on Numba's Python threads, about 30x slower, so lessons may pass their time limits. Use Python 3.10-3.13, "
        "or report it with this line"
    )


def report() -> tuple[list[str], bool]:
    """The doctor's report as lines, and whether everything needed works."""
    mode, lines = _mode_lines()
    ok = mode is not None
    probe = runtime.last_probe()
    lines += [
        f"python: {platform.python_version()} ({sys.executable})",
        f"gpulab: {_version('gpulab')}",
        f"numba: {_version('numba')}",
        f"numba-cuda: {_version('numba-cuda')}",
        f"numba.cuda comes from: {_numba_cuda_origin()}",
        f"cuda-bindings: {_version('cuda-bindings')}",
        f"cupy: {_cupy_version()}",
        f"numpy: {_version('numpy')}",
        f"ipywidgets: {_version('ipywidgets')}",
        f"plotly: {_version('plotly')}",
        f"driver: {probe.driver_version_str} ({probe.reason})",
    ]
    if not any(line.startswith("numba.cuda comes from: numba-cuda package") for line in lines):
        ok = False
    if mode == "gpu":
        lines += _gpu_lines()
        kernel, works = _kernel_lines()
        lines += kernel
        ok = ok and works
    elif mode == "simulator":
        lines.append(_in_turn_line())
        lines += [
            "simulator can: run every kernel (threads, blocks, shared memory, syncthreads, atomics) on the CPU,",
            "  check results, and catch out-of-bounds indexing with a message naming the thread",
            "simulator cannot: give meaningful timings (each CUDA thread costs microseconds of Python,",
            "  10^5-10^6 times a GPU's time per thread: lesson 00 measures it), run CuPy,",
            "  or use tensor cores; lessons shrink their sizes and show recorded GPU results instead",
        ]
    return lines, ok


def configure(parser: argparse.ArgumentParser) -> None:
    """``gpulab doctor`` arguments."""
    parser.add_argument("--no-fixes", action="store_true", help="do not print the list of known fixes")


def run(ns: argparse.Namespace) -> int:
    """Print the report (and known fixes); 1 when something needed does not work."""
    lines, ok = report()
    print("\n".join(lines))
    if not ns.no_fixes:
        print("\nknown fixes:")
        for symptom, fix in FIXES:
            print(f"- {symptom}:\n    {fix}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpulab doctor", description=__doc__)
    configure(parser)
    return run(parser.parse_args(argv))
