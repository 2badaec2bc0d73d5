"""How many submissions `labs grade` runs at once by default: the CPUs this process may use (its affinity, capped
by a cgroup CPU quota), read from fake cgroup trees here, so that a JupyterHub pod limited to 2 CPUs on a 64-core
node starts 2 grading processes, not 64."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpulab.grading import sandbox
from gpulab.grading.sandbox import cgroup_cpu_limit, usable_cpus


def _tree(tmp_path: Path, self_cgroup: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    root.mkdir(exist_ok=True)
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text(self_cgroup)
    return root, proc


def test_v2_container_quota(tmp_path):
    """A pod's container with its own cgroup namespace: /proc/self/cgroup says "0::/", cpu.max is at the root."""
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "200000 100000\n"})
    assert cgroup_cpu_limit(root, proc) == 2.0


def test_v2_no_quota(tmp_path):
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "max 100000\n"})
    assert cgroup_cpu_limit(root, proc) is None


def test_v2_host_cgroup_and_its_parents(tmp_path):
    """On a host the process's cgroup is a path below the root; a parent's smaller quota binds it."""
    root, proc = _tree(
        tmp_path,
        "0::/user.slice/job.scope\n",
        {"user.slice/job.scope/cpu.max": "max 100000\n", "user.slice/cpu.max": "150000 100000\n"},
    )
    assert cgroup_cpu_limit(root, proc) == 1.5


def test_v2_path_missing_under_the_mount_reads_the_mount(tmp_path):
    """Without a cgroup namespace /proc/self/cgroup names the host's path, absent inside the container's mount."""
    root, proc = _tree(tmp_path, "0::/kubepods/burstable/pod1/ctr\n", {"cpu.max": "50000 100000\n"})
    assert cgroup_cpu_limit(root, proc) == 0.5


def test_v1_cpu_controller(tmp_path):
    root, proc = _tree(
        tmp_path,
        "4:memory:/x\n3:cpu,cpuacct:/docker/abc\n0::/\n",
        {"cpu,cpuacct/cpu.cfs_quota_us": "300000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"},
    )
    assert cgroup_cpu_limit(root, proc) == 3.0


def test_v1_no_quota_and_unreadable_files(tmp_path):
    root, proc = _tree(tmp_path, "1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"})
    assert cgroup_cpu_limit(root, proc) is None
    root, proc = _tree(tmp_path / "bad", "0::/\n", {"cpu.max": "garbage\n"})
    assert cgroup_cpu_limit(root, proc) is None
    assert cgroup_cpu_limit(tmp_path / "none", tmp_path / "no-such-file") is None


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity on this platform")
def test_usable_cpus_is_affinity_capped_by_the_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox.os, "sched_getaffinity", lambda pid: set(range(64)))
    root, proc = _tree(tmp_path, "0::/\n", {"cpu.max": "200000 100000\n"})
    assert usable_cpus(root, proc) == 2  # the pod's cpu limit, not the node's 64 cores
    root, proc = _tree(tmp_path / "frac", "0::/\n", {"cpu.max": "150000 100000\n"})
    assert usable_cpus(root, proc) == 2  # 1.5 CPUs: rounded up
    root, proc = _tree(tmp_path / "small", "0::/\n", {"cpu.max": "10000 100000\n"})
    assert usable_cpus(root, proc) == 1
    root, proc = _tree(tmp_path / "free", "0::/\n", {"cpu.max": "max 100000\n"})
    assert usable_cpus(root, proc) == 64
    monkeypatch.setattr(sandbox.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    root, proc = _tree(tmp_path / "big", "0::/\n", {"cpu.max": "800000 100000\n"})
    assert usable_cpus(root, proc) == 3  # the affinity is smaller than the quota


def test_usable_cpus_here_is_at_most_the_affinity():
    n = usable_cpus()
    assert 1 <= n <= (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def test_labs_grade_default_workers_is_usable_cpus(tmp_path, monkeypatch):
    """`labs grade FOLDER` without --workers grades usable_cpus() submissions at once."""
    from gpulab.grading import gradebook

    seen = {}

    class Pool:
        def __init__(self, max_workers):
            seen["workers"] = max_workers
            raise RuntimeError("stop here")

    monkeypatch.setattr(gradebook, "usable_cpus", lambda: 5)
    monkeypatch.setattr(gradebook, "ThreadPoolExecutor", Pool)
    monkeypatch.setattr(gradebook, "check_device", lambda device: None)
    subs = tmp_path / "subs" / "alice"
    subs.mkdir(parents=True)
    root = Path(__file__).resolve().parents[1]
    (subs / "lab01_threads.ipynb").write_text((root / "labs" / "student" / "lab01_threads.ipynb").read_text())
    with pytest.raises(RuntimeError, match="stop here"):
        gradebook.grade_folder(tmp_path / "subs", root / "labs" / "solutions", tmp_path / "out", progress=False)
    assert seen["workers"] == 5
