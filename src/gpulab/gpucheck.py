"""``make gpu-check``: the whole course on a real CUDA GPU, in about 7 minutes, one command.

1. Probe the CUDA driver (ctypes only, no numba): without a GPU, stop at once and say so.
2. The Python to use: by default a venv set up with ``.[lab,test,data,gpu-cu12]`` (plus ``bench``
   when PyTorch wheels can be had; offline, ``WHEELHOUSE=/path/to/wheels`` makes pip use only that
   folder). Or ``--python python3``: a Python that already has CUDA, CuPy and numba-cuda (a GPU
   image), used as it is; ``--wheels DIR`` adds what it lacks (``make gpu-check-prep`` fetches them,
   see :mod:`gpulab.gpucheck_files`) in a folder on ``PYTHONPATH``, and gpulab comes from ``src/``.
3. The stages, in gpu mode (``GPULAB_DEVICE=gpu``), each within its own budget and all within
   ``--deadline``: ``preflight`` (every module the stages need, all missing ones named at once);
   ``gpulab doctor``; the kernel, layer and exercise tests in gpu mode (:data:`gpulab.gpucheck_plan.GPU_TESTS`,
   early: the stage written to find gpu-mode bugs); every lesson and lab solution through :mod:`gpulab.nbexec`
   (executed notebooks with their outputs kept); ``bench kernels|lessons|cnn --record`` (with ``--compare torch`` when
   PyTorch is installed) and the CNN on the ``kernels`` backend. Recorded results land in
   ``src/gpulab/results/`` for the notebooks' simulator mode to show, labelled with device and date: every
   section in ``gpulab.results.SECTIONS`` comes from one of these commands.
4. A summary (printed, and ``summary.json`` in ``--out``), and with ``--bundle FILE`` one archive of
   the reports, the executed notebooks and the new recordings, rewritten after every stage so a run
   that is cut off still brings back what it did. ``--unpack FILE`` puts them into this checkout.

On a lent GPU machine with no network (``.device/`` prepared by ``make gpu-check-prep``)::

    python3 src/gpulab/gpucheck.py --python python3 --wheels .device/wheels --data .device/mnist \\
        --out /tmp/gpu-check --bundle $OUT/gpu-check.tar.gz

``--rehearse`` runs the same flow in simulator mode without a GPU and without recording: a check
that the Python, the wheels and the stages work before a GPU minute is spent.

Here: the driver probe, running the stages within their budgets and ``--deadline`` (:func:`run_stages`), and the
command line. The stages' commands, order and budgets are :mod:`gpulab.gpucheck_plan`; one stage's process
:mod:`gpulab.gpucheck_proc`; the wheels, the venv and the bundle :mod:`gpulab.gpucheck_files`; the summary
:mod:`gpulab.gpucheck_summary`.

Run with the system Python (``python3 src/gpulab/gpucheck.py``): it works before gpulab is installed (its siblings
are imported from its own folder then, so they use the standard library only).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

try:
    from . import gpucheck_files as files
    from . import gpucheck_plan as plan
    from .gpucheck_proc import fit as _fit
    from .gpucheck_proc import run_one
    from .gpucheck_summary import summary
    from .nbexec import recording_signals
except ImportError:  # run as a script: python3 src/gpulab/gpucheck.py (its folder is on sys.path)
    import gpucheck_files as files  # type: ignore[no-redef,import-not-found]
    import gpucheck_plan as plan  # type: ignore[no-redef,import-not-found]
    from gpucheck_proc import fit as _fit  # type: ignore[no-redef,import-not-found]
    from gpucheck_proc import run_one  # type: ignore[no-redef]
    from gpucheck_summary import summary  # type: ignore[no-redef,import-not-found]
    from nbexec import recording_signals  # type: ignore[no-redef,import-not-found]

HERE = Path(__file__).resolve()
REPO = plan.REPO
NO_GPU_EXIT = 3
# Signals received during run(): the stage running is stopped, the rest skipped, the bundle still written.
SIGNALLED: list[int] = []
# Seconds kept free at the end of --deadline: a stage cut off there gets SIGTERM, then SIGKILL 5 s later
# (gpucheck_proc.stop: at most 10 s), its output pump 2 s to finish, and the summary and the bundle are written last.
# Without this margin a stage that ran to its limit made the whole run end 5-15 s after the deadline.
RESERVE = 20.0
# A stage is not started with less than this many seconds left (it could do nothing useful).
MIN_STAGE = 10.0


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


def run_stages(
    todo: list[tuple[str, list[str]]],
    env: dict[str, str],
    out: Path,
    deadline: float,
    log: Any = print,
    after: Any = None,
    budget: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Run each stage within its budget and before ``deadline`` (a ``time.monotonic()`` value); one row
    per stage (``rc`` None: skipped, no time left). ``after(rows)`` is called after every stage."""
    rows: list[dict[str, Any]] = []
    for name, cmd in todo:
        remaining = deadline - time.monotonic()
        limit = min((budget or plan.BUDGET).get(name, 60), remaining - RESERVE)
        skipped = (
            f"gpu-check was stopped ({signal.Signals(SIGNALLED[0]).name})"
            if SIGNALLED
            else f"the deadline is {max(remaining, 0):.0f} s away"
            if remaining - RESERVE < MIN_STAGE
            else ""
        )
        if skipped:
            rows.append({"stage": name, "rc": None, "seconds": 0.0})
            log(f"\n== gpu-check: {name}: skipped, {skipped}")
        else:
            cmd = _fit(cmd, limit)
            shown = " ".join(c if len(c) < 80 else c.replace("\n", " ")[:40] + "..." for c in cmd[1:])
            log(f"\n== gpu-check: {name} (at most {limit:.0f} s): {shown[:300]}")
            t0 = time.monotonic()
            try:
                rc = run_one(cmd, env, limit, out / f"{name}.log", log, cwd=REPO, signalled=SIGNALLED)
            except Exception as exc:  # noqa: BLE001 - a stage that cannot start is a failed row, not a lost run
                log(f"gpu-check: {name} could not run: {type(exc).__name__}: {exc}")
                rc = 127
            if rc == 124:
                log(f"gpu-check: {name} ran past its {limit:.0f} s and was stopped")
            elif SIGNALLED and rc == 128 + SIGNALLED[0]:
                log(f"gpu-check: {name} was stopped by {signal.Signals(SIGNALLED[0]).name}")
            rows.append({"stage": name, "rc": rc, "seconds": round(time.monotonic() - t0, 1)})
        if after is not None:
            try:
                after(rows)
            except Exception as exc:  # noqa: BLE001 - the next stages still run; the end writes it again
                log(f"gpu-check: writing the report after {name} failed: {type(exc).__name__}: {exc}")
    return rows


def configure(ap: argparse.ArgumentParser) -> None:
    """``gpulab gpu-check`` / ``make gpu-check`` arguments."""
    ap.add_argument(
        "--venv", type=Path, default=REPO / ".venv", help="virtual environment to set up and use (default: %(default)s)"
    )
    ap.add_argument("--skip-setup", action="store_true", help="use the venv as it is (no pip)")
    ap.add_argument("--python", help="use this Python as it is instead of a venv (e.g. python3 on a GPU image)")
    ap.add_argument("--wheels", type=Path, help="with --python: install these wheels (make gpu-check-prep) first")
    ap.add_argument(
        "--site", type=Path, default=Path("/tmp/gpulab-site"), help="where --wheels go (default: %(default)s)"
    )
    ap.add_argument("--data", type=Path, help="folder with the MNIST originals (sets GPULAB_DATA_DIR)")
    ap.add_argument(
        "--out", type=Path, default=REPO / "artifacts" / "gpu-check", help="where reports go (default: %(default)s)"
    )
    ap.add_argument("--bundle", type=Path, help="also write the reports and new recordings to this .tar.gz")
    ap.add_argument(
        "--deadline", type=float, default=plan.DEADLINE, help="seconds for everything (default: %(default)s)"
    )
    ap.add_argument("--only", help=f"comma-separated stages to run, of: {', '.join(plan.STAGES)}")
    ap.add_argument("--notebooks", help="comma-separated parts of notebook paths: run only those notebooks")
    ap.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="STAGE=SECONDS",
        help="change one stage's budget (repeatable), e.g. notebooks=600 for a rehearsal on a small CPU",
    )
    ap.add_argument("--rehearse", action="store_true", help="no GPU: the same flow in simulator mode, nothing recorded")
    ap.add_argument("--unpack", type=Path, help="put a --bundle's recordings and reports into this checkout, then stop")
    ap.add_argument(
        "--download-wheels", type=Path, help="fetch the wheels a GPU image lacks into this folder, then stop"
    )


def main(argv: list[str] | None = None) -> int:
    """``make gpu-check`` runs this file with the system Python (standard library only)."""
    if hasattr(sys.stdout, "reconfigure"):  # line by line: a run that is killed still shows what it printed
        sys.stdout.reconfigure(line_buffering=True)
    ap = argparse.ArgumentParser(prog="make gpu-check", description=__doc__.split("\n\n")[0])
    configure(ap)
    return run(ap.parse_args(argv))


def _error(msg: str) -> int:
    print(f"gpu-check: error: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Probe, pick the Python, run the stages, write the summary; 1 when a stage failed."""
    if args.unpack is not None:
        if not args.unpack.is_file():
            return _error(f"--unpack {args.unpack}: no such file (the .tar.gz that --bundle wrote)")
        try:
            written = files.unpack(args.unpack, REPO)
        except ValueError as exc:
            return _error(str(exc))
        for name in written:
            print(f"gpu-check: wrote {name}")
        return 0
    if args.download_wheels is not None:
        try:
            got = files.download_wheels(args.download_wheels)
        except RuntimeError as exc:
            return _error(str(exc))
        mb = sum(p.stat().st_size for p in got) / 1e6
        print(f"gpu-check: {len(got)} wheels in {args.download_wheels} ({mb:.1f} MB)")
        return 0
    only = [s.strip() for s in args.only.split(",")] if args.only else list(plan.STAGES)
    unknown = [s for s in only if s not in plan.STAGES]
    if unknown:
        return _error(f"--only {args.only}: no stage {', '.join(unknown)}; the stages are {', '.join(plan.STAGES)}")
    if args.wheels is not None and args.python is None:
        return _error("--wheels goes with --python (a venv installs from WHEELHOUSE instead)")
    if args.python is not None and shutil.which(args.python) is None:
        return _error(f"--python {args.python}: not found; give a path or a command on PATH")
    budget = dict(plan.BUDGET)
    for item in args.budget:
        name, _, secs = item.partition("=")
        if name not in plan.BUDGET or not secs.replace(".", "", 1).isdigit() or float(secs) <= 0:
            return _error(f"--budget {item}: expected STAGE=SECONDS with a stage of {', '.join(plan.STAGES)}")
        budget[name] = float(secs)
    if args.data is not None and not args.data.is_dir():
        return _error(f"--data {args.data}: no such folder (it should hold the MNIST .gz files)")
    if args.wheels is not None and not any(args.wheels.glob("*.whl")):
        return _error(f"--wheels {args.wheels}: no .whl files there; `make gpu-check-prep` fetches them (needs PyPI)")
    patterns = [s.strip() for s in args.notebooks.split(",")] if args.notebooks else None
    if patterns and not plan.notebook_paths(patterns):
        return _error(f"--notebooks {args.notebooks}: matches no notebook under notebooks/ or labs/solutions/")
    if not args.rehearse:
        found, reason = probe()
        if not found:
            print(
                f"gpu-check: no CUDA GPU here ({reason}). This check runs every notebook on a real GPU, so it "
                "needs one: run it on a machine where `nvidia-smi` works (in a container: --gpus all). "
                "Without a GPU, `make test` checks everything in simulator mode (and --rehearse this check's flow).",
                file=sys.stderr,
            )
            return NO_GPU_EXIT
        print(f"gpu-check: {reason}")
    start = time.monotonic()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GPULAB_DEVICE="simulator" if args.rehearse else "gpu")
    # Recordings go into the repository (to be committed), not the user's data folder; a rehearsal records nothing.
    results_dir = out / "results" if args.rehearse else REPO / "src" / "gpulab" / "results"
    env["GPULAB_RESULTS_DIR"] = str(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    if args.data is not None:
        env["GPULAB_DATA_DIR"] = str(args.data.resolve())
    if toolkit := files.toolkit_env(env):  # NVVM from the system toolkit when no wheel brings it
        env.update(toolkit)
        print(f"gpu-check: CUDA_HOME={toolkit['CUDA_HOME']} (a CUDA toolkit with NVVM; no CUDA_HOME was set)")
    if args.python is not None:
        py = Path(shutil.which(args.python) or args.python)
        path = [str(REPO / "src")]
        if args.wheels is not None:
            print(f"gpu-check: installing {len(list(args.wheels.glob('*.whl')))} wheels into {args.site}")
            try:
                files.install_wheels(str(py), args.wheels, args.site)
            except RuntimeError as exc:
                return _error(str(exc))
            path.insert(0, str(args.site))
        env["PYTHONPATH"] = os.pathsep.join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    else:
        venv = args.venv if args.venv.is_absolute() else REPO / args.venv
        wheelhouse = os.environ.get("WHEELHOUSE") or None
        py = venv / "bin" / "python" if args.skip_setup else files.setup(venv, wheelhouse, REPO)
    todo = [
        (n, c)
        for n, c in plan.stages(py, out, record=not args.rehearse, notebooks=patterns, budget=budget)
        if n in only
    ]
    before = files.snapshot(results_dir)

    def after(rows: list[dict[str, Any]]) -> None:
        doc = {"stages": rows, "seconds": round(time.monotonic() - start, 1), "rehearsal": bool(args.rehearse)}
        (out / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
        # a skipped stage changed nothing but the summary: the bundle is written once more at the end anyway
        if args.bundle is not None and rows and rows[-1]["rc"] is not None:
            files.write_bundle(args.bundle, out, results_dir, before)

    SIGNALLED.clear()
    with recording_signals(SIGNALLED):
        rows = run_stages(todo, env, out, start + args.deadline, after=after, budget=budget)
    text = summary(rows, out)
    (out / "summary.txt").write_text(text + "\n")
    if args.bundle is not None:
        try:
            files.write_bundle(args.bundle, out, results_dir, before)
        except Exception as exc:  # noqa: BLE001 - the reports stay in --out; say why the bundle is old
            print(f"gpu-check: writing the bundle {args.bundle} failed: {type(exc).__name__}: {exc}")
    print(text)
    print(
        f"  total {time.monotonic() - start:.0f} s; reports in {out}"
        + (f", bundle {args.bundle}" if args.bundle else "")
    )
    if SIGNALLED:
        print(f"gpu-check: stopped by {signal.Signals(SIGNALLED[0]).name}; what it did is in {out}")
        return 128 + SIGNALLED[0]
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
