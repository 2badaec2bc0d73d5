"""gpulab.exercises.own_code: a submission that is, or calls, one of gpulab's reference implementations gets 0 points
and a verdict naming it (alias, wrapper, device function, helper, closure, ufunc, cycle), while every answer the
lessons and labs ship passes unchanged (their cells run as a notebook runs them: tests/own_code_cells.py)."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, vectorize

import gpulab.kernels.reduce
from gpulab.exercises import check_kernel
from gpulab.exercises.own_code import module_of, own_code_check, reference_used
from gpulab.kernels.cooperative import _barrier
from gpulab.kernels.matmul import matmul, matmul_naive_kernel
from gpulab.problems._stand_ins import dropout_kernel
from gpulab.source import rebound
from own_code_cells import ROOT, recorded_checks


def _matmul_check(kernel, **kw):
    return check_kernel(
        kernel,
        spec=lambda a, b: a @ b,
        inputs=lambda s, rng: (rng.random((s, 3), dtype=np.float32), rng.random((3, s), dtype=np.float32)),
        sizes=[2, 5],
        threads=(8, 8),
        race_check=False,
        **kw,
    )


def test_an_alias_of_a_reference_kernel_gets_no_points_and_says_what_it_is():
    matmul_kernel = matmul_naive_kernel
    res = _matmul_check(matmul_kernel, name="matmul_kernel")
    assert res.status == "failed" and res.score == 0 and res.details["own_code"] is False
    assert res.message.startswith(
        "your matmul_kernel is gpulab.kernels.matmul.matmul_naive_kernel, gpulab's own reference implementation. "
        "This check grades code you wrote, so it gives no points for gpulab's"
    )
    assert "write matmul_kernel yourself" in res.hint and "after you finish" in res.hint
    assert "Traceback" not in str(res)


def test_the_same_kernel_given_by_the_exercise_passes():
    assert _matmul_check(matmul_naive_kernel, given=[matmul_naive_kernel]).passed


def test_a_wrapper_calling_a_reference_through_a_module_attribute():
    def my_softmax(x):
        return gpulab.kernels.reduce.softmax_rows(x)

    found = reference_used(my_softmax)
    assert found is not None and found.reference == "gpulab.kernels.reduce.softmax_rows"
    message, _ = own_code_check("my_softmax", [my_softmax])  # type: ignore[misc]
    assert message.startswith("your my_softmax calls gpulab.kernels.reduce.softmax_rows, gpulab's own reference")


def test_a_kernel_calling_a_gpulab_device_function():
    @cuda.jit
    def kernel(x, out):
        _barrier()
        out[0] = x[0]

    found = reference_used(kernel)
    assert found is not None and found.reference == "gpulab.kernels.cooperative._barrier"


def test_a_nested_helper_is_followed_and_named_in_the_message():
    def inner(a, b):
        return matmul(a, b)

    def outer(a, b):
        return inner(a, b)

    message, _ = own_code_check("outer", [outer])  # type: ignore[misc]
    assert "calls gpulab.kernels.matmul.matmul (through outer -> inner)" in message
    assert reference_used(outer, given=[matmul]) is None


def test_a_closure_cell_and_a_default_argument_are_followed():
    impl = gpulab.kernels.reduce.sum_tree

    def by_closure(x):
        return impl(x)

    def by_default(x, f=gpulab.kernels.reduce.sum_warp):
        return f(x)

    assert reference_used(by_closure).reference == "gpulab.kernels.reduce.sum_tree"  # type: ignore[union-attr]
    assert reference_used(by_default).reference == "gpulab.kernels.reduce.sum_warp"  # type: ignore[union-attr]


def test_a_gpu_ufunc_whose_scalar_function_calls_a_gpulab_device_function():
    @vectorize(["float32(float32)"], target="cuda")
    def relu(x):
        _barrier()
        return max(x, 0.0)

    found = reference_used(relu)
    assert found is not None and found.reference == "gpulab.kernels.cooperative._barrier"
    assert found.via == ["relu"]


def test_two_learner_functions_calling_each_other_end_and_are_accepted():
    def ping(n):
        return 0 if n == 0 else pong(n - 1)

    def pong(n):
        return ping(n)

    ping.__globals__["pong"] = pong  # (module globals: as in a notebook, each finds the other by name)
    try:
        assert reference_used(ping) is None
    finally:
        del ping.__globals__["pong"]


def test_a_stand_in_the_check_binds_itself_is_not_the_learners():
    def step(x):
        return dropout_backward_kernel(x)  # noqa: F821 - bound by rebound, as lab 08's check does

    swapped = rebound(step, {"dropout_backward_kernel": dropout_kernel})
    assert reference_used(swapped) is None
    assert reference_used(rebound(step, {"other": 1}), given=()) is None  # an unbound name: nothing to follow


def test_the_exercises_own_spec_is_refused():
    def spec(a, b):
        return a @ b

    def answer(a, b):
        return spec(a, b)

    message, _ = own_code_check("answer", [answer], spec=spec)  # type: ignore[misc]
    assert "calls" in message and "the reference this check compares against" in message


def test_helpers_learners_are_meant_to_use_are_not_references():
    from gpulab import runtime
    from gpulab.kernels import blocks_for

    def host(x):
        return runtime.to_host(x), blocks_for(10, 4), gpulab.sizes(gpu=1, simulator=2)

    assert reference_used(host) is None
    assert module_of(matmul.__code__) == "gpulab.kernels.matmul"


@pytest.mark.parametrize(
    "path",
    sorted(glob.glob(str(ROOT / "labs" / "solutions" / "*.ipynb")))
    + sorted(glob.glob(str(ROOT / "notebooks" / "[0-9]*.ipynb"))),
    ids=lambda p: Path(p).stem,
)
def test_every_shipped_answer_is_its_own_code(path):
    checks = recorded_checks(Path(path))
    for label, problem, kernel in checks:
        name = str(getattr(kernel, "__name__", problem.name))
        assert own_code_check(name, (kernel, problem.host), given=problem.given, spec=problem.spec) is None, label


def test_every_lesson_exercise_but_the_pipelined_one_is_checked_in_its_notebook():
    from gpulab import lessons

    seen = {
        p.name
        for path in glob.glob(str(ROOT / "notebooks" / "[0-9]*.ipynb"))
        for _, p, _ in recorded_checks(Path(path))
    }
    assert sorted(e.problem.name for e in lessons.EXERCISES.values() if e.problem.name not in seen) == [
        "pipelined_saxpy"
    ]
