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


def test_kernels_backend_in_the_simulator_is_refused(capsys):
    import gpulab

    if not gpulab.is_simulator():
        pytest.skip("simulator only")
    assert cnn.main(["--backend", "kernels"]) == 2
    assert "simulator" in capsys.readouterr().err


def test_the_pytorch_comparison_runs_full_fp32_with_either_api():
    """PyTorch's cuDNN convolutions use TF32 by default on Ampere and newer; the race against gpulab's FP32 kernels
    turns that off, with PyTorch 2.9's fp32_precision where it exists (not mixed with the older flags), else the
    flags."""
    from types import SimpleNamespace as NS

    from gpulab.bench.cnn_runs import _full_fp32

    new = NS(backends=NS(cudnn=NS(conv=NS(fp32_precision="tf32")), cuda=NS(matmul=NS(fp32_precision="tf32"))))
    _full_fp32(new)
    assert new.backends.cudnn.conv.fp32_precision == "ieee" and new.backends.cuda.matmul.fp32_precision == "ieee"
    assert not hasattr(new.backends.cudnn, "allow_tf32")
    old = NS(backends=NS(cudnn=NS(allow_tf32=True), cuda=NS(matmul=NS(allow_tf32=True))))
    _full_fp32(old)
    assert old.backends.cudnn.allow_tf32 is False and old.backends.cuda.matmul.allow_tf32 is False


def test_per_op_times_every_op_of_a_few_more_steps(tmp_path, capsys):
    out = tmp_path / "cnn.json"
    args = ["--backend", "numpy", "--rounds", "1", "--steps", "1", "--warmup", "0", "--batch-size", "8"]
    assert cnn.main([*args, "--channels", "2,3", "--hidden", "8", "--per-op", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "time per op (wall clock on the CPU, measured in this run)" in text, text
    import json

    rows = json.loads(out.read_text())["per_op"]
    assert {"matmul", "adam_update", "softmax_xent", "conv_weight_grad"} <= {r["op"] for r in rows}
    assert abs(sum(r["share"] for r in rows) - 1) < 1e-6
