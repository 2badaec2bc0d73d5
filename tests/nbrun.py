"""An nbclient ``NotebookClient`` whose kernel client waits for messages in 1 s slices.

nbclient waits for a cell's reply with one ``get_msg(timeout=<cell timeout>)``; now and then that
call does not wake up when the reply arrives and returns it only when the whole timeout has passed
(jupyter/nbclient#312). Seen here three times in one day: the cell after a widget explorer started
600 s late with the kernel idle. ``gpulab.grading.sliced`` (which the course's nbgrader configuration
uses too) polls every second instead; timeouts and interrupts are nbclient's own. Its kernels talk over unix
sockets of their own (``gpulab.grading.ipc``): no TCP port for another test worker's kernel to take.
"""

from __future__ import annotations

from typing import Any

from nbclient import NotebookClient

from gpulab.grading.sliced import SlicedKernelManager


class SlicedClient(NotebookClient):
    def __init__(self, nb: Any, km: Any = None, **kw: Any) -> None:
        kw.setdefault("kernel_manager_class", SlicedKernelManager)
        super().__init__(nb, km=km, **kw)


def stdout_text(cell: Any) -> str:
    """Everything a cell printed to stdout: the kernel may send one print in several stream messages (its output
    is flushed on a timer), which nbclient keeps as separate outputs."""
    return "".join(
        o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream" and o.get("name") == "stdout"
    )
