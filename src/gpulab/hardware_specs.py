"""Spec-sheet tables for lesson 11: CPUs, GPU generations, TPUs and the links between them.

Every figure here is a **spec sheet** value (a vendor's published peak, dense: no 2:4 sparsity) unless its row
says otherwise per figure (:meth:`Device.figure_kind`: "measured", "estimate: why", or "unverified estimate: why"
where no public source was found). Each row names its vendor document, the public pages it was checked against
(``refs``, with their own dates) and the date of that check (``checked``); every figure or table built from
them must say "spec sheet". CPU peaks are not published by the vendors as FLOP/s: they are computed from
cores x base clock x FLOP per cycle per core, and are labelled estimates.

:data:`GPUS` has one row per chip generation (its flagship board), the rows lesson 11 draws; :data:`BOARDS` holds
other boards of those chips (another form factor or memory size) and a few common ones, so that a reported GPU
name (:func:`gpulab.hardware.gpu_named`) finds its own board's figures rather than another board's.

This module holds the data (the row types, the labels, the tables, their import-time check); the lookups
and napkin models that use it are in :mod:`gpulab.hardware`, which re-exports every name here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .errors import UsageError

__all__ = [
    "CHECKED",
    "CPUS",
    "CPU_PARTS",
    "DEVICES",
    "BOARDS",
    "ESTIMATE",
    "FIGURES",
    "GPUS",
    "INTERCONNECTS",
    "MEASURED",
    "SPEC_SHEET",
    "TPUS",
    "UNVERIFIED",
    "Device",
    "Link",
    "Source",
]

SPEC_SHEET = "spec sheet"  # the label every table and figure built from these figures carries
MEASURED = "measured"  # a vendor's (or our) measurement, not a peak
ESTIMATE = "estimate"  # computed by us from other figures, or an assumption
UNVERIFIED = "unverified estimate"  # no public source found in the stored copies we searched: says why
CHECKED = "2026-12-01"  # when every figure below was checked against the stored copies of the pages in ``refs``
FIGURES = ("fp32", "tf32", "bf16", "fp8", "memory_gb", "memory_gbps", "watts")


@dataclass(frozen=True)
class Source:
    """A page a table row was checked against: its address, what it is, and the date the page itself states."""

    url: str
    title: str
    date: str = "undated"  # the document's own date where it gives one


@dataclass(frozen=True)
class Device:
    """Spec-sheet peaks of one chip (TFLOP/s dense; None where the chip has no such unit or none is published).

    Every figure is a vendor's spec-sheet value unless ``estimates`` says otherwise for that field
    (:meth:`figure_kind`); ``refs`` are the pages it was checked against on ``checked``.
    """

    name: str
    kind: str  # "CPU", "GPU" or "TPU"
    vendor: str
    year: int
    fp32: float | None  # TFLOP/s, FP32 on CUDA cores / vector units (no tensor cores)
    tf32: float | None  # TFLOP/s, TF32 tensor cores (dense)
    bf16: float | None  # TFLOP/s, BF16 (or FP16 where BF16 is missing: see note) tensor/matrix units, dense
    fp8: float | None  # TFLOP/s, FP8 tensor cores, dense
    memory_gb: float
    memory_gbps: float
    memory_type: str
    watts: float | None  # board power / TDP / TGP
    source: str  # the document the figures come from, and when they were taken from it
    note: str = ""
    refs: tuple[Source, ...] = ()
    checked: str = CHECKED
    # (field, "estimate: why" / "unverified estimate: why" / "measured: ...") for figures that are not spec sheet
    estimates: tuple[tuple[str, str], ...] = ()

    def peak(self, precision: str = "fp32") -> float | None:
        """Peak TFLOP/s at ``precision`` (``fp32``, ``tf32``, ``bf16``, ``fp8``), or None."""
        if precision not in ("fp32", "tf32", "bf16", "fp8"):
            raise UsageError(f"precision must be fp32, tf32, bf16 or fp8, got {precision!r}.")
        return getattr(self, precision)

    def figure_kind(self, field: str) -> str:
        """Kind of figure ``field``: "spec sheet", or "measured: ...", "estimate: ...", "unverified estimate: ..."."""
        if field not in FIGURES:
            raise UsageError(f"field must be one of {', '.join(FIGURES)}, got {field!r}.")
        return dict(self.estimates).get(field, SPEC_SHEET)

    def figure_kinds(self) -> dict[str, str]:
        """``{field: kind}`` for every figure the row has (None figures are left out)."""
        return {f: self.figure_kind(f) for f in FIGURES if getattr(self, f) is not None}

    @property
    def bf16_format(self) -> str:
        """The 16-bit format the ``bf16`` column counts: "FP16" on chips without BF16 (Volta's V100 and Turing's T4
        have FP16 tensor cores only; their notes say "bf16 column: FP16 tensor cores"), else "BF16". Print it
        wherever a ``bf16`` figure is named, so that a T4 is never said to run BF16."""
        return "FP16" if _FP16_ONLY in self.note else "BF16"


@dataclass(frozen=True)
class Link:
    """A link between chips: GB/s per direction, per GPU (or per port), from its specification."""

    name: str
    gbps: float  # GB/s (10^9 bytes/s) one way
    latency_us: float  # typical small-message latency, order of magnitude (not a spec-sheet figure)
    scope: str  # "in a machine" or "between machines"
    source: str
    refs: tuple[Source, ...] = ()
    checked: str = CHECKED
    gbps_kind: str = SPEC_SHEET
    latency_kind: str = ESTIMATE + ": order of magnitude for a small message; no specification gives it"


# --- the pages the figures were checked against (stored public copies, searched 2026-12-01) -----------------
# The tables stay one row per device and one source per line (fmt: off), as a reader scans them.
# fmt: off
_S = Source
_NV_T4 = (_S("https://www.heise.de/news/Nvidia-Tesla-P4-K-I-Beschleuniger-mit-8-TFlops-bei-75-Watt-Leistungsaufnahme-"
             "4164684.html", "heise: Nvidia Tesla T4 announcement (8.1 TFLOPS FP32, 16 GB GDDR6, 320 GB/s)", "2018-09"),
          _S("https://sysrqmts.com/en/gpus/nvidia/tesla/t4",
             "hardware database: T4 (65.13 TFLOPS FP16, 320 GB/s, 70 W)"),
          _S("https://geektopia.es/es/technology/2018/09/13/noticias/nvidia-presenta-la-nueva-tesla-t4-basada-en-turing-"
             "orientada-a-inteligencia-artificial.html", "geektopia: T4 (8.1 TFLOPS FP32, 65 TFLOPS FP16)",
             "2018-09-13"))
_NV_V100 = (_S("https://developer.nvidia.com/programming-tensor-cores-cuda-9-0",
               "NVIDIA developer blog: Programming Tensor Cores in CUDA 9 (up to 125 Tensor TFLOPS)", "2017"),
            _S("https://www.hardwaretimes.com/nvidia-ampere-architectural-analysis-a-look-at-the-a100-tensor-core-gpu/",
               "NVIDIA's P100/V100/A100 table as reproduced by Hardware Times (V100: 5120 FP32 cores, 1530 MHz)",
               "2020-05"),
            _S("https://elchapuzasinformatico.com/2017/05/nvidia-tesla-v100-anunciada-5210-cuda-cores-la-arquitectura-volta/",
               "El Chapuzas: Tesla V100 announcement (HBM2, 900 GB/s, 300 W)", "2017-05"))
_NV_A100 = (_S("https://glennklockwood.com/garden/processors/A100",
               "Glenn Lockwood's notes, quoting NVIDIA's A100 data sheet (r4): 19.5 / 156 / 312 TFLOPS dense"),
            _S("https://www.thundercompute.com/blog/nvidia-a100-specs-full-guide",
               "Thunder Compute: A100 specifications (SXM 80GB: HBM2e, 2,039 GB/s, 400 W)", "2026-05-21"))
_NV_L4 = (_S("https://store.sourcecode.com/en-us/bg-bucket-compare/125/9820",
             "reseller copy of NVIDIA's L4 data sheet (TF32 120 TFLOPS with sparsity, 300 GB/s)"),
          _S("https://grokipedia.com/page/NVIDIA_L4_vs_L40S",
             "L4 vs L40S (72 W, 24 GB GDDR6, 300 GB/s, FP16 242 / FP8 485 TFLOPS with sparsity)"),
          _S("https://fpsbench.com/compare/gpu/nvidia-l4-vs-nvidia-tesla-m40",
             "hardware database: L4 (30.29 TFLOPS FP32)"))
_NV_4090 = (_S("https://waredb.com/processor/nvidia-geforce-rtx-4090",
               "hardware database: RTX 4090 (82.58 FP32, TF32 82.58, BF16 165.15, FP8 330.30 TFLOPS dense)"),
            _S("https://www.thefpsreview.com/gpu-family/nvidia-geforce-rtx-4090-gpu-family-specifications",
               "The FPS Review: RTX 4090 (450 W TGP, 24 GB GDDR6X, 1008 GB/s)"))
_NV_H100 = (_S("https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html",
               "reseller copy of NVIDIA's H100 table ('* Shown with sparsity. Specifications 1/2 lower without "
               "sparsity')"),
            _S("https://glennklockwood.com/garden/processors/h100",
               "Glenn Lockwood's notes: H100 SXM dense TF32 494.7, BF16 989.4, FP8 1978.9 TFLOPS; 700 W"))
_NV_H200 = (_S("https://geektopia.es/es/technology/2023/11/13/noticias/nvidia-anuncia-la-aceleradora-h200-tiene-141-gb-"
               "de-hbm3e.html", "geektopia: H200 announcement (141 GB HBM3e, 4.8 TB/s, 700 W, H100's compute)",
               "2023-11-13"),
            _S("https://raw.githubusercontent.com/mlcommons/inference_results_v4.1/main/closed/NVIDIA/systems/"
               "H200-SXM-141GBx8_TRT_MaxQ.json", "NVIDIA's MLPerf Inference v4.1 system description ('H200 TGP 700W')",
               "2024"))
_AMD_MI300X = (_S("https://raw.githubusercontent.com/alpharomercoma/MI300X-vs-H200/"
                  "6077fdc7bfc215171c33435b7cd76ca4c5f2b236/METHODOLOGY.md",
                  "MI300X vs H200 methodology: AMD's dense BF16 1307.4 / FP8 2614.9 TFLOP/s, 5.3 TB/s, 192 GB, 750 W"),
               _S("https://raw.githubusercontent.com/mlcommons/inference_results_v4.1/main/closed/AMD/systems/"
                  "8xMI300X_2xEPYC-9374F.json",
                  "AMD's MLPerf Inference v4.1 system description (MI300X 192GB 750W, HBM3)",
                  "2024"),
               _S("https://vengineer.hatenablog.com/entry/2023/12/11/080000",
                  "AMD's MI300A figures as quoted (228 CUs, 2100 MHz: FP32 122.6, FP64 61.3, BF16 980.6 TFLOPs)",
                  "2023-12-11"),
               _S("https://partofstyle.com/next-gen-chips-to-boast-320-cdna-3-compute-units-192-gb-hbm3-memory-with-a-"
                  "288-gb-hbm3e-boost-on-the-horizon/",
                  "AMD's MI300X claims as reported: 3.4x the MI250X in vector FP32, 1.7x in vector FP64"),
               _S("https://gpu.blog/gpus/instinct-mi300x-mi300x",
                  "hardware database: MI300X (FP32 164.6, FP64 82.3 TFLOPS; 304 CUs)", "2025-01-01"))
_GCP_TPU = {
    "v4": _S("https://cloud.google.com/tpu/docs/v4", "Google Cloud: TPU v4 (275 TFLOPs bf16, 32 GiB HBM2, 1200 GBps, "
             "measured min/mean/max power 90/170/192 W)"),
    "v5e": _S("https://docs.cloud.google.com/tpu/docs/v5e",
              "Google Cloud: TPU v5e (197 TFLOPs bf16, 16 GB HBM2, 819 GBps; a later version: 393 TOPs int8)"),
    "v5p": _S("https://cloud.google.com/tpu/docs/v5p?hl=pt-br", "Google Cloud: TPU v5p (459 TFLOPs bf16, 95 GB HBM2e, "
              "2765 GBps)"),
    "v6e": _S("https://docs.cloud.google.com/tpu/docs/v6e.md.txt",
              "Google Cloud: TPU v6e (918 TFLOPs bf16, 1836 TOPs int8, "
              "32 GB HBM, 1638 GBps)"),
}
_EPYC = (_S("https://llmperf.net/categories/cpu/AMD-EPYC-9000-Genoa-Turin-CPUs",
            "EPYC 9654 summary (96 cores, 2.40 GHz base, 360 W; cites TechPowerUp's CPU database)"),
         _S("https://www.tomshardware.fr/epyc-genoa-la-prise-en-charge-de-12-canaux-de-memoire-ddr5-confirmee/",
            "Tom's Hardware FR: Genoa's 12 DDR5 channels, 460.8 GB/s, 6 TB possible", "2021-12"))
_XEON = (_S("https://servethehome.com/intel-xeon-max-9480-deep-dive-intel-has-64gb-hbm2e-onboard-like-a-gpu-or-ai-"
            "accelerator/3", "ServeTheHome: Xeon Platinum 8480+ = four 14-core tiles, 56 cores, 8 DDR5 channels"),
         _S("https://computerbase.de/2022-09/xeon-platinum-8490h-intels-erster-60-kerner-fuer-server-im-detail",
            "ComputerBase: Sapphire Rapids line-up (8480+: 56 cores; 350 W TDP class)", "2022-09"),
         _S("https://wikimili.com/en/Advanced_Matrix_Extensions",
            "Advanced Matrix Extensions: 1024 BF16 operations per cycle per core on 4th-gen Xeon"))

_FP16_ONLY = "bf16 column: FP16 tensor cores"  # the words that mark a chip without BF16 (Device.bf16_format)
_SPARSE = "dense figures; NVIDIA's data sheet lists sparse (2:4) rates, twice these"
_NV = f"as of {CHECKED}, from NVIDIA's data sheet"
GPUS: dict[str, Device] = {
    "V100": Device("V100 SXM2 32GB", "GPU", "NVIDIA", 2017, 15.7, None, 125, None, 32, 900, "HBM2", 300,
                   f"{_NV} 'NVIDIA V100 Tensor Core GPU' (nvidia.com/en-us/data-center/v100)",
                   f"{_FP16_ONLY} (Volta has no BF16, TF32 or FP8); 15.7 = 5120 cores x 2 x 1.53 GHz "
                   "(the 2017 announcement said 15 at 1.455 GHz)", _NV_V100),
    "T4": Device("T4", "GPU", "NVIDIA", 2018, 8.1, None, 65, None, 16, 320, "GDDR6", 70,
                 f"{_NV} 'NVIDIA T4 Tensor Core GPU' (nvidia.com/en-us/data-center/tesla-t4)",
                 f"{_FP16_ONLY} (Turing has no BF16, TF32 or FP8); the 2018 announcement said 75 W, "
                 "the data sheet and databases 70 W", _NV_T4),
    "A100": Device("A100 SXM 80GB", "GPU", "NVIDIA", 2020, 19.5, 156, 312, None, 80, 2039, "HBM2e", 400,
                   f"{_NV} 'NVIDIA A100 Tensor Core GPU' (nvidia.com/en-us/data-center/a100)", _SPARSE, _NV_A100),
    "L4": Device("L4", "GPU", "NVIDIA", 2023, 30.3, 60, 121, 242.5, 24, 300, "GDDR6", 72,
                 f"{_NV} 'NVIDIA L4 Tensor Core GPU' (nvidia.com/en-us/data-center/l4)",
                 "the data sheet lists sparse rates (120 / 242 / 485); dense is half", _NV_L4),
    "RTX 4090": Device("GeForce RTX 4090", "GPU", "NVIDIA", 2022, 82.6, 82.6, 165.2, 330.3, 24, 1008, "GDDR6X", 450,
                       f"as of {CHECKED}, from NVIDIA's 'Ada Lovelace GPU architecture' whitepaper, appendix table",
                       "consumer card; tensor rates with FP32 accumulate, dense (sparse: twice)", _NV_4090),
    "H100": Device("H100 SXM", "GPU", "NVIDIA", 2022, 67, 494, 989, 1979, 80, 3350, "HBM3", 700,
                   f"{_NV} 'NVIDIA H100 Tensor Core GPU' (nvidia.com/en-us/data-center/h100)",
                   "the data sheet lists sparse rates (989 / 1979 / 3958); dense is half", _NV_H100),
    "H200": Device("H200 SXM", "GPU", "NVIDIA", 2024, 67, 494, 989, 1979, 141, 4800, "HBM3e", 700,
                   f"{_NV} 'NVIDIA H200 Tensor Core GPU' (nvidia.com/en-us/data-center/h200)",
                   "same compute as H100 SXM (dense; sparse is twice); more and faster memory", _NV_H200),
    "MI300X": Device("Instinct MI300X", "GPU", "AMD", 2023, 163.4, 653.7, 1307.4, 2614.9, 192, 5300, "HBM3", 750,
                     f"as of {CHECKED}, from AMD's data sheet 'AMD Instinct MI300X Accelerator' (amd.com/en/products/"
                     "accelerators/instinct/mi300/mi300x.html)",
                     "runs ROCm, not CUDA; dense (AMD's sparse rates: twice)",
                     _AMD_MI300X,
                     estimates=(("fp32", f"{ESTIMATE}: computed, 1307.4 / 8 (this row's dense BF16 rate; a CDNA 3 CU "
                                 "does 8 BF16 matrix FLOPs per vector FP32 FLOP, as the MI300A's quoted 980.6 and "
                                 "122.6 show); AMD's MI300X data sheet, as recalled, gives the same 163.4 (81.7 is its "
                                 "FP64 vector rate), but was not among the stored copies searched"),
                                ("tf32", f"{UNVERIFIED}: AMD's dense TF32 figure, recalled; AMD's page was not among "
                                 "the stored copies searched"))),
}

_NV_A100_BOARDS = (_NV_A100[1],  # Thunder Compute's table: PCIe 40GB / 80GB, SXM 40GB / 80GB; bandwidth, TDP
                   _S("https://glennklockwood.com/garden/processors/A100",
                      "Glenn Lockwood's notes: A100 40G SXM4, 40 GB HBM2, 1.555 TB/s, 400 W; the 80G: same FLOPS"))
_NV_H100_PCIE = (_NV_H100[0],  # the reseller table's PCIe column: 51 / 756* / 1,513* / 3,026*, HBM2e, 2000 GB/s
                 _S("https://manuals.plus/m/56b0c3ef7d0a1c470c0af8f05a0bd1f29a778007472ba941201fbbb185c9bccd",
                    "NVIDIA H100 PCIe product brief PB-11133-001_v02 (TDP 350 W, > 2,000 GB/s)", "2022-11"))
_NV_NVL = (_S("https://grokipedia.com/page/210100120", "H100 NVL (94 GB HBM3, 3.93 TB/s, 350 W)"),
           _S("https://gpu.blog/gpus/nvidia-h100-nvl", "H100 NVL: 94 GB, TDP 350-400 W (configurable)"))
# No H200 NVL row (the PCIe board drivers name "NVIDIA H200 NVL"): its memory (141 GB HBM3e, 4.8 TB/s, as the SXM
# board's: aiwiki.ai/wiki/nvidia_h200/raw, 2026-06-21) and power (600 W against the SXM's 700 W:
# saulelectric.com/nvidia-h200.html) are in the stored pages, but not its FP32, TF32, BF16 or FP8 peaks (lower than
# the SXM board's): NVIDIA's data sheet's NVL column was in none of the stored copies searched (2026-12-01, again
# 2026-12-04). So the name finds no row; gpulab.hardware.missing_row_note names the nearest one, the H200 SXM, as such.
_NV_L40S = (_S("https://www.mullet.se/product.html?product_id=355414", "reseller copy of NVIDIA's L40/L40S table (FP32 "
               "91.6, TF32 183, BF16 362.05, FP8 733 TFLOPS dense; 48 GB GDDR6, 864 GB/s, 350 W)"),)
_NVL_UNVERIFIED = (f"{UNVERIFIED}: recalled from NVIDIA's data sheet (NVL column, sparse rate / 2); no stored copy "
                   "with this column was found")
_NVL_EST = tuple((f, _NVL_UNVERIFIED) for f in ("fp32", "tf32", "bf16", "fp8"))
BOARDS: dict[str, Device] = {
    "V100 SXM2 16GB": replace(GPUS["V100"], name="V100 SXM2 16GB", memory_gb=16,
                              note=GPUS["V100"].note + "; the 2017 launch board: the 32GB board's other figures"),
    "A100 SXM 40GB": replace(GPUS["A100"], name="A100 SXM 40GB", memory_gb=40, memory_gbps=1555, memory_type="HBM2",
                             refs=_NV_A100_BOARDS),
    "A100 PCIe 40GB": replace(GPUS["A100"], name="A100 PCIe 40GB", memory_gb=40, memory_gbps=1555,
                              memory_type="HBM2", watts=250, refs=_NV_A100_BOARDS),
    "A100 PCIe 80GB": replace(GPUS["A100"], name="A100 PCIe 80GB", memory_gbps=1935, watts=300, refs=_NV_A100_BOARDS),
    "H100 PCIe": Device("H100 PCIe", "GPU", "NVIDIA", 2022, 51, 378, 756, 1513, 80, 2000, "HBM2e", 350,
                        GPUS["H100"].source, "the data sheet lists sparse rates (756 / 1513 / 3026); dense is half; "
                        "watts: the top of its 300-350 W range", _NV_H100_PCIE),
    "H100 NVL": Device("H100 NVL", "GPU", "NVIDIA", 2023, 60, 417.5, 835.5, 1670.5, 94, 3900, "HBM3", 400,
                       GPUS["H100"].source, "one GPU of an NVLink-bridged pair; dense (sparse: twice); watts: the top "
                       "of its 350-400 W range", _NV_NVL, estimates=_NVL_EST),
    "L40S": Device("L40S", "GPU", "NVIDIA", 2023, 91.6, 183, 362, 733, 48, 864, "GDDR6", 350,
                   f"{_NV} 'NVIDIA L40S' (nvidia.com/en-us/data-center/l40s)",
                   "the data sheet lists dense and sparse rates (sparse: twice)", _NV_L40S),
}

_TPU = f"as of {CHECKED}, from Google Cloud's 'TPU versions' pages (cloud.google.com/tpu/docs)"
TPUS: dict[str, Device] = {
    "TPU v4": Device("TPU v4 (per chip)", "TPU", "Google", 2021, None, None, 275, None, 34.4, 1200, "HBM2", 192, _TPU,
                     "memory: 32 GiB = 34.4 GB; watts: Google's measured maximum (mean 170 W)", (_GCP_TPU["v4"],),
                     estimates=(("watts", f"{MEASURED}: Google's page gives measured min/mean/max 90/170/192 W, "
                                 "not a rated power"),)),
    "TPU v5e": Device("TPU v5e (per chip)", "TPU", "Google", 2023, None, None, 197, None, 16, 819, "HBM2", None, _TPU,
                      "INT8 393 TOP/s; power per chip not on the page", (_GCP_TPU["v5e"],)),
    "TPU v5p": Device("TPU v5p (per chip)", "TPU", "Google", 2023, None, None, 459, None, 95, 2765, "HBM2e", None,
                      _TPU, "power per chip not on the page", (_GCP_TPU["v5p"],)),
    "TPU v6e": Device("TPU v6e Trillium (per chip)", "TPU", "Google", 2024, None, None, 918, None, 32, 1638, "HBM",
                      None, _TPU, "INT8 1836 TOP/s; power per chip not on the page", (_GCP_TPU["v6e"],)),
}

_CPU_NOTE = ("peak computed from the spec sheet's cores x base clock x FLOP/cycle/core (FP32 FMA units); "
             "vendors do not publish it; memory bandwidth = channels x DDR5 rate x 8 bytes")
_COMPUTED = f"{ESTIMATE}: computed, cores x base clock x FLOP/cycle/core; no vendor publishes this peak"
CPUS: dict[str, Device] = {
    "EPYC 9654": Device("AMD EPYC 9654 (96 cores)", "CPU", "AMD", 2022, 96 * 2.4 * 32 / 1e3, None, None, None,
                        6144, 12 * 4.8 * 8, "DDR5-4800, 12 channels", 360,
                        f"as of {CHECKED}, from AMD's product page 'AMD EPYC 9654' (amd.com/en/products/processors/"
                        "server/epyc/4th-generation-9004-and-8004-series/amd-epyc-9654.html)",
                        _CPU_NOTE + "; Zen 4: 32 FP32 FLOP/cycle; memory size: the most it supports (6 TB)", _EPYC,
                        estimates=(("fp32", _COMPUTED + " (Zen 4: 2 x 256-bit FMA = 32 FP32 FLOP/cycle, recalled)"),
                                   ("memory_gbps", f"{ESTIMATE}: computed, 12 channels x 4.8 GT/s x 8 bytes"),
                                   ("memory_gb", f"{UNVERIFIED}: the most it supports, 6 TB, from pre-launch coverage; "
                                    "AMD's page was not among the stored copies searched"))),
    "Xeon 8480+": Device("Intel Xeon Platinum 8480+ (56 cores)", "CPU", "Intel", 2023, 56 * 2.0 * 64 / 1e3, None,
                         56 * 2.0 * 1024 / 1e3, None, 4096, 8 * 4.8 * 8, "DDR5-4800, 8 channels", 350,
                         f"as of {CHECKED}, from Intel's ARK page 'Intel Xeon Platinum 8480+ Processor' "
                         "(ark.intel.com)",
                         _CPU_NOTE + "; 2 AVX-512 FMA units = 64 FP32 FLOP/cycle; bf16: AMX 1024 FLOP/cycle; "
                         "memory size: the most it supports (4 TB)", _XEON,
                         estimates=(("fp32", _COMPUTED + " (2 AVX-512 FMA units = 64 FP32 FLOP/cycle; base clock "
                                     "2.0 GHz recalled from Intel's ARK page, not among the stored copies)"),
                                    ("bf16", _COMPUTED + " (AMX: 1024 BF16 FLOP/cycle/core; base clock 2.0 GHz "
                                     "recalled)"),
                                    ("memory_gbps", f"{ESTIMATE}: computed, 8 channels x 4.8 GT/s x 8 bytes"),
                                    ("memory_gb", f"{UNVERIFIED}: the most it supports, 4 TB, recalled from Intel's "
                                     "ARK page, not among the stored copies searched"))),
}

# Cloud-only parts (no public spec sheet), kept out of lesson 11's tables and looked up by exact key, as BOARDS.
# AWS's m7i.48xlarge (192 vCPU = 96 cores, 2 sockets; the "CPU server" of gpulab.pricing) runs a custom 48-core
# 4th-gen Xeon, the 8488C. Its peaks and watts are the 8480+'s per core x 48 (same cores, the 8480+'s 2.0 GHz base
# clock assumed: the 8488C's own clock is not in our sources), its memory the 8480+'s per socket (same channels):
# pricing a 48-core socket against the 8480+'s 56 cores made a CPU run ~14% too cheap.
_PER_48 = "the 8480+'s per core: the 8488C has no public spec sheet"
CPU_PARTS: dict[str, Device] = {
    "Xeon 8488C": replace(CPUS["Xeon 8480+"], name="Intel Xeon 8488C (48 cores; AWS m7i, scaled from the 8480+)",
                          fp32=48 * 2.0 * 64 / 1e3, bf16=48 * 2.0 * 1024 / 1e3, watts=350 * 48 / 56,
                          note=f"{_CPU_NOTE}; peaks and watts: the 8480+'s per core x 48, memory: the 8480+'s "
                          "per socket (AWS m7i's custom part)",
                          estimates=(("fp32", f"{ESTIMATE}: computed, 48 cores x 2.0 GHz x 64 FP32 FLOP/cycle, "
                                      f"{_PER_48}"),
                                     ("bf16", f"{ESTIMATE}: computed, 48 cores x 2.0 GHz x 1024 AMX BF16 "
                                      f"FLOP/cycle, {_PER_48}"),
                                     ("watts", f"{ESTIMATE}: 350 W x 48/56 cores, {_PER_48}"),
                                     *((f, k) for f, k in CPUS["Xeon 8480+"].estimates
                                       if f in ("memory_gbps", "memory_gb")))),
}

DEVICES: dict[str, Device] = {**CPUS, **GPUS, **TPUS}

_PCIE_REF = (_S("https://alpha-one-index.github.io/ai-infra-index/specs/networking-interconnects.html",
                "AI infra index: PCIe x16 16 / 32 / 64 GB/s per direction; InfiniBand HDR / NDR / XDR 200 / 400 / 800 "
                "Gb/s per 4x port; NVLink 300 / 600 / 900 / 1800 GB/s per GPU"),)
_NVL_REF = (_S("https://catalogone.com/data-center-and-cloud-computing-nvlink-nvswitch",
               "copy of NVIDIA's NVLink page: Blackwell 18 links x 100 GB/s = 1.8 TB/s per GPU, bidirectional"),
            _S("https://www.textbookofai.com/glossary/nvlink.html",
               "NVLink per GPU, bidirectional: V100 300, A100 600, H100 900 GB/s, B200 1.8 TB/s"),
            _S("https://factryze.ai/scale-atlas/interconnect/nvlink-bandwidth-math",
               "NVLink bandwidth math: the quoted figure is both directions, half each way"))
_PCIE = (f"as of {CHECKED}, from PCI-SIG's PCI Express Base Specifications (pcisig.com), x16, after 128b/130b "
         "encoding: GT/s x 128/130 x 16 / 8")
_NVL = f"as of {CHECKED}, from NVIDIA's NVLink page (nvidia.com/en-us/data-center/nvlink): total per GPU / 2"
_IB = (f"as of {CHECKED}, from NVIDIA's InfiniBand adapter data sheets (ConnectX-6/7/8) and the IBTA roadmap: one 4x "
       "port, line rate / 8")
_DERIVED = f"{SPEC_SHEET} (derived from the quoted rate, per direction)"
INTERCONNECTS: dict[str, Link] = {
    "PCIe 3.0 x16": Link("PCIe 3.0 x16", 15.75, 5, "in a machine", _PCIE, _PCIE_REF, gbps_kind=_DERIVED),
    "PCIe 4.0 x16": Link("PCIe 4.0 x16", 31.5, 5, "in a machine", _PCIE, _PCIE_REF, gbps_kind=_DERIVED),
    "PCIe 5.0 x16": Link("PCIe 5.0 x16", 63.0, 5, "in a machine", _PCIE, _PCIE_REF, gbps_kind=_DERIVED),
    "NVLink 2 (V100)": Link("NVLink 2 (V100)", 150, 2, "in a machine", _NVL + " (300 GB/s total)", _NVL_REF,
                            gbps_kind=_DERIVED),
    "NVLink 3 (A100)": Link("NVLink 3 (A100)", 300, 2, "in a machine", _NVL + " (600 GB/s total)", _NVL_REF,
                            gbps_kind=_DERIVED),
    "NVLink 4 (H100)": Link("NVLink 4 (H100)", 450, 2, "in a machine", _NVL + " (900 GB/s total)", _NVL_REF,
                            gbps_kind=_DERIVED),
    "NVLink 5 (B200)": Link("NVLink 5 (B200)", 900, 2, "in a machine", _NVL + " (1.8 TB/s total)", _NVL_REF,
                            gbps_kind=_DERIVED),
    "InfiniBand HDR (200 Gb/s)": Link("InfiniBand HDR (200 Gb/s)", 25, 5, "between machines", _IB, _PCIE_REF,
                                      gbps_kind=_DERIVED),
    "InfiniBand NDR (400 Gb/s)": Link("InfiniBand NDR (400 Gb/s)", 50, 5, "between machines", _IB, _PCIE_REF,
                                      gbps_kind=_DERIVED),
    "InfiniBand XDR (800 Gb/s)": Link("InfiniBand XDR (800 Gb/s)", 100, 5, "between machines", _IB, _PCIE_REF,
                                      gbps_kind=_DERIVED),
    "Ethernet 100 GbE": Link("Ethernet 100 GbE", 12.5, 20, "between machines",
                             f"as of {CHECKED}, from IEEE 802.3 (100 Gb/s line rate / 8)",
                             gbps_kind=f"{UNVERIFIED}: the line rate in the standard's name / 8; the IEEE 802.3 text "
                             "was not among the stored copies searched"),
}


# fmt: on


def _check_tables() -> None:
    """Import-time sanity: every entry names a dated source, checked pages or a reason, and a kind for each figure."""
    kinds = (SPEC_SHEET, MEASURED, ESTIMATE, UNVERIFIED)
    for d in (*DEVICES.values(), *BOARDS.values(), *CPU_PARTS.values()):
        assert d.source.startswith("as of ") and d.memory_gbps > 0 and not math.isnan(d.memory_gb), d.name
        assert all(k.startswith(kinds) for k in d.figure_kinds().values()), d.name
        assert d.refs or all(k.startswith(UNVERIFIED) for k in d.figure_kinds().values()), d.name
        # a GPU with tensor cores but no TF32 predates Ampere, so has no BF16: its note must say what bf16 counts
        assert d.kind != "GPU" or d.bf16 is None or d.tf32 is not None or d.bf16_format == "FP16", d.name
    for lk in INTERCONNECTS.values():
        assert lk.source.startswith("as of ") and lk.gbps > 0, lk.name
        assert lk.refs or lk.gbps_kind.startswith(UNVERIFIED), lk.name


_check_tables()
