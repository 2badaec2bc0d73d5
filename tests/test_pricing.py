"""gpulab.pricing: list prices with dated sources, your own price, dollars per epoch and per run."""

from __future__ import annotations

import pytest

from gpulab import hardware, pricing
from gpulab.errors import UsageError


def test_prices_name_source_date_and_hardware():
    for key, p in pricing.PRICES.items():
        assert p.source.startswith("as of ") and " from " in p.source, key
        assert p.usd_per_hour > 0 and (p.hardware == "CPU" or hardware.device(p.hardware)), key
        assert p.source in p.label and p.provider in p.label
    assert {"CPU", "T4", "L4", "A100", "H100", "TPU v5e"} <= set(pricing.PRICES)
    assert pricing.PRICES["H100"].usd_per_chip_hour == pytest.approx(98.32 / 8)
    assert pricing.PRICES["CPU"].usd_per_chip_hour == pricing.PRICES["CPU"].usd_per_hour


def test_my_price_is_labelled_and_checked():
    p = pricing.my_price("my box", 1.5, hardware="L4")
    assert p.source == "typed by you" and pricing.price(p) is p
    with pytest.raises(UsageError, match="finite"):
        pricing.my_price("x", float("nan"))
    with pytest.raises(UsageError, match="known: "):
        pricing.my_price("x", 1.0, hardware="GTX 480")
    with pytest.raises(UsageError, match="my_price"):
        pricing.price("A6000")


def test_cost_per_epoch_and_dollars():
    assert pricing.dollars(3600, 2.0) == 2.0
    assert pricing.cost_per_epoch(60000, 1000, 3.6) == pytest.approx(0.06)
    with pytest.raises(UsageError):
        pricing.cost_per_epoch(100, 0, 1.0)


def test_run_estimate_scales_and_says_it_is_an_estimate():
    one = pricing.run_estimate(1e18, "H100", "H100", utilization=0.5)
    two = pricing.run_estimate(1e18, "H100", "H100", utilization=0.5, chips=2)
    assert one["hours"] == pytest.approx(1e18 / (989e12 * 0.5) / 3600)
    assert two["hours"] == pytest.approx(one["hours"] / 2) and two["dollars"] == pytest.approx(one["dollars"])
    assert one["kwh"] == pytest.approx(700 * one["hours"] / 1000)
    assert one["label"].startswith("estimate") and "spec-sheet" in one["label"]
    tpu = pricing.run_estimate(1e18, "TPU v5e", "TPU v5e")
    assert tpu["kwh"] is None  # no power on the page: no made-up energy
    box = pricing.my_price("my 8480+ box", 0.34, hardware="Xeon 8480+")
    cpu = pricing.run_estimate(1e15, "Xeon 8480+", box, precision="fp32")
    assert cpu["dollars"] == pytest.approx(cpu["hours"] * 0.34)
    # a CPU peak is computed, not a spec-sheet figure: the label says so (it said "spec-sheet fp32 peak")
    assert "8480+ (56 cores)'s estimate (computed" in cpu["label"] and "spec-sheet fp32" not in cpu["label"]
    with pytest.raises(UsageError, match="utilization"):
        pricing.run_estimate(1e18, "H100", "H100", utilization=0)


def test_cpu_server_is_priced_per_socket():
    server = pricing.PRICES["CPU server"]
    assert server.hardware == "Xeon 8488C" and server.accelerators == 2
    est = pricing.run_estimate(1e15, "Xeon 8488C", "CPU server", precision="fp32")
    assert est["dollars"] == pytest.approx(est["hours"] * server.usd_per_hour / 2)


def test_cpu_server_price_and_peak_describe_the_same_cores():
    # m7i.48xlarge: 192 vCPU = 96 cores = 2 sockets of 48; before, its per-socket price was set against the 56-core
    # 8480+'s peak, so each dollar bought 56/48 of the cores it paid for (a run 1 - 48/56 = 14% too cheap)
    server, xeon = pricing.PRICES["CPU server"], hardware.CPUS["Xeon 8480+"]
    socket = hardware.device(server.hardware)
    assert "192 vCPU = 2 sockets x 48 cores" in server.offer and "48 cores" in socket.name
    assert socket.fp32 == pytest.approx(xeon.fp32 * 48 / 56) and socket.bf16 == pytest.approx(xeon.bf16 * 48 / 56)
    assert socket.watts == pytest.approx(xeon.watts * 48 / 56)  # 300 W: the energy per run stays the 8480+'s
    assert all(socket.figure_kind(f).startswith(("estimate", "unverified estimate")) for f in socket.figure_kinds())
    assert "Xeon 8488C" not in hardware.DEVICES  # a cloud-only part: not a row of lesson 11's spec table
    flops = 2.6e18
    est = pricing.run_estimate(flops, server.hardware, "CPU server", precision="fp32", utilization=0.4)
    dollars_per_core_hour = server.usd_per_hour / 96
    assert est["dollars"] == pytest.approx(flops / (xeon.fp32 / 56 * 1e12 * 0.4) / 3600 * dollars_per_core_hour)
    assert "Intel Xeon 8488C (48 cores" in est["label"] and "2 sockets x 48 cores" in est["label"]
    assert est["kwh"] == pytest.approx(flops / (xeon.fp32 * 1e12 * 0.4) * xeon.watts / 3.6e6)
    with pytest.raises(UsageError, match=r"prices 'Xeon 8488C', not Intel Xeon Platinum 8480\+"):
        pricing.run_estimate(flops, "Xeon 8480+", "CPU server", precision="fp32")  # the old, mismatched pair


def test_a_price_only_goes_with_the_hardware_it_prices():
    with pytest.raises(UsageError, match="prices 'T4', not H100"):
        pricing.run_estimate(1e18, "H100", "T4")
    with pytest.raises(UsageError, match="prices 'CPU'"):  # 4 cores of some CPU are not a Xeon 8480+'s 56
        pricing.run_estimate(1e15, "Xeon 8480+", "CPU", precision="fp32")
    a100 = pricing.run_estimate(1e18, "A100", "A100")  # the offer's 40GB board: the same chip, the same figures
    assert a100["dollars"] == pytest.approx(a100["hours"] * 32.7726 / 8)


def test_run_estimate_names_fp16_on_chips_without_bf16():
    t4 = pricing.run_estimate(1e18, "T4", "T4")  # precision="bf16": the T4's bf16 column is FP16 tensor cores
    assert "T4's spec-sheet FP16 tensor-core peak (no BF16 on this chip" in t4["label"] and "bf16" not in t4["label"]
    assert t4["hours"] == pytest.approx(1e18 / (65e12 * 0.4) / 3600)
    v100 = pricing.run_estimate(1e18, "V100", None)
    assert "V100 SXM2 32GB's spec-sheet FP16 tensor-core peak" in v100["label"]
    assert "A100 SXM 40GB's spec-sheet bf16 peak x 1" in pricing.run_estimate(1e18, "A100 SXM 40GB", "A100")["label"]
    assert "fp32 peak" in pricing.run_estimate(1e18, "T4", "T4", precision="fp32")["label"]


def test_every_price_says_what_it_is_and_stale_ones_say_so():
    for key, p in pricing.PRICES.items():
        assert p.kind == pricing.LIST_PRICE or (p.kind.startswith("unverified estimate") and ":" in p.kind), key
        if p.kind != pricing.LIST_PRICE:
            assert "UNVERIFIED ESTIMATE" in p.label, key
    for key in ("A100", "H100"):  # AWS cut P4d/P5 prices in June 2025: the 2024 figure is labelled stale
        p = pricing.PRICES[key]
        assert "likely stale" in p.label and p.refs and p.refs[0].url.startswith("https://"), key
    typed = pricing.my_price("mine", 2.0, hardware="H200")
    assert typed.kind == "typed by you" and "UNVERIFIED" not in typed.label


def test_run_estimate_names_measured_power_as_measured():
    est = pricing.run_estimate(1e18, "TPU v4", pricing.my_price("v4", 3.0, hardware="TPU v4"))
    assert "energy = measured" in est["label"] and est["kwh"] == pytest.approx(192 * est["hours"] / 1000)


def test_hardware_without_a_list_price_says_what_to_do():
    text = pricing.no_list_price("H200")
    assert text.startswith("'H200' has no list price in gpulab.pricing")
    assert "pricing.my_price('H200 (your price)', usd_per_hour=..., hardware='H200')" in text
    with pytest.raises(UsageError) as err:
        pricing.price("H200")
    assert str(err.value) == text + "."
    est = pricing.run_estimate(1e18, "H200", None)  # no offer: time and energy, no dollars
    assert est["dollars"] is None and est["hours"] > 0 and est["kwh"] is not None
    assert est["label"].endswith("price: " + text)
    with pytest.raises(UsageError) as err:
        pricing.cost_per_epoch(60000, 1000, None)  # type: ignore[arg-type]
    assert str(err.value) == f"usd_per_hour is None: {pricing.no_list_price()}, and pass its .usd_per_chip_hour."
    typed = pricing.my_price("H200 (mine)", 3.5, hardware="H200")
    assert pricing.run_estimate(1e18, "H200", typed)["dollars"] > 0
    assert pricing.my_price("PCIe box", 2.0, hardware="H100 PCIe").hardware == "H100 PCIe"  # a board of BOARDS


def test_no_list_price_is_said_one_way():
    # price()'s error, dollars(None)'s error and run_estimate's label said it three ways; now one text
    said = [pricing.run_estimate(1e18, "H200", None)["label"]]
    for call in (lambda: pricing.price("H200"), lambda: pricing.dollars(1.0, None)):  # type: ignore[arg-type]
        with pytest.raises(UsageError) as err:
            call()
        said.append(str(err.value))
    assert all(pricing.NO_LIST_PRICE in s for s in said), said
    assert all("my_price(" in s and "(its offers: CPU, CPU server, T4" in s for s in said), said
    assert said[0].count(pricing.NO_LIST_PRICE) == 1 and pricing.no_list_price("H200") in said[1]
    # a GPU's reported name finds its key for the example
    assert "hardware='H200')" in pricing.no_list_price("NVIDIA H200")


def test_price_here_falls_back_to_the_price_you_typed():
    cpu, why = pricing.price_here(None)
    assert cpu is pricing.PRICES["CPU"] and "CPU machine" in why
    t4, why = pricing.price_here("Tesla T4", 9.0)  # a list price: the table's offer for its board
    assert t4 is pricing.PRICES["T4"] and "offer for its board" in why
    # the lent machine of this project is an H200, which the table has no price for
    none, why = pricing.price_here("NVIDIA H200")
    assert none is None and why.startswith(pricing.no_list_price("NVIDIA H200"))
    assert "You typed no price either: set my_usd_per_hour" in why
    typed, why = pricing.price_here("NVIDIA H200", 3.5)
    assert typed is not None and typed.usd_per_chip_hour == 3.5 and typed.hardware == "H200"
    assert typed.source == "typed by you" and "typed by you" in typed.label
    assert why.startswith(pricing.no_list_price("NVIDIA H200")) and "uses the price you typed" in why
    assert pricing.cost_per_epoch(60000, 1000, typed.usd_per_chip_hour) == pytest.approx(60 / 3600 * 3.5)
    other, _ = pricing.price_here("NVIDIA B200", 5.0)  # a board the tables do not know: named as reported
    assert other is not None and other.hardware == "NVIDIA B200" and other.usd_per_hour == 5.0
    with pytest.raises(UsageError, match="finite"):
        pricing.price_here("NVIDIA H200", float("nan"))
