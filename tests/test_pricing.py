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
    cpu = pricing.run_estimate(1e15, "Xeon 8480+", "CPU", precision="fp32")
    assert cpu["dollars"] == pytest.approx(cpu["hours"] * 0.34)
    with pytest.raises(UsageError, match="utilization"):
        pricing.run_estimate(1e18, "H100", "H100", utilization=0)


def test_cpu_server_is_priced_per_socket():
    server = pricing.PRICES["CPU server"]
    assert server.hardware == "Xeon 8480+" and server.accelerators == 2
    est = pricing.run_estimate(1e15, "Xeon 8480+", "CPU server", precision="fp32")
    assert est["dollars"] == pytest.approx(est["hours"] * server.usd_per_hour / 2)


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
    with pytest.raises(UsageError, match=r"no list price for 'H200'.*my_price\('H200 \(your price\)'"):
        pricing.price("H200")
    est = pricing.run_estimate(1e18, "H200", None)  # no offer: time and energy, no dollars
    assert est["dollars"] is None and est["hours"] > 0 and est["kwh"] is not None
    assert "price: no list price for 'H200' in gpulab.pricing; type yours: pricing.my_price(" in est["label"]
    with pytest.raises(UsageError, match="no hourly price"):
        pricing.cost_per_epoch(60000, 1000, None)  # type: ignore[arg-type]
    typed = pricing.my_price("H200 (mine)", 3.5, hardware="H200")
    assert pricing.run_estimate(1e18, "H200", typed)["dollars"] > 0
    assert pricing.my_price("PCIe box", 2.0, hardware="H100 PCIe").hardware == "H100 PCIe"  # a board of BOARDS
