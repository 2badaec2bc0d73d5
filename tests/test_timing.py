import time

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


def test_benchmark_rejects_bad_repeat():
    with pytest.raises(ValueError, match="repeat must be at least 1"):
        timing.benchmark(lambda: None, repeat=0)


def test_rates():
    assert timing.gbps(2e9, 1.0) == pytest.approx(2.0)
    assert timing.gflops(2 * 64**3, 1e-3) == pytest.approx(2 * 64**3 / 1e6)
    with pytest.raises(ValueError):
        timing.gbps(1, 0)


@pytest.mark.parametrize(
    "name,key",
    [("Tesla T4", "T4"), ("NVIDIA L4", "L4"), ("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100-PCIE-40GB", "A100-40"),
     ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 PCIe", "H100-PCIE"), ("NVIDIA H200", "H200")],
)
def test_peak_lookup(name, key):
    assert timing.lookup_peak(name) is timing.PEAKS[key]


def test_unknown_device_says_so():
    assert timing.lookup_peak("NVIDIA GeForce GT 710") is None
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
