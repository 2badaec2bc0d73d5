"""Jupyter kernel managers that reach their kernel over unix sockets, so that no kernel can lose a TCP port race.

Over TCP, jupyter_client picks a kernel's five ports by binding port 0 and closing the socket, writes them into
the connection file and starts the kernel, which binds them a second or so later. A kernel started by another
process in that window can be handed the same port, and one of the two dies at start with ``ZMQError: Address
already in use`` (jupyter/jupyter_client#487, nteract/papermill#511). jupyter_client's ``LocalPortCache`` only
keeps one process from handing a port out twice; parallel test workers, two test runs side by side, or
``nbgrader autograde`` started for several labs at once are separate processes.

With ``transport = "ipc"`` the five channels are unix sockets ``<ip>-1`` ... ``<ip>-5``: nothing to race for as
long as ``ip``, here a path, is the kernel's own. jupyter_client's default for it is ``<connection file>-ipc``,
or the *relative* ``kernel-ipc`` when the manager has no connection file yet (nbclient and nbval create theirs
that way): relative to two different working directories the kernel and its client then never meet, and two
kernels in one folder share it. :class:`IpcMixin` gives each kernel a name with a random part of its own
(:func:`ipc_prefix`): on Linux in the abstract socket namespace (``@gpulab-kernel-...``), which leaves no file
behind even when the kernel is killed (nbexec's timeouts, a test run stopped by Ctrl-C); elsewhere an absolute
path in the temporary folder, short enough for a unix socket (108 bytes with the terminating NUL on Linux, 104 on
macOS), which jupyter_client removes when it shuts the kernel down.

Where unix sockets are not there (Windows), the managers keep TCP.
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from typing import Any

from jupyter_client.manager import KernelManager

__all__ = ["ABSTRACT", "IPC_AVAILABLE", "MAX_SOCKET_PATH", "IpcKernelManager", "IpcMixin", "ipc_prefix"]

IPC_AVAILABLE = os.name == "posix"
ABSTRACT = sys.platform == "linux"  # ZeroMQ binds "ipc://@name" in Linux's abstract namespace
# the longest unix socket path on macOS (103 characters and the NUL); Linux allows 107
MAX_SOCKET_PATH = 103


def ipc_prefix(abstract: bool = ABSTRACT) -> str:
    """A new prefix for one kernel's sockets (``<prefix>-1`` ... ``<prefix>-5``): an abstract name
    (``@gpulab-kernel-<random>-ipc``) or an absolute path in the temporary folder (in /tmp where that folder's
    path is too long for a unix socket)."""
    name = f"gpulab-kernel-{uuid.uuid4().hex[:16]}-ipc"
    if abstract:
        return "@" + name
    folder = tempfile.gettempdir()
    if len(os.path.join(folder, name)) + 6 > MAX_SOCKET_PATH:  # "-" and up to five digits
        folder = "/tmp"
    return os.path.join(folder, name)


class IpcMixin:
    """For a ``KernelManager`` subclass: unix-socket transport where the platform has it, on socket names of the
    kernel's own (:func:`ipc_prefix`). A transport or ip that configuration sets is kept.

    (traitlets finds ``_<name>_default`` methods on every class of the manager's MRO, a plain mixin included;
    ``@default`` handlers it registers only on ``HasTraits`` classes.)"""

    def _transport_default(self) -> str:
        return "ipc" if IPC_AVAILABLE else "tcp"

    def _ip_default(self) -> str:
        if getattr(self, "transport", "tcp") == "ipc":
            return ipc_prefix()
        return super()._ip_default()  # type: ignore[misc]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.transport == "ipc":  # type: ignore[attr-defined]
            # the name is fixed now, before anything (a restart, a client) could read a different default
            self.ip  # type: ignore[attr-defined]  # noqa: B018


class IpcKernelManager(IpcMixin, KernelManager):
    """jupyter_client's (blocking) ``KernelManager`` on unix sockets: what nbval starts its kernels with."""
