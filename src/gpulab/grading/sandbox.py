"""Where a submission runs: a throwaway folder, a read-only copy of gpulab, and hard limits.

With bubblewrap (``apt-get install bubblewrap``) the runner sees only the system's read-only
folders, the Python environment (read-only), its own copy of gpulab (read-only), an empty working
folder and the data folder (read-only); no network, no other processes, no ``labs/solutions``, no
other submission, and it runs as uid 65534 (nobody) in its own user, pid and mount namespaces.
Without bubblewrap, a grader started as root runs the submission as ``nobody`` in a new session
(files the teacher's account keeps private stay private, but world-readable files are readable);
a grader started as another user runs it as that user, which protects nothing but the limits: use
bubblewrap. :func:`describe` says which one is used; the grade table prints it.

Limits, whatever the sandbox: wall time per cell and per submission (the whole process tree is
killed), memory (``RLIMIT_AS`` in simulator mode; CUDA reserves more address space than any sane
limit, so in gpu mode the grader watches the resident size instead), output (bytes on stdout and
stderr together) and file size.

How many submissions run at once: :func:`usable_cpus`, the CPUs this process may use (its CPU affinity, capped
by a cgroup CPU quota: a JupyterHub pod with ``cpu.limit: 2`` on a 64-core node may use 2, not 64).
"""

from __future__ import annotations

import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Limits", "Sandbox", "bwrap_path", "cgroup_cpu_limit", "describe", "usable_cpus"]

NOBODY = 65534


@dataclass
class Limits:
    """Hard limits for one submission."""

    cell_timeout: float = 120.0
    total_timeout: float = 1800.0
    memory_mb: int = 4096
    output_bytes: int = 2_000_000
    file_bytes: int = 200_000_000

    @property
    def kernel_timeout(self) -> float:
        """The most a check may wait for one launch (:mod:`gpulab.grading.kernel_time`): below the cell's limit, so
        an endless kernel gets the check's "timeout" verdict and its hint at any ``--timeout``."""
        return round(KERNEL_SHARE * self.cell_timeout, 3)


KERNEL_SHARE = 0.8
"""The share of a cell's time limit one launch of a check may take (the harness's own default is 30 s)."""


def _quota(text: str, period_text: str | None = None) -> float | None:
    """CPUs from a cgroup quota: v2 ``cpu.max`` ("200000 100000", or "max 100000" for none) or v1
    ``cpu.cfs_quota_us`` with ``cpu.cfs_period_us`` (a quota of -1 is none)."""
    parts = text.split() if period_text is None else [text.strip(), period_text.strip()]
    if len(parts) != 2 or parts[0] in ("max", "-1"):
        return None
    quota, period = float(parts[0]), float(parts[1])
    return quota / period if quota > 0 and period > 0 else None


def _ancestry(mount: Path, path: str) -> list[Path]:
    """``mount/path`` and each folder above it up to ``mount``: a quota set on a parent cgroup binds its children."""
    parts = [p for p in path.strip().split("/") if p]
    return [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def cgroup_cpu_limit(
    root: Path = Path("/sys/fs/cgroup"), self_cgroup: Path = Path("/proc/self/cgroup")
) -> float | None:
    """The CPUs a cgroup quota allows this process (quota / period; the smallest along its cgroup and the cgroups
    above it), or None where no quota is set or none can be read. cgroup v2 (``cpu.max``; the unified tree at
    ``root`` or, on hybrid hosts, ``root/unified``) and v1 (``cpu.cfs_quota_us`` under the cpu controller's folder).
    In a container the cgroup folder mounted at ``root`` is the container's own, whatever path
    ``/proc/self/cgroup`` names, so ``root`` itself is read too."""
    try:
        lines = self_cgroup.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    found: list[float] = []

    def read(folder: Path, v2: bool) -> None:
        try:
            if v2:
                cpus = _quota((folder / "cpu.max").read_text(encoding="utf-8"))
            else:
                quota = (folder / "cpu.cfs_quota_us").read_text(encoding="utf-8")
                cpus = _quota(quota, (folder / "cpu.cfs_period_us").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if cpus is not None:
            found.append(cpus)

    for line in lines or ["0::/"]:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        if hierarchy == "0" and not controllers:  # cgroup v2
            mounts = [root, root / "unified"]
            v2 = True
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller, alone or mounted with cpuacct
            mounts = list(dict.fromkeys([root / controllers, root / "cpu", root / "cpu,cpuacct"]))
            v2 = False
        else:
            continue
        for mount in mounts:
            for folder in _ancestry(mount, path):
                read(folder, v2)
    return min(found) if found else None


def usable_cpus(root: Path = Path("/sys/fs/cgroup"), self_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The CPUs this process may use: those of its CPU affinity (``os.cpu_count()`` counts the machine's), capped by
    a cgroup CPU quota rounded up (a quota of 1.5 CPUs keeps 2 processes busy), at least 1."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = cgroup_cpu_limit(root, self_cgroup)
    if limit is not None:
        cpus = min(cpus, math.ceil(limit))
    return max(1, cpus)


def _drop() -> None:
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)


_CAN_DROP: list[bool] = []


def can_drop() -> bool:
    """Root, and ``nobody`` can run this Python (a pyenv under /root is not readable by it)."""
    if os.geteuid() != 0:
        return False
    if not _CAN_DROP:
        try:
            probe = subprocess.run(
                [sys.executable, "-I", "-c", "import numpy, IPython"],
                capture_output=True,
                timeout=120,
                preexec_fn=_drop,
                cwd="/",
            )
            _CAN_DROP.append(probe.returncode == 0)
        except OSError:  # nobody may not even exec it (PermissionError: a venv whose Python lives under /root)
            _CAN_DROP.append(False)
    return _CAN_DROP[0]


def bwrap_path() -> str | None:
    """The bubblewrap binary, if it is installed and works here (``GPULAB_GRADE_SANDBOX=user`` skips it)."""
    if os.environ.get("GPULAB_GRADE_SANDBOX", "") == "user":
        return None
    path = shutil.which("bwrap")
    if not path:
        return None
    probe = subprocess.run(
        [path, "--ro-bind", "/", "/", "--unshare-all", "--uid", str(NOBODY), "true"], capture_output=True, timeout=30
    )
    return path if probe.returncode == 0 else None


def _no_bwrap() -> tuple[str, str]:
    """Why bubblewrap is not used here, and what to do about it."""
    if os.environ.get("GPULAB_GRADE_SANDBOX", "") == "user":
        return "bubblewrap skipped (GPULAB_GRADE_SANDBOX=user)", "unset GPULAB_GRADE_SANDBOX to use it"
    if shutil.which("bwrap"):
        return (
            "bubblewrap is installed but cannot create namespaces here (unprivileged user namespaces are off: a "
            "container such as a JupyterHub server, or a host that restricts them)",
            "grade where `bwrap --unshare-all --ro-bind / / true` works, e.g. on the host rather than in a container",
        )
    return "bubblewrap not found", "install bubblewrap (apt-get install bubblewrap)"


def describe(bwrap: str | None) -> str:
    """One line saying how submissions are isolated (and, without bubblewrap, why and what to do)."""
    if bwrap:
        return "bubblewrap (uid 65534, no network, read-only package, solutions not visible)"
    why, todo = _no_bwrap()
    if can_drop():
        return f"unprivileged user nobody, {why}: world-readable files such as labs/solutions are readable; {todo}"
    return (
        f"NO SANDBOX: {why} and no other user can run this Python, so the submission "
        f"runs as uid {os.geteuid()} with limits only; {todo}"
    )


def _ro_copy(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for dirpath, _dirnames, filenames in os.walk(dst):
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o444)
        os.chmod(dirpath, 0o555)


class Sandbox:
    """A throwaway folder and the command that starts the runner inside it."""

    def __init__(self, limits: Limits, device: str, data_dir: str | None, bwrap: str | None) -> None:
        import gpulab

        self.limits, self.device, self.bwrap = limits, device, bwrap
        self.root = Path(tempfile.mkdtemp(prefix="gpulab-grade-"))
        os.chmod(self.root, 0o711)
        self.pkg = self.root / "pkg"
        _ro_copy(Path(gpulab.__file__).resolve().parent, self.pkg / "gpulab")
        os.chmod(self.pkg, 0o555)
        self.work = self.root / "work"
        self.home = self.root / "home"
        for d in (self.work, self.home):
            d.mkdir()
            os.chmod(d, 0o700)
            if not bwrap and can_drop():
                os.chown(d, NOBODY, NOBODY)
        self.data_dir = data_dir if data_dir and Path(data_dir).is_dir() else None

    def env(self, inside: bool) -> dict[str, str]:
        home = "/grader/home" if inside else str(self.home)
        env = {
            "PATH": os.path.dirname(sys.executable) + ":/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "IPYTHONDIR": home + "/.ipython",
            "MPLCONFIGDIR": home,
            "NUMBA_CACHE_DIR": home + "/numba",
            "PYTHONPATH": "/grader/pkg" if inside else str(self.pkg),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            "LANG": "C.UTF-8",
            "GPULAB_DEVICE": self.device,
            "OMP_NUM_THREADS": "1",
            "NUMBA_NUM_THREADS": "1",
            # a fresh PTX compiler child per check (gpulab.ptx_child): before each check the runner counts the
            # processes a submission left running, and a compiler process kept up between checks would be one
            "GPULAB_FRESH_PTX": "1",
        }
        if self.data_dir:
            env["GPULAB_DATA_DIR"] = "/grader/data" if inside else self.data_dir
        for k in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME"):
            if k in os.environ:
                env[k] = os.environ[k]
        return env

    def command(self, fds: tuple[int, int]) -> tuple[list[str], dict[str, str], str]:
        """argv, environment and working folder that start the runner."""
        py = ["-I", "-c", "import sys; sys.path.insert(0, sys.argv[3]); from gpulab.grading.runner import main; main()"]
        if not self.bwrap:
            env = self.env(inside=False)
            kernel = str(self.limits.kernel_timeout)
            return [sys.executable, *py, str(fds[0]), str(fds[1]), str(self.pkg), kernel], env, str(self.work)
        args = [
            self.bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--uid",
            str(NOBODY),
            "--gid",
            str(NOBODY),
            "--clearenv",
            # first: a later mount shadows an earlier one, and a venv (or Python) may live under /tmp
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
        ]
        for p in ("/usr", "/bin", "/lib", "/lib64", "/lib32", "/sbin", "/etc"):
            args += ["--ro-bind-try", p, p]
        for p in {sys.prefix, sys.base_prefix, str(Path(sys.executable).resolve().parent.parent)}:
            args += ["--ro-bind-try", p, p]
        args += [
            "--ro-bind",
            str(self.pkg),
            "/grader/pkg",
            "--bind",
            str(self.work),
            "/grader/work",
            "--bind",
            str(self.home),
            "/grader/home",
        ]
        if self.device == "gpu":
            args += ["--dev-bind", "/dev", "/dev", "--ro-bind-try", "/sys", "/sys"]
        else:
            args += ["--dev", "/dev"]
        if self.data_dir:
            args += ["--ro-bind", self.data_dir, "/grader/data"]
        for k, v in self.env(inside=True).items():
            args += ["--setenv", k, v]
        args += ["--chdir", "/grader/work", "--", sys.executable, *py, str(fds[0]), str(fds[1]), "/grader/pkg"]
        args.append(str(self.limits.kernel_timeout))
        return args, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, "/"

    def preexec(self) -> None:
        """In the child before exec: limits, then (no bubblewrap, root) drop to nobody."""
        lim = self.limits
        if self.device != "gpu":
            soft = lim.memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (soft, soft))
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim.file_bytes, lim.file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if not self.bwrap and can_drop():
            _drop()

    def start(self, fds: tuple[int, int], out_fd: int) -> subprocess.Popen:
        argv, env, cwd = self.command(fds)
        return subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out_fd,
            stderr=subprocess.STDOUT,
            pass_fds=fds,
            start_new_session=True,
            preexec_fn=self.preexec,
        )

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        """Kill the runner's whole process group (bubblewrap's namespace dies with it)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass

    def cleanup(self) -> None:
        for dirpath, dirnames, _ in os.walk(self.root):
            for d in dirnames:
                try:
                    os.chmod(os.path.join(dirpath, d), 0o700)
                except OSError:
                    pass
        os.chmod(self.root, 0o700)
        shutil.rmtree(self.root, ignore_errors=True)
