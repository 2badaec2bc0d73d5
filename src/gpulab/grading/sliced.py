"""A Jupyter kernel manager whose client waits for messages in 1 s slices (for nbclient and nbgrader).

nbclient (which ``nbgrader autograde`` and ``jupyter nbconvert --execute`` use) waits for a cell's
reply with one ``await socket.poll(<cell timeout>)`` on an asyncio ZeroMQ socket. Now and then that
poll does not wake up when the reply arrives and returns only when the whole timeout has passed
(jupyter/nbclient#312): the kernel is idle, the reply is waiting in the socket, and the notebook
stalls for the cell timeout (300 s in the course's nbgrader configuration) before it goes on with a
correct result. Polling again every second looks at the socket afresh, so such a stall costs about
a second. Cell timeouts are unchanged: a wait still ends with ``queue.Empty`` at its deadline.

Use it where a ``KernelManager`` class or its client class is configurable::

    NotebookClient(nb, kernel_manager_class=SlicedKernelManager)                   # nbclient
    c.AsyncKernelManager.client_class = "gpulab.grading.sliced.SlicedKernelClient"  # nbgrader_config.py

(nbgrader's ``Execute`` passes its own ``kernel_manager_class``: teachers/nbgrader_config.py puts
:class:`gpulab.grading.nbgrader_execute.SlicedExecute`, which passes this one, in its place for autograde, and
names the client class for nbgrader's other kernels; it needs gpulab importable where nbgrader runs.)

:class:`SlicedKernelManager` also talks to its kernel over unix sockets (:mod:`gpulab.grading.ipc`), so that
kernels started at the same moment by other processes cannot take its TCP ports.
"""

from __future__ import annotations

from queue import Empty
from time import monotonic
from typing import Any

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Type

from .ipc import IpcMixin

__all__ = ["SLICE_S", "SlicedChannel", "SlicedKernelClient", "SlicedKernelManager"]

SLICE_S = 1.0


class SlicedChannel(AsyncZMQSocketChannel):
    """``get_msg(timeout)`` as jupyter_client's, polling the socket at most ``SLICE_S`` at a time."""

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:  # type: ignore[override]
        assert self.socket is not None
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            wait = SLICE_S if deadline is None else min(SLICE_S, max(deadline - monotonic(), 0.0))
            if await self.socket.poll(int(wait * 1000)):
                return await self._recv()
            if deadline is not None and monotonic() >= deadline:
                raise Empty


class SlicedKernelClient(AsyncKernelClient):
    """An asyncio kernel client whose four channels are :class:`SlicedChannel`."""

    shell_channel_class = Type(SlicedChannel)
    iopub_channel_class = Type(SlicedChannel)
    stdin_channel_class = Type(SlicedChannel)
    control_channel_class = Type(SlicedChannel)


class SlicedKernelManager(IpcMixin, AsyncKernelManager):
    """``AsyncKernelManager`` handing out :class:`SlicedKernelClient` clients, over unix sockets where the
    platform has them (:class:`gpulab.grading.ipc.IpcMixin`)."""

    client_class = DottedObjectName("gpulab.grading.sliced.SlicedKernelClient", config=True)
    client_factory = Type(SlicedKernelClient, klass=AsyncKernelClient, config=True)
