"""Who a note is for: the student's feedback page shows what concerns their work, the teacher sees everything.

A note or a row's message is the student's text, optionally followed by advice for the teacher, which starts with
:data:`FOR_TEACHER` (``"... Their code was not graded. For the teacher: have the student paste it into the
current student version"``); a note that is all advice starts with it. ``gradebook.csv``/``.json``, the class table
and ``labs grade``'s printout keep the whole text; the feedback page (:func:`gpulab.grading.gradebook.write_feedback`)
shows :func:`for_student`'s part only, and leaves out a note that has none.
"""

from __future__ import annotations

__all__ = ["FOR_TEACHER", "for_student", "for_teacher"]

FOR_TEACHER = "For the teacher: "


def for_teacher(student_text: str, advice: str) -> str:
    """``student_text`` followed by ``advice`` marked as the teacher's (``student_text`` may be "")."""
    advice = FOR_TEACHER + advice[0].lower() + advice[1:] if advice else ""
    if not student_text:
        return advice
    text = student_text.rstrip().rstrip(";:,")
    return f"{text}{' ' if text.endswith(('.', '?', '!')) else '. '}{advice}"


def for_student(text: str) -> str:
    """What of ``text`` the student sees: everything before the teacher's advice ("" when all of it is advice)."""
    cut = text.find(FOR_TEACHER)
    return text if cut < 0 else text[:cut].rstrip()
