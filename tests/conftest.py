"""Tests run in simulator mode unless the environment says otherwise (make gpu-check sets gpu)."""

import os

os.environ.setdefault("GPULAB_DEVICE", "simulator")

import gpulab  # noqa: E402,F401  (fix the mode before any test imports numba)

import pytest  # noqa: E402

BROWSER_RUN = "test_lesson_notebooks_render_in_jupyterlab"  # tests/test_browser.py
# The files that take longest (seconds in one worker, `make test --durations`, 2 cores, 2026-12-01), run first:
# pytest-xdist's --dist loadfile hands files to workers in collection order, and a long file that starts last
# keeps one worker busy while the others wait (browser 280, grading attacks 150, nbgrader 100, lab 09 70,
# packaging 90, gpu sizes 100, nbexec 60, gpucheck 55, nbval checks 50, nbrun 45).
LONGEST_FIRST = (
    "tests/test_browser.py",
    "tests/test_grading_attacks.py",
    "tests/test_nbgrader.py",
    "tests/test_gpu_sizes.py",
    "tests/test_packaging.py",
    "labs/solutions/lab09_training.ipynb",
    "tests/test_nbexec.py",
    "tests/test_gpucheck.py",
    "tests/test_nbval_checks.py",
    "tests/test_nbrun.py",
)
LEARNER_RUN = "test_learner_version_runs_without_a_traceback"  # tests/test_lessons.py


@pytest.hookimpl(trylast=True)  # after -k, -m and --deselect have removed what will not run
def pytest_collection_modifyitems(config, items):
    """The longest files first (LONGEST_FIRST; the rest keep their order). And the lessons' learner versions
    run once per test session: in JupyterLab when the browser test is among the selected tests and can run
    here, else headless in tests/test_lessons.py (no Chromium, `-m "not browser"`, a run of test_lessons.py
    alone, make test-oldest)."""
    rank = {path: k for k, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
    if not any(item.name == BROWSER_RUN for item in items):
        return
    from test_browser import skip_reason

    if skip_reason() is not None:
        return
    skip = pytest.mark.skip(
        reason="tests/test_browser.py runs the learner versions in JupyterLab, with the same checks"
    )
    for item in items:
        if getattr(item, "originalname", "") == LEARNER_RUN:
            item.add_marker(skip)
