"""Finding and downloading the IDX ``.gz`` files of MNIST and Fashion-MNIST: where they are looked
for (the search order :mod:`gpulab.data` documents), which mirrors they come from, and a download
that is verified, bounded in time and atomic (a ``.part`` file renamed into place once verified;
``.part`` files left by a killed download are removed). Reading and checking one IDX file is
:mod:`gpulab.idx`; turning the files into a :class:`gpulab.data.Dataset` is :mod:`gpulab.data`.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from collections.abc import Callable

from .idx import DatasetError, verify

__all__ = [
    "CONNECT_TIMEOUT_S",
    "DOWNLOAD_BUDGET_S",
    "FILES",
    "MIRRORS",
    "SUBDIRS",
    "SYSTEM_DIRS",
    "cache_dir",
    "clean_stale_parts",
    "download",
    "search_dirs",
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
