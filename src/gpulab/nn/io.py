"""Save and load a model's parameters as a plain ``.npz`` file (no pickle)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["load", "save"]


def save(model: Any, path: str | os.PathLike) -> Path:
    """Write every parameter of ``model`` to ``path`` (``.npz``), atomically (temp file, then rename)."""
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_suffix(path.suffix + ".npz")
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **model.state_dict())
    os.replace(tmp, path)
    return path


def load(model: Any, path: str | os.PathLike) -> Any:
    """Load parameters saved by :func:`save` into ``model`` (names and shapes must match)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no saved model at {path}; save one with gpulab.nn.save(model, {str(path)!r}).")
    with np.load(path, allow_pickle=False) as f:
        model.load_state_dict({k: f[k] for k in f.files})
    return model
