"""The checker's guard inside an nbgrader kernel (used by :class:`gpulab.grading.nbgrader_execute.SlicedExecute`).

``labs grade`` runs the checker in :mod:`gpulab.grading.runner`, which puts back what a submission patched before
each test cell. nbgrader's autograde runs the whole notebook in one kernel, so an answer cell could rebind
``problems.lab01.AFFINE.check`` or ``gpulab.grading.report`` and every check after it would pass. The autograde
preprocessor runs these three calls in the kernel, each in a hidden cell that prints one ``GPULAB_GUARD`` line:
:func:`start` before the notebook's first code cell (loads the checker and takes the runner's
:class:`~gpulab.grading.snapshot.Snapshot`), :func:`before_test` before each test cell (names what changed and puts
it back, so the real check runs), :func:`after_test` after it (what the check itself had changed: that cell
scores 0). It is defence in depth in a kernel the student's code shares; labs grade's sandbox is the stronger one.
"""

from __future__ import annotations

import json
import os
import sys

from .snapshot import Snapshot, load_checker

__all__ = ["MARK", "after_test", "before_test", "start"]

MARK = "GPULAB_GUARD "
_snap: Snapshot | None = None  # a plain global, set after the snapshot: a dict here would be one of its objects


def _say(**record: object) -> None:
    sys.stdout.write(MARK + json.dumps(record) + "\n")
    sys.stdout.flush()


def start() -> None:
    """Load everything a check uses and remember it (before any of the notebook's code runs)."""
    load_checker()
    import gpulab

    global _snap
    _snap = Snapshot(os.path.dirname(os.path.dirname(os.path.abspath(gpulab.__file__))))
    _say(started=True)


def before_test() -> None:
    """Name what the cells since the last check replaced, and put the checker back."""
    snap = _snap
    if snap is None:
        _say(replaced=[], error="the guard was not started")
        return
    replaced = snap.changes()
    snap.restore()
    _say(replaced=replaced)


def after_test() -> None:
    """Name what the check's own run changed (a kernel is Python in the simulator), and put it back."""
    snap = _snap
    if snap is None:
        _say(changed="", error="the guard was not started")
        return
    changed = snap.changed()
    snap.restore()
    _say(changed=changed)
