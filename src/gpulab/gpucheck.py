"""``make gpu-check``: the whole course on a real CUDA GPU, in about 8 minutes, one command.

1. Probe the CUDA driver (ctypes only, no numba): without a GPU, stop at once and say so.
2. Set up the venv with ``.[lab,test,data,gpu-cu12]`` (plus ``bench`` when PyTorch wheels can be had).
   Offline: ``WHEELHOUSE=/path/to/wheels`` makes pip use only that folder (``--no-index``).
3. In gpu mode (``GPULAB_DEVICE=gpu``): ``gpulab doctor``; every notebook and lab solution under
   nbval; ``bench kernels --record``, ``bench lessons --record`` and ``bench cnn --record`` (with
   ``--compare torch`` when PyTorch is installed); then a summary (also written to
   ``artifacts/gpu-check/summary.json``). Recorded results land in ``src/gpulab/results/`` for the
   notebooks' simulator mode to show, labelled with device and date: every section in
   ``gpulab.results.SECTIONS`` comes from one of these three commands.

Run with the system Python (``python3 src/gpulab/gpucheck.py``): it works before gpulab is installed.
Data for the CNN (``GPULAB_DATA_DIR``) is passed through untouched.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]
NO_GPU_EXIT = 3
# Seconds per stage, sized for about 8 minutes in all on one GPU after setup.
BUDGET = {"doctor": 30, "notebooks": 240, "bench-kernels": 80, "bench-lessons": 80, "bench-cnn": 50}


def _runtime() -> Any:
    """gpulab.runtime loaded from its file: only the standard library, so it works before install."""
    spec = importlib.util.spec_from_file_location("_gpulab_runtime_probe", HERE.with_name("runtime.py"))
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {HERE.with_name('runtime.py')}: is this a complete gpulab checkout?")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def probe() -> tuple[bool, str]:
    """``(found, reason)`` from the CUDA driver probe (``GPULAB_GPUCHECK_FAKE_NO_GPU=1`` forces none)."""
    if os.environ.get("GPULAB_GPUCHECK_FAKE_NO_GPU") == "1":
        return False, "GPULAB_GPUCHECK_FAKE_NO_GPU=1 (testing the no-GPU path)"
    p = _runtime().probe_driver()
    return p.found, p.reason


def pip_args(wheelhouse: str | None) -> list[str]:
    """Extra pip arguments: only the wheelhouse (no network) when one is given."""
    return ["--no-index", "--find-links", wheelhouse] if wheelhouse else []


def _torch_available(py: Path, wheelhouse: str | None) -> bool:
    if wheelhouse:
        return any(Path(wheelhouse).glob("torch-*.whl"))
    r = subprocess.run(
        [str(py), "-m", "pip", "download", "--no-deps", "-q", "-d", os.devnull, "torch"], capture_output=True, text=True
    )
    return r.returncode == 0


def setup(venv: Path, wheelhouse: str | None, log: Any = print) -> Path:
    """Create ``venv`` if needed and install gpulab with the GPU extras; returns its python."""
    py = venv / "bin" / "python"
    if not py.exists():
        log(f"gpu-check: creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    extra = os.environ.get("GPULAB_GPU_EXTRA", "gpu-cu12")
    pip = [str(py), "-m", "pip", "--disable-pip-version-check", "install", "-q", *pip_args(wheelhouse)]
    # data: scikit-learn's bundled digits, the offline fallback of lesson 09 and `bench lessons`.
    log(f"gpu-check: installing .[lab,test,data,{extra}]" + (f" from {wheelhouse} only" if wheelhouse else ""))
    subprocess.run([*pip, "-e", f".[lab,test,data,{extra}]"], cwd=REPO, check=True)
    subprocess.run(
        [
            str(py),
            "-m",
            "ipykernel",
            "install",
            "--sys-prefix",
            "--name",
            "python3",
            "--display-name",
            "Python 3 (gpulab)",
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    try:
        if _torch_available(py, wheelhouse):
            subprocess.run([*pip, "-e", ".[bench]"], cwd=REPO, check=True)
        else:
            log("gpu-check: no PyTorch wheel available; the CNN benchmark runs without --compare torch")
    except (subprocess.CalledProcessError, OSError) as exc:
        log(f"gpu-check: installing PyTorch failed ({exc}); continuing without it")
    return py


def _notebooks() -> list[str]:
    paths = sorted(REPO.glob("notebooks/*.ipynb")) + sorted(REPO.glob("labs/solutions/*.ipynb"))
    return [str(p.relative_to(REPO)) for p in paths]


def stages(py: Path, out: Path) -> list[tuple[str, list[str]]]:
    """The gpu-mode commands, in order."""
    py_s = str(py)
    todo: list[tuple[str, list[str]]] = [("doctor", [py_s, "-m", "gpulab", "doctor"])]
    nbs = _notebooks()
    if nbs:
        todo.append(
            (
                "notebooks",
                [
                    py_s,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "-n",
                    "4",
                    "--nbval-lax",
                    "--nbval-current-env",
                    "--nbval-cell-timeout=240",
                    *nbs,
                ],
            )
        )
    todo.append(
        (
            "bench-kernels",
            [
                py_s,
                "-m",
                "gpulab",
                "bench",
                "kernels",
                "--record",
                "--json",
                str(out / "kernels.json"),
                "--html",
                str(out / "kernels.html"),
            ],
        )
    )
    todo.append(
        ("bench-lessons", [py_s, "-m", "gpulab", "bench", "lessons", "--record", "--json", str(out / "lessons.json")])
    )
    try:
        has_torch = subprocess.run([py_s, "-c", "import torch"], capture_output=True).returncode == 0
    except OSError:
        has_torch = False
    cmd = [py_s, "-m", "gpulab", "bench", "cnn", "--record", "--rounds", "2", "--json", str(out / "cnn.json")]
    todo.append(("bench-cnn", cmd + (["--compare", "torch"] if has_torch else [])))
    return todo


def run_stages(py: Path, out: Path, log: Any = print) -> list[dict[str, Any]]:
    """Run each stage in gpu mode with its time budget; one summary row per stage."""
    # Recordings go into the repository (to be committed), not the user's data folder.
    env = dict(os.environ, GPULAB_DEVICE="gpu", GPULAB_RESULTS_DIR=str(REPO / "src" / "gpulab" / "results"))
    rows = []
    for name, cmd in stages(py, out):
        log(f"\n== gpu-check: {name}: {' '.join(cmd[2:])[:200]}")
        t0 = time.monotonic()
        try:
            rc = subprocess.run(cmd, cwd=REPO, env=env, timeout=BUDGET[name]).returncode
        except subprocess.TimeoutExpired:
            rc = 124
            log(f"gpu-check: {name} ran past its {BUDGET[name]} s budget")
        rows.append({"stage": name, "rc": rc, "seconds": round(time.monotonic() - t0, 1)})
    return rows


def summary(rows: list[dict[str, Any]], out: Path) -> str:
    """A readable summary of the stages and the kernel benchmark."""
    lines = ["", "gpu-check summary:"]
    status = {id(r): "ok" if r["rc"] == 0 else f"FAILED (rc {r['rc']})" for r in rows}
    lines += [f"  {r['stage']:<14} {status[id(r)]:<16} {r['seconds']:7.1f} s" for r in rows]
    kj = out / "kernels.json"
    if kj.exists():
        rep = json.loads(kj.read_text())
        lines.append(f"  kernels ({rep['label']}), largest size:")
        largest: dict[str, dict[str, Any]] = {}
        for r in rep["rows"]:
            largest[r["kernel"]] = r
        for k, r in largest.items():
            pk = f"{r['percent_of_peak']:.0f}% of peak" if r["percent_of_peak"] is not None else "peak unknown"
            lines.append(
                f"    {k:<16} {r['value']:10.1f} {r['metric']:<8} {pk}, "
                f"{r['percent_of_baseline']:.0f}% of {r['baseline']}"
            )
    return "\n".join(lines)


def configure(ap: argparse.ArgumentParser) -> None:
    """``gpulab gpu-check`` / ``make gpu-check`` arguments."""
    ap.add_argument(
        "--venv", type=Path, default=REPO / ".venv", help="virtual environment to set up and use (default: %(default)s)"
    )
    ap.add_argument("--skip-setup", action="store_true", help="use the venv as it is (no pip)")
    ap.add_argument(
        "--out", type=Path, default=REPO / "artifacts" / "gpu-check", help="where reports go (default: %(default)s)"
    )


def main(argv: list[str] | None = None) -> int:
    """``make gpu-check`` runs this file with the system Python (standard library only)."""
    ap = argparse.ArgumentParser(prog="make gpu-check", description=__doc__.split("\n\n")[0])
    configure(ap)
    return run(ap.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Probe, set up the venv, run every stage, write the summary; 1 when a stage failed."""
    found, reason = probe()
    if not found:
        print(
            f"gpu-check: no CUDA GPU here ({reason}). This check runs every notebook on a real GPU, so it "
            "needs one: run it on a machine where `nvidia-smi` works (in a container: --gpus all). "
            "Without a GPU, `make test` checks everything in simulator mode.",
            file=sys.stderr,
        )
        return NO_GPU_EXIT
    print(f"gpu-check: {reason}")
    start = time.monotonic()
    wheelhouse = os.environ.get("WHEELHOUSE") or None
    venv = args.venv if args.venv.is_absolute() else REPO / args.venv
    py = venv / "bin" / "python" if args.skip_setup else setup(venv, wheelhouse)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = run_stages(py, args.out)
    text = summary(rows, args.out)
    (args.out / "summary.json").write_text(
        json.dumps({"stages": rows, "seconds": round(time.monotonic() - start, 1)}, indent=1) + "\n"
    )
    print(text)
    print(f"  total {time.monotonic() - start:.0f} s; reports in {args.out}")
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
