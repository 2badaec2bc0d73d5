"""Cloud list prices and what a training run costs (lesson 11).

:data:`PRICES` holds on-demand **list prices** per hour, each with its provider, region, the page it comes
from and the date it was taken ("as of ..."), and what it is (``kind``): none of them could be checked against a
stored copy of the provider's page on the check date, so each says "unverified estimate" and why (two are known
to be stale: AWS cut P4d/P5 prices in June 2025). Prices change often and differ by region, commitment and
spot market: type your own with :func:`my_price`. :func:`cost_per_epoch` and :func:`run_estimate` turn
time into dollars; :func:`run_estimate` also estimates energy as power x time, labelled as an estimate.
Hardware the table has no offer for (the H200) says so in one text, :func:`no_list_price`, wherever it comes up;
:func:`price_here` falls back to the price you type for the GPU a lesson runs on.

The table has no H200 row: the stored public pages searched on 2026-12-02 hold no provider's own H200 on-demand
price, only third-party figures that disagree: deploybase.ai gives RunPod's H200 as $3.59/h on 2025-11-08
(https://deploybase.ai/articles/h200-vs-h100) but as its spot price, with $6.35/h on-demand, on 2026-03-10
(https://deploybase.ai/articles/runpod-gpu-pricing); awsnegotiations.com (May 2026,
https://awsnegotiations.com/gpu-instance-cost-strategy.html) gives AWS's p5e.48xlarge (8x H200) as "~$107/hr", "est.".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .errors import UsageError
from .hardware import BOARDS, CHECKED, CPU_PARTS, DEVICES, UNVERIFIED, Device, Source, board_key, device

__all__ = [
    "LIST_PRICE",
    "NO_LIST_PRICE",
    "PRICES",
    "PRICE_NOTE",
    "Price",
    "cost_per_epoch",
    "dollars",
    "my_price",
    "no_list_price",
    "offer_for",
    "price",
    "price_here",
    "run_estimate",
]

LIST_PRICE = "on-demand list price"
NO_LIST_PRICE = "has no list price in gpulab.pricing"  # the words of no_list_price(), every place it is said


@dataclass(frozen=True)
class Price:
    """An hourly price for an offer with ``accelerators`` chips of kind ``hardware`` (a :mod:`gpulab.hardware` key)."""

    offer: str  # instance / machine type / chip
    hardware: str  # key in gpulab.hardware.DEVICES, BOARDS or CPU_PARTS (or "CPU" for a CPU-only machine)
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
    # A whole CPU server, priced per socket (accelerators = sockets). The price pays for 2 x 48 cores (192 vCPU at
    # 2 per core) of AWS's custom 8488C, which has no public spec sheet. Set against the 56-core 8480+'s peak, each
    # dollar bought 56/48 of the cores it pays for: a CPU run came out 1 - 48/56 = 14% too cheap. So the hardware it
    # is compared with is the 8480+ scaled to the 48 cores priced (gpulab.hardware.CPU_PARTS["Xeon 8488C"]).
    "CPU server": Price(
        "m7i.48xlarge (192 vCPU = 2 sockets x 48 cores of 4th-gen Xeon 8488C)",
        "Xeon 8488C",
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
            f"{no_list_price(key)}."
            if key in DEVICES or key in BOARDS or key in CPU_PARTS
            else (
                f"no price called {key!r}; known: {', '.join(PRICES)}. Or type your own: "
                "pricing.my_price('my GPU', usd_per_hour=1.5, hardware='L4')."
            )
        )
    return PRICES[key]


def no_list_price(hardware: str | None = None) -> str:
    """The one text for hardware the price table has no offer for (the H200): :func:`price`'s error,
    :func:`dollars` given None, :func:`run_estimate`'s label and :func:`price_here` all say it, with how to type
    your own price. ``hardware``: a key of :mod:`gpulab.hardware` or a GPU's reported name; None when unknown."""
    key = hardware if hardware in DEVICES or hardware in BOARDS or hardware in CPU_PARTS else None
    key = key or (board_key(hardware) if hardware else None)
    return (
        f"{'this hardware' if hardware is None else repr(hardware)} {NO_LIST_PRICE} (its offers: "
        f"{', '.join(PRICES)}); type your provider's price: pricing.my_price('{hardware or 'my GPU'} (your price)', "
        f"usd_per_hour=..., hardware={repr(key) if key else '<its key in gpulab.hardware>'})"
    )


def offer_for(device_name: str) -> Price | None:
    """The first offer in :data:`PRICES` for a GPU's reported name (``"Tesla T4"``, ``"NVIDIA A100-SXM4-40GB"``):
    matched by :func:`gpulab.hardware.board_key` to its own board's row, so an A100 80GB is not priced as the 40GB
    board's offer. None where the table has no offer for that board (an H200, an H100 PCIe): price it yourself
    with :func:`my_price`."""
    key = board_key(device_name)
    return next((p for p in PRICES.values() if key is not None and p.hardware == key), None)


def price_here(gpu_name: str | None, my_usd_per_hour: float | None = None) -> tuple[Price | None, str]:
    """The hourly price of the machine a lesson's work ran on, and a sentence saying where it comes from.

    ``gpu_name`` None (the work ran on this CPU, as in simulator mode): the table's CPU machine. A GPU's reported
    name: the table's offer for its own board (:func:`offer_for`); where the table has none (an H200), the price
    you typed, ``my_usd_per_hour`` per GPU-hour, labelled as typed by you; where you typed none either, None, and
    the sentence says so and how to type one. Never a silent skip.
    """
    if gpu_name is None:
        p = PRICES["CPU"]
        return p, f"this machine's CPU did the work: priced as the table's CPU machine ({p.kind.split(':')[0]})"
    offer = offer_for(gpu_name)
    if offer is not None:
        return offer, f"{gpu_name} did the work: priced as the table's offer for its board ({offer.kind.split(':')[0]})"
    if my_usd_per_hour is None:
        return None, (
            f"{no_list_price(gpu_name)}. You typed no price either: set my_usd_per_hour to your provider's price per "
            "GPU-hour and run the cell again"
        )
    key = board_key(gpu_name)  # None: a board the hardware tables do not know, named as reported
    typed = my_price(f"{gpu_name} (your price)", my_usd_per_hour, hardware=key or "CPU")
    return replace(typed, hardware=key or gpu_name), (
        f"{no_list_price(gpu_name)}. So this uses the price you typed: my_usd_per_hour = "
        f"${my_usd_per_hour:g} per GPU-hour"
    )


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
        raise UsageError(f"usd_per_hour is None: {no_list_price()}, and pass its .usd_per_chip_hour.")
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
    p = None if offer is None else price(offer)
    if p is not None and (p.hardware == "CPU" or _compute(device(p.hardware)) != _compute(d)):
        raise UsageError(  # a price and a peak of different chips (or cores) make a figure that describes neither
            f"the offer {p.offer!r} prices {p.hardware!r}, not {d.name}: pass the hardware it prices, or type a price "
            "for this hardware: pricing.my_price('...', usd_per_hour=..., hardware=<its key in gpulab.hardware>)."
        )
    peak = d.peak(precision) or d.peak("fp32")
    if peak is None:
        raise UsageError(f"{d.name} has no {precision} or fp32 peak on its spec sheet.")
    if not 0 < utilization <= 1:
        raise UsageError(f"utilization is a fraction of the peak in (0, 1], got {utilization}.")
    if chips < 1:
        raise UsageError(f"chips must be at least 1, got {chips}.")
    seconds = flops / (peak * 1e12 * utilization * chips)
    per_chip = None if p is None else p.usd_per_chip_hour if p.accelerators else p.usd_per_hour
    kwh = None if d.watts is None else d.watts * chips * seconds / 3.6e6
    prec = precision if d.peak(precision) else "fp32"
    return {
        "hours": seconds / 3600,
        "dollars": None if per_chip is None else dollars(seconds, per_chip * chips),
        "kwh": kwh,
        "label": (
            f"estimate: {utilization:.0%} of {d.name}'s {_kind(d, prec)} {_peak_name(d, prec)} x {chips}; "
            f"energy = {_kind(d, 'watts')} {f'{d.watts:g}' if d.watts else '?'} W x time; "
            f"price: {no_list_price(hardware if isinstance(hardware, str) else d.name) if p is None else p.label}"
        ),
    }


def _peak_name(d: Device, precision: str) -> str:
    """The peak a label names: "bf16 peak", or on a chip whose bf16 column counts FP16 tensor cores (V100, T4:
    :attr:`gpulab.hardware.Device.bf16_format`) what that run would be: FP16, with loss scaling."""
    if precision == "bf16" and d.bf16_format == "FP16":
        return "FP16 tensor-core peak (no BF16 on this chip: an FP16 run, with loss scaling)"
    return f"{precision} peak"


def _compute(d: Device) -> tuple[float | None, ...]:
    """The figures :func:`run_estimate` uses: another board of the same chip (an A100 40GB) has the same."""
    return (d.fp32, d.tf32, d.bf16, d.fp8, d.watts)


def _kind(d: Device, field: str) -> str:
    """How to call a device's figure in a label: "spec-sheet", or what it is instead and why."""
    kind = d.figure_kind(field) if getattr(d, field) is not None else "spec sheet"
    if kind == "spec sheet":
        return "spec-sheet"
    head, _, why = kind.partition(":")
    return f"{head} ({why.strip()})"
