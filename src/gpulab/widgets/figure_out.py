"""Show a plotly figure inside an ``ipywidgets.Output``, on Colab too.

In JupyterLab and Jupyter Notebook a figure displayed inside an ``Output`` widget renders as anywhere else. On Colab
it can stay blank: the HTML plotly renders there loads plotly.js with a ``<script src=...>`` and draws with an
inline script, and inside an ``Output`` widget Colab inserts that HTML and runs its scripts without waiting for the
loaded one, so the drawing script finds no ``Plotly`` ("Uncaught ReferenceError: Plotly is not defined": open issue
googlecolab/colabtools#5889, 2026-03; #1458 before it). On Colab, :func:`show` therefore displays HTML whose one
inline script loads plotly.js itself (from plotly's CDN, the version the installed plotly bundles) and draws the
figure when it has loaded, or at once when an earlier figure of the same output frame loaded it. Elsewhere nothing
changes: the caller's own display call runs.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["colab_html", "on_colab", "show"]


def on_colab() -> bool:
    """Whether this kernel runs on Google Colab (its ``google.colab`` package is imported in every Colab kernel)."""
    return "google.colab" in sys.modules


def colab_html(fig: Any) -> str:
    """``fig`` as HTML that draws itself once plotly.js has loaded (see the module docstring)."""
    from plotly.offline import get_plotlyjs_version

    div = f"gpulab-figure-{uuid.uuid4().hex}"
    spec = fig.to_json().replace("</", "<\\/")  # no "</script>" inside the script, whatever a title says
    src = json.dumps(f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js")
    return f"""<div id="{div}"></div>
<script type="text/javascript">
(function () {{
  var fig = {spec};
  function draw() {{
    if (!document.getElementById("{div}")) {{ return; }}  // replaced meanwhile (a slider moved): nothing to draw
    Plotly.newPlot("{div}", fig.data, fig.layout || {{}}, {{responsive: true}});
  }}
  if (window.Plotly) {{ draw(); return; }}
  var waiting = window.__gpulabPlotlyWaiting = window.__gpulabPlotlyWaiting || [];
  waiting.push(draw);
  if (waiting.length > 1) {{ return; }}  // plotly.js is already loading: draw when it has
  var s = document.createElement("script");
  s.src = {src};
  s.onload = function () {{
    var todo = window.__gpulabPlotlyWaiting;
    window.__gpulabPlotlyWaiting = [];
    todo.forEach(function (f) {{ try {{ f(); }} catch (e) {{ console.warn("gpulab figure:", e); }} }});
  }};
  s.onerror = function () {{
    window.__gpulabPlotlyWaiting = [];
    var box = document.getElementById("{div}");
    if (box) {{
      box.textContent = "No figure: plotly.js could not be loaded from " + s.src + " (is the internet reachable " +
        "from this browser?). The numbers above and below do not depend on it.";
    }}
  }};
  document.head.appendChild(s);
}})();
</script>"""


def show(out: Any, fig: Any, display_fig: Callable[[], None] | None = None) -> None:
    """Replace what ``out`` (an ``ipywidgets.Output``) shows with ``fig``: by ``display_fig()`` (the caller's own
    call, e.g. ``fig.show()``; default ``display(fig)``), or on Colab as :func:`colab_html`."""
    from IPython.display import HTML, display

    out.clear_output(wait=True)
    with out:
        if on_colab():
            display(HTML(colab_html(fig)))
        elif display_fig is not None:
            display_fig()
        else:
            display(fig)
