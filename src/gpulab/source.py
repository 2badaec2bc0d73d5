"""Show a library kernel's source in a notebook, so lessons never copy kernels by hand."""

from __future__ import annotations

import inspect
import textwrap
from typing import Any

__all__ = ["kernel_source", "show_source"]


def _python_function(obj: Any) -> Any:
    """The plain Python function behind a CUDA kernel (gpu dispatcher or simulator kernel)."""
    for attr in ("py_func", "fn", "_func", "__wrapped__"):
        inner = getattr(obj, attr, None)
        if callable(inner) and inner is not obj:
            return _python_function(inner)
    return obj


def kernel_source(obj: Any) -> str:
    """The source text of a kernel, device function, launcher, class or module."""
    target = _python_function(obj)
    try:
        return textwrap.dedent(inspect.getsource(target))
    except (TypeError, OSError) as exc:
        raise TypeError(
            f"show_source expects a gpulab kernel, function, class or module, but got "
            f"{type(obj).__name__!r} whose source Python cannot find ({exc}). Pass the kernel "
            "itself, e.g. show_source(gpulab.kernels.add_kernel)."
        ) from None


def show_source(obj: Any, *, display: bool = True) -> str:
    """Display ``obj``'s source as a highlighted code block (in Jupyter) and return it."""
    src = kernel_source(obj)
    if display:
        try:
            from IPython import get_ipython
            from IPython.display import Markdown
            from IPython.display import display as ipy_display
        except ImportError:  # plain Python: print it
            print(src)
        else:
            if get_ipython() is not None:
                ipy_display(Markdown(f"```python\n{src}```"))
            else:
                print(src)
    return src
