"""One PTX compiler process per test worker instead of one per compile (tests/conftest.py installs it).

gpulab.ptx compiles in a child process, ``python -c <child script>`` with the request on stdin and the answer on
stdout: a fresh interpreter that imports numba-cuda and starts NVVM, about 1.5 s of CPU before a small kernel's
0.1 s of compiling (measured 2026-12-03). A test session makes hundreds of such compiles (in `make test` and again
in `make test-oldest`). Here ``gpulab.ptx.subprocess`` is replaced by :data:`SHIM`, whose ``run`` hands the same
child script and the same stdin to a long-lived server process that executes the script as ``python -c`` would
(``__name__ == "__main__"``, fresh globals, its own stdin, stdout and stderr, SystemExit as the exit status) and
returns a ``CompletedProcess``: ``gpulab.ptx._run_child`` reads it exactly as it reads a real child's. The server
starts with the child's environment (``gpulab.ptx._child_env()``); a call with another environment, another Python
or another command goes to a real child, and so does every call in the modules of :data:`FRESH_MODULES` (the tests
of gpulab.ptx's own child machinery) and every call while a test has replaced ``subprocess.run``. A server that dies
(a source that crashed NVVM) or runs past the call's timeout is killed and the call is made again in a real child,
so the answer, the exit status and the timeout are a fresh child's.

Notebooks' kernels, the grader and every other process the tests start keep compiling in fresh children: this
shim lives only in the pytest processes. ``GPULAB_FRESH_PTX=1`` turns it off (every compile in a fresh child, as
before); ``GPULAB_PTX_SERVER_LOG=<file>`` appends, per test process, the servers started and the calls served by
test, to see what it saves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import Any

# Test modules whose calls always go to a fresh child: they test gpulab.ptx's process machinery itself.
FRESH_MODULES = {"test_ptx"}

_REAL_RUN = subprocess.run

_SERVER = r"""
import builtins, io, json, os, sys, traceback
proto_out = os.fdopen(os.dup(1), "w")
proto_in = sys.stdin
os.dup2(2, 1)  # C-level writes to fd 1 (compiler messages) must not reach the protocol pipe
for line in proto_in:
    req = json.loads(line)
    out, err = io.StringIO(), io.StringIO()
    sys.stdin, sys.stdout, sys.stderr, sys.argv = io.StringIO(req["input"]), out, err, ["-c"]
    code = 0
    try:
        exec(compile(req["code"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            err.write(str(exc.code) + "\n")
    except BaseException:
        traceback.print_exc(file=err)
        code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = proto_in, sys.__stdout__, sys.__stderr__
    proto_out.write(json.dumps({"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}) + "\n")
    proto_out.flush()
"""


def _in_fresh_module() -> bool:
    """Is the running test (its set-up and teardown included) in one of :data:`FRESH_MODULES`?"""
    current = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[0]
    return os.path.splitext(os.path.basename(current))[0] in FRESH_MODULES


class _Server:
    def __init__(self, executable: str, env: dict[str, str], cwd: str) -> None:
        self.proc = subprocess.Popen(
            [executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,  # a fresh child would start in the test's current folder (and import from it)
            text=True,
        )

    def call(self, code: str, input: str, timeout: float | None) -> dict[str, Any] | None:
        """The child script's result, or None when the server died or ran past ``timeout`` (it is then killed)."""
        answer: list[str] = []

        def talk() -> None:
            try:
                self.proc.stdin.write(json.dumps({"code": code, "input": input}) + "\n")
                self.proc.stdin.flush()
                answer.append(self.proc.stdout.readline())
            except (OSError, ValueError):
                pass

        t = threading.Thread(target=talk, daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive() or not answer or not answer[0]:
            self.close()
            return None
        return json.loads(answer[0])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class _Shim:
    """Stands for the ``subprocess`` module inside gpulab.ptx: ``run`` of a child script goes to a server."""

    def __init__(self) -> None:
        self.enabled = True
        self._servers: dict[tuple[str, str, tuple[tuple[str, str], ...]], _Server] = {}
        self._lock = threading.Lock()
        self.started = 0  # servers started
        self.served: dict[str, int] = {}  # calls served, by test

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def run(self, args: Any, **kwargs: Any) -> subprocess.CompletedProcess:
        ok = (
            self.enabled
            and not _in_fresh_module()
            and subprocess.run is _REAL_RUN  # a test's own replacement of subprocess.run gets every call
            and isinstance(args, list)
            and len(args) == 3
            and args[1] == "-c"
            and set(kwargs) == {"input", "capture_output", "text", "env", "timeout"}
            and kwargs["capture_output"]
            and kwargs["text"]
            and kwargs["env"] is not None
        )
        if ok:
            # pytest sets PYTEST_CURRENT_TEST for each test; the child scripts do not read it
            env = tuple(sorted((k, v) for k, v in kwargs["env"].items() if k != "PYTEST_CURRENT_TEST"))
            key = (args[0], os.getcwd(), env)  # a test that changed folder gets a server started there
            with self._lock:
                server = self._servers.get(key)
                if server is None or server.proc.poll() is not None:
                    for other in self._servers.values():  # one server at a time: a test changed the environment
                        other.close()
                    self._servers.clear()
                    server = self._servers[key] = _Server(args[0], kwargs["env"], key[1])
                    self.started += 1
                res = server.call(args[2], kwargs["input"], kwargs["timeout"])
                if res is None:
                    del self._servers[key]
            if res is not None:
                test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
                self.served[test] = self.served.get(test, 0) + 1
                return subprocess.CompletedProcess(args, res["returncode"], res["stdout"], res["stderr"])
        return subprocess.run(args, **kwargs)

    def close(self) -> None:
        with self._lock:
            for server in self._servers.values():
                server.close()
            self._servers.clear()


SHIM = _Shim()


def install() -> None:
    """Route gpulab.ptx's children to :data:`SHIM` in this process (set ``GPULAB_FRESH_PTX=1`` to keep real ones)."""
    if os.environ.get("GPULAB_FRESH_PTX") == "1":
        return
    import gpulab.ptx

    gpulab.ptx.subprocess = SHIM  # type: ignore[assignment]


def uninstall() -> None:
    """Put the real ``subprocess`` back into gpulab.ptx and stop the servers."""
    mod = sys.modules.get("gpulab.ptx")
    if mod is not None and getattr(mod, "subprocess", None) is SHIM:
        mod.subprocess = subprocess  # type: ignore[assignment]
    log = os.environ.get("GPULAB_PTX_SERVER_LOG")
    if log:  # how many compiles the servers took from fresh children (to measure this shim's saving)
        with open(log, "a") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "started": SHIM.started, "served": SHIM.served}) + "\n")
    SHIM.close()
