import re
import time
import types

import numpy as np
import pytest

from gpulab import kernels, show_source, timing
from gpulab.kernels import LaunchError, check_launch


def test_benchmark_counts_and_orders():
    calls = []

    def f(x):
        calls.append(x)
        time.sleep(0.002)

    r = timing.benchmark(f, 1, warmup=2, repeat=5, label="sleep")
    assert len(calls) == 7
    assert len(r.times) == 5
    assert r.min <= r.median <= r.max
    assert r.median >= 0.0019
    assert r.spread >= 0
    assert r.clock == "perf_counter" and r.mode == "simulator"
    assert "sleep: median" in str(r) and "not a GPU timing" in str(r)


def test_one_slow_run_is_named_and_does_not_swell_the_spread():
    """The H200 run printed "spread 7358%" for one outlier (another notebook used the GPU): the printed figure
    is the interquartile range, and the slow run is said to be one, with its factor."""
    r = timing.BenchResult((83e-6, 83.1e-6, 82.9e-6, 83.2e-6, 6.2e-3), "gpu", "CUDA events", "ElementwiseKernel")
    assert r.spread > 70  # (max - min) / median, kept for the recordings
    assert r.iqr < 0.01 and r.slow_runs == pytest.approx((6.2e-3 / 83.1e-6,))
    text = str(r)
    assert "spread 7" not in text and "interquartile range 0% of the median" in text
    assert "one run up to 75x slower than the median: another program was probably using the GPU" in text
    steady = timing.BenchResult((1.0, 1.1, 0.9, 1.2, 1.0), "simulator", "perf_counter")
    assert steady.slow_runs == () and "slower" not in str(steady)
    assert steady.iqr == pytest.approx(0.1)
    assert timing.BenchResult((2.0,), "gpu", "CUDA events").iqr == 0.0


def test_benchmark_rejects_bad_repeat():
    with pytest.raises(ValueError, match="repeat must be at least 1"):
        timing.benchmark(lambda: None, repeat=0)


def test_rates():
    assert timing.gbps(2e9, 1.0) == pytest.approx(2.0)
    assert timing.gflops(2 * 64**3, 1e-3) == pytest.approx(2 * 64**3 / 1e6)
    assert timing.gbps(np.int64(2_000_000_000), np.float64(2.0)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"seconds must be a time > 0; it was given 0"):
        timing.gbps(1, 0)


def test_a_rate_takes_a_benchmark_result_as_its_median():
    r = timing.BenchResult((1.0, 2.0, 4.0), "simulator", "perf_counter")
    assert timing.gbps(4e9, r) == pytest.approx(2.0) and timing.gflops(2e9, r) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda r, x: timing.gflops(2000, r.times), "seconds must be a number (for a benchmark result pass r.median"),
        (lambda r, x: timing.gbps(r.median, x.nbytes), "nbytes=0.002 is less than one byte, which looks like a time"),
        (lambda r, x: timing.gbps(x, r.median), "nbytes is a number; it was given an array of shape (1000,): pass "),
        (lambda r, x: timing.gbps(r, x.nbytes), "the count comes first, then the time"),
        (lambda r, x: timing.gflops(-5, r.median), "flops must be >= 0"),
        (lambda r, x: timing.gbps("4000", r.median), "nbytes must be a number"),
    ],
)
def test_a_rate_refuses_swapped_or_wrong_arguments(call, says):
    r = timing.BenchResult((0.002,), "simulator", "perf_counter")
    with pytest.raises(ValueError, match=re.escape(says)):
        call(r, np.zeros(1000, np.float32))


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda x: timing.benchmark(None), "It was given None, the value a launch add_kernel[blocks, threads](...)"),
        (lambda x: timing.benchmark(kernels.add(x, x)), "It was given an array of shape (4,), the result of a call"),
        (lambda x: timing.benchmark(kernels.add_kernel, x, x, x), "the kernel add_kernel without its launch"),
        (lambda x: timing.benchmark(kernels.add, x, x, repeats=3), "repeats= would be passed on to add(), which"),
        (lambda x: timing.benchmark(kernels.add, x, x, repeat=2.5), "repeat must be a whole number >= 1, but got 2.5"),
        (lambda x: timing.benchmark(kernels.add, x, x, repeat="5"), "repeat must be a whole number >= 1, but got '5'"),
        (lambda x: timing.benchmark(kernels.add, x, x, warmup=None), "warmup must be a whole number >= 0"),
        (lambda x: timing.benchmark(kernels.add, x, x, warmup=-1), "warmup must be 0 or more (got -1)"),
    ],
)
def test_benchmark_refuses_what_it_cannot_time(call, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        call(np.ones(4, np.float32))


def test_benchmark_says_did_you_mean_for_a_misspelt_option():
    with pytest.raises(ValueError, match=r"Did you mean repeat=\?"):
        timing.benchmark(kernels.add, np.ones(2, np.float32), np.ones(2, np.float32), repeats=3)


def test_benchmark_passes_keywords_the_function_takes():
    seen = {}

    def f(x, *, scale=1):
        seen["scale"] = scale

    timing.benchmark(f, 1, scale=3, repeat=1, warmup=0)
    assert seen == {"scale": 3}
    x = np.ones(64, np.float32)
    assert len(timing.benchmark(kernels.add_kernel[1, 64], x, x, np.empty_like(x), repeat=2).times) == 2


@pytest.mark.parametrize(
    "name,key",
    [
        ("Tesla T4", "T4"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200"),
    ],
)
def test_peak_lookup(name, key):
    assert timing.lookup_peak(name) is timing.PEAKS[key]


def test_unknown_device_says_so():
    assert timing.lookup_peak("NVIDIA GeForce GT 710") is None
    # not the SXM rows of the same chip: the H100 NVL has its own row, the H200 NVL (its peaks in none of the stored
    # sources) and a Grace Hopper superchip have none
    assert timing.lookup_peak("NVIDIA H100 NVL") is timing.PEAKS["H100 NVL"]
    assert timing.lookup_peak("NVIDIA H200 NVL") is None
    assert timing.lookup_peak("NVIDIA GH200 480GB") is None  # (tests/test_hardware_names.py: the whole table)
    assert timing.percent_of_peak(100, "NVIDIA GeForce GT 710") is None


def test_percent_of_peak():
    assert timing.percent_of_peak(160, "Tesla T4") == pytest.approx(50.0)
    assert timing.percent_of_peak(4050, "Tesla T4", "fp32_tflops") == pytest.approx(50.0)
    assert timing.percent_of_peak(1.0, "Tesla T4", "tf32_tensor_tflops") is None


@pytest.mark.parametrize("threads", [0, 1025, (32, 33), (0, 4)])
def test_launch_limits(threads):
    with pytest.raises(LaunchError) as e:
        check_launch(4, threads)
    assert "threads" in str(e.value)


def test_add_launcher_and_show_source():
    a = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(kernels.add(a, a, threads_per_block=128), 2 * a)
    with pytest.raises(LaunchError, match="at most 1024"):
        kernels.add(a, a, threads_per_block=2048)
    src = show_source(kernels.add_kernel, display=False)
    assert src.startswith("@cuda.jit") and "cuda.grid(1)" in src
    with pytest.raises(TypeError, match="show_source expects"):
        show_source(42, display=False)


# ------------------------------------------------------------- issue 17: host work in the event window


class _FakeEvent:
    """A CUDA event stand-in: records the host clock (the fake 'device' runs on the host)."""

    def record(self):
        self.t = __import__("time").perf_counter()

    def synchronize(self):
        pass


def _gpu_benchmark_with_fakes(monkeypatch, sync_cost_s, n_cupy_args):
    """benchmark()'s gpu path with fake events and a launcher that behaves like numba does on CuPy
    arguments: one stream sync (host round trip) per CuPy argument while CUDA_ARRAY_INTERFACE_SYNC is set."""
    import time

    from numba.cuda.core import config

    monkeypatch.setattr(timing.runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(timing.runtime, "mode", lambda: "gpu")
    monkeypatch.setattr(timing.runtime, "synchronize", lambda: None)
    monkeypatch.setattr(timing, "_events", lambda: (_FakeEvent(), _FakeEvent()))
    monkeypatch.setattr(timing, "_elapsed_s", lambda s, e: e.t - s.t)
    seen = []

    def launch():
        seen.append(config.CUDA_ARRAY_INTERFACE_SYNC)
        if config.CUDA_ARRAY_INTERFACE_SYNC:
            time.sleep(sync_cost_s * n_cupy_args)  # what numba does per CuPy argument

    return timing.benchmark(launch, warmup=0, repeat=5), seen, config


def test_interface_syncs_are_kept_out_of_the_event_window(monkeypatch):
    res, seen, config = _gpu_benchmark_with_fakes(monkeypatch, sync_cost_s=0.002, n_cupy_args=3)
    assert seen == [False] * 5  # numba's per-argument sync was off inside every window
    assert res.median < 0.003  # the 3 x 2 ms of host syncs are not counted
    assert config.CUDA_ARRAY_INTERFACE_SYNC  # and restored afterwards


def test_how_much_the_syncs_would_have_counted(monkeypatch):
    """The same fake with the old behaviour (sync left on) counts every round trip: 3 x 2 ms."""
    monkeypatch.setattr(timing, "no_interface_sync", __import__("contextlib").nullcontext)
    res, seen, _ = _gpu_benchmark_with_fakes(monkeypatch, sync_cost_s=0.002, n_cupy_args=3)
    assert all(seen) and res.median >= 0.006


def test_no_interface_sync_restores_on_error():
    from numba.cuda.core import config

    before = config.CUDA_ARRAY_INTERFACE_SYNC
    with pytest.raises(RuntimeError):
        with timing.no_interface_sync():
            assert not config.CUDA_ARRAY_INTERFACE_SYNC
            raise RuntimeError("kernel failed")
    assert config.CUDA_ARRAY_INTERFACE_SYNC == before


def test_device_name_in_simulator():
    assert timing.device_name() == "CUDA simulator (CPU)"


def test_no_interface_sync_reaches_the_flag_numba_cuda_reads_in_gpu_mode():
    """The fakes above read numba.cuda.core.config; this checks, with numba.cuda's device API (no GPU
    needed to import it), that the flag benchmark() switches off is the one numba-cuda's own code reads
    when it wraps a CuPy array (api.from_cuda_array_interface; devicearray in numba-cuda 0.30), in the
    installed version: make test checks numba-cuda 0.30, make test-oldest 0.22."""
    import os
    import subprocess
    import sys

    code = (
        "from numba import cuda\n"
        "import numba.cuda.api as api, numba.cuda.cudadrv.devicearray as da\n"
        "from gpulab import runtime, timing\n"
        "assert runtime.mode() == 'gpu' and cuda.implementation == 'NVIDIA', (runtime.mode(), cuda.__file__)\n"
        "configs = timing._numba_configs()\n"
        "assert len({id(c) for c in configs}) == len(configs), configs\n"
        "assert any(api.config is c for c in configs) and any(da.config is c for c in configs), configs\n"
        "assert api.config.CUDA_ARRAY_INTERFACE_SYNC\n"
        "with timing.no_interface_sync():\n"
        "    assert not api.config.CUDA_ARRAY_INTERFACE_SYNC and not da.config.CUDA_ARRAY_INTERFACE_SYNC\n"
        "assert api.config.CUDA_ARRAY_INTERFACE_SYNC\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["GPULAB_DEVICE"] = "gpu"  # gpu mode is chosen at import; nothing here touches a GPU
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_interleaved_rounds_share_a_busy_moment(monkeypatch):
    """Lab 05 compares two kernels: timed one after the other, a busy first half (another program on the GPU) fell
    on one of them only; in alternating rounds it falls on both, and each round's ratio stays right. The calls
    advance a simulated clock (sleeps measured on a loaded CI machine gave round ratios from 0.2 to 4.3)."""
    order = []
    now = [0.0]
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))

    def make(name, seconds):
        def call():
            order.append(name)
            busy = 4 if len(order) <= 12 else 1  # the first 12 calls: the device is shared
            now[0] += seconds * busy

        return call

    res = timing.interleaved({"slow": make("slow", 0.004), "fast": make("fast", 0.002)}, rounds=4, repeat=3)
    assert order[:6] == ["slow"] * 3 + ["fast"] * 3 and len(order) == 24
    assert [r.label for r in res.values()] == ["slow", "fast"] and all(len(r.times) == 4 for r in res.values())
    ratios = np.array(res["fast"].times) / np.array(res["slow"].times)
    assert np.allclose(ratios, 0.5)  # 0.5 in every round, busy or not
    assert "median of 3 per round" in res["fast"].clock
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        timing.interleaved({}, rounds=0)
