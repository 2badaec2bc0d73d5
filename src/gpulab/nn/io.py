"""Save and load a model's state (parameters and buffers: :meth:`Sequential.state_dict`) as a plain ``.npz``
file (no pickle)."""

from __future__ import annotations

import os
import secrets
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError

__all__ = ["load", "save"]


def save(model: Any, path: str | os.PathLike) -> Path:
    """Write ``model.state_dict()`` (every parameter and buffer) to ``path`` (``.npz``), atomically: into a temp
    file of its own next to ``path``, then renamed over it, so ``path`` is the old file or the whole new one."""
    path = Path(path)
    if path.suffix != ".npz":
        path = path.with_suffix(path.suffix + ".npz")
    state = model.state_dict()
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")  # a name no other save uses
    try:
        with open(tmp, "xb") as f:  # a file object: np.savez adds no ".npz" to the temp name
            np.savez(f, **state)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def load(model: Any, path: str | os.PathLike) -> Any:
    """Load a state saved by :func:`save` into ``model`` (names, shapes and dtypes must match; a file saved
    before buffers were saved loads its parameters, with a warning: :meth:`Sequential.load_state_dict`)."""
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
