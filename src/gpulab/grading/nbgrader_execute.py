"""nbgrader's ``Execute`` preprocessor starting each kernel with :class:`~gpulab.grading.sliced.SlicedKernelManager`.

nbgrader's ``Execute`` (0.9) passes ``kernel_manager_class=AsyncKernelManager`` to nbclient itself, so configuration
cannot change the manager class, only settings every kernel shares. A shared unix-socket name
(``c.KernelManager.ip``) would serve one kernel at a time: two kernels alive at once in one nbgrader process (two
autogrades in one formgrader server, or a student's forked child still holding the last kernel's sockets) would
bind the same abstract name and one would die with "Address already in use", the TCP race over again.
:class:`SlicedExecute` gives nbclient gpulab's manager: each kernel gets socket names of its own
(:mod:`gpulab.grading.ipc`) and the client that waits in 1 s slices (:mod:`gpulab.grading.sliced`).
``teachers/nbgrader_config.py`` puts it in place of ``Execute`` with :func:`autograde_preprocessors`.

It also guards the checker (:mod:`gpulab.grading.guard`, the runner's snapshot): before a test cell it puts back
what the answer cells replaced (``AFFINE.check = ...``) and says so in the cell's output, so the real check scores
the work as ``labs grade`` does; a check during which the checker changed gets an error output (nbgrader: 0).
"""

from __future__ import annotations

import json
from typing import Any

from nbformat import NotebookNode
from nbgrader.preprocessors import Execute  # type: ignore[import-untyped]

from .grader import replaced_note
from .guard import MARK

from .sliced import SlicedKernelManager

__all__ = ["SlicedExecute", "autograde_preprocessors"]


class SlicedExecute(Execute):
    """nbgrader's ``Execute`` (its configuration, ``c.Execute.timeout`` etc., applies) with gpulab's kernel manager."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("kernel_manager_class", SlicedKernelManager)
        super().__init__(*args, **kwargs)

    def preprocess(self, nb: Any, resources: Any = None, km: Any = None) -> Any:
        self._guarded = False  # a new kernel for each notebook: start the guard before its first code cell
        return super().preprocess(nb, resources, km=km)

    def _guard(self, call: str, index: int) -> dict:
        """Run ``gpulab.grading.guard.<call>()`` in the kernel in a cell of its own; its GPULAB_GUARD record."""
        probe = NotebookNode(cell_type="code", source=f"import gpulab.grading.guard\ngpulab.grading.guard.{call}()")
        probe.metadata, probe.outputs = NotebookNode(), []
        real = self.nb.cells[index]
        try:
            self.execute_cell(probe, index, store_history=False)
        finally:
            self.nb.cells[index] = real  # nbclient stores the executed cell at its index
        text = "".join(o.get("text", "") for o in probe.outputs if o.get("output_type") == "stream")
        lines = [ln[len(MARK) :] for ln in text.splitlines() if ln.startswith(MARK)]
        errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in probe.outputs if o.get("output_type") == "error"]
        try:
            return json.loads(lines[-1]) if lines else {"error": "; ".join(errors) or "no answer from the guard"}
        except ValueError:
            return {"error": "the guard's answer could not be read"}

    def preprocess_cell(self, cell: Any, resources: Any, index: int) -> Any:
        if cell.cell_type != "code":
            return super().preprocess_cell(cell, resources, index)
        if not self._guarded:
            self._guarded = True
            self._guard("start", index)
        meta = cell.metadata.get("nbgrader", {})
        if not (meta.get("grade") and not meta.get("solution")):
            return super().preprocess_cell(cell, resources, index)
        before = self._guard("before_test", index)
        cell, resources = super().preprocess_cell(cell, resources, index)
        after = self._guard("after_test", index)
        if before.get("replaced"):  # stdout: the feedback shows it, nbgrader's score does not change
            note = NotebookNode(output_type="stream", name="stdout", text=replaced_note(before["replaced"]) + "\n")
            cell.outputs.insert(0, note)
        broken = after.get("changed") or after.get("error") or before.get("error")
        if broken:  # an error output: nbgrader scores the cell 0, as labs grade's "tampered"
            why = f"the checker was changed while this exercise ran: {broken}"
            cell.outputs.append(NotebookNode(output_type="error", ename="Tampered", evalue=why, traceback=[why]))
        return cell, resources


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
