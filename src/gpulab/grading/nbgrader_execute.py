"""nbgrader's ``Execute`` preprocessor starting each kernel with :class:`~gpulab.grading.sliced.SlicedKernelManager`.

nbgrader's ``Execute`` (0.9) passes ``kernel_manager_class=AsyncKernelManager`` to nbclient itself, so configuration
cannot change the manager class, only settings every kernel shares. A shared unix-socket name
(``c.KernelManager.ip``) would serve one kernel at a time: two kernels alive at once in one nbgrader process (two
autogrades in one formgrader server, or a student's forked child still holding the last kernel's sockets) would
bind the same abstract name and one would die with "Address already in use", the TCP race over again.
:class:`SlicedExecute` gives nbclient gpulab's manager: each kernel gets socket names of its own
(:mod:`gpulab.grading.ipc`) and the client that waits in 1 s slices (:mod:`gpulab.grading.sliced`).
``teachers/nbgrader_config.py`` puts it in place of ``Execute`` with :func:`autograde_preprocessors`.
"""

from __future__ import annotations

from typing import Any

from nbgrader.preprocessors import Execute  # type: ignore[import-untyped]

from .sliced import SlicedKernelManager

__all__ = ["SlicedExecute", "autograde_preprocessors"]


class SlicedExecute(Execute):
    """nbgrader's ``Execute`` (its configuration, ``c.Execute.timeout`` etc., applies) with gpulab's kernel manager."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("kernel_manager_class", SlicedKernelManager)
        super().__init__(*args, **kwargs)


def autograde_preprocessors() -> list[Any]:
    """nbgrader's default ``Autograde.autograde_preprocessors`` with ``Execute`` replaced by :class:`SlicedExecute`;
    raises ``RuntimeError`` if this nbgrader has no ``Execute`` there to replace (a version gpulab does not know)."""
    from nbgrader.converters.autograde import Autograde  # type: ignore[import-untyped]

    default = list(Autograde.class_traits()["autograde_preprocessors"].default())
    if Execute not in default:
        raise RuntimeError(
            f"this nbgrader's autograde preprocessors ({', '.join(getattr(p, '__name__', str(p)) for p in default)}) "
            "have no Execute to replace: gpulab's nbgrader_config.py knows nbgrader 0.9. Remove the "
            "autograde_preprocessors line from nbgrader_config.py to grade with nbgrader's own."
        )
    return [SlicedExecute if p is Execute else p for p in default]
