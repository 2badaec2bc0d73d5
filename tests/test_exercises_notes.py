"""Notes on a verdict that change no score: a kernel that changed one of its inputs (review finding A8), a float32
kernel that accumulates in float64 (A10); and no shipped answer gets either."""

from __future__ import annotations


import numpy as np
import pytest
from numba import cuda, float32

from gpulab import lessons
from gpulab.exercises import check_kernel
from gpulab.exercises.compare import first_change
from gpulab.exercises.precision import float64_literal_accumulators


def _vectors(n, rng):
    return rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)


# --- A8: an input the kernel changed ---------------------------------------------------------------


@cuda.jit
def add_into_a(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        a[i] += b[i]
        out[i] = a[i]


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


@cuda.jit
def leaky_relu_in_place(x, out):
    i = cuda.grid(1)
    if i < x.size:
        if x[i] < 0:
            x[i] = 0.01 * x[i]
        out[i] = x[i]


def test_a_kernel_that_changes_its_input_keeps_its_score_and_gets_a_note():
    res = lessons.check("01", "add", add_into_a)
    assert res.passed and res.score == res.max_score, res
    assert len(res.notes) == 1, res.notes
    note = res.notes[0]
    assert note.startswith("your kernel changed its input a (a[0] was "), note
    assert "callers expect their inputs unchanged" in note and "write only to out" in note, note
    assert "note: your kernel changed its input a" in str(res) and "<b>Note:</b>" in res._repr_html_()
    assert res.to_dict()["notes"] == res.notes


def test_the_note_names_the_element_and_how_many_changed():
    res = check_kernel(
        add_into_a,
        spec=lambda a, b: a + b,
        inputs=lambda n, rng: (np.arange(n, dtype=np.float32), np.full(n, 2, np.float32)),
        sizes=[5],
        threads=32,
    )
    assert res.passed, res
    assert res.notes[0].startswith("your kernel changed its input a (a[0] was 0, is now 2; 5 of its 5 elements "), res


def test_an_in_place_leaky_relu_gets_the_note_on_x_only():
    res = lessons.check("06", "leaky_relu", leaky_relu_in_place)
    assert res.passed, res
    assert [n.split(" (")[0] for n in res.notes] == ["your kernel changed its input x"], res.notes


def test_a_kernel_that_leaves_its_inputs_alone_gets_no_note():
    res = lessons.check("01", "add", add_kernel)
    assert res.passed and res.notes == [], res


def test_a_host_function_that_changes_an_input_gets_the_note_too():
    def host(a, b, out):
        a += b
        out[:] = a

    res = check_kernel(None, spec=lambda a, b: a + b, inputs=_vectors, sizes=[4, 9], host=host)
    assert res.passed, res
    assert res.notes and res.notes[0].startswith("your code changed its input a (a["), res.notes


def test_arrays_the_exercise_declares_as_updated_in_place_are_not_inputs():
    """An exercise whose kernel updates an array in place copies the input into an output (lab 10's grads, lab 06's
    Adam p, m, v) or hands the kernel a view it made (lesson 08's RNG states): neither is the input itself."""

    @cuda.jit
    def scale_in_place(g, s):
        i = cuda.grid(1)
        if i < g.size:
            g[i] *= s

    def in_place(ins, outs):
        outs[0][...] = ins[0]
        return outs[0], ins[1]

    copied = check_kernel(
        scale_in_place,
        spec=lambda g, s: g * s,
        inputs=lambda n, rng: (rng.random(n, dtype=np.float32), np.float32(2)),
        sizes=[3, 40],
        threads=32,
        args=in_place,
    )
    assert copied.passed and copied.notes == [], copied

    @cuda.jit
    def advance(state, out):
        i = cuda.grid(1)
        if i < out.size:
            state[i] += 1
            out[i] = state[i]

    viewed = check_kernel(
        advance,
        spec=lambda words: (words.view(np.int32) + 1).astype(np.int32),
        inputs=lambda n, rng: (rng.integers(0, 100, n).astype(np.uint32),),
        sizes=[5, 40],
        threads=32,
        args=lambda ins, outs: (ins[0].view(np.int32), *outs),
    )
    assert viewed.passed and viewed.notes == [], viewed

    def updated(**kw):  # the states themselves, not a view: noted unless declared updated in place
        return check_kernel(
            advance,
            spec=lambda words: words + 1,
            inputs=lambda n, rng: (rng.integers(0, 100, n).astype(np.int32),),
            sizes=[5],
            threads=32,
            **kw,
        )

    assert updated().passed and len(updated().notes) == 1
    declared = updated(updated_inputs=[0])  # check_kernel passes it on, as Problem(updated_inputs=) does
    assert declared.passed and declared.notes == [], declared


def test_first_change_is_bitwise_so_nan_stays_unchanged_and_records_compare():
    a = np.array([1.0, np.nan, 3.0], np.float32)
    assert first_change(a, a.copy()) is None
    b = a.copy()
    b[2] = -3.0
    found = first_change(a, b)
    assert (
        found is not None and found.index == (2,) and found.count == 1 and found.where("x") == "x[2] was 3, is now -3"
    )
    rec = np.zeros(4, dtype=[("s0", np.uint64), ("s1", np.uint64)])
    moved = rec.copy()
    moved["s1"][3] = 7
    assert first_change(rec, moved).index == (3,)
    m = np.zeros((2, 3), np.int32)
    n = m.copy()
    n[1, 2] = 5
    assert first_change(m, n).index == (1, 2) and first_change(np.zeros(0), np.zeros(0)) is None


# --- A10: float64 arithmetic in a float32 kernel ------------------------------------------------------


@cuda.jit
def matvec_f64(A, x, y):
    i = cuda.grid(1)
    if i < y.size:
        acc = 0.0
        for k in range(A.shape[1]):
            acc += A[i, k] * x[k]
        y[i] = acc


@cuda.jit
def matvec_f32(A, x, y):
    i = cuda.grid(1)
    if i < y.size:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * x[k]
        y[i] = acc


@cuda.jit
def matmul_f64(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = 0.0
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


@cuda.jit
def matmul_f32(A, B, C):
    j, i = cuda.grid(2)
    if i < C.shape[0] and j < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[i, k] * B[k, j]
        C[i, j] = acc


def test_a_float64_accumulator_without_ptx_is_found_in_the_source():
    res = lessons.check("03", "matvec", matvec_f64)  # lesson 03's matvec compiles no PTX
    assert res.passed and res.score == res.max_score, res
    assert len(res.notes) == 1 and res.notes[0].startswith(
        "your kernel computes in float64 in a loop although its arrays are float32 (acc starts as a float literal "
        "and is updated in a loop)"
    ), res.notes
    assert "float32(0.0)" in res.notes[0]
    ok = lessons.check("03", "matvec", matvec_f32)
    assert ok.passed and ok.notes == [], ok


def test_the_source_pattern_needs_a_literal_start_and_an_update_in_a_loop():
    assert float64_literal_accumulators(matvec_f64) == ["acc"]
    assert float64_literal_accumulators(matvec_f32) == []
    assert float64_literal_accumulators(leaky_relu_in_place) == []  # 0.01 * x: only the PTX sees that

    def once(x, out):
        s = 0.0
        s += x[0]  # not in a loop: a few float64 operations per thread cost little
        out[0] = s

    assert float64_literal_accumulators(once) == []


@pytest.mark.ptx
def test_a_float64_accumulator_is_noted_where_the_check_compiles_ptx_too():
    res = lessons.check("03", "matmul_naive", matmul_f64)  # ptx=: the kernel compiles, and is noted
    assert res.passed and res.score == res.max_score, res
    assert len(res.notes) == 1 and "(acc starts as a float literal and is updated in a loop)" in res.notes[0], res
    ok = lessons.check("03", "matmul_naive", matmul_f32)
    assert ok.passed and ok.notes == [], ok


# --- no shipped answer gets a note ------------------------------------------------------------------
# Checked where the answers already run, at no extra cost: every lesson reference in tests/test_lessons.py
# (test_every_reference_passes_its_check), and every check cell of the lesson notebooks and lab solutions in
# make test's nbval run (tests/nbval_checks.py fails a cell whose output holds a note).


# --- NumPy's floating-point warnings stay out of stderr ---------------------------------------------


@cuda.jit
def square_big(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] * np.float32(1e30) * np.float32(1e30)  # float32 overflow: inf (NumPy warns in the simulator)


def test_a_kernels_float_warnings_go_to_the_verdict_not_to_stderr(capfd):
    """nbgrader scores a graded cell that wrote to stderr 0, and a GPU gives inf silently: the simulator's NumPy
    warning ("overflow encountered in multiply") is kept out of stderr and named in the failing verdict."""
    res = check_kernel(square_big, spec=lambda a, b: a + b, inputs=_vectors, sizes=[4], threads=32)
    assert not res.passed, res
    assert "NumPy warned while it ran: overflow encountered in" in res.message, res.message
    assert "a GPU gives the inf or nan without a word" in res.message
    assert "RuntimeWarning" not in capfd.readouterr().err


def test_other_warnings_still_show(recwarn):
    import warnings

    from gpulab.exercises.check import float_warnings

    with float_warnings() as found:
        warnings.warn("a deprecation the learner should see", DeprecationWarning, stacklevel=1)
        for _ in range(3):
            np.float32(1e30) * np.float32(1e30)
            warnings.warn("another runtime warning, once per place", RuntimeWarning, stacklevel=1)
    assert found == ["overflow encountered in scalar multiply"]
    assert [str(w.message) for w in recwarn] == [
        "a deprecation the learner should see",
        "another runtime warning, once per place",  # its filters as before: shown once, not once per call
    ]


def test_an_error_filter_on_other_warnings_still_raises_where_they_happen():
    """Under `-W error` (a teacher's or a test's filter) a warning that is not NumPy's floating-point one raises at
    its own line, as before, not after the block."""
    import warnings

    from gpulab.exercises.check import float_warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match="not a float warning"):
            with float_warnings() as found:
                np.float32(1e30) * np.float32(1e30)  # diverted, not raised: a GPU says nothing
                warnings.warn("not a float warning", RuntimeWarning, stacklevel=1)
        assert found == ["overflow encountered in scalar multiply"]
