"""ipywidgets explorers for the lessons (compatible with ipywidgets 7.7, as on Colab, and 8).

One module per topic; public names are re-exported here explicitly.
"""

from __future__ import annotations

__all__: list[str] = []
