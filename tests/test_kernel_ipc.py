"""gpulab.grading.ipc: the kernels of the course's runners (nbclient through SlicedKernelManager, nbval through
tests/nbval_checks.py, nbgrader through teachers/nbgrader_config.py) talk over unix sockets of their own, so no
kernel started at the same moment by another process can take its TCP ports ("Address already in use").
.ci/kernel_stress.py measures the race itself."""

from __future__ import annotations

import os
import runpy
import tempfile
from pathlib import Path

import pytest
from traitlets.config import Config

from gpulab.grading import ipc
from gpulab.grading.ipc import ABSTRACT, MAX_SOCKET_PATH, IpcKernelManager, ipc_prefix
from gpulab.grading.sliced import SlicedKernelManager

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not ipc.IPC_AVAILABLE, reason="no unix sockets here: the managers keep TCP")


def _own(prefix: str) -> bool:
    """An abstract name (Linux) or an absolute path: never jupyter_client's relative, shared "kernel-ipc"."""
    return prefix.startswith("@gpulab-kernel-") if ABSTRACT else os.path.isabs(prefix)


def _sockets(prefix: str) -> list[str]:
    """The kernel's bound sockets: abstract names listed in /proc/net/unix, or files."""
    if prefix.startswith("@"):
        with open("/proc/net/unix") as fh:
            return sorted(
                {line.split()[-1] for line in fh if line.rstrip().endswith(tuple(f"{prefix}-{i}" for i in range(1, 6)))}
            )
    return sorted(str(p) for p in Path(prefix).parent.glob(Path(prefix).name + "-*"))


@pytest.mark.parametrize("cls", [IpcKernelManager, SlicedKernelManager])
def test_each_manager_has_its_own_absolute_short_socket_path(cls):
    a, b = cls(kernel_name="python3"), cls(kernel_name="python3")
    assert a.transport == b.transport == "ipc"
    assert _own(a.ip) and a.ip != b.ip
    assert len(a.ip) + len("-99999") <= MAX_SOCKET_PATH
    assert not a.cache_ports  # jupyter_client's TCP port cache is not involved


def test_socket_files_go_to_tmp_when_the_temporary_folder_is_too_long(monkeypatch, tmp_path):
    """Without Linux's abstract namespace (macOS) the sockets are files, whose path must fit a unix socket."""
    folder = tempfile.mkdtemp(prefix="g", dir="/tmp")  # pytest's tmp_path can itself be too long (74 characters)
    try:
        monkeypatch.setattr(tempfile, "tempdir", folder)
        short = ipc_prefix(abstract=False)
        assert short.startswith(folder + "/") and len(short) + 6 <= MAX_SOCKET_PATH
    finally:
        os.rmdir(folder)
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert ipc_prefix(abstract=False).startswith("/tmp/gpulab-kernel-")


def test_configuration_that_asks_for_tcp_is_kept():
    c = Config()
    c.KernelManager.transport = "tcp"
    km = IpcKernelManager(kernel_name="python3", config=c)
    assert km.transport == "tcp" and not os.path.isabs(km.ip)


@pytest.mark.parametrize("abstract", sorted({ABSTRACT, False}))
def test_a_kernel_in_another_folder_answers_and_its_sockets_go_with_it(tmp_path, monkeypatch, abstract):
    """The kernel runs in / and the client here: with a relative socket path they would never meet."""
    monkeypatch.chdir(tmp_path)
    km = IpcKernelManager(kernel_name="python3", ip=ipc_prefix(abstract))
    km.start_kernel(cwd="/")
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        reply = kc.execute_interactive("x = 6 * 7", timeout=60)
        assert reply["content"]["status"] == "ok"
        assert len(_sockets(km.ip)) == 5
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert _sockets(km.ip) == []
    assert list(tmp_path.iterdir()) == []


def test_nbval_starts_its_kernels_on_unix_sockets(monkeypatch):
    """tests/nbval_checks.py (make test's nbval plugin) hands nbval the ipc manager."""
    nbval_kernel = pytest.importorskip("nbval.kernel")
    import nbval_checks  # tests/ is on sys.path, as for conftest.py

    monkeypatch.setattr(nbval_kernel, "KernelManager", nbval_kernel.KernelManager)  # put back after the test
    nbval_checks.use_ipc_kernels()
    km, kc = nbval_kernel.start_new_kernel(startup_timeout=120, kernel_name="python3")
    try:
        assert isinstance(km, IpcKernelManager) and km.transport == "ipc"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_nbgrader_config_puts_each_kernel_on_unix_sockets_of_its_own(monkeypatch):
    """nbgrader's Execute fixes nbclient's kernel manager class; the config puts gpulab's Execute in its place, whose
    kernels each get their own socket names (one name for every kernel, set in the config, let two kernels alive at
    once in one nbgrader process bind the same abstract name)."""
    pytest.importorskip("nbgrader")
    from nbgrader.preprocessors import Execute

    from gpulab.grading.nbgrader_execute import SlicedExecute
    from gpulab.grading.sliced import SlicedKernelManager

    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))  # the config puts this Python's scripts on PATH
    got = runpy.run_path(str(ROOT / "teachers" / "nbgrader_config.py"), init_globals={"get_config": Config})
    steps = got["c"].Autograde.autograde_preprocessors
    assert steps[0] is SlicedExecute and Execute not in steps and len(steps) >= 5
    assert "ip" not in got["c"].KernelManager  # no name shared by every kernel
    execute = SlicedExecute(config=got["c"])
    assert execute.kernel_manager_class is SlicedKernelManager and execute.timeout == 300  # c.Execute still applies
    a, b = SlicedKernelManager(), SlicedKernelManager()
    assert a.transport == b.transport == "ipc" and a.ip != b.ip and _own(a.ip) and _own(b.ip)


def test_an_nbgrader_without_execute_in_its_steps_is_refused_with_what_to_do(monkeypatch):
    pytest.importorskip("nbgrader")
    from nbgrader.converters.autograde import Autograde

    from gpulab.grading import nbgrader_execute

    trait = Autograde.class_traits()["autograde_preprocessors"]
    monkeypatch.setattr(trait, "default", lambda obj=None: [])
    with pytest.raises(RuntimeError, match="no Execute to replace.*Remove the autograde_preprocessors line"):
        nbgrader_execute.autograde_preprocessors()
