"""The course from an install (issue 16): build the wheel, install it in a fresh venv, copy the course
out with ``gpulab course``, execute one lesson headless; and the GPU extras resolve.

The fresh venv gets gpulab from the wheel with ``--no-deps`` (the path Colab's setup cell takes) and
its dependencies from this environment through a ``.pth`` line, so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_ENABLE_CUDASIM", "VIRTUAL_ENV")}
    env.update(GPULAB_DEVICE="simulator", **extra)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the repository (the worktree stays clean), without downloads."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "_course", "*.egg-info"))
    for folder in ("notebooks", "labs"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    dist = tmp_path_factory.mktemp("dist")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    (whl,) = dist.glob("gpulab-*.whl")
    return whl


def test_wheel_ships_the_course_typed_and_one_version(wheel):
    from gpulab import _meta

    assert wheel.name.startswith(f"gpulab-{_meta.VERSION}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpulab/py.typed" in names
    lessons = [n for n in names if n.startswith("gpulab/_course/notebooks/") and n.count("/") == 3]
    labs = [n for n in names if n.startswith("gpulab/_course/labs/student/")]
    assert len(lessons) == len(list(ROOT.glob("notebooks/[0-9]*.ipynb"))) and len(labs) >= 8
    assert not [n for n in names if "labs/solutions" in n]  # solutions stay out of the wheel
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "Provides-Extra: gpu-cu13" in meta and "Provides-Extra: grade" in meta
    assert "Project-URL: Source" in meta and "Typing :: Typed" in meta
    base = [line for line in meta.splitlines() if line.startswith("Requires-Dist: numba-cuda") and "extra" not in line]
    assert base and "cu12" not in base[0]  # a cu12 base would make gpu-cu13 unresolvable


@pytest.mark.timeout(2400)  # its steps have their own limits (building the wheel is counted here too)
def test_fresh_venv_course_and_one_lesson_headless(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "_shared_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # deps, without gpulab
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=300,
    )
    if r.returncode != 0 and "--python" in r.stderr:  # pip < 22.3: install with the target's own pip module
        r = subprocess.run(
            [str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=300,
        )
    assert r.returncode == 0, r.stderr[-2000:]
    where = subprocess.check_output(
        [str(py), "-c", "import gpulab; print(gpulab.__file__)"], text=True, env=_clean_env()
    ).strip()
    assert where.startswith(str(venv)), where  # the wheel's gpulab, not the checkout's

    dest = tmp_path / "my course"
    data_home = tmp_path / "data"
    r = subprocess.run(
        [str(venv / "bin" / "gpulab"), "course", str(dest)],
        capture_output=True,
        text=True,
        env=_clean_env(XDG_DATA_HOME=str(data_home)),
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert (dest / "lessons" / "00_why_gpus.ipynb").is_file() and (dest / "labs" / "lab01_threads.ipynb").is_file()
    assert (dest / "lessons" / "complete" / "00_why_gpus.ipynb").is_file() and (dest / "README.md").is_file()
    overrides = venv / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    assert json.loads(overrides.read_text())["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"

    # a learner's edit is never overwritten
    mine = dest / "labs" / "lab01_threads.ipynb"
    mine.write_text(mine.read_text() + " ")
    r = subprocess.run(
        [str(venv / "bin" / "gpulab"), "course", str(dest), "--no-jupyter-settings"],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=300,
    )
    assert r.returncode == 0 and "skipped   labs/lab01_threads.ipynb" in r.stdout
    assert mine.read_text().endswith(" ")

    # one lesson, headless, with the installed package (kernel = the fresh venv's python)
    subprocess.run(
        [str(py), "-m", "ipykernel", "install", "--sys-prefix", "--name", "gpulab-wheel"],
        check=True,
        capture_output=True,
        env=_clean_env(),
        timeout=120,
    )
    script = (
        "import sys, nbformat\n"
        "from nbclient import NotebookClient\n"
        "from jupyter_client.kernelspec import KernelSpecManager\n"
        "p = sys.argv[1]\n"
        "nb = nbformat.read(p, as_version=4)\n"
        "from gpulab.grading.sliced import SlicedKernelManager\n"  # unix sockets: no port race with other tests
        "NotebookClient(nb, timeout=120, kernel_name='gpulab-wheel', resources={'metadata': {'path': sys.argv[2]}},"
        " kernel_spec_manager=KernelSpecManager(kernel_dirs=[sys.argv[3]]),"
        " kernel_manager_class=SlicedKernelManager).execute()\n"
        "errs = [o for c in nb.cells for o in c.get('outputs', []) if o.get('output_type') == 'error']\n"
        "code = [c.source for c in nb.cells if c.cell_type == 'code']\n"
        "print('errors', len(errs))\n"
    )
    lesson = dest / "lessons" / "complete" / "00_why_gpus.ipynb"
    r = subprocess.run(
        [str(py), "-c", script, str(lesson), str(lesson.parent), str(venv / "share" / "jupyter" / "kernels")],
        capture_output=True,
        text=True,
        env=_clean_env(XDG_DATA_HOME=str(data_home)),
        timeout=600,
    )
    assert r.returncode == 0 and "errors 0" in r.stdout, r.stderr[-3000:]


@pytest.mark.network
@pytest.mark.timeout(1500)
def test_gpu_cu13_extra_resolves(wheel):
    """``pip install --dry-run "gpulab[gpu-cu13]"`` resolves (it did not while the base dependencies
    forced numba-cuda[cu12]). Needs PyPI; skipped offline."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--retries",  # an unreachable or stalling index fails fast instead of retrying each URL 5 x 15 s
            "1",
            "--timeout",
            "20",
            "-q",
            "--report",
            "-",
            f"gpulab[gpu-cu13] @ {wheel.as_uri()}",
        ],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=900,
    )
    if r.returncode != 0 and any(
        s in r.stderr for s in ("NewConnectionError", "Temporary failure", "No route", "ReadTimeoutError", "timed out")
    ):
        pytest.skip("PyPI is not reachable (or did not answer within 20 s, once retried)")
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout)
    names = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in report["install"]}
    assert "cupy-cuda13x" in names and "nvidia-nccl-cu13" in names
    assert names["cuda-bindings"].startswith("13.")


def test_reinstall_advice_points_at_github_not_pypi(tmp_path, monkeypatch):
    """gpulab is not on PyPI (README): the course folder's README and the broken-install errors say where from."""
    from gpulab import _meta, cli, course
    from gpulab.errors import GpulabError, UsageError

    source = f"gpulab @ git+{_meta.REPO_URL}"
    assert source in course.README and "install --upgrade gpulab" not in course.README
    monkeypatch.setattr(course, "PACKAGE_COURSE", tmp_path / "none")
    monkeypatch.setattr(course, "REPO_ROOT", tmp_path)
    with pytest.raises(UsageError, match="has no course files") as no_course:
        course.course_source()
    with pytest.raises(GpulabError, match="has no `nope` command") as no_command:
        cli._load("nope", "gpulab._no_such_command")
    for exc in (no_course, no_command):
        assert source in str(exc.value) and "install --force-reinstall gpulab)" not in str(exc.value)


def test_no_message_installs_gpulab_from_pypi():
    """gpulab is not on PyPI: no advice in the package says `pip install gpulab` or `pip install 'gpulab[extra]'`
    (that would fetch whatever PyPI holds under the name); the GitHub source (`gpulab @ git+...`) is fine."""
    import re

    pypi = re.compile(r"pip install [^`\n;(),]*?\bgpulab\b(?!\s*@|\[[^\]]*\]\s*@)")
    found = [
        f"{path.relative_to(ROOT)}: {m.group(0)}"
        for path in sorted((ROOT / "src" / "gpulab").rglob("*.py"))
        for m in pypi.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not found, found
