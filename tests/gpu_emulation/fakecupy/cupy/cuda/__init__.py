"""Emulated ``cupy.cuda`` (tests only): one device, streams and events on the host clock.

Work runs at once (NumPy), so ``synchronize`` has nothing to wait for and an event's time is when it was recorded
(``time.perf_counter``); ``get_elapsed_time`` returns milliseconds, as CuPy's does (cupy/cuda/stream.pyx).
"""

from __future__ import annotations

import time
from typing import Any

from cupy.cuda import nccl, runtime  # noqa: F401

_current_device = [0]


class MemoryPointer:
    def __init__(self, a: Any) -> None:
        self.ptr = int(a.__array_interface__["data"][0])
        self.mem = self
        self.size = int(a.nbytes)
        self.device_id = _current_device[0]

    @property
    def device(self) -> Device:
        return Device(self.device_id)


class Device:
    def __init__(self, device: Any = None) -> None:
        self.id = _current_device[0] if device is None else int(device)
        if not 0 <= self.id < runtime.getDeviceCount():
            raise runtime.CUDARuntimeError("cudaErrorInvalidDevice: invalid device ordinal")
        self._before: list[int] = []

    def __enter__(self) -> Device:
        self._before.append(_current_device[0])
        _current_device[0] = self.id
        return self

    def __exit__(self, *exc: Any) -> None:
        _current_device[0] = self._before.pop()

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self) -> int:
        return self.id

    def use(self) -> None:
        _current_device[0] = self.id

    def synchronize(self) -> None:
        pass

    @property
    def compute_capability(self) -> str:
        p = runtime.getDeviceProperties(self.id)
        return f"{p['major']}{p['minor']}"  # CuPy: a string, "75" for a T4

    @property
    def mem_info(self) -> tuple[int, int]:
        return runtime.memGetInfo()

    @property
    def pci_bus_id(self) -> str:
        return f"0000:{self.id:02x}:00.0"

    @property
    def attributes(self) -> dict[str, int]:
        p = runtime.getDeviceProperties(self.id)
        return {
            "MultiProcessorCount": p["multiProcessorCount"],
            "MaxThreadsPerBlock": p["maxThreadsPerBlock"],
            "WarpSize": p["warpSize"],
            "ClockRate": p["clockRate"],
            "MemoryClockRate": p["memoryClockRate"],
            "GlobalMemoryBusWidth": p["memoryBusWidth"],
            "L2CacheSize": p["l2CacheSize"],
            "MaxSharedMemoryPerBlock": p["sharedMemPerBlock"],
            "ComputeCapabilityMajor": p["major"],
            "ComputeCapabilityMinor": p["minor"],
            "MaxThreadsPerMultiProcessor": p["maxThreadsPerMultiProcessor"],
        }


class Event:
    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False) -> None:
        self.disable_timing = disable_timing
        self._t: float | None = None
        self.ptr = id(self)

    def record(self, stream: Any = None) -> None:
        self._t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    @property
    def done(self) -> bool:
        return True


def get_elapsed_time(start_event: Event, end_event: Event) -> float:
    if start_event._t is None or end_event._t is None:
        raise runtime.CUDARuntimeError("cudaErrorInvalidResourceHandle: an event was never recorded")
    if start_event.disable_timing or end_event.disable_timing:
        raise runtime.CUDARuntimeError("cudaErrorInvalidResourceHandle: event created with disable_timing")
    return (end_event._t - start_event._t) * 1e3


class Stream:
    null: Stream

    def __init__(self, null: bool = False, non_blocking: bool = False, ptr: int = 0, priority: int = 0) -> None:
        self.ptr = 0 if null else id(self)
        self.non_blocking = non_blocking
        self._before: list[Stream] = []

    def __enter__(self) -> Stream:
        self._before.append(_current_stream[0])
        _current_stream[0] = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _current_stream[0] = self._before.pop()

    def use(self) -> Stream:
        _current_stream[0] = self
        return self

    def synchronize(self) -> None:
        pass

    def record(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        pass

    @property
    def done(self) -> bool:
        return True


Stream.null = Stream(null=True)
_current_stream = [Stream.null]


def get_current_stream(device_id: int = -1) -> Stream:
    return _current_stream[0]


def is_available() -> bool:
    return True


def __getattr__(name: str) -> Any:
    from cupy._functions import NAMES

    if name in NAMES["cupy.cuda"]:
        from cupy._array import NotEmulated

        raise NotEmulated(f"cupy.cuda.{name} is not emulated")
    raise AttributeError(f"module 'cupy.cuda' has no attribute '{name}'")
