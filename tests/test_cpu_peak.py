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
    assert p.label.startswith("estimate: 1 core(s) x 2.20 GHz (clock in /proc/cpuinfo: nominal or current, not")
    assert "no vendor publishes this peak" in p.label
    # a VM's nominal clock: the cores boost above it, so BLAS can beat the estimate, and the label says so
    assert not p.at_max_clock and "a measured run can exceed this estimate" in p.label
    assert p.kind == "estimate: measured runs can exceed it (turbo clock)"


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


def test_the_cpufreq_maximum_clock_wins_over_the_base_and_proc_clocks(tmp_path):
    (tmp_path / "base_frequency").write_text("2000000\n")
    p = this_cpu(COLAB, freq_dir=tmp_path, arch="x86_64", logical=2)
    assert (p.ghz, p.clock_source, p.at_max_clock) == (2.0, "cpufreq base clock", False)
    assert "a measured run can exceed this estimate" in p.label  # the cores boost above the base clock
    (tmp_path / "cpuinfo_max_freq").write_text("3500000\n")
    p = this_cpu(COLAB, freq_dir=tmp_path, arch="x86_64", logical=2)
    assert (p.ghz, p.clock_source, p.at_max_clock) == (3.5, "cpufreq maximum clock", True)
    assert p.gflops == pytest.approx(1 * 3.5 * 64)
    assert "can exceed" not in p.label and p.kind == "estimate at the maximum clock the system reports"


@pytest.mark.parametrize("unreadable", ["", "unknown\n", "0\n"])
def test_an_unreadable_maximum_clock_falls_back_to_the_next_source(tmp_path, unreadable):
    (tmp_path / "cpuinfo_max_freq").write_text(unreadable)
    p = this_cpu(COLAB, freq_dir=tmp_path, arch="x86_64", logical=2)
    assert (p.ghz, p.at_max_clock) == (2.2, False) and "/proc/cpuinfo" in p.clock_source
    (tmp_path / "base_frequency").write_text("2100000")
    p = this_cpu(COLAB, freq_dir=tmp_path, arch="x86_64", logical=2)
    assert (p.ghz, p.clock_source, p.at_max_clock) == (2.1, "cpufreq base clock", False)


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


def test_speed_bars_labels_an_estimate_that_a_measurement_can_exceed():
    # lesson 00: NumPy's measured rate above this CPU's estimate (a nominal clock) next to a GPU's spec-sheet peak
    labels, values = ["numpy", "cpu peak", "T4 peak"], [195.0, 166.0, 8100.0]
    fig = speed_bars(labels, values, "GFLOP/s", "t", "note", bounds=[False, "estimate", True])
    bar = fig.data[0]
    assert list(bar.marker.pattern.shape) == ["", "/", "/"]
    assert list(bar.text) == ["195 GFLOP/s", "166 GFLOP/s (estimate)", "8,100 GFLOP/s (peak)"]
    note = fig.layout.annotations[0].text.replace("<br>", " ")
    assert note.startswith(
        "Hatched bars are not measurements: (peak) marks an upper bound; (estimate) marks a computed figure that a "
        "measurement can exceed. note"
    )
    assert "Hatched bars are upper bounds" not in note
    only = speed_bars(["numpy", "cpu peak"], [195.0, 166.0], "GFLOP/s", "t", bounds=[False, "estimate"])
    assert "(peak)" not in only.layout.annotations[0].text
