"""IDX files (the MNIST format) and how gpulab decides a file is the real one.

A file is accepted when its ``.gz`` matches the published checksum, or when its decompressed content
is right: the IDX structure (magic, dimensions, sizes, labels 0-9) and, where known, the SHA-256 of
the decompressed file (a copy re-compressed by a distribution package has another ``.gz`` checksum
but the same content). :mod:`gpulab.data` searches, downloads and loads; this module only reads.
"""

from __future__ import annotations

import gzip
import hashlib
import math
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from .errors import GpulabError

__all__ = ["CHECKSUMS", "CONTENT_SHA256", "DatasetError", "MAX_IDX_BYTES", "SHAPES", "read_idx", "verify"]

# Published checksums of the .gz files: (algorithm, hex digest) per file.
CHECKSUMS: dict[str, dict[str, tuple[str, str]]] = {
    "mnist": {
        "train-images-idx3-ubyte.gz": ("sha256", "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
        "train-labels-idx1-ubyte.gz": ("sha256", "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
        "t10k-images-idx3-ubyte.gz": ("sha256", "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
        "t10k-labels-idx1-ubyte.gz": ("sha256", "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"),
    },
    "fashion-mnist": {
        "train-images-idx3-ubyte.gz": ("md5", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
        "train-labels-idx1-ubyte.gz": ("md5", "25c81989df183df01b3e8a0aad5dffbe"),
        "t10k-images-idx3-ubyte.gz": ("md5", "bef4ecab320f06d8554ea6380940ec79"),
        "t10k-labels-idx1-ubyte.gz": ("md5", "bb300cfdad3c16e7a12a480ee83cd310"),
    },
}

# SHA-256 of the decompressed IDX file (`gunzip -c FILE | sha256sum`), so that a copy re-compressed by a
# distribution package (another .gz checksum, the same bytes inside) is accepted. Fashion-MNIST publishes
# only .gz MD5s; without a known content digest its re-compressed files are accepted on structure
# (shape, labels 0-9, 6,000 / 1,000 images per class) and are refused when their content is MNIST's.
CONTENT_SHA256: dict[str, dict[str, str]] = {
    "mnist": {
        "train-images-idx3-ubyte.gz": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
        "train-labels-idx1-ubyte.gz": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
        "t10k-images-idx3-ubyte.gz": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
        "t10k-labels-idx1-ubyte.gz": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
    },
    "fashion-mnist": {},
}
# Both datasets: 60,000 training and 10,000 test images of 28x28 bytes.
SHAPES = {
    "train-images-idx3-ubyte.gz": (60000, 28, 28),
    "train-labels-idx1-ubyte.gz": (60000,),
    "t10k-images-idx3-ubyte.gz": (10000, 28, 28),
    "t10k-labels-idx1-ubyte.gz": (10000,),
}
# No IDX file gpulab reads is larger (MNIST's training images: 47 MB); a header asking for more is corrupt.
MAX_IDX_BYTES = 1 << 30
# Downloads: seconds without a byte before a mirror counts as silent, and the bound on one file's attempts.


class DatasetError(GpulabError, RuntimeError):
    """A dataset cannot be found, downloaded or read (the message says what to do)."""


def read_idx(path: str | os.PathLike, *, shape: tuple[int, ...] | None = None) -> np.ndarray:
    """Read an IDX file (``.gz`` or raw) as a NumPy array, checking the header against the data.

    IDX: 2 zero bytes, a type code (0x08 = uint8), the number of dimensions, then one big-endian
    uint32 per dimension, then the data. ``shape``, when given, is the shape the file must have.
    Only the bytes the header announces are read (a corrupt header cannot ask for gigabytes).
    """
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path} does not exist. Check the path (or the folder passed as data_dir).")
    if not path.is_file():
        raise DatasetError(f"{path} is a folder or a special file, not an IDX file.")
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            magic = f.read(4)
            if len(magic) < 4 or magic[0] != 0 or magic[1] != 0 or magic[2] != 0x08:
                raise DatasetError(
                    f"{path} is not an IDX file of unsigned bytes (its first bytes are {magic.hex() or 'empty'}, "
                    "expected 000008..). Replace it with the original file."
                )
            ndim = magic[3]
            dims = f.read(4 * ndim)
            if len(dims) < 4 * ndim:
                raise DatasetError(f"{path} is truncated: its header is cut short. Replace it with the original file.")
            found = struct.unpack(">" + "I" * ndim, dims)
            expected = math.prod(found)  # Python ints: no overflow for huge (corrupt) dimensions
            if expected > MAX_IDX_BYTES:
                raise DatasetError(
                    f"{path} has a corrupt header: it announces shape {found} = {expected:,} bytes, more than any "
                    f"dataset gpulab reads ({MAX_IDX_BYTES:,} bytes at most). Replace it with the original file."
                )
            data = f.read(expected + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise DatasetError(
            f"{path} cannot be read as an IDX file ({e}). Replace it with the original file "
            "(a copy in gpulab's download cache is fetched again once deleted)."
        ) from e
    if len(data) != expected:
        what = "truncated" if len(data) < expected else "longer than its header says (corrupt)"
        raise DatasetError(
            f"{path} is {what}: the header says shape {found} ({expected:,} bytes) but the file holds "
            f"{len(data) if len(data) <= expected else f'more than {expected:,}'} bytes of data. Replace it with "
            "the original file."
        )
    if shape is not None and tuple(found) != tuple(shape):
        raise DatasetError(
            f"{path} has shape {found}, but this file of the dataset has shape {tuple(shape)}: "
            "it belongs to another dataset or split."
        )
    return np.frombuffer(data, dtype=np.uint8).reshape(found)


def _digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(path: Path, name: str, fname: str) -> tuple[bool, str]:
    """Whether ``path`` is the dataset's file ``fname``, and how that was decided (or why not).

    The published ``.gz`` checksum is tried first (fast); otherwise the decompressed content is checked.
    """
    algorithm, digest = CHECKSUMS[name][fname]
    try:
        if _digest(path, algorithm) == digest:
            return True, "published checksum"
        arr = read_idx(path, shape=SHAPES[fname])
    except DatasetError as e:
        return False, str(e)
    except OSError as e:  # PermissionError and the like: say so and keep searching
        return False, f"cannot be read ({e.strerror or e})"
    header = bytes([0, 0, 0x08, arr.ndim]) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    content = hashlib.sha256(header + arr.tobytes()).hexdigest()  # = sha256 of the decompressed file
    want = CONTENT_SHA256[name].get(fname)
    if want is not None:
        if content == want:
            return True, "content verified (re-compressed copy)"
        return False, "the decompressed content differs from the original (corrupt or another dataset)"
    if content in CONTENT_SHA256["mnist"].values():
        return False, f"this is MNIST's {fname}, not {name}'s"
    if arr.ndim == 1:  # labels: 0-9, and Fashion-MNIST has exactly 6,000 / 1,000 of each class
        counts = np.bincount(arr, minlength=10)
        if arr.max(initial=0) > 9 or len(set(counts.tolist())) != 1:
            return False, f"labels are not {name}'s (class counts {counts.tolist()})"
    return True, "structure verified (re-compressed copy; no content digest known)"
