"""Hints in tiers: ``lessons.hint("05", "dot_atomic")``.

The first call prints the idea (no code), the next an outline of the code, and after the last tier the hint
says that ``lessons.reveal`` shows the whole answer. The tier reached is kept per exercise for this Python
session (a restarted kernel starts again at the idea); ``lessons.hint(lesson, name, 1)`` shows tier 1 again
without moving on. The texts live in the ``hints_*.py`` modules of this package, as ``HINTS``, one entry per
exercise (and per task that has no check, such as lesson 01's ``block_shape``, whose last tier is its answer).
"""

from __future__ import annotations

__all__ = ["forget", "hint"]

_REACHED: dict[tuple[str, str], int] = {}  # (lesson, name) -> how many tiers this session has shown

_TIER_NAMES = ("the idea", "an outline")


def forget() -> None:
    """Start every exercise's hints again at the first tier (as a restarted kernel would)."""
    _REACHED.clear()


def hint(lesson: str | int, name: str, tier: int | None = None) -> None:
    """Print the next hint for exercise ``name`` of ``lesson`` (``tier``: that tier again, counted from 1)."""
    from ..errors import UsageError
    from .problems import EXERCISES, FUNCTION_EXERCISES, exercise_key, hints_of

    les, key_name = exercise_key(lesson, name)
    tiers = hints_of(les, key_name)  # raises, naming the valid names, for an unknown exercise
    key = (les, key_name)
    if key in EXERCISES:
        answer = f'`lessons.reveal("{les}", "{key_name}")` shows the reference answer'
    elif key in FUNCTION_EXERCISES:
        answer = f"the worked lesson, notebooks/{les}_*.ipynb (not the one in notebooks/learner/), has the answer"
    else:
        answer = ""  # a task without a check: its last tier is the answer
    has_answer = bool(answer)
    call = f'lessons.hint("{les}", "{key_name}")'
    if tier is not None:
        if not (isinstance(tier, int) and 1 <= tier <= len(tiers)):
            raise UsageError(f"{call}: tier must be 1 to {len(tiers)}, got {tier!r}; or leave it out for the next one.")
        k = tier - 1
    else:
        k = _REACHED.get(key, 0)
        _REACHED[key] = k + 1
    if k >= len(tiers):
        if has_answer:
            print(
                f"No more hints for {les}/{key_name} ({len(tiers)} shown; {call[:-1]}, 1) shows the first again). "
                f"{answer[:1].upper()}{answer[1:]}: read it, then write yours without looking and run the check "
                "cell again."
            )
        else:
            print(f"No more hints for {les}/{key_name}: the last one was the answer. Hint {len(tiers)}: {tiers[-1]}")
        return
    what = _TIER_NAMES[k] if k < len(_TIER_NAMES) and (has_answer or k < len(tiers) - 1) else "the answer"
    if k + 1 < len(tiers):
        then = f"Call {call} again for the next hint."
    elif has_answer:
        then = f"Still stuck? {answer[:1].upper()}{answer[1:]}."
    else:
        then = ""
    print(f"Hint {k + 1} of {len(tiers)} for {les}/{key_name} ({what}): {tiers[k]}" + (f"\n{then}" if then else ""))
