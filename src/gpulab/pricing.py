"""Cloud list prices and what a training run costs (lesson 11).

:data:`PRICES` holds on-demand **list prices** per hour, each with its provider, region, the page it comes
from and the date it was taken ("as of ..."), and what it is (``kind``): none of them could be checked against a
stored copy of the provider's page on the check date, so each says "unverified estimate" and why (two are known
to be stale: AWS cut P4d/P5 prices in June 2025). Prices change often and differ by region, commitment and
spot market: type your own with :func:`my_price`. :func:`cost_per_epoch` and :func:`run_estimate` turn
time into dollars; :func:`run_estimate` also estimates energy as power x time, labelled as an estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import UsageError
from .hardware import BOARDS, CHECKED, DEVICES, UNVERIFIED, Device, Source, board_key, device

__all__ = [
    "LIST_PRICE",
    "PRICES",
    "PRICE_NOTE",
    "Price",
    "cost_per_epoch",
    "dollars",
    "my_price",
    "offer_for",
    "price",
    "run_estimate",
]

LIST_PRICE = "on-demand list price"


@dataclass(frozen=True)
class Price:
    """An hourly price for an offer with ``accelerators`` chips of kind ``hardware`` (a :mod:`gpulab.hardware` key)."""

    offer: str  # instance / machine type / chip
    hardware: str  # key in gpulab.hardware.DEVICES or BOARDS (or "CPU" for a CPU-only machine)
    accelerators: int  # chips per offer (0 for a CPU machine)
    usd_per_hour: float  # for the whole offer
    provider: str
    region: str
    source: str  # "as of <date>, from <page>" or "typed by you"
    kind: str = LIST_PRICE  # or "unverified estimate: why" where the provider's page could not be checked
    refs: tuple[Source, ...] = ()  # pages that confirm (or date) the price
    checked: str = ""  # when the price was checked against ``refs`` ("" when typed by you)

    @property
    def usd_per_chip_hour(self) -> float:
        """Dollars per accelerator-hour (the whole machine's price for a CPU machine)."""
        return self.usd_per_hour / max(1, self.accelerators)

    @property
    def label(self) -> str:
        """Where the price comes from, to print next to every figure built from it."""
        kind = "" if self.kind in (LIST_PRICE, self.source) else f"; {self.kind.split(':')[0].upper()}"
        kind += ", likely stale: AWS cut this family's price in June 2025" if "June 2025" in self.kind else ""
        return f"{self.provider} {self.offer}, ${self.usd_per_hour:,.4g}/h ({self.region}; {self.source}{kind})"


_AWS = "as of 2024, from aws.amazon.com/ec2/pricing/on-demand (Linux)"
_GCP = "as of 2024, from cloud.google.com/compute/vm-instance-pricing"
_TPU = "as of 2024, from cloud.google.com/tpu/pricing"
PRICE_NOTE = (
    f"{UNVERIFIED}: on-demand list price recalled from the provider's page as of 2024; no stored copy of "
    f"that page with this figure was found when the table was checked on {CHECKED}. Prices change: "
    "type your own with pricing.my_price"
)
_CUT = (
    Source(
        "https://www.usage.ai/blogs/aws/ai-ml-cost/llm-cost-optimization-aws/",
        "usage.ai: AWS cut P5 (H100) on-demand prices by up to 45% in June 2025, P4d (A100) too",
        "2026-06-30",
    ),
)
_STALE = (
    PRICE_NOTE + "; and AWS cut this family's on-demand price in June 2025 (see refs), so this 2024 figure "
    "overstates today's"
)
PRICES: dict[str, Price] = {
    "CPU": Price("c6i.2xlarge (8 vCPU, 16 GiB)", "CPU", 0, 0.34, "AWS", "us-east-1", _AWS, PRICE_NOTE),
    # a whole CPU server, priced per socket (accelerators = sockets). AWS's m7i runs a custom 48-core 4th-gen Xeon
    # (8488C) with no public spec sheet; estimates pair it with the closest one, the 56-core 8480+ (optimistic).
    "CPU server": Price(
        "m7i.48xlarge (192 vCPU, 2 sockets of 4th-gen Xeon)",
        "Xeon 8480+",
        2,
        9.6768,
        "AWS",
        "us-east-1",
        _AWS,
        PRICE_NOTE,
    ),
    "T4": Price("g4dn.xlarge (1x T4, 4 vCPU)", "T4", 1, 0.526, "AWS", "us-east-1", _AWS, PRICE_NOTE),
    "L4": Price("g6.xlarge (1x L4, 4 vCPU)", "L4", 1, 0.8048, "AWS", "us-east-1", _AWS, PRICE_NOTE),
    "L4 (GCP)": Price(
        "g2-standard-4 (1x L4, 4 vCPU)", "L4", 1, 0.7068, "Google Cloud", "us-central1", _GCP, PRICE_NOTE
    ),
    "A100": Price(
        "p4d.24xlarge (8x A100 40GB)", "A100 SXM 40GB", 8, 32.7726, "AWS", "us-east-1", _AWS, _STALE, _CUT, CHECKED
    ),
    "A100 (GCP)": Price(
        "a2-highgpu-1g (1x A100 40GB)", "A100 SXM 40GB", 1, 3.6734, "Google Cloud", "us-central1", _GCP, PRICE_NOTE
    ),
    "H100": Price("p5.48xlarge (8x H100 SXM)", "H100", 8, 98.32, "AWS", "us-east-1", _AWS, _STALE, _CUT, CHECKED),
    "TPU v5e": Price("TPU v5e (per chip)", "TPU v5e", 1, 1.20, "Google Cloud", "us regions", _TPU, PRICE_NOTE),
    "TPU v5p": Price("TPU v5p (per chip)", "TPU v5p", 1, 4.20, "Google Cloud", "us regions", _TPU, PRICE_NOTE),
    "TPU v6e": Price("TPU v6e Trillium (per chip)", "TPU v6e", 1, 2.70, "Google Cloud", "us regions", _TPU, PRICE_NOTE),
}


def price(key: str | Price) -> Price:
    """A price from :data:`PRICES` by key (``'T4'``, ``'TPU v5e'``); a Price is returned as is."""
    if isinstance(key, Price):
        return key
    if key not in PRICES:
        raise UsageError(
            _no_price(key)
            if key in DEVICES or key in BOARDS
            else (
                f"no price called {key!r}; known: {', '.join(PRICES)}. Or type your own: "
                "pricing.my_price('my GPU', usd_per_hour=1.5, hardware='L4')."
            )
        )
    return PRICES[key]


def _no_price(hardware: str) -> str:
    """What to do about hardware that the price table has no offer for (the H200, say)."""
    return (
        f"gpulab.pricing has no list price for {hardware!r} (the table holds offers it could name a page for: "
        f"{', '.join(PRICES)}). Type your provider's: pricing.my_price('{hardware} (your price)', "
        f"usd_per_hour=..., hardware='{hardware}')."
    )


def offer_for(device_name: str) -> Price | None:
    """The first offer in :data:`PRICES` for a GPU's reported name (``"Tesla T4"``, ``"NVIDIA A100-SXM4-40GB"``):
    matched by :func:`gpulab.hardware.board_key` to its own board's row, so an A100 80GB is not priced as the 40GB
    board's offer. None where the table has no offer for that board (an H200, an H100 PCIe): price it yourself
    with :func:`my_price`."""
    key = board_key(device_name)
    return next((p for p in PRICES.values() if key is not None and p.hardware == key), None)


def my_price(
    offer: str, usd_per_hour: float, *, hardware: str = "CPU", accelerators: int = 1, provider: str = "you"
) -> Price:
    """Your own hourly price (from your provider's page or your invoice); labelled as typed by you."""
    if not (usd_per_hour >= 0) or usd_per_hour == float("inf"):
        raise UsageError(f"usd_per_hour must be a finite number >= 0, got {usd_per_hour!r}.")
    if accelerators < 0:
        raise UsageError(f"accelerators must be 0 or more, got {accelerators}.")
    if hardware != "CPU":
        device(hardware)  # raises with the known names if unknown
    return Price(offer, hardware, accelerators, float(usd_per_hour), provider, "-", "typed by you", "typed by you")


def dollars(seconds: float, usd_per_hour: float) -> float:
    """What ``seconds`` of an offer at ``usd_per_hour`` cost (billed per second, as most clouds now do)."""
    if usd_per_hour is None:
        raise UsageError(
            "no hourly price (got None): hardware without a list price in gpulab.pricing (the H200, say) needs "
            "yours, e.g. pricing.my_price('H200 (your price)', usd_per_hour=..., hardware='H200').usd_per_chip_hour."
        )
    if seconds < 0 or usd_per_hour < 0:
        raise UsageError(f"seconds and usd_per_hour must be >= 0, got {seconds} and {usd_per_hour}.")
    return seconds / 3600.0 * usd_per_hour


def cost_per_epoch(images: int, images_per_second: float, usd_per_hour: float) -> float:
    """Dollars for one pass over ``images`` at ``images_per_second`` on an offer at ``usd_per_hour``."""
    if images < 0 or images_per_second <= 0:
        raise UsageError(
            f"cost_per_epoch needs images >= 0 and images_per_second > 0, got {images} and {images_per_second}."
        )
    return dollars(images / images_per_second, usd_per_hour)


def run_estimate(
    flops: float,
    hardware: str | Device,
    offer: str | Price | None,
    *,
    precision: str = "bf16",
    utilization: float = 0.4,
    chips: int = 1,
) -> dict[str, Any]:
    """Time, dollars and energy for ``flops`` of training on ``chips`` x ``hardware`` at ``utilization``
    of its spec-sheet peak at ``precision``: an **estimate** (assumed utilization, power = spec-sheet watts).

    Returns ``{"hours", "dollars", "kwh", "label"}``; ``kwh`` is None where the spec sheet gives no power, and
    ``dollars`` None where ``offer`` is None (hardware with no list price here, such as the H200: the label says
    how to type one).
    """
    d = device(hardware)
    peak = d.peak(precision) or d.peak("fp32")
    if peak is None:
        raise UsageError(f"{d.name} has no {precision} or fp32 peak on its spec sheet.")
    if not 0 < utilization <= 1:
        raise UsageError(f"utilization is a fraction of the peak in (0, 1], got {utilization}.")
    if chips < 1:
        raise UsageError(f"chips must be at least 1, got {chips}.")
    p = None if offer is None else price(offer)
    seconds = flops / (peak * 1e12 * utilization * chips)
    per_chip = None if p is None else p.usd_per_chip_hour if p.accelerators else p.usd_per_hour
    kwh = None if d.watts is None else d.watts * chips * seconds / 3.6e6
    key = hardware if isinstance(hardware, str) else d.name
    no_price = f"no list price for {key!r} in gpulab.pricing; type yours: pricing.my_price(..., hardware={key!r})"
    return {
        "hours": seconds / 3600,
        "dollars": None if per_chip is None else dollars(seconds, per_chip * chips),
        "kwh": kwh,
        "label": (
            f"estimate: {utilization:.0%} of {d.name}'s spec-sheet "
            f"{precision if d.peak(precision) else 'fp32'} "
            f"peak x {chips}; energy = {_watts_kind(d)} {d.watts or '?'} W x time; "
            f"price: {no_price if p is None else p.label}"
        ),
    }


def _watts_kind(d: Device) -> str:
    """How to call a device's watts in a label: "spec-sheet", or what they are instead and why."""
    kind = d.figure_kind("watts") if d.watts is not None else "spec sheet"
    if kind == "spec sheet":
        return "spec-sheet"
    head, _, why = kind.partition(":")
    return f"{head} ({why.strip()})"
