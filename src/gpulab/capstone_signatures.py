"""Which kernel the capstone (lab 09) can launch for each op: the learner ops, the launcher training calls for each
(:mod:`gpulab.kernels.nn_ops`) and the course kernel whose parameters it passes, and the two things read from a
learner kernel before its check runs: a grid-stride loop (:func:`not_grid_stride`) and a parameter list that
launcher can call (:func:`signature_mismatch`, which names another lab's order). Re-exported by
:mod:`gpulab.capstone`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COURSE_KERNELS", "DROPOUT_OPS", "LAUNCHERS", "LEARNER_OPS", "not_grid_stride", "signature_mismatch"]

# The ops a learner writes in labs 03-08, in the order a training step meets them.
LEARNER_OPS = (
    "matmul",
    "im2col",
    "col2im",
    "relu",
    "relu_backward",
    "maxpool",
    "maxpool_backward",
    "dropout_forward",
    "dropout_backward",
    "softmax_xent",
    "adam_update",
)


def not_grid_stride(op: str, kernel: Any) -> str:
    """Why ``kernel`` cannot be ``op``'s grid-stride kernel ("" when it may be): training launches it with fewer
    threads than elements, so its code must read ``cuda.gridsize`` (or ``cuda.gridDim``) to step over the rest.
    A kernel that calls device functions, or whose code cannot be read, is left to its check."""
    from .source import code_names, py_func

    fn = py_func(kernel)
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    names = code_names(code)
    if {"gridsize", "gridDim"} & names:
        return ""
    if any(hasattr(getattr(fn, "__globals__", {}).get(n), "py_func") for n in names):
        return ""  # a device function may hold the loop
    loop = (
        "`q0, r0 = cuda.grid(2)` and `sq, sr = cuda.gridsize(2)`, then loops from r0 in steps of sr and "
        "from q0 in steps of sq"
        if op in ("im2col", "col2im")  # the 2-D launches
        else "`for i in range(cuda.grid(1), n, cuda.gridsize(1)):`"
    )
    launch = (
        "exactly one thread per generator state, whatever the number of elements"
        if op in ("dropout_forward", "dropout_backward")  # lab 08's fixed grid
        else "one block of 8 threads in the simulator; on a GPU the grid is capped at CUDA's limits for big batches"
    )
    return (
        f"{op}'s kernel must be a grid-stride loop: training launches it with fewer threads than elements ({launch}), "
        f"so each thread must step over the elements: {loop}. Without the loop only the first threads' elements are "
        "computed."
    )


# Lab 08's dropout kernel serves both dropout ops (its exercise 4 wrote the backward, lesson 08's exercise 5 the
# forward): both launch it, one thread per generator state, the backward on the states as they were before the forward.
DROPOUT_OPS = ("dropout_forward", "dropout_backward")
# The launcher of gpulab.kernels.nn_ops that training calls for each op (the checks launch as it does).
LAUNCHERS = {op: {"matmul": "gemm"}.get(op, "dropout" if op in DROPOUT_OPS else op) for op in LEARNER_OPS}
# The course's kernel for each op, whose parameters training's launcher passes (gpulab.kernels.nn_ops).
COURSE_KERNELS = {
    op: {"matmul": "gemm_kernel", "adam_update": "adam_kernel"}.get(
        op, "dropout_kernel" if op in DROPOUT_OPS else f"{op}_kernel"
    )
    for op in LEARNER_OPS
}


def signature_mismatch(op: str, kernel: Any) -> str:
    """Why ``kernel`` cannot be launched as ``op``'s kernel ("" when it can, or when its parameters cannot be
    read): training's launcher passes the course kernel's parameters, so the number must match."""
    import inspect

    from .kernels import nn_ops
    from .source import py_func

    try:
        mine = inspect.signature(py_func(kernel)).parameters
        course = inspect.signature(py_func(getattr(nn_ops, COURSE_KERNELS[op]))).parameters
    except (TypeError, ValueError, AttributeError):
        return ""
    if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in mine.values()):
        return ""  # *args: left to the launch
    name = getattr(py_func(kernel), "__name__", "your kernel")
    if len(mine) == len(course):
        return _order_mismatch(op, name, list(mine), list(course))
    return (
        f"{op}'s kernel {name}({', '.join(mine)}) takes {len(mine)} parameter{'s' if len(mine) != 1 else ''}, but "
        f"training's launcher nn_ops.{LAUNCHERS[op]} passes {len(course)}: those of the course's kernel, "
        f"{COURSE_KERNELS[op]}({', '.join(course)}), in this order. Change your kernel's `def` line to take these "
        f"{len(course)} parameters, rerun that cell, then this check."
    )


# The course kernels' parameters that are numbers (sizes, strides, scalars), not arrays: a learner parameter of one
# of these names where the launcher passes an array (or an array's name where it passes a number) is in another
# lab's order.
_NUMBER_PARAMS = frozenset("k kh kw stride pad ho wo p lr_t b1 b2 eps_t".split())
# Where each op's kernel was met before lab 09, when its parameters were in another order.
_EARLIER = {
    "maxpool_backward": "lab 08's maxpool_backward_kernel(dout, arg, k, stride, dx)",
    "maxpool": "lab 07's maxpool_kernel(x, k, stride, out)",
    "im2col": "lab 07's im2col_kernel(x, k, stride, pad, cols)",
}


def _order_mismatch(op: str, name: str, mine: list[str], course: list[str]) -> str:
    """Why ``mine`` (as many parameters as ``course``) are in another order than the launcher passes ("" when they
    may be right): the same names in another order, or a number's name where an array goes (or the other way)."""
    numbers = (_NUMBER_PARAMS & set(course)) - ({"p"} if op == "adam_update" else set())  # adam's p: an array
    swapped = sorted(mine) == sorted(course) and mine != course
    misplaced = [
        (m, c) for m, c in zip(mine, course) if m != c and ((m in numbers) != (c in numbers)) and m in set(course)
    ]
    if not (swapped or misplaced):
        return ""
    earlier = f" ({_EARLIER[op]} had another order)" if op in _EARLIER else ""
    where = f": your `{misplaced[0][0]}` is where the launcher passes `{misplaced[0][1]}`" if misplaced else ""
    return (
        f"{op}'s kernel {name}({', '.join(mine)}) takes its parameters in another order than training's launcher "
        f"nn_ops.{LAUNCHERS[op]} passes them{where}. The launcher passes, in this order, {COURSE_KERNELS[op]}"
        f"({', '.join(course)}){earlier}. Change your kernel's `def` line to ({', '.join(course)}), rerun that cell, "
        "then this check."
    )
