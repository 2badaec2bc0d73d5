"""gpulab.grading.sliced: the kernel client that polls every second (jupyter/nbclient#312)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from queue import Empty

import nbformat
import pytest

pytest.importorskip("nbclient")

from nbclient import NotebookClient  # noqa: E402

from gpulab.grading.sliced import SlicedChannel, SlicedKernelClient, SlicedKernelManager  # noqa: E402
from nbrun import stdout_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


class _Socket:
    """A stand-in for a zmq.asyncio socket: records each poll, ready after ``ready_after`` polls."""

    def __init__(self, ready_after: int | None) -> None:
        self.polls: list[int] = []
        self.ready_after = ready_after

    async def poll(self, timeout_ms: int) -> int:
        self.polls.append(timeout_ms)
        if self.ready_after is not None and len(self.polls) > self.ready_after:
            return 1
        await asyncio.sleep(timeout_ms / 1000)
        return 0


def _channel(sock: _Socket) -> SlicedChannel:
    ch = SlicedChannel.__new__(SlicedChannel)
    ch.socket = sock  # type: ignore[assignment]

    async def recv() -> dict:
        return {"msg": "reply"}

    ch._recv = recv  # type: ignore[method-assign]
    return ch


def test_a_long_wait_is_cut_into_one_second_polls_and_ends_at_its_deadline() -> None:
    sock = _Socket(ready_after=None)
    start = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(_channel(sock).get_msg(timeout=2.5))
    took = time.monotonic() - start
    assert 2.4 <= took < 3.5, took
    assert max(sock.polls) == 1000 and len(sock.polls) >= 3, sock.polls


def test_a_message_waiting_in_the_socket_is_taken_at_the_next_poll() -> None:
    """The stall: the first poll does not wake up; the next one (a second later) sees the reply."""
    sock = _Socket(ready_after=1)
    start = time.monotonic()
    assert asyncio.run(_channel(sock).get_msg(timeout=600)) == {"msg": "reply"}
    assert time.monotonic() - start < 3 and sock.polls == [1000, 1000]


def test_notebook_client_with_the_manager_uses_sliced_channels() -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    client = NotebookClient(nb, timeout=60, kernel_name="python3", kernel_manager_class=SlicedKernelManager)
    with client.setup_kernel():
        assert isinstance(client.kc, SlicedKernelClient)
        assert all(
            isinstance(ch, SlicedChannel)
            for ch in (client.kc.shell_channel, client.kc.iopub_channel, client.kc.control_channel)
        )
        client.execute_cell(nb.cells[0], 0)
    assert stdout_text(nb.cells[0]) == "42\n"


def test_the_course_nbgrader_configuration_uses_the_sliced_client(monkeypatch) -> None:
    pytest.importorskip("nbgrader")
    from nbgrader.preprocessors import Execute
    from traitlets.config import Config

    config = Config()
    monkeypatch.setenv("GPULAB_COURSE_DIR", str(ROOT))
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))  # restored after: the config puts scripts on PATH
    path = ROOT / "teachers" / "nbgrader_config.py"
    exec(compile(path.read_text(), str(path), "exec"), {"get_config": lambda: config, "__file__": str(path)})
    ex = Execute(config=config)
    ex.nb = nbformat.v4.new_notebook()
    assert ex.create_kernel_manager().client_factory is SlicedKernelClient
