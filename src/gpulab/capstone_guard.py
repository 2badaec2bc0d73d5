"""The capstone's training checks (lab 09): what each output of a learner op is held to while the CNN trains.

:class:`gpulab.capstone_ops.LearnerOps` calls these after each op that runs a learner's kernel: :func:`finite`
(no NaN or inf; its ``guard``), :func:`dropout_draws` (a dropout op's output is the inverted dropout of its input
with the mask the states it was given draw; ``guard``) and :func:`same_as_course` (with ``verify``: the op, run
again as its check runs it into outputs pre-filled with NaN, gives the course kernel's result). Each raises
:class:`CapstoneError` naming the op, what was expected, what the kernel gave, and what to do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import runtime
from .errors import GpulabError

__all__ = [
    "CapstoneError",
    "Held",
    "all_finite",
    "draws_match",
    "dropout_draws",
    "dropout_failed",
    "finite",
    "not_finite",
    "same_as_course",
    "shape",
]


class CapstoneError(GpulabError):
    """A learner op is missing, failed its check, or produced NaN/inf during training."""

    # raised inside a check (the capstone's host functions, lab 09's tiny training step), its message is the verdict
    # itself: it names the op and says what to fix (gpulab.exercises.raised_elsewhere shows it without "gpulab's
    # code refused")
    is_verdict = True


class Held:
    """Checks computed on the GPU and not read yet (each a 0-d flag, True where the output passed), read together
    in one transfer: reading each at once would make the host wait for the GPU after every op."""

    LIMIT = 64  # held at most before they are read anyway (a loop that never updates, e.g. evaluation batches)

    def __init__(self) -> None:
        self.items: list[tuple[str, Any, Callable[[], None]]] = []  # (op, flag, what raises when it is down)

    def add(self, op: str, flag: Any, fail: Callable[[], None]) -> bool:
        """Hold ``op``'s check; True when the limit is reached (read them now)."""
        self.items.append((op, flag, fail))
        return len(self.items) >= self.LIMIT

    def drop(self) -> list[str]:
        """Forget every held check unread; the ops they were for, each once, in the order they were held."""
        held, self.items = self.items, []
        return list(dict.fromkeys(op for op, _, _ in held))

    def read(self) -> None:
        """Read every held flag and raise for the first op, in the order they were held, whose output failed."""
        held, self.items = self.items, []
        if not held:
            return
        xp = runtime.array_module(held[0][1])
        ok = runtime.to_host(xp.stack([flag for _, flag, _ in held]))
        for (_, _, fail), good in zip(held, ok.tolist()):
            if not good:
                fail()


def shape(a: Any) -> tuple[int, ...]:
    """``a.shape`` as plain ints, for messages."""
    return tuple(int(s) for s in a.shape)


# Where lab 09 checks each op (its exercises' check cells): what to re-run after fixing the kernel.
LAB09_EXERCISE = {
    "relu": 1,
    "relu_backward": 1,
    "maxpool": 2,
    "maxpool_backward": 2,
    "matmul": 3,
    "im2col": 4,
    "col2im": 4,
    "softmax_xent": 5,
    "adam_update": 5,
    "dropout_forward": 6,
    "dropout_backward": 6,
}


def rerun(op: str) -> str:
    """What to do after fixing ``op``'s kernel: re-run its check (lab 09's check cell), then the training."""
    n = LAB09_EXERCISE.get(op)
    cell = f"the check cell of lab 09's exercise {n}" if n else "its check"
    return (
        f"fix {op}'s kernel, re-run {cell} (or Capstone.register({op!r}, ...) outside the lab), then the training cell"
    )


def not_finite(op: str, where: str = "") -> CapstoneError:
    """The error for ``op`` whose output held NaN or inf; ``where``: which launch, output and elements."""
    return CapstoneError(
        f"op {op!r}: your kernel produced NaN or inf during training{where} (its check passed on small "
        "random inputs). Look for a read past the end of an array, a missing bounds check in the "
        f"grid-stride loop, or an accumulator that is not reset; {rerun(op)}."
    )


def where_not_finite(arrays: Sequence[Any], launch: int | None = None) -> str:
    """Where the first of ``arrays`` (on the host) that holds NaN or inf holds them, as a phrase for
    :func:`not_finite` (" (launch 3 of this training): output 1 of shape (4, 10) has 40 of 40 elements NaN or inf,
    the first at [0, 0]"); "" when none does."""
    for k, a in enumerate(arrays):
        bad = ~np.isfinite(np.asarray(a))
        if bad.any():
            first = [int(i) for i in np.argwhere(bad)[0]] if bad.ndim else []
            which = f"output {k + 1} of shape {shape(a)}" if len(arrays) > 1 else f"its output of shape {shape(a)}"
            at = f" (launch {launch} of this training)" if launch else ""
            return f"{at}: {which} has {int(bad.sum())} of {bad.size} elements NaN or inf, the first at {first}"
    return ""


def finite(op: str, *arrays: Any, launch: int | None = None) -> None:
    """Raise naming ``op`` when one of ``arrays`` (its outputs) holds NaN or inf."""
    if not all(bool(ok) for ok in all_finite(*arrays)):
        host = all(isinstance(a, np.ndarray) for a in arrays)
        raise not_finite(op, where_not_finite(arrays, launch) if host else "")


def all_finite(*arrays: Any) -> list[Any]:
    """Per array, whether every element is finite: a 0-d array of the arrays' own module (on a GPU it stays there,
    read later with the other checks of the step: :class:`gpulab.capstone_ops.LearnerOps`)."""
    return [runtime.array_module(a).isfinite(a).all() for a in arrays]


def draws_match(y: Any, ref: Any) -> Any:
    """Whether ``y`` is ``ref`` to float32 rounding (NaN where ``ref`` has NaN): the test of :func:`dropout_draws`,
    as a 0-d array of their module."""
    xp = runtime.array_module(y)
    return xp.isclose(y, ref.reshape(y.shape), rtol=1e-6, atol=0, equal_nan=True).all()


def same_as_course(op: str, inputs: str, names: Sequence[str], outs: Sequence[Any], course: Sequence[Any]) -> None:
    """Raise naming ``op`` where one of ``outs`` (your kernel's outputs, called ``names``, written into buffers
    pre-filled with NaN) differs from the course kernel's (``course``) on ``inputs`` (described in words)."""
    for name, got, exp in zip(names, outs, course):
        g = np.asarray(runtime.to_host(got))
        e = np.asarray(runtime.to_host(exp)).reshape(g.shape)
        bad = ~np.isclose(g, e, rtol=1e-4, atol=1e-5)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            unwritten = "; nan: never written" if np.isnan(g[bad]).any() else ""
            raise CapstoneError(
                f"op {op!r} on {inputs} (a step of the tiny CNN): your kernel's {name}{list(where)} is "
                f"{g[where]:.6g} where the course kernel gives {e[where]:.6g} ({int(bad.sum())} of {bad.size} "
                f"elements differ{unwritten}). Its check passed on other shapes, so look for what "
                "depends on the shape: a hard-coded size, a loop that stops early, an index that mixes up the "
                f"batch, channel or spatial dimensions; {rerun(op)}."
            )


def dropout_draws(op: str, out: str, inp: str, x: Any, p: float, y: Any, ref: Any) -> None:
    """Raise naming ``op`` unless ``y`` (output ``out`` of input ``inp``, here ``x``) is ``ref``, the inverted
    dropout of ``x`` with the mask of the states it was given (the host replay, or the course kernel), to float32
    rounding; the message says whether the mask, the scaling or unwritten elements are wrong."""
    xp = runtime.array_module(y)
    ref = ref.reshape(y.shape)
    bad = ~xp.isclose(y, ref, rtol=1e-6, atol=0, equal_nan=True)  # a NaN x is an upstream op's, named there
    if not bool(bad.any()):
        return
    g, e = np.asarray(runtime.to_host(y)), np.asarray(runtime.to_host(ref))
    wrong = np.asarray(runtime.to_host(bad))
    where = tuple(int(i) for i in np.argwhere(wrong)[0])
    fin = np.isfinite(g)
    flipped = int((((g == 0) != (e == 0)) & fin)[wrong].sum())  # kept where the draw dropped it, or swapped
    if not fin[wrong].all():
        why = "write every element: 0 where dropped, not nothing (nan: never written, or computed from nothing)"
    elif flipped:
        why = (
            f"{flipped} of them kept where the draw dropped the element, or dropped where it kept it: keep where "
            "u >= p (u = xoroshiro128p_uniform_float32(states, tid), one draw per element in grid-stride order, "
            "tid = cuda.grid(1)), write 0 where u < p"
        )
    else:
        why = f"the mask is right but the kept values are not {inp} / (1 - p): scale them by 1 / (1 - p)"
    raise CapstoneError(
        f"op {op!r} failed the training check '{out}[i] is 0 where the draw u < p (dropped), else {inp}[i] / "
        f"(1 - p) (kept)' on {inp} {shape(x)}, p = {float(p):g}: your kernel's {out}{list(where)} is "
        f"{g[where]:.6g}, the draws give {e[where]:.6g} ({int(wrong.sum())} of {wrong.size} elements "
        f"wrong); {why}; then {rerun(op)} (its check names the mistake)."
    )


def dropout_failed(op: str, out: str, inp: str) -> CapstoneError:
    """The error for a dropout op whose output failed the training check on a GPU when, read later with the step's
    other checks, its arrays no longer show the wrong element."""
    return CapstoneError(
        f"op {op!r} failed the training check '{out}[i] is 0 where the draw u < p (dropped), else {inp}[i] / "
        "(1 - p) (kept)' during a training step (its arrays changed before the check was read, so the wrong "
        f"element cannot be shown): {rerun(op)} (its check names the mistake)."
    )
