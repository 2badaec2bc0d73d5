"""ipywidgets explorers for the lessons (compatible with ipywidgets 7.7, as on Colab, and 8).

One module per topic; public names are re-exported here explicitly.
"""

from __future__ import annotations

__all__: list[str] = []

from .tiling import tile_explorer, tiling_figure, tiling_stats  # noqa: E402

__all__ += ["tile_explorer", "tiling_figure", "tiling_stats"]

from .memory_budget import memory_budget_explorer, memory_budget_report  # noqa: E402

__all__ += ["memory_budget_explorer", "memory_budget_report"]

from .threads import LaunchExplorer, LaunchExplorer2D, launch_explorer, launch_explorer_2d  # noqa: E402

__all__ += ["LaunchExplorer", "LaunchExplorer2D", "launch_explorer", "launch_explorer_2d"]

from .allreduce import allreduce_explorer, allreduce_report  # noqa: E402

__all__ += ["allreduce_explorer", "allreduce_report"]

from .kv_cache import kv_cache_explorer, kv_cache_report  # noqa: E402

__all__ += ["kv_cache_explorer", "kv_cache_report"]
