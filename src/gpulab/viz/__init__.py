"""Plotly figures for the lessons (each function returns a ``plotly.graph_objects.Figure``).

One module per topic; public names are re-exported here explicitly.
"""

from __future__ import annotations

__all__: list[str] = []

from .precision import precision_bars, spec_peak_bars  # noqa: E402

__all__ += ["precision_bars", "spec_peak_bars"]

from .matmul import (
    ladder_rows_percent,
    loads_per_output_bars,
    matmul_ladder_chart,
    normalize_ladder_rows,  # noqa: E402
    read_count_heatmaps,
)

__all__ += [
    "ladder_rows_percent",
    "loads_per_output_bars",
    "matmul_ladder_chart",
    "normalize_ladder_rows",
    "read_count_heatmaps",
]

from .scaling import memory_budget_figure, pipeline_figure, tensor_parallel_figure  # noqa: E402

__all__ += ["memory_budget_figure", "pipeline_figure", "tensor_parallel_figure"]

from .memory import bank_conflicts, roofline, warp_access  # noqa: E402
from .perf import speed_bars, speed_lines  # noqa: E402
from .threads import divergence_counts, divergence_map, launch_summary, thread_map, thread_map_2d, warp_paths  # noqa: E402

__all__ += ["bank_conflicts", "divergence_counts", "divergence_map", "warp_paths"]
__all__ += ["launch_summary", "roofline", "speed_bars", "speed_lines", "thread_map", "thread_map_2d", "warp_access"]

from .training import (
    confusion_matrix,
    confusion_matrix_figure,
    filters_figure,
    misclassified_figure,  # noqa: E402
    training_curves,
    update_training_curves,
)

__all__ += [
    "confusion_matrix",
    "confusion_matrix_figure",
    "filters_figure",
    "misclassified_figure",
    "training_curves",
    "update_training_curves",
]

from .backprop import backward_flow  # noqa: E402
from .conv import conv_window, im2col_layout  # noqa: E402
from .reduce import reduction_tree, scan_steps, shuffle_steps  # noqa: E402

__all__ += ["backward_flow", "conv_window", "im2col_layout", "reduction_tree", "scan_steps", "shuffle_steps"]

from .hardware import (  # noqa: E402
    cost_figure,
    power_trace,
    roofline_devices,
    spec_table,
    step_time_figure,
    systolic_figure,
)

__all__ += ["cost_figure", "power_trace", "roofline_devices", "spec_table", "step_time_figure", "systolic_figure"]

from .streams import stream_timeline  # noqa: E402

__all__ += ["stream_timeline"]
