"""A kind line under a NameError in a notebook: the cell that defines the name has not run, or stopped.

A learner whose kernel cell fails (a syntax error, an exception) and who then runs the check cell meets
``NameError: name 'matvec_kernel' is not defined`` with no hint that the earlier cell is the one to fix.
:func:`install_name_hint` (called by :func:`gpulab.banner`, which every notebook runs first) adds one line
under IPython's usual traceback saying so. The error stays an error: the cell fails as before (nbclient
raises, nbgrader scores it 0), only its traceback gains the line. Outside IPython it does nothing.
"""

from __future__ import annotations

import ast
import re
import sys
from typing import Any

__all__ = ["install_name_hint", "name_hint"]

_NOT_DEFINED = re.compile(r"name '([A-Za-z_][A-Za-z0-9_]*)' is not defined")


def _top_level_names(tree: ast.Module) -> set[str]:
    """The names a module's own code binds (not those local to its functions and classes)."""
    names: set[str] = set()
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            todo.extend(node.decorator_list)
            continue  # its body's names are its own
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue  # their variables are their own (`[i for i in ...]` leaves no `i`)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        todo.extend(ast.iter_child_nodes(node))
    return names


def _defined_in(source: str, name: str) -> bool:
    """Whether ``source`` (a cell's code) defines ``name`` at its top level (``def``/``class``, an assignment, an
    import), not as a local of a function in it (a kernel's ``i = cuda.grid(1)`` does not define ``i``)."""
    try:
        return name in _top_level_names(ast.parse(source))
    except (SyntaxError, ValueError):  # a cell that does not parse (the usual reason its names are missing)
        n = re.escape(name)
        return bool(
            re.search(rf"^(async\s+def|def|class)\s+{n}\b", source, re.M)
            or re.search(rf"^{n}\s*(:[^=\n]*)?=(?!=)", source, re.M)
            or re.search(rf"^(from\s+\S+\s+)?import\s.*\b{n}\b", source, re.M)
        )


def name_hint(message: str, history: list[str] | None = None) -> str:
    """The line to show under a NameError whose text is ``message`` ("" for a NameError of another kind).
    ``history``: the code of the cells run so far, this one last (IPython's ``In``), to tell "never ran" from
    "stopped" from "defined further down this cell"."""
    m = _NOT_DEFINED.search(message)
    if not m:
        return ""
    name = m.group(1)
    *earlier, current = history or [""]  # IPython stores a cell in In before it runs: the last is this cell
    if isinstance(current, str) and _defined_in(current, name):
        return (
            f"gpulab: `{name}` is used in this cell before the line that defines it has run. Define `{name}` "
            "above its first use (or run the cell that defines it first), then run this cell again."
        )
    ran = [k for k, src in enumerate(earlier) if k and isinstance(src, str) and _defined_in(src, name)]
    if ran:
        return (
            f"gpulab: `{name}` is not defined because the cell that defines it (In [{ran[-1]}]) stopped with an "
            f"error before `{name}` was defined. Fix that cell's error, run it again, then run this cell again."
        )
    return (
        f"gpulab: `{name}` is not defined: the cell that defines it has not run yet, or it stopped with an error. "
        "Run that cell (fix its error first, if it shows one), then run this cell again. "
        f"If `{name}` should already exist, check its spelling."
    )


def _handler(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> list[str]:
    """IPython's custom exception handler: the usual traceback, then the hint line (shown and returned)."""
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb  # for %debug, as showtraceback() does
    if sys.version_info >= (3, 12):
        sys.last_exc = value
    stb = list(shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset))
    history = shell.user_ns.get("In")
    hint = name_hint(str(value), history if isinstance(history, list) else None)
    if hint:
        stb.append(hint)
    shell._showtraceback(etype, value, stb)  # as showtraceback() does: the cell's error output, status error
    return stb


_handler.gpulab_name_hint = True  # type: ignore[attr-defined]


def install_name_hint() -> bool:
    """Under IPython, show :func:`name_hint` under NameErrors (once; idempotent). Leaves a custom exception
    handler that someone else installed alone. Returns whether the hint is installed."""
    ipython = sys.modules.get("IPython")  # not imported: not running under IPython (and no need to import it)
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return False
    current = getattr(shell, "custom_exceptions", ())
    if current == (NameError,) and getattr(getattr(shell, "gpulab_name_hint", None), "gpulab_name_hint", False):
        return True
    if current:
        return False  # another handler is installed: do not replace it
    shell.set_custom_exc((NameError,), _handler)
    shell.gpulab_name_hint = _handler
    return True
