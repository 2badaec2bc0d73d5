"""Check a learner's plain NumPy function (not a kernel) with :func:`gpulab.exercises.check_kernel`.

Lesson 11 and lab 11 have exercises that are napkin math on arrays (joules per image, dollars per epoch,
a systolic array's clock step). :func:`check_function` runs them through the same harness as the kernels,
so the learner gets the same verdicts: "not implemented yet", which input and index went wrong, expected
vs got, and the hint of a known mistake. Inputs reach the function as NumPy arrays in both modes.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import runtime

__all__ = ["as_host", "check_function", "compare", "or_reference"]


def check_function(fn: Callable[..., Any], spec: Callable[..., Any], *, inputs: Callable[[Any, np.random.Generator], tuple],
                   sizes: Sequence[Any], points: float = 1, rtol: float = 1e-6, atol: float = 1e-9,
                   mistakes: dict[str, Callable[..., Any]] | None = None, out_names: Sequence[str] | None = None,
                   name: str | None = None) -> Any:
    """Compare ``fn(*inputs)`` with ``spec(*inputs)`` on every size; returns a :class:`CheckResult`.

    ``fn`` returns one array (or number) or a tuple of them, like ``spec``. Mistakes are ``{hint: wrong_spec}``
    where ``wrong_spec`` gives the first output that such a mistake gets wrong.
    """
    from .exercises import check_kernel

    n_in = [0]

    def count(size: Any, rng: np.random.Generator) -> tuple:
        ins = inputs(size, rng)
        ins = tuple(ins) if isinstance(ins, (tuple, list)) else (ins,)
        n_in[0] = len(ins)
        return ins

    host = as_host(fn, lambda: n_in[0], name)
    return check_kernel(fn, spec, inputs=count, sizes=sizes, host=host, name=host.__name__, points=points,
                        rtol=rtol, atol=atol, mistakes=mistakes, out_names=out_names)


def as_host(fn: Callable[..., Any], n_inputs: int | Callable[[], int], name: str | None = None) -> Callable[..., None]:
    """A ``host=`` function for :func:`gpulab.exercises.check_kernel` that calls the plain function ``fn`` on
    the first ``n_inputs`` arguments (as NumPy arrays) and writes what it returns into the outputs."""

    def host(*call: Any) -> None:
        k = n_inputs() if callable(n_inputs) else n_inputs
        ins = [np.asarray(runtime.to_host(x)) if hasattr(x, "shape") else x for x in call[:k]]
        outs = call[k:]
        got = fn(*ins)
        got = got if isinstance(got, tuple) else (got,)
        if len(got) != len(outs):
            raise ValueError(f"{host.__name__} returned {len(got)} value(s); it must return {len(outs)}.")
        for out, value in zip(outs, got):
            out[...] = runtime.array_module(out).asarray(np.asarray(value, dtype=out.dtype).reshape(out.shape))

    host.__name__ = name or getattr(fn, "__name__", "function")
    return host

def or_reference(result: Any, fn: Callable[..., Any], reference: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` once its check ``result`` passed, else ``reference`` (saying so), so the cells after an
    exercise run whether or not the learner has solved it yet."""
    if getattr(result, "passed", False):
        return fn
    name = getattr(fn, "__name__", "function")
    ref = f"{getattr(reference, '__module__', 'gpulab')}.{getattr(reference, '__qualname__', 'reference')}"
    print(f"Your {name} has not passed its check yet: the cells below use the library's {ref} instead.")
    return reference


def compare(prediction: float | None, actual: float, *, unit: str = "", what: str = "") -> str:
    """Print (and return) a learner's ``prediction`` next to ``actual`` (``what`` says what kind of number that is)."""
    unit_s = f" {unit}" if unit else ""
    if prediction is None:
        text = f"{actual:,.4g}{unit_s} {what}(enter a prediction first next time)"
    elif prediction > 0 and actual > 0:
        ratio = max(prediction, actual) / min(prediction, actual)
        text = (f"{actual:,.4g}{unit_s} {what}vs your prediction {prediction:,.4g}{unit_s}: "
                + ("within 25%, well done." if ratio <= 1.25 else f"off by a factor {ratio:,.1f}."))
    else:
        text = f"{actual:,.4g}{unit_s} {what}vs your prediction {prediction:,.4g}{unit_s}."
    print(text)
    return text
