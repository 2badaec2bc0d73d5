"""The files ``make gpu-check`` takes to a GPU machine and brings back (standard library only).

:func:`setup` makes the default venv (``pip install -e .[lab,test,data,gpu-cu12]``, from a
``WHEELHOUSE`` folder alone when one is given).

A GPU machine lent for a few minutes often has CUDA, CuPy, numba-cuda and PyTorch but no Jupyter and
no network. :data:`DEVICE_WHEELS` is what such an image lacks to run the course's notebooks: the
Jupyter kernel and client, nbclient, ipywidgets and plotly, each pinned. ``make gpu-check-prep``
downloads them here (:func:`download_wheels`, for the GPU machine's Python and platform) and copies the
MNIST originals beside them; on the GPU machine :func:`install_wheels` puts them in a folder on
``PYTHONPATH`` without touching that Python's own packages. There, :func:`toolkit_env` points numba-cuda at the
system toolkit's NVVM, and the first stage runs :func:`preflight_code` (every module the stages import).

What comes back is one file, :func:`write_bundle`: the reports (:func:`gpulab.gpucheck_summary.summary` reads
them), the executed notebooks and the recordings this run wrote. :func:`unpack` puts the recordings into
``src/gpulab/results/`` (to be committed) and the reports into ``artifacts/gpu-check/``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DEVICE_WHEELS",
    "NEEDED_MODULES",
    "OPTIONAL_MODULES",
    "download_wheels",
    "install_wheels",
    "pip_args",
    "preflight_code",
    "setup",
    "snapshot",
    "toolkit_env",
    "unpack",
    "write_bundle",
]

# The closure of nbclient, ipykernel, ipywidgets and plotly minus what a CUDA + PyTorch image has
# (numpy, numba, numba-cuda, cupy, pytest, pytest-xdist, pytest-timeout, scikit-learn, tqdm,
# narwhals, packaging, psutil, python-dateutil, attrs, pygments, typing-extensions, nvidia-ml-py).
# Versions are the ones `make test` runs with; they were installed together on Python 3.12.
DEVICE_WHEELS = (
    "asttokens==3.0.2",
    "comm==0.2.3",
    "debugpy==1.8.22",
    "executing==2.3.0",
    "fastjsonschema==2.22.3",
    "ipykernel==7.4.0",
    "ipython==9.18.1",
    "ipython-pygments-lexers==1.1.1",
    "ipywidgets==8.1.9",
    "jedi==0.20.1",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "jupyter-client==8.10.0",
    "jupyter-core==5.9.1",
    "jupyterlab-widgets==3.0.17",
    "matplotlib-inline==0.2.2",
    "nbclient==0.11.0",
    "nbformat==5.11.1",
    "nest-asyncio2==1.7.4",
    "parso==0.8.7",
    "pexpect==4.9.0",
    "platformdirs==4.14.9",
    "plotly==7.1.0",
    "prompt-toolkit==3.0.53",
    "ptyprocess==0.7.0",
    "pure-eval==0.2.4",
    "pyzmq==27.3.0",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "stack-data==0.6.3",
    "tornado==6.6.1",
    "traitlets==5.16.1",
    "wcwidth==0.9.4",
    "widgetsnbextension==4.0.16",
)
# manylinux tags pip must be told one by one when it downloads for another machine.
PLATFORMS = ["manylinux1_x86_64", "manylinux2014_x86_64"] + [f"manylinux_2_{n}_x86_64" for n in range(5, 40)]

# Modules the gpu-check stages import, and the ones that only add to them.
NEEDED_MODULES = (
    "gpulab",  # first: it fixes the mode before anything imports numba
    "numpy",
    "numba",
    "numba.cuda",
    "cupy",
    "nbclient",
    "nbformat",
    "ipykernel",
    "jupyter_client",
    "ipywidgets",
    "plotly",
    "tqdm",
    "pytest",
    "xdist",
    "pytest_timeout",
)
OPTIONAL_MODULES = ("torch", "pynvml", "sklearn", "threadpoolctl")


def _project(wheel: Path) -> str:
    return wheel.name.split("-")[0].lower().replace("_", "-")


def download_wheels(dest: Path, python_version: str = "3.12", pip: list[str] | None = None) -> list[Path]:
    """Fetch :data:`DEVICE_WHEELS` for CPython ``python_version`` on x86-64 Linux into ``dest``.

    Older versions of the same projects in ``dest`` are removed (two versions of one project stop the
    whole install there); other files are left alone. Needs the network (PyPI)."""
    pip = pip or [sys.executable, "-m", "pip"]
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [*pip, "download", "-q", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:"]
        cmd += ["--python-version", python_version, "--implementation", "cp", "-d", tmp]
        for tag in PLATFORMS:
            cmd += ["--platform", tag]
        r = subprocess.run([*cmd, *DEVICE_WHEELS], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(
                f"pip could not download the wheels for the GPU machine (exit {r.returncode}):\n"
                f"{r.stderr.strip()[-2000:]}\nIs PyPI reachable from here? Run `make gpu-check-prep` where it is."
            )
        new = sorted(Path(tmp).glob("*.whl"))
        names = {_project(w) for w in new}
        for old in dest.glob("*.whl"):
            if _project(old) in names:
                old.unlink()
        for w in new:
            shutil.move(str(w), dest / w.name)
    got = sorted(dest.glob("*.whl"))
    missing = {r.split("==")[0] for r in DEVICE_WHEELS} - {_project(w) for w in got}
    if missing:
        raise RuntimeError(f"no wheel was downloaded for: {', '.join(sorted(missing))}")
    return got


def install_wheels(python: str, wheels: Path, site: Path) -> None:
    """Install every wheel in ``wheels`` into ``site`` for ``python`` (no index, no dependencies)."""
    found = sorted(wheels.glob("*.whl"))
    if not found:
        raise RuntimeError(f"no wheels in {wheels}: run `make gpu-check-prep` first (it needs PyPI)")
    cmd = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--no-deps"]
    cmd += ["--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, found)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"installing the wheels from {wheels} failed (exit {r.returncode}):\n{r.stderr[-2000:]}")


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


def setup(venv: Path, wheelhouse: str | None, repo: Path, log: Any = print) -> Path:
    """Create ``venv`` if needed and install gpulab with the GPU extras; returns its python."""
    py = venv / "bin" / "python"
    if not py.exists():
        log(f"gpu-check: creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    extra = os.environ.get("GPULAB_GPU_EXTRA", "gpu-cu12")
    pip = [str(py), "-m", "pip", "--disable-pip-version-check", "install", "-q", *pip_args(wheelhouse)]
    # data: scikit-learn's bundled digits, the offline fallback of lesson 09 and `bench lessons`.
    log(f"gpu-check: installing .[lab,test,data,{extra}]" + (f" from {wheelhouse} only" if wheelhouse else ""))
    subprocess.run([*pip, "-e", f".[lab,test,data,{extra}]"], cwd=repo, check=True)
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
        cwd=repo,
        check=True,
        capture_output=True,
    )
    try:
        if _torch_available(py, wheelhouse):
            subprocess.run([*pip, "-e", ".[bench]"], cwd=repo, check=True)
        else:
            log("gpu-check: no PyTorch wheel available; the CNN benchmark runs without --compare torch")
    except (subprocess.CalledProcessError, OSError) as exc:
        log(f"gpu-check: installing PyTorch failed ({exc}); continuing without it")
    return py


def toolkit_env(env: Mapping[str, str], roots: Sequence[Path] = (Path("/usr/local/cuda"),)) -> dict[str, str]:
    """``{"CUDA_HOME": root}`` for the first of ``roots`` that holds NVVM (``nvvm/lib64/libnvvm.so*``), when ``env``
    names no toolkit (neither ``CUDA_HOME`` nor ``CUDA_PATH``); else nothing.

    Why: numba-cuda 0.30 looks for NVVM with cuda-pathfinder (pip wheels, conda, the loader's search path, then
    ``CUDA_HOME``/``CUDA_PATH``) and, failing those, infers the toolkit from where NVRTC was found only when that was
    the loader's search. The lent GPU image has CUDA 13.0's nvcc (and so NVVM) under /usr/local/cuda but no
    ``nvidia-nvvm`` wheel, and NVRTC from a wheel: without ``CUDA_HOME`` every kernel compile could fail there with
    "nvvm not found". Its libdevice is found under /usr/local/cuda either way. Wheels still come first: the
    variable only adds a place to look."""
    if env.get("CUDA_HOME") or env.get("CUDA_PATH"):
        return {}
    for root in roots:
        if any((root / "nvvm" / "lib64").glob("libnvvm.so*")):
            return {"CUDA_HOME": str(root)}
    return {}


def preflight_code() -> str:
    """Python source that reports every needed module's version and exits 1 naming all that are missing (the
    doctor stage then compiles and runs a kernel: :func:`gpulab.doctor.report`)."""
    return f"""
import importlib, sys
missing = []
for name in {NEEDED_MODULES!r} + {OPTIONAL_MODULES!r}:
    try:
        mod = importlib.import_module(name)
        print(f"  {{name:<16}} {{getattr(mod, '__version__', '')}}  {{getattr(mod, '__file__', '')}}")
    except Exception as exc:
        print(f"  {{name:<16}} MISSING ({{type(exc).__name__}}: {{exc}})")
        if name in {NEEDED_MODULES!r}:
            missing.append(name)
print(f"  python           {{sys.version.split()[0]}}  {{sys.executable}}")
if "gpulab" in sys.modules:
    print(f"  gpulab mode      {{sys.modules['gpulab'].mode()}}")
if missing:
    print("preflight: missing " + ", ".join(missing) + ": on a machine without network, run "
          "`make gpu-check-prep` where PyPI is reachable and pass --wheels .device/wheels")
    sys.exit(1)
"""


def snapshot(folder: Path) -> dict[str, str]:
    """``{name: sha256}`` of the JSON files in ``folder`` (to tell which ones a run wrote)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.json"))}


def write_bundle(bundle: Path, out: Path, results_dir: Path, before: dict[str, str]) -> list[str]:
    """``bundle`` (.tar.gz): ``gpu-check/`` = everything under ``out``; ``results/`` = recordings new
    or changed since ``before``. Written to a temporary name first, so a kill never leaves half a file."""
    names = []
    tmp = bundle.with_name(bundle.name + ".part")
    bundle.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tmp, "w:gz") as tar:
        for p in sorted(out.rglob("*")):
            if p.is_file() and p.resolve() not in (bundle.resolve(), tmp.resolve()):
                arc = f"gpu-check/{p.relative_to(out).as_posix()}"
                try:
                    tar.add(p, arcname=arc)
                except FileNotFoundError:  # replaced since the listing (a report's .part file): the rest still goes
                    continue
                names.append(arc)
        for name, digest in snapshot(results_dir).items():
            if before.get(name) != digest:
                tar.add(results_dir / name, arcname=f"results/{name}")
                names.append(f"results/{name}")
    tmp.replace(bundle)
    return names


def unpack(bundle: Path, repo: Path) -> list[str]:
    """Recordings into ``repo/src/gpulab/results/``, reports into ``repo/artifacts/gpu-check/``.

    Only plain files named ``gpu-check/...`` or ``results/<name>.json`` are taken; anything else in
    the archive (links, absolute or ``..`` paths), or an archive that is not whole, is refused
    (``ValueError``) before a file is written."""
    targets = {"gpu-check": repo / "artifacts" / "gpu-check", "results": repo / "src" / "gpulab" / "results"}
    contents: dict[Path, bytes] = {}
    try:
        with tarfile.open(bundle, "r:gz") as tar:
            for m in tar:
                parts = Path(m.name).parts
                ok = m.isfile() and len(parts) >= 2 and parts[0] in targets and ".." not in parts
                ok = ok and not Path(m.name).is_absolute()
                ok = ok and (parts[0] != "results" or (len(parts) == 2 and m.name.endswith(".json")))
                if not ok:
                    raise ValueError(f"{bundle} holds {m.name!r}, which is not a gpu-check report or recording")
                src = tar.extractfile(m)
                assert src is not None
                contents[targets[parts[0]].joinpath(*parts[1:])] = src.read()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ValueError(
            f"{bundle} is not a whole .tar.gz ({type(exc).__name__}: {exc}); expected the file that --bundle "
            "wrote (a .part file is one cut off while it was written: the .tar.gz beside it is the last whole one)"
        ) from exc
    for dest, data in contents.items():
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
    return [str(dest.relative_to(repo)) for dest in contents]
