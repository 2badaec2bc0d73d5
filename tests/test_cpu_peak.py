"""gpulab.cpu_peak: this CPU's FP32 peak, estimated from /proc/cpuinfo (fake ones here) and labelled so."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulab.cpu_peak import flop_per_cycle, this_cpu
from gpulab.viz import speed_bars


def cpuinfo(
    vendor: str,
    family: int,
    model: int,
    name: str,
    flags: str,
    mhz: str = "2200.000",
    siblings: int = 2,
    cores: int = 1,
) -> str:
    one = (
        f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
        f"model name\t: {name}\ncpu MHz\t\t: {mhz}\nsiblings\t: {siblings}\ncpu cores\t: {cores}\n"
        f"flags\t\t: {flags}\n"
    )
    return one + "\n" + one.replace("processor\t: 0", "processor\t: 1") + "\n"


SSE = "fpu sse sse2"
AVX2 = SSE + " avx fma avx2"
AVX512 = AVX2 + " avx512f avx512dq"
COLAB = cpuinfo("GenuineIntel", 6, 79, "Intel(R) Xeon(R) CPU @ 2.20GHz", AVX512)  # 2 vCPUs = 1 core, 2 threads


def test_colab_like_intel_counts_physical_cores_and_avx512():
    p = this_cpu(COLAB, freq_dir=Path("/nonexistent"), arch="x86_64", logical=2)
    assert (p.cores, p.flop_per_cycle, p.ghz) == (1, 64, 2.2)
    assert p.gflops == pytest.approx(1 * 2.2 * 64)
    assert p.label.startswith("estimate: 1 core(s) x 2.20 GHz (current clock in /proc/cpuinfo) x 64 FP32")
    assert "no vendor publishes this peak" in p.label


@pytest.mark.parametrize(
    ("vendor", "family", "model", "flags", "expected"),
    [
        ("AuthenticAMD", 25, 17, AVX512, 32),  # Zen 4: AVX-512 as two 256-bit halves
        ("AuthenticAMD", 26, 2, AVX512, 64),  # Zen 5: full-width AVX-512
        ("AuthenticAMD", 23, 1, AVX2, 16),  # Zen 1: 256-bit work in two 128-bit halves
        ("AuthenticAMD", 23, 49, AVX2, 32),  # Zen 2
        ("GenuineIntel", 6, 85, AVX512, 64),
        ("GenuineIntel", 6, 60, AVX2, 32),  # Haswell
        ("GenuineIntel", 6, 42, SSE + " avx", 16),  # Sandy Bridge: AVX, no FMA
        ("GenuineIntel", 6, 15, SSE, 8),
    ],
)
def test_flop_per_cycle_from_the_instruction_set(vendor, family, model, flags, expected):
    fpc, why = flop_per_cycle("x86_64", set(flags.split()), vendor, family, model)
    assert fpc == expected and why


def test_aarch64_and_unknown_architectures():
    assert flop_per_cycle("aarch64", {"asimd"})[0] == 16
    fpc, why = flop_per_cycle("riscv64", set())
    assert fpc is None and "riscv64" in why


def test_the_cpufreq_clock_wins_over_the_current_one(tmp_path):
    (tmp_path / "cpuinfo_max_freq").write_text("3500000\n")
    p = this_cpu(COLAB, freq_dir=tmp_path, arch="x86_64", logical=2)
    assert (p.ghz, p.clock_source) == (3.5, "cpufreq maximum clock")
    (tmp_path / "base_frequency").write_text("2000000\n")
    p = this_cpu(COLAB, freq_dir=tmp_path, arch="x86_64", logical=2)
    assert (p.ghz, p.clock_source) == (2.0, "cpufreq base clock")


def test_no_estimate_says_why():
    no_clock = COLAB.replace("cpu MHz\t\t: 2200.000\n", "")
    p = this_cpu(no_clock, freq_dir=Path("/nonexistent"), arch="x86_64", logical=2)
    assert p.gflops is None and "no clock reported" in p.label
    p = this_cpu("", arch="x86_64", logical=4)
    assert p.gflops is None and "does not expose /proc/cpuinfo" in p.why
    p = this_cpu(COLAB, freq_dir=Path("/nonexistent"), arch="s390x", logical=2)
    assert p.gflops is None and "s390x" in p.label


def test_this_machine_gives_a_positive_estimate_or_a_reason():
    p = this_cpu()
    assert (p.gflops is not None and p.gflops > 0 and p.label.startswith("estimate:")) or p.why


def test_speed_bars_draws_peaks_hatched_and_says_so():
    fig = speed_bars(
        ["numpy", "cpu peak", "T4 peak"], [80.0, 166.0, 8100.0], "GFLOP/s", "t", "note", bounds=[False, True, True]
    )
    bar = fig.data[0]
    assert list(bar.marker.pattern.shape) == ["", "/", "/"]
    assert bar.text[0] == "80.0 GFLOP/s" and bar.text[2] == "8,100 GFLOP/s (peak)"
    assert "Hatched bars are upper bounds" in fig.layout.annotations[0].text
    with pytest.raises(ValueError, match="one bounds flag per label"):
        speed_bars(["a", "b"], [1.0, 2.0], "GB/s", "t", bounds=[True])
