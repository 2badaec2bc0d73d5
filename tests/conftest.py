"""Tests run in simulator mode unless the environment says otherwise (make gpu-check sets gpu)."""

import os

os.environ.setdefault("GPULAB_DEVICE", "simulator")

import gpulab  # noqa: E402,F401  (fix the mode before any test imports numba)

import pytest  # noqa: E402

BROWSER_RUN = "test_lesson_notebooks_render_in_jupyterlab"  # tests/test_browser.py
LEARNER_RUN = "test_learner_version_runs_without_a_traceback"  # tests/test_lessons.py


@pytest.hookimpl(trylast=True)  # after -k, -m and --deselect have removed what will not run
def pytest_collection_modifyitems(config, items):
    """The lessons' learner versions run once per test session: in JupyterLab when the browser test is among
    the selected tests and can run here, else headless in tests/test_lessons.py (no Chromium, `-m "not
    browser"`, a run of test_lessons.py alone, make test-oldest)."""
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
