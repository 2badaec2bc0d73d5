"""Lesson 02's streams exercise: ``pipelined_saxpy``, a host function that feeds a GPU chunk by chunk.

The learner writes ``pipelined_saxpy(alpha, x_h, y_h, out_h, chunk, n_streams)``: before the loop, each stream's
device buffers, one chunk long; then for each chunk, on stream ``k % n_streams``, copy its part of the pinned inputs
into that stream's buffers, launch saxpy, copy the result back into its slice of the pinned ``out_h``; then
synchronize. The buffers are allocated once because CUDA's programming guide ("Implicit Synchronization") says two
commands from different streams cannot run concurrently if a device memory allocation is issued between them
(``cuda.to_device`` allocates too: numba-cuda's default memory manager calls ``cuMemAlloc`` for every device
array, with no pool), and the arrays a loop drops are freed with ``cuMemFree``, which waits for the GPU. Two chunks
of one stream share its buffers safely: a stream runs its operations in order.

:func:`check_pipelined` runs it on pinned arrays whose sizes are not multiples of ``chunk`` and compares ``out_h``
with NumPy. In simulator mode it also reads the calls and allocations the function made (recorded by
:mod:`gpulab.simulator.streams`) and names the first of the :data:`MISTAKES` it finds. In gpu mode the calls are not
recorded (CUDA runs them for real and keeps no log): only the results are checked, and the verdict says so.

The check is written once for any such function of two input arrays (:class:`Pipelined`: its name, its scalar
arguments, what it computes, the words of its hints): :data:`SAXPY` is the lesson's, lab 02's graded
``pipelined_add`` (:data:`ADD`, scored by :mod:`gpulab.problems.lab02_streams`) is another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
from numba import cuda

from .. import runtime
from ..exercises import Check, CheckResult
from ..kernels.elementwise import add_kernel, saxpy_kernel
from ..streams import recorded_timeline, stream_numbers

__all__ = ["ADD", "CASES", "MISTAKES", "SAXPY", "Pipelined", "check_pipelined", "diagnose", "hint", "pipelined_saxpy"]

NAME = "pipelined_saxpy"
# (n, chunk, n_streams): n % chunk != 0 mostly; a chunk over 1024 elements, so that `saxpy[1, chunk, s]` (one block
# of chunk threads) meets the limit a GPU meets at the lesson's 2**23-element chunks
CASES = [(1000, 256, 4), (7, 4, 2), (300, 100, 3), (130, 64, 1), (3000, 1500, 2)]
saxpy = saxpy_kernel  # the name the lesson's notebook gives it (its learner's kernel, or this one)
THREADS = 128
MISTAKES = {
    "kernel_host_arrays": "Pass the kernel device arrays (views of the buffers made with cuda.device_array). "
    "Given a NumPy array, numba itself copies it to the device before the launch and back after it (on the "
    "kernel's stream), every such argument both ways; a copy into pageable memory makes the host wait for it.",
    "copy_without_stream": "Give every copy its chunk's stream: x_d.copy_to_device(x_h[part], stream=s) and "
    "out_d.copy_to_host(out_h[part], stream=s). Without stream= a copy goes to the default stream, which waits "
    "for every other stream and makes the host wait too: nothing overlaps.",
    "kernel_default_stream": "Launch the kernel on the chunk's stream, the third value in the brackets: "
    "{launch}. Without it the kernel runs on the default stream, which waits for all other streams.",
    "pageable_out": "Copy each chunk straight into its slice of the pinned out_h: out_d.copy_to_host(out_h[part], "
    "stream=s). copy_to_host() without a destination (or into np.empty) copies into pageable memory, "
    "synchronously, and the host must then copy it again.",
    "pageable_in": "Copy in from the pinned inputs themselves, x_d.copy_to_device(x_h[part], stream=s): a slice is a "
    "view of pinned memory; a copy of it (np.array, .copy(), np.ascontiguousarray of a strided view) is pageable.",
    "cross_stream": "Keep each chunk's three operations on one stream: copy in, kernel and copy out all with "
    "the same s = streams[k % n_streams], on that stream's own buffers, bufs[k % n_streams]. Operations on "
    "different streams may run in any order, so two streams must not share a device buffer.",
    "one_stream": "Create n_streams streams before the loop, streams = [cuda.stream() for _ in range(n_streams)], "
    "and give chunk k the stream streams[k % n_streams]; one stream runs everything in order.",
    "no_final_sync": "Call cuda.synchronize() (or s.synchronize() for every stream) after the loop, before "
    "returning: the copies back are asynchronous and may not have landed in out_h yet.",
    "no_overlap": "Synchronize once, after the loop. A synchronize inside the loop waits for each chunk before "
    "the next is issued, so the streams never have work at the same time.",
    "alloc_in_loop": "Allocate each stream's three device arrays once, before the loop, one chunk long "
    "(cuda.device_array). In the loop take views of the chunk's stream's buffers, sliced to the chunk's length (a "
    "view allocates nothing), copy into them on the chunk's stream, launch on them and copy back from the out "
    "view. CUDA does not run two streams' commands at the same time when a memory allocation is issued between "
    "them (cuda.to_device and cuda.pinned_array allocate too). A stream's next chunk may reuse its buffers: the "
    "stream runs it after this one.",
}


class Pipelined(NamedTuple):
    """A pipelined host function ``fn(*scalars, x_h, y_h, out_h, chunk, n_streams)`` as the check sees it."""

    name: str  # the function's name, in verdicts
    params: str  # its arguments before chunk and n_streams, in verdicts: "alpha, x_h, y_h, out_h"
    scalars: tuple  # the scalar arguments the check passes before x_h
    spec: Callable[..., np.ndarray]  # (*scalars, x, y) -> the expected out_h
    launch: str  # the kernel launch on the chunk's stream, in hints
    each_chunk: str  # what each chunk computes, the hint for wrong values
    gpu_note: str = "the timing below shows the overlap."  # the end of a gpu-mode pass's verdict
    given: tuple = ()  # the kernels gpulab hands over for the launches (:mod:`gpulab.exercises.own_code`)


SAXPY = Pipelined(
    NAME,
    "alpha, x_h, y_h, out_h",
    (np.float32(2.5),),
    lambda alpha, x, y: alpha * x + y,
    "saxpy[blocks, threads, s](alpha, x_d, y_d, out_d)",
    "each chunk: out_h[part] = alpha * x_h[part] + y_h[part].",
    given=(saxpy_kernel,),  # `saxpy` in the lesson: the learner's kernel, or this one (lessons.or_reference)
)
ADD = Pipelined(  # lab 02's graded exercise (gpulab.problems.lab02_streams): another operation, no scalar
    "pipelined_add",
    "x_h, y_h, out_h",
    (),
    lambda x, y: x + y,
    "add_kernel[blocks, threads, s](x_d, y_d, out_d)",
    "each chunk: out_h[part] = x_h[part] + y_h[part], with add_kernel on the chunk's device arrays.",
    "here the results alone decide the points (labs grade runs in simulator mode and grades the calls too).",
    given=(add_kernel,),  # the lab hands over gpulab's add_kernel
)


def hint(mistake: str, op: Pipelined = SAXPY) -> str:
    """What to do about one of :data:`MISTAKES`, in the words of ``op``."""
    return MISTAKES[mistake].format(launch=op.launch)


def pipelined_saxpy(
    alpha: Any, x_h: np.ndarray, y_h: np.ndarray, out_h: np.ndarray, chunk: int, n_streams: int
) -> None:
    """``out_h = alpha * x_h + y_h`` chunk by chunk on ``n_streams`` CUDA streams, all host arrays pinned
    (the reference answer; :mod:`gpulab.bench.streams` times it)."""
    n = x_h.size
    streams = [cuda.stream() for _ in range(n_streams)]
    # each stream's x, y and out on the device, one chunk long, allocated before any copy: an allocation between
    # two streams' commands keeps them from running at the same time
    bufs = [[cuda.device_array(chunk, np.float32) for _ in range(3)] for _ in range(n_streams)]
    for k, start in enumerate(range(0, n, chunk)):
        s = streams[k % n_streams]  # chunk k's copy in, kernel and copy out all go to this stream, in order
        part = slice(start, min(start + chunk, n))
        size = part.stop - start  # the last chunk may be shorter
        # views of this stream's buffers (no allocation); the stream runs this chunk after its previous one
        x_d, y_d, out_d = (buf[:size] for buf in bufs[k % n_streams])
        x_d.copy_to_device(x_h[part], stream=s)
        y_d.copy_to_device(y_h[part], stream=s)
        saxpy[(size + THREADS - 1) // THREADS, THREADS, s](alpha, x_d, y_d, out_d)  # enough blocks of 128
        out_d.copy_to_host(out_h[part], stream=s)
    cuda.synchronize()  # wait until every stream's copies back have landed in out_h


def diagnose(records: Sequence[Any], n_streams: int, allocations: Sequence[Any] = ()) -> tuple[str, str] | None:
    """``(mistake, what was given)`` for the first of :data:`MISTAKES` in the recorded calls (``records``:
    ``Instruments.stream_ops``; ``allocations``: ``Instruments.allocations``, placed among them), else None."""
    numbers = stream_numbers(records)

    def num(r: Any) -> int:
        return numbers[id(r.stream)]

    work = [r for r in records if r.kind != "sync"]
    for r in work:
        if r.kind == "kernel" and r.host_args:
            return "kernel_host_arrays", f"{r.name} was launched with a NumPy (host) array among its arguments."
    for r in work:
        if r.kind != "kernel" and num(r) == 0:
            call = "cuda.to_device" if r.kind == "h2d" else "copy_to_host"
            return "copy_without_stream", f"a {call} of {r.nbytes} bytes was made without a stream (stream=0)."
    for r in work:
        if r.kind == "kernel" and num(r) == 0:
            return "kernel_default_stream", f"{r.name} was launched on the default stream: [blocks, threads] only."
    for r in work:
        if r.kind == "d2h" and not r.pinned:
            return "pageable_out", f"a copy_to_host of {r.nbytes} bytes went into pageable host memory."
    for r in work:
        if r.kind == "h2d" and not r.pinned:
            return "pageable_in", f"a cuda.to_device of {r.nbytes} bytes came from pageable host memory."
    # the device bytes each stream used since its last synchronize: (low, high) address -> (stream, kind); only
    # overlapping bytes are shared (chunks in disjoint slices of one allocation, x_d[part], are independent)
    last: dict[tuple[int, int], tuple[int, str]] = {}
    for r in records:
        if r.kind == "sync":
            everything = r.stream is None
            last = {b: v for b, v in last.items() if not everything and v[0] != num(r)}
            continue
        for lo, hi in r.spans:
            for (lo2, hi2), before in last.items():
                if before[0] != num(r) and lo < hi2 and lo2 < hi:
                    op = {"h2d": "copy in", "kernel": "kernel", "d2h": "copy out"}
                    what = {"h2d": "a copy in wrote", "kernel": "a kernel used", "d2h": "a copy out read"}[before[1]]
                    return "cross_stream", (
                        f"a {op[r.kind]} on stream {num(r)} touched device memory that {what} on stream "
                        f"{before[0]}, with no synchronize in between."
                    )
        for span in r.spans:
            last[span] = (num(r), r.kind)
    used = {num(r) for r in work}
    kernels = sum(r.kind == "kernel" for r in work)
    if n_streams >= 2 and kernels >= 2 and len(used) < 2:
        return "one_stream", f"n_streams={n_streams}, but all {kernels} chunks went to the same stream."
    pending: set[int] = set()
    for r in records:
        if r.kind == "sync":
            pending = set() if r.stream is None else pending - {num(r)}
        else:
            pending.add(num(r))
    if pending:
        return "no_final_sync", f"the function returned with work still queued on stream(s) {sorted(pending)}."
    if n_streams >= 2 and kernels >= 2:
        tl = recorded_timeline(records, h2d_gbps=1.0, d2h_gbps=1.0, kernel_s=1e-9)
        if tl.total >= sum(o.end - o.start for o in tl.ops) * (1 - 1e-9):
            return "no_overlap", "no two operations could run at the same time: the host waited after every chunk."
    between = _allocation_between_streams(records, allocations, num)
    if between is not None:
        return "alloc_in_loop", between
    return None


def _allocation_between_streams(records: Sequence[Any], allocations: Sequence[Any], num: Callable) -> str | None:
    """What was given, for the first allocation made while one stream had work queued (issued, not yet synchronized)
    and before a later call on another stream: CUDA does not run those two streams' commands at the same time."""
    queued: list[set[int]] = []  # queued[i]: the streams with work queued before records[i]
    pending: set[int] = set()
    for r in records:
        queued.append(set(pending))
        if r.kind == "sync":
            pending = set() if r.stream is None else pending - {num(r)}
        else:
            pending.add(num(r))
    queued.append(pending)
    for a in allocations:
        later = [num(r) for r in records[a.after :] if r.kind != "sync"]
        for before in sorted(queued[a.after]):
            after = next((s for s in later if s != before), None)
            if after is not None:
                return (
                    f"{a.call} allocated {a.nbytes} bytes while stream {before} had work queued, and stream {after} "
                    "got more work after it (an allocation inside the loop)."
                )
    return None


def _unfinished(records: Sequence[Any]) -> bool:
    """Whether an asynchronous copy into pinned host memory (on a stream of its own) was still queued when the
    function returned: on a GPU ``out_h`` may then be read before it is written, whatever :func:`diagnose` named."""
    numbers = stream_numbers(records)
    pending: set[int] = set()
    for r in records:
        if r.kind == "sync":
            pending = set() if r.stream is None else pending - {numbers[id(r.stream)]}
        elif r.kind == "d2h" and r.pinned and numbers[id(r.stream)] != 0:
            pending.add(numbers[id(r.stream)])
    return bool(pending)


def _done(checks: list[Check], res: CheckResult) -> CheckResult:
    """``res`` with one line per case checked before it (each a pass)."""
    res.checks = list(checks)
    return res


def _result(name: str, status: str, message: str, hint: str = "", mistake: str = "") -> CheckResult:
    score = 1.0 if status == "passed" else 0.0
    res = CheckResult(name, status, score, 1.0, message, hint)
    if mistake:
        res.details["mistake"] = mistake
    return res


def _error(name: str, call: str, exc: BaseException) -> CheckResult:
    """The verdict for an exception from the learner's function: which line of theirs, and why where it is known."""
    from ..exercises.frames import origin
    from ..kernels._launch import LaunchError

    line = origin(exc).line
    at = f" at line {line[0]}: `{line[1]}`" if line else ""
    text = str(exc)
    hint = ""
    if isinstance(exc, LaunchError) and "at least 1 block" in text:
        hint = (
            "a chunk came out empty: the loop ran past the end of the arrays. Loop over range(0, n, chunk) with "
            "n = x_h.size (the notebook's own n is another array's size)."
        )
    elif isinstance(exc, LaunchError):
        hint = (
            "launch enough blocks of a fixed size instead of one block per chunk: threads = 128, blocks = "
            "(size + threads - 1) // threads, where size is the chunk's length (the last chunk is shorter)."
        )
    elif "strides" in text or "shape" in text:
        hint = (
            "a host slice and its device array differ in length: take every chunk's part of the arrays you were "
            "given, part = slice(start, min(start + chunk, n)) with n = x_h.size (the notebook's own n is another "
            "array's size), and copy back into out_h[part]."
        )
    elif isinstance(exc, IndexError) and "list index" in text:
        hint = "there are n_streams streams: chunk k goes to streams[k % n_streams]."
    return _result(name, "error", f"{call} raised {type(exc).__name__}{at}: {text}", hint)


def check_pipelined(
    fn: Any,
    cases: Sequence[tuple[int, int, int]] = CASES,
    *,
    op: Pipelined = SAXPY,
    seed: int = 2,
    trusted: bool = False,
) -> CheckResult:
    """Run the learner's ``fn(*op.scalars, x_h, y_h, out_h, chunk, n_streams)`` on pinned arrays (``cases``: ``(n,
    chunk, n_streams)``, inputs drawn from ``seed``) and check ``out_h`` and, in simulator mode, the calls it made (see
    the module docstring). A right result whose calls could return before ``out_h`` is written has
    ``details["unfinished"]``. Never raises for the learner's mistakes.

    A function that is, or calls, one of gpulab's reference implementations (:mod:`gpulab.exercises.own_code`;
    ``op.given``, the kernel it launches, excepted) gets 0 points and is not run. ``trusted=True``: ``fn`` is
    gpulab's own (its tests), no such check (see :func:`gpulab.exercises.check.run_problem`)."""
    from ..exercises.check import is_placeholder
    from ..exercises.own_code import own_code_check

    refused = None
    if not trusted and not is_placeholder(fn):
        refused = own_code_check(op.name, (fn,), given=op.given, spec=op.spec, expected=op.name)
    if refused is not None:
        res = _result(op.name, "failed", *refused)
        res.checks = [Check("own code", False, *refused)]
        res.details["own_code"] = False
        return res
    res = _check(fn, cases, op, seed)
    if trusted:
        res.details["trusted"] = True
    return res


def _check(fn: Any, cases: Sequence[tuple[int, int, int]], op: Pipelined, seed: int) -> CheckResult:
    from .. import simulator

    rng = np.random.default_rng(seed)
    name = op.name
    checks: list[Check] = []
    for n, chunk, n_streams in cases:
        x_h, y_h, out_h = (cuda.pinned_array(n, np.float32) for _ in range(3))
        x_h[:], y_h[:], out_h[:] = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n), np.nan
        call = f"{name}({op.params}, chunk={chunk}, n_streams={n_streams}) with n={n}"
        records: list[Any] = []
        allocations: list[Any] = []
        try:
            if runtime.is_simulator():
                with simulator.instrument() as ins:
                    fn(*op.scalars, x_h, y_h, out_h, chunk, n_streams)
                records, allocations = ins.stream_ops, ins.allocations
            else:
                fn(*op.scalars, x_h, y_h, out_h, chunk, n_streams)
        except NotImplementedError:
            return _result(
                name, "not implemented", "not implemented yet: replace `raise NotImplementedError` with your code."
            )
        except Exception as exc:  # noqa: BLE001 - the learner's code: report, never crash the notebook
            return _done(checks, _error(name, call, exc))
        want, got = op.spec(*op.scalars, x_h, y_h), np.asarray(out_h)
        if not runtime.is_simulator() and not np.allclose(got, want, rtol=1e-6, atol=1e-6):
            # In gpu mode nothing is recorded: a result that is wrong now but right once the GPU is idle was still
            # being copied back when the function returned (no synchronize), not a wrong or unwritten out_h.
            cuda.synchronize()
            if np.allclose(out_h, want, rtol=1e-6, atol=1e-6):
                msg = f"{call}: out_h was still being copied back when the function returned (right only after a "
                msg += "cuda.synchronize() made by the check)."
                return _done(checks, _result(name, "failed", msg, hint("no_final_sync", op), "no_final_sync"))
            got = np.asarray(out_h)
        if np.isnan(got).all():
            msg = f"{call}: out_h was not written (it still holds the check's NaN)."
            tip = (
                "write the result into the out_h you were given, chunk by chunk: out_d.copy_to_host(out_h[part], "
                "stream=s); `out_h = ...` inside the function only rebinds a local name."
            )
            return _done(checks, _result(name, "failed", msg, tip, "out_not_written"))
        bad = np.flatnonzero(~np.isclose(got, want, rtol=1e-6, atol=1e-6))
        if bad.size:
            i = int(bad[0])
            msg = f"{call}: out_h[{i}] = {got[i]!r}, expected {want[i]!r} ({bad.size} of {n} wrong)."
            tail = n - n % chunk
            if n % chunk and bad.min() >= tail:
                tip = (
                    f"only the last, shorter chunk is wrong (from {tail} on): {n} is not a multiple of chunk={chunk}; "
                    "with n = x_h.size, end each chunk at min(start + chunk, n) and loop over range(0, n, chunk)."
                )
                return _done(checks, _result(name, "failed", msg, tip, "last_chunk"))
            return _done(checks, _result(name, "failed", msg, op.each_chunk))
        found = diagnose(records, n_streams, allocations)
        if found is not None:
            mistake, given = found
            res = _result(name, "failed", f"{call}: the result is right, but {given}", hint(mistake, op), mistake)
            if _unfinished(records):
                res.details["unfinished"] = True
            return _done(checks, res)
        what = "right, and the calls pipeline" if runtime.is_simulator() else "right"
        checks.append(Check(f"n={n}, chunk={chunk}, n_streams={n_streams}", True, f"out_h {what}"))
    note = (
        "Results and the calls (streams, pinned memory, allocations, synchronize) checked, from the simulator's record."
        if runtime.is_simulator()
        else "Results checked. In gpu mode CUDA runs the calls and keeps no log: the stream order, pinned memory, "
        f"allocations and the final synchronize are checked in simulator mode only; {op.gpu_note}"
    )
    return _done(checks, _result(name, "passed", f"{len(cases)} case(s) correct. {note}"))
