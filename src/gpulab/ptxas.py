"""What a compiled kernel uses per thread and per block: ``ptxas -v`` on its PTX, or numba-cuda on a GPU.

NVVM's PTX is not yet machine code: registers are still virtual there. NVIDIA's assembler ``ptxas`` allocates
the real ones for a target, and with ``-v`` reports them with the static shared memory, spill traffic and stack
frame. :func:`gpulab.ptx.resource_usage` compiles a kernel to PTX (in a child process, no GPU) and calls
:func:`ptxas_usage` here; in gpu mode :func:`numba_resource_usage` reads the same figures from the driver for the
loaded kernel (numba-cuda 0.22 to 0.30: ``get_regs_per_thread``, ``get_shared_mem_per_block``,
``get_local_mem_per_thread``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ResourceUsage", "find_ptxas", "numba_resource_usage", "parse_ptxas", "ptxas_usage", "variant_source"]


@dataclass(frozen=True)
class ResourceUsage:
    """One kernel's use of the SM's resources on one target. ``spill_*`` and ``stack_bytes`` are None where the
    source (numba-cuda) does not report them; ``local_bytes`` is per-thread local memory (spills and arrays)."""

    kernel: str
    cc: tuple[int, int]
    registers: int  # per thread
    shared_bytes: int  # static shared memory per block
    spill_stores: int | None  # bytes per thread
    spill_loads: int | None
    stack_bytes: int | None  # the stack frame per thread
    local_bytes: int  # local memory per thread
    source: str  # "ptxas -v" or "numba-cuda (this GPU)"

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"


def _candidates() -> list[Path]:
    found: list[Path] = []
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvcc")
    except (ImportError, ValueError):
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec else []:  # the nvidia-cuda-nvcc-cu12 wheel
        found.append(Path(loc) / "bin" / "ptxas")
    try:  # the CUDA 13 wheels (numba-cuda[cu13], gpulab's gpu-cu13 extra) install under nvidia/cu13/
        nvidia = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        nvidia = None
    for loc in (nvidia.submodule_search_locations or []) if nvidia else []:
        found.append(Path(loc) / "cu13" / "bin" / "ptxas")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            found.append(Path(os.environ[var]) / "bin" / "ptxas")
    found.append(Path("/usr/local/cuda/bin/ptxas"))  # Colab, CUDA images
    on_path = shutil.which("ptxas")
    if on_path:
        found.append(Path(on_path))
    return found


def _runnable() -> list[str]:
    """Every candidate :func:`_candidates` names that exists and runs, in order, each path once."""
    out: list[str] = []
    seen: set[Path] = set()
    for path in _candidates():
        if path.is_file() and os.access(path, os.X_OK) and path.resolve() not in seen:
            seen.add(path.resolve())
            out.append(str(path))
    return out


def find_ptxas() -> str:
    """The path of a ``ptxas`` that runs: from the ``nvidia-cuda-nvcc-cu12`` wheel (``numba-cuda[cu12]`` installs
    it, and its version matches NVVM's PTX), the CUDA 13 wheels' ``nvidia/cu13/bin``, ``$CUDA_HOME/bin``,
    ``$CUDA_PATH/bin``, ``/usr/local/cuda/bin`` or ``PATH``. Raises ``FileNotFoundError`` saying where it looked
    and what to install."""
    found = _runnable()
    if found:
        return found[0]
    raise FileNotFoundError(
        "no ptxas (NVIDIA's PTX assembler) found; looked in "
        + ", ".join(str(p) for p in _candidates())
        + ". Install numba-cuda with its CUDA 12 wheels (pip install 'numba-cuda[cu12]', which brings "
        "nvidia-cuda-nvcc-cu12), or a CUDA toolkit and set CUDA_HOME."
    )


# ptxas older than the NVVM that wrote the PTX: "Unsupported .version 9.5; current version is '9.0'"
_TOO_NEW = re.compile(r"Unsupported \.version (\d+\.\d+); current version is '(\d+\.\d+)'")
_VERSION_LINE = re.compile(r"^(\s*\.version\s+)(\d+\.\d+)", flags=re.M)


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")


def parse_ptxas(text: str) -> dict[str, int]:
    """The figures ``ptxas -v`` printed for the first entry function (a kernel) in ``text``: ``registers``,
    ``shared_bytes``, ``spill_stores``, ``spill_loads``, ``stack_bytes``, ``local_bytes``. Raises ``ValueError``
    when the text holds no kernel's figures."""
    m = _ENTRY.search(text)
    if not m:
        raise ValueError(f"ptxas -v printed no 'Compiling entry function' line:\n{text[-2000:]}")
    body = text[m.end() :]
    nxt = _ENTRY.search(body)
    body = body[: nxt.start()] if nxt else body

    def num(pattern: str) -> int:
        found = re.search(pattern, body)
        return int(found.group(1)) if found else 0

    used = re.search(r"Used (\d+) registers", body)
    if not used:
        raise ValueError(f"ptxas -v printed no 'Used N registers' line for {m.group(1)}:\n{body[-2000:]}")
    return {
        "registers": int(used.group(1)),
        "shared_bytes": num(r"(\d+) bytes smem"),
        "spill_stores": num(r"(\d+) bytes spill stores"),
        "spill_loads": num(r"(\d+) bytes spill loads"),
        "stack_bytes": num(r"(\d+) bytes stack frame"),
        "local_bytes": num(r"(\d+) bytes lmem"),
    }


def _assemble(exe: str, ptx: str, arch: str, timeout: float) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="gpulab-ptxas-") as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx, encoding="utf-8")
        return subprocess.run(
            [exe, "-v", "--gpu-name", arch, str(src), "-o", str(Path(tmp) / "kernel.cubin")],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def ptxas_usage(
    ptx: str, cc: tuple[int, int], name: str, *, ptxas: str | None = None, timeout: float = 120
) -> ResourceUsage:
    """Assemble ``ptx`` (one kernel's PTX) for ``sm_XY`` with ``ptxas -v`` and read what it reports.

    ``ptxas`` (default :func:`find_ptxas`) is tried first. The pip wheels' NVVM can be newer than the CUDA
    toolkit's ``ptxas`` found beside it (numba-cuda[cu13] brings NVVM 13.2 but no ptxas; an image's
    /usr/local/cuda has 13.0: "Unsupported .version 9.5; current version is '9.0'"): then every other ptxas found
    is tried, and if all are older, the first assembles the PTX with its ``.version`` line lowered to the newest it
    accepts. NVVM writes the same instructions for the course's kernels under either ISA version, so the figures
    hold; a PTX that really needs the newer ISA still fails, with ptxas's own message."""
    exe = ptxas or find_ptxas()
    arch = f"sm_{cc[0]}{cc[1]}"
    proc = _assemble(exe, ptx, arch, timeout)
    refused = _TOO_NEW.search(proc.stderr) if proc.returncode != 0 else None
    if refused:
        for other in _runnable():
            if other == exe:
                continue
            second = _assemble(other, ptx, arch, timeout)
            if second.returncode == 0 or not _TOO_NEW.search(second.stderr):
                exe, proc, refused = other, second, None
                break
    if refused:
        lowered = _VERSION_LINE.sub(lambda m: m.group(1) + refused.group(2), ptx, count=1)
        proc = _assemble(exe, lowered, arch, timeout)
    if proc.returncode != 0:
        raise RuntimeError(
            f"ptxas ({exe}) could not assemble {name} for {arch}: {proc.stderr.strip()[-2000:]}\n"
            "An 'Unsupported .version' error means this ptxas is older than the NVVM that wrote the PTX: use the "
            "ptxas of the same CUDA release (the nvidia-cuda-nvcc-cu12 wheel numba-cuda[cu12] installs)."
        )
    figures = parse_ptxas(proc.stdout + proc.stderr)
    return ResourceUsage(name, (cc[0], cc[1]), source="ptxas -v", **figures)


def variant_source(kernel: Any, constants: dict[str, Any] | None = None) -> str:
    """The kernel's standalone module source (:func:`gpulab.source.standalone_source`) with module constants set
    again at its end, e.g. ``{"TILE": 8}``: numba reads globals when it compiles, after the whole module ran."""
    from .source import standalone_source

    src = standalone_source(kernel)
    for name, value in (constants or {}).items():
        if not name.isidentifier() or not isinstance(value, (bool, int, float)):
            raise ValueError(f"constants must map names to numbers, got {name!r}: {value!r}")
        if not re.search(rf"^{name} = ", src, flags=re.M):
            raise ValueError(f"the kernel's source uses no module constant {name!r} to set")
        src += f"\n{name} = {value!r}\n"
    return src


def numba_resource_usage(kernel: Any, signature: str, constants: dict[str, Any] | None = None) -> ResourceUsage:
    """gpu mode: the figures numba-cuda reports for ``kernel`` compiled as ``signature`` and loaded on the GPU
    in use (the same cubin a launch runs). Raises ``RuntimeError`` in simulator mode."""
    from . import runtime
    from .source import define, py_func

    if not runtime.is_gpu():
        raise RuntimeError("numba-cuda reports a kernel's registers only in gpu mode; use ptxas (resource_usage).")
    from numba import cuda

    name = py_func(kernel).__name__
    if constants:
        kernel = define(variant_source(kernel, constants), name, {})
    compiled = kernel.compile(signature)
    key = next(k for k, v in kernel.overloads.items() if v is compiled)
    sig = types.SimpleNamespace(args=key)  # what get_regs_per_thread(signature) reads: signature.args
    cc = cuda.get_current_device().compute_capability
    return ResourceUsage(
        name,
        (int(cc[0]), int(cc[1])),
        registers=int(kernel.get_regs_per_thread(sig)),
        shared_bytes=int(kernel.get_shared_mem_per_block(sig)),
        spill_stores=None,
        spill_loads=None,
        stack_bytes=None,
        local_bytes=int(kernel.get_local_mem_per_thread(sig)),
        source="numba-cuda (this GPU)",
    )
