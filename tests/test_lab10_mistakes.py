"""Lab 10's checks name the usual wrong answers (a forgotten master copy, Adam's moments counted once, GiB for GB,
a flag that is never reset, a ring that leaves chunk i + 1 on device i, a flat ring posing as a hierarchical one),
run through the same ``gpulab.problems.lab10`` checks the lab's graded cells call."""

from __future__ import annotations

import gpulab  # noqa: F401 - picks the mode before numba is imported

import math
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from numba import cuda

from gpulab import problems, ptx
from gpulab.kernels import blocks_for

L = problems.lab10
LAB = Path(__file__).resolve().parents[1] / "labs" / "solutions" / "lab10_scaling_up.ipynb"


def _hinted(res, words: str) -> None:
    assert not res.passed, res
    assert words in (res.hint or ""), res


# ---------------------------------------------------------------------------------- Exercise 1: memory


def _budget(master=4, moments=2, state=4, act_mixed=2, gb_bytes=1e9, fixed=True):
    def training_bytes(params, activations, batch, mixed):
        w, act, st = (2, act_mixed, state) if mixed else (4, 4, 4)
        return w * params, master * params if mixed else 0, w * params, st * moments * params, act * activations * batch

    def largest_batch(params, activations, memory_gb, mixed):
        static = sum(training_bytes(params, activations, 0, mixed)) if fixed else 0
        per = training_bytes(params, activations, 1, mixed)[4]
        free = memory_gb * gb_bytes - static
        return 0 if free < per else int(free // per)

    return L.budget_host(training_bytes, largest_batch)


def test_the_right_budget_passes():
    res = L.BUDGET.check(host=_budget())
    assert res.passed, res


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"master": 0}, "FP32 master copy"),
        ({"moments": 1}, "two moments per parameter"),
        ({"state": 2}, "optimizer state stays FP32"),
        ({"act_mixed": 4}, "activations in FP16"),
        ({"gb_bytes": 2**30}, "not GiB"),
        ({"fixed": False}, "subtract them from the memory"),
    ],
)
def test_budget_mistakes_are_named(kw, words):
    _hinted(L.BUDGET.check(host=_budget(**kw)), words)


# ---------------------------------------------------------------------------- Exercise 2: loss scaling


@cuda.jit
def unscale_good(grads, inv_scale, clip, found_inf):
    i = cuda.grid(1)
    if i < grads.size:
        g = grads[i] * inv_scale
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.max(found_inf, 0, 1)
        else:
            g = min(max(g, -clip), clip)
        grads[i] = g


@cuda.jit
def unscale_counts(grads, inv_scale, clip, found_inf):
    i = cuda.grid(1)
    if i < grads.size:
        g = grads[i] * inv_scale
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.add(found_inf, 0, 1)
        else:
            g = min(max(g, -clip), clip)
        grads[i] = g


@cuda.jit
def unscale_divides(grads, inv_scale, clip, found_inf):
    i = cuda.grid(1)
    if i < grads.size:
        g = grads[i] / inv_scale
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.max(found_inf, 0, 1)
        else:
            g = min(max(g, -clip), clip)
        grads[i] = g


@cuda.jit
def unscale_not_in_place(grads, inv_scale, clip, found_inf):
    i = cuda.grid(1)
    if i < grads.size:
        g = grads[i] * inv_scale
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.max(found_inf, 0, 1)
        else:
            g = min(max(g, -clip), clip)
        pass


@cuda.jit
def unscale_inf_only(grads, inv_scale, clip, found_inf):  # nan goes unflagged
    i = cuda.grid(1)
    if i < grads.size:
        g = grads[i] * inv_scale
        if math.isinf(g):
            cuda.atomic.max(found_inf, 0, 1)
        else:
            g = min(max(g, -clip), clip)
        grads[i] = g


@cuda.jit
def unscale_not_clipped(grads, inv_scale, clip, found_inf):  # lesson 10's kernel made in place: no clip
    i = cuda.grid(1)
    if i < grads.size:
        g = grads[i] * inv_scale
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.max(found_inf, 0, 1)
        else:
            g = g
        grads[i] = g


@cuda.jit
def unscale_upper_only(grads, inv_scale, clip, found_inf):
    i = cuda.grid(1)
    if i < grads.size:
        g = grads[i] * inv_scale
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.max(found_inf, 0, 1)
        else:
            g = min(g, clip)
        grads[i] = g


@cuda.jit
def unscale_lower_only(grads, inv_scale, clip, found_inf):
    i = cuda.grid(1)
    if i < grads.size:
        g = grads[i] * inv_scale
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.max(found_inf, 0, 1)
        else:
            g = max(g, -clip)
        grads[i] = g


@cuda.jit
def unscale_clips_first(grads, inv_scale, clip, found_inf):  # an inf becomes clip, only nan sets the flag
    i = cuda.grid(1)
    if i < grads.size:
        g = min(max(grads[i] * inv_scale, -clip), clip)
        grads[i] = g
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.max(found_inf, 0, 1)


@cuda.jit
def unscale_clips_nan_to_clip(grads, inv_scale, clip, found_inf):  # clip first, min inside: a nan becomes clip
    i = cuda.grid(1)
    if i < grads.size:
        g = max(-clip, min(clip, grads[i] * inv_scale))
        if not math.isfinite(g):
            cuda.atomic.max(found_inf, 0, 1)
        grads[i] = g


@cuda.jit
def unscale_zeroes_overflow(grads, inv_scale, clip, found_inf):
    i = cuda.grid(1)
    if i < grads.size:
        g = grads[i] * inv_scale
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.max(found_inf, 0, 1)
            g = 0.0
        else:
            g = min(max(g, -clip), clip)
        grads[i] = g


@cuda.jit
def unscale_abs(grads, inv_scale, clip, found_inf):
    i = cuda.grid(1)
    if i < grads.size:
        g = grads[i] * inv_scale
        if math.isinf(g) or math.isnan(g):
            cuda.atomic.max(found_inf, 0, 1)
        else:
            g = min(abs(g), clip)
        grads[i] = g


def test_the_right_unscale_kernel_passes_and_compiles():
    res = L.UNSCALE.check(unscale_good)
    assert res.passed and res.score == res.max_score, res


@pytest.mark.parametrize(
    ("kernel", "words"),
    [
        (unscale_counts, "a flag, 0 or 1"),
        (unscale_divides, "multiply by inv_scale"),
        (unscale_not_in_place, "in place"),
        (unscale_inf_only, "found_inf stayed 0 though a gradient is nan"),
        (unscale_not_clipped, "this is lesson 10's unscale, which does not clip"),
        (unscale_clips_first, "an inf or nan was clipped to +-clip"),
        (unscale_clips_nan_to_clip, "an inf or nan was clipped to +-clip"),  # before: no hint
        (unscale_zeroes_overflow, "an inf or nan was replaced"),
        (unscale_abs, "negative gradients lost their sign"),
        (unscale_upper_only, "only the upper bound was applied"),
        (unscale_lower_only, "only the lower bound was applied"),
    ],
)
def test_unscale_mistakes_are_named(kernel, words):
    _hinted(L.UNSCALE.check(kernel, ptx=None), words)


def test_lesson_10s_revealed_unscale_fails_the_lab():
    """Lesson 10's unscale (out of place, a count, no clip), as lessons.reveal prints it, fails the lab's check: its
    parameters are not the lab's. Made in place with the lab's parameters, it is named (test above). Before, the
    lab asked for it made in place with a flag, nothing more."""
    from gpulab import lessons

    from kernel_edits import edited_kernel

    shown = lessons.reveal("10", "unscale")
    res = L.UNSCALE.check(edited_kernel(shown, "unscale_kernel", {"cuda": cuda, "math": math}), ptx=None, trusted=True)
    assert not res.passed and res.score == 0, res


def _scaler(reset_found=True, skip=True, reset_good=True, grow=lambda good, k: good == k, backoff=0.5, scaled=False):
    def run_with_loss_scaling(batches, scale, growth_interval):
        xp = gpulab.xp()
        steps, n = batches.shape
        total, scales, applied, good = xp.zeros(n, np.float32), [], [], 0
        found = xp.zeros(1, np.int32)
        for t in range(steps):
            grads = batches[t].copy()
            if reset_found:
                found = xp.zeros(1, np.int32)
            unscale_good[blocks_for(n, 32), 32](grads, np.float32(1 / scale), np.float32(np.inf), found)
            scales.append(scale)
            overflow = int(gpulab.to_host(found)[0]) != 0
            applied.append(not (overflow and skip))
            if applied[-1]:
                total += batches[t] if scaled else grads
            if overflow:
                scale, good = scale * backoff, 0 if reset_good else good
            else:
                good += 1
                if grow(good, growth_interval):
                    scale, good = scale * 2, 0
        return scales, applied, total

    return L.scaler_host(run_with_loss_scaling)


def test_the_right_scaler_passes():
    res = L.SCALER.check(host=_scaler())
    assert res.passed, res


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"reset_found": False}, "must start at 0 before every step"),
        ({"skip": False}, "must be skipped"),
        ({"reset_good": False}, "starts again from 0"),
        ({"grow": lambda good, k: True}, "not after every clean step"),
        ({"grow": lambda good, k: good == k + 1}, "not growth_interval + 1"),
        ({"backoff": 2.0}, "the scale halves"),
        ({"scaled": True}, "total holds the scaled gradients"),
    ],
)
def test_scaler_mistakes_are_named(kw, words):
    _hinted(L.SCALER.check(host=_scaler(**kw)), words)


# ------------------------------------------------------------------------------------- Exercise 3: ring


def _phases(owner=0, rs_steps=None, gather_adds=False, unit=lambda m: m.nbytes, bounds=L.chunk_bounds):
    def reduce_scatter(bufs):
        p = len(bufs)
        b, sent = bounds(bufs[0].size, p), [0] * p
        for s in range(p - 1 if rs_steps is None else rs_steps(p)):
            ks = [(i - s - 1 + owner) % p for i in range(p)]
            msgs = [bufs[i][b[k] : b[k + 1]].copy() for i, k in enumerate(ks)]
            for i, (k, m) in enumerate(zip(ks, msgs)):
                bufs[(i + 1) % p][b[k] : b[k + 1]] += m
                sent[i] += unit(m)
        return sent

    def all_gather(bufs):
        p = len(bufs)
        b, sent = bounds(bufs[0].size, p), [0] * p
        for s in range(p - 1):
            ks = [(i - s + owner) % p for i in range(p)]
            msgs = [bufs[i][b[k] : b[k + 1]].copy() for i, k in enumerate(ks)]
            for i, (k, m) in enumerate(zip(ks, msgs)):
                if gather_adds:
                    bufs[(i + 1) % p][b[k] : b[k + 1]] += m
                else:
                    bufs[(i + 1) % p][b[k] : b[k + 1]] = m
                sent[i] += unit(m)
        return sent

    return reduce_scatter, all_gather


def _floor_bounds(n, p):
    return [k * (n // p) for k in range(p)] + [n]


def test_the_right_ring_passes_and_sends_two_p_minus_one_over_p():
    assert L.RING.check(host=L.ring_host(*_phases())).passed
    for p, n in [(3, 10), (8, 203), (5, 3)]:
        _, _, _, sent = L.ring_spec(np.zeros((p, n), np.float32))
        assert np.all(np.abs(sent - 2 * (p - 1) / p * 4 * n) < 8)  # within two values of lesson 10's figure


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        ({"owner": 1}, "lesson 10's ring leaves chunk i + 1"),
        ({"rs_steps": lambda p: p}, "takes p - 1 steps"),
        ({"gather_adds": True}, "overwrites the neighbour's chunk"),
        ({"unit": lambda m: m.size}, "in bytes"),
        ({"bounds": _floor_bounds}, "the first length % p chunks are one longer"),
    ],
)
def test_ring_mistakes_are_named(kw, words):
    _hinted(L.RING.check(host=L.ring_host(*_phases(**kw))), words)


# ------------------------------------------------------------------------------- challenge: hierarchical


def _flat(buffers, g, rs, ag):
    sent = [a + b for a, b in zip(rs(buffers), ag(buffers))]
    return buffers, [0] * len(buffers), sent


def _whole(buffers, g, rs, ag):
    n_gpus = len(buffers)
    fast, slow = [0] * n_gpus, [0] * n_gpus
    nodes = [list(range(s, s + g)) for s in range(0, n_gpus, g)]
    for ranks in nodes:
        for r, s in zip(ranks, rs([buffers[r] for r in ranks])):
            fast[r] += s
    for local in range(g):  # the ring across nodes on the whole buffer (the result stays right: sums are sums)
        ranks = list(range(local, n_gpus, g))
        b = L.chunk_bounds(buffers[0].size, g)
        group = [buffers[r][b[local] : b[local + 1]] for r in ranks]
        rs(group), ag(group)
        whole = [np.zeros_like(buffers[r]) for r in ranks]
        for r, a, c in zip(ranks, rs(whole), ag(whole)):
            slow[r] += a + c
    for ranks in nodes:
        for r, s in zip(ranks, ag([buffers[r] for r in ranks])):
            fast[r] += s
    return buffers, fast, slow


def _swapped(buffers, g, rs, ag):
    out, fast, slow = L.hierarchical_allreduce(buffers, g, rs, ag)
    return out, slow, fast


def test_the_right_hierarchical_allreduce_passes_and_keeps_bytes_off_the_slow_link():
    assert L.HIERARCHICAL.check(host=L.hierarchical_host(L.hierarchical_allreduce)).passed
    nodes, g, n = 4, 8, 4096
    _, fast, slow = L.hierarchical_spec(np.zeros((nodes * g, n), np.float32), np.array([g]))
    assert np.allclose(slow / (4 * n), 2 * (nodes - 1) / nodes / g, atol=1e-3)  # 1/g of a flat ring's share
    assert np.allclose(fast / (4 * n), 2 * (g - 1) / g, atol=1e-3)


@pytest.mark.parametrize(
    ("fn", "words"),
    [(_flat, "one flat ring over every GPU"), (_whole, "not its whole buffer"), (_swapped, "are swapped")],
)
def test_hierarchical_mistakes_are_named(fn, words):
    _hinted(L.HIERARCHICAL.check(host=L.hierarchical_host(fn)), words)


# ------------------------------------------------------------------------------------- the notebook itself

_CALL = re.compile(r"L10\.([A-Z]+)\.check\(")


def test_graded_cells_run_lab10_problems_with_their_points_and_hidden_tests():
    """What tests/test_problems.py checks for the labs in problems.LABS, for lab 10 (its problems are checked at
    gpu sizes in tests/test_gpu_sizes_lab10.py instead of test_gpu_sizes.py)."""
    nb = nbformat.read(LAB, as_version=4)
    graded = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert [c.metadata["nbgrader"]["points"] for c in graded] == [2, 3, 3, 4]
    for cell in graded:
        meta = cell.metadata["nbgrader"]
        visible = cell.source.split("### BEGIN HIDDEN TESTS")[0]
        names = _CALL.findall(visible)
        assert names and sum(getattr(L, n).points for n in names) == meta["points"], meta["grade_id"]
        hidden = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
        assert set(_CALL.findall(hidden)) == set(names) and "seed=" in hidden and "sizes=" in hidden
        assert "results.append(hidden)" in hidden


def test_the_hidden_unscale_check_fails_a_kernel_that_flags_only_inf():
    """The graded cell's hidden unscale check holds a size with a nan and no inf: before, its sizes all held an inf
    as well, so a kernel that flags only inf passed it and earned a third of the cell."""
    nb = nbformat.read(LAB, as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "lab10-scaling-check")
    hidden = cell.source.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
    call = next(line for line in hidden.splitlines() if "L10.UNSCALE.check(" in line)
    scope = {"L10": L, "problems": problems, "unscale_clip_kernel": unscale_inf_only}
    res = eval(call.split("=", 1)[1].strip(), scope)  # noqa: S307 - the lab's own hidden check
    assert not res.passed and res.score == 0, res
    scope["unscale_clip_kernel"] = unscale_good
    res = eval(call.split("=", 1)[1].strip(), scope)  # noqa: S307
    assert res.passed and res.score == res.max_score, res


@pytest.mark.ptx
def test_the_solution_kernel_compiles_to_ptx():
    nb = nbformat.read(LAB, as_version=4)
    cell = next(c for c in nb.cells if c.source.startswith("@cuda.jit\ndef unscale_clip_kernel"))
    source = "import math\nfrom numba import cuda\n" + cell.source
    assert ptx.compile_source(source, "unscale_clip_kernel", L.UNSCALE.ptx, ccs=[(7, 5), (9, 0)]) == {
        "7.5": "ok",
        "9.0": "ok",
    }


def test_the_solution_collectives_follow_cupys_rules():
    """In gpu mode the devices' buffers are CuPy arrays: the lab's own reduce_scatter, all_gather and
    hierarchical_allreduce must not assign NumPy arrays into them nor call NumPy functions on them."""
    from test_gpu_host_outputs import _function_from_notebook, device

    scope = {"np": np, "chunk_bounds": L.chunk_bounds}
    for name in ("reduce_scatter", "all_gather", "hierarchical_allreduce"):
        exec(_function_from_notebook(LAB, name), scope)  # noqa: S102 - the lab's own solution
    x = np.random.default_rng(0).standard_normal((6, 23)).astype(np.float32)
    bufs = [device(row) for row in x]
    out, fast, slow = scope["hierarchical_allreduce"](bufs, 3, scope["reduce_scatter"], scope["all_gather"])
    expected = L.hierarchical_spec(x, np.array([3]))
    assert np.allclose(np.stack([b.view(np.ndarray) for b in out]), expected[0], atol=1e-5)
    assert fast == expected[1].tolist() and slow == expected[2].tolist()
