"""Emulated ``cupy.cuda.runtime`` (tests only): one Tesla T4 (Colab's GPU), CUDA 12.8."""

from __future__ import annotations

from typing import Any


class CUDARuntimeError(RuntimeError):
    pass


_T4 = {
    "name": b"Tesla T4",
    "totalGlobalMem": 15828320256,
    "sharedMemPerBlock": 49152,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "maxThreadsPerBlock": 1024,
    "maxThreadsDim": (1024, 1024, 64),
    "maxGridSize": (2147483647, 65535, 65535),
    "clockRate": 1590000,
    "totalConstMem": 65536,
    "major": 7,
    "minor": 5,
    "multiProcessorCount": 40,
    "memoryClockRate": 5001000,
    "memoryBusWidth": 256,
    "l2CacheSize": 4194304,
    "maxThreadsPerMultiProcessor": 1024,
    "sharedMemPerMultiprocessor": 65536,
    "pciBusID": 0,
    "pciDeviceID": 4,
    "pciDomainID": 0,
    "integrated": 0,
    "concurrentKernels": 1,
    "ECCEnabled": 0,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 65536,
    "asyncEngineCount": 3,
    "unifiedAddressing": 1,
    "managedMemory": 1,
}


def getDeviceCount() -> int:  # noqa: N802 - CuPy's names
    return 1


def getDevice() -> int:  # noqa: N802
    from cupy.cuda import _current_device

    return _current_device[0]


def getDeviceProperties(device: int) -> dict[str, Any]:  # noqa: N802
    if device != 0:
        raise CUDARuntimeError("cudaErrorInvalidDevice: invalid device ordinal")
    return dict(_T4)


def runtimeGetVersion() -> int:  # noqa: N802
    return 12080


def driverGetVersion() -> int:  # noqa: N802
    return 12080


def memGetInfo() -> tuple[int, int]:  # noqa: N802
    return (15_000_000_000, _T4["totalGlobalMem"])


def deviceSynchronize() -> None:  # noqa: N802
    pass


def __getattr__(name: str) -> Any:
    from cupy._functions import NAMES

    if name in NAMES["cupy.cuda.runtime"]:
        from cupy._array import NotEmulated

        raise NotEmulated(f"cupy.cuda.runtime.{name} is not emulated")
    raise AttributeError(f"module 'cupy.cuda.runtime' has no attribute '{name}'")
