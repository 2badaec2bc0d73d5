"""An nbclient ``NotebookClient`` that waits for each cell's reply in 1 s slices.

nbclient waits for a cell's ``execute_reply`` with one ``shell_channel.get_msg(timeout=<cell timeout>)``.
Now and then that call does not wake up when the reply arrives and returns it only when the whole
timeout has passed (jupyter/nbclient#312, with ipywidgets on the page). Seen here three times in one
day: the cell after a widget explorer started 600 s late with the kernel idle, and the test then
passed. Polling in 1 s slices bounds such a stall to about a second; the cell's own timeout still
applies (``_async_handle_timeout`` raises ``CellTimeoutError`` as nbclient does).
"""

from __future__ import annotations

import asyncio
from queue import Empty
from time import monotonic
from typing import Any

from jupyter_core.utils import ensure_async
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError
from nbclient.client import timestamp

SLICE_S = 1.0


class SlicedClient(NotebookClient):
    async def _async_poll_for_reply(
        self, msg_id: str, cell: Any, timeout: int | None, task_poll_output_msg: Any, task_poll_kernel_alive: Any
    ) -> dict[str, Any]:
        assert self.kc is not None
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            try:
                msg = await ensure_async(self.kc.shell_channel.get_msg(timeout=SLICE_S))
            except Empty:
                if deadline is None or monotonic() < deadline:
                    continue
                task_poll_kernel_alive.cancel()
                await self._async_check_alive()
                # As nbclient: raises CellTimeoutError, or (interrupt_on_timeout) returns the configured error
                # reply, or None: then wait, without a deadline, for the interrupted cell's own reply.
                reply = await self._async_handle_timeout(timeout or 0, cell)
                if reply is None:
                    deadline = None
                    continue
                msg = {**reply, "parent_header": {"msg_id": msg_id}}
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if self.record_timing:
                cell["metadata"]["execution"]["shell.execute_reply"] = timestamp(msg)
            try:
                await asyncio.wait_for(task_poll_output_msg, self.iopub_timeout)
            except (asyncio.TimeoutError, Empty):
                if self.raise_on_iopub_timeout:
                    task_poll_kernel_alive.cancel()
                    raise CellTimeoutError.error_from_timeout_and_cell(
                        "Timeout waiting for IOPub output", self.iopub_timeout, cell
                    ) from None
                self.log.warning("Timeout waiting for IOPub output")
            task_poll_kernel_alive.cancel()
            return msg
