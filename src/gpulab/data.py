"""MNIST, Fashion-MNIST and scikit-learn's 8x8 digits, as float32 arrays ready for :mod:`gpulab.nn`.

The original IDX ``.gz`` files are looked for, in order, in:

1. the ``data_dir`` argument, then ``$GPULAB_DATA_DIR``;
2. the user cache ``~/.cache/gpulab/<dataset>`` (``$XDG_CACHE_HOME`` is honoured);
3. system dataset folders (Debian/Ubuntu packages and common shared locations).

Only then are they downloaded over HTTPS from the standard mirrors into the user cache. A file is
used when its ``.gz`` matches the published checksum (SHA256 for MNIST, MD5 for Fashion-MNIST) or,
for a copy re-compressed by a distribution package, when its *decompressed content* is right: the
IDX structure (magic, dimensions, sizes, labels 0-9) and, where gpulab knows it, the SHA-256 of the
content. A corrupt, truncated or unreadable file is never used, and never hides a good copy found
later in the search. Downloads say what they are doing, are bounded in time as a whole, go to a
temporary ``.part`` file renamed into place only once verified, and ``.part`` files left by a killed
download are removed.

Where the files are looked for and how they are downloaded is :mod:`gpulab.data_files`; reading
and verifying one IDX file is :mod:`gpulab.idx`. This module turns them into a :class:`Dataset`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import runtime
from .errors import UsageError, whole_number

# Finding and downloading the files live in gpulab.data_files, IDX reading and verification in
# gpulab.idx; these names stay importable from gpulab.data.
from .data_files import (
    CONNECT_TIMEOUT_S as CONNECT_TIMEOUT_S,
    DOWNLOAD_BUDGET_S as DOWNLOAD_BUDGET_S,
    FILES as FILES,
    MIRRORS as MIRRORS,
    SUBDIRS as SUBDIRS,
    SYSTEM_DIRS as SYSTEM_DIRS,
    _find as _find,
    _not_found_message,
    cache_dir as cache_dir,
    clean_stale_parts as clean_stale_parts,
    download as download,
    search_dirs as search_dirs,
)
from .idx import CHECKSUMS, CONTENT_SHA256, MAX_IDX_BYTES, SHAPES, DatasetError, read_idx, verify

__all__ = [
    "CHECKSUMS",
    "CONTENT_SHA256",
    "DATASETS",
    "Dataset",
    "DatasetError",
    "MAX_IDX_BYTES",
    "SHAPES",
    "batches",
    "load",
    "read_idx",
    "search_dirs",
    "verify",
]

DATASETS = ("mnist", "fashion-mnist", "digits")

CLASS_NAMES = {
    "mnist": tuple(str(i) for i in range(10)),
    "digits": tuple(str(i) for i in range(10)),
    "fashion-mnist": (
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ),
}


@dataclass
class Dataset:
    """Images (N, 1, S, S) float32 in [0, 1] and labels (N,) int64, for training and testing."""

    name: str
    x_train: Any
    y_train: Any
    x_test: Any
    y_test: Any
    classes: tuple[str, ...]
    source: str

    def subset(self, n_train: int | None = None, n_test: int | None = None) -> Dataset:
        """The first ``n_train`` training and ``n_test`` test examples (for quick runs).

        ``None`` keeps the whole split; a count larger than the split keeps the whole split too (so
        ``ds.subset(5000, 1000)`` works on the 8x8 digits' 1,437 and 360 images as on MNIST). A count must be a
        whole number >= 1: a negative one would count from the end, and ``0`` leaves nothing to train or test on.
        """
        have = {"n_train": self.x_train.shape[0], "n_test": self.x_test.shape[0]}
        n = {
            name: None
            if value is None
            else whole_number(
                name,
                value,
                example=f"Dataset.subset(n_train, n_test) keeps the first n_train training and n_test test images "
                f"(this dataset has {have['n_train']:,} and {have['n_test']:,}; None keeps them all), "
                "e.g. ds.subset(256, 64).",
            )
            for name, value in (("n_train", n_train), ("n_test", n_test))
        }
        return Dataset(
            self.name,
            self.x_train[: n["n_train"]],
            self.y_train[: n["n_train"]],
            self.x_test[: n["n_test"]],
            self.y_test[: n["n_test"]],
            self.classes,
            self.source,
        )

    def to_device(self) -> Dataset:
        """Upload every array once (CuPy in gpu mode; unchanged in simulator mode)."""
        return Dataset(
            self.name,
            runtime.to_device(self.x_train),
            runtime.to_device(self.y_train),
            runtime.to_device(self.x_test),
            runtime.to_device(self.y_test),
            self.classes,
            self.source,
        )

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name!r}, train {tuple(self.x_train.shape)}, test {tuple(self.x_test.shape)}, "
            f"from {self.source})"
        )


# ---------------------------------------------------------------------------------------- loading


def _normalise_name(dataset: str) -> str:
    key = dataset.strip().lower().replace("_", "-")
    key = {"fashion": "fashion-mnist", "fashionmnist": "fashion-mnist"}.get(key, key)
    if key not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of: {', '.join(DATASETS)}.")
    return key


def _load_idx_dataset(name: str, data_dir: str | os.PathLike | None, download_ok: bool) -> Dataset:
    if data_dir is not None and not Path(data_dir).is_dir():
        raise DatasetError(f"data_dir {str(data_dir)!r} does not exist or is not a folder.")
    found, bad = _find(name, data_dir)
    missing = [f for f in FILES.values() if f not in found]
    if missing and download_ok:
        try:
            for fname in missing:
                found[fname] = download(name, fname, cache_dir() / name)
        except DatasetError as e:
            raise DatasetError(_not_found_message(name, data_dir, missing, bad, str(e))) from e
    elif missing:
        why = "downloading is switched off (download=False)"
        raise DatasetError(_not_found_message(name, data_dir, missing, bad, why))
    arrays = {key: read_idx(found[fname]) for key, fname in FILES.items()}
    for split in ("train", "test"):
        if arrays[f"{split}_images"].shape[0] != arrays[f"{split}_labels"].shape[0]:
            raise DatasetError(f"{name}: {split} images and labels disagree in length.")
    prep = lambda a: (a.astype(np.float32) / np.float32(255.0))[:, None]  # (N, 28, 28) -> (N, 1, 28, 28)  # noqa: E731
    return Dataset(
        name,
        prep(arrays["train_images"]),
        arrays["train_labels"].astype(np.int64),
        prep(arrays["test_images"]),
        arrays["test_labels"].astype(np.int64),
        CLASS_NAMES[name],
        str(found[FILES["train_images"]].parent),
    )


def _load_digits(size: int, seed: int) -> Dataset:
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise DatasetError(
            "dataset='digits' needs scikit-learn (it ships the 1,797 8x8 digits): pip install scikit-learn."
        ) from e
    d = load_digits()
    x = (d.images.astype(np.float32) / np.float32(16.0))[:, None]  # (1797, 1, 8, 8) in [0, 1]
    if size == 28:
        x = np.pad(x.repeat(3, axis=2).repeat(3, axis=3), ((0, 0), (0, 0), (2, 2), (2, 2)))  # (1797, 1, 28, 28)
    elif size != 8:
        raise ValueError(f"digits come as 8x8 images or upsampled to 28x28; size must be 8 or 28, got {size}.")
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    x, y = x[order], y[order]
    n_test = 360
    return Dataset("digits", x[n_test:], y[n_test:], x[:n_test], y[:n_test], CLASS_NAMES["digits"], "scikit-learn")


def load(
    dataset: str = "mnist",
    *,
    data_dir: str | os.PathLike | None = None,
    download: bool = True,
    size: int = 28,
    seed: int = 0,
) -> Dataset:
    """Load ``"mnist"``, ``"fashion-mnist"`` or ``"digits"`` as a :class:`Dataset`.

    ``size`` only applies to digits (8 = native, 28 = upsampled 3x and padded, like MNIST).
    """
    name = _normalise_name(dataset)
    if name == "digits":
        return _load_digits(size, seed)
    return _load_idx_dataset(name, data_dir, download)


def check_images(x: Any, y: Any) -> None:
    """Reject data a CNN cannot learn from: wrong shape or dtype, NaN/inf, labels out of range."""
    if not hasattr(x, "ndim"):
        raise UsageError(
            f"images must be an array (N, channels, height, width), got a {type(x).__name__}. Convert it first: "
            "np.asarray(x, dtype=np.float32)."
        )
    if x.ndim != 4:
        raise ValueError(f"images must be (N, channels, height, width), got shape {getattr(x, 'shape', type(x))}.")
    if not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise TypeError(f"images must be floating point (e.g. float32 in [0, 1]), got {np.dtype(x.dtype).name}.")
    if getattr(y, "shape", None) != (x.shape[0],):
        raise ValueError(
            f"labels must have shape ({x.shape[0]},) to match the images, got {getattr(y, 'shape', None)}."
        )
    xp = runtime.array_module(x)
    if not bool(xp.isfinite(x).all()):
        raise ValueError(
            "the images contain NaN or inf values; clean the data (e.g. numpy.nan_to_num) before training."
        )


def batches(x: Any, y: Any, batch_size: int, *, shuffle: bool = False, rng: np.random.Generator | None = None):
    """Yield ``(x_batch, y_batch)`` slices; with ``shuffle`` a seeded permutation (indexing stays on x's device)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}.")
    n = x.shape[0]
    if shuffle:
        xp = runtime.array_module(x)
        order = xp.asarray((rng or np.random.default_rng(0)).permutation(n))
        for s in range(0, n, batch_size):
            idx = order[s : s + batch_size]
            yield x[idx], y[idx]
    else:
        for s in range(0, n, batch_size):
            yield x[s : s + batch_size], y[s : s + batch_size]


if __name__ == "__main__":  # pragma: no cover
    print(load(sys.argv[1] if len(sys.argv) > 1 else "mnist"))
