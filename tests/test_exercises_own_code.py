"""gpulab.exercises.own_code: a submission that is, or calls, one of gpulab's reference implementations gets 0 points
and a verdict naming it (alias, wrapper, device function, helper, closure, ufunc, cycle), while every answer the
lessons and labs ship passes unchanged (their cells run as a notebook runs them: tests/own_code_cells.py).

In gpu-check's tests stage (gpulab.gpucheck_plan.GPU_TESTS) the same tests walk numba-cuda's own dispatchers (kernels,
device functions) and the shipped answers as a GPU defines them; the two cases a GPU cannot run are skipped there."""

from __future__ import annotations

import glob
import inspect
from pathlib import Path

import numpy as np
import pytest
from numba import cuda, vectorize

import gpulab.kernels.reduce
from gpulab.exercises import check_kernel
from gpulab.exercises.own_code import module_of, own_code_check, reference_used
from gpulab.kernels.matmul import matmul, matmul_naive_kernel
from gpulab.lessons import pipelined
from gpulab.lessons.device_fns import at as gpulab_at  # lesson 01's device function
from gpulab.problems._stand_ins import dropout_kernel
from gpulab.source import rebound
from own_code_cells import ROOT, recorded_checks

# numba-cuda compiles a GPU ufunc for its signatures where it is defined, and at(a, i, j) indexes a 2-D array, not
# the float32 scalar the ufunc gets: a typing error on a GPU. The simulator makes the ufunc without compiling it.
simulator_only_ufunc = pytest.mark.skipif(
    gpulab.is_gpu(), reason="a GPU compiles the ufunc where it is defined, and at() cannot index a float32 scalar"
)


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
        "the matmul_kernel you handed in is gpulab.kernels.matmul.matmul_naive_kernel, gpulab's own reference "
        "implementation. This check grades code you wrote, so it gives no points for gpulab's"
    )
    assert "write matmul_kernel yourself" in res.hint and "after you finish" in res.hint
    assert "Traceback" not in str(res)


def test_without_the_name_the_exercise_asks_for_the_verdict_names_the_kernel_itself():
    from gpulab import problems

    for res in [_matmul_check(matmul_naive_kernel), problems.lab03.MATMUL.check(matmul_naive_kernel)]:  # lab03.matmul
        assert res.details["own_code"] is False, res
        assert res.message.startswith("your matmul_naive_kernel is gpulab.kernels.matmul.matmul_naive_kernel, "), res
        assert "write matmul_naive_kernel yourself" in res.hint, res


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
        out[0] = gpulab_at(x, 0, 0)

    found = reference_used(kernel)
    assert found is not None and found.reference == "gpulab.lessons.device_fns.at"


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


@simulator_only_ufunc
def test_a_gpu_ufunc_whose_scalar_function_calls_a_gpulab_device_function():
    @vectorize(["float32(float32)"], target="cuda")
    def relu(x):
        return max(gpulab_at(x, 0, 0), 0.0)

    found = reference_used(relu)
    assert found is not None and found.reference == "gpulab.lessons.device_fns.at"
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
    if gpulab.is_gpu() and Path(path).stem == "lab09_training":
        # once its check is recorded, the training cell goes on to train the CNN at gpu sizes (MNIST: a download
        # when there is no local copy); in simulator mode cap.check_ptx() stops it first (no source to compile)
        pytest.skip("on a GPU lab 09's check cell trains the CNN on MNIST after the recorded check")
    checks = recorded_checks(Path(path))
    for label, problem, kernel in checks:
        name = str(getattr(kernel, "__name__", problem.name))
        host = getattr(problem, "host", None)  # a Pipelined operation (lesson 02, lab 02) has none
        assert own_code_check(name, (kernel, host), given=problem.given, spec=problem.spec) is None, label


def test_every_lesson_exercise_is_checked_in_its_notebook():
    from gpulab import lessons

    seen = {
        p.name
        for path in glob.glob(str(ROOT / "notebooks" / "[0-9]*.ipynb"))
        for _, p, _ in recorded_checks(Path(path))
    }
    assert sorted(e.problem.name for e in lessons.EXERCISES.values() if e.problem.name not in seen) == []


# --- the pipelined host functions (lesson 02, lab 02) and lab 06's dict specs -----------------------


def _pipelined_by_reference(alpha, x_h, y_h, out_h, chunk, n_streams):
    pipelined.pipelined_saxpy(alpha, x_h, y_h, out_h, chunk, n_streams)


def test_the_pipelined_check_refuses_gpulabs_answer_and_a_wrapper_of_it():
    for fn, said in [
        (pipelined.pipelined_saxpy, "the pipelined_saxpy you handed in is gpulab.lessons.pipelined.pipelined_saxpy"),
        (_pipelined_by_reference, "the pipelined_saxpy you handed in calls gpulab.lessons.pipelined.pipelined_saxpy"),
    ]:
        res = pipelined.check_pipelined(fn, cases=[(300, 100, 3)])
        assert res.status == "failed" and res.score == 0 and res.details["own_code"] is False, res
        assert res.message.startswith(said) and "nothing was run" in res.message, res.message
        assert [c.name for c in res.checks] == ["own code"]
    trusted = pipelined.check_pipelined(pipelined.pipelined_saxpy, cases=[(300, 100, 3)], trusted=True)
    assert trusted.passed and trusted.details["trusted"] is True


def test_lab02s_pipelined_add_may_launch_the_given_add_kernel_but_not_call_an_answer():
    from gpulab import problems
    from gpulab.kernels.elementwise import add_kernel

    def pipelined_add(x_h, y_h, out_h, chunk, n_streams):  # launches gpulab's add_kernel, as the lab says
        streams = [cuda.stream() for _ in range(n_streams)]
        bufs = [[cuda.device_array(chunk, np.float32) for _ in range(3)] for _ in range(n_streams)]
        for k, start in enumerate(range(0, x_h.size, chunk)):
            s, part = streams[k % n_streams], slice(start, min(start + chunk, x_h.size))
            x_d, y_d, out_d = (b[: part.stop - start] for b in bufs[k % n_streams])
            x_d.copy_to_device(x_h[part], stream=s)
            y_d.copy_to_device(y_h[part], stream=s)
            add_kernel[(x_d.size + 127) // 128, 128, s](x_d, y_d, out_d)
            out_d.copy_to_host(out_h[part], stream=s)
        cuda.synchronize()

    def by_saxpy(x_h, y_h, out_h, chunk, n_streams):
        _pipelined_by_reference(np.float32(1), x_h, y_h, out_h, chunk, n_streams)

    sizes = [(300, 100, 3)]
    assert problems.lab02.PIPELINED_ADD.check(pipelined_add, sizes=sizes).score == 3
    res = problems.lab02.PIPELINED_ADD.check(by_saxpy, sizes=sizes)
    assert res.score == 0 and res.details["own_code"] is False, res
    assert "calls gpulab.lessons.pipelined.pipelined_saxpy (through by_saxpy -> _pipelined_by_reference)" in (
        res.message
    )


def test_lab06s_dict_spec_answers_go_through_the_own_code_stage():
    from gpulab import problems
    from gpulab.lessons import answers_05_10

    def adam_elementwise_spec():
        return answers_05_10.axpy_elementwise_spec()

    def grad_norm_spec():
        return dict(answers_05_10.axpy_elementwise_spec())

    for problem, fn in [(problems.lab06.ADAM, adam_elementwise_spec), (problems.lab06.GRAD_NORM, grad_norm_spec)]:
        res = problem.check(fn)
        assert res.score == 0 and res.details["own_code"] is False, res
        assert res.message.startswith(f"your {fn.__name__} calls gpulab.lessons.answers_05_10.axpy_elementwise_spec")


def test_a_trusted_check_skips_the_stage_and_earns_nothing_in_a_lab_report():
    from gpulab import grading, lessons

    ex = lessons.exercise("01", "add")
    assert ex.check(ex.reference).details["own_code"] is False
    res = ex.check(ex.reference, trusted=True)
    assert res.passed and res.details["trusted"] is True and "own_code" not in res.details
    assert grading.report(res) == 0.0
    assert "trusted" not in inspect.signature(lessons.check).parameters  # the learners' call


@pytest.mark.parametrize(
    "check, reference, expected",
    [
        ("lesson 05 histogram", "gpulab.kernels.histogram.histogram_shared_kernel", "histogram_privatized_kernel"),
        (
            "lesson 05 histogram",
            "gpulab.lessons.answers_05_10.histogram_privatized_kernel",
            "histogram_privatized_kernel",
        ),
        ("capstone dropout_forward", "gpulab.kernels.nn_kernels.dropout_kernel", "dropout_forward"),
        ("capstone dropout_backward", "gpulab.problems._stand_ins.dropout_kernel", "dropout_backward"),
    ],
)
def test_the_newer_exercises_refuse_gpulabs_kernels(check, reference, expected):
    """Named by what the exercise asks for (the lesson's kernel, the capstone's op), not by gpulab's kernel's own
    name, which is not one the learner wrote."""
    import importlib

    from gpulab import capstone, lessons

    module, name = reference.rsplit(".", 1)
    kernel = getattr(importlib.import_module(module), name)
    if check.startswith("lesson"):
        res = lessons.check("05", "histogram_privatized", kernel)
    else:
        res = capstone.Capstone().register(check.split()[1], kernel)
    assert res.score == 0 and res.details["own_code"] is False, res
    said = f"the {expected} you handed in is {reference}, gpulab's own reference"
    assert res.message.startswith(said), res.message
    assert f"write {expected} yourself" in res.hint, res.hint


def test_the_capstone_specs_are_reference_code_and_its_launchers_are_not():
    """capstone_specs holds the NumPy answers of lab 09's ops; capstone_hosts wraps every learner kernel the capstone
    checks, so refusing it would refuse every learner."""
    from gpulab import capstone_specs
    from gpulab.exercises.own_code import is_reference_module

    assert is_reference_module(capstone_specs._xent_spec.__module__)
    assert not is_reference_module("gpulab.capstone_hosts") and not is_reference_module("gpulab.capstone_problems")


def test_a_ring_that_calls_the_librarys_ring_steps_gets_no_points():
    """Lesson 10's ring_allreduce: scaling.ring_steps is defined in gpulab.scaling_data_parallel (scaling re-exports
    it), which must count as reference code as gpulab.scaling does."""
    from gpulab import lessons, scaling

    def ring_steps(buffers):
        return scaling.ring_steps(buffers)

    res = lessons.check("10", "ring_allreduce", ring_steps)
    assert not res.passed and res.details["own_code"] is False, res
    assert "calls gpulab.scaling_data_parallel.ring_steps, gpulab's own reference" in res.message, res.message
