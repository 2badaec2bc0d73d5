"""The one place that decides whether gpulab runs on a real GPU or in Numba's CUDA simulator.

The decision is made once, when ``gpulab`` is first imported, and *before* numba is imported,
because numba reads ``NUMBA_ENABLE_CUDASIM`` only when ``numba.cuda`` is first imported:

1. ``GPULAB_DEVICE=gpu|simulator|auto`` (default ``auto``) is read from the environment.
2. In ``auto`` the CUDA driver is probed with :mod:`ctypes` (``libcuda`` + ``cuInit`` +
   ``cuDeviceGetCount``): a few milliseconds, no numba, no CUDA context.
3. ``NUMBA_ENABLE_CUDASIM`` is set to match the chosen mode, and ``NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS`` to 0
   unless it is set already (see :func:`select_mode`).

Everything else in gpulab asks this module (:func:`mode`, :func:`is_gpu`, :func:`sizes`) and never
decides again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from dataclasses import dataclass
from typing import Any, TypeVar


__all__ = [
    "DriverProbe",
    "ModeError",
    "SIM_SWITCH_INTERVAL",
    "banner",
    "is_gpu",
    "is_simulator",
    "mode",
    "probe_driver",
    "select_mode",
    "sizes",
    "to_device",
    "to_host",
    "xp",
]

VALID_CHOICES = ("auto", "gpu", "simulator")

# Blocks the simulator runs as Python threads, a thread per CUDA thread (those gpulab cannot run in turn:
# gpulab.simulator.in_turn): threads that wait at cuda.syncthreads() hand the GIL over only when the
# interpreter's switch interval expires. Measured on a 2-core machine before blocks ran in turn, 64x64
# shared-memory tiled matmul (16x16 blocks): default 5 ms: 8.0 s;  1 ms: 3.8 s;  0.1 ms: 3.8 s;  0.01 ms: 5.0 s.
SIM_SWITCH_INTERVAL = 0.001

T = TypeVar("T")


class ModeError(RuntimeError):
    """The GPU/simulator mode cannot be honoured (bad setting, no driver, or a late switch).

    ``message`` says what is wrong and what to do; ``hint`` (shown after it) points elsewhere for
    details. ``gpulab doctor`` prints only ``message``: it must not tell the user to run itself.
    """

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} {self.hint}".strip()


DOCTOR_HINT = "Run `python -m gpulab doctor` for details."


@dataclass(frozen=True)
class DriverProbe:
    """What the ctypes probe found out about the CUDA driver."""

    found: bool
    device_count: int
    driver_version: int | None
    reason: str

    @property
    def driver_version_str(self) -> str:
        if not self.driver_version:
            return "none"
        return f"{self.driver_version // 1000}.{(self.driver_version % 1000) // 10}"


_LIB_NAMES = ("libcuda.so.1", "libcuda.so", "nvcuda.dll", "libcuda.dylib")


def probe_driver() -> DriverProbe:
    """Look for a usable CUDA driver with ctypes only (no numba, no context is kept)."""
    lib = None
    for name in _LIB_NAMES + tuple(filter(None, [ctypes.util.find_library("cuda")])):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return DriverProbe(False, 0, None, "no CUDA driver library (libcuda) on this machine")
    err = lib.cuInit(0)
    version = ctypes.c_int(0)
    lib.cuDriverGetVersion(ctypes.byref(version))
    if err != 0:
        return DriverProbe(
            False, 0, version.value or None, f"the CUDA driver is installed but cuInit failed (error {err})"
        )
    count = ctypes.c_int(0)
    err = lib.cuDeviceGetCount(ctypes.byref(count))
    if err != 0 or count.value == 0:
        return DriverProbe(False, 0, version.value or None, "the CUDA driver reports no GPU")
    plural = "s" if count.value != 1 else ""
    return DriverProbe(True, count.value, version.value, f"CUDA driver found with {count.value} GPU{plural}")


_MODE: str | None = None
_REASON: str = ""
_PROBE: DriverProbe | None = None


def _numba_cuda_mode() -> str | None:
    """The mode numba.cuda was already imported in, or None if it has not been imported yet."""
    config = sys.modules.get("numba.cuda.core.config")
    if config is None or "numba.cuda" not in sys.modules:
        return None
    return "simulator" if getattr(config, "ENABLE_CUDASIM", 0) else "gpu"


def select_mode(choice: str | None = None) -> str:
    """Choose gpu or simulator once; later calls return the same answer.

    ``choice`` defaults to ``$GPULAB_DEVICE`` (or ``auto``). Raises :class:`ModeError` for an
    unknown value, for ``gpu`` without a driver, and when numba.cuda was already imported in the
    other mode.
    """
    global _MODE, _REASON, _PROBE
    raw = choice if choice is not None else os.environ.get("GPULAB_DEVICE", "auto")
    wanted = raw.strip().lower() or "auto"
    if wanted not in VALID_CHOICES:
        raise ModeError(
            f"GPULAB_DEVICE={raw!r} is not a mode gpulab knows. Expected one of: gpu, simulator, auto. "
            "Set it before starting Python/Jupyter, e.g. `GPULAB_DEVICE=simulator jupyter lab`, "
            "or unset it to let gpulab pick (gpu when a CUDA GPU is present)."
        )
    if _MODE is not None:
        if wanted not in ("auto", _MODE):
            raise ModeError(
                f"gpulab is already running in {_MODE} mode and cannot switch to {wanted} in this "
                "process, because numba's CUDA target is fixed when it is first imported. Restart "
                f"the kernel (Kernel > Restart) with GPULAB_DEVICE={wanted} set, then import gpulab again."
            )
        return _MODE

    already = _numba_cuda_mode()
    if wanted == "simulator":
        chosen, reason = "simulator", "GPULAB_DEVICE=simulator was requested"
    elif wanted == "gpu" and os.environ.get("GPULAB_COMPILE_ONLY") == "1":
        # The PTX tier: real CUDA compilation (NVVM) with no GPU and no simulator.
        chosen, reason = "gpu", "GPULAB_COMPILE_ONLY=1: compiling kernels to PTX, no GPU used"
    elif wanted == "gpu":
        _PROBE = probe_driver()
        if not _PROBE.found and already != "gpu":
            raise ModeError(
                f"GPULAB_DEVICE=gpu was requested, but {_PROBE.reason}. On Colab choose Runtime > "
                "Change runtime type > T4 GPU; on your own machine install the NVIDIA driver "
                "(`nvidia-smi` must work). Or use GPULAB_DEVICE=simulator to run every lesson on "
                "the CPU at small sizes.",
                DOCTOR_HINT,
            )
        chosen, reason = "gpu", "GPULAB_DEVICE=gpu was requested"
    else:
        _PROBE = probe_driver()
        if _PROBE.found:
            chosen, reason = "gpu", f"auto: {_PROBE.reason}"
        else:
            chosen, reason = "simulator", f"auto: {_PROBE.reason}"

    if already is not None and already != chosen:
        raise ModeError(
            f"numba.cuda was imported in {already} mode before gpulab, but gpulab chose {chosen} "
            f"mode ({reason}). numba fixes its CUDA target at its first import, so the two cannot "
            "be mixed in one process. Restart the kernel (Kernel > Restart) and run `import gpulab` "
            "before anything that imports numba, or set GPULAB_DEVICE to match."
        )
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if chosen == "simulator" else "0"
    # numba-cuda warns (NumbaPerformanceWarning, on stderr) at every launch of fewer than 128 blocks, one message per
    # grid size. The lessons launch 1-3 blocks on purpose to show the indexing, and so do the checks; a warning box
    # under a correct cell reads as a mistake, and nbgrader scores a test cell that writes to stderr 0. The
    # simulator never warns, so this changes gpu mode only. setdefault: NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=1 set
    # before starting Python turns it back on (numba-cuda reads it at import and again at each compile).
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    if chosen == "simulator":
        sys.setswitchinterval(SIM_SWITCH_INTERVAL)
    _MODE, _REASON = chosen, reason
    return chosen


def selected_mode() -> str | None:
    """The mode chosen so far, or None when none has been chosen (yet, or because of a ModeError)."""
    return _MODE


def started_from_command_line() -> bool:
    """Whether this process is the ``gpulab`` command (``gpulab ...`` or ``python -m gpulab ...``).

    There a bad ``GPULAB_DEVICE`` must not break ``--help``, ``--version`` or ``doctor``, so
    ``import gpulab`` leaves the mode unchosen and each command that needs it reports the error.
    """
    argv = list(getattr(sys, "orig_argv", []) or [])
    for k, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[k + 1] in ("gpulab", "gpulab.__main__"):
            return True
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return script in ("gpulab", "gpulab.exe", "gpulab-script.py")


def mode() -> str:
    """``"gpu"`` or ``"simulator"`` (selects the mode on first use)."""
    return _MODE if _MODE is not None else select_mode()


def mode_reason() -> str:
    """Why the current mode was chosen, in one line."""
    mode()
    return _REASON


def last_probe() -> DriverProbe:
    """The driver probe behind the choice (probing now if the mode was forced)."""
    global _PROBE
    if _PROBE is None:
        _PROBE = probe_driver()
    return _PROBE


def is_gpu() -> bool:
    return mode() == "gpu"


def is_simulator() -> bool:
    return mode() == "simulator"


def sizes(gpu: T, simulator: T) -> T:
    """Pick a problem size for the current mode, stating both in the notebook.

    >>> N = sizes(gpu=1 << 24, simulator=1 << 10)

    Two whole numbers with the simulator's the larger (``sizes(1 << 10, 1 << 24)``: the two swapped) give a
    warning: the simulator runs each CUDA thread as Python on the CPU, so its size is the small one.
    """
    if (
        isinstance(gpu, int)
        and isinstance(simulator, int)
        and not isinstance(gpu, bool)
        and not isinstance(simulator, bool)
        and 0 < gpu < simulator
    ):
        import warnings

        warnings.warn(
            f"sizes(gpu={gpu:,}, simulator={simulator:,}): the simulator's size is the larger one. The simulator "
            "runs each CUDA thread as Python on the CPU, so its size is the small one: are the two swapped? "
            f"sizes(gpu={simulator:_}, simulator={gpu:_})",
            UserWarning,
            stacklevel=2,
        )
    return gpu if is_gpu() else simulator


def xp() -> Any:
    """The array module for bulk work: CuPy in gpu mode, NumPy in simulator mode."""
    if is_gpu():
        import cupy

        return cupy
    import numpy

    return numpy


def array_module(*arrays: Any) -> Any:
    """The array module the given arrays belong to (CuPy or NumPy)."""
    for a in arrays:
        if type(a).__module__.startswith("cupy"):
            import cupy

            return cupy
    import numpy

    return numpy


def _numbers(fn: str, a: Any) -> None:
    """Refuse what no array of numbers can be made of: None, text, a function or kernel, or objects (NumPy would
    make a 0-d object array of them in simulator mode, where CuPy refuses them in gpu mode: the modes would differ)."""
    import numpy

    if a is None:
        what = "None (what a function without `return` gives, and a launch kernel[blocks, threads](...))"
    elif isinstance(a, (str, bytes)):
        what = f"the text {a!r:.40}"
    elif callable(a) and not hasattr(a, "shape"):
        what = f"the function {getattr(a, '__name__', type(a).__name__)}, not an array"
    elif not hasattr(a, "shape") and numpy.asarray(a).dtype == object:
        what = f"a {type(a).__name__} that is not numbers"
    else:
        return
    from .errors import UsageError  # here: gpucheck loads this file alone, outside the package, to probe the driver

    raise UsageError(f"{fn} takes an array (or a list of numbers), e.g. {fn}(x); it was given {what}.")


def to_device(a: Any) -> Any:
    """Move a host array to the device (CuPy in gpu mode); a no-op in simulator mode."""
    _numbers("to_device", a)
    if is_gpu():
        import cupy

        return cupy.asarray(a)
    import numpy

    return numpy.asarray(a)


def to_host(a: Any) -> Any:
    """Bring an array back as NumPy (CuPy, Numba device arrays and NumPy are accepted)."""
    import numpy

    if (hasattr(a, "get") and (hasattr(a, "shape") or hasattr(a, "__cuda_array_interface__"))) and not isinstance(
        a, numpy.ndarray
    ):  # CuPy, or another device array with .get() (not a dict's get)
        return a.get()
    if hasattr(a, "copy_to_host"):
        return a.copy_to_host()
    _numbers("to_host", a)
    return numpy.asarray(a)


def synchronize() -> None:
    """Wait for all queued GPU work (no-op in simulator mode)."""
    if is_gpu():
        from numba import cuda

        cuda.synchronize()
        if "cupy" in sys.modules:
            sys.modules["cupy"].cuda.Device().synchronize()


def banner() -> str:
    """A one-line statement of the mode and what it means for timings. Under IPython (a notebook) it also
    installs, once, a hint under "name ... is not defined" errors (:mod:`gpulab.notebook_hints`)."""
    from .notebook_hints import install_name_hint

    install_name_hint()
    if is_gpu():
        return "gpulab: mode gpu - kernels run on your CUDA GPU at full size; timings are real GPU timings."
    return (
        "gpulab: mode simulator - no CUDA GPU here, so kernels run in Numba's CUDA simulator on "
        "the CPU at small sizes; correct results, but timings say nothing about GPU speed."
    )
