"""``python -m gpulab bench cnn``: arguments are checked before any timing."""

import pytest

from gpulab.bench import cnn


@pytest.mark.parametrize(
    "args",
    [
        ["--steps", "0"],
        ["--batch-size", "0"],
        ["--channels", "abc"],
        ["--workers", "0"],
        ["--workers", "-2"],
        ["--threads", "-1"],
        ["--rounds", "0"],
        ["--warmup", "-1"],
    ],
)
def test_bad_values_are_refused_by_argparse(args, capsys):
    with pytest.raises(SystemExit) as e:
        cnn.main(args)
    assert e.value.code == 2 and "expected" in capsys.readouterr().err


def test_json_to_a_missing_folder_fails_before_timing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cnn, "measure_gpulab", lambda *a, **k: pytest.fail("timing started"))
    assert cnn.main(["--json", str(tmp_path / "no" / "b.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_kernels_backend_in_the_simulator_is_refused(capsys):
    import gpulab

    if not gpulab.is_simulator():
        pytest.skip("simulator only")
    assert cnn.main(["--backend", "kernels"]) == 2
    assert "simulator" in capsys.readouterr().err
