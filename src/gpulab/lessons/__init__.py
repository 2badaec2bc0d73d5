"""Lessons: exercises inside the lessons (check, hint, reveal, progress, predictions) and their learner versions.

Working through a lesson's exercise::

    result = lessons.check("05", "dot_atomic", dot_atomic_kernel)  # a verdict: what is wrong, where, and a hint
    lessons.hint("05", "dot_atomic")      # stuck? 1st call: the idea, 2nd: an outline of the code,
                                          # then: a pointer to reveal (lessons.hint(..., 1) shows tier 1 again)
    lessons.reveal("05", "dot_atomic")    # the reference answer
    lessons.progress("05")                # this session's table: passed / failed (status) / not tried, N of M done

Hints (:mod:`.hints`) and the verdicts ``progress`` tallies (:mod:`.tally`) are kept per Python session.
``python -m gpulab lessons release|check`` (see :mod:`gpulab.lessons.learner`) writes and verifies
``notebooks/learner/``; :mod:`gpulab.lessons.problems` holds the exercises and the helpers lesson
cells call; the hint texts are in the ``hints_*.py`` modules.
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
from .hints import hint
from .problems import (
    EXERCISES,
    FUNCTION_EXERCISES,
    Exercise,
    as_host,
    check,
    check_function,
    compare,
    exercise,
    or_reference,
    reveal,
)
from .roofline import naive_matmul_note
from .tally import Progress, progress

__all__ = [
    "EXERCISES",
    "FUNCTION_EXERCISES",
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
    "hint",
    "learner_notebook",
    "main",
    "naive_matmul_note",
    "or_reference",
    "progress",
    "Progress",
    "release",
    "reveal",
    "run",
    "sources",
]
