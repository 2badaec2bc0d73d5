"""Run a notebook top to bottom in emulated gpu mode (tests/gpu_emulation/emulate.py), in memory.

The committed notebook is read, never written: a first cell that activates the emulation is prepended to a copy
in memory, which runs in a fresh kernel (tests/nbrun.py's SlicedClient) with errors allowed, so that every
failing cell is seen. ``python tests/gpu_emulation/nbemul.py NB...`` prints one row per notebook:

* ``ran``: every cell ran without an error;
* ``failed``: cells that raised (the first one's error, then how many others);
* ``not emulated``: a cell needed a CuPy feature the emulation cannot run (``cupy.RawKernel``...): not a pass;
* ``timed out``: the notebook ran past its time (a gpu-mode size hard-coded under ``if is_gpu()`` is the usual
  cause: the simulator runs it on the CPU).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
PREAMBLE = (
    "import sys\n"
    f"sys.path.insert(0, {str(TESTS)!r})\n"
    "from gpu_emulation.emulate import activate\n"
    "activate()\n"
    "import gpulab\n"
    "assert gpulab.is_gpu() and gpulab.xp().EMULATED\n"
)

# Cells whose gpu-mode branch depends on what only a GPU does (each checked by hand): their error is reported as
# not emulated, with the reason, never as passed. Each is found by a line of its source, which must be in exactly
# one code cell (cells inserted before it do not move it; a stale line is an error).
KNOWN_GAPS = {
    ("01_threads_blocks_grids.ipynb", "def double_unguarded(x, out):"): "a GPU does not check indices, so an "
    "unguarded kernel writes past a view into the buffer behind it; the simulator raises IndexError (the cell "
    "asserts the GPU's behaviour)",
    ("06_cupy_interop.ipynb", "with copies.count() as device_chain:"): "gpulab.copies.count() counts a GPU's "
    "copies by wrapping numba-cuda's DeviceNDArray.copy_to_device/copy_to_host; the simulator's arrays are not "
    "DeviceNDArray, so it counts none",
}

# Gpu-only cells that hard-code gpu sizes (the simulator would run them for hours) or assert a GPU's speed: the
# in-memory copy runs them smaller, and without the speed claim (this tier checks host/device semantics, not sizes
# or speed). Each is found, as in KNOWN_GAPS, by a text in exactly one code cell (its first edit's; cells inserted
# before it do not move it, as they did when these were cell numbers: 08's and 09's had gone stale), and each
# replacement must still match that cell (a stale one is an error).
SHRINK = {
    ("00_why_gpus.ipynb", "N_GPU = sizes(gpu=4096, simulator=None)"): [
        ("N_GPU = sizes(gpu=4096, simulator=None)", "N_GPU = sizes(gpu=512, simulator=None)")
    ],
    ("02_memory.ipynb", "big = cp.arange(1 << 26"): [("big = cp.arange(1 << 26", "big = cp.arange(1 << 12")],
    ("02_memory.ipynb", "nv = 1 << 26"): [("nv = 1 << 26", "nv = 1 << 12"), ("repeat=10", "repeat=1")],
    ("04_shared_memory_tiling.ipynb", "size = 4096"): [
        ("size = 4096", "size = 32"),
        ("repeat=10", "repeat=1"),
        ('g["regtiled"] > g["naive"] > 0', 'g["regtiled"] > 0 < g["naive"]'),
    ],
    ("05_reductions_atomics.ipynb", "rng.random(1 << 26"): [
        ("rng.random(1 << 26", "rng.random(1 << 12"),
        ("repeat=10", "repeat=2"),
    ],
    # the histograms' timing: 8 blocks per SM of the emulated 40 launched 13 times per kernel and data set took 31 s
    # of CPU (2026-12-03); one block (the grid-stride loop still covers every value) timed once checks the same lines
    ("05_reductions_atomics.ipynb", "grid = 8 * cuda.get_current_device().MULTIPROCESSOR_COUNT"): [
        (
            "grid = 8 * cuda.get_current_device().MULTIPROCESSOR_COUNT",
            "grid = cuda.get_current_device().MULTIPROCESSOR_COUNT // 40",
        ),
        ("benchmark(fn, repeat=10)", "benchmark(fn, repeat=1)"),
    ],
    ("08_backprop.ipynb", "nb_, ni, no = 4096, 4096, 4096"): [
        ("nb_, ni, no = 4096, 4096, 4096", "nb_, ni, no = 128, 128, 128"),
        ("assert 1.25 < measured < 3.5", "assert measured > 0"),
    ],
    ("09_train_cnn.ipynb", "assert max(speeds[1:]) > speeds[0]"): [
        ("assert max(speeds[1:]) > speeds[0]", "assert min(speeds) > 0")
    ],
    # gpu mode trains the full-size CNN on all of MNIST where a copy is found (this tier gives the kernel the shared
    # copy): each thread run as Python, the cell ran past its 240 s (2026-12-04); a narrow CNN on 32 images once runs
    # the same lines (no accuracy claim)
    ("lab09_training.ipynb", "len(ds.x_train), len(ds.x_test), 2, 128, 1e-3, 0.98"): [
        ("len(ds.x_train), len(ds.x_test), 2, 128, 1e-3, 0.98", "32, 32, 1, 32, 1e-3, 0.0"),
        (
            'model = nn.mnist_cnn(seed=0, backend="kernels")',
            'model = nn.mnist_cnn(seed=0, channels=(2, 3), hidden=8, backend="kernels")',
        ),
    ],
    ("lab09_training.ipynb", "batch=128, steps=20, warmup=3, size=28, channels=(32, 64), hidden=128"): [
        (
            "batch=128, steps=20, warmup=3, size=28, channels=(32, 64), hidden=128",
            "batch=4, steps=1, warmup=0, size=8, channels=(2, 3), hidden=8",
        )
    ],
    ("lab05_reductions.ipynb", "rows, cols = 16384, 1024"): [
        ("rows, cols = 16384, 1024", "rows, cols = 64, 256"),
        ("rounds=5, repeat=3", "rounds=2, repeat=1"),
    ],
}

# Notebooks whose cells take longer in emulated gpu mode than nbemul's default cell time: gpu mode launches the
# kernels one thread per CUDA thread (simulator mode runs a block's threads in turn, about twice as fast).
CELL_TIMEOUTS = {"lab09_training.ipynb": 240.0, "09_train_cnn.ipynb": 400.0}


def shrink(name: str, nb: nbformat.NotebookNode) -> None:
    """Apply :data:`SHRINK` to the in-memory notebook ``nb`` (file name ``name``)."""
    for (nb_name, anchor), edits in SHRINK.items():
        if nb_name != name:
            continue
        cells = [c for c in nb.cells if c.cell_type == "code" and anchor in c.source]
        if len(cells) != 1:
            raise AssertionError(f"nbemul.SHRINK is stale: {len(cells)} code cells of {name} contain {anchor!r}")
        for old, new in edits:
            if old not in cells[0].source:
                raise AssertionError(f"nbemul.SHRINK is stale: {name}'s cell with {anchor!r} lacks {old!r}")
            cells[0].source = cells[0].source.replace(old, new)


def known_gaps(name: str, nb: nbformat.NotebookNode) -> dict[int, str]:
    """The cells of notebook ``nb`` (file name ``name``) listed in :data:`KNOWN_GAPS`: {cell index: reason}."""
    gaps = {}
    for (nb_name, line), reason in KNOWN_GAPS.items():
        if nb_name != name:
            continue
        found = [k for k, c in enumerate(nb.cells) if c.cell_type == "code" and line in c.source]
        if len(found) != 1:
            raise AssertionError(f"nbemul.KNOWN_GAPS is stale: {line!r} is in {len(found)} code cells of {name}, not 1")
        gaps[found[0]] = reason
    return gaps


@dataclass
class NotebookRun:
    path: str
    status: str  # ran | failed | not emulated | timed out
    seconds: float
    errors: list[tuple[int, str, str]] = field(default_factory=list)  # (cell index in the source, ename, evalue)

    def line(self) -> str:
        head = f"{Path(self.path).name:36s} {self.status:13s} {self.seconds:6.1f} s"
        if not self.errors:
            return head
        k, ename, evalue = self.errors[0]
        more = f" (+{len(self.errors) - 1} more cells)" if len(self.errors) > 1 else ""
        return f"{head}  cell {k}: {ename}: {evalue.splitlines()[0][:160] if evalue else ''}{more}"


def _env() -> dict[str, str]:
    """The kernel's environment: this process's, with src and tests on PYTHONPATH, the simulator, a shared MNIST
    copy where there is one. This process's own is left alone (a pytest worker goes on to other test files)."""
    env = dict(os.environ)
    src = str(ROOT / "src")
    parts = [src, str(TESTS)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env["GPULAB_DEVICE"] = "simulator"
    shared = ROOT.parent / "shared" / "data" / "mnist"
    for cand in (shared, Path("/work/shared/data/mnist")):
        if "GPULAB_DATA_DIR" not in env and cand.is_dir():
            env["GPULAB_DATA_DIR"] = str(cand)
    return env


def run(path: Path, *, timeout: float = 300.0, cell_timeout: float = 60.0) -> NotebookRun:
    """Execute ``path`` in emulated gpu mode within ``timeout`` seconds of wall time (the whole notebook). A cell
    that runs past ``cell_timeout`` is interrupted (a ``timeout`` error) and the next cells run."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from nbrun import SlicedClient

    cell_timeout = max(cell_timeout, CELL_TIMEOUTS.get(path.name, 0.0))
    nb = nbformat.read(path, as_version=4)
    shrink(path.name, nb)
    gaps = known_gaps(path.name, nb)
    nb.cells.insert(0, nbformat.v4.new_code_cell(PREAMBLE))
    client = SlicedClient(
        nb,
        timeout=cell_timeout,
        allow_errors=True,
        kernel_name="python3",
        interrupt_on_timeout=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    t0 = time.monotonic()
    status = "ran"
    with client.setup_kernel(env=_env()):
        for k, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            left = timeout - (time.monotonic() - t0)
            if left <= 0:
                status = "timed out"
                ran_out = "not run: the notebook's time ran out"
                cell.outputs = [nbformat.v4.new_output("error", ename="timeout", evalue=ran_out, traceback=[])]
                break
            client.timeout = int(min(cell_timeout, max(left, 1.0)))  # nbclient's trait takes whole seconds
            try:
                client.execute_cell(cell, k)
            except (CellTimeoutError, TimeoutError):
                cell.outputs = [nbformat.v4.new_output("error", ename="KeyboardInterrupt", evalue="", traceback=[])]
            except DeadKernelError as exc:
                return NotebookRun(str(path), "failed", time.monotonic() - t0, [(k - 1, "DeadKernelError", str(exc))])
    errors = []
    for k, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "error":
                ename = "timeout" if out.get("ename") == "KeyboardInterrupt" else out.get("ename", "")
                evalue = _source(cell) if ename == "timeout" else out.get("evalue", "")
                gap = gaps.get(k - 1)
                if gap is not None:
                    ename, evalue = "NotEmulated", f"{gap} ({ename}: {evalue})"
                errors.append((k - 1, ename, evalue))
    kinds = {e[1] for e in errors}
    if kinds - {"NotEmulated", "timeout"}:
        status = "failed"
    elif "timeout" in kinds:
        status = "timed out"
    elif kinds:
        status = "not emulated"
    return NotebookRun(str(path), status, time.monotonic() - t0, errors)


def _source(cell: nbformat.NotebookNode) -> str:
    return " ".join(cell.source.split())[:160]


def main(argv: list[str]) -> int:
    timeout = float(os.environ.get("NBEMUL_TIMEOUT", "300"))
    for arg in argv:
        res = run(Path(arg).resolve(), timeout=timeout)
        print(res.line(), flush=True)
        for k, ename, evalue in res.errors[1:8]:
            print(f"    cell {k}: {ename}: {evalue.splitlines()[0][:200] if evalue else ''}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
