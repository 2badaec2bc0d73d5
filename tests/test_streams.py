"""gpulab.streams (the timeline model), gpulab.simulator.streams (recording the host's stream calls),
lesson 02's pipelined_saxpy check with its named mistakes, and the Gantt chart."""

from __future__ import annotations

import numpy as np
import pytest
from numba import cuda

from gpulab import lessons, simulator, streams
from gpulab.kernels import saxpy_kernel
from gpulab.lessons import pipelined
from gpulab.simulator.streams import is_pinned
from gpulab.streams import ALL_STREAMS, Step, pipeline_timeline, recorded_timeline, schedule
from gpulab.viz import stream_timeline

MS = 1e-3

# --- the model --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "streams_, engines, pinned, total_ms",
    [(1, 2, True, 20), (4, 2, True, 11), (4, 1, True, 16), (4, 2, False, 20), (2, 2, True, 12)],
)
def test_pipeline_totals(streams_, engines, pinned, total_ms):
    """4 chunks of 2 ms in, 1 ms kernel, 2 ms out (the lesson's prediction): 1 stream is the sum; 4 streams with
    2 copy engines overlap a copy in, a kernel and a copy out; 1 engine serialises the 16 ms of copies;
    pageable memory overlaps nothing."""
    tl = pipeline_timeline(4, 2 * MS, 1 * MS, 2 * MS, streams=streams_, copy_engines=engines, pinned=pinned)
    assert tl.total == pytest.approx(total_ms * MS)
    assert len(tl.ops) == 12 and {o.kind for o in tl.ops} == {"h2d", "kernel", "d2h"}


def test_model_rules_hold_on_every_timeline():
    for engines in (1, 2):
        tl = pipeline_timeline(5, 1.5 * MS, 0.7 * MS, 1.1 * MS, streams=3, copy_engines=engines)
        for s in {o.stream for o in tl.ops}:  # rule 1: in order within a stream
            mine = [o for o in tl.ops if o.stream == s]
            assert all(a.end <= b.start + 1e-15 for a, b in zip(mine, mine[1:]))
        groups = [("kernel",), ("h2d",), ("d2h",)] if engines == 2 else [("kernel",), ("h2d", "d2h")]
        for kinds in groups:  # rules 3 and 4: one op at a time per engine
            spans = sorted((o.start, o.end) for o in tl.ops if o.kind in kinds)
            assert all(a[1] <= b[0] + 1e-15 for a, b in zip(spans, spans[1:]))
        assert tl.busy("kernel") == pytest.approx(5 * 0.7 * MS)


def test_default_stream_waits_for_everything_and_everything_waits_for_it():
    steps = [Step(0, 1, "h2d", 2.0), Step(1, 0, "kernel", 1.0), Step(2, 2, "h2d", 1.0), Step(-1, ALL_STREAMS, "sync")]
    ops = schedule(steps).ops
    assert ops[1].start == 2.0 and ops[2].start == 3.0


def test_a_pageable_copy_blocks_the_host():
    steps = [Step(0, 1, "h2d", 2.0, blocking=True), Step(1, 2, "kernel", 1.0)]
    tl = schedule(steps)
    assert tl.ops[1].start == 2.0 and tl.total == 3.0


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"chunks": 0}, "chunks must be a whole number >= 1"),
        ({"chunks": 2.5}, "chunks must be a whole number"),
        ({"streams": 0}, "streams must be a whole number >= 1"),
        ({"copy_engines": 3}, "copy_engines must be a whole number 1 or 2"),
        ({"h2d_s": -1.0}, "h2d_s must be a finite duration >= 0"),
        ({"kernel_s": "fast"}, "kernel_s must be a duration in seconds"),
        ({"d2h_s": float("nan")}, "d2h_s must be a finite duration"),
    ],
)
def test_bad_inputs_raise_value_errors_that_say_what_is_expected(kwargs, says):
    args = {"chunks": 4, "h2d_s": 1.0, "kernel_s": 1.0, "d2h_s": 1.0} | kwargs
    with pytest.raises(ValueError, match=says):
        pipeline_timeline(**args)


def test_bad_steps_and_bandwidths_raise():
    with pytest.raises(ValueError, match="kind must be one of"):
        schedule([Step(0, 1, "copy", 1.0)])
    with pytest.raises(ValueError, match="stream must be 0"):
        schedule([Step(0, -3, "h2d", 1.0)])
    with pytest.raises(ValueError, match="h2d_gbps must be a bandwidth > 0"):
        recorded_timeline([], h2d_gbps=0, d2h_gbps=1, kernel_s=1)


# --- the recording ----------------------------------------------------------------------------------------


def test_the_simulator_records_copies_launches_and_syncs_with_their_stream():
    x = cuda.pinned_array(10, np.float32)
    x[:] = np.arange(10)
    plain = np.ones(10, np.float32)
    with simulator.instrument() as ins:
        s = cuda.stream()
        x_d = cuda.to_device(x[:6], stream=s)
        y_d = cuda.to_device(plain[:6])
        out_d = cuda.device_array(6, np.float32)
        saxpy_kernel[1, 32, s](np.float32(2), x_d, y_d, out_d)
        back = out_d.copy_to_host()
        out_d.copy_to_device(x[4:], stream=s)
        cuda.to_device(plain[:6], to=y_d)  # recorded once, as a copy into y_d
        s.synchronize()
        cuda.synchronize()
    assert np.array_equal(back, 2 * np.arange(6) + 1)  # behaviour unchanged
    ops = ins.stream_ops
    assert [o.kind for o in ops] == ["h2d", "h2d", "kernel", "d2h", "h2d", "h2d", "sync", "sync"]
    assert [o.stream is s for o in ops] == [True, False, True, False, True, False, True, False]
    assert [o.pinned for o in ops[:6]] == [True, False, False, False, True, False]
    assert ops[0].nbytes == 24 and ops[3].nbytes == 24 and ops[2].name == "saxpy_kernel"
    assert ops[-1].stream is None and not ops[2].host_args
    kernel_bufs = {id(b) for b in ops[2].buffers}
    assert id(ops[0].buffers[0]) in kernel_bufs and id(ops[3].buffers[0]) in kernel_bufs


def test_the_simulator_records_allocations_among_the_stream_calls():
    x = cuda.pinned_array(10, np.float32)
    with simulator.instrument() as ins:
        s = cuda.stream()
        x_d = cuda.to_device(x, stream=s)  # an allocation, then a copy
        out_d = cuda.device_array_like(x_d)
        out_d[:4].copy_to_device(x[:4], stream=s)  # a view: no allocation
        cuda.to_device(x, to=out_d, stream=s)  # a copy into out_d: no allocation
        cuda.pinned_array_like(x)
        cuda.device_array((2, 3), np.float32)
    assert [o.kind for o in ins.stream_ops] == ["h2d", "h2d", "h2d"]
    assert [(a.call, a.nbytes, a.after) for a in ins.allocations] == [
        ("cuda.to_device", 40, 0),
        ("cuda.device_array", 40, 1),
        ("cuda.pinned_array", 40, 3),
        ("cuda.device_array", 24, 3),
    ]


def test_pinned_marks_follow_views_not_copies():
    p = cuda.pinned_array((4, 5), np.float32)
    like = cuda.pinned_array_like(np.zeros(3))
    assert is_pinned(p) and is_pinned(p[1:3]) and is_pinned(p[:, 2]) and is_pinned(like)
    assert not is_pinned(p[1:3].copy()) and not is_pinned(np.zeros(3)) and not is_pinned(np.array(p))
    assert type(p) is np.ndarray  # still a plain array


def test_cuda_pinned_pins_several_arrays_for_its_block_only():
    a, b = np.zeros(8, np.float32), np.ones(8, np.float32)
    already = cuda.pinned_array(8, np.float32)
    with simulator.instrument() as ins:
        with cuda.pinned(a, b, already):  # numba's signature: any number of host arrays
            assert is_pinned(a) and is_pinned(b[2:]) and is_pinned(already)
            a_d = cuda.to_device(a)
        cuda.to_device(b)
    assert [o.pinned for o in ins.stream_ops] == [True, False] and a_d.shape == (8,)
    assert not is_pinned(a) and not is_pinned(b) and is_pinned(already)  # pinned_array's memory stays pinned


def test_nothing_is_recorded_without_an_instrument_and_default_stream_is_one_object():
    with simulator.instrument() as ins:
        pass
    cuda.to_device(np.zeros(3))
    assert ins.stream_ops == []
    assert cuda.default_stream() is cuda.default_stream()
    with simulator.instrument() as ins:
        cuda.to_device(np.zeros(3), stream=cuda.default_stream())
    assert streams.stream_numbers(ins.stream_ops)[id(ins.stream_ops[0].stream)] == 0


def test_recorded_timeline_draws_the_reference_with_overlap():
    x = cuda.pinned_array(1000, np.float32)
    x[:] = 1
    with simulator.instrument() as ins:
        pipelined.pipelined_saxpy(np.float32(2), x, x, cuda.pinned_array_like(x), 250, 2)
    tl = recorded_timeline(ins.stream_ops, h2d_gbps=1e-6, d2h_gbps=1e-6, kernel_s=1e-3)
    assert [o.chunk for o in tl.ops if o.kind == "kernel"] == [0, 1, 2, 3]
    assert {o.stream for o in tl.ops} == {1, 2}
    assert tl.total < sum(o.end - o.start for o in tl.ops)  # something overlapped


# --- the exercise: every named mistake --------------------------------------------------------------------

TPB = 128


def _launch(n):
    return (n + TPB - 1) // TPB, TPB


def no_streams_for_copies(alpha, x_h, y_h, out_h, chunk, n_streams):
    ss = [cuda.stream() for _ in range(n_streams)]
    for k, a in enumerate(range(0, x_h.size, chunk)):
        s, part = ss[k % n_streams], slice(a, min(a + chunk, x_h.size))
        x_d, y_d = cuda.to_device(x_h[part]), cuda.to_device(y_h[part])
        out_d = cuda.device_array_like(x_d)
        saxpy_kernel[(*_launch(x_d.size), s)](alpha, x_d, y_d, out_d)
        out_d.copy_to_host(out_h[part], stream=s)
    cuda.synchronize()


def _variant(
    *,
    kernel_stream=True,
    d2h_into_slice=True,
    rebind_out=False,
    copy_in=True,
    sync=True,
    sync_in_loop=False,
    cross=False,
    streams_=True,
    host_args=False,
    last=True,
    alloc_in_loop=False,
    shared_buffers=False,
):
    """The lesson's answer (each stream's buffers allocated before the loop) with one or more mistakes switched on."""

    def fn(alpha, x_h, y_h, out_h, chunk, n_streams):
        if rebind_out:
            out_h = cuda.pinned_array(x_h.shape, x_h.dtype)
        ss = [cuda.stream() for _ in range(n_streams if streams_ else 1)]
        bufs = [[cuda.device_array(chunk, np.float32) for _ in range(3)] for _ in ss]
        if shared_buffers:  # one set of buffers for every stream: a race between the streams
            bufs = [bufs[0]] * len(ss)
        n = x_h.size if last else x_h.size - x_h.size % chunk
        for k, a in enumerate(range(0, n, chunk)):
            s = ss[k % len(ss)]
            other = ss[(k + 1) % len(ss)] if cross else s
            part = slice(a, min(a + chunk, n))
            xs, ys = (x_h[part], y_h[part]) if copy_in else (x_h[part].copy(), y_h[part].copy())
            if alloc_in_loop:
                x_d, y_d = cuda.to_device(xs, stream=s), cuda.to_device(ys, stream=s)
                out_d = cuda.device_array(x_d.shape, x_d.dtype, stream=s)
            else:
                x_d, y_d, out_d = (b[: part.stop - a] for b in bufs[k % len(ss)])
                x_d.copy_to_device(xs, stream=s)
                y_d.copy_to_device(ys, stream=s)
            grid = _launch(x_d.size) + ((other,) if kernel_stream else ())
            if host_args:
                tmp = np.empty(x_d.shape, x_d.dtype)
                saxpy_kernel[grid](alpha, x_d, y_d, tmp)
                out_h[part] = tmp
                continue
            saxpy_kernel[grid](alpha, x_d, y_d, out_d)
            if d2h_into_slice:
                out_d.copy_to_host(out_h[part], stream=s)
            else:
                out_h[part] = out_d.copy_to_host(stream=s)
            if sync_in_loop:
                cuda.synchronize()
        if sync:
            cuda.synchronize()

    return fn


@pytest.mark.parametrize(
    "fn, mistake, says",
    [
        (no_streams_for_copies, "copy_without_stream", "without a stream"),
        (_variant(kernel_stream=False), "kernel_default_stream", "launched on the default stream"),
        (_variant(d2h_into_slice=False), "pageable_out", "pageable host memory"),
        (_variant(rebind_out=True), "out_not_written", "rebinds a local name"),
        (_variant(copy_in=False), "pageable_in", "came from pageable host memory"),
        (_variant(cross=True), "cross_stream", "device memory that a copy in wrote on stream"),
        (_variant(streams_=False), "one_stream", "went to the same stream"),
        (_variant(sync=False), "no_final_sync", "still queued on stream(s)"),
        (_variant(sync=False, sync_in_loop=True), "no_overlap", "no two operations could run at the same time"),
        (_variant(host_args=True), "kernel_host_arrays", "a NumPy (host) array"),
        (_variant(last=False), "last_chunk", "only the last, shorter chunk is wrong"),
        (_variant(alloc_in_loop=True), "alloc_in_loop", "cuda.to_device allocated 1024 bytes while stream 1"),
        (_variant(shared_buffers=True), "cross_stream", "device memory that a kernel used on stream"),
    ],
)
def test_each_mistake_gets_its_named_hint(fn, mistake, says):
    res = lessons.check("02", "pipelined_saxpy", fn)
    assert res.status == "failed" and not res.passed
    assert res.details["mistake"] == mistake, res
    assert says in res.message + res.hint
    if mistake in pipelined.MISTAKES:
        assert res.hint == pipelined.hint(mistake) and "n=" in res.message  # what was given, what to do


def test_the_reference_passes_and_one_stream_is_fine_when_asked_for_one():
    assert lessons.exercise("02", "pipelined_saxpy").check(pipelined.pipelined_saxpy, trusted=True).passed
    assert lessons.check("02", "pipelined_saxpy", _variant()).passed  # the answer the notebook's text describes
    res = pipelined.check_pipelined(_variant(streams_=False), cases=[(130, 64, 1)])
    assert res.passed, res
    # one stream has no other stream to overlap with: an allocation between its commands costs no overlap
    assert pipelined.check_pipelined(_variant(alloc_in_loop=True), cases=[(130, 64, 1)]).passed


def test_an_allocation_between_two_streams_commands_is_named_a_pinned_one_too():
    def pinned_per_chunk(alpha, x_h, y_h, out_h, chunk, n_streams):
        ss = [cuda.stream() for _ in range(n_streams)]
        bufs = [[cuda.device_array(chunk, np.float32) for _ in range(3)] for _ in ss]
        for k, a in enumerate(range(0, x_h.size, chunk)):
            s, part = ss[k % n_streams], slice(a, min(a + chunk, x_h.size))
            staged = cuda.pinned_array(part.stop - a, np.float32)  # cuMemHostAlloc: an implicit synchronization
            staged[:] = x_h[part]
            x_d, y_d, out_d = (b[: part.stop - a] for b in bufs[k % n_streams])
            x_d.copy_to_device(staged, stream=s)
            y_d.copy_to_device(y_h[part], stream=s)
            saxpy_kernel[(*_launch(x_d.size), s)](alpha, x_d, y_d, out_d)
            out_d.copy_to_host(out_h[part], stream=s)
        cuda.synchronize()

    res = lessons.check("02", "pipelined_saxpy", pinned_per_chunk)
    assert res.details["mistake"] == "alloc_in_loop", res
    assert "cuda.pinned_array allocated 1024 bytes while stream 1 had work queued, and stream 2" in res.message
    assert res.hint == pipelined.hint("alloc_in_loop") and "before the loop" in res.hint


def test_allocations_before_the_loop_or_after_a_synchronize_are_not_between_streams():
    def sync_then_allocate(alpha, x_h, y_h, out_h, chunk, n_streams):
        ss = [cuda.stream() for _ in range(n_streams)]
        for k, a in enumerate(range(0, x_h.size, chunk)):
            s, part = ss[k % n_streams], slice(a, min(a + chunk, x_h.size))
            if k % n_streams == 0:
                cuda.synchronize()  # every stream idle: nothing queued for the allocations to hold up
                bufs = [[cuda.device_array(chunk, np.float32) for _ in range(3)] for _ in ss]
            x_d, y_d, out_d = (b[: part.stop - a] for b in bufs[k % n_streams])
            x_d.copy_to_device(x_h[part], stream=s)
            y_d.copy_to_device(y_h[part], stream=s)
            saxpy_kernel[(*_launch(x_d.size), s)](alpha, x_d, y_d, out_d)
            out_d.copy_to_host(out_h[part], stream=s)
        cuda.synchronize()

    res = pipelined.check_pipelined(sync_then_allocate, cases=[(1000, 125, 4)])  # allocates at chunks 0 and 4
    assert res.passed, res


def _one_allocation(alpha, x_h, y_h, out_h, chunk, n_streams, *, overlap=0):
    """Each array allocated once on the device; chunk k uses its own slice on stream k % n_streams (the pattern of
    NVIDIA's overlap example). With ``overlap`` > 0 each chunk's kernel also reads ``overlap`` elements of the
    next chunk's slice, which another stream copies in: a race."""
    ss = [cuda.stream() for _ in range(n_streams)]
    n = x_h.size
    x_d, y_d, out_d = (cuda.device_array(n, np.float32) for _ in range(3))
    for k, a in enumerate(range(0, n, chunk)):
        s, part = ss[k % n_streams], slice(a, min(a + chunk, n))
        x_d[part].copy_to_device(x_h[part], stream=s)
        y_d[part].copy_to_device(y_h[part], stream=s)
        wide = slice(a, min(a + chunk + overlap, n))
        saxpy_kernel[(*_launch(part.stop - a), s)](alpha, x_d[wide], y_d[part], out_d[part])
        out_d[part].copy_to_host(out_h[part], stream=s)
    cuda.synchronize()


def test_disjoint_slices_of_one_allocation_on_different_streams_pass_and_overlapping_ones_do_not():
    assert lessons.check("02", "pipelined_saxpy", _one_allocation).passed

    def overlapping(*args):
        _one_allocation(*args, overlap=8)

    res = pipelined.check_pipelined(overlapping, cases=[(1000, 256, 4)])
    assert (
        res.details["mistake"] == "cross_stream"
        and "a copy in on stream 2 touched device memory that a kernel used on stream 1" in res.message
    )


def test_auto_synchronize_counts_as_a_synchronize_of_its_stream():
    def per_chunk(alpha, x_h, y_h, out_h, chunk, n_streams):
        ss = [cuda.stream() for _ in range(n_streams)]
        for k, a in enumerate(range(0, x_h.size, chunk)):
            s, part = ss[k % n_streams], slice(a, min(a + chunk, x_h.size))
            with s.auto_synchronize():  # waits for the chunk before the next is issued
                x_d, y_d = cuda.to_device(x_h[part], stream=s), cuda.to_device(y_h[part], stream=s)
                out_d = cuda.device_array(x_d.shape, x_d.dtype, stream=s)
                saxpy_kernel[(*_launch(x_d.size), s)](alpha, x_d, y_d, out_d)
                out_d.copy_to_host(out_h[part], stream=s)

    res = lessons.check("02", "pipelined_saxpy", per_chunk)
    assert res.details["mistake"] == "no_overlap", res  # not "no_final_sync": every stream was synchronized


def test_placeholders_errors_and_wrong_values_are_told_what_to_do():
    def todo(alpha, x_h, y_h, out_h, chunk, n_streams):
        raise NotImplementedError

    def raises(alpha, x_h, y_h, out_h, chunk, n_streams):
        return x_h[chunk * 1000]

    def wrong(alpha, x_h, y_h, out_h, chunk, n_streams):
        pipelined.pipelined_saxpy(alpha, y_h, x_h, out_h, chunk, n_streams)

    assert lessons.check("02", "pipelined_saxpy", todo).status == "not implemented"
    res = lessons.exercise("02", "pipelined_saxpy").check(wrong, trusted=True)  # gpulab's, arguments swapped
    assert res.status == "failed" and "expected" in res.message and "alpha * x_h[part]" in res.hint
    res = lessons.check("02", "pipelined_saxpy", raises)
    assert res.status == "error" and "IndexError" in res.message
    assert "at line" in res.message and "`return x_h[chunk * 1000]`" in res.message, res  # the learner's line


N_OF_THE_NOTEBOOK = 4096  # the lesson notebook's own global n, which a learner may take for the array's size


def _answer(alpha, x_h, y_h, out_h, chunk, n_streams, *, n=None, one_block=False):
    """The notebook's answer with one learner's error: the notebook's own n, or one block per chunk."""
    n = x_h.size if n is None else n
    streams = [cuda.stream() for _ in range(n_streams)]
    bufs = [[cuda.device_array(chunk, np.float32) for _ in range(3)] for _ in range(n_streams)]
    for k, start in enumerate(range(0, n, chunk)):
        s = streams[k % n_streams]
        part = slice(start, min(start + chunk, n))
        x_d, y_d, out_d = (b[: part.stop - start] for b in bufs[k % n_streams])
        x_d.copy_to_device(x_h[part], stream=s)
        y_d.copy_to_device(y_h[part], stream=s)
        launch = (1, x_d.size) if one_block else _launch(x_d.size)
        saxpy_kernel[(*launch, s)](alpha, x_d, y_d, out_d)
        out_d.copy_to_host(out_h[part], stream=s)
    cuda.synchronize()


def uses_the_notebooks_n(alpha, x_h, y_h, out_h, chunk, n_streams):
    _answer(alpha, x_h, y_h, out_h, chunk, n_streams, n=N_OF_THE_NOTEBOOK)


def the_notebooks_n_allocating(alpha, x_h, y_h, out_h, chunk, n_streams):  # to_device of the empty slices past n
    streams = [cuda.stream() for _ in range(n_streams)]
    for k, start in enumerate(range(0, N_OF_THE_NOTEBOOK, chunk)):
        s, part = streams[k % n_streams], slice(start, min(start + chunk, N_OF_THE_NOTEBOOK))
        x_d, y_d = cuda.to_device(x_h[part], stream=s), cuda.to_device(y_h[part], stream=s)
        out_d = cuda.device_array(x_d.shape, x_d.dtype, stream=s)
        saxpy_kernel[(*_launch(x_d.size), s)](alpha, x_d, y_d, out_d)
        out_d.copy_to_host(out_h[part], stream=s)
    cuda.synchronize()


def one_block_per_chunk(alpha, x_h, y_h, out_h, chunk, n_streams):
    _answer(alpha, x_h, y_h, out_h, chunk, n_streams, one_block=True)


def streams_without_modulo(alpha, x_h, y_h, out_h, chunk, n_streams):
    streams = [cuda.stream() for _ in range(n_streams)]
    bufs = [[cuda.device_array(chunk, np.float32) for _ in range(3)] for _ in range(n_streams)]
    for k, start in enumerate(range(0, x_h.size, chunk)):
        s = streams[k]
        part = slice(start, min(start + chunk, x_h.size))
        x_d, y_d, out_d = (b[: part.stop - start] for b in bufs[k % n_streams])
        x_d.copy_to_device(x_h[part], stream=s)
        y_d.copy_to_device(y_h[part], stream=s)
        saxpy_kernel[(*_launch(x_d.size), s)](alpha, x_d, y_d, out_d)
        out_d.copy_to_host(out_h[part], stream=s)
    cuda.synchronize()


@pytest.mark.parametrize(
    ("fn", "says", "hint"),
    [
        (uses_the_notebooks_n, "incompatible shape", "the notebook's own n is another array's size"),
        (the_notebooks_n_allocating, "the grid must have at least 1 block", "a chunk came out empty"),
        (one_block_per_chunk, "a block can hold at most 1024 threads", "threads = 128, blocks = "),
        (streams_without_modulo, "s = streams[k]", "streams[k % n_streams]"),
    ],
    ids=["the_notebooks_n", "the_notebooks_n_allocating", "one_block_per_chunk", "no_modulo"],
)
def test_an_error_names_the_learners_line_and_why(fn, says, hint):
    res = lessons.check("02", "pipelined_saxpy", fn)
    assert res.status == "error" and says in res.message and hint in res.hint, res
    assert "Traceback" not in str(res), res


def test_the_reference_kernel_is_compiled_to_ptx_with_the_elementwise_family():
    """The exercise's kernel is the library's saxpy_kernel, which tests/test_ptx.py compiles for sm_75 and
    sm_90 through kernels.elementwise.PTX_SIGNATURES."""
    from gpulab.kernels import elementwise

    assert saxpy_kernel in [k for k, _ in elementwise.PTX_SIGNATURES]
    shown = lessons.reveal("02", "pipelined_saxpy", display=False)
    assert "saxpy[" in shown and "saxpy_kernel" not in shown and "ceil_div" not in shown, shown  # the notebook's names
    assert pipelined.saxpy is saxpy_kernel


def test_in_gpu_mode_the_recording_leaves_numba_cudas_own_calls_alone():
    """gpu mode (compile-only stands in for a GPU) imports numba-cuda's device API; trace's simulated() calls
    harden(), which wraps the simulator's copies, launches and synchronizes: numba.cuda's own functions and the
    methods of its device arrays, streams and kernels (what lesson 02's gpu-mode cells call) must stay as they were."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import gpulab
        from numba import cuda
        from numba.cuda import dispatcher
        from numba.cuda.cudadrv import devicearray, driver
        names = ("to_device", "device_array", "pinned_array", "pinned_array_like", "pinned", "stream", "synchronize",
                 "default_stream", "legacy_default_stream", "defer_cleanup")
        methods = [(devicearray.DeviceNDArray, "copy_to_host"), (devicearray.DeviceNDArray, "copy_to_device"),
                   (driver.Stream, "synchronize"), (dispatcher.CUDADispatcher, "__getitem__")]
        before = [getattr(cuda, n) for n in names] + [getattr(c, m) for c, m in methods]
        from gpulab import simulator
        simulator.harden()
        after = [getattr(cuda, n) for n in names] + [getattr(c, m) for c, m in methods]
        from numba.cuda.simulator import api
        print(gpulab.mode(), cuda.to_device.__module__, sum(a is not b for a, b in zip(before, after)),
              api.synchronize.__qualname__)
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("GPULAB_DEVICE", "NUMBA_ENABLE_CUDASIM")}
    env |= {"GPULAB_DEVICE": "gpu", "GPULAB_COMPILE_ONLY": "1"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    # nothing of numba.cuda's changed; the simulator's own synchronize is the one wrapped
    assert r.stdout.split() == ["gpu", "numba.cuda.api", "0", "install.<locals>.synchronize"], r.stdout


# --- the figure -------------------------------------------------------------------------------------------


def test_stream_timeline_figure_has_a_row_per_stream_and_units():
    one = pipeline_timeline(4, 2 * MS, 1 * MS, 2 * MS)
    four = pipeline_timeline(4, 2 * MS, 1 * MS, 2 * MS, streams=4)
    fig = stream_timeline({"1 stream": one, "4 streams": four}, note="a model, not a measurement")
    assert fig.layout.xaxis.title.text == "time (ms)" and "a model" in fig.layout.title.text
    assert "1 stream: 20 ms" in fig.layout.title.text and "4 streams: 11 ms" in fig.layout.title.text
    assert len(fig.layout.yaxis.categoryarray) == 5
    assert sum(len(t.x) for t in fig.data) == 24
    with pytest.raises(ValueError, match="at least one timeline"):
        stream_timeline({})


# --- lesson 02's cells ------------------------------------------------------------------------------------


def test_lesson02_asks_for_the_prediction_before_the_model_answers_it():
    """The guess is entered (as None) in a cell of its own before the cell that compares it; the committed
    (simulator) output shows the model's 11 ms, and the text states the figures the model uses."""
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks" / "02_memory.ipynb").read_text("utf-8"))
    cells = [("".join(c["source"]), c) for c in nb["cells"]]
    guess = next(k for k, (s, _) in enumerate(cells) if s.startswith("guess_ms_4_streams = None"))
    compare = next(k for k, (s, _) in enumerate(cells) if "lessons.compare(guess_ms_4_streams" in s)
    assert guess < compare and "2 ms" in cells[guess - 1][0] and "4 streams" in cells[guess - 1][0]
    out = "".join("".join(o.get("text", "")) for o in cells[compare][1]["outputs"])
    assert "The model's: 11 ms" in out
    assert lessons.compare(11, pipeline_timeline(4, 2 * MS, 1 * MS, 2 * MS, streams=4).total / MS).count("right")
    assert "too high" in lessons.compare(20, pipeline_timeline(4, 2 * MS, 1 * MS, 2 * MS, streams=4).total / MS)


def test_gpu_mode_names_a_missing_final_sync_from_the_result(monkeypatch):
    """In gpu mode no call is recorded: copies back still in flight when the function returns leave out_h NaN or
    partly written, and the check must name the missing synchronize (not 'out_h was not written'). Stand-ins: a
    'GPU' whose copies back land at the next cuda.synchronize()."""
    from types import SimpleNamespace

    pending: list = []

    def synchronize():
        while pending:
            pending.pop()()

    fake_cuda = SimpleNamespace(pinned_array=lambda n, dtype: np.empty(n, dtype), synchronize=synchronize)
    monkeypatch.setattr(pipelined, "cuda", fake_cuda)
    monkeypatch.setattr(pipelined, "runtime", SimpleNamespace(is_simulator=lambda: False))

    def no_sync(alpha, x_h, y_h, out_h, chunk, n_streams):  # every chunk's copy back is still queued
        for start in range(0, x_h.size, chunk):
            part = slice(start, min(start + chunk, x_h.size))
            pending.append(lambda part=part: out_h.__setitem__(part, alpha * x_h[part] + y_h[part]))

    def synced(alpha, x_h, y_h, out_h, chunk, n_streams):
        no_sync(alpha, x_h, y_h, out_h, chunk, n_streams)
        synchronize()

    res = pipelined.check_pipelined(no_sync, cases=[(1000, 256, 4)])
    assert res.status == "failed" and res.details["mistake"] == "no_final_sync", res
    assert res.hint == pipelined.MISTAKES["no_final_sync"] and "still being copied back" in res.message
    ok = pipelined.check_pipelined(synced, cases=[(1000, 256, 4), (7, 4, 2)])
    assert ok.passed and "gpu mode" in ok.message, ok

    def wrong(alpha, x_h, y_h, out_h, chunk, n_streams):  # wrong also after a synchronize: not a missing sync
        out_h[:] = alpha * y_h + x_h

    res = pipelined.check_pipelined(wrong, cases=[(1000, 256, 4)])
    assert res.status == "failed" and res.details.get("mistake") != "no_final_sync", res


# --- measured against the model -----------------------------------------------------------------------------


def test_compare_with_model_says_when_streams_saved_less_than_the_model_predicts():
    # The H200 recording of 2026-12-04: 4 streams no faster than 1, while the model from the chunk times said 3.99 ms.
    lines = streams.compare_with_model(
        {1: 5.162e-3, 4: 5.212e-3}, {1: 5.711e-3, 4: 3.993e-3}, chunk_s=(4.684e-4, 5.56e-5, 1.899e-4)
    )
    assert lines[0] == "1 stream: measured 5.16 ms, the model 5.71 ms (0.90x the model)"
    assert lines[1] == "4 streams: measured 5.21 ms, the model 3.99 ms (1.31x the model)"
    assert lines[2].startswith(
        "They disagree: the model says 4 streams take 1.43x less time than 1, the measurement 0.99x"
    )
    assert "The kernel is 8% of a chunk's time" in lines[2] and "both at once on two streams" in lines[2]
    assert len(lines) == 3


def test_compare_with_model_agrees_within_the_tolerance_and_names_a_saving_that_agrees_alone():
    ok = streams.compare_with_model({1: 20.5e-3, 4: 11.4e-3}, {1: 20e-3, 4: 11e-3})
    assert ok[-1].startswith("Measured and model agree within 15%: 4 streams took 1.80x less time than 1")
    slower = streams.compare_with_model({1: 40e-3, 4: 22e-3}, {1: 20e-3, 4: 11e-3})  # both 2x: the saving agrees
    assert slower[-1].startswith("The saving agrees with the model (4 streams 1.82x faster than 1, the model 1.82x)")
    more = streams.compare_with_model({1: 20e-3, 4: 8e-3}, {1: 20e-3, 4: 11e-3})
    assert more[-1].startswith("4 streams saved more than the model predicts (2.50x less time than 1, the model 1.82x)")
    # a kernel that is most of a chunk's time: no sentence about the copies' overlap
    big_kernel = streams.compare_with_model({1: 20e-3, 4: 20e-3}, {1: 20e-3, 4: 11e-3}, chunk_s=(2e-3, 6e-3, 2e-3))
    assert "They disagree" in big_kernel[-1] and "The kernel is" not in big_kernel[-1]


def test_compare_with_model_needs_two_stream_counts_in_both():
    with pytest.raises(
        ValueError, match=r"at least two stream counts in both, got measured for \[1, 4\] and the model for \[1\]"
    ):
        streams.compare_with_model({1: 1.0, 4: 1.0}, {1: 1.0})
