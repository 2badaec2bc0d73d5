"""The exercises of lesson 11 (energy, cost, hardware): napkin math on arrays, written as plain NumPy
functions. Each runs through the same harness as the kernels (``lessons.check("11", "attainable", fn)``),
adapted by :func:`gpulab.lessons.as_host`; the references are the library's own functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import energy, hardware, pricing, systolic
from ..exercises import Problem
from ..errors import UsageError
from .exercise import Exercise, as_host, returned_none

__all__ = ["EXERCISES_LIST"]


def _trapezoid(p: np.ndarray, t: np.ndarray) -> float:
    # np.trapezoid since NumPy 2.0; np.trapz before (and removed later)
    return float(np.trapezoid(p, t) if hasattr(np, "trapezoid") else getattr(np, "trapz")(p, t))  # noqa: B009


def _jpi_inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    t = np.cumsum(rng.uniform(0.001, 0.02, n))  # uneven sampling, as a real sampler delivers
    return t, rng.uniform(40.0, 300.0, n), np.array([rng.integers(1, 5000)])


def _jpi(fn: Callable[..., Any]) -> Callable[..., None]:
    return as_host(lambda t, p, images: fn(t, p, int(images[0])), 3, "joules_per_image")


def _attainable(fn: Callable[..., Any]) -> Callable[..., None]:
    return as_host(lambda i, p, b: fn(i, float(p[0]), float(b[0])), 3, "attainable")


def _cost(fn: Callable[..., Any]) -> Callable[..., None]:
    def per_row(x: np.ndarray) -> np.ndarray:
        got = [fn(*row) for row in x]
        if any(g is None for g in got):
            raise UsageError(returned_none("cost_per_epoch"))
        return np.array(got)

    return as_host(per_row, 1, "cost_per_epoch")


def _exercises() -> list[Exercise]:
    return [
        Exercise(
            "11",
            "joules_per_image",
            Problem(
                "joules_per_image",
                lambda t, p, images: np.array([_trapezoid(p, t) / images[0]]),
                _jpi_inputs,
                # 3 samples first: with 2, a loop that misses the last interval and `// images` (energy below the
                # images) both give 0, and one would be named for the other
                sizes=[3, 2, 50, 1000],
                host=_jpi(energy.joules_per_image),  # no PTX check: a host NumPy function, no kernel
                rtol=1e-9,
                race_check=False,  # a plain function: no threads whose schedule could matter
                atol=1e-15,  # results are about 1e-3 J: a looser atol took a kWh slip (1e-10) for `// images` (0)
                mistakes={
                    "that is the sum of samples x interval (a left Riemann sum): average the two "
                    "ends of each interval.": lambda t, p, i: np.array([np.sum(np.diff(t) * p[:-1]) / i[0]]),
                    "joules, not joules per image: divide by the number of images.": lambda t, p, i: np.array(
                        [_trapezoid(p, t)]
                    ),
                    "images per joule: the other way up, joules / images.": lambda t, p, i: np.array(
                        [i[0] / _trapezoid(p, t)]
                    ),
                    "that is kilojoules: watts x seconds are joules already, so no division by 1000.": lambda t, p, i: (
                        np.array([_trapezoid(p, t) / i[0] / 1e3])
                    ),
                    "that is watt-hours: watts x seconds are joules already, so no division by 3600.": lambda t, p, i: (
                        np.array([_trapezoid(p, t) / i[0] / 3600])
                    ),
                    "the last interval is missing: n samples bound n - 1 intervals, the last one from times_s[n - 2] to "
                    "times_s[n - 1]. Check the loop's range (with 2 samples there is one interval, not none).": lambda t, p, i: (
                        np.array([_trapezoid(p[:-1], t[:-1]) / i[0]])
                    ),
                    "// is floor division: it drops the fraction of a joule (and gives 0 when there are more images "
                    "than joules). Divide with /.": lambda t, p, i: np.array([_trapezoid(p, t) // i[0]]),
                    "that divides by the number of power samples (len(times_s)): divide by images, the work the "
                    "energy was spent on.": lambda t, p, i: np.array([_trapezoid(p, t) / len(t)]),
                    "np.trapezoid(y, x) takes the values first and the times second: np.trapezoid(watts, times_s), "
                    "not np.trapezoid(times_s, watts).": lambda t, p, i: np.array([_trapezoid(t, p) / i[0]]),
                    "mean power x duration is exact only for evenly spaced samples; these are not: integrate "
                    "interval by interval (np.trapezoid(watts, times_s)).": lambda t, p, i: np.array(
                        [p.mean() * (t[-1] - t[0]) / i[0]]
                    ),
                    "the run lasts times_s[-1] - times_s[0] (the clock does not start at 0), and the samples are "
                    "unevenly spaced: np.trapezoid(watts, times_s).": lambda t, p, i: np.array(
                        [p.mean() * t[-1] / i[0]]
                    ),
                },
            ),
            energy.joules_per_image,
            adapt=_jpi,
        ),
        Exercise(
            "11",
            "attainable",
            Problem(
                "attainable",
                lambda i, p, b: np.minimum(p[0] * 1e3, b[0] * i),
                lambda n, rng: (np.geomspace(0.01, 5000, n), rng.uniform(5, 1000, 1), rng.uniform(200, 5000, 1)),
                # 2 first: intensities 0.01 and 5000, below and above every ridge, where each slip gives its own
                # result (a single intensity cannot tell np.maximum from bandwidth x 1e9: both give the peak there)
                sizes=[2, 1, 7, 64],
                host=_attainable(hardware.attainable_gflops),  # no PTX check: a host NumPy function, no kernel
                rtol=1e-12,
                race_check=False,  # a plain function: no threads whose schedule could matter
                atol=1e-9,
                mistakes={
                    "the peak is in TFLOP/s: multiply by 1e3 for GFLOP/s.": lambda i, p, b: np.minimum(p[0], b[0] * i),
                    "the peak x 1e12 is in FLOP/s, but the answer is in GFLOP/s (as bandwidth in GB/s x FLOP/byte is): "
                    "peak_tflops x 1e3.": lambda i, p, b: np.minimum(p[0] * 1e12, b[0] * i),
                    "bandwidth (GB/s) x intensity (FLOP/byte) is in GFLOP/s already: no x 1e9 (that makes it FLOP/s, "
                    "so the memory roof is never the smaller one).": lambda i, p, b: np.minimum(
                        p[0] * 1e3, b[0] * 1e9 * i
                    ),
                    "bandwidth_gbps is in GB/s, 1e9 bytes per second (decimal, as on spec sheets): a GiB is 2**30 "
                    "bytes, a unit the memory roof does not use here.": lambda i, p, b: np.minimum(
                        p[0] * 1e3, b[0] * i * 2**30 / 1e9
                    ),
                    "a TFLOP/s is 1e3 GFLOP/s (decimal prefixes, as on spec sheets), not 1024.": lambda i, p, b: (
                        np.minimum(p[0] * 1024, b[0] * i)
                    ),
                    "the memory roof is bandwidth x intensity (GB/s x FLOP/byte = GFLOP/s), not bandwidth / intensity: "
                    "more FLOPs per byte means more FLOP/s from the same bytes.": lambda i, p, b: np.minimum(
                        p[0] * 1e3, b[0] / i
                    ),
                    "the bound is the smaller of the two roofs (np.minimum), not the larger.": lambda i, p, b: (
                        np.maximum(p[0] * 1e3, b[0] * i)
                    ),
                    "that is TFLOP/s: the answer is in GFLOP/s. Bandwidth (GB/s) x intensity (FLOP/byte) is GFLOP/s "
                    "already; it is the peak (TFLOP/s) that needs x 1e3.": lambda i, p, b: np.minimum(
                        p[0], b[0] * i / 1e3
                    ),
                },
            ),
            hardware.attainable_gflops,
            adapt=_attainable,
        ),
        Exercise(
            "11",
            "cost_per_epoch",
            Problem(
                "cost_per_epoch",
                lambda x: x[:, 0] / x[:, 1] * x[:, 2] / 3600,
                lambda n, rng: (
                    np.stack(
                        [rng.integers(1000, 2_000_000, n), rng.uniform(10, 50000, n), rng.uniform(0.1, 100, n)], axis=1
                    ),
                ),
                sizes=[1, 5, 40],
                host=_cost(pricing.cost_per_epoch),  # no PTX check: a host NumPy function, no kernel
                rtol=1e-9,
                race_check=False,  # a plain function: no threads whose schedule could matter
                atol=1e-9,
                mistakes={
                    "prices are per hour and the time is in seconds: divide by 3600.": lambda x: (
                        x[:, 0] / x[:, 1] * x[:, 2]
                    ),
                    "seconds to hours is a division by 3600 (an hour is 3600 s), not a multiplication.": lambda x: (
                        x[:, 0] / x[:, 1] * x[:, 2] * 3600
                    ),
                    "an hour is 3600 seconds, not 60: divide the seconds by 3600.": lambda x: (
                        x[:, 0] / x[:, 1] * x[:, 2] / 60
                    ),
                    "the epoch takes images / images_per_second seconds (not the other way up).": lambda x: (
                        x[:, 1] / x[:, 0] * x[:, 2] / 3600
                    ),
                    "the price per hour multiplies the hours (dollars = hours x dollars per hour), it does not divide "
                    "them.": lambda x: x[:, 0] / x[:, 1] / x[:, 2] / 3600,
                    "images x images_per_second is no time: the epoch takes images / images_per_second seconds.": (
                        lambda x: x[:, 0] * x[:, 1] * x[:, 2] / 3600
                    ),
                    "that is the cost of one image: the epoch is images of them, so multiply by images.": lambda x: (
                        x[:, 2] / x[:, 1] / 3600
                    ),
                    "return the exact cost, not rounded to cents: round only when you print it.": lambda x: np.round(
                        x[:, 0] / x[:, 1] * x[:, 2] / 3600, 2
                    ),
                },
            ),
            pricing.cost_per_epoch,
            adapt=_cost,
        ),
        # one clock of a systolic array: checked by gpulab.systolic.check_step (its named mistakes included)
        Exercise(
            "11",
            "pe_step",
            Problem(
                "pe_step",
                systolic._step_spec,
                systolic._step_inputs,
                sizes=systolic.SIZES,
                host=as_host(systolic.pe_step, 5, "pe_step"),  # no PTX check: a host NumPy function, no kernel
                out_names=["a_reg", "b_reg", "acc"],
                rtol=1e-6,
                race_check=False,  # a plain function: no threads whose schedule could matter
                atol=1e-6,
            ),
            systolic.pe_step,
            checker=systolic.check_step,
        ),
    ]


EXERCISES_LIST: list[Exercise] = _exercises()
