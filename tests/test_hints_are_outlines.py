"""No hint a learner can see spells out a solution: hints name what to compute, which index covers what and which
pitfall to watch, and the learner still writes every line.

What is checked: every text a learner can be shown on the way to an answer, each against the solutions it must not
give away (:func:`collect`):

* the tiers of ``lessons.hint`` (the idea, then the outline), against the exercise's notebook solution and the
  reference ``lessons.reveal`` shows (tasks without a check, ``HINT_ONLY``, end with their answer by design);
* every string of the modules that check the lessons and labs: named mistakes (``Problem.mistakes``), budget hints,
  the checkers' own hints (``device_fns``, ``pipelined``, ``systolic``, ``finite_diff``, ...), against the
  solutions of the lessons or lab the module checks; the harness's general advice (``gpulab/exercises``) against
  every solution;
* the strings of the labs' own check cells, against that lab's solutions.

How (tests/hint_outlines.py): the solution is cut into statement lines, both texts are normalized (local names, the
spelling of numbers and casts) and a line *appears* in a hint when its tokens do, one after another. A hint gives a
solution away when it holds

1. two lines of the solution that follow each other (leaving out the index set-up, bounds guards and barriers an
   outline names), one of them *strong* (5 tokens or more, 2 of them the solution's own names or numbers): a
   complete line sequence, like ``for k in range(A.shape[1]): acc += A[i, k] * x[k]``;
2. or every strong line of a solution that has one or two: the whole answer of a one-line kernel,
   ``cuda.atomic.add(total, 0, a[i] * b[i])``;
3. or 60 % of the solution's tokens in runs of 8 tokens or more, however it cuts them: a solution written out with
   its lines merged or paraphrased (``dt * (watts[1:] + watts[:-1]) / 2`` with the sum and the return);
4. or, for the tiers of ``lessons.hint`` (asked for before the learner writes anything), the one formula of a short
   solution (no loop, a single statement that computes a value): the expression, or two of a conditional value's
   three parts, one of them computing (``dout[i] where y[i] > 0, else 0`` for ``dx[i] = dout[i] if y[i] > 0 else
   0.0``): for a one-line kernel the formula is the answer, however the store around it is worded. Named mistakes
   are not held to this: shown for a kernel already written, they may name the part it got wrong.

The thresholds were set on the hints of 2026-12 (59 give-aways, e.g. dot_atomic's ``i = cuda.grid(1); guard;
cuda.atomic.add(total, 0, a[i] * b[i])``): every tier-2 outline that was the solution in other words failed, while a
formula that states what to compute (``each dw[i, j] sums dout[n, i] * x[n, j] over the batch``: 37 % of the
solution's tokens, no line) and a named mistake's one-line fix (``for k in range(A.shape[1])``) pass. Runs shorter
than 8 tokens (``a.shape[0]`` is 6) and generic lines (``s //= 2``, ``for a in range(K)``) occur in prose by chance.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

import gpulab
from hint_outlines import Solution, measure, solution

ROOT = Path(__file__).resolve().parents[1]
SRC = Path(gpulab.__file__).resolve().parent  # the package under test (PYTHONPATH), whose texts are measured


@dataclass
class Hint:
    """One text a learner can be shown, where it lives, and the solutions it must not spell out."""

    where: str  # "hints 05/dot_atomic tier 2", "src/gpulab/systolic.py:231", "labs/solutions/lab11_... cell 7:12"
    text: str
    solutions: list[tuple[str, Solution]]  # (which solution, the solution)
    outline: bool = False  # a tier of lessons.hint: also held to a short solution's formula (rule 4)


def notebook_blocks(path: Path) -> list[tuple[str, str]]:
    """``(function name, solution text)`` for each ``### BEGIN SOLUTION`` block of a notebook's code cells: the name
    of the last ``def`` before the block in its cell, or the notebook's name."""
    out = []
    for cell in nbformat.read(str(path), as_version=4).cells:
        if cell.cell_type != "code" or "### BEGIN SOLUTION" not in cell.source:
            continue
        before, *blocks = cell.source.split("### BEGIN SOLUTION")
        for block in blocks:
            text = block.partition("### END SOLUTION")[0]
            defs = re.findall(r"^\s*def (\w+)\(", before, re.M)
            out.append((defs[-1] if defs else path.stem, text.split("\n", 1)[-1]))
            before += block
    return out


@functools.cache
def _lesson_solutions() -> dict[tuple[str, str], list[tuple[str, Solution]]]:
    """Each lesson exercise's notebook solution blocks (those of the function its stub defines) and reference."""
    from gpulab import lessons
    from gpulab.lessons.problems import stub_name
    from gpulab.source import kernel_source

    blocks = {p.name[:2]: notebook_blocks(p) for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}
    out: dict[tuple[str, str], list[tuple[str, Solution]]] = {}
    for les, name in [*lessons.EXERCISES, *lessons.FUNCTION_EXERCISES]:
        stub = stub_name(les, name)
        sols = [(f"notebooks/{les}_* {fn}", solution(text)) for fn, text in blocks.get(les, []) if fn == stub]
        ex = lessons.EXERCISES.get((les, name))
        if ex is not None:
            sols.append((f"reference {ex.reference.__name__}", solution(kernel_source(ex.reference))))
        out[(les, name)] = sols
    return out


def _lab_solutions() -> dict[str, list[tuple[str, Solution]]]:
    """Every lab's solution blocks by lab number ("03"), the capstone (09) included."""
    return {
        p.name[3:5]: [(f"{p.name} {fn}", solution(text)) for fn, text in notebook_blocks(p)]
        for p in sorted((ROOT / "labs" / "solutions").glob("lab[0-9][0-9]_*.ipynb"))
    }


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, text)`` of the string literals in ``tree`` a module can show: 30 characters or longer, f-strings with
    each field as a placeholder name; docstrings (a string standing alone as a statement) left out."""
    alone = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in alone | parts:
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else " _fmt_ " for v in node.values)
        else:
            continue
        if len(text) >= 30:
            out.append((node.lineno, text))
    return out


# The modules whose texts the learner meets while solving, and whose solutions they are compared with: lessons by
# number ("05"), labs as "labNN", "*" for every solution. problems/labNN*.py: lab NN; exercises/*.py: "*".
SCOPES: dict[str, tuple[str, ...]] = {
    "lessons/ex_00_04.py": ("00", "01", "02", "03", "04"),
    "lessons/mistakes_00_04.py": ("00", "01", "02", "03", "04"),
    "lessons/device_fns.py": ("01",),
    "lessons/pipelined.py": ("02", "lab02"),
    "lessons/ex_05_10.py": ("05", "06", "07", "08", "09", "10"),
    "lessons/ex_05_histogram.py": ("05",),
    "lessons/ex_05_scan.py": ("05",),
    "lessons/ex_06_tf32.py": ("06",),
    "lessons/gpu_ufunc.py": ("06", "lab06"),
    "lessons/conv_backprop.py": ("07", "08"),
    "lessons/ex_08_dropout.py": ("08",),
    "lessons/mistakes_07_08.py": ("07", "08"),
    "lessons/dropout.py": ("08", "lab08"),
    "lessons/finite_diff.py": ("08",),
    "lessons/ex_09_10.py": ("09", "10"),
    "lessons/ex_09_splitk.py": ("09",),
    "lessons/mistakes_09_splitk.py": ("09",),
    "lessons/step_check.py": ("09",),
    "lessons/ex_11.py": ("11",),
    "systolic.py": ("11",),
    "lessons/ex_12.py": ("12",),
    "lessons/ex_12_backward.py": ("12",),
    "capstone.py": ("lab09",),
    "capstone_ptx.py": ("lab09",),
    "capstone_mistakes.py": ("lab09",),
    "capstone_problems.py": ("lab09",),
    "capstone_budgets.py": ("lab09",),
    "problems/_dropout.py": ("lab08", "lab09"),
    "problems/_flash.py": ("lab12",),
    "problems/_histogram.py": ("lab05",),
    "problems/_ufunc.py": ("lab06",),
}


def collect() -> list[Hint]:
    """Every hint text a learner can meet, each with the solutions it is compared with (see the module docstring)."""
    from gpulab.lessons.problems import hints_of

    by_ex = _lesson_solutions()
    labs = _lab_solutions()
    by_lesson: dict[str, list[tuple[str, Solution]]] = {}
    for (les, _), sols in by_ex.items():
        by_lesson.setdefault(les, []).extend(sols)
    hints = [
        Hint(f"hints {les}/{name} tier {k + 1}", tier, sols, outline=True)
        for (les, name), sols in by_ex.items()
        for k, tier in enumerate(hints_of(les, name))
    ]
    scopes = dict(SCOPES)
    scopes.update({f"problems/{p.name}": (f"lab{p.name[3:5]}",) for p in sorted((SRC / "problems").glob("lab*.py"))})
    scopes.update({f"exercises/{p.name}": ("*",) for p in sorted((SRC / "exercises").glob("*.py"))})
    for mod, scope in scopes.items():
        if scope == ("*",):
            sols = [s for v in (*by_lesson.values(), *labs.values()) for s in v]
        else:
            sols = [s for k in scope for s in (labs[k[3:]] if k.startswith("lab") else by_lesson[k])]
        for line, text in _strings(ast.parse((SRC / mod).read_text())):
            hints.append(Hint(f"src/gpulab/{mod}:{line}", text, sols))
    for p in sorted((ROOT / "labs" / "solutions").glob("lab[0-9][0-9]_*.ipynb")):
        for n, cell in enumerate(nbformat.read(str(p), as_version=4).cells):
            if cell.cell_type != "code" or "### BEGIN SOLUTION" in cell.source:
                continue
            shown = cell.source.split("### BEGIN HIDDEN TESTS")[0]  # hidden tests are removed for students
            src = re.sub(r"(?m)^(\s*)[!%].*$", r"\1pass", shown)  # shell and magic lines: no hints
            for line, text in _strings(ast.parse(src)):
                hints.append(Hint(f"labs/solutions/{p.name} cell {n}:{line}", text, labs[p.name[3:5]]))
    return hints


def give_aways(hints: list[Hint]) -> list[str]:
    """One line per hint that spells out a solution: where, which solution, the lines it holds."""
    out = []
    for h in hints:
        for name, sol in h.solutions:
            m = measure(h.text, sol)
            if m.outline_gives_away if h.outline else m.give_away:
                what = f"its formula {m.formula!r}" if not m.give_away else f"lines {m.lines}"
                out.append(f"{h.where} gives away {name} ({m.covered:.0%} of its tokens; {what}): {h.text!r}")
                break
    return out


@pytest.fixture(scope="module")
def hints() -> list[Hint]:
    return collect()


def test_no_hint_spells_out_a_solution(hints):
    found = give_aways(hints)
    assert not found, f"{len(found)} hint(s) spell out a solution; write an outline instead:\n" + "\n".join(found)


def test_every_kind_of_hint_is_collected_and_has_solutions_to_compare_with(hints):
    """The check above is not vacuous: each kind of text is there, and each is compared with parsed solutions."""
    from gpulab import lessons

    wheres = [h.where for h in hints]
    tiers = [w for w in wheres if w.startswith("hints ")]
    assert len(tiers) >= 2 * len(lessons.EXERCISES), len(tiers)
    for prefix in ("src/gpulab/problems/lab0", "src/gpulab/lessons/ex_", "src/gpulab/exercises/", "labs/solutions/"):
        assert any(w.startswith(prefix) for w in wheres), prefix
    for h in hints:
        assert h.solutions and all(sol.counted for _, sol in h.solutions), h.where
    dot = next(h for h in hints if h.where == "hints 05/dot_atomic tier 2")
    assert {name.split()[0] for name, _ in dot.solutions} == {"notebooks/05_*", "reference"}


def test_every_lesson_module_of_exercises_or_named_mistakes_is_scanned():
    """A new ``lessons/ex_*.py`` or ``lessons/mistakes_*.py`` (their hints quote learners' lines) is in SCOPES."""
    names = [
        f"lessons/{p.name}" for p in sorted((SRC / "lessons").glob("*.py")) if p.name.startswith(("ex_", "mistakes_"))
    ]
    assert len(names) >= 10, names
    missing = [n for n in names if n not in SCOPES]
    assert not missing, f"add to SCOPES, with the lessons whose solutions they are compared with: {missing}"


# The tier-2 hints of 2026-12 and named-mistake hints that were the solution: each must still be caught.
OLD_GIVE_AWAYS = [
    ("05", "dot_atomic", "i = cuda.grid(1); guard; cuda.atomic.add(total, 0, a[i] * b[i])"),
    ("01", "grid_stride", "for i in range(cuda.grid(1), out.size, cuda.gridsize(1)): out[i] = a[i] + b[i]"),
    (
        "03",
        "matvec",
        "i = cuda.grid(1); if i < y.size: acc = float32(0.0); for k in range(A.shape[1]): acc += A[i, k] * x[k]; "
        "then y[i] = acc",
    ),
    (
        "04",
        "blur3",
        "buf = cuda.shared.array(34, float32); buf[tx + 1] = x[i] (0.0 past the end); thread 0 also buf[0] = "
        "x[i - 1] (0.0 at i = 0); the block's last thread also buf[tx + 2] = x[i + 1] (0.0 past the end); "
        "syncthreads; if i < n: out[i] = (buf[tx] + buf[tx + 1] + buf[tx + 2]) / 3",
    ),
    (
        "11",
        "joules_per_image",
        "dt = np.diff(times_s); joules = the sum of dt * (watts[1:] + watts[:-1]) / 2; return joules / images",
    ),
    (
        "12",
        "flash",
        "2c: tile_max = max of sS[ty, j] over j; new_max = max(row_max, tile_max); if new_max != -inf: alpha = "
        "exp(row_max - new_max); row_sum and every acc[a] *= alpha; for each j: p = exp(sS[ty, j] - new_max); "
        "row_sum += p; acc[a] += p * sV[j, tx + a * BK] for columns < dv; row_max = new_max.",
    ),
    ("06", "squared_diff", "out is x - y, not squared: out[i] = d * d with d = x[i] - y[i]."),
    ("06", "softplus", "Rewrite it: softplus(x) = max(x, 0) + log1p(exp(-abs(x))): exp then sees only values <= 0"),
]


@pytest.mark.parametrize(("lesson", "name", "text"), OLD_GIVE_AWAYS, ids=[f"{les}-{n}" for les, n, _ in OLD_GIVE_AWAYS])
def test_the_measure_catches_the_old_give_aways(lesson, name, text):
    sols = _lesson_solutions()[(lesson, name)]
    assert any(measure(text, sol).give_away for _, sol in sols), (lesson, name)


# Tier-2 hints of 2026-12 for one-line kernels that stated the formula in other words, under rules 1-3 (the store
# reworded, the condition or a value paraphrased): rule 4 catches them.
OLD_FORMULAS = [
    ("08", "relu_backward", "i = cuda.grid(1); guard; dout[i] where y[i] > 0, else 0"),
    (
        "06",
        "leaky_relu",
        "i = cuda.grid(1); guard; x[i] if positive, else float32(0.01) * x[i] (a bare 0.01 is a float64 in Numba)",
    ),
    ("10", "unscale", "i = cuda.grid(1); guard; out[i] = grads[i] * inv_scale; if inf or nan: atomic add 1"),
]


@pytest.mark.parametrize(("lesson", "name", "text"), OLD_FORMULAS, ids=[f"{les}-{n}" for les, n, _ in OLD_FORMULAS])
def test_the_formula_of_a_one_line_kernel_is_caught(lesson, name, text):
    sols = _lesson_solutions()[(lesson, name)]
    assert sols and not any(measure(text, sol).give_away for _, sol in sols), "rules 1-3 catch it now: rule 4's note"
    assert all(measure(text, sol).outline_gives_away for _, sol in sols), (lesson, name)


def test_a_named_mistake_may_name_the_part_of_the_formula_it_got_wrong():
    """Rule 4 holds the hints asked for before writing: lab 08's verdict for a kernel that stored alpha * y[i] names
    the value it should have stored there (two parts of the formula), and passes."""
    sols = [sol for name, sol in _lab_solutions()["08"] if name.endswith(" leaky_relu_backward_kernel")]
    (mistake,) = [
        h for h in collect() if h.where.startswith("src/gpulab/problems/lab08.py:") and "stored alpha" in h.text
    ]
    assert sols and not mistake.outline and not give_aways([mistake])
    assert any(measure(mistake.text, sol).formula for sol in sols)


@pytest.mark.parametrize(
    "text",
    [
        "dw = dout^T x: each dw[i, j] sums dout[n, i] * x[n, j] over the batch. One thread per element of dw.",
        "y[i] sums only the first K - 1 products: the loop over k stops one short. It must run K = A.shape[1] "
        "times: `for k in range(A.shape[1]):`.",
        "j, i = cuda.grid(2); guard i < out.shape[0] and j < out.shape[1]; then compute and store the element",
    ],
    ids=["formula", "one-line-fix", "index-set-up-and-guard"],
)
def test_the_measure_lets_an_outline_through(text):
    for key in [("08", "linear_weight_grad"), ("03", "matvec"), ("01", "scale2d")]:
        for _, sol in _lesson_solutions()[key]:
            assert not measure(text, sol).outline_gives_away, (key, text)
