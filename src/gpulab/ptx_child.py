"""The PTX compiler's process: one long-lived child per Python process, not one per compile.

:mod:`gpulab.ptx` compiles in a child process (a process that imported numba in simulator mode cannot compile):
a child script, run as ``python -c``, reads its request on stdin and prints its answer. A fresh interpreter that
imports numba-cuda and starts NVVM costs about 1.5 s of CPU before a small kernel's 0.1 s of compiling (measured
2026-12-03), and a lesson or a lab checks a kernel to PTX a dozen times. :func:`run` therefore hands the script and
its stdin to a server process that stays up: it executes each script as ``python -c`` would (``__name__ ==
"__main__"``, fresh globals, its own stdin, stdout and stderr, ``SystemExit`` as the exit status) and returns a
``CompletedProcess`` read exactly as a real child's.

What the server keeps between compiles is what it imported before the first (numba, numba-cuda, gpulab's
``source``); a module a script imports is forgotten after it unless it is installed (in the venv, site-packages or
gpulab's own folder), so a helper file next to the notebook that a kernel imports is read again at every compile, as
a fresh child would. The server ignores SIGINT (Kernel > Interrupt signals the kernel's whole process group): a
call interrupted in the parent stops the server instead, and each answer carries its request's number.
A server that dies (a source that crashed NVVM) is replaced, and that call is made again in a fresh child, so the
answer is a fresh child's; a call that runs past its timeout raises ``subprocess.TimeoutExpired`` as a fresh child
would, and the server is stopped. A server ends with its parent (its stdin closes), after :data:`IDLE_SECONDS`
without a request (it holds about 350 MB while up: measured 348 MB after one compile, 354 MB after 150, 2026-12-04),
and after :data:`MOST_CALLS` compiles (a new one starts at the next). Another environment,
working folder or Python gets its own server (one at a time). ``GPULAB_FRESH_PTX=1`` in the environment makes
every compile a fresh child again.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from typing import Any

__all__ = ["IDLE_SECONDS", "MOST_CALLS", "close", "prestart", "run", "stats"]

IDLE_SECONDS = 180  # a server with no request for this long exits (a kernel left open keeps no compiler alive)
MOST_CALLS = 200  # compiles one server makes before it is replaced (numba keeps what each compile built)

# Variables that change between calls without changing what a compile does: not part of a server's key.
_VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})

_SERVER = r"""
import builtins, io, json, os, select, signal, site, sys, traceback
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Kernel > Interrupt reaches the whole process group; the parent decides
proto_out = os.fdopen(os.dup(1), "w")
proto_in = os.fdopen(os.dup(0), "r")
os.dup2(2, 1)  # C-level writes to fd 1 (compiler messages) must not reach the protocol pipe
idle = float(sys.argv[1])
import numba
from numba import cuda
import gpulab.source
# kept between compiles: modules from the installation (a venv, site-packages, --user, gpulab's own folder)
roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(gpulab.__file__))]
roots += site.getsitepackages() + [site.getusersitepackages()]
prefixes = tuple({os.path.join(os.path.realpath(p), "") for p in roots})
kept = set(sys.modules)
proto_out.write("ready\n")
proto_out.flush()
while select.select([proto_in], [], [], idle)[0]:
    line = proto_in.readline()
    if not line:
        break
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
        sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__
    for name in set(sys.modules) - kept:  # what this script imported from outside the installation
        path = getattr(sys.modules[name], "__file__", None)
        if path and not os.path.realpath(path).startswith(prefixes):
            del sys.modules[name]
        else:
            kept.add(name)
    answer = {"id": req["id"], "returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
    proto_out.write(json.dumps(answer) + "\n")
    proto_out.flush()
"""


_Key = tuple[str, str, tuple[tuple[str, str], ...]]  # Python, working folder, environment


class _Server:
    def __init__(self, key: _Key, env: dict[str, str]) -> None:
        self.key = key
        self.pid = os.getpid()  # a forked copy of the parent must not talk on these pipes
        self.calls = 0
        self.proc = subprocess.Popen(
            [key[0], "-c", _SERVER, str(IDLE_SECONDS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=key[1],  # a fresh child would start in the caller's folder (and import from it)
            text=True,
        )

    def alive(self) -> bool:
        return self.pid == os.getpid() and self.proc.poll() is None and self.calls < MOST_CALLS

    def call(self, code: str, input: str, timeout: float | None) -> dict[str, Any] | None:
        """The script's result, or None when the server died before answering; raises ``subprocess.TimeoutExpired``
        when it ran past ``timeout``. The server is stopped in both cases."""
        answer: list[str] = []
        self.calls += 1

        def talk() -> None:
            try:
                assert self.proc.stdin is not None and self.proc.stdout is not None
                line = self.proc.stdout.readline() if self.calls == 1 else "ready\n"
                if line != "ready\n":  # it could not even import numba-cuda: a fresh child says why
                    return
                self.proc.stdin.write(json.dumps({"id": self.calls, "code": code, "input": input}) + "\n")
                self.proc.stdin.flush()
                answer.append(self.proc.stdout.readline())
            except (OSError, ValueError):
                pass

        t = threading.Thread(target=talk, daemon=True)
        try:
            t.start()
            t.join(timeout)
        except BaseException:  # interrupted (Kernel > Interrupt): its answer would reach the next call; stop it
            self.close()
            raise
        if t.is_alive():
            self.close()
            raise subprocess.TimeoutExpired(self.proc.args, timeout or 0)
        res = json.loads(answer[0]) if answer and answer[0] else None
        if res is None or res.get("id") != self.calls:  # died, or (never seen) an answer to another request
            self.close()
            return None
        return res

    def close(self) -> None:
        if self.pid != os.getpid():
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


_lock = threading.Lock()
_current: _Server | None = None  # one server at a time: another environment or folder replaces it
_stats = {"started": 0, "served": 0, "fresh": 0}


def stats() -> dict[str, int]:
    """How many servers this process started, how many compiles they answered, how many went to fresh children."""
    return dict(_stats)


def close() -> None:
    """Stop this process's server (a later compile starts another)."""
    global _current
    with _lock:
        if _current is not None:
            _current.close()
        _current = None


atexit.register(close)


def _fresh(args: list[str], input: str, env: dict[str, str], timeout: float | None) -> subprocess.CompletedProcess:
    _stats["fresh"] += 1
    return subprocess.run(args, input=input, capture_output=True, text=True, env=env, timeout=timeout)


def _key(env: dict[str, str]) -> _Key | None:
    """The server for ``env``: None where compiles go to fresh children (asked for, or no working folder)."""
    if os.environ.get("GPULAB_FRESH_PTX") == "1" or env.get("GPULAB_FRESH_PTX") == "1":
        return None
    try:
        cwd = os.getcwd()
    except OSError:  # the working folder was removed: a fresh child meets what it meets
        return None
    return (sys.executable, cwd, tuple(sorted((k, v) for k, v in env.items() if k not in _VOLATILE)))


def _server(key: _Key, env: dict[str, str]) -> _Server:
    """The running server for ``key``, started now if there is none (called with the lock held); a dead one, or
    one for another key, is stopped first."""
    global _current
    if _current is None or _current.key != key or not _current.alive():
        if _current is not None:
            _current.close()
        _current = _Server(key, env)
        _stats["started"] += 1
    return _current


def prestart(env: dict[str, str]) -> None:
    """Start the server for ``env`` now without waiting for it, so that its start-up (numba-cuda's imports, about
    1.5 s of CPU) overlaps the caller's other work, e.g. a check running the learner's kernel in the simulator on
    one core while the server starts on another. Nothing happens where compiles go to fresh children."""
    key = _key(env)
    if key is not None:
        with _lock:
            try:
                _server(key, env)
            except OSError:  # the compile that follows meets the same and says so
                pass


def run(code: str, input: str, env: dict[str, str], timeout: float | None) -> subprocess.CompletedProcess:
    """``python -c code`` with ``input`` on stdin in environment ``env``, as ``subprocess.run(..., capture_output=True,
    text=True)`` would return it, answered by this process's compiler server (see the module's text)."""
    args = [sys.executable, "-c", code]
    key = _key(env)
    if key is None:
        return _fresh(args, input, env, timeout)
    with _lock:
        server = _server(key, env)
        try:
            res = server.call(code, input, timeout)  # a server that died or ran late is stopped: the next is new
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(args, timeout or 0) from None
    if res is None:  # the server died: a fresh child gives the answer (or the crash) a fresh child gives
        return _fresh(args, input, env, timeout)
    _stats["served"] += 1
    return subprocess.CompletedProcess(args, res["returncode"], res["stdout"], res["stderr"])
