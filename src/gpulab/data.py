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
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np

from . import runtime

# IDX reading and verification live in gpulab.idx; these names stay importable from gpulab.data.
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

FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}

# Downloads: seconds without a byte before a mirror counts as silent, and the bound on one file's attempts.
CONNECT_TIMEOUT_S = 15.0
DOWNLOAD_BUDGET_S = 120.0

MIRRORS = {
    "mnist": (
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
    ),
    "fashion-mnist": (
        "https://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
    ),
}

# Folder names a dataset may have under a data directory (the files may also lie in it directly).
SUBDIRS = {"mnist": ("mnist", "MNIST", "MNIST/raw"), "fashion-mnist": ("fashion-mnist", "fashion", "FashionMNIST/raw")}

SYSTEM_DIRS = {
    "mnist": (
        "/usr/share/mnist",
        "/usr/share/datasets/mnist",
        "/usr/local/share/datasets/mnist",
        "/opt/datasets/mnist",
    ),
    "fashion-mnist": (
        "/usr/share/fashion-mnist",
        "/usr/share/datasets/fashion-mnist",
        "/usr/local/share/datasets/fashion-mnist",
        "/opt/datasets/fashion-mnist",
    ),
}

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
        """The first ``n_train`` training and ``n_test`` test examples (for quick runs)."""
        return Dataset(
            self.name,
            self.x_train[:n_train],
            self.y_train[:n_train],
            self.x_test[:n_test],
            self.y_test[:n_test],
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


# --------------------------------------------------------------------------------------------- IDX


def _verified(path: Path, name: str, fname: str) -> bool:
    return path.is_file() and verify(path, name, fname)[0]


# ------------------------------------------------------------------------------------- locations


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/gpulab`` or ``~/.cache/gpulab``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpulab"


def search_dirs(name: str, data_dir: str | os.PathLike | None = None) -> list[Path]:
    """Every folder where the files of ``name`` are looked for, in order (downloads go to the cache)."""
    roots: list[Path] = []
    if data_dir is not None:
        roots.append(Path(data_dir))
    if os.environ.get("GPULAB_DATA_DIR"):
        roots.append(Path(os.environ["GPULAB_DATA_DIR"]))
    out: list[Path] = []
    for root in roots:
        for d in (root, *(root / s for s in SUBDIRS[name])):
            if d not in out:
                out.append(d)
    return out + [cache_dir() / name] + [Path(p) for p in SYSTEM_DIRS[name]]


def _find(name: str, data_dir: str | os.PathLike | None) -> tuple[dict[str, Path], list[str]]:
    """The first verified copy of each file; and notes on copies that failed verification."""
    found: dict[str, Path] = {}
    bad: list[str] = []
    for fname in FILES.values():
        for d in search_dirs(name, data_dir):
            p = d / fname
            try:
                present = p.is_file()
            except OSError:  # a folder we may not look into
                present = False
            if present:
                ok, why = verify(p, name, fname)
                if ok:
                    found[fname] = p
                    break
                bad.append(f"{p} (ignored: {why})")
    return found, bad


# -------------------------------------------------------------------------------------- download


def _http_get(url: str, dest: Path, timeout: float = CONNECT_TIMEOUT_S, deadline: float | None = None) -> None:
    """Stream ``url`` into ``dest`` (the network layer; tests replace it).

    ``timeout`` bounds each wait for the server (connecting, and every read); ``deadline`` (a
    :func:`time.monotonic` value) bounds the whole transfer.
    """
    req = urllib.request.Request(url, headers={"User-Agent": "gpulab"})
    with urllib.request.urlopen(req, timeout=timeout) as r, open(dest, "wb") as f:
        while chunk := r.read(1 << 20):
            f.write(chunk)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError("the download took longer than its time budget")


def _log(message: str) -> None:
    print(f"gpulab: {message}", file=sys.stderr, flush=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError, OverflowError):
        return True  # exists (another user's), or cannot tell: keep its file
    return True


def clean_stale_parts(dest_dir: Path, fname: str, *, max_age_s: float = 3600.0) -> list[Path]:
    """Delete ``fname``'s ``.part`` files left by a download that was killed (its process is gone, or
    an unnamed one older than ``max_age_s``). Returns what was deleted."""
    removed = []
    for part in dest_dir.glob(f"{fname}.*.part"):
        pid_text = part.name[len(fname) + 1 :].split(".", 1)[0]
        try:
            if pid_text.isdigit():
                stale = not _pid_alive(int(pid_text))
            else:  # a .part without a process id (older gpulab): stale once old
                stale = time.time() - part.stat().st_mtime > max_age_s
            if stale:
                part.unlink()
                removed.append(part)
        except OSError:
            continue
    return removed


def _writable_dir(d: Path) -> None:
    """Create ``d`` and check that a file can be written in it, before any download starts."""
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=d):
            pass
    except OSError as e:
        raise DatasetError(
            f"cannot write the download cache {d} ({e.strerror or e}). Set XDG_CACHE_HOME to a writable folder, "
            "or put the four IDX .gz files in a folder and pass data_dir=... (or set GPULAB_DATA_DIR)."
        ) from e


def download(
    name: str,
    fname: str,
    dest_dir: Path,
    *,
    retries: int = 2,
    fetch: Callable[[str, Path], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    budget_s: float = DOWNLOAD_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
    log: Callable[[str], None] = _log,
) -> Path:
    """Fetch one file from the mirrors into ``dest_dir``, verified, atomically (temp file, then rename).

    Tries every mirror up to ``retries`` times with a growing pause, says what it is doing, and gives
    up once ``budget_s`` seconds have passed (a network that swallows packets fails in about
    ``CONNECT_TIMEOUT_S`` per mirror, not minutes). Raises :class:`DatasetError` listing every failure.
    """
    deadline = clock() + budget_s
    fetch = fetch or functools.partial(_http_get, deadline=deadline)
    _writable_dir(dest_dir)
    for part in clean_stale_parts(dest_dir, fname):
        log(f"removed {part.name}, left by an interrupted download")
    final = dest_dir / fname
    errors: list[str] = []
    for attempt in range(retries):
        for mirror in MIRRORS[name]:
            if clock() > deadline:
                errors.append(f"gave up after {budget_s:.0f} s (the time budget for one file)")
                break
            url = mirror + fname
            log(f"downloading {name} {fname} from {url.split('/')[2]} (attempt {attempt + 1} of {retries}) ...")
            fd, tmp_name = tempfile.mkstemp(prefix=f"{fname}.{os.getpid()}.", suffix=".part", dir=dest_dir)
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                fetch(url, tmp)
                if not _verified(tmp, name, fname):
                    raise DatasetError("checksum mismatch (corrupt or truncated download)")
                os.replace(tmp, final)  # atomic on POSIX and Windows: readers never see half a file
                return final
            except Exception as e:  # noqa: BLE001 - every failure is reported below
                reason = (
                    f"no answer within {CONNECT_TIMEOUT_S:.0f} s"
                    if isinstance(e, TimeoutError) or "timed out" in str(e)
                    else str(e)
                )
                errors.append(f"{url}: {reason}")
                log(f"  failed: {reason}")
            finally:
                if tmp.exists():
                    tmp.unlink()
        else:
            if attempt + 1 < retries:
                sleep(min(2.0**attempt, max(0.0, deadline - clock())))
            continue
        break
    raise DatasetError(f"could not download {fname} for {name}:\n  " + "\n  ".join(errors))


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


def _not_found_message(name: str, data_dir: Any, missing: list[str], bad: list[str], why: str) -> str:
    lines = [f"{name}: cannot find {', '.join(missing)}.", "Folders searched:"]
    lines += [f"  {d}" for d in search_dirs(name, data_dir)]
    if bad:
        lines += ["Files found but rejected:"] + [f"  {b}" for b in bad]
    lines += [
        f"Download failed: {why}",
        "Fix: put the four IDX .gz files in one of those folders (or pass data_dir=... / set GPULAB_DATA_DIR), "
        "connect to the internet, or use dataset='digits' (scikit-learn's bundled 8x8 digits, no download).",
    ]
    return "\n".join(lines)


def _load_digits(size: int, seed: int) -> Dataset:
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise DatasetError(
            "dataset='digits' needs scikit-learn (it ships the 1,797 8x8 digits): pip install 'gpulab[data]'."
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
    if getattr(x, "ndim", None) != 4:
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
