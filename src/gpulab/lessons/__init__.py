"""Lessons: exercises inside the lessons (check, reveal, predictions) and their learner versions.

``python -m gpulab lessons release|check`` (see :mod:`gpulab.lessons.learner`) writes and verifies
``notebooks/learner/``; :mod:`gpulab.lessons.problems` holds the exercises and the helpers lesson
cells call.
"""

from .learner import (
    LEARNER_DIR,
    CheckProblem,
    configure,
    learner_notebook,
    main,
    release,
    run,
    sources,
)
from .learner import check as check_learner
from .problems import (
    EXERCISES,
    Exercise,
    as_host,
    check,
    check_function,
    compare,
    exercise,
    or_reference,
    reveal,
)

__all__ = [
    "EXERCISES",
    "LEARNER_DIR",
    "CheckProblem",
    "Exercise",
    "as_host",
    "check",
    "check_function",
    "check_learner",
    "compare",
    "configure",
    "exercise",
    "learner_notebook",
    "main",
    "or_reference",
    "release",
    "reveal",
    "run",
    "sources",
]
