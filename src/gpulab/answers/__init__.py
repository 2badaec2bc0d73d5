"""Reference answers to the exercises inside lessons 05-10, and two small helpers the lessons use.

The lesson source notebooks hold each answer between ``### BEGIN SOLUTION`` / ``### END SOLUTION``;
the learner's version has ``raise NotImplementedError`` there instead. The same kernels live here
(one module per lesson, the single source the notebooks are built from; a test checks they agree),
so a learner can ask for one, and later cells can go on with the reference when the learner's
kernel is not written yet::

    from gpulab import answers
    answers.reveal("block_max_kernel")               # prints the reference source
    k = answers.use(result, my_kernel, "block_max_kernel")   # mine if it passed, else the reference
    answers.compare(my_guess, measured, unit="reads", why="...")   # a prediction against a measurement
"""

from __future__ import annotations

import html
import importlib
import inspect
import pkgutil
from dataclasses import dataclass
from typing import Any

__all__ = ["Comparison", "compare", "lessons", "reference", "reveal", "source", "use"]



def lessons() -> list[str]:
    """The answer modules, one per lesson (``lesson05``, ...)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("lesson"))


def _modules() -> list[Any]:
    return [importlib.import_module(f"{__name__}.{m}") for m in lessons()]


def reference(name: str) -> Any:
    """The reference kernel (or function) called ``name`` from any lesson's answers."""
    for mod in _modules():
        if name in getattr(mod, "__all__", ()):
            return getattr(mod, name)
    known = sorted(n for mod in _modules() for n in mod.__all__)
    raise KeyError(f"no answer called {name!r}; answers exist for: {', '.join(known)}.")


def source(name: str) -> str:
    """The source text of the reference answer ``name``."""
    obj = reference(name)
    fn = getattr(obj, "py_func", None) or obj
    return inspect.getsource(fn)


def reveal(name: str) -> None:
    """Print the reference answer ``name`` (try the exercise first: the check tells you what is wrong)."""
    print(source(name))


def use(result: Any, mine: Any, name: str) -> Any:
    """``mine`` if its check ``result`` passed, else the reference ``name``, saying so."""
    if getattr(result, "passed", False):
        return mine
    status = getattr(result, "status", "not checked")
    print(f"{name}: yours is {status}, so the cells below use the reference answer "
          f"(gpulab.answers.reveal({name!r}) shows it).")
    return reference(name)


@dataclass
class Comparison:
    """A prediction next to the measured figure, with the reason for the gap."""

    predicted: Any
    measured: Any
    unit: str = ""
    why: str = ""

    @property
    def entered(self) -> bool:
        return self.predicted is not None

    def _lines(self) -> list[str]:
        unit = f" {self.unit}" if self.unit else ""
        if not self.entered:
            what = "Measured" if isinstance(self.measured, (int, float)) else "The answer"
            head = f"No prediction entered (replace None above and rerun). {what}: {_fmt(self.measured)}{unit}."
        elif isinstance(self.measured, (int, float)) and isinstance(self.predicted, (int, float)):
            ratio = self.predicted / self.measured if self.measured else float("inf")
            verdict = "spot on" if abs(ratio - 1) <= 0.1 else f"{ratio:.2g}x the measured value"
            head = f"You predicted {_fmt(self.predicted)}{unit}; measured {_fmt(self.measured)}{unit} ({verdict})."
        else:
            same = str(self.predicted).strip().lower() == str(self.measured).strip().lower()
            head = f"You predicted {self.predicted!r}; the answer is {self.measured!r} ({'right' if same else 'not quite'})."
        return [head] + ([f"Why: {self.why}"] if self.why else [])

    def __str__(self) -> str:
        return "\n".join(self._lines())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head, *rest = self._lines()
        body = "".join(f"<p style='margin:2px 0'>{html.escape(t)}</p>" for t in rest)
        return (f"<div style='border-left:4px solid #4c78a8;padding:4px 10px'><p style='margin:2px 0'><b>"
                f"{html.escape(head)}</b></p>{body}</div>")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def compare(predicted: Any, measured: Any, *, unit: str = "", why: str = "") -> Comparison:
    """The learner's ``predicted`` value (None: not entered) against ``measured``, and why they differ."""
    return Comparison(predicted, measured, unit, why)
