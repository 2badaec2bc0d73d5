"""Review of lab 10's checks with answers its mistake tests did not try: a scale recorded after the update, bytes
counted on the receiving device, one phase of the ring across nodes counted, a negative batch when nothing fits,
and a run's results as 0-d device arrays (as `found_inf[0] == 0` gives in gpu mode)."""

from __future__ import annotations

import gpulab  # noqa: F401 - picks the mode before numba is imported

import math

import numpy as np
from numba import cuda

from gpulab import problems

L = problems.lab10


def _hinted(res, words: str) -> None:
    assert not res.passed, res
    assert words in (res.hint or ""), res


class DeviceScalar:
    """A 0-d CuPy array's behaviour on the host: bool() and float() work, NumPy's implicit conversion does not."""

    def __init__(self, value):
        self.value = value

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed.")

    def __bool__(self):
        return bool(self.value)

    def __float__(self):
        return float(self.value)


def _scaler(record_late=False, device_scalars=False):
    def run_with_loss_scaling(batches, scale, growth_interval):
        params = np.array([scale, growth_interval])
        late = {"record_late": True} if record_late else {}  # the mistake as the check's own model makes it
        scales, applied, total = L.scaler_sim(gpulab.to_host(batches), params, **late)
        if device_scalars:
            applied = [DeviceScalar(a != 0) for a in applied]
        return list(scales), list(applied), gpulab.to_device(total)

    return run_with_loss_scaling


def test_scaler_results_as_0d_device_arrays_are_read():
    res = L.SCALER.check(host=L.scaler_host(_scaler(device_scalars=True)))
    assert res.passed, res


def test_scaler_scale_recorded_after_the_update_is_named():
    _hinted(L.SCALER.check(host=L.scaler_host(_scaler(record_late=True))), "record it before the rule changes it")


def _received(bufs):
    sent = L.reduce_scatter(bufs)
    return sent[-1:] + sent[:-1]  # each message counted on device (i + 1) % p


def test_ring_bytes_counted_on_the_receiver_are_named():
    _hinted(L.RING.check(host=L.ring_host(_received, L.all_gather)), "count msg.nbytes on the sender")


def test_hierarchical_with_one_phase_across_nodes_counted_is_named():
    def only_reduce_scatter(buffers, g, rs, ag):
        calls = []

        def ag_across_uncounted(bufs):  # the reference calls it g times across nodes first: those bytes dropped
            calls.append(1)
            sent = ag(bufs)
            return [0] * len(sent) if len(calls) <= g else sent

        return L.hierarchical_allreduce(buffers, g, rs, ag_across_uncounted)

    _hinted(L.HIERARCHICAL.check(host=L.hierarchical_host(only_reduce_scatter)), "add what each GPU sends")


def test_budget_a_model_that_does_not_fit_needs_batch_zero():
    def training_bytes(params, activations, batch, mixed):
        w = 2 if mixed else 4
        return w * params, 4 * params if mixed else 0, w * params, 8 * params, w * activations * batch

    def largest_batch(params, activations, memory_gb, mixed):  # no floor at 0
        fixed, per = (
            sum(training_bytes(params, activations, 0, mixed)),
            training_bytes(params, activations, 1, mixed)[4],
        )
        return int((memory_gb * 1e9 - fixed) // per)

    _hinted(L.BUDGET.check(host=L.budget_host(training_bytes, largest_batch)), "the largest batch is 0")


@cuda.jit
def unscale_plain_store(grads, inv_scale, clip, found_inf):
    i = cuda.grid(1)
    if i < grads.size:
        g = grads[i] * inv_scale
        if math.isinf(g) or math.isnan(g):
            found_inf[0] = 1  # many threads, one flag: a plain store races
        else:
            g = min(max(g, -clip), clip)
        grads[i] = g


def test_a_flag_set_by_plain_stores_is_named_as_a_flag_not_a_wrong_index():
    """Many threads storing 1 into found_inf[0]: the race is in the store, not the index (the general
    duplicate-store hint says the index is wrong)."""
    res = problems.lab10.UNSCALE.check(unscale_plain_store, ptx=None)
    text = str(res)
    assert not res.passed, text
    assert "cuda.atomic.max(flag, 0, 1)" in text and "the index" not in text, text
