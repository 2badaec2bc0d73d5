"""Lesson 08's dropout exercise, collected with the other exercises (defined in :mod:`.dropout`)."""

from __future__ import annotations

from .dropout import EXERCISES
from .exercise import Exercise

__all__ = ["EXERCISES_LIST"]

EXERCISES_LIST: list[Exercise] = list(EXERCISES)
