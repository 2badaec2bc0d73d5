"""nbgrader's feedback pages without the hidden tests: a preprocessor for ``generate_feedback``.

``teachers/nbgrader_config.py`` runs nbgrader's ``ClearHiddenTests`` on the feedback, which takes the
hidden region out of each test cell's code; but when a test cell raised (``NameError``: the answer
cell never defined the kernel), the traceback in its output still quotes the lines around the error,
hidden tests included. :class:`ShortTracebacks` cuts a test cell's traceback to its last line,
``NameError: name 'saxpy_kernel' is not defined``, which is what the student needs, and keeps the line
:mod:`gpulab.notebook_hints` adds under it (which cell to re-run; it quotes no code).
"""

from __future__ import annotations

from typing import Any

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

__all__ = ["ShortTracebacks"]


class ShortTracebacks(Preprocessor):
    """In nbgrader test cells, replace each error's traceback by ``ename: evalue`` (and gpulab's hint line)."""

    enabled = Bool(True, help="nbconvert runs only enabled preprocessors (its default is False)").tag(config=True)

    def preprocess_cell(self, cell: Any, resources: Any, index: int) -> tuple[Any, Any]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if (
            cell.get("cell_type") == "code"
            and isinstance(meta, dict)
            and meta.get("grade")
            and not meta.get("solution")
        ):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    hints = [ln for ln in out.get("traceback", []) if str(ln).startswith("gpulab: ")]
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}", *hints]
        return cell, resources
