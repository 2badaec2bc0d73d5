"""``make gpu-check``'s plan: which stages run, in which order, with which commands and budgets.

:data:`STAGES` is the order (the GPU tests third, so that a slow run still brings back their verdicts), and
:data:`BUDGET` each stage's seconds within :data:`DEADLINE`; :func:`stages` builds the commands: the preflight,
``gpulab doctor``, the tests in :data:`GPU_TESTS` (pytest, at most :data:`TEST_TIMEOUT` seconds a test on a GPU),
the lessons and lab solutions through :mod:`gpulab.nbexec` (:func:`notebook_paths`: slowest first, :data:`ALONE`
after the others), and the benchmarks. How they are run, each within its budget, is
:func:`gpulab.gpucheck.run_stages`.

Standard library only: ``python3 src/gpulab/gpucheck.py`` imports it from its own folder, before gpulab is installed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

try:
    from .gpucheck_files import preflight_code
except ImportError:  # run as a script: python3 src/gpulab/gpucheck.py (its folder is on sys.path)
    from gpucheck_files import preflight_code  # type: ignore[no-redef,import-not-found]

__all__ = [
    "ALONE",
    "BUDGET",
    "DEADLINE",
    "GPU_TESTS",
    "REPO",
    "SLOW_FIRST",
    "STAGES",
    "TESTS_LOG",
    "TEST_TIMEOUT",
    "jobs",
    "notebook_paths",
    "stages",
]

# The checkout (site-packages where gpulab is installed as a package: no notebooks or tests beside it then).
REPO = Path(__file__).resolve().parents[2]
# The GPU tests run third: they are the stage written to find gpu-mode bugs, and the stages after them take what is
# left of --deadline (their budgets add up to more), so a slow first run still brings back the tests' verdicts.
STAGES = ("preflight", "doctor", "tests", "notebooks", "bench-kernels", "bench-lessons", "bench-cnn", "cnn-kernels")
# Seconds per stage at most; --deadline (all stages together) cuts the last ones short when it must.
BUDGET: dict[str, float] = {
    "preflight": 30,
    "doctor": 40,  # in gpu mode it also compiles and runs a one-line kernel (NVVM found?)
    "notebooks": 210,
    "bench-kernels": 100,  # 15 s at 1M-16M elements (H200, 2026-12-04); the 2**28 sizes add 20-45 s of host work
    "bench-lessons": 70,
    "bench-cnn": 50,
    "cnn-kernels": 40,
    "tests": 90,
}
DEADLINE = 7 * 60
# Seconds one GPU test may take (pytest-timeout, signal method; pyproject's 900 s is for the simulator): a test stuck in
# Python (a host loop, a wait on a lock) fails alone and the others still run. A kernel that never ends blocks inside
# the driver, where the signal is not seen until the call returns: then only the stage's budget stops it.
TEST_TIMEOUT = 45
# Run first: the notebooks that take longest (lab09 and lesson 09 train on MNIST).
SLOW_FIRST = ("lab09", "09_", "lab12", "12_", "10_", "05_", "04_")
# Run one at a time, after the others: notebooks whose text or checks compare timings. Among 8 notebooks sharing the
# H200 (2026-12-04) lesson 02's stride-4 copy measured faster than its stride-1 copy, lesson 06's FP16/FP32 speed-up
# 34.7x (13.9x alone), and lab 05's prediction of which softmax is faster was judged on disturbed medians.
ALONE = ("notebooks/02_", "notebooks/06_", "lab05")  # parts of paths: "02_" alone would match lab02 too
# Unit tests that exercise kernels, layers and exercise checks (gpu mode: on the GPU, at their sizes).
GPU_TESTS = (
    "tests/test_kernels_elementwise.py",
    "tests/test_kernels_launch.py",
    "tests/test_kernels_matmul.py",
    "tests/test_kernels_memory.py",
    "tests/test_kernels_reduce.py",
    "tests/test_kernels_scan.py",
    "tests/test_kernels_histogram.py",  # global and shared-memory integer atomics, uniform and one-bin data
    "tests/test_nn_ops.py",
    "tests/test_splitk.py",  # the kernels backend's GEMM: split-K at the CNN's shapes against cuBLAS
    "tests/gpu_emulation/checks_capstone.py",  # the capstone's guard: checks held on the GPU, read twice a step
    "tests/gpu_emulation/checks_train_reads.py",  # fit's sums on the GPU: a NaN loss named at the next read
    "tests/test_conv.py",
    "tests/test_attention.py",
    "tests/test_exercises_elementwise.py",
    "tests/test_exercises_matmul.py",
    "tests/test_exercises_reduce.py",
    "tests/test_check_output_fd.py",  # CUDA printf kept aside during a check (fd 1): only a GPU shows it
    "tests/test_warps_both_modes.py",  # the simulator's warp-function rules, checked by the hardware
    "tests/test_simulator_ufuncs.py",  # GPU ufuncs: numba-cuda's dispatch, which the simulator runs, on a GPU
    "tests/test_dropout.py",  # numba.cuda.random in a kernel, states passed as CuPy uint64 words viewed as records
    "tests/test_lesson05_histogram.py",  # the privatized histogram's reference through the harness on a GPU
    "tests/test_lab05_confusion.py",  # lab 05's confusion matrix (shared atomics, 2-D global atomics) and its PTX
    "tests/test_lab08_dropout.py",  # the lab's forward/backward replay and the states copy, on CuPy arrays
    "tests/test_nn_dropout.py",  # the nn engine's dropout ops on the cupy and kernels backends: CuPy states as records
    "tests/test_nn_state.py",  # save/load/resume and .to() of model and optimizer state with CuPy arrays, bit for bit
    "tests/test_nn_amp.py",  # mixed precision's masters and loss scale: resume bit for bit and .to('cupy') on a GPU
    "tests/test_lessons_device_fns.py",  # a learner's device function inside a real kernel, and its PTX
    "tests/test_ptxas.py",  # lesson 04's register counts: numba-cuda's on this GPU against the wheel's ptxas
    "tests/test_exercises_own_code.py",  # the own-code walk over numba-cuda's dispatchers and the shipped answers
)

# The tests stage's outcomes, a JSON line per test as it ends (gpulab.gpucheck_pytest): kept if the stage is stopped.
TESTS_LOG = "tests.jsonl"


def jobs() -> int:
    """Processes for the notebooks and the tests stages: half the CPUs, 2 to 8 (they share the one GPU)."""
    return max(2, min(8, (os.cpu_count() or 2) // 2))


def notebook_paths(patterns: list[str] | None = None) -> list[str]:
    """Lessons and lab solutions (those matching any of ``patterns``, if given), slowest first."""
    paths = sorted(REPO.glob("notebooks/*.ipynb")) + sorted(REPO.glob("labs/solutions/*.ipynb"))
    names = [str(p.relative_to(REPO)) for p in paths]
    if patterns:
        names = [n for n in names if any(pat in n for pat in patterns)]

    def rank(name: str) -> int:
        stem = Path(name).name
        return next((i for i, pre in enumerate(SLOW_FIRST) if stem.startswith(pre)), len(SLOW_FIRST))

    return sorted(names, key=rank)


def stages(
    py: Path | str,
    out: Path,
    *,
    record: bool = True,
    notebooks: list[str] | None = None,
    budget: dict[str, float] | None = None,
) -> list[tuple[str, list[str]]]:
    """The gpu-mode commands, in order (``record=False``: nothing is recorded, for --rehearse)."""
    py_s = str(py)
    rec = ["--record"] if record else []
    todo: list[tuple[str, list[str]]] = [
        ("preflight", [py_s, "-c", preflight_code()]),
        ("doctor", [py_s, "-m", "gpulab", "doctor"]),
    ]
    n_jobs = jobs()  # processes for notebooks and tests: half the CPUs, <= 8
    nbs = notebook_paths(notebooks)
    if nbs:
        limit = int((budget or BUDGET)["notebooks"]) - 10  # nbexec stops its notebooks itself, before the stage does
        nb_cmd = [py_s, "-m", "gpulab.nbexec", *nbs, "--out", str(out / "notebooks"), "--jobs", str(n_jobs)]
        nb_cmd += ["--alone", ",".join(ALONE)]
        todo.append(("notebooks", [*nb_cmd, "--timeout", str(limit), "--cell-timeout", str(limit)]))
    kernels = [py_s, "-m", "gpulab", "bench", "kernels", *rec, "--json", str(out / "kernels.json")]
    todo.append(("bench-kernels", [*kernels, "--html", str(out / "kernels.html")]))
    todo.append(
        ("bench-lessons", [py_s, "-m", "gpulab", "bench", "lessons", *rec, "--json", str(out / "lessons.json")])
    )
    # found, not imported: importing PyTorch took 10-20 s of --deadline on a cold GPU image, before any stage ran
    # (the preflight imports it anyway and says whether it works)
    find = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)"
    try:
        has_torch = subprocess.run([py_s, "-c", find], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        has_torch = False
    compare = ["--compare", "torch"] if has_torch else []
    cnn = [py_s, "-m", "gpulab", "bench", "cnn", *compare]
    todo.append(("bench-cnn", [*cnn, *rec, "--rounds", "2", "--json", str(out / "cnn.json")]))
    # The capstone's backend: gpulab's reference kernels (the lab solutions' twins), not recorded; its
    # speed in the simulator means nothing, so `bench cnn` refuses it there and a rehearsal leaves it out.
    if record:
        todo.append(
            (
                "cnn-kernels",
                [*cnn, "--backend", "kernels", "--rounds", "1", "--per-op", "--json", str(out / "cnn-kernels.json")],
            )
        )
    pytest = [py_s, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", str(n_jobs), "--dist", "loadfile"]
    # each test's outcome and error written as it ends (pytest prints failures only at its end, which a stage
    # stopped at its budget never reaches); on the GPU a test stuck in Python fails at TEST_TIMEOUT, not the stage
    pytest += ["-p", "gpulab.gpucheck_pytest", "--gpucheck-log", str(out / TESTS_LOG)]
    pytest += ["-o", f"timeout={TEST_TIMEOUT}"] if record else []
    todo.append(("tests", [*pytest, *[t for t in GPU_TESTS if (REPO / t).exists()]]))
    return sorted(todo, key=lambda stage: STAGES.index(stage[0]))
