"""The emulated gpu mode tier: gpulab's gpu-mode code paths executed without a GPU.

CI has no GPU (gpu mode ran on one once, an H200 on 2026-12-04), so a NumPy array where CuPy wants a CuPy array, or
a ``np.asarray(cupy_array)``, would first fail on a learner's Colab. Here those paths run on an emulated CuPy 14
(tests/gpu_emulation/fakecupy: NumPy memory, CuPy's refusals, only CuPy's names) while numba's simulator runs the
kernels (tests/gpu_emulation/emulate.py). Sizes are the simulator's: this tier checks host/device semantics, not
gpu sizes or float32 tolerances at those sizes (tests/test_gpu_sizes*.py).

* the stand-in only has names the installed CuPy has;
* library paths (tests/gpu_emulation/checks_library.py, checks_capstone.py, checks_train_reads.py,
  checks_splitk.py and unit tests that hold in both modes) in a pytest subprocess in emulated gpu mode;
* a subset of the lessons and lab solutions top to bottom (tests/gpu_emulation/nbemul.py; the committed notebooks
  are read, never written): those with the most gpu-mode branches that run in a few seconds of CPU each. The
  full audit of every notebook is ``python tests/gpu_emulation/nbemul.py notebooks/[01]*.ipynb labs/solutions/*``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
EMUL = TESTS / "gpu_emulation"
sys.path.insert(0, str(TESTS))

from gpu_emulation import nbemul  # noqa: E402

# Unit tests whose every test holds in both modes and goes through gpu-mode branches (CuPy arrays in nn's ops and
# the kernels' launchers, the conv layers, Dropout, mixed precision, the exercises' checks with CuPy outputs).
BOTH_MODES = [
    "test_nn_ops.py",
    "test_kernels_reduce.py",
    "test_kernels_elementwise.py",
    "test_kernels_matmul.py",
    "test_kernels_scan.py",
    "test_kernels_memory.py",
    "test_conv.py",
    "test_multigpu.py",
    "test_nn_amp.py",
    "test_dropout.py",
    "test_exercises_reduce.py",
    "test_exercises_matmul.py",
    "test_llm.py",
    "test_trace.py",
    # single tests of files whose others need the simulator's own checks (its race check, its IndexError): the gpu
    # branches the H200 run of 2026-12-04 showed a test must have
    "test_exercises_elementwise.py::test_adding_into_an_output_hint_writes_the_kernels_own_element",
    "test_nn_dropout.py::test_models_on_two_backends_drop_the_same_elements",
]

# Notebooks run in CI, chosen for gpu-mode branches (cupy, xp(), is_gpu() in their cells and the checks they call)
# per CPU second, measured in the full audit (2026-12-03, 2 shared cores): each under 25 s (00 and 05 with their
# gpu-only cells shrunk: nbemul.SHRINK). Left to the full audit: 08 (18-50 s), 09 and lab09 (minutes: gpu mode
# trains on the lab's kernels, launched a thread per CUDA thread), 02 and 04 (bandwidth and tiling measurements,
# shrunk), lab11 (CPU-side arithmetic), 01, 03, 11, lab01-05, lab07, lab12 (few gpu-mode branches; 01's unguarded
# kernel and 11's RawKernel are not emulated). CI with 12 notebooks took 1178 s in all (2026-12-03); 9 keep it
# further from its 20-minute aim.
NOTEBOOKS = [
    "notebooks/00_why_gpus.ipynb",
    "notebooks/05_reductions_atomics.ipynb",
    "notebooks/06_cupy_interop.ipynb",
    "notebooks/07_convolution.ipynb",
    "notebooks/10_scaling_up.ipynb",
    "notebooks/12_transformers.ipynb",
    "labs/solutions/lab06_cupy_interop.ipynb",
    "labs/solutions/lab08_backprop.ipynb",
    "labs/solutions/lab10_scaling_up.ipynb",
]


def _emulated_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(TESTS), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["GPULAB_DEVICE"] = "simulator"
    return env


def _fake_names() -> dict[str, list[str]]:
    """The public names the stand-in defines itself (not through NumPy), read in emulated gpu mode."""
    code = (
        "import json, gpu_emulation.emulate as e; e.activate()\n"
        "import cupy, cupy.cuda, cupy.cuda.runtime, cupy._functions as f\n"
        "pub = lambda m: sorted(n for n in vars(m) if not n.startswith('_'))\n"
        "print(json.dumps({'cupy': pub(cupy) + sorted(f.SPECIAL['cupy']),\n"
        "  'cupy.random': sorted(f.SPECIAL['cupy.random']), 'cupy.cuda': pub(cupy.cuda),\n"
        "  'cupy.cuda.runtime': pub(cupy.cuda.runtime),\n"
        "  'cupy.ndarray': sorted(n for n in vars(cupy.ndarray) if not n.startswith('_') or n.endswith('__')),\n"
        "  'cupy.cuda.Event': pub(cupy.cuda.Event), 'cupy.cuda.Stream': pub(cupy.cuda.Stream),\n"
        "  'cupy.cuda.Device': pub(cupy.cuda.Device)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=_emulated_env(), capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# Names the stand-in adds for the tier itself, and typing/module plumbing that is not CuPy's API.
OWN = {"EMULATED", "NotEmulated", "annotations", "Any", "time", "runtime", "nccl"}
NDARRAY_OWN = {
    "__slots__",
    "__module__",
    "__qualname__",
    "__annotations__",
    "__weakref__",
    "__dict__",
    "__init__",
    "__getattr__",
    "__doc__",
    "__index__",
}


def test_the_stand_in_has_only_names_the_installed_cupy_has():
    """A name the stand-in has and CuPy lacks would let gpu-mode code pass here and fail on a GPU."""
    real = pytest.importorskip("cupy")
    if getattr(real, "EMULATED", False):
        pytest.skip("the stand-in is on sys.path here")
    if real.__version__.split(".")[0] != "14":
        pytest.skip(f"the stand-in emulates CuPy 14; CuPy {real.__version__} is installed (make test-oldest)")
    import cupy.cuda.runtime  # noqa: F401

    objects = {
        "cupy": real,
        "cupy.random": real.random,
        "cupy.cuda": real.cuda,
        "cupy.cuda.runtime": real.cuda.runtime,
        "cupy.ndarray": real.ndarray,
        "cupy.cuda.Event": real.cuda.Event,
        "cupy.cuda.Stream": real.cuda.Stream,
        "cupy.cuda.Device": real.cuda.Device,
    }
    missing = []
    for where, names in _fake_names().items():
        for name in names:
            own = NDARRAY_OWN if where == "cupy.ndarray" else OWN
            if name not in own and not hasattr(objects[where], name):
                missing.append(f"{where}.{name}")
    assert not missing, f"the stand-in has names CuPy {real.__version__} lacks: {missing}"


def test_the_recorded_names_are_the_installed_cupys():
    """tests/gpu_emulation/cupy_names.json (which names the stand-in serves from NumPy) lists the installed CuPy's
    (regenerate it with tests/gpu_emulation/cupy_names.py when CuPy is upgraded)."""
    real = pytest.importorskip("cupy")
    recorded = json.loads((EMUL / "cupy_names.json").read_text())
    if real.__version__ != recorded["_version"]:
        pytest.skip(f"names recorded from CuPy {recorded['_version']}, CuPy {real.__version__} installed")
    out = subprocess.run(
        [sys.executable, str(EMUL / "cupy_names.py"), "--print"], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == recorded


def _pytest_emulated(*tests: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "gpu_emulation.plugin", "-n", "0"]
    return subprocess.run([*cmd, *tests], env=_emulated_env(), capture_output=True, text=True, cwd=TESTS, timeout=600)


def test_the_stand_in_behaves_as_cupy_14_2():
    """tests/gpu_emulation/checks_cupy_fidelity.py: what CuPy 14.2's source accepts and refuses, cited line by line."""
    proc = _pytest_emulated(str(EMUL / "checks_cupy_fidelity.py"))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_library_gpu_paths_in_emulated_gpu_mode():
    checks = ["checks_library.py", "checks_capstone.py", "checks_train_reads.py", "checks_splitk.py"]
    tests = [str(EMUL / c) for c in checks] + [str(TESTS / t) for t in BOTH_MODES]
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "gpu_emulation.plugin",
        "-n",
        "0",
        "-x",
        *tests,
    ]
    proc = subprocess.run(cmd, env=_emulated_env(), capture_output=True, text=True, cwd=TESTS, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_notebook_runs_in_emulated_gpu_mode(notebook):
    """Every cell runs; a cell that needs what the emulation cannot do (lesson 06's RawKernel: CUDA C) is reported
    as a warning naming it, never counted as run."""
    res = nbemul.run(ROOT / notebook, timeout=240)
    listed = res.line() + "\n" + "\n".join(f"cell {k}: {n}: {v}" for k, n, v in res.errors)
    assert res.status in ("ran", "not emulated"), listed
    if res.status == "not emulated":
        warnings.warn(f"NOT EMULATED in {notebook}: {listed}", stacklevel=1)


def test_a_notebook_run_leaves_the_test_process_environment_alone(tmp_path, monkeypatch):
    """nbemul.run gives its kernel the emulation's environment (PYTHONPATH with src and tests, the simulator, a
    shared MNIST copy) without setting it in this process: under xdist --dist loadfile the worker goes on to run
    other test files, which must not inherit GPULAB_DATA_DIR or PYTHONPATH from whichever worker ran this file."""
    import nbformat

    monkeypatch.delenv("GPULAB_DATA_DIR", raising=False)
    seen = f"import os\nassert {str(TESTS)!r} in os.environ['PYTHONPATH'].split(os.pathsep)"  # the kernel's
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(seen)])
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    before, path_before = dict(os.environ), list(sys.path)
    res = nbemul.run(path, timeout=120)
    assert res.status == "ran", res.line()
    assert dict(os.environ) == before and sys.path == path_before


# Calls that the installed CuPy answers without a GPU when given a non-CuPy argument (it raises, or runs NumPy's
# method, before it touches a device): the stand-in must answer them the same way. A call that reaches the device
# (CUDARuntimeError here) is left out of the comparison.
_REFUSALS = [
    "cupy.expand_dims(x, 0)",
    "cupy.broadcast_to(x, (2,))",
    "cupy.moveaxis(x, 0, 0)",
    "cupy.rollaxis(x, 0)",
    "cupy.all(x)",
    "cupy.any(x)",
    "cupy.nonzero(x)",
    "cupy.where(x)",
    "cupy.where(x, 1.0, 2.0)",
    "cupy.stack([x, x])",
    "cupy.column_stack([x, x])",
    "cupy.reshape(x, (-1,))",
    "cupy.ravel(x)",
    "cupy.transpose(x)",
    "cupy.squeeze(x)",
    "cupy.clip(x, 0, 1)",
    "cupy.take(x, 0)",
    "cupy.repeat(x, 2)",
    "cupy.argsort(x)",
    "cupy.dot(x, x)",
    "cupy.sum(x)",
    "cupy.amax(x)",
    "cupy.empty_like(x)",
    "cupy.zeros_like(x, dtype='f')",
    "cupy.full_like(x, 1)",
    "cupy.shares_memory(x, [0])",
    "cupy.lib.stride_tricks.as_strided(x, (1,), (8,))",
]
_VALUES = ["numpy.arange(4.0)", "numpy.float32(1)", "numpy.bool_(True)", "1.0", "[1.0, 2.0]"]
_OUTCOMES = (
    "import json, sys, numpy, cupy, cupy.lib.stride_tricks\n"
    "def outcome(call, x):\n"
    "    try:\n"
    "        r = eval(call)\n"
    "    except Exception as e:\n"
    "        return type(e).__name__\n"
    "    return f'{type(r).__module__}.{type(r).__name__}'\n"
    "calls, values = json.loads(sys.argv[1])\n"
    "print(json.dumps({f'{c} with x = {v}': outcome(c, eval(v)) for c in calls for v in values}))\n"
)


def test_the_stand_in_refuses_what_the_installed_cupy_refuses():
    """What CuPy 14.2 does with NumPy arrays, NumPy and Python scalars and lists, asked of the installed CuPy."""
    real = pytest.importorskip("cupy")
    if getattr(real, "EMULATED", False) or real.__version__ != "14.2.0":
        pytest.skip(f"compares with CuPy 14.2.0; {getattr(real, '__version__', '?')} is installed")
    arg = json.dumps([_REFUSALS, _VALUES])
    runs = {}
    for who, code, env in (
        ("cupy", _OUTCOMES, None),
        ("stand-in", "import gpu_emulation.emulate as e; e.activate()\n" + _OUTCOMES, _emulated_env()),
    ):
        out = subprocess.run([sys.executable, "-c", code, arg], env=env, capture_output=True, text=True, check=True)
        runs[who] = json.loads(out.stdout.strip().splitlines()[-1])
    compared = {k: v for k, v in runs["cupy"].items() if v != "CUDARuntimeError"}
    assert len(compared) > 100, compared  # most calls are answered before the device is touched
    differ = {k: (v, runs["stand-in"][k]) for k, v in compared.items() if runs["stand-in"][k] != v}
    assert not differ, f"(CuPy, stand-in) differ: {differ}"


def test_every_known_gap_names_one_cell_of_its_notebook():
    """nbemul.KNOWN_GAPS finds its cells by a line of their source: each line is in exactly one code cell, so a
    cell inserted earlier in the notebook cannot turn a known gap into a failure, nor another cell into a gap."""
    import nbformat

    names = {name for name, _ in nbemul.KNOWN_GAPS}
    for name in sorted(names):
        path = next(p for p in (ROOT / "notebooks" / name, ROOT / "labs" / "solutions" / name) if p.exists())
        nb = nbformat.read(path, as_version=4)
        assert len(nbemul.known_gaps(name, nb)) == sum(n == name for n, _ in nbemul.KNOWN_GAPS)
    nb = nbformat.read(ROOT / "notebooks" / "06_cupy_interop.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("with copies.count() as device_chain:\n    pass"))
    with pytest.raises(AssertionError, match="KNOWN_GAPS is stale"):
        nbemul.known_gaps("06_cupy_interop.ipynb", nb)


def test_every_shrink_finds_one_cell_and_applies():
    """nbemul.SHRINK (gpu sizes made small for the full audit) finds each cell by a text in exactly one code cell and
    every edit still matches it: keyed by cell numbers, 08's and 09's had gone stale and the full audit stopped at
    them ('nbemul.SHRINK is stale: 09_train_cnn.ipynb cell 18') before running a cell."""
    import nbformat

    for name in sorted({name for name, _ in nbemul.SHRINK}):
        path = next(p for p in (ROOT / "notebooks" / name, ROOT / "labs" / "solutions" / name) if p.exists())
        nb = nbformat.read(path, as_version=4)
        before = [c.source for c in nb.cells]
        nbemul.shrink(name, nb)
        changed = sum(a != c.source for a, c in zip(before, nb.cells))
        assert changed == sum(n == name for n, _ in nbemul.SHRINK), name
    nb = nbformat.read(ROOT / "notebooks" / "09_train_cnn.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("assert max(speeds[1:]) > speeds[0]"))
    with pytest.raises(AssertionError, match="SHRINK is stale"):
        nbemul.shrink("09_train_cnn.ipynb", nb)
