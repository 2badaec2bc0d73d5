"""Explaining an exception raised during a launch by the learner's code (kernel or host function): which thread
and line raised it, and a hint for the usual mistakes (an index past the end, a float index, a number indexed, a
draw from something that is not a generator's states, a kernel whose parameters do not match the arguments it is
launched with). An exception raised outside the learner's lines (in gpulab's code called with the learner's
kernel, in the launch itself, in Numba's code during a transfer) is explained by :mod:`.raised_elsewhere`.
"""

from __future__ import annotations

import re
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from .problem import Case
from .frames import _XOROSHIRO as _XOROSHIRO_FILE
from .overflow import Overflow, overflow
from .raised_elsewhere import ARGS_HINT, ARGS_RE, NOT_A_KERNEL_HINT, not_in_your_code
from .run import KernelTimeout
from .shapes import is_shape_error, shape_verdict

__all__ = ["EXP_LIMIT", "exception_verdict", "largest_input", "thread_inside"]

_TID_RE = re.compile(r"tid=\[(\d+), (\d+), (\d+)\] ctaid=\[(\d+), (\d+), (\d+)\]:?\s*(.*)", re.S)
EXP_LIMIT = 88.0  # exp(x) overflows float32 above x = 88.72


def thread_inside(exc: BaseException, shape: tuple[int, ...], swapped: bool) -> bool | None:
    """Whether the thread that raised ``exc`` has an output element of ``shape`` to compute (one thread
    per element, x along the last axis, or the first when ``swapped``); None when unknown."""
    m = _TID_RE.match(str(exc))
    config = getattr(exc, "gpulab_config", None)
    if not m or config is None or not shape:
        return None
    tid, cta = [int(v) for v in m.group(1, 2, 3)], [int(v) for v in m.group(4, 5, 6)]
    given = tuple(config[1]) if isinstance(config[1], (tuple, list)) else (config[1],)
    block = given + (1, 1)
    pos = [cta[d] * block[d] + tid[d] for d in range(3)]
    grid = tuple(config[0]) if isinstance(config[0], (tuple, list)) else (config[0],)
    if len(shape) > 1 and len(given) == 1 and len(grid) == 1:  # a 1-D grid, one thread per element of an N-D output
        return pos[0] < int(np.prod(shape))
    axes = list(shape)[::-1] if not swapped else list(shape)
    if len(axes) > 3:
        return None
    return all(pos[d] < axes[d] for d in range(len(axes))) and all(pos[d] == 0 for d in range(len(axes), 3))


RNG_STATE_HINT = (
    "the index given to the random-number generator runs past its states: numba.cuda.random keeps one state per "
    "thread of the grid (create_xoroshiro128p_states(n_threads, seed)), not one per element. Index the states with "
    "the thread's own number, `tid = cuda.grid(1)`, and let a grid-stride loop draw again from that state for each "
    "of the thread's elements. (On a GPU nothing checks: a thread past the states reads and advances memory that "
    "is not a state.)"
)
RNG_WORDS_HINT = (
    "the states argument of numba.cuda.random's draw is not a states array: each of its elements must be a "
    "generator state (s0, s1), numba's states array from `create_xoroshiro128p_states(n_threads, seed)`, or in "
    "the lab `as_states(words)`, the uint64 words viewed as states. Raw uint64 words (`words`, or a copy of "
    "them) are numbers: pass as_states(...) of them to the kernel."
)

# numba's device array (the states view on a GPU) has no .copy(); the simulator's view refuses it with this text
_STATES_COPY_RE = re.compile(r"DeviceNDArray' object has no attribute 'copy'|as_states\(\.\.\.\) has no \.copy\(\)")
STATES_COPY_HINT = (
    "copy the states' uint64 words, not their view: `saved = words.copy()` before the forward (NumPy and CuPy "
    "arrays have .copy(); numba's device array, which as_states gives on a GPU, has none), then launch with "
    "as_states(saved)."
)


def _in_rng(exc: BaseException, line: tuple[int, str] | None) -> bool:
    """The exception was raised inside a numba.cuda.random draw (the simulator's gpulab.xoroshiro), not merely on a
    line that also draws (``x[k]`` past its end there is an ordinary bounds error)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == _XOROSHIRO_FILE:
            return True
        tb = tb.tb_next
    return False


def exception_verdict(
    exc: BaseException,
    launch: str,
    case: Case,
    inside: bool | None = None,
    shuffles: bool = False,
    names: tuple[Sequence[str], Sequence[str]] = ((), ()),
    mistakes: dict[str, Callable[..., Any]] | None = None,
) -> tuple[str, str, str]:
    """(status, message, hint) for an exception raised by the learner's code. ``inside``: the thread
    that failed has an element to compute (so a bounds guard would not help); ``shuffles``: the kernel
    exchanges values between lanes (``cuda.shfl_*_sync``), so a guard must not keep lanes from the shuffles.
    ``names``: (input names, output names), for a shape error's given and expected shapes; ``mistakes``: the
    exercise's named mistakes, one of which may raise the learner's error (:mod:`.shapes`)."""
    text = str(exc)
    m = _TID_RE.match(text)
    where = ""
    if m:
        tid, cta, text = m.group(1, 2, 3), m.group(4, 5, 6), m.group(7)
        where = f"thread ({', '.join(tid)}) of block ({', '.join(cta)})"
    line = getattr(exc, "gpulab_line", None)
    at = (f" at line {line[0]}" + (f": `{line[1]}`" if line[1] else "")) if line else ""
    func = getattr(exc, "gpulab_function", "")
    yours = f"your function {func}" if func and not where else "your code"
    if isinstance(exc, NotImplementedError):
        return "not implemented", "not implemented yet: replace `raise NotImplementedError` with your code.", ""
    if isinstance(exc, KernelTimeout):
        return "timeout", f"stopped: {where} ran past the deadline", ""
    if getattr(exc, "gpulab_answer", False):  # what the learner's plain function returned cannot be used
        msg = f"your function {text}\ninput: {case.describe()}"
        return "failed", msg, getattr(exc, "gpulab_answer_hint", "")
    found = getattr(exc, "gpulab_origin", None)
    if found is not None and found.kind in ("gpulab", "launch", "numba"):
        return not_in_your_code(exc, found, text, getattr(exc, "gpulab_kernel", ""), case, launch)
    if isinstance(exc, (IndexError, TypeError)) and re.search(r"only integers|indices must be integers", text):
        msg = f"{where or 'your code'} used a non-integer index{at}: {text}\ninput: {case.describe()}\nlaunch: {launch}"
        return "failed", msg, FLOAT_INDEX_HINT
    rng = isinstance(exc, (IndexError, TypeError)) and _in_rng(exc, line)
    if rng and "out of bounds" not in text:  # a draw given numbers (raw uint64 words), not states
        msg = f"{where or 'a thread'} drew from something that is not a states array{at}: {text}\n"
        return "failed", msg + f"input: {case.describe()}\nlaunch: {launch}", RNG_WORDS_HINT
    if isinstance(exc, (IndexError, TypeError)) and _indexed_a_number(text):
        return "failed", _number_indexed_msg(where, at, text, case, launch), NUMBER_INDEXED_HINT
    if is_shape_error(exc):  # raised in the learner's code (gpulab's, the launch's, Numba's: above)
        shapes, hint = shape_verdict(exc, case, names[0], names[1], mistakes, kernel=bool(where))
        msg = f"{type(exc).__name__} in {where or yours}{at}: {text}\n{shapes}"
        return "error", f"{msg}\ninput: {case.describe()}\nlaunch: {launch}", hint
    if isinstance(exc, IndexError):
        ov = overflow(exc, line) if where else None  # a kernel's thread: its frame's values name the index
        msg = (
            f"{where or 'a thread'} indexed past the end of {ov.array if ov else 'an array'}{at}: {text}\n"
            f"input: {case.describe()}\nlaunch: {launch}"
        )
        if rng:  # numba.cuda.random: the states array is what ran out
            hint = RNG_STATE_HINT
        elif shuffles and not inside:
            hint = SHUFFLE_GUARD_HINT
        elif ov is not None and ov.computed and ov.guarded and ov.outside and not inside:
            hint = (
                f"your guard lets this thread through, but it has no element to compute: {ov.outside} is past the end "
                f"of {ov.outside.split('[')[0]}. Guard with the shape of the array the thread computes, e.g. "
                f"{_guard_example(None, '')}, not with an input's shape or a size of your own."
            )
        elif ov is not None and ov.computed and ov.guarded and not inside:
            hint = computed_index_hint(ov)
        elif inside:
            hint = (
                "this thread has an element to compute (the launch gives one thread to each), so a bounds guard is "
                "not the fix: an index is one too large (`n - i` where `n - 1 - i` is meant) or runs over the wrong "
                "dimension (e.g. B[j, k] where B[k, j] is meant, or a loop to A.shape[0] where A.shape[1] is meant). "
                "Check each index against the shape of the array it indexes."
            )
        else:
            hint = (
                "missing bounds guard? The grid has more threads than elements when n is not a multiple "
                f"of the block size; guard with {_guard_example(line, text)}, "
                "and check that i/j index the right dimensions."
            )
        return "failed", msg, hint
    msg = f"{type(exc).__name__} in {where or yours}{at}: {text}\ninput: {case.describe()}\nlaunch: {launch}"
    if isinstance(exc, OverflowError):
        big = largest_input(case)
        hint = (
            "a value overflowed"
            + (
                f" (the inputs reach |x| = {big:g}; exp(x) overflows float32 above "
                "x = 88.7, on a GPU it gives inf and then nan)"
                if big > EXP_LIMIT
                else ""
            )
            + ". For softmax subtract the row's maximum before exp: exp(x - max(x)) / sum(exp(x - max(x)))."
        )
        return "failed", msg, hint
    hint = ""
    if isinstance(exc, TypeError) and not where and not line and "'function' object is not subscriptable" in text:
        hint = NOT_A_KERNEL_HINT
    elif isinstance(exc, TypeError) and "FakeWithinKernelCUDAArray" in text:
        hint = WHOLE_ARRAY_HINT
    elif isinstance(exc, TypeError) and ARGS_RE.search(text):
        hint = ARGS_HINT
    elif isinstance(exc, TypeError) and re.search(
        r"NoneType' object is not (iterable|subscriptable)|unpack non-iterable NoneType", text
    ):
        hint = (
            "a function returned None where values were expected: is its `return` statement missing (or inside an "
            "`if` that was not taken)?"
        )
    elif isinstance(exc, AttributeError) and _STATES_COPY_RE.search(text):
        hint = STATES_COPY_HINT
    elif isinstance(exc, AttributeError) and re.search(r"module 'numpy' has no attribute 'trapz'", text):
        hint = (  # removed in NumPy 2.5 (deprecated since 2.0), while many tutorials still use it
            "np.trapz is gone from NumPy (renamed in 2.0, removed in 2.5): the trapezoid rule is np.trapezoid(y, x), "
            "with the same arguments."
        )
    elif isinstance(exc, (TypeError, AttributeError)) and not where:  # not in a kernel's thread: host code
        hint = (
            "your function failed as Python: check the order of its arguments and the types it uses and returns "
            "(the line above says which operation failed)."
        )
    elif isinstance(exc, (TypeError, AttributeError)):
        hint = (
            "the simulator ran your code as Python and it failed; check argument order and that the "
            "kernel only uses CUDA features (cuda.grid, cuda.threadIdx, arrays, math)."
        )
    return "error", msg, hint


SHUFFLE_GUARD_HINT = (
    "a lane indexed past the end of an array. First check the index itself (an output indexed by the thread, "
    "`partial[i]`, where one element per block is meant, `partial[cuda.blockIdx.x]`). If the index is right and "
    "only the lanes past the end go too far: this kernel shuffles values between lanes, so a guard around the "
    "shuffles is not the fix, since every lane named in the mask must reach each shuffle. Give the lanes past the "
    "end a value that changes nothing and let them shuffle it, e.g. `v = x[i] if i < x.size else float32(0.0)` for "
    "a sum (`warp_sums[lane] if lane < TPB // 32 else float32(0.0)` for the warps' sums), and guard only the final "
    "store."
)
FLOAT_INDEX_HINT = (
    "an index is a float: `/` always gives a float, in a kernel as in Python. Use `//` for whole-number division "
    "(`s //= 2`, `mid = n // 2`), and int(...) only where a float is really meant to be cut."
)
NUMBER_INDEXED_HINT = (
    "a single number was indexed as if it were an array (`alpha[i]`, or an argument in the wrong place). "
    "Index only arrays, and list the kernel's parameters in the order the exercise gives them: the harness "
    "passes the inputs in the order shown on the `input:` line, then the outputs."
)
WHOLE_ARRAY_HINT = (
    "a kernel cannot compute with whole arrays (`a + b`, `out[:] = ...`): each thread computes one element, "
    "e.g. `out[i] = 2 * x[i]` with `i = cuda.grid(1)` and a bounds guard."
)


def _indexed_a_number(text: str) -> bool:
    """The error is a number being indexed: NumPy's scalars ("invalid index to scalar variable") or Python's
    ("'float' object is not subscriptable")."""
    return "invalid index to scalar variable" in text or bool(
        re.search(r"'(float|int|bool|float32|float64|int32|int64)' object is not subscriptable", text)
    )


def _number_indexed_msg(where: str, at: str, text: str, case: Case, launch: str) -> str:
    return (
        f"{where or 'a thread'} indexed a number, not an array{at}: {text}\ninput: {case.describe()}\nlaunch: {launch}"
    )


def largest_input(case: Case) -> float:
    return max(
        (
            float(np.max(np.abs(x[np.isfinite(x)])))  # a -inf mask is not an input that overflows exp
            for x in case.inputs
            if isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.floating) and np.isfinite(x).any()
        ),
        default=0.0,
    )


def computed_index_hint(ov: Overflow) -> str:
    """The hint for a computed index past the end on a line that only threads past their guard run: check how the
    index is computed (an output size, a window past the input's edge, an element with nothing to read), not the
    guard."""
    plain = re.fullmatch(r"[A-Za-z_]\w*", ov.index) is not None
    skip = (
        f"e.g. `if {ov.index} < {ov.array}.shape[{ov.axis}]:`"
        if plain
        else "testing each position that goes into the index against its own range (e.g. a window's output row "
        "against the number of output rows) before they are combined"
    )
    axis = f" at axis {ov.axis}" if ov.ndim > 1 else ""
    it = f"`{ov.index}`" if plain else "that index"
    return (
        f"`{ov.subscript}` ran past the end of {ov.array}: its index{axis}, `{ov.index}`, is {ov.value}, and "
        f"{ov.array}.shape[{ov.axis}] is {ov.size}. That line runs only for threads your guard (or grid-stride loop) "
        f"lets through, and {it} is computed, not the thread's own index from cuda.grid(), so another thread "
        f"guard (`if i < out.shape[0]:`) is not the fix: check how {it} is computed. Usual causes: "
        "an output size that forgets the window (`wo = W - K + 1`, not `W`); a window or neighbour that runs past "
        f"the edge of the input; or an element with nothing to read in {ov.array} (the last row or column of an "
        f"odd-sized input under 2x2 pooling, a pixel that no window covers): skip the read there, {skip}."
    )


def _guard_example(line: tuple[int, str] | None, text: str) -> str:
    """The guard to suggest for an index past the end: on the array the failing line indexes when it indexes one
    (``grads[i] * s`` -> ``if i < grads.shape[0]:``), on ``out`` otherwise."""
    source = (line[1] or "") if line else ""
    found = list(re.finditer(r"\b([A-Za-z_]\w*)\s*\[([^\[\]]*)\]", source))
    names = {m.group(1) for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\[", source)}
    names -= {"cuda", "shared", "local"}
    axis = re.search(r"for axis (\d+) with size", text)
    if len(names) == 1 and axis and axis.group(1) in ("0", "1"):
        name = names.pop()
        k = int(axis.group(1))
        index = "i" if k == 0 else "j"
        for m in found:  # the line's own index at that axis when it is a plain name (`a[tid]` -> tid)
            parts = [p.strip() for p in m.group(2).split(",")]
            if m.group(1) == name and k < len(parts) and re.fullmatch(r"[A-Za-z_]\w*", parts[k]):
                index = parts[k]
                break
        return f"`if {index} < {name}.shape[{k}]:` on the array that line indexes"
    return "`if i < out.shape[0]:` (and `j < out.shape[1]` in 2-D)"
