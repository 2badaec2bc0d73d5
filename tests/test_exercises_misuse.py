"""A check called the wrong way (gpulab.exercises.misuse): a host= check never runs its reference in place of the
learner's function, a launch's None or a kernel's name gets a verdict that says so, and options a call passes
(sizes=, seed=, launch=) are refused or named as the call's, not blamed on the exercise."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from gpulab import grading, problems
from gpulab.exercises import Problem, check_kernel
from gpulab.exercises.misuse import bad_option, not_a_kernel
from test_exercises_elementwise import add_good, add_inputs

L10 = problems.lab10


def _one_per_row(fn):
    """A host= function that writes ``fn(row)`` for each row of x (the learner's own, not an adapter)."""

    def host(x, out):
        out[...] = np.array([fn(r) for r in x])

    return host


SQUARE = Problem(
    "square",
    spec=lambda x: x**2,
    inputs=lambda n, rng: (rng.uniform(-1, 1, n).astype(np.float32),),
    sizes=[3, 10],
    host=_one_per_row(lambda v: v * v),  # gpulab's reference stand-in
    usage="SQUARE.check(host=per_row(square))",
)


def _wrong(x, out):
    out[...] = -1.0


# --- a host= Problem's reference never stands in for the learner's function ----------------------------------


@pytest.mark.parametrize(
    "call", [lambda: SQUARE.check(), lambda: SQUARE.check(_wrong), lambda: SQUARE.check(host=None)]
)
def test_a_reference_host_check_without_host_gives_no_points(call):
    res = call()
    assert res.status == "error" and res.score == 0 and res.max_score == 1, res
    assert "needs your code through host=: SQUARE.check(host=per_row(square))" in res.message
    assert grading.report(res) == 0


def test_the_refusal_says_what_it_was_given():
    assert "It was given nothing to check." in SQUARE.check().message
    positional = SQUARE.check(_wrong).message
    assert "It was given the function _wrong as a positional argument, which it does not run." in positional


def test_the_learners_function_through_host_is_what_runs():
    assert not SQUARE.check(host=_wrong).passed
    assert SQUARE.check(host=_one_per_row(lambda v: v * v)).passed


def test_the_reference_runs_only_trusted_and_scores_nothing_in_a_lab():
    res = SQUARE.check(trusted=True)
    assert res.passed and res.details["trusted"]
    assert grading.report(res) == 0


def test_lab10s_host_checks_refuse_a_positional_answer_even_a_wrong_one():
    def training_bytes(p, a, b, m):
        return (1, 2, 3, 4, 5)

    def largest_batch(p, a, gb, m):
        return 1

    wrong = L10.budget_host(training_bytes, largest_batch)
    for problem, usage in (
        (L10.BUDGET, "L10.BUDGET.check(host=L10.budget_host(training_bytes, largest_batch))"),
        (L10.SCALER, "L10.SCALER.check(host=L10.scaler_host(run_with_loss_scaling))"),
        (L10.RING, "L10.RING.check(host=L10.ring_host(reduce_scatter, all_gather))"),
        (L10.HIERARCHICAL, "L10.HIERARCHICAL.check(host=L10.hierarchical_host(hierarchical_allreduce))"),
    ):
        for res in (problem.check(), problem.check(wrong)):
            assert res.status == "error" and res.score == 0 and usage in res.message, res
    assert not L10.BUDGET.check(host=wrong).passed  # through host= it is run, and wrong


def test_a_problem_without_a_launch_asks_for_host():
    """lab 08's host-function checks have no threads=, launch= or host= of their own: the call must give host=."""

    def linear_host(*args):
        raise AssertionError("not run")

    res = problems.lab08.LINEAR_BACKWARD.check(linear_host)
    assert res.status == "error" and "problems.lab08.LINEAR_BACKWARD.check(host=linear_host)" in res.message
    gelu = problems.lab06.GELU.check(None)  # lab 06's take the function positionally
    assert gelu.status == "error" and "e.g. problems.lab06.GELU.check(gelu); it was given None" in gelu.message


def test_lab10_adapters_refuse_what_is_not_a_function():
    with pytest.raises(ValueError, match=r"budget_host\(training_bytes, largest_batch\) takes your functions"):
        L10.budget_host(None, None)
    with pytest.raises(ValueError, match="run_with_loss_scaling is a tuple"):
        L10.scaler_host((1, 2))
    with pytest.raises(ValueError, match="all_gather is None"):
        L10.ring_host(L10.reduce_scatter, None)


# --- the kernel: None (a launch's value), a name, a number -------------------------------------------------------


def test_a_launch_instead_of_the_kernel_is_named():
    x = np.ones(4, np.float32)
    launched = add_good[1, 32](x, x, np.empty_like(x))  # None
    res = problems.lab01.ADD.check(launched)
    assert res.status == "error" and res.score == 0
    assert "needs your kernel itself, e.g. check(add_kernel); it was given None" in res.message
    assert "returns None: pass the kernel itself" in res.message
    assert "gpulab's code" not in res.message


def test_not_a_kernel_passes_anything_callable():
    assert not_a_kernel(add_good, "check(add_kernel)") is None
    assert not_a_kernel(len, "check(add_kernel)") is None  # a plain function: the harness explains it itself
    assert "given a float (3.5)" in not_a_kernel(3.5, "check(add_kernel)")


def test_check_kernel_with_none_gives_a_verdict():
    res = check_kernel(None, lambda a, b: a + b, inputs=add_inputs, sizes=[3], threads=32)
    assert res.status == "error" and "it was given None" in res.message


# --- options a call passes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"sizes": 10}, "sizes= must be a list of input sizes, e.g. sizes=[7, 100]"),
        ({"sizes": []}, "sizes= must be a list of input sizes"),
        ({"seed": -1}, "seed= must be a whole number >= 0"),
        ({"seed": "a"}, "seed= must be a whole number >= 0 (it seeds NumPy's random inputs), e.g. seed=7; got 'a'"),
        ({"launch": (4, 32)}, "launch= must be a function of the kernel's arguments returning (blocks, threads)"),
        ({"timeout": 0}, "timeout= must be a number of seconds > 0"),
    ],
)
def test_a_bad_option_is_refused_with_its_form(options, says):
    res = problems.lab01.ADD.check(add_good, **options)
    assert res.status == "error" and res.score == 0 and says in res.message, res


def test_a_setup_error_from_the_calls_own_option_names_the_option():
    res = problems.lab01.ADD.check(add_good, sizes=[-1])
    assert res.status == "setup error" and "not in your code" not in res.message
    assert res.message.startswith("this call's options (sizes=[-1]) do not fit this exercise: inputs(-1, rng)")
    zero = problems.lab01.ADD.check(add_good, launch=lambda a, b, out: (0, 32))
    assert "this call's options (launch=<lambda>)" in zero.message and "at least 1 block" in zero.message
    floats = problems.lab01.ADD.check(add_good, launch=lambda a, b, out: (a.size / 32 + 1, 32))
    assert "blocks must be a whole number" in floats.message and "ceil_div" in floats.message


def test_the_exercises_own_setup_error_still_says_so():
    broken = Problem("broken", spec=lambda a, b: a + b, inputs=lambda n, rng: 1 / 0, sizes=[3], threads=32)
    res = broken.check(add_good)
    assert res.status == "setup error" and res.message.startswith("setup error in this exercise, not in your code")


def test_good_options_pass():
    assert bad_option("sizes", [(33, 17)]) is None and bad_option("seed", np.int64(3)) is None
    assert bad_option("launch", problems.launch_1d(32)) is None and bad_option("timeout", 1.5) is None
    res = problems.lab01.ADD.check(add_good, sizes=(5, 70), seed=3, launch=problems.launch_1d(32))
    assert res.passed, res


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: problems.launch_2d(32), "threads_per_block must be a pair (x, y)"),
        (lambda: problems.launch_2d((0, 4)), "must be >= 1, but got 0"),
        (lambda: problems.launch_2d("32,4"), "must be a pair (x, y), e.g. (16, 16), but got '32,4'"),
        (lambda: problems.launch_2d((64, 64)), "a block can hold at most 1024 threads"),
        (lambda: problems.launch_1d(-1), "threads per block (tpb) must be >= 1, but got -1"),
        (lambda: problems.launch_1d(32, arg="out"), "arg= is the position of the kernel argument"),
    ],
)
def test_launch_helpers_refuse_a_bad_block(make, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_launch_helpers_take_what_the_labs_pass():
    assert problems.launch_2d((32, 4), arg=0)(np.zeros((5, 70)))[1] == (32, 4)
    assert problems.launch_1d(np.int64(32))(np.zeros(65)) == (3, 32)


def test_a_host_function_with_other_parameters_is_not_blamed_on_gpulab():
    """A lab's own function passed as host= without the adapter the notebook wraps it in: the check's call of it
    fails on its parameters, which is the call's mistake, not gpulab's."""

    def training_bytes(p, a, b, m):
        return (1, 2, 3, 4, 5)

    res = L10.BUDGET.check(host=training_bytes)
    assert res.status == "error" and "gpulab's code" not in res.message and "report it" not in res.hint
    assert res.message.startswith("the check called your function training_bytes with the exercise's arguments")
    assert "pass that wrapper's result as host=" in res.hint


@cuda.jit(device=True)
def _add_device(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


def test_a_device_function_in_place_of_the_kernel_is_named_as_such():
    res = problems.lab01.ADD.check(_add_device)
    assert res.status == "error" and res.message.startswith("_add_device is a device function, not a kernel:")
    assert "gpulab's code" not in res.message and "report it" not in res.hint
    assert res.hint.startswith("a device function (@cuda.jit(device=True)) is called by kernels")
