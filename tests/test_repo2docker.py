"""The repository builds with repo2docker (Binder, Zero-to-JupyterHub): `repo2docker --no-build`
prints the Dockerfile, in which the lean environment comes first, then the sources are copied, then
gpulab is installed (postBuild); solutions and tests stay out of the build context; MNIST and a
writable numba cache are set up."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BINDER = ROOT / "binder"
TEST_TOOLS = ("pytest", "nbval", "playwright", "pytest-xdist", "jupyter-repo2docker")


def _repo2docker() -> list[str]:
    exe = shutil.which("repo2docker") or str(Path(sys.executable).with_name("repo2docker"))
    if not Path(exe).exists():
        pytest.skip("jupyter-repo2docker is in the test extra: pip install -e '.[test]'")
    return [exe]


@pytest.fixture(scope="module")
def dockerfile() -> str:
    proc = subprocess.run(
        [*_repo2docker(), "--no-build", "--debug", "--user-id", "1000", "--user-name", "jovyan", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]},
    )
    text = proc.stdout + proc.stderr
    assert "FROM " in text, text[-3000:]
    return text


def _line(text: str, pattern: str) -> int:
    for k, line in enumerate(text.splitlines()):
        if re.search(pattern, line):
            return k
    raise AssertionError(f"no line matching {pattern!r} in the Dockerfile")


def test_install_comes_after_the_copy(dockerfile):
    env_update = _line(dockerfile, r"env update .*binder/environment\.yml")
    copy = _line(dockerfile, r"^COPY .* src/ \$\{REPO_DIR\}/$")
    post = _line(dockerfile, r"^RUN \./binder/postBuild$")
    assert env_update < copy < post
    post_build = (BINDER / "postBuild").read_text()
    assert re.search(r"^python -m pip install .*--no-deps \.$", post_build, re.M), "postBuild installs gpulab"
    assert os.access(BINDER / "postBuild", os.X_OK) and os.access(BINDER / "start", os.X_OK)
    assert 'R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in dockerfile


def test_lean_environment_without_local_installs_or_test_tools():
    env = yaml.safe_load((BINDER / "environment.yml").read_text())
    deps = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    names = [re.split(r"[<>=\[ ]", d)[0] for d in deps + pip]
    assert not any(n in TEST_TOOLS for n in names), names
    assert not any(p.lstrip("-e ").strip("'\"").startswith(".") for p in pip), "no local install before the copy"
    assert {"numba", "numpy", "jupyterlab", "ipywidgets", "plotly", "nbgitpuller"} <= set(names)


def test_lean_environment_has_the_data_extra():
    """Lab 09 trains on scikit-learn's digits in simulator mode (the hub's CPU profile): the image needs what
    `make lab` installs with the [data] extra, or its training cell stops with 'needs scikit-learn'."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["data"]
    env = yaml.safe_load((BINDER / "environment.yml").read_text())
    deps = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    names = {re.split(r"[<>=\[ ]", d)[0] for d in deps + pip}
    assert extra and {re.split(r"[<>=\[ ]", d)[0] for d in extra} <= names, (extra, sorted(names))


def test_root_environment_installs_after_the_copy_too():
    """conda users' environment.yml: an unquoted local requirement, which repo2docker recognises."""
    # repo2docker is in the test extra; make test-oldest's venv (Colab's pins) does not have it
    is_local_pip_requirement = pytest.importorskip("repo2docker.utils").is_local_pip_requirement

    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert any(is_local_pip_requirement(p) for p in pip), pip


def test_solutions_and_tests_stay_out_of_the_image():
    exclude_paths = pytest.importorskip("docker.utils.build").exclude_paths  # comes with repo2docker

    ignore = [
        ln.strip()
        for ln in (BINDER / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)
        files = exclude_paths(".", ignore)
    finally:
        os.chdir(cwd)
    assert any(f.startswith("labs/student/") for f in files) and any(f.startswith("notebooks/") for f in files)
    assert not any(f.startswith(("labs/solutions", "tests/", "teachers/", ".git/")) for f in files)
    assert "test ! -e labs/solutions" in (BINDER / "postBuild").read_text()


def test_mnist_and_numba_cache_are_set_up():
    post_build = (BINDER / "postBuild").read_text()
    start = (BINDER / "start").read_text()
    assert "d.load('mnist')" in post_build and "NB_PYTHON_PREFIX}/share/gpulab" in post_build
    assert 'GPULAB_DATA_DIR="${NB_PYTHON_PREFIX}/share/gpulab/mnist"' in start
    assert "NUMBA_CACHE_DIR" in start and 'exec "$@"' in start


def test_mnist_lands_where_start_points_gpulab(tmp_path):
    """postBuild downloads into gpulab's cache under XDG_CACHE_HOME; start's GPULAB_DATA_DIR must be
    one of the folders gpulab then searches, or every student downloads MNIST again."""
    post_build = (BINDER / "postBuild").read_text()
    prefix = str(tmp_path / "env")
    assign = "\n".join(ln for ln in post_build.splitlines() if re.match(r"^[A-Z_]+=", ln))
    xdg = re.search(r'XDG_CACHE_HOME=("[^"]*"|\S+) python -c', post_build)
    assert xdg, "postBuild sets XDG_CACHE_HOME for the MNIST download"
    shell = f"NB_PYTHON_PREFIX={prefix}\n{assign}\necho {xdg.group(1)}"
    cache_home = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True).stdout.strip()
    start = (BINDER / "start").read_text()
    data_dir = re.search(r'GPULAB_DATA_DIR="\$\{NB_PYTHON_PREFIX\}([^"]*)"', start)
    assert data_dir
    probe = (
        "import os, pathlib, gpulab.data_files as f; root = pathlib.Path(os.environ['WANT']); "
        "print(f.cache_dir() / 'mnist'); print(root); print('\\n'.join(str(root / s) for s in f.SUBDIRS['mnist']))"
    )
    env = {**os.environ, "XDG_CACHE_HOME": cache_home, "WANT": prefix + data_dir.group(1)}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True).stdout
    downloaded_to, *searched = out.splitlines()
    assert downloaded_to in searched, (downloaded_to, searched)
