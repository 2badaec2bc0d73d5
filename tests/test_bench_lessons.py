"""bench lessons without data (issue 17): offline and without scikit-learn the CNN section is skipped
with the reason; the rest of the suite still runs."""

from __future__ import annotations

from gpulab import data
from gpulab.bench import lessons


def test_no_data_skips_cnn_training_with_a_reason(monkeypatch):
    tried = []

    def load(name, **kw):
        tried.append((name, kw.get("download")))
        raise data.DatasetError(f"{name}: nothing here\nDownload failed: offline")

    monkeypatch.setattr(data, "load", load)
    said: list[str] = []
    out = lessons.measure(["cnn_training"], log=said.append)
    assert out == {}
    assert tried == [("mnist", False), ("mnist", True), ("digits", None)]
    assert any("cnn_training      skipped: no data" in s and "GPULAB_DATA_DIR" in s for s in said)


def test_falls_back_to_digits_when_mnist_cannot_be_had(monkeypatch):
    import pytest

    pytest.importorskip("sklearn")
    real = data.load

    def load(name, **kw):
        if name == "mnist":
            raise data.DatasetError("offline")
        return real(name, **kw)

    monkeypatch.setattr(data, "load", load)
    ds, why = lessons._dataset(log=lambda s: None)
    assert why == "" and ds.name == "digits"
