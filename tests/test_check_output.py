"""What a kernel prints during a check or a capstone training step is kept aside (gpulab.exercises.output): the
verdict shows its first lines and how many more there were, and sys.stdout is put back afterwards, also after a
timeout or an exception (Jupyter's stream keeps working)."""

from __future__ import annotations

import sys
import threading

import numpy as np
from numba import cuda

from gpulab import capstone, nn
from gpulab.exercises import check_kernel
from gpulab.exercises.output import SHOWN, Printed, captured


@cuda.jit
def add_printing(a, b, out):
    i = cuda.grid(1)
    print("thread", i)
    if i < out.size:
        out[i] = a[i] + b[i]


@cuda.jit
def add_printing_then_past_the_end(a, b, out):
    i = cuda.grid(1)
    print("thread", i)
    out[i] = a[i] + b[i]  # no bounds guard: IndexError in the simulator


@cuda.jit
def add_printing_forever(a, b, out):
    i = cuda.grid(1)
    while i >= 0:  # never ends
        print("still here", i)


@cuda.jit
def relu_printing(x, y):
    for i in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        print("relu", i)
        y[i] = max(x[i], 0.0)


def _add(kernel, **kw):
    def inputs(n, rng):
        return rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)

    return check_kernel(kernel, lambda a, b: a + b, inputs=inputs, sizes=[1, 37], threads=32, **kw)


class Stream:
    """Stands for ipykernel's OutStream: whatever sys.stdout was before the check must be it again after."""

    def __init__(self) -> None:
        self.text = []

    def write(self, s: str) -> int:
        self.text.append(s)
        return len(s)

    def flush(self) -> None:
        pass


def _with_stream(fn):
    old, stream = sys.stdout, Stream()
    sys.stdout = stream
    try:
        res = fn()
        after = sys.stdout
        print("after the check")
    finally:
        sys.stdout = old
    assert after is stream, "sys.stdout was not put back"
    return res, "".join(stream.text)


def test_a_printing_kernel_does_not_flood_the_verdict():
    res, seen = _with_stream(lambda: _add(add_printing))
    assert res.passed, res
    assert seen == "after the check\n"  # nothing the kernel printed reached the notebook's stream
    # every launch prints once per thread: 32 threads x (2 cases + the race re-runs)
    assert "the kernel printed" in res.printed and "thread 0" in res.printed
    shown = [ln for ln in res.printed.splitlines() if ln.startswith("  | ")]
    assert len(shown) == SHOWN
    assert "more lines printed by the kernel, hidden during the check; run the kernel yourself" in res.printed
    assert "fine for debugging, but slow" in res.printed
    text = str(res)
    assert text.count("| thread ") == SHOWN and "more lines printed" in text
    assert "more lines printed" in res._repr_html_()


def test_a_quiet_kernel_has_no_note():
    @cuda.jit
    def add(a, b, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a[i] + b[i]

    res = _add(add)
    assert res.passed and res.printed == "" and "printed" not in str(res)


def test_stdout_is_restored_after_an_exception_in_the_kernel():
    res, seen = _with_stream(lambda: _add(add_printing_then_past_the_end))
    assert not res.passed and "past the end" in res.message, res
    assert seen == "after the check\n" and "the kernel printed" in res.printed


def test_stdout_is_restored_after_a_timeout():
    res, seen = _with_stream(lambda: _add(add_printing_forever, timeout=1.0))
    assert res.status == "timeout", res
    assert seen == "after the check\n" and "still here" in res.printed
    assert not [t for t in threading.enumerate() if t.name == "gpulab-check" and t.is_alive()]


def test_printed_keeps_the_first_lines_from_any_thread_and_counts_the_rest():
    with captured(keep=2) as out:
        threads = [threading.Thread(target=lambda k=k: print("line", k)) for k in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sys.stdout.write("no newline at the end")
    assert out.total() == 11 and len(out.lines) == 2
    note = out.note()
    assert "printed 11 lines" in note and "... 9 more lines" in note
    assert Printed().note() == ""


def test_a_thread_running_before_the_check_prints_to_the_notebook_not_into_the_verdict():
    """sys.stdout is the whole process's: the learner's own background thread (started before the check) that
    prints while a kernel is checked keeps printing to the notebook, and is not counted as the kernel's."""
    go, done = threading.Event(), threading.Event()

    def background():
        go.wait(30)
        print("background tick")
        done.set()

    def check():
        t = threading.Thread(target=background, daemon=True)
        t.start()

        @cuda.jit
        def add_signalling(a, b, out):
            i = cuda.grid(1)
            if i == 0:
                go.set()
                done.wait(30)  # the background thread has printed while this check runs
            if i < out.size:
                out[i] = a[i] + b[i]

        res = _add(add_signalling)
        t.join(30)
        return res

    res, seen = _with_stream(check)
    assert res.passed, res
    assert "background tick\n" in seen and "background tick" not in res.printed, (seen, res.printed)


def test_captures_that_end_out_of_order_put_the_stream_back():
    """Two checks from two threads: the first ends while the second runs; afterwards sys.stdout is the
    notebook's stream again, not a finished capture that swallows every later print."""
    old, stream = sys.stdout, Stream()
    sys.stdout = stream
    try:
        first = captured()
        first.__enter__()
        second = captured()
        second.__enter__()
        first.__exit__(None, None, None)  # ends before the capture that replaced it
        print("between")
        second.__exit__(None, None, None)
        after = sys.stdout
        print("after both")
    finally:
        sys.stdout = old
    assert after is stream
    assert "".join(stream.text) == "after both\n"


def test_capstone_training_shows_a_printing_kernel_once(capsys):
    cap = capstone.Capstone()
    res = cap.register("relu", relu_printing)
    assert res.passed and "your code printed" in res.printed, res
    capsys.readouterr()
    ops = cap.ops(require_all=False)
    model = nn.mnist_cnn(image_size=8, channels=(2, 2), hidden=8, backend="kernels").use_ops(ops)
    x, y = np.random.default_rng(0).random((2, 1, 8, 8), dtype=np.float32), np.arange(2)
    for _ in range(2):
        nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), x, y)
    out = capsys.readouterr().out
    assert out.count("your relu kernel printed") == 1, out  # once, not every step
    assert len(out.splitlines()) < 15, out
    assert "more lines printed by your relu kernel" in out
    assert ops.printed["relu"] > 100  # counted in every step: 2 steps, 2 relu layers


def test_in_a_jupyter_kernel_the_cell_shows_the_verdict_and_printing_works_after(monkeypatch):
    """Under ipykernel (its OutStream is sys.stdout): the check cell's output is the verdict with a few of the
    kernel's lines, and print() in the next cell still reaches the notebook."""
    import pytest

    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbclient")
    from nbrun import SlicedClient, stdout_text

    monkeypatch.setenv("GPULAB_DEVICE", "simulator")
    cells = [
        "import gpulab\nprint(gpulab.banner())\nimport numpy as np\nfrom numba import cuda\n"
        "from gpulab.exercises import check_kernel",
        "@cuda.jit\ndef add_kernel(a, b, out):\n    i = cuda.grid(1)\n    print('thread', i)\n"
        "    if i < out.size:\n        out[i] = a[i] + b[i]",
        "def inputs(n, rng):\n    return rng.random(n).astype(np.float32), rng.random(n).astype(np.float32)\n"
        "print(check_kernel(add_kernel, lambda a, b: a + b, inputs=inputs, sizes=[1, 37], threads=32))",
        "print('after', 6 * 7)",
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    SlicedClient(nb, timeout=120, kernel_name="python3").execute()
    text = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert "[PASS] add_kernel" in text and "more lines printed by the kernel" in text, text
    assert text.count("| thread ") == SHOWN and len(text.splitlines()) < 20, text
    assert stdout_text(nb.cells[3]) == "after 42\n"


def test_capstone_training_on_the_gpu_path_does_not_synchronise_every_op(monkeypatch):
    """Keeping CUDA printf aside (fd 1) means synchronising the device after each op; training launches every
    learner op in every step, so it keeps only ``sys.stdout`` aside and stays asynchronous. The check before
    training still takes the fd path."""
    from gpulab.exercises import output

    monkeypatch.setattr(output, "_fd_wanted", lambda: True)  # the gpu path, without a GPU
    starts: list[bool] = []
    real_start = output._FdCapture.start

    def counting_start(self, *args, **kw):
        starts.append(True)
        return real_start(self, *args, **kw)

    monkeypatch.setattr(output._FdCapture, "start", counting_start)
    cap = capstone.Capstone()
    assert cap.register("relu", relu_printing).passed
    assert starts, "the check itself should keep fd 1 aside on the gpu path"
    starts.clear()
    ops = cap.ops(require_all=False)
    model = nn.mnist_cnn(image_size=8, channels=(2, 2), hidden=8, backend="kernels").use_ops(ops)
    x, y = np.random.default_rng(0).random((2, 1, 8, 8), dtype=np.float32), np.arange(2)
    nn.train_step(model, nn.SoftmaxCrossEntropy(), nn.Adam(model), x, y)
    assert ops.printed["relu"] > 0 and starts == []  # the prints were counted, fd 1 never swapped
