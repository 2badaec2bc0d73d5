"""gpulab.data: IDX parsing, checksums, search order, download (network mocked), errors. Never downloads."""

import gzip
import hashlib
import struct
from pathlib import Path

import numpy as np
import pytest

from gpulab import data, data_files

from _paths import SHARED_MNIST

needs_mnist = pytest.mark.skipif(
    not (SHARED_MNIST / "t10k-images-idx3-ubyte.gz").exists(), reason=f"real MNIST files not found at {SHARED_MNIST}"
)


def write_idx(path: Path, arr: np.ndarray, *, truncate: int = 0) -> bytes:
    raw = bytes([0, 0, 8, arr.ndim]) + struct.pack(">" + "I" * arr.ndim, *arr.shape) + arr.astype(np.uint8).tobytes()
    if truncate:
        raw = raw[:-truncate]
    blob = gzip.compress(raw)
    path.write_bytes(blob)
    return blob


@pytest.fixture
def fake_dataset(tmp_path, monkeypatch):
    """A tiny 'mnist' whose checksums are patched in, in tmp_path/mnist; cache redirected to tmp."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GPULAB_DATA_DIR", raising=False)
    # search_dirs() reads SYSTEM_DIRS in gpulab.data_files (data.SYSTEM_DIRS is a re-export)
    monkeypatch.setattr(data_files, "SYSTEM_DIRS", {"mnist": (), "fashion-mnist": ()})
    d = tmp_path / "mnist"
    d.mkdir()
    rng = np.random.default_rng(0)
    sums = {}
    blobs = {}
    for key, fname in data.FILES.items():
        n = 12 if key.startswith("train") else 5
        arr = rng.integers(0, 256, (n, 28, 28)) if key.endswith("images") else rng.integers(0, 10, n)
        blobs[fname] = write_idx(d / fname, arr)
        sums[fname] = ("sha256", hashlib.sha256(blobs[fname]).hexdigest())
    monkeypatch.setitem(data.CHECKSUMS, "mnist", sums)
    return d, blobs


def test_read_idx_roundtrip_and_corruption(tmp_path):
    arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "ok.gz", arr)
    np.testing.assert_array_equal(data.read_idx(tmp_path / "ok.gz"), arr)
    write_idx(tmp_path / "short.gz", arr, truncate=5)
    with pytest.raises(data.DatasetError, match="truncated"):
        data.read_idx(tmp_path / "short.gz")
    (tmp_path / "bad.gz").write_bytes(gzip.compress(b"\x01\x02\x03\x04hello")[:-4])
    with pytest.raises(data.DatasetError):
        data.read_idx(tmp_path / "bad.gz")


def test_load_from_data_dir(fake_dataset):
    d, _ = fake_dataset
    ds = data.load("mnist", data_dir=d, download=False)
    assert ds.x_train.shape == (12, 1, 28, 28) and ds.x_train.dtype == np.float32
    assert ds.y_test.shape == (5,) and ds.y_test.dtype == np.int64
    assert 0.0 <= ds.x_train.min() and ds.x_train.max() <= 1.0


def test_env_var_is_searched(fake_dataset, monkeypatch):
    d, _ = fake_dataset
    monkeypatch.setenv("GPULAB_DATA_DIR", str(d))
    assert data.load("mnist", download=False).x_train.shape[0] == 12


def test_corrupt_file_is_never_used_and_is_replaced_by_download(fake_dataset, tmp_path):
    d, blobs = fake_dataset
    fname = data.FILES["train_images"]
    (d / fname).write_bytes(blobs[fname][:-10])  # truncated copy: fails its checksum
    with pytest.raises(data.DatasetError, match="rejected"):
        data.load("mnist", data_dir=d, download=False)
    calls = []

    def fake_fetch(url, dest):
        calls.append(url)
        dest.write_bytes(blobs[Path(url).name])

    got = data.download("mnist", fname, tmp_path / "cache" / "gpulab" / "mnist", fetch=fake_fetch, sleep=lambda s: None)
    assert got.read_bytes() == blobs[fname] and calls[0].startswith("https://")
    # now the verified cached copy is found; the corrupt one in d is skipped
    assert data.load("mnist", data_dir=d, download=False).x_train.shape == (12, 1, 28, 28)


def test_download_retries_mirrors_and_writes_atomically(fake_dataset, tmp_path):
    _, blobs = fake_dataset
    fname = data.FILES["test_labels"]
    dest = tmp_path / "dl"
    attempts = []

    def flaky(url, path):
        attempts.append(url)
        if len(attempts) == 1:
            raise OSError("connection reset")
        if len(attempts) == 2:
            path.write_bytes(blobs[fname][:-3])  # truncated transfer
            return
        path.write_bytes(blobs[fname])

    sleeps = []
    out = data.download("mnist", fname, dest, fetch=flaky, sleep=sleeps.append)
    assert out == dest / fname and out.read_bytes() == blobs[fname]
    assert len(attempts) == 3 and sleeps == [1.0]  # two mirrors failed, one pause, then success
    assert sorted(p.name for p in dest.iterdir()) == [fname]  # no .part files left behind


def test_download_gives_up_with_every_error(fake_dataset, tmp_path):
    def broken(url, path):
        raise OSError("no network")

    with pytest.raises(data.DatasetError, match="no network") as e:
        data.download("mnist", data.FILES["test_labels"], tmp_path / "x", fetch=broken, sleep=lambda s: None, retries=2)
    assert str(e.value).count("no network") == 4  # 2 mirrors x 2 attempts
    assert not (tmp_path / "x" / data.FILES["test_labels"]).exists()


def test_offline_message_names_folders_and_digits(fake_dataset, tmp_path, monkeypatch):
    # the download (and its network layer _http_get) lives in gpulab.data_files: patch it there
    monkeypatch.setattr(
        data_files, "_http_get", lambda url, dest, timeout=60.0: (_ for _ in ()).throw(OSError("offline"))
    )
    monkeypatch.setattr(data_files.time, "sleep", lambda s: None)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(data.DatasetError) as e:
        data.load("fashion-mnist", data_dir=empty)
    msg = str(e.value)
    assert str(empty) in msg and "digits" in msg and "offline" in msg


def test_bad_names_and_dirs():
    with pytest.raises(ValueError, match="unknown dataset"):
        data.load("cifar")
    with pytest.raises(data.DatasetError, match="does not exist"):
        data.load("mnist", data_dir="/no/such/folder", download=False)


def test_check_images_rejects_bad_data():
    x = np.zeros((2, 1, 4, 4), np.float32)
    y = np.zeros(2, np.int64)
    data.check_images(x, y)
    with pytest.raises(ValueError, match="NaN"):
        data.check_images(np.full_like(x, np.nan), y)
    with pytest.raises(TypeError, match="floating"):
        data.check_images(x.astype(np.uint8), y)
    with pytest.raises(ValueError, match="shape"):
        data.check_images(x[0], y)
    with pytest.raises(ValueError, match="labels"):
        data.check_images(x, y[:1])


def test_batches_cover_everything_once():
    x = np.arange(10, dtype=np.float32)[:, None, None, None]
    y = np.arange(10)
    seen = np.concatenate([yb for _, yb in data.batches(x, y, 3, shuffle=True, rng=np.random.default_rng(1))])
    assert sorted(seen) == list(range(10))


@needs_mnist
def test_real_mnist_checksums_and_shapes():
    ds = data.load("mnist", data_dir=SHARED_MNIST, download=False)
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert set(np.unique(ds.y_train)) == set(range(10))


def test_digits():
    pytest.importorskip("sklearn")
    ds = data.load("digits")
    assert ds.x_train.shape[1:] == (1, 28, 28) and len(ds.x_test) == 360
    assert data.load("digits", size=8).x_train.shape[1:] == (1, 8, 8)


# ----------------------------------------------------------------------------- issue 15: data items


@needs_mnist
def test_recompressed_real_files_are_accepted_by_content(tmp_path, monkeypatch):
    """A distribution package's re-compressed copy: other .gz checksum, same content -> accepted."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GPULAB_DATA_DIR", raising=False)
    d = tmp_path / "recompressed"
    d.mkdir()
    for fname in data.FILES.values():
        raw = gzip.decompress((SHARED_MNIST / fname).read_bytes())
        blob = gzip.compress(raw, compresslevel=1, mtime=0)
        assert hashlib.sha256(blob).hexdigest() != data.CHECKSUMS["mnist"][fname][1]
        (d / fname).write_bytes(blob)
    ok, why = data.verify(d / "t10k-labels-idx1-ubyte.gz", "mnist", "t10k-labels-idx1-ubyte.gz")
    assert ok and "content verified" in why
    ds = data.load("mnist", data_dir=d, download=False)
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.source == str(d)


@needs_mnist
def test_changed_content_and_wrong_dataset_are_refused(tmp_path):
    raw = bytearray(gzip.decompress((SHARED_MNIST / "t10k-labels-idx1-ubyte.gz").read_bytes()))
    raw[100] = (raw[100] + 1) % 10  # one label changed: structure fine, content not the original
    p = tmp_path / "t10k-labels-idx1-ubyte.gz"
    p.write_bytes(gzip.compress(bytes(raw)))
    ok, why = data.verify(p, "mnist", "t10k-labels-idx1-ubyte.gz")
    assert not ok and "differs from the original" in why
    # MNIST's labels offered as Fashion-MNIST's (no content digest known for Fashion): refused.
    p.write_bytes(gzip.compress(gzip.decompress((SHARED_MNIST / "t10k-labels-idx1-ubyte.gz").read_bytes())))
    ok, why = data.verify(p, "fashion-mnist", "t10k-labels-idx1-ubyte.gz")
    assert not ok and "MNIST" in why


def test_fashion_structure_accepted_without_known_digest(tmp_path):
    labels = np.repeat(np.arange(10, dtype=np.uint8), 1000)  # Fashion-MNIST's test split: 1,000 per class
    p = tmp_path / "t10k-labels-idx1-ubyte.gz"
    write_idx(p, labels)
    ok, why = data.verify(p, "fashion-mnist", "t10k-labels-idx1-ubyte.gz")
    assert ok and "structure verified" in why
    write_idx(p, np.arange(10000) % 7)  # unbalanced: not Fashion-MNIST
    assert not data.verify(p, "fashion-mnist", "t10k-labels-idx1-ubyte.gz")[0]
    write_idx(p, labels[:500])  # wrong count
    ok, why = data.verify(p, "fashion-mnist", "t10k-labels-idx1-ubyte.gz")
    assert not ok and "shape" in why


def test_read_idx_huge_header_and_missing_file(tmp_path):
    p = tmp_path / "huge.idx"
    p.write_bytes(bytes([0, 0, 8, 3]) + struct.pack(">III", 4_000_000_000, 4_000_000_000, 4_000_000_000))
    with pytest.raises(data.DatasetError, match="corrupt header") as e:
        data.read_idx(p)
    assert "-" not in str(e.value).split("=")[1].split("bytes")[0]  # no negative byte count
    with pytest.raises(data.DatasetError, match="does not exist") as e:
        data.read_idx(tmp_path / "missing-idx1-ubyte.gz")
    assert "delete" not in str(e.value)
    (tmp_path / "dir.gz").mkdir()
    with pytest.raises(data.DatasetError, match="folder"):
        data.read_idx(tmp_path / "dir.gz")
    (tmp_path / "notgz.gz").write_bytes(b"plain text, not gzip")
    with pytest.raises(data.DatasetError, match="cannot be read"):
        data.read_idx(tmp_path / "notgz.gz")


def test_unreadable_copy_does_not_hide_a_valid_later_copy(fake_dataset, tmp_path, monkeypatch):
    d, _ = fake_dataset
    first = tmp_path / "first"
    first.mkdir()
    for fname in data.FILES.values():
        (first / fname).write_bytes(b"unreadable")
    monkeypatch.setenv("GPULAB_DATA_DIR", str(d))  # searched after data_dir
    from gpulab import idx

    real_digest = idx._digest

    def digest(path, algorithm):
        if Path(path).parent == first:
            raise PermissionError(13, "Permission denied", str(path))
        return real_digest(path, algorithm)

    monkeypatch.setattr(idx, "_digest", digest)
    ds = data.load("mnist", data_dir=first, download=False)
    assert ds.source == str(d)
    found, bad = data._find("mnist", first)
    assert all("cannot be read (Permission denied)" in b for b in bad) and len(bad) == 4


def test_unwritable_cache_is_reported_before_downloading(fake_dataset, tmp_path, monkeypatch):
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("x")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    calls = []
    with pytest.raises(data.DatasetError, match="cannot write the download cache .*XDG_CACHE_HOME"):
        data.download(
            "mnist", "t10k-labels-idx1-ubyte.gz", data.cache_dir() / "mnist", fetch=lambda url, dest: calls.append(url)
        )
    assert calls == []


def test_silent_network_is_bounded_and_explained(fake_dataset, tmp_path):
    """A network that swallows packets: each mirror fails after CONNECT_TIMEOUT_S, the whole attempt
    stops at the budget, and every step is said (before: 6 tries x 60 s + 3 s of pauses = 363 s, silent)."""
    now = [0.0]
    said: list[str] = []

    def swallow(url, dest):
        now[0] += data.CONNECT_TIMEOUT_S
        raise TimeoutError("timed out")

    with pytest.raises(data.DatasetError, match="no answer within") as e:
        data.download(
            "mnist",
            "t10k-labels-idx1-ubyte.gz",
            tmp_path / "dl",
            fetch=swallow,
            sleep=lambda s: now.__setitem__(0, now[0] + s),
            clock=lambda: now[0],
            log=said.append,
            budget_s=45,
        )
    assert now[0] <= 45 + data.CONNECT_TIMEOUT_S
    assert any("downloading mnist t10k-labels" in s for s in said) and any("failed" in s for s in said)
    assert "time budget" in str(e.value)


def test_orphaned_part_files_from_a_killed_download_are_removed(fake_dataset, tmp_path):
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    dest = tmp_path / "dl"
    dest.mkdir()
    fname = "t10k-labels-idx1-ubyte.gz"
    orphan = dest / f"{fname}.{dead.pid}.abc123.part"
    orphan.write_bytes(b"half a download")
    mine = dest / f"{fname}.{__import__('os').getpid()}.live.part"
    mine.write_bytes(b"a download in progress in a live process")
    blob = (fake_dataset[0] / fname).read_bytes()
    said: list[str] = []
    data.download("mnist", fname, dest, fetch=lambda url, p: p.write_bytes(blob), log=said.append)
    assert not orphan.exists() and mine.exists()
    assert any("interrupted download" in s for s in said)


def test_subset_counts_are_whole_numbers_at_least_1():
    """subset(-1, 5) kept all but the last image (Python counts from the end), subset(10.5, 5) gave a slicing
    TypeError; a count above the split keeps the whole split (notebook 09 asks 5,000 of the digits' 1,437)."""
    from gpulab.errors import UsageError

    rng = np.random.default_rng(0)
    ds = data.Dataset(
        "toy", rng.random((20, 1, 4, 4)), np.arange(20), rng.random((6, 1, 4, 4)), np.arange(6), ("0",), "test"
    )
    for args, expected in (
        ((-1, 5), "n_train must be >= 1, but got -1."),
        ((0, 5), "n_train must be >= 1, but got 0."),
        ((10.5, 5), "n_train must be a whole number >= 1, but got 10.5 (float); it is never rounded for you."),
        ((10, -2), "n_test must be >= 1, but got -2."),
        (("10", 5), "n_train must be a whole number >= 1, but got '10' (str)"),
    ):
        with pytest.raises(UsageError) as e:
            ds.subset(*args)
        assert expected in str(e.value) and "(this dataset has 20 and 6; None keeps them all)" in str(e.value)
    small = ds.subset(np.int64(3), 2.0)  # the good paths: NumPy integers, whole floats, None, more than there are
    assert (small.x_train.shape[0], small.x_test.shape[0]) == (3, 2) and np.array_equal(small.y_train, [0, 1, 2])
    assert (len(ds.subset(10**7, None).y_train), len(ds.subset(None, 4).y_test)) == (20, 4)


def test_check_images_names_a_list():
    from gpulab.errors import UsageError

    with pytest.raises(UsageError, match=r"images must be an array \(N, channels, height, width\), got a list") as e:
        data.check_images([[0.0]], np.zeros(1, np.int64))
    assert "Convert it first: np.asarray(x, dtype=np.float32)." in str(e.value)
