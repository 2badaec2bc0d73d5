"""Save and load a model's parameters as a plain ``.npz`` file (no pickle)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError

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
    try:
        with np.load(path, allow_pickle=False) as f:
            if not hasattr(f, "files"):
                raise ValueError("a single array, not an .npz archive")
            state = {k: f[k] for k in f.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        # NumPy's own message for a file that is not an .npz suggests allow_pickle=True: never do that with a
        # file you did not write (a pickle can run any code), and it would not make this file a model anyway.
        raise UsageError(
            f"{path} is not a model saved by gpulab.nn.save (an .npz archive of arrays): {type(e).__name__}. "
            "Save one with gpulab.nn.save(model, path), or check the path."
        ) from None
    model.load_state_dict(state)
    return model
