"""A check called the wrong way: what it was given in place of the learner's code, and options (``sizes=``,
``seed=``, ``launch=``) that are not what the check takes. Each becomes a verdict ("error", 0 points) that says
what the check expected, what it was given and what to write, never a traceback from gpulab's internals.

Most of these are the learner's own slips in a notebook cell: a launch ``k[b, t](...)`` (which returns None)
passed in place of the kernel ``k``, the kernel's name in quotes, a host= check's function passed positionally.
The last is also a grading hole closed here: a Problem defined with ``host=`` holds gpulab's reference stand-in,
which a check runs only for gpulab's own tests (``trusted=True``), never in place of the learner's function.
"""

from __future__ import annotations

import numbers
import re
from typing import Any

from .result import CheckResult, log_result

__all__ = [
    "bad_option",
    "not_a_kernel",
    "own_options",
    "refused",
    "reference_host_refused",
    "wrong_callable",
]


def refused(name: str, points: float, message: str, hint: str = "") -> CheckResult:
    """The verdict for a check called the wrong way: status "error", 0 of ``points``, logged for the grader like
    any other verdict."""
    res = CheckResult(name, "error", 0.0, float(points), message, hint)
    log_result(res)
    return res


def given(x: Any) -> str:
    """What the learner passed, in words: "None", "the text 'add_kernel'", "the function add_kernel", "a tuple"."""
    if x is None:
        return "None"
    if isinstance(x, str):
        return f"the text {x!r}"
    name = getattr(x, "__name__", None)
    if callable(x) and isinstance(name, str):
        return f"the function {name}"
    kind = type(x).__name__
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind} ({_short(x)})"


def _short(x: Any) -> str:
    """An option's value as the call wrote it, shortened: a function by its name."""
    name = getattr(x, "__name__", None)
    if callable(x) and isinstance(name, str):
        return name
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


_LAUNCH_NONE = (
    " A launch, kernel[blocks, threads](...), runs the kernel and returns None: pass the kernel itself (its name, "
    "no brackets or parentheses)."
)


def not_a_kernel(kernel: Any, example: str, what: str = "kernel") -> str | None:
    """Why ``kernel`` cannot be the learner's kernel (None, a string, a number, a result), or None when it can
    be (anything callable: a @cuda.jit kernel, or a plain function the harness explains itself). ``what``:
    "kernel", or "function" for an exercise whose answer is a plain function."""
    if callable(kernel):
        return None
    head = f"the check needs your {what} itself, e.g. {example}; it was given {given(kernel)}."
    if kernel is None:
        launch = _LAUNCH_NONE if what == "kernel" else " A function that ends without `return` gives None too."
        return head + launch + f" If the cell that defines your {what} has not run yet, run it first."
    if isinstance(kernel, str):
        return head + " Pass the function, not its name: no quotes around it."
    if what == "kernel":
        return head + " Pass the @cuda.jit function your cell defines, not a value it computed."
    return head + " Pass the function your cell defines (no parentheses after its name), not a value it returned."


def reference_host_refused(name: str, usage: str, kernel: Any, points: float) -> CheckResult:
    """The verdict for ``problem.check(fn)`` or ``problem.check()`` on a Problem whose ``host=`` is gpulab's
    reference (or that has no launch of its own): the learner's function goes in through ``host=``; the reference
    is never run in its place. ``usage``: the call as the notebook writes it (the Problem's)."""
    example = usage or f"{name}.check(host=your_function)"
    if "host=" not in example:  # a check that takes the function positionally (lab 06's) was given nothing
        return refused(name, points, not_a_kernel(kernel, example, "function") or f"the check needs {example}.")
    what = "nothing to check" if kernel is None else f"{given(kernel)} as a positional argument, which it does not run"
    return refused(
        name,
        points,
        f"{name}.check needs your code through host=: {example}. It was given {what}.",
        f"write the call as the notebook shows it, {example}: host= is the function the check runs.",
    )


def bad_option(key: str, value: Any) -> str | None:
    """Why ``key=value`` is not an option this check takes (a message), or None when it can be. Only what can
    be told from the value alone: a size list, a seed, a launch function, a host function, a time limit."""
    if key == "sizes":
        if isinstance(value, (list, tuple, range)) and len(value) > 0:
            return None
        return f"sizes= must be a list of input sizes, e.g. sizes=[7, 100] (or [(33, 17)] for shapes); got {value!r}."
    if key == "seed":
        if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0:
            return None
        return f"seed= must be a whole number >= 0 (it seeds NumPy's random inputs), e.g. seed=7; got {value!r}."
    if key == "launch":
        if value is None or callable(value):
            return None
        return (
            "launch= must be a function of the kernel's arguments returning (blocks, threads), e.g. "
            f"launch=lambda a, b, out: (4, 32) or problems.launch_1d(32); got {given(value)}."
        )
    if key == "host":
        if value is None or callable(value):
            return None
        return f"host= must be a function the check calls, e.g. host=my_function (no parentheses); got {given(value)}."
    if key == "timeout":
        if isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value) > 0:
            return None
        return f"timeout= must be a number of seconds > 0, e.g. timeout=60; got {value!r}."
    return None


_OWN = ("sizes", "seed", "launch", "threads", "args", "host")  # options whose value can make the setup fail


def own_options(overrides: dict[str, Any], res: CheckResult) -> CheckResult:
    """A "setup error" verdict after a call that passed its own ``sizes=``, ``launch=``, ``threads=`` ... : the
    setup that failed is the call's, not the exercise's, so the verdict says which options the call gave (the
    exercise's author wrote the rest) instead of "not in your code"."""
    mine = [k for k in _OWN if k in overrides and overrides[k] is not None]
    if res.status != "setup error" or not mine:
        return res
    text = res.message.removeprefix("setup error in this exercise, not in your code: ")
    shown = ", ".join(f"{k}={_short(overrides[k])}" for k in mine)
    res.message = f"this call's options ({shown}) do not fit this exercise: {text}"
    res.hint = (
        "leave these options as the notebook gives them (or drop them: the check has its own), or pass values of "
        "the kind the exercise uses."
    )
    return res


_ARGS = re.compile(r"positional arguments? but \d+ (was|were) given|missing \d+ required|unexpected keyword")
HOST_ARGS_HINT = (
    "a host= function takes the exercise's inputs, then its output arrays, and writes its results into them. Where "
    "the notebook wraps your functions for the check (host=L10.budget_host(training_bytes, largest_batch)), pass "
    "that wrapper's result as host=, not your function itself; else give your function those parameters."
)


DEVICE_FN_HINT = (
    "a device function (@cuda.jit(device=True)) is called by kernels and cannot be launched: the check launches "
    "what you pass with [blocks, threads]. Drop device=True if it is meant to be the kernel (a kernel returns "
    "nothing: it writes its results into its output arrays)."
)


def wrong_callable(exc: BaseException, harness: bool, text: str, name: str, tail: str) -> tuple[str, str, str] | None:
    """The verdict when the check's own call or launch (``harness``: raised where the check made it) failed because
    the learner passed the wrong kind of function, or None (gpulab's own failure, then):

    * a host= function ``name`` whose parameters are not the exercise's (``name() missing 1 required positional
      argument``), e.g. a lab's function passed without the adapter the notebook wraps it in;
    * a device function launched as a kernel (numba-cuda's "Cannot compile a device function as a kernel", which
      the simulator raises too, with what to do)."""
    if not harness:
        return None
    if isinstance(exc, RuntimeError) and "Cannot compile a device function as a kernel" in text:
        return "error", f"{name or 'your function'} is a device function, not a kernel: {text}{tail}", DEVICE_FN_HINT
    called = name and re.match(rf"([\w<>.]+\.)?{re.escape(name)}\(\)", text)  # a nested function's qualified name
    if not (isinstance(exc, TypeError) and called and _ARGS.search(text)):
        return None
    return (
        "error",
        f"the check called your function {name} with the exercise's arguments (the inputs on the `input:` line, "
        f"then the outputs), and it does not take them: {text}{tail}",
        HOST_ARGS_HINT,
    )
