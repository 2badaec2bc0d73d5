"""Explorer figures on Colab: drawn by HTML that loads plotly.js before drawing (gpulab.widgets.figure_out).

Colab inserts an ``Output`` widget's HTML and runs its scripts without waiting for a ``<script src=...>`` to load, so
plotly's own HTML finds no ``Plotly`` there (googlecolab/colabtools#5889). No Colab here: the browser test inserts
both HTMLs into a page the way such a frontend does (innerHTML, then each script re-created, which makes a ``src``
script load asynchronously), with plotly's CDN served from the installed plotly's own plotly.min.js.
"""

from __future__ import annotations

import contextlib
import sys
import types
from pathlib import Path

import plotly.graph_objects as go
import pytest

import gpulab  # noqa: F401  (picks the mode before numba loads)
from gpulab.widgets import figure_out


def _fig(title: str = "threads") -> go.Figure:
    return go.Figure(go.Bar(x=[1, 2, 3], y=[3, 1, 2]), layout={"title": {"text": title}, "height": 300})


def test_the_html_loads_the_bundled_plotly_version_and_escapes_the_figure():
    from plotly.offline import get_plotlyjs_version

    html = figure_out.colab_html(_fig("a </script><b>title</b>"))
    assert f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js" in html
    assert html.count("</script>") == 1 and "title" in html  # the title cannot end the script
    assert 'Plotly.newPlot("gpulab-figure-' in html and '"x":[1,2,3]' in html.replace(" ", "")


class _Out:
    """An ``ipywidgets.Output`` as far as :func:`figure_out.show` uses it."""

    def __init__(self) -> None:
        self.cleared = 0

    def clear_output(self, wait: bool = False) -> None:
        self.cleared += 1

    def __enter__(self) -> _Out:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def test_only_colab_gets_the_html(monkeypatch):
    import IPython.display

    shown: list = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    calls: list = []
    out = _Out()
    figure_out.show(out, _fig(), lambda: calls.append("own"))
    assert calls == ["own"] and shown == [] and out.cleared == 1  # JupyterLab: the caller's own display call
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    figure_out.show(out, _fig(), lambda: calls.append("own"))
    assert calls == ["own"] and len(shown) == 1 and out.cleared == 2
    assert "gpulab-figure-" in shown[0].data


def test_every_explorer_goes_through_it_on_colab(monkeypatch):
    """The three figure outputs (launch explorers, the tiling explorer, the generic explorer of lessons 10-12)."""
    import IPython.display

    from gpulab.widgets import explorer, threads, tiling

    shown: list = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    threads.LaunchExplorer()
    threads.LaunchExplorer2D()
    tiling.tile_explorer()
    explorer.explorer({}, lambda values: (_fig(), "<b>summary</b>"), first_row=0)
    htmls = [s for s in shown if "gpulab-figure-" in getattr(s, "data", "")]
    assert len(htmls) == 4, [type(s) for s in shown]
    assert not [s for s in shown if isinstance(s, go.Figure)]


INSERT_LIKE_A_FRONTEND = """(html) => {
  const box = document.createElement("div");
  document.body.appendChild(box);
  box.innerHTML = html;
  for (const old of Array.from(box.querySelectorAll("script"))) {
    const s = document.createElement("script");
    for (const a of Array.from(old.attributes)) s.setAttribute(a.name, a.value);
    s.text = old.text;
    old.replaceWith(s);
  }
}"""

# the number of figures plotly has drawn (each holds several .main-svg layers)
DRAWN = (
    "(n) => Array.from(document.querySelectorAll('.js-plotly-plot')).filter(p => p.querySelector('.main-svg')).length"
    " == n"
)


@pytest.mark.browser
def test_in_a_browser_plotlys_html_fails_as_on_colab_and_gpulabs_draws():
    try:
        from test_browser import CHROMIUM, CHROMIUM_ARGS
    except ImportError:  # run from another directory
        sys.path.insert(0, str(Path(__file__).parent))
        from test_browser import CHROMIUM, CHROMIUM_ARGS
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: install it with `apt-get install -y chromium`")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[test]'")
    import plotly

    js = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    with (
        sync_api.sync_playwright() as pw,
        contextlib.closing(
            pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        ) as browser,
    ):
        errors: list[str] = []

        def fresh(cdn: bool = True):  # a new page (no plotly.js loaded yet); plotly's CDN served from the package
            page = browser.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            if cdn:
                page.route("https://cdn.plot.ly/**", lambda r: r.fulfill(body=js, content_type="text/javascript"))
            else:
                page.route("https://cdn.plot.ly/**", lambda r: r.abort())
            page.set_content("<html><head></head><body></body></html>")
            assert page.evaluate("() => typeof window.Plotly") == "undefined"
            return page

        # plotly's own HTML (as its renderers make it, plotly.js from the CDN): the drawing script runs first
        page = fresh()
        page.evaluate(INSERT_LIKE_A_FRONTEND, _fig().to_html(include_plotlyjs="cdn", full_html=False))
        page.wait_for_function("() => window.Plotly !== undefined", timeout=20_000)
        assert any("Plotly is not defined" in e for e in errors), errors
        assert page.locator(".js-plotly-plot").count() == 0
        # gpulab's: two figures inserted while plotly.js loads, then one after it has; all three drawn
        errors.clear()
        page = fresh()
        page.evaluate(INSERT_LIKE_A_FRONTEND, figure_out.colab_html(_fig("one")))
        page.evaluate(INSERT_LIKE_A_FRONTEND, figure_out.colab_html(_fig("two")))
        page.wait_for_function(DRAWN, arg=2, timeout=20_000)
        page.evaluate(INSERT_LIKE_A_FRONTEND, figure_out.colab_html(_fig("three")))
        page.wait_for_function(DRAWN, arg=3, timeout=20_000)
        assert errors == []
        assert page.locator(".gtitle").all_text_contents() == ["one", "two", "three"]
        # a figure replaced before plotly.js arrived (a slider moved: clear_output) does not stop the next one
        page = fresh()
        page.evaluate(INSERT_LIKE_A_FRONTEND, figure_out.colab_html(_fig("gone")))
        page.evaluate("() => document.body.firstElementChild.remove()")
        page.evaluate(INSERT_LIKE_A_FRONTEND, figure_out.colab_html(_fig("kept")))
        page.wait_for_function(DRAWN, arg=1, timeout=20_000)
        assert page.locator(".gtitle").all_text_contents() == ["kept"] and errors == []
        # no network to plotly's CDN: the figure's place says so instead of staying blank
        page = fresh(cdn=False)
        page.evaluate(INSERT_LIKE_A_FRONTEND, figure_out.colab_html(_fig("offline")))
        page.wait_for_function("() => document.body.textContent.includes('plotly.js could not be loaded')")
