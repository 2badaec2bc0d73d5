"""The installed CuPy's names that the stand-in may serve: ``python tests/gpu_emulation/cupy_names.py`` rewrites
tests/gpu_emulation/cupy_names.json (CuPy imports without a GPU)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

MODULES = [
    "cupy",
    "cupy.random",
    "cupy.linalg",
    "cupy.fft",
    "cupy.lib.stride_tricks",
    "cupy.cuda",
    "cupy.cuda.runtime",
    "cupy.testing",
]

PYTHON_SLOTS = {"__buffer__", "__release_buffer__"}


def names() -> dict:
    import cupy

    out: dict = {m: sorted(n for n in dir(importlib.import_module(m)) if not n.startswith("__")) for m in MODULES}
    # Python 3.12+ shows a buffer-exporting type's slots as __buffer__ / __release_buffer__: Python's, not CuPy's
    out["cupy.ndarray"] = sorted(set(dir(cupy.ndarray)) - PYTHON_SLOTS)
    for cls in ("Event", "Stream", "Device"):
        out[f"cupy.cuda.{cls}"] = sorted(n for n in dir(getattr(cupy.cuda, cls)) if not n.startswith("__"))
    out["_version"] = cupy.__version__
    return out


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--print"]:  # tests/test_gpu_emulated.py: a fresh import (CuPy loads some names lazily)
        print(json.dumps(names(), sort_keys=True))
        raise SystemExit(0)
    path = Path(__file__).with_name("cupy_names.json")
    path.write_text(json.dumps(names(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {path}")
