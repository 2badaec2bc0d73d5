"""On a GPU a kernel's ``print`` is CUDA's printf: C stdio on file descriptor 1, not ``sys.stdout``. In gpu mode
gpulab.exercises.output also captures fd 1 during a check and always puts it back. Without a GPU the gpu path is
taken by setting ``output._fd_wanted``; a "kernel" stands for CUDA's printf with the C library's printf (buffered
by C stdio) and ``os.write(1, ...)``. pytest's capfd owns fd 1 here: what reaches it is what reached fd 1."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from numba import cuda

from gpulab import runtime
from gpulab.exercises import check_kernel, output
from gpulab.exercises.output import SHOWN, captured

LIBC = ctypes.CDLL(None)
# the stand-in kernels call C's printf through ctypes: Python, which only the simulator runs
simulator_only = pytest.mark.skipif(runtime.is_gpu(), reason="a simulator kernel that calls C's printf")


def c_print(i):
    """What CUDA's printf does with a line: C's printf, buffered by C stdio until a flush."""
    LIBC.printf(b"cthread %d\n", ctypes.c_int(int(i)))


def c_flush():
    LIBC.fflush(None)


@cuda.jit
def add_printf(a, b, out):
    i = cuda.grid(1)
    c_print(i)
    if i < out.size:
        out[i] = a[i] + b[i]


def _inputs(n, rng):
    return rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)


def _fd1():
    st = os.fstat(1)
    return st.st_dev, st.st_ino


@pytest.fixture
def gpu_path(monkeypatch):
    """output takes the gpu-mode path (fd 1 captured); the device is not synchronised (there is none)."""
    monkeypatch.setattr(output, "_fd_wanted", lambda: True)


@simulator_only
def test_a_kernels_printf_is_kept_aside_and_fd1_is_put_back(gpu_path, capfd):
    before = _fd1()
    res = check_kernel(add_printf, lambda a, b: a + b, inputs=_inputs, sizes=[1, 37], threads=32)
    assert _fd1() == before
    os.write(1, b"after the check\n")
    LIBC.printf(b"printf after the check\n")
    c_flush()
    # before: every "cthread i" line of every launch reached fd 1 (the notebook, the console) and res.printed == ""
    assert capfd.readouterr().out == "after the check\nprintf after the check\n"
    assert res.passed, res
    shown = [ln for ln in res.printed.splitlines() if ln.startswith("  | ")]
    assert len(shown) == SHOWN and all(ln.startswith("  | cthread ") for ln in shown), res.printed
    n = int(res.printed.split("the kernel printed ")[1].split(" line")[0].replace(",", ""))
    assert n >= 2 * 32 + 64, res.printed  # 32 threads for size 1, 64 for size 37, then the race re-runs
    assert f"... {n - SHOWN:,} more lines printed by the kernel, hidden during the check" in res.printed
    assert "more lines printed" in str(res)


@simulator_only
def test_a_host_functions_writes_to_fd1_are_your_codes(gpu_path, capfd):
    runs = []

    def host(a, b, out):
        runs.append(1)
        os.write(1, b"host wrote this\n")
        LIBC.printf(b"and C's printf this\n")
        out[...] = a + b

    res = check_kernel(add_printf, lambda a, b: a + b, inputs=_inputs, sizes=[3], host=host)
    assert res.passed, res
    assert f"your code printed {2 * len(runs)} lines" in res.printed, res.printed
    assert "| host wrote this" in res.printed and "| and C's printf this" in res.printed, res.printed
    assert capfd.readouterr().out == ""


def test_in_gpu_mode_the_device_is_synchronised_before_fd1_is_put_back(capfd, monkeypatch):
    """The driver writes CUDA printf's buffer at a synchronisation, through C stdio: the capture synchronises,
    flushes C stdio, and only then puts fd 1 back. A stand-in for the driver here: a synchronize() that printf's."""
    from gpulab import runtime

    syncs = []

    def synchronize():
        syncs.append(1)
        LIBC.printf(b"written at the synchronisation\n")  # left in C's buffer, as the driver's printf would be

    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "synchronize", synchronize)
    with captured() as out:
        LIBC.printf(b"during\n")
    assert out.fd_level and syncs == [1]
    assert out.lines == ["during", "written at the synchronisation"], out.lines
    assert capfd.readouterr().out == ""


def test_a_device_that_never_finishes_delays_fd1_once(monkeypatch):
    """A kernel that never ends (the check timed out): the capture waits SYNC_SECONDS for the device, then puts fd 1
    back; later captures do not wait again while that wait is stuck."""
    import time

    from gpulab import runtime

    release, calls = threading.Event(), []

    def stuck():
        calls.append(1)
        release.wait(30)

    monkeypatch.setattr(runtime, "is_gpu", lambda: True)
    monkeypatch.setattr(runtime, "synchronize", stuck)
    t0 = time.perf_counter()
    output._drain_device(timeout=0.3)
    t1 = time.perf_counter()
    output._drain_device(timeout=0.3)
    t2 = time.perf_counter()
    assert t1 - t0 >= 0.3 and t2 - t1 < 0.2 and calls == [1]
    release.set()
    deadline = time.monotonic() + 10
    while not output._sync_last.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    output._drain_device(timeout=5)
    assert calls == [1, 1]


@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
def test_fd1_is_put_back_after_an_exception(gpu_path, capfd, error):
    before = _fd1()
    with pytest.raises(error), captured() as out:
        LIBC.printf(b"before the error\n")
        raise error("stop")
    assert _fd1() == before and out.fd_level
    assert out.lines == ["before the error"] and out.total() == 1
    os.write(1, b"after\n")
    assert capfd.readouterr().out == "after\n"


def test_an_interrupt_during_the_swap_is_raised_after_it(gpu_path, capfd):
    """Jupyter's stop button (SIGINT) pressed while fd 1 is being put back: the KeyboardInterrupt comes after."""
    import signal

    before = _fd1()
    cap = output._FdCapture()
    assert cap.start(())
    real_dup2 = os.dup2

    def dup2_interrupted(fd, fd2, *args):
        signal.raise_signal(signal.SIGINT)  # lands here, inside stop()'s swap
        return real_dup2(fd, fd2, *args)

    # Python's own Ctrl-C handler, as in Jupyter: a shell's background job (`make test &`) starts with SIGINT
    # ignored, and Python then installs none
    outer = signal.signal(signal.SIGINT, signal.default_int_handler)
    os.dup2 = dup2_interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            cap.stop()
    finally:
        os.dup2 = real_dup2
        signal.signal(signal.SIGINT, outer)
    assert _fd1() == before and output._STACK == []
    cap.read_into(output.Printed())
    os.write(1, b"after\n")
    assert capfd.readouterr().out == "after\n"


def test_nested_and_out_of_order_captures_put_the_original_fd1_back(gpu_path, capfd):
    before = _fd1()
    with captured() as outer:
        os.write(1, b"outer 1\n")
        with captured() as inner:
            os.write(1, b"inner\n")
        os.write(1, b"outer 2\n")
    assert (outer.lines, inner.lines) == (["outer 1", "outer 2"], ["inner"])
    # two checks from two threads: the first ends while the second runs
    first = captured()
    one = first.__enter__()
    os.write(1, b"one\n")
    second = captured()
    two = second.__enter__()
    os.write(1, b"two\n")
    first.__exit__(None, None, None)
    os.write(1, b"three\n")
    second.__exit__(None, None, None)
    assert _fd1() == before and output._STACK == []
    assert (one.lines, two.lines) == (["one"], ["two", "three"])
    os.write(1, b"after\n")
    print("print after")
    assert capfd.readouterr().out == "after\nprint after\n"


def test_a_thread_running_before_prints_to_the_original_fd1(gpu_path, capfd, monkeypatch):
    """In a terminal sys.stdout writes to fd 1 itself: a thread already running when the check began (not the
    kernel's) still prints there, while fd 1 is captured."""
    terminal = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115 - a terminal's sys.stdout: a stream on fd 1
    monkeypatch.setattr(sys, "stdout", terminal)
    go, done = threading.Event(), threading.Event()

    def background():
        go.wait(30)
        print("background tick")
        done.set()

    t = threading.Thread(target=background, daemon=True)
    t.start()
    with captured() as out:
        os.write(1, b"kernel line\n")
        go.set()
        assert done.wait(30)
    t.join(30)
    assert out.lines == ["kernel line"] and out.total() == 1
    terminal.flush()
    assert capfd.readouterr().out == "background tick\n"


def test_where_fd_level_capture_is_impossible_only_sys_stdout_is_captured(gpu_path, capfd, monkeypatch):
    monkeypatch.setattr(output, "_c_flush", lambda: None)  # no C library found
    before = _fd1()
    with captured() as out:
        os.write(1, b"not kept\n")
        print("kept")
    assert not out.fd_level and out.lines == ["kept"] and _fd1() == before
    assert capfd.readouterr().out == "not kept\n"
    monkeypatch.undo()
    monkeypatch.setattr(output, "_libc_flush", None)  # looked up again
    monkeypatch.setattr(sys, "platform", "win32")
    assert output._c_flush() is None


@simulator_only
def test_in_simulator_mode_fd1_is_left_alone_by_default(capfd):
    with captured() as out:
        os.write(1, b"fd 1 as before\n")
    assert not out.fd_level and out.total() == 0
    assert capfd.readouterr().out == "fd 1 as before\n"


def test_a_pipe_and_a_closed_fd1_in_a_process_of_its_own():
    """fd 1 a pipe (as under ipykernel: C stdio buffers it fully), then closed (pythonw, a service): no capture,
    no error."""
    script = textwrap.dedent(
        """
        import ctypes, os, sys
        from gpulab.exercises import output
        libc = ctypes.CDLL(None)
        with output.captured(fd=True) as out:
            for k in range(300):
                libc.printf(b"cthread %d\\n", k)
        sys.stderr.write(out.note() + "\\n")
        libc.printf(b"after\\n")
        libc.fflush(None)
        sys.stdout.flush()
        sys.stdout = sys.stderr
        os.close(1)
        with output.captured(fd=True) as closed:
            print("kept")
        sys.stderr.write(f"fd_level={closed.fd_level} lines={closed.lines}\\n")
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), GPULAB_DEVICE="simulator")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "after\n", proc.stdout
    assert "the kernel printed 300 lines" in proc.stderr and "| cthread 0\n" in proc.stderr, proc.stderr
    assert "... 295 more lines printed by the kernel" in proc.stderr
    assert "fd_level=False lines=['kept']" in proc.stderr, proc.stderr


def test_in_a_jupyter_kernel_printf_shows_in_the_verdict_and_fd1_reaches_the_notebook_after(monkeypatch):
    """ipykernel >= 6 forwards fd 1 to the notebook (a pipe and a thread): a check on the gpu path keeps the
    kernel's printf out of the cell's output but in the verdict, and fd 1 reaches the notebook again afterwards."""
    monkeypatch.delenv("PYTEST_CURRENT_TEST")  # else ipykernel leaves fd 1 alone (its own tests' switch)
    monkeypatch.setenv("GPULAB_DEVICE", "simulator")  # the "kernel" calls C's printf: a simulator kernel
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from nbrun import SlicedClient

    cells = [
        "import ctypes, os, time\nimport gpulab\nimport numpy as np\nfrom numba import cuda\n"
        "from gpulab.exercises import check_kernel, output\n"
        "output._fd_wanted = lambda: True  # the gpu path, without a GPU\nlibc = ctypes.CDLL(None)",
        "def c_print(i):\n    libc.printf(b'cthread %d\\n', ctypes.c_int(int(i)))\n\n"
        "@cuda.jit\ndef add_kernel(a, b, out):\n    i = cuda.grid(1)\n    c_print(i)\n"
        "    if i < out.size:\n        out[i] = a[i] + b[i]",
        "def inputs(n, rng):\n    return rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)\n"
        "print(check_kernel(add_kernel, lambda a, b: a + b, inputs=inputs, sizes=[1, 37], threads=32))\n"
        "time.sleep(0.5)  # ipykernel's thread reads fd 1's pipe: anything leaked would show in this cell",
        "os.write(1, b'after\\n')\ntime.sleep(0.5)",
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    SlicedClient(nb, timeout=120, kernel_name="python3").execute()
    text = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert "[PASS] add_kernel" in text and "more lines printed by the kernel" in text, text
    assert text.count("cthread ") == SHOWN and len(text.splitlines()) < 20, text
    assert "".join(o.get("text", "") for o in nb.cells[3].outputs) == "after\n", nb.cells[3].outputs


@pytest.mark.skipif(not runtime.is_gpu(), reason="CUDA's printf needs a GPU (GPULAB_DEVICE=gpu)")
def test_on_a_gpu_a_printing_kernel_at_n_300_does_not_flood_fd1(capfd):
    """The real thing: print in a kernel is CUDA's printf, written by the driver at a synchronisation."""

    @cuda.jit
    def add_printing(a, b, out):
        i = cuda.grid(1)
        print("thread", i)
        if i < out.size:
            out[i] = a[i] + b[i]

    res = check_kernel(add_printing, lambda a, b: a + b, inputs=_inputs, sizes=[300], threads=128)
    os.write(1, b"after the check\n")
    assert capfd.readouterr().out == "after the check\n"
    assert res.passed, res
    shown = [ln for ln in res.printed.splitlines() if ln.startswith("  | ")]
    assert len(shown) == SHOWN and all(ln.startswith("  | thread ") for ln in shown), res.printed
    assert "more lines printed by the kernel" in res.printed
