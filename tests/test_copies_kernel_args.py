"""``copies.count()`` on a GPU counts the copies of host arrays handed straight to a ``@cuda.jit`` kernel.

numba-cuda 0.30 copies such an argument with the driver's functions (``numba/cuda/args.py`` calling
``_to_strided_memory_view``), not through ``DeviceNDArray.copy_to_device``/``copy_to_host``, which ``count()`` wraps.
No GPU here: the installed numba-cuda's real ``args.py`` is loaded into a stand-in package whose memory functions
record what a driver would copy, and the launch's argument handling is replayed as numba-cuda's dispatcher does it
(``wrap_arg(value).to_device(retr, stream)``, then every clean-up function in ``retr``).
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpulab  # noqa: F401  (picks the mode before numba loads)
from gpulab.copies import Copies, _kernel_argument_copies


def _real_args_source() -> Path:
    spec = importlib.util.find_spec("numba_cuda")
    assert spec is not None and spec.submodule_search_locations, "numba-cuda is not installed"
    path = Path(next(iter(spec.submodule_search_locations))) / "numba" / "cuda" / "args.py"
    assert path.is_file(), path
    return path


class _Driver:
    """What the stand-in driver copied: (kind, bytes)."""

    def __init__(self) -> None:
        self.copies: list[tuple[str, int]] = []

    def cuMemcpyDtoH(self, host: Any, dev: Any, nbytes: int) -> None:  # noqa: N802 - the driver's name
        self.copies.append(("d2h", nbytes))

    def cuMemcpyDtoHAsync(self, host: Any, dev: Any, nbytes: int, stream: Any) -> None:  # noqa: N802
        self.copies.append(("d2h", nbytes))


@pytest.fixture
def stand_in() -> Any:
    """The installed numba-cuda's args.py over stand-in devicearray, driver and devices modules."""
    name = "_gpulab_nc_stand_in"
    driver = _Driver()
    pkg = types.ModuleType(name)
    pkg.__path__ = []  # type: ignore[attr-defined]
    cudadrv = types.ModuleType(f"{name}.cudadrv")
    cudadrv.__path__ = []  # type: ignore[attr-defined]
    devarray = types.ModuleType(f"{name}.cudadrv.devicearray")

    def to_view(obj: Any, stream: Any = 0, copy: bool = True, user_explicit: bool = False) -> Any:
        if getattr(obj, "on_device", False):
            return obj, False
        host = np.asanyarray(obj)
        dev = types.SimpleNamespace(size=host.size, dtype=host.dtype, ptr=1, on_device=True)
        if copy:
            driver.copies.append(("h2d", host.nbytes))
        return dev, True

    def auto_device(obj: Any, stream: Any = 0, copy: bool = True, user_explicit: bool = False) -> Any:
        raise AssertionError("an older numba-cuda's path: not replayed here")

    devarray._to_strided_memory_view = to_view  # type: ignore[attr-defined]
    devarray._make_strided_memory_view = lambda value, stream_ptr=0: types.SimpleNamespace(ptr=2)  # type: ignore[attr-defined]
    devarray.auto_device = auto_device  # type: ignore[attr-defined]
    drv = types.ModuleType(f"{name}.cudadrv.driver")
    drv.driver = driver  # type: ignore[attr-defined]
    devices = types.ModuleType(f"{name}.cudadrv.devices")
    devices.get_context = lambda: types.SimpleNamespace(  # type: ignore[attr-defined]
        get_default_stream=lambda: types.SimpleNamespace(synchronize=lambda: None)
    )
    mods = {m.__name__: m for m in (pkg, cudadrv, devarray, drv, devices)}
    spec = importlib.util.spec_from_file_location(f"{name}.args", _real_args_source())
    assert spec is not None and spec.loader is not None
    args = importlib.util.module_from_spec(spec)
    mods[args.__name__] = args
    saved = {k: sys.modules.get(k) for k in mods}
    sys.modules.update(mods)
    try:
        spec.loader.exec_module(args)
        yield types.SimpleNamespace(args=args, devicearray=devarray, driver=driver)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def _launch(args: Any, *values: Any) -> None:
    """numba-cuda's dispatcher for array arguments: wrap, copy in, launch (nothing here), run the clean-up list."""
    retr: list = []
    for v in values:
        args.wrap_arg(v).to_device(retr, 0)
    for clean_up in retr:
        clean_up()


def _uses_views(args: Any) -> bool:
    return "_to_strided_memory_view" in args.Out.to_device.__code__.co_names


def test_host_arrays_handed_to_a_kernel_are_counted_as_the_driver_copies_them(stand_in: Any) -> None:
    if not _uses_views(stand_in.args):
        pytest.skip("this numba-cuda copies kernel arguments with copy_to_device/copy_to_host, which count() wraps")
    x = np.ones(1000, dtype=np.float32)
    y = np.zeros((10, 10), dtype=np.float64)
    kept = stand_in.devicearray._to_strided_memory_view, stand_in.args.Out.to_device
    found = Copies()
    with _kernel_argument_copies(stand_in.args, stand_in.devicearray, found):
        _launch(stand_in.args, x, stand_in.args.In(x), stand_in.args.Out(y))
    # InOut(x): in and back; In(x): in only; Out(y): back only
    assert stand_in.driver.copies == [("h2d", 4000), ("h2d", 4000), ("d2h", 4000), ("d2h", 800)]
    assert (found.h2d, found.d2h, found.calls) == (8000, 4800, 4)
    # a device array (CuPy's, here the stand-in's) is handed over as it is: no copy, none counted
    before = len(stand_in.driver.copies)
    dev = types.SimpleNamespace(on_device=True, size=5, dtype=np.float32, ptr=3)
    with _kernel_argument_copies(stand_in.args, stand_in.devicearray, found):
        _launch(stand_in.args, dev)
    assert len(stand_in.driver.copies) == before and found.calls == 4
    # and everything is put back
    assert (stand_in.devicearray._to_strided_memory_view, stand_in.args.Out.to_device) == kept
    # without the hook the same launch copies the same bytes and counts none: what count() missed before
    found = Copies()
    _launch(stand_in.args, x)
    assert found.calls == 0 and stand_in.driver.copies[-2:] == [("h2d", 4000), ("d2h", 4000)]


def test_an_older_numba_cuda_is_left_alone() -> None:
    """0.22's args use auto_device and DeviceNDArray.copy_to_host, which count() wraps: hooking them too would count
    each copy twice."""
    calls: list = []

    class Out:
        def to_device(self, retr: list, stream: Any = 0) -> Any:
            from numba.cuda.cudadrv.devicearray import auto_device  # noqa: F401  (the name 0.22 imports)

            calls.append(retr)

    args = types.SimpleNamespace(Out=Out)
    devarray = types.SimpleNamespace(_to_strided_memory_view=lambda *a, **k: None)
    kept = devarray._to_strided_memory_view, Out.to_device
    with _kernel_argument_copies(args, devarray, Copies()):
        assert (devarray._to_strided_memory_view, Out.to_device) == kept
