"""Lessons do not display graded lab answers: no lesson notebook calls ``show_source`` (or ``lessons.reveal``) on
gpulab's own implementation of a lab exercise, and no lesson says "Lab NN asks you to write this kernel" right
before a cell that shows a kernel's source.

``LAB_ANSWERS`` names, for every graded lab problem, gpulab's implementations of its answer (empty: gpulab has
none, or the lab's own prompt states the answer). A new lab problem must be listed here, so that whoever adds it
decides which of gpulab's functions a lesson may no longer show. Lab 09's ops are the capstone's course kernels.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import nbformat
import pytest

import gpulab
from gpulab import capstone, problems
from gpulab.kernels import nn_ops
from gpulab.lessons.problems import exercise
from gpulab.source import py_func

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

_NONE = ()  # gpulab has no implementation of this answer, or the lab's prompt states it (see the comment)
LAB_ANSWERS: dict[str, tuple[str, ...]] = {
    "lab01.ADD": ("kernels.elementwise.add_kernel",),
    "lab01.AFFINE": _NONE,
    "lab01.BLUR3": _NONE,
    "lab01.SAXPY": ("kernels.elementwise.saxpy_kernel",),
    "lab01.STENCIL3": _NONE,
    "lab02.COPY2D": _NONE,
    "lab02.PIPELINED_ADD": _NONE,
    "lab02.ROTATE": _NONE,  # a variant of lesson 02's transpose_naive, which fails it (the check says so)
    "lab02.ROTATE_TILED": _NONE,  # a quarter turn through lesson 02's transpose_tiled tile, which fails it
    "lab03.DENSE_RELU": _NONE,  # W as PyTorch stores it: lesson 03's linear_relu fails it (the check says so)
    "lab03.MATMUL": ("kernels.matmul.matmul_naive_kernel",),
    "lab03.VECMAT": _NONE,  # y = x @ A: lesson 03's matvec fails it (the check says so)
    "lab04.BLOCK_REVERSE": _NONE,
    "lab04.MATMUL_TILED": ("kernels.matmul.matmul_tiled_kernel",),
    "lab04.STENCIL_SHARED": _NONE,
    "lab05.BLOCK_SUM": ("kernels.reduce.sum_tree_kernel",),
    "lab05.CONFUSION": ("lessons.answers_05_10.confusion_kernel",),
    "lab05.HISTOGRAM": ("kernels.histogram.histogram_global_kernel",),
    "lab05.SOFTMAX": ("kernels.reduce.softmax_rows_kernel",),
    "lab05.SOFTMAX_WARP": _NONE,
    "lab05.SUM_ATOMIC": ("kernels.reduce.sum_atomic_kernel",),
    "lab06.ADAM": _NONE,
    "lab06.BIAS_RELU_VIEW": _NONE,
    "lab06.GELU": _NONE,
    "lab06.GELU_GRAD": _NONE,
    "lab06.GELU_LAYER": _NONE,
    "lab06.GRAD_NORM": _NONE,
    "lab06.MATMUL_FP16": _NONE,
    "lab07.CONV1D": _NONE,
    "lab07.CONV2D": ("kernels.conv.conv2d_direct_kernel",),
    "lab07.CONV2D_IM2COL": _NONE,
    "lab07.CONV2D_SINGLE": _NONE,  # dilated: lesson 07's conv2d_single is not its answer
    "lab07.IM2COL": ("kernels.nn_ops.im2col_kernel",),
    "lab07.MAXPOOL": ("kernels.nn_ops.maxpool_kernel",),
    "lab08.CONV2D_BACKWARD": ("nn.conv.Conv2d.backward",),
    "lab08.DROPOUT_BACKWARD": ("kernels.nn_ops.dropout_kernel",),
    "lab08.DROPOUT_STEP": _NONE,
    "lab08.LINEAR_BACKWARD": ("nn.layers.Linear.backward",),
    "lab08.MAXPOOL_BACKWARD": ("kernels.nn_ops.maxpool_backward_kernel",),
    "lab08.LEAKY_RELU_BACKWARD": _NONE,  # leaky: lesson 08's relu_backward is its alpha = 0 case only
    "lab10.BUDGET": _NONE,
    "lab10.HIERARCHICAL": _NONE,
    "lab10.RING": _NONE,
    "lab10.SCALER": _NONE,
    "lab10.UNSCALE": _NONE,  # unscale and clip: lesson 10's unscale does not clip
    "lab12.COMBINE": _NONE,
    "lab12.FLASH_LSE": ("transformer.flash.flash_attention_kernel",),
    "lab12.SCALE_MASK": ("transformer.attention.scale_mask_kernel",),
    "lab12.SOFTMAX_BACKWARD": _NONE,
}


def _resolve(dotted: str) -> object:
    """``"kernels.memory.transpose_tiled_kernel"`` or a method, ``"nn.layers.Linear.backward"``."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest prefix that is a module, then attributes
        try:
            obj = importlib.import_module("gpulab." + ".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"no module in {dotted!r}")


def _answers() -> dict[int, str]:
    """``id(py_func(reference))`` -> what it answers, for every listed reference and lab 09's course kernels."""
    out = {id(py_func(_resolve(d))): f"{lab} ({d})" for lab, refs in LAB_ANSWERS.items() for d in refs}
    for op, name in capstone.COURSE_KERNELS.items():
        out[id(py_func(getattr(nn_ops, name)))] = f"lab09.{op} (kernels.nn_ops.{name})"
    return out


def _code(cell: nbformat.NotebookNode) -> ast.Module | None:
    """A code cell's Python, IPython magics and shell lines dropped; None if it does not parse."""
    lines = [ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def _shown(nb: nbformat.NotebookNode) -> list[tuple[int, object]]:
    """``(cell index, object)`` for every ``show_source(X)`` and ``reveal(lesson, name)`` call in the lesson whose
    argument resolves through the notebook's imports (names the notebook defines itself are skipped)."""
    trees = [(i, _code(c)) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    namespace: dict = {"gpulab": gpulab}
    for _, tree in trees:
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, (ast.Import, ast.ImportFrom)) and (
                isinstance(node, ast.Import) or (node.module or "").split(".")[0] in ("gpulab", "numba")
            ):
                try:
                    exec(compile(ast.Module([node], []), "<imports>", "exec"), namespace)  # the lesson's own imports
                except ImportError:
                    continue  # a module this checkout lacks: the calls that need it are skipped below
    out = []
    for i, tree in trees:
        for node in ast.walk(tree) if tree else ():
            if not (isinstance(node, ast.Call) and node.args):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            try:
                if name == "show_source":
                    out.append((i, py_func(eval(compile(ast.Expression(node.args[0]), "<arg>", "eval"), namespace))))
                elif name == "reveal" and len(node.args) == 2:
                    lesson, ex = (ast.literal_eval(a) for a in node.args)
                    out.append((i, py_func(exercise(lesson, ex).reference)))
            except (NameError, AttributeError, ValueError):
                continue  # a kernel the lesson defines itself
    return out


def test_every_graded_lab_problem_is_listed():
    assert set(LAB_ANSWERS) == set(problems.all_problems())
    assert _answers()  # every listed name resolves (_resolve raises otherwise)


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_lesson_shows_a_graded_lab_answer(path):
    answers = _answers()
    nb = nbformat.read(path, as_version=4)
    found = [f"cell {i}: {answers[id(obj)]}" for i, obj in _shown(nb) if id(obj) in answers]
    assert not found, f"{path.name} displays the answer of graded lab exercises: {found}"


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_no_lesson_shows_the_kernel_a_lab_asks_for(path):
    nb = nbformat.read(path, as_version=4)
    shows = {i for i, _ in _shown(nb)}
    asks = re.compile(r"Lab \d+\S* asks you to write this\s+kernel(?!, so its source is not shown)")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown" and asks.search(cell.source):
            following = next((j for j in range(i + 1, len(nb.cells)) if nb.cells[j].cell_type == "code"), None)
            assert following not in shows, f"{path.name} cell {i} says a lab asks for the kernel cell {following} shows"
