"""Lesson 11's hardware: look up a chip or a link in the spec-sheet tables, list them as rows, and the napkin
models the lesson builds on them: the roofline bound and arithmetic intensity of a matmul.

The tables themselves (CPUs, GPU generations, TPUs, interconnects; every figure a **spec sheet** value unless
its row says otherwise, each row with its sources and the date checked) live in :mod:`gpulab.hardware_specs`
and are re-exported here. The multi-GPU step-time model (ring all-reduce over a link, step time against the
number of GPUs, the crossover) lives in :mod:`gpulab.multigpu` and is re-exported here, as lesson 11 and
lab 11 call it.

:func:`board_key` is the one place that maps a GPU's reported name (``"NVIDIA A100 80GB PCIe"``) to a row of
:data:`GPUS` or :data:`BOARDS`, or to none; :func:`gpu_named`, :func:`gpulab.timing.lookup_peak` and
:func:`gpulab.pricing.offer_for` go through it. For a board with no row of its own, :func:`missing_row_note` says so
and names the nearest row (:func:`nearest_row`: the same board's for a MIG slice, else the same chip's), labelled
as the nearest, never used for figures.
"""

from __future__ import annotations

import re
from typing import Any
from collections.abc import Sequence

import numpy as np

from . import hardware_specs as _specs
from .errors import UsageError
from .hardware_specs import (  # re-exported: hardware.<name>
    BOARDS as BOARDS,
    CHECKED as CHECKED,
    CPU_PARTS as CPU_PARTS,
    CPUS as CPUS,
    DEVICES as DEVICES,
    ESTIMATE as ESTIMATE,
    FIGURES as FIGURES,
    GPUS as GPUS,
    INTERCONNECTS as INTERCONNECTS,
    MEASURED as MEASURED,
    SPEC_SHEET as SPEC_SHEET,
    TPUS as TPUS,
    UNVERIFIED as UNVERIFIED,
    Device as Device,
    Link as Link,
    Source as Source,
)
from .multigpu import allreduce_seconds, crossover_gpus, step_seconds  # re-exported: hardware.<name>

__all__ = [
    "BOARD_NAMES",
    "allreduce_seconds",
    "attainable_gflops",
    "basis",
    "board_key",
    "crossover_gpus",
    "device",
    "gpu_named",
    "link",
    "matmul_intensity",
    "missing_row_note",
    "nearest_row",
    "ridge_point",
    "spec_rows",
    "step_seconds",
]
__all__ += _specs.__all__  # every name of the tables module, imported above


def _lookup(table: dict, key: str, what: str) -> object:
    if key in table:
        return table[key]
    low = key.lower()
    hits = [v for k, v in table.items() if low in k.lower() or low in v.name.lower()]
    if len(hits) == 1:
        return hits[0]
    raise UsageError(
        f"no {what} called {key!r}; known: {', '.join([*table, *(BOARDS if what == 'device' else ())])}"
        f"{', ' + ', '.join(CPU_PARTS) if what == 'device' else ''}. "
        "Pick one of these, or build your own "
        f"{'Device' if what == 'device' else 'Link'}(...) with figures from its spec sheet."
    )


def device(name: str | Device) -> Device:
    """A device by key or unique part of its name (``'H100'``, ``'v5e'``), or a board of :data:`BOARDS` or a
    cloud-only part of :data:`CPU_PARTS` by its exact key (``'H100 PCIe'``, ``'Xeon 8488C'``); a Device is returned
    as is."""
    if isinstance(name, Device):
        return name
    if name in BOARDS:  # another board of a chip in the tables, by its exact key ("H100 PCIe")
        return BOARDS[name]
    if name in CPU_PARTS:  # a cloud-only CPU estimated from a table row ("Xeon 8488C")
        return CPU_PARTS[name]
    return _lookup(DEVICES, name, "device")  # type: ignore[return-value]


# How drivers name each GPU row's board (CUDA, NVML and nvidia-smi report the same name): the chip's word(s) and
# the form factor; "" for a chip that comes on one board only. :func:`board_key` reads a reported name with these.
BOARD_NAMES: dict[str, tuple[str, str]] = {
    "V100": ("V100", "SXM"),
    "V100 SXM2 16GB": ("V100", "SXM"),
    "T4": ("T4", ""),
    "A100": ("A100", "SXM"),
    "A100 SXM 40GB": ("A100", "SXM"),
    "A100 PCIe 40GB": ("A100", "PCIe"),
    "A100 PCIe 80GB": ("A100", "PCIe"),
    "L4": ("L4", ""),
    "L40S": ("L40S", ""),
    "RTX 4090": ("RTX 4090", ""),
    "H100": ("H100", "SXM"),
    "H100 PCIe": ("H100", "PCIe"),
    "H100 NVL": ("H100", "NVL"),
    "H200": ("H200", "SXM"),
    "MI300X": ("MI300X", ""),
}
# A name that states no form factor: NVIDIA names the H100 SXM5 "NVIDIA H100 80GB HBM3" and the H200 SXM "NVIDIA
# H200", its other boards "... PCIe" / "... NVL". Other chips' names say their form (A100-SXM4, V100-PCIE).
_UNSTATED_FORM = {"H100": "SXM", "H200": "SXM"}
_BRANDS = {"NVIDIA", "TESLA", "GEFORCE", "AMD", "INSTINCT"}
_FORMS = {"SXM": "SXM", "SXM2": "SXM", "SXM3": "SXM", "SXM4": "SXM", "SXM5": "SXM", "PCIE": "PCIe", "NVL": "NVL"}
_MEMORY_TYPES = {"HBM2", "HBM2E", "HBM3", "HBM3E", "GDDR6", "GDDR6X"}


def board_key(name: str) -> str | None:
    """The key of the row in :data:`GPUS` or :data:`BOARDS` for a GPU's reported name (``"Tesla T4"``,
    ``"NVIDIA A100-SXM4-80GB"``, ``"NVIDIA H100 PCIe"``), or None: **the one place** that maps a device name to a
    spec row (:func:`gpu_named` and :func:`gpulab.timing.lookup_peak` use it).

    The name is read as brand words, the chip (a whole word: an L40S is not an L4, a GH200 superchip is not an
    H200), then only descriptors: form factor (SXM/PCIe/NVL), memory size (``80GB``), memory type (``HBM3``). Each
    one it states must agree with the row; a chip on more than one board needs the name to pick one. Anything else
    (another board, a MIG slice ``"... MIG 1g.10gb"``, ``"RTX 4090 D"``, an unknown chip) gives None, never another
    board's figures.
    """
    found = _chip_in(name)
    return None if found is None else _pick(*found)


def _words(name: str) -> list[str]:
    """A reported name's words, upper case (``"NVIDIA A100-SXM4-80GB"``: NVIDIA, A100, SXM4, 80GB)."""
    return [w.upper() for w in re.split(r"[\s_-]+", name.strip()) if w]


def _chip_in(name: str) -> tuple[str, list[str], list[str]] | None:
    """The chip of :data:`BOARD_NAMES` a reported name states (a whole word), with the words before and after it."""
    words = _words(name)
    for chip in sorted({c for c, _ in BOARD_NAMES.values()}, key=lambda c: -len(c.split())):
        cw = chip.upper().split()
        starts = [i for i in range(len(words) - len(cw) + 1) if words[i : i + len(cw)] == cw]
        if starts:
            return chip, words[: starts[0]], words[starts[0] + len(cw) :]
    return None


def nearest_row(name: str) -> str | None:
    """For a GPU whose reported name has no row of its own (:func:`board_key` gives None) but states a chip the
    tables have: the key of the nearest row, another board, variant or part of the same chip, whose figures are not
    this GPU's. Nearest is, in order: the row of the board a MIG slice is cut from (``"NVIDIA H100 NVL MIG
    1g.12gb"``: ``'H100 NVL'``; the slice has a fraction of its SMs and memory); a row of the same chip and form
    factor (NVL, PCIe, SXM); the chip's own row (its :data:`GPUS` row: ``"NVIDIA H200 NVL"``, ``"Tesla
    V100-PCIE-16GB"``); for a module built around a chip of the tables (``"NVIDIA GH200 480GB"``, whose GPU is a
    Hopper part), that chip's row. None when the name has its own row or states no chip of the tables. Only to be
    named, labelled as the nearest row (:func:`missing_row_note`): nothing computes with it."""
    if board_key(name) is not None:
        return None
    found = _chip_in(name)
    if found is None:
        module = _module_in(name)
        return None if module is None else module[0]
    chip, before, after = found
    if not set(before) <= _BRANDS:
        return None
    whole = _without_mig(after)
    own = _pick(chip, before, whole) if whole != after else None  # a MIG slice's own board
    if own is not None:
        return own
    keys = [k for k, (c, _) in BOARD_NAMES.items() if c == chip]
    forms: set[str | None] = {_FORMS[w] for w in whole if w in _FORMS} or {_UNSTATED_FORM.get(chip)}
    same_form = [k for k in keys if BOARD_NAMES[k][1] in forms]
    return same_form[0] if same_form else next((k for k in keys if k in GPUS), keys[0])


def _without_mig(words: list[str]) -> list[str]:
    """The words of a reported name before ``MIG`` (a MIG slice's name is its board's, then ``MIG 1g.10gb``)."""
    return words[: words.index("MIG")] if "MIG" in words else words


# Modules built around a GPU chip of the tables, with no row of their own: the word drivers report, the row to name
# as the nearest (by the memory type the name states, else the first), and what the module is.
_MODULES: dict[str, tuple[dict[str, str], str]] = {
    "GH200": (
        {"": "H100", "HBM3E": "H200"},
        "a Grace Hopper superchip: its GPU is a Hopper part of the H100/H200 class, on one module with a Grace "
        "CPU, and the module's power and memory differ from those boards'",
    ),
}


def _module_in(name: str) -> tuple[str, str] | None:
    """The nearest row's key and what the module is, for a name that states a module of :data:`_MODULES`."""
    words = _words(name)
    for word, (rows, what) in _MODULES.items():
        if word in words and set(words[: words.index(word)]) <= _BRANDS:
            kinds = [w for w in words if w in rows]
            return rows[kinds[0] if kinds else ""], what
    return None


def missing_row_note(name: str) -> str:
    """What to print where a GPU has no row of its own (no spec-sheet peaks, no board power): that its exact model
    is not in gpulab's tables, and the nearest row, labelled as such (:func:`nearest_row`), if its chip has one. A
    MIG slice is said to be one: its figures are a fraction of its board's."""
    own = board_key(name)
    if own is not None:
        return f"{name}: its row in gpulab's spec tables is {_row(own).name}"
    near = nearest_row(name)
    text = f"{name or 'this GPU'}: this exact model has no row in gpulab's spec tables"
    if near is None:
        return text + " (nor does its chip)"
    d = _row(near)
    found = _chip_in(name)
    if found is None:  # a module around a chip of the tables
        module = _module_in(name)
        what = module[1] if module else "another part with the same chip"
        return (
            f"{text}; it is {what}. The nearest row is {d.name} (key {near!r}): its figures are not this GPU's, so "
            "none is used here"
        )
    if "MIG" in found[2]:
        slice_ = f"{name}: a MIG slice (a fraction of a GPU's SMs and memory) has no row in gpulab's spec tables"
        if _pick(found[0], found[1], _without_mig(found[2])) == near:
            return (
                f"{slice_}; its board's row is {d.name} (key {near!r}): the slice's figures are a fraction of the "
                "board's, so none is used here"
            )
        return (
            f"{slice_}, nor does its board; the nearest row is {d.name} (key {near!r}), another board or variant "
            "of the same chip: its figures are not this GPU's, so none is used here"
        )
    return (
        f"{text}; the nearest row is {d.name} (key {near!r}), another board or variant of the same chip: its "
        "figures are not this GPU's, so none is used here"
    )


def _pick(chip: str, before: list[str], after: list[str]) -> str | None:
    """The one row of ``chip`` that the words around it describe, else None."""
    if not set(before) <= _BRANDS:
        return None
    form = memory = kind = None
    for w in after:
        if w in _FORMS:
            form = _FORMS[w]
        elif w in _MEMORY_TYPES:
            kind = w
        elif re.fullmatch(r"\d+GB?", w):
            memory = int(w.rstrip("GB"))
        else:
            return None  # a word that names something else: another board, a MIG slice, a variant
    rows = {k: _row(k) for k, (c, _) in BOARD_NAMES.items() if c == chip}
    want = form or _UNSTATED_FORM.get(chip)
    hits = [
        k
        for k, d in rows.items()
        if (want is None or BOARD_NAMES[k][1] in ("", want))
        and (memory is None or round(d.memory_gb) == memory)
        and (kind is None or d.memory_type.upper() == kind)
    ]
    return hits[0] if len(hits) == 1 else None


def _row(key: str) -> Device:
    return GPUS[key] if key in GPUS else BOARDS[key]


def gpu_named(name: str) -> Device | None:
    """The row of :data:`GPUS` or :data:`BOARDS` for a GPU's reported name (:func:`board_key`), else None."""
    key = board_key(name)
    return None if key is None else _row(key)


def link(name: str | Link) -> Link:
    """An interconnect by key or unique part of its name (``'NVLink 4'``, ``'PCIe 4.0'``)."""
    return name if isinstance(name, Link) else _lookup(INTERCONNECTS, name, "link")  # type: ignore[return-value]


def spec_rows(devices: Sequence[str | Device] | None = None) -> list[dict[str, object]]:
    """One dict per device for a table: name, peaks (TFLOP/s), memory, bandwidth, type, power, source, and what
    each figure is (``"basis"``: "spec sheet" unless a figure is measured or an estimate) with the pages checked."""
    devs = [device(d) for d in devices] if devices is not None else list(DEVICES.values())
    return [
        {
            "device": d.name,
            "kind": d.kind,
            "year": d.year,
            "FP32": d.fp32,
            "TF32": d.tf32,
            "BF16": d.bf16,
            "FP8": d.fp8,
            "memory GB": d.memory_gb,
            "GB/s": d.memory_gbps,
            "memory": d.memory_type,
            "watts": d.watts,
            "source": d.source,
            "note": d.note,
            "basis": basis(d),
            "refs": [r.url for r in d.refs],
            "checked": d.checked,
        }
        for d in devs
    ]


def basis(d: Device) -> str:
    """Short label of a row's figures: "spec sheet (dense)" plus every figure that is not a spec-sheet value."""
    other = {f: k for f, k in d.figure_kinds().items() if k != SPEC_SHEET}
    names = {
        "fp32": "FP32",
        "tf32": "TF32",
        "bf16": "BF16",
        "fp8": "FP8",
        "memory_gb": "memory GB",
        "memory_gbps": "GB/s",
        "watts": "watts",
    }
    parts = [f"{names[f]}: {k.split(':')[0]}" for f, k in other.items()]
    return "; ".join([SPEC_SHEET + (" (dense)" if d.kind != "CPU" else "")] + parts)


def matmul_intensity(m: int, n: int, k: int, bytes_per_value: int = 4) -> float:
    """FLOP per byte of a (m x k) @ (k x n) matmul that reads A and B once and writes C once:
    2 m n k / (bytes x (m k + k n + m n))."""
    if min(m, n, k) < 1 or bytes_per_value < 1:
        raise UsageError(
            f"matmul_intensity needs positive sizes and bytes, got m={m}, n={n}, k={k}, "
            f"bytes_per_value={bytes_per_value}."
        )
    return 2.0 * m * n * k / (bytes_per_value * (m * k + k * n + m * n))


def attainable_gflops(intensity: Any, peak_tflops: float, bandwidth_gbps: float) -> Any:
    """The roofline: min(peak, bandwidth x intensity), in GFLOP/s (an upper bound, not a measurement).

    ``intensity`` may be a number or an array of them (FLOP/byte); the result has its shape.
    """
    i = np.asarray(intensity, dtype=np.float64)
    if np.any(i <= 0) or peak_tflops <= 0 or bandwidth_gbps <= 0:
        raise UsageError(
            f"attainable_gflops needs positive values, got intensity={intensity}, "
            f"peak_tflops={peak_tflops}, bandwidth_gbps={bandwidth_gbps}."
        )
    out = np.minimum(peak_tflops * 1e3, bandwidth_gbps * i)
    return float(out) if out.ndim == 0 else out


def ridge_point(dev: str | Device, precision: str = "fp32") -> float:
    """FLOP per byte where a device turns from memory-bound to compute-bound at ``precision``."""
    d = device(dev)
    peak = d.peak(precision)
    if peak is None:
        raise UsageError(
            f"{d.name} has no {precision} peak on its spec sheet; try one of "
            f"{[p for p in ('fp32', 'tf32', 'bf16', 'fp8') if d.peak(p)]}."
        )
    return peak * 1e3 / d.memory_gbps
