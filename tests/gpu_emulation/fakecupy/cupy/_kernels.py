"""Emulated CuPy kernels (tests only): ElementwiseKernel and ReductionKernel run gpulab's NumPy models of them
(:mod:`gpulab.lessons.elementwise`, checked against CuPy's semantics by that module's own tests); RawKernel and
RawModule (CUDA C compiled by NVRTC) cannot be emulated and raise :class:`NotEmulated` at launch."""

from __future__ import annotations

from typing import Any

import numpy as np

from cupy._array import NotEmulated, ndarray
from cupy._convert import unsupported, wrap


def _device_args(args: tuple) -> list:
    """CuPy's kernels take cupy.ndarray and scalars; a numpy.ndarray is refused (cupy/_core/_kernel.pyx
    _preprocess_arg: "Unsupported type <class 'numpy.ndarray'>")."""
    out = []
    for a in args:
        if isinstance(a, ndarray):
            out.append(a._a)
        elif isinstance(a, (np.generic, int, float, bool, complex)):
            out.append(a)
        else:
            raise unsupported(a)
    return out


class ElementwiseKernel:
    def __init__(
        self,
        in_params: str,
        out_params: str,
        operation: str,
        name: str = "kernel",
        reduce_dims=True,
        preamble: str = "",
        no_return: bool = False,
        return_tuple: bool = False,
        loop_prep: str = "",
        after_loop: str = "",
        options: tuple = (),
    ) -> None:
        if preamble or loop_prep or after_loop:
            raise NotEmulated("cupy.ElementwiseKernel with preamble/loop_prep/after_loop (C code) is not emulated")
        self.spec = {"in_params": in_params, "out_params": out_params, "operation": operation, "name": name}

    def __call__(self, *args: Any, size: Any = None, block_size: Any = None, stream: Any = None) -> Any:
        from gpulab.lessons import elementwise as model

        if size is not None:
            raise NotEmulated("cupy.ElementwiseKernel(..., size=) is not emulated")
        ins, outs = model.params(self.spec["in_params"], "in_params"), model.params(self.spec["out_params"], "out")
        with np.errstate(all="ignore"):
            res = model._elementwise_model(self.spec, ins, outs, tuple(_device_args(args)))
        given = args[len(ins) :]
        if given:
            return given[0] if len(given) == 1 else tuple(given)
        return wrap(res)


class ReductionKernel:
    def __init__(
        self,
        in_params: str,
        out_params: str,
        map_expr: str,
        reduce_expr: str,
        post_map_expr: str,
        identity: Any,
        name: str = "reduce_kernel",
        reduce_type: Any = None,
        reduce_dims: bool = True,
        preamble: str = "",
        options: tuple = (),
    ) -> None:
        if preamble:
            raise NotEmulated("cupy.ReductionKernel with a preamble (C code) is not emulated")
        self.spec = {
            "in_params": in_params,
            "out_params": out_params,
            "map_expr": map_expr,
            "reduce_expr": reduce_expr,
            "post_map_expr": post_map_expr,
            "identity": identity,
            "name": name,
            "reduce_type": reduce_type or "",
        }

    def __call__(self, *args: Any, out: Any = None, axis: Any = None, keepdims: bool = False, stream: Any = None):
        from gpulab.lessons import elementwise as model

        if out is not None or axis is not None or keepdims:
            raise NotEmulated("cupy.ReductionKernel(..., out=/axis=/keepdims=) is not emulated")
        ins = model.params(self.spec["in_params"], "in_params")
        outs = model.params(self.spec["out_params"], "out_params")
        with np.errstate(all="ignore"):
            res = model._reduction_model(self.spec, ins, outs, tuple(_device_args(args)))
        return wrap(np.asarray(res))


class RawKernel:
    def __init__(
        self,
        code: str,
        name: str,
        options: tuple = (),
        backend: str = "nvrtc",
        translate_cucomplex=False,
        enable_cooperative_groups: bool = False,
        jitify: bool = False,
    ) -> None:
        self.code, self.name = code, name

    def __call__(self, grid: Any, block: Any, args: Any, *, shared_mem: int = 0, stream: Any = None) -> None:
        raise NotEmulated(f"cupy.RawKernel {self.name!r} (CUDA C compiled by NVRTC) is not emulated")

    @property
    def attributes(self) -> Any:
        raise NotEmulated("cupy.RawKernel.attributes (a compiled kernel's) is not emulated")


class RawModule:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def get_function(self, name: str) -> Any:
        raise NotEmulated("cupy.RawModule (CUDA C compiled by NVRTC) is not emulated")


def fuse(*args: Any, **kwargs: Any) -> Any:
    """cupy.fuse: the function runs unfused on the emulated arrays (same results, one kernel per operation)."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda f: f
