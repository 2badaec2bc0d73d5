"""Lab 02's graded streams exercise (problems.lab02.PIPELINED_ADD): lesson 02's check of a pipelined host function,
scored as the lab says: full points for right results whose calls pipeline, half for right results that cannot
overlap (each of lesson 02's slow mistakes, named), zero for wrong results, errors and calls that only the simulator
makes right (a chunk's operations on two streams, no final synchronize); results only in gpu mode."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import numpy as np
import pytest
from numba import cuda

from gpulab import labs, problems, runtime
from gpulab.errors import UsageError
from gpulab.kernels.elementwise import add_kernel
from gpulab.lessons import pipelined
from gpulab.problems.lab02_streams import UNSAFE, is_slow

ROOT = Path(__file__).resolve().parents[1]
P = problems.lab02.PIPELINED_ADD
HIDDEN = dict(sizes=[(1, 4, 2), (513, 128, 3), (2049, 2048, 2), (640, 64, 5)], seed=204)  # the lab's hidden tests


def _add(
    *,
    kernel_stream=True,
    into_slice=True,
    copy_in=True,
    sync=True,
    sync_in_loop=False,
    cross=False,
    one_stream=False,
    host_args=False,
    last=True,
    x_twice=False,
    alloc_in_loop=False,
    shared_buffers=False,
):
    """pipelined_add as the lab's solution writes it, with one (or more) of the learner's mistakes switched on."""

    def pipelined_add(x_h, y_h, out_h, chunk, n_streams):
        n = x_h.size if last else x_h.size - x_h.size % chunk
        streams = [cuda.stream() for _ in range(1 if one_stream else n_streams)]
        bufs = [[cuda.device_array(chunk, np.float32) for _ in range(3)] for _ in streams]
        if shared_buffers:  # one set of buffers for every stream: a race between the streams
            bufs = [bufs[0]] * len(streams)
        for k, start in enumerate(range(0, n, chunk)):
            s = streams[k % len(streams)]
            other = streams[(k + 1) % len(streams)] if cross else s
            part = slice(start, min(start + chunk, n))
            xs, ys = (x_h[part], y_h[part]) if copy_in else (x_h[part].copy(), y_h[part].copy())
            if alloc_in_loop:
                x_d, y_d = cuda.to_device(xs, stream=s), cuda.to_device(ys, stream=s)
                out_d = cuda.device_array(x_d.size, np.float32, stream=s)
            else:
                x_d, y_d, out_d = (b[: part.stop - start] for b in bufs[k % len(streams)])
                x_d.copy_to_device(xs, stream=s)
                y_d.copy_to_device(ys, stream=s)
            launch = ((x_d.size + 127) // 128, 128) + ((other,) if kernel_stream else ())
            if host_args:
                tmp = np.empty(x_d.size, np.float32)
                add_kernel[launch](x_d, y_d, tmp)
                out_h[part] = tmp
                continue
            add_kernel[launch](x_d, x_d if x_twice else y_d, out_d)
            if into_slice:
                out_d.copy_to_host(out_h[part], stream=s)
            else:
                out_h[part] = out_d.copy_to_host(stream=s)
            if sync_in_loop:
                cuda.synchronize()
        if sync:
            cuda.synchronize()

    return pipelined_add


def test_the_solution_scores_full_points_on_the_visible_and_the_hidden_cases():
    for res in (P.check(_add()), P.check(_add(), **HIDDEN)):
        assert res.passed and res.score == res.max_score == P.points == 3, res
        assert len(res.checks) == len(HIDDEN["sizes"] if "n=2049" in str(res) else P.sizes)
        assert "calls (streams, pinned memory, allocations, synchronize) checked" in res.message


def test_the_lesson_and_the_lab_share_one_list_of_mistakes_split_into_slow_and_unsafe():
    assert UNSAFE < set(pipelined.MISTAKES)
    slow = {m for m in pipelined.MISTAKES if is_slow(m)}
    assert slow | UNSAFE == set(pipelined.MISTAKES) and not slow & UNSAFE
    assert not is_slow("last_chunk") and not is_slow("out_not_written")  # wrong results are never slow ones


@pytest.mark.parametrize(
    "fn, mistake",
    [
        (_add(into_slice=False), "pageable_out"),
        (_add(copy_in=False), "pageable_in"),
        (_add(one_stream=True), "one_stream"),
        (_add(kernel_stream=False), "kernel_default_stream"),
        (_add(sync=False, sync_in_loop=True), "no_overlap"),
        (_add(host_args=True), "kernel_host_arrays"),
        (_add(into_slice=False, sync=False), "pageable_out"),  # synchronous copies back: no final sync needed
        (_add(alloc_in_loop=True), "alloc_in_loop"),
    ],
)
def test_right_results_that_cannot_overlap_get_half_the_points_and_the_named_hint(fn, mistake):
    res = P.check(fn)
    assert res.status == "over budget" and res.score == 1.5 and res.max_score == 3, res
    assert res.details["mistake"] == mistake
    assert res.hint == pipelined.hint(mistake, pipelined.ADD)
    assert "the result is right" in res.message and "Half the points" in res.message.splitlines()[0]


def test_the_kernel_hint_names_the_labs_kernel():
    res = P.check(_add(kernel_stream=False))
    assert "add_kernel[blocks, threads, s](x_d, y_d, out_d)" in res.hint and "saxpy" not in res.hint


@pytest.mark.parametrize(
    "fn, mistake, says",
    [
        (_add(sync=False), "no_final_sync", "still queued"),
        (_add(cross=True), "cross_stream", "touched device memory"),
        (_add(shared_buffers=True), "cross_stream", "touched device memory"),
        (_add(x_twice=True), None, "expected"),
        (_add(last=False), "last_chunk", "only the last, shorter chunk is wrong"),
    ],
)
def test_wrong_results_and_simulator_only_right_calls_score_zero(fn, mistake, says):
    res = P.check(fn)
    assert res.status == "failed" and res.score == 0 and res.max_score == 3, res
    assert res.details.get("mistake") == mistake and says in res.message + res.hint
    if mistake in UNSAFE:
        assert res.hint == pipelined.hint(mistake, pipelined.ADD)


def test_a_slow_mistake_named_first_does_not_hide_a_missing_final_synchronize():
    """A kernel on the default stream is named first (half the points on its own), but the copies into the pinned
    out_h were still queued when the function returned: zero, and the hint says to synchronize too. Fixing the
    kernel's stream alone then names no_final_sync (zero): the credit never drops when a mistake is fixed."""
    res = P.check(_add(kernel_stream=False, sync=False))
    assert res.details["mistake"] == "kernel_default_stream" and res.score == 0 and res.status == "failed", res
    assert "still queued" in res.message.splitlines()[0] and pipelined.hint("no_final_sync") in res.hint


def test_errors_and_the_placeholder_score_zero_with_what_to_do():
    def todo(x_h, y_h, out_h, chunk, n_streams):
        raise NotImplementedError("replace this line with your code")

    def no_modulo(x_h, y_h, out_h, chunk, n_streams):  # right while there are as many chunks as streams
        streams = [cuda.stream() for _ in range(n_streams)]
        bufs = [[cuda.device_array(chunk, np.float32) for _ in range(3)] for _ in range(n_streams)]
        for k, start in enumerate(range(0, x_h.size, chunk)):
            s, part = streams[k], slice(start, min(start + chunk, x_h.size))
            x_d, y_d, out_d = (b[: part.stop - start] for b in bufs[k % n_streams])
            x_d.copy_to_device(x_h[part], stream=s)
            y_d.copy_to_device(y_h[part], stream=s)
            add_kernel[(x_d.size + 127) // 128, 128, s](x_d, y_d, out_d)
            out_d.copy_to_host(out_h[part], stream=s)
        cuda.synchronize()

    res = P.check(todo)
    assert res.status == "not implemented" and res.score == 0 and res.max_score == 3
    res = P.check(no_modulo)
    assert res.status == "error" and res.score == 0 and "IndexError" in res.message and "n=130" in res.message
    assert [c.passed for c in res.checks] == [True, True]  # the cases before it, each a line of the verdict
    assert res.hint == "there are n_streams streams: chunk k goes to streams[k % n_streams]."


def test_check_refuses_what_is_not_a_function_and_unknown_options():
    with pytest.raises(UsageError, match=r"check\(pipelined_add\)"):
        P.check(0.0)  # a value, not the function
    with pytest.raises(TypeError, match="unknown option"):
        P.check(_add(), threads=128)


def test_gpu_mode_grades_the_results_only_and_says_so(monkeypatch):
    """In gpu mode no call is recorded: a pageable copy back is not seen, right results get full points, and
    the verdict says the calls are graded in simulator mode."""
    monkeypatch.setattr(runtime, "is_simulator", lambda: False)
    res = P.check(_add(into_slice=False))
    assert res.passed and res.score == 3, res
    assert "checked in simulator mode only" in res.message and "results alone decide" in res.message
    assert P.check(_add(x_twice=True)).score == 0


def test_the_lessons_check_keeps_its_own_words():
    res = pipelined.check_pipelined(pipelined.pipelined_saxpy, cases=[(300, 100, 3)], trusted=True)
    assert res.passed and res.name == "pipelined_saxpy" and res.score == res.max_score == 1
    assert "saxpy[blocks, threads, s](alpha, x_d, y_d, out_d)" in pipelined.hint("kernel_default_stream")


def _submission(tmp_path: Path, body: str) -> Path:
    """The student version of lab 02 with pipelined_add's body filled in (the other answers left as released)."""
    nb = nbformat.read(str(ROOT / "labs" / "student" / "lab02_memory.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if "def pipelined_add" in c.source)
    stub = f"    # YOUR CODE HERE\n    {labs.CODE_STUB}"
    assert stub in cell.source
    cell.source = cell.source.replace(stub, body)
    out = tmp_path / "lab02_memory.ipynb"
    nbformat.write(nb, str(out))
    return out


PAGEABLE_ONE_STREAM = """    n = x_h.size
    s = cuda.stream()
    for start in range(0, n, chunk):
        part = slice(start, min(start + chunk, n))
        x_d, y_d = cuda.to_device(x_h[part], stream=s), cuda.to_device(y_h[part], stream=s)
        out_d = cuda.device_array(x_d.size, np.float32, stream=s)
        add_kernel[(x_d.size + 127) // 128, 128, s](x_d, y_d, out_d)
        out_h[part] = out_d.copy_to_host(stream=s)
    cuda.synchronize()"""


@pytest.mark.slow
def test_labs_grade_gives_half_the_points_with_the_named_hint(tmp_path):
    """A submission copying back into pageable memory on one stream: 1.5 of 3, the first mistake named."""
    report = tmp_path / "grade.json"
    assert labs.main(["grade", str(_submission(tmp_path, PAGEABLE_ONE_STREAM)), "--json", str(report)]) == 0
    rows = {r["grade_id"]: r for r in json.loads(report.read_text())["exercises"]}
    row = rows["lab02-pipelined-check"]
    assert row["points"] == 3 and row["score"] == 1.5 and row["status"] == "partial", row
    assert row["verdict"] == "over budget", row  # the check's own status, kept beside the row's
    assert "pageable host memory" in row["message"] and row["hint"] == pipelined.hint("pageable_out")
