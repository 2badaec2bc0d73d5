"""Occupancy: how many blocks of a kernel fit on one streaming multiprocessor (SM) at a time.

An SM keeps every resident block's threads, registers and shared memory on chip, so a block is admitted only
while all four fit: threads (warps), a count of blocks, the register file and shared memory. The figures per
architecture are **spec figures**, not measurements: the CUDA Programming Guide's table of technical
specifications per compute capability (CUDA C++ Programming Guide, appendix "Compute Capabilities", table
"Technical Specifications per Compute Capability", CUDA 12.x; in the 2025 CUDA Programming Guide for CUDA 13,
section 5.1 "Compute Capabilities":
docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/compute-capabilities.html).
The allocation rules are those of NVIDIA's occupancy calculator, ``cuda_occupancy.h`` (CUDA 12.9, read in
``nvidia-cuda-runtime-cu12`` 12.9.79), which ``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` follows:

- registers are allocated per **warp**, ``registers x 32`` rounded up to 256; the register file (64K 32-bit
  registers) is split into 4 sub-partitions (one per warp scheduler), and a warp's registers come from one of
  them, so the warps that fit are ``4 x floor(16384 / registers per warp)``;
- a block's shared memory is its static shared memory plus the 1 KB per block the CUDA driver reserves on
  sm_80 and later, rounded up to 256 bytes (sm_7x) or 128 bytes (sm_8x, sm_9x);
- the shared memory of an SM is its largest carveout (the driver's default picks it when the kernel needs it);
- a block takes whole warps: 48 threads take 2 warps.

Not modelled: the carveout preference (``cudaFuncAttributePreferredSharedMemoryCarveout``), dynamic shared
memory beyond what is passed in, and the barrier limit (it never binds for kernels with one barrier, as
numba-cuda's are).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .errors import one_line

__all__ = [
    "SM_LIMITS",
    "LIMIT_NAMES",
    "Occupancy",
    "SMLimits",
    "blocks_per_sm",
    "device_sms",
    "mistake_hint",
    "read_device_sms",
    "sm_limits",
]

KB = 1024
LIMIT_NAMES = ("threads", "blocks", "registers", "shared memory")


@dataclass(frozen=True, repr=False)
class SMLimits:
    """The per-SM and per-block limits of one compute capability (spec figures; see the module docstring)."""

    arch: str  # "sm_75"
    gpus: str  # examples of GPUs with this compute capability
    max_threads_per_sm: int
    max_blocks_per_sm: int
    shared_per_sm: int  # bytes, the largest carveout
    shared_per_block_optin: int  # bytes, the most one block may have (dynamic shared memory, opted in)
    shared_granularity: int  # bytes: a block's shared memory is rounded up to a multiple of this
    shared_reserved_per_block: int  # bytes the driver reserves per block (sm_80 and later: 1 KB)
    shared_per_block: int = 48 * KB  # static shared memory per block (more only dynamic, with an opt-in)
    max_threads_per_block: int = 1024
    warp_size: int = 32
    registers_per_sm: int = 64 * KB  # 32-bit registers
    max_registers_per_block: int = 64 * KB
    max_registers_per_thread: int = 255
    register_granularity: int = 256  # registers per warp are allocated in units of 256
    register_partitions: int = 4  # the register file is split between 4 warp schedulers
    cc: tuple[int, int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cc", (int(self.arch[3]), int(self.arch[4:])))

    @property
    def max_warps_per_sm(self) -> int:
        return self.max_threads_per_sm // self.warp_size

    def __repr__(self) -> str:
        return f"<{self.arch} limits ({self.gpus})>"


SM_LIMITS: dict[str, SMLimits] = {
    s.arch: s
    for s in (
        SMLimits("sm_75", "T4, RTX 20xx", 1024, 16, 64 * KB, 64 * KB, 256, 0),
        SMLimits("sm_80", "A100", 2048, 32, 164 * KB, 163 * KB, 128, KB),
        SMLimits("sm_86", "RTX 30xx, A10, A40", 1536, 16, 100 * KB, 99 * KB, 128, KB),
        SMLimits("sm_89", "L4, RTX 40xx", 1536, 24, 100 * KB, 99 * KB, 128, KB),
        SMLimits("sm_90", "H100, H200", 2048, 32, 228 * KB, 227 * KB, 128, KB),
    )
}


def sm_limits(arch: Any) -> SMLimits:
    """The limits of ``arch``: an :class:`SMLimits`, ``"sm_75"``, ``"7.5"``, ``(7, 5)`` or ``75``."""
    if isinstance(arch, SMLimits):
        return arch
    if isinstance(arch, tuple) and len(arch) == 2:
        key = f"sm_{arch[0]}{arch[1]}"
    else:
        key = str(arch).strip().lower().replace(".", "")
        key = key if key.startswith("sm_") else f"sm_{key.removeprefix('sm')}"
    if key not in SM_LIMITS:
        raise ValueError(f"no SM limits for {arch!r}: known are {', '.join(SM_LIMITS)} (e.g. arch='sm_75' for a T4).")
    return SM_LIMITS[key]


def read_device_sms() -> int | str:
    """The current GPU's number of SMs as numba-cuda reads it (132 on an H100 or H200, 40 on a T4), or one line
    saying why it cannot be read: what was asked and the error (no driver, numba's simulator, an attribute numba
    lacks). The one reader of the SM count; :func:`device_sms` is it for callers that need only the number."""
    try:
        from numba import cuda

        sms = int(cuda.get_current_device().MULTIPROCESSOR_COUNT)
    except Exception as exc:  # noqa: BLE001 - any failure to read means "unknown": the caller decides what to do then
        return (
            f"numba-cuda could not read the GPU's SM count (get_current_device().MULTIPROCESSOR_COUNT: {one_line(exc)})"
        )
    return sms if sms > 0 else f"numba-cuda read {sms} SMs for the GPU (MULTIPROCESSOR_COUNT), not a count"


def device_sms() -> int | None:
    """The current GPU's number of SMs (:func:`read_device_sms`); None where it cannot be read, for callers that
    fall back to a default (split-K's plan). A caller that prints a figure from it says why with
    :func:`read_device_sms` instead."""
    sms = read_device_sms()
    return sms if isinstance(sms, int) else None


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks of one kernel on one SM, and what bounds them."""

    arch: str
    blocks: int  # resident blocks per SM
    warps: int  # resident warps per SM
    occupancy: float  # warps / the SM's maximum warps
    limiter: str  # the limit that binds ("threads", "blocks", "registers" or "shared memory"), first if tied
    limiters: tuple[str, ...]  # every limit that binds
    by_limit: dict[str, int]  # blocks each limit alone would allow

    def __str__(self) -> str:
        return (
            f"{self.arch}: {self.blocks} blocks, {self.warps} warps per SM, occupancy {self.occupancy:.0%} "
            f"(limited by {' and '.join(self.limiters)})"
        )


def _check(sm: SMLimits, threads: int, registers: int, shared: int, opt_in: bool) -> None:
    if not 1 <= threads <= sm.max_threads_per_block:
        raise ValueError(
            f"a block has 1 to {sm.max_threads_per_block} threads on every GPU, got {threads}: launch smaller blocks "
            f"(16 x 16 = 256 or 32 x 32 = 1024) and more of them."
        )
    if not 0 <= registers <= sm.max_registers_per_thread:
        raise ValueError(
            f"a thread has at most {sm.max_registers_per_thread} registers, got {registers}: pass the figure "
            f"ptxas reports (gpulab.ptx.resource_usage); a kernel that needs more spills to local memory."
        )
    limit = sm.shared_per_block_optin if opt_in else sm.shared_per_block
    if not 0 <= shared <= limit:
        more = (
            f" More is possible only as dynamic shared memory with an opt-in (up to {sm.shared_per_block_optin:,} "
            f"bytes on {sm.arch}: pass opt_in=True)."
            if not opt_in and shared <= sm.shared_per_block_optin
            else ""
        )
        raise ValueError(
            f"a block on {sm.arch} may have at most {limit:,} bytes of {'' if opt_in else 'static '}shared memory, "
            f"got {shared:,}: use smaller tiles.{more}"
        )
    warps = math.ceil(threads / sm.warp_size)
    per_warp = math.ceil(registers * sm.warp_size / sm.register_granularity) * sm.register_granularity
    # the hardware's check counts whole groups of 4 warps (cuda_occupancy.h, "regsAssumedPerCTA")
    needed = per_warp * math.ceil(warps / sm.register_partitions) * sm.register_partitions
    if needed > sm.max_registers_per_block:
        raise ValueError(
            f"a block of {threads} threads x {registers} registers needs {needed:,} registers, the register file "
            f"of an SM holds {sm.max_registers_per_block:,}: the launch fails ('too many resources requested for "
            f"launch'). Use smaller blocks, or fewer registers (@cuda.jit(max_registers=...), which may spill)."
        )


def _by_limit(sm: SMLimits, threads: int, registers: int, shared: int, mistake: str = "") -> dict[str, int]:
    """Blocks each limit alone allows (a large number for a limit that never binds). ``mistake`` computes
    the count the way a named mistake would (for :func:`mistake_hint`)."""
    warps = threads / sm.warp_size if mistake == "partial warps" else math.ceil(threads / sm.warp_size)
    per_warp = registers * sm.warp_size
    if mistake != "register granularity":
        per_warp = math.ceil(per_warp / sm.register_granularity) * sm.register_granularity
    if per_warp == 0:
        reg_blocks = 1 << 30
    elif mistake == "register partitions":
        reg_blocks = int((sm.registers_per_sm // per_warp) // warps)
    else:
        reg_warps = (sm.registers_per_sm // sm.register_partitions) // per_warp * sm.register_partitions
        reg_blocks = int(reg_warps // warps)
    block_shared = shared + (0 if mistake == "reserved shared memory" else sm.shared_reserved_per_block)
    if mistake != "shared granularity":
        block_shared = math.ceil(block_shared / sm.shared_granularity) * sm.shared_granularity
    return {
        "threads": int(sm.max_warps_per_sm // warps),
        "blocks": sm.max_blocks_per_sm,
        "registers": reg_blocks,
        "shared memory": sm.shared_per_sm // block_shared if block_shared else 1 << 30,
    }


def blocks_per_sm(
    threads_per_block: int,
    registers_per_thread: int,
    shared_bytes_per_block: int = 0,
    arch: Any = "sm_75",
    *,
    opt_in: bool = False,
) -> Occupancy:
    """How many blocks of ``threads_per_block`` threads, each thread using ``registers_per_thread`` registers
    and each block ``shared_bytes_per_block`` bytes of shared memory, are resident on one SM of ``arch``
    (``"sm_75"`` ... ``"sm_90"``, see :data:`SM_LIMITS`) at once, and which limit binds.

    Raises ``ValueError`` for a block that cannot launch at all: over 1024 threads, over 255 registers per thread,
    over the shared memory per block (48 KB static; ``opt_in=True`` for dynamic shared memory up to the
    architecture's opt-in maximum), or more registers than the register file holds."""
    sm = sm_limits(arch)
    threads, registers, shared = int(threads_per_block), int(registers_per_thread), int(shared_bytes_per_block)
    _check(sm, threads, registers, shared, opt_in)
    by_limit = _by_limit(sm, threads, registers, shared)
    blocks = min(by_limit.values())
    warps = blocks * math.ceil(threads / sm.warp_size)
    limiters = tuple(name for name in LIMIT_NAMES if by_limit[name] == blocks)
    return Occupancy(sm.arch, blocks, warps, warps / sm.max_warps_per_sm, limiters[0], limiters, by_limit)


_MISTAKES = {
    "register granularity": "registers are allocated per warp in units of 256: round registers x 32 up to a "
    "multiple of 256 before dividing.",
    "register partitions": "the register file is 4 partitions of 16384 registers, and a warp's registers come "
    "from one of them: warps per partition = 16384 // registers per warp, then x 4.",
    "shared granularity": "shared memory is allocated in units of {sm.shared_granularity} bytes on {sm.arch}: round "
    "a block's shared memory up to a multiple of sm.shared_granularity.",
    "reserved shared memory": "on sm_80 and later the driver reserves 1 KB per block "
    "(sm.shared_reserved_per_block): add it to each block's shared memory before rounding.",
    "partial warps": "a block takes whole warps: 48 threads take 2 warps (round threads / 32 up).",
}


def mistake_hint(args: tuple, got: Any) -> str | None:
    """For the learner's ``blocks_per_sm(threads, registers, shared, sm)`` returning ``got`` on ``args``: name
    the limit or rule the answer left out, where one explains it; else None."""
    threads, registers, shared, sm = args
    try:
        got = int(got)
    except (TypeError, ValueError):
        return "return the number of resident blocks, an int (e.g. min(...) of the four limits)."
    right = blocks_per_sm(threads, registers, shared, sm)
    if got == right.blocks:
        return None
    for name in right.limiters:  # the answer is what the other three limits allow: this one was left out
        others = [v for k, v in right.by_limit.items() if k != name]
        if got == min(others):
            return f"here the {name} limit binds ({right.blocks} blocks); your answer is what the other limits allow."
    for mistake, text in _MISTAKES.items():
        if got == min(_by_limit(sm, threads, registers, shared, mistake).values()):
            return text.format(sm=sm)
    if got > right.blocks:
        return f"too many blocks: the {right.limiter} limit allows only {right.blocks} here."
    return None
