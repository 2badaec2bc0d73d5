"""How much of a solution a hint spells out: the measurement of tests/test_hints_are_outlines.py.

A solution (a reference kernel's body, a notebook's ``### BEGIN SOLUTION`` block) is cut into its statement lines
(a compound statement contributes its header, ``for k in range(K)``), each a list of normalized tokens. A hint is
prose with code in it; it is tokenized the same way, and a solution line *appears* in it when the line's tokens
occur in the hint one after another. Normalizing makes the match about the code, not its spelling:

* the solution's own local names (assigned in it: ``acc``, ``s``, loop variables) become one placeholder, and so
  does every name of the hint that is not one of the solution's other names (its parameters, globals, ``cuda``,
  ``math``, builtins) or an attribute: ``acc += A[i, k] * B[k, j]`` matches ``s += A[i, k] * B[k, j]``;
* numbers are compared by value (``0xFFF`` is ``4095``, ``0.0`` is ``0``) and ``float32(0.0)`` is ``0``;
* ``math.`` and comments, a header's ``:`` and backticks are dropped;
* a line is also matched in other spellings: with a conditional value's condition left out (``buf[tx + 1] = x[i]``
  for ``buf[tx + 1] = x[i] if i < n else 0.0``), and with the index names assigned once from call-free arithmetic or
  the grid inlined (``range(cuda.grid(1), out.size, cuda.gridsize(1))`` for ``range(start, out.size, stride)``).

Lines are of three kinds. *Boilerplate* never counts: the index set-up every kernel starts with (``j, i =
cuda.grid(2)``, ``tx = cuda.threadIdx.x``), a barrier, a bounds guard (an ``if`` that only checks indices ``<``
sizes, ``if i < out.shape[0] and j < out.shape[1]``; a lower bound, ``0 <= i``, is an exercise's point and counts)
and lines of 3 tokens or fewer (``s //= 2``, ``row_max = new_max``): naming those is what an outline does.
*Strong* lines have :data:`MIN_TOKENS` tokens or more, two of them names or numbers of the solution's own
(``acc += A[i, k] * B[k, j]``, ``cuda.atomic.add(total, 0, a[i] * b[i])``). The rest are *weak*
(``new_max = max(row_max, tile_max)``): too generic to count alone, since prose can spell them by chance, but part
of a sequence next to a strong one.

A *short* solution (no loop) with a single *formula*, one statement that computes a value outside its indices (an
assignment, a return or a call's argument with arithmetic, a comparison or a conditional value:
``dx[i] = dout[i] if y[i] > 0 else 0.0``, ``g = grads[i] * inv_scale``), is that formula: its answer is the
expression, whatever the hint does with the store around it. The hint spells the formula out when it holds the
expression, or, for a conditional value, two of its three parts (the value kept, the condition, the other value),
one of them computing: ``dout[i] where y[i] > 0, else 0``, ``x[i] if positive, else 0.01 * x[i]``
(:class:`Formula`). The solution's locals assigned once are inlined there too (``v = x[i]``). This holds the
hints a learner asks for before writing (:attr:`Measure.outline_gives_away`): a named mistake's verdict, shown for a
kernel already written, may name the part of the formula that kernel got wrong (``dx[i] = alpha * dout[i] there``).
"""

from __future__ import annotations

import ast
import builtins
import keyword
import math
import re
import textwrap
from dataclasses import dataclass, field

RUN = 8  # coverage counts runs of at least this many tokens: shorter ones occur in prose by chance
COVERED = 0.6  # a hint holding this fraction of a solution's tokens spells it out
MIN_TOKENS = 5  # a strong line has at least this many tokens: `acc += a * B[k, j]`, not `return acc / n`

_TOKEN = re.compile(
    r"0[xX][0-9A-Fa-f]+|\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?"
    r"|[A-Za-z_]\w*|//=|\*\*=|>>=|<<=|[-+*/%&|^<>!=]=|//|\*\*|>>|<<|->|[-+*/%&|^~<>=()\[\]{},.;@]"
)
_CASTS = {"float32", "float64", "float16", "int32", "int64", "uint32", "uint64", "int8", "uint8"}
_ALWAYS_KEPT = (
    set(keyword.kwlist)
    | {n for n in dir(builtins) if not n.startswith("_")}
    | {"cuda", "math", "np", "numpy", "cp", "cupy", "numba", "xp"}
    | {n for n in dir(math) if not n.startswith("_")}  # `math.exp` is spelled `exp` (see _raw)
    | _CASTS
)
_INDEX_ATTRS = {"grid", "gridsize", "threadIdx", "blockIdx", "blockDim", "gridDim", "laneid", "warpsize", "x", "y"}
_LOCAL = "_v"


def _number(tok: str) -> str:
    try:
        value = int(tok, 16) if tok[:2].lower() == "0x" else float(tok)
    except ValueError:
        return tok
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e18 else repr(float(value))


def _raw(text: str) -> list[str]:
    """``text`` as tokens with numbers by value and casts of a number dropped (``float32(0.0)`` is ``0``)."""
    raw = _TOKEN.findall(text.replace("`", " "))
    out: list[str] = []
    k = 0
    while k < len(raw):
        t = raw[k]
        if t in _CASTS and raw[k + 1 : k + 2] == ["("] and k + 3 < len(raw) and raw[k + 3] == ")":
            inner = raw[k + 2]
            if inner[:1].isdigit() or inner[:1] == ".":
                if out[-2:] == ["np", "."]:
                    del out[-2:]
                out.append(_number(inner))
                k += 4
                continue
        if t == "." and out[-1:] == ["math"]:  # math.exp is exp, -math.inf is -inf
            out.pop()
            k += 1
            continue
        out.append(_number(t) if t[:1].isdigit() or (t[:1] == "." and len(t) > 1) else t)
        k += 1
    return out


def _names(raw: list[str], kept: set[str], local: set[str] | None = None) -> list[str]:
    """Names outside ``kept`` (and every name in ``local``) as one placeholder; attribute names are kept."""
    out: list[str] = []
    for t in raw:
        if (t[:1].isalpha() or t[:1] == "_") and not (out and out[-1] == "."):
            out.append(t if t in kept and not (local and t in local) else _LOCAL)
        else:
            out.append(t)
    return out


def tokens(text: str, kept: set[str], local: set[str] | None = None) -> list[str]:
    """``text`` as normalized tokens: numbers by value, casts of a number dropped, names outside ``kept`` (and
    every name in ``local``) as one placeholder; attribute names (after a ``.``) are kept."""
    return _names(_raw(text), kept, local)


@dataclass
class Line:
    """One statement line of a solution: its text, normalized tokens, and its kind."""

    text: str
    tokens: list[str]
    kind: str  # "boilerplate", "weak" or "strong"
    forms: list[list[str]] = field(default_factory=list)  # other spellings of the line (see :func:`solution`)
    cover: list[list[str]] = field(default_factory=list)  # those that count for coverage (no names inlined)


@dataclass
class Part:
    """A part of a formula: its spellings (as written, with the solution's once-assigned locals inlined) and
    whether it computes (an operator outside its indices)."""

    text: str
    spellings: list[list[str]]
    computes: bool


@dataclass
class Formula:
    """The one formula of a short solution (module docstring): the expression whole, or a conditional value's body,
    condition and other value (the parts of 3 tokens or more that name something of the solution's own)."""

    text: str
    parts: list[Part]
    conditional: bool

    def held(self, hay: list[str]) -> list[Part]:
        """The parts that the tokens ``hay`` hold."""
        return [p for p in self.parts if any(_contains(hay, sp) for sp in p.spellings)]

    def spelled_out(self, hay: list[str]) -> bool:
        """Whether ``hay`` states the formula: the expression; for a conditional, two parts, one computing."""
        held = self.held(hay)
        if self.conditional:
            return len(held) >= 2 and any(p.computes for p in held)
        return bool(held)


@dataclass
class Solution:
    """A solution's statement lines and the names that keep their spelling when a hint is tokenized."""

    source: str
    lines: list[Line] = field(default_factory=list)
    kept: set[str] = field(default_factory=set)
    formula: Formula | None = None  # a short solution's one formula (module docstring)

    @property
    def counted(self) -> list[Line]:
        """The lines that are not boilerplate, in order."""
        return [ln for ln in self.lines if ln.kind != "boilerplate"]


def _strip_comments(src: str) -> str:
    return "\n".join(re.sub(r"\s#.*$|^#.*$", "", ln) for ln in src.splitlines())


def _is_guard(test: ast.expr) -> bool:
    """An ``if`` test that only compares indices with sizes (``i < out.size and j < out.shape[1]``)."""

    def size_like(e: ast.expr) -> bool:
        if isinstance(e, (ast.Name, ast.Constant)):
            return True
        if isinstance(e, ast.Attribute):
            return e.attr in ("size", "shape") or size_like(e.value)
        if isinstance(e, ast.Subscript):
            return isinstance(e.value, ast.Attribute) and e.value.attr == "shape"
        if isinstance(e, ast.Call):
            return isinstance(e.func, ast.Name) and e.func.id == "len"
        return False

    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return all(_is_guard(v) for v in test.values)
    if isinstance(test, ast.Compare):
        sizes = any(isinstance(x, (ast.Attribute, ast.Subscript, ast.Call)) for x in [test.left, *test.comparators])
        ops_ok = all(isinstance(op, ast.Lt) for op in test.ops)  # `0 <= i` is a lower bound: an exercise's point
        return sizes and ops_ok and all(size_like(x) for x in [test.left, *test.comparators])
    return False


def _computes(e: ast.AST) -> bool:
    """Whether ``e`` computes a value outside its indices: arithmetic, a comparison, a condition (``a[i] * b[i]``,
    ``v if v > 0 else 0``), not ``x[i + 1]`` or ``-1``."""
    if isinstance(e, (ast.BinOp, ast.IfExp, ast.BoolOp, ast.Compare)):
        return True
    if isinstance(e, ast.UnaryOp) and not isinstance(e.operand, ast.Constant):
        return True
    if isinstance(e, ast.Subscript):
        return _computes(e.value)  # not its index
    return any(_computes(c) for c in ast.iter_child_nodes(e))


def _is_index_setup(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        f = stmt.value.func
        return isinstance(f, ast.Attribute) and f.attr in ("syncthreads", "syncwarp", "threadfence")
    if not isinstance(stmt, ast.Assign):
        return False
    attrs = [n.attr for n in ast.walk(stmt.value) if isinstance(n, ast.Attribute)]
    ops = [n for n in ast.walk(stmt.value) if isinstance(n, (ast.BinOp, ast.Subscript, ast.Compare))]
    return bool(attrs) and not ops and all(a in _INDEX_ATTRS for a in attrs)


def solution(source: str) -> Solution:
    """Parse a solution (a whole function, or the body between a notebook's solution markers) into lines."""
    src = textwrap.dedent(_strip_comments(source)).strip("\n")
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return Solution(source)
    body: list[ast.stmt] = list(tree.body)
    params: set[str] = set()
    while len(body) == 1 and isinstance(body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        fn = body[0]
        params |= {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]}
        body = list(fn.body)
    local: set[str] = set()
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            local.add(node.id)
        elif isinstance(node, ast.arg):
            local.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local.add(node.name)
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | params
    kept = (names - local) | _ALWAYS_KEPT
    sol = Solution(source, kept=kept)

    def seg(node: ast.AST) -> str:
        return ast.get_source_segment(src, node) or ast.unparse(node)

    aliases: dict[str, tuple[list[str], bool]] = {}  # a local assigned once: (its value's tokens, from the grid)

    def kind(toks: list[str]) -> str:
        if len(toks) <= 3:
            return "boilerplate"
        specific = [t for t in toks if t != _LOCAL and (t[:1].isalnum() or t[:1] == "_")]
        if len(toks) < MIN_TOKENS or len(specific) < 2 or (toks[0] == "for" and len(toks) <= 7):
            return "weak"  # `for a in range(K)` is every loop over K
        return "strong"

    def add(text: str, trivial: bool, *others: str, header: bool = False) -> None:
        spelled = [_names(_raw(t), kept, local) for t in (text, *others)]
        inlined = []
        for t in (text, *others):
            raw = _raw(t)
            swap = {n: v for n, (v, grid) in aliases.items() if header or not grid}  # the grid: in loop headers
            inlined.append(_names([x for tok in raw for x in swap.get(tok, [tok])], kept, local))
        toks = spelled[0]
        forms = [f for f in [*spelled[1:], *inlined] if f != toks and kind(f) == "strong"]
        cover = [f for f in spelled[1:] if kind(f) == "strong"]
        sol.lines.append(Line(text, toks, "boilerplate" if trivial else kind(toks), forms, cover))

    once = {
        n
        for n in local
        if sum(isinstance(x, ast.Name) and x.id == n and isinstance(x.ctx, ast.Store) for x in ast.walk(tree)) == 1
    }

    formulas: list[Formula] = []

    def part(node: ast.expr, names: int) -> Part | None:
        """``node`` as a formula's part: its spellings of 3 tokens or more with ``names`` of the solution's own names
        or numbers (a bare local, ``v``, would match any name of the hint); None if it has none."""
        raw = _raw(seg(node))
        swap = {n: v for n, (v, grid) in aliases.items() if not grid}
        spellings = []
        for sp in (_names(raw, kept, local), _names([x for tok in raw for x in swap.get(tok, [tok])], kept, local)):
            own = sum(1 for t in sp if t != _LOCAL and (t[:1].isalnum() or t[:1] == "_"))
            if len(sp) >= 3 and own >= names and sp not in spellings:
                spellings.append(sp)
        return Part(seg(node), spellings, _computes(node)) if spellings else None

    def formula(st: ast.stmt) -> None:
        """Note the value ``st`` computes, if any (a short solution's formula: module docstring)."""
        value = getattr(st, "value", None)
        if isinstance(st, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return)) and value is not None:
            exprs = [value] if _computes(value) else []
        elif isinstance(st, ast.Expr) and isinstance(st.value, ast.Call):
            exprs = [a for a in st.value.args if _computes(a)]
        else:
            exprs = []
        if not exprs:
            return
        e = exprs[0]
        if len(exprs) > 1:  # several values computed in one call: not one formula (none is checked then)
            formulas.append(Formula(seg(st), [], False))
        elif isinstance(e, ast.IfExp):
            parts = [part(x, 1) for x in (e.body, e.test, e.orelse)]
            formulas.append(Formula(seg(st), [x for x in parts if x is not None], True))
        else:
            whole = part(e, 2)
            formulas.append(Formula(seg(st), [whole] if whole is not None else [], False))

    def walk(stmts: list[ast.stmt]) -> None:
        for st in stmts:
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
                continue  # a docstring
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                walk(st.body)
            elif isinstance(st, ast.If):
                add("if " + seg(st.test), _is_guard(st.test))
                walk(st.body)
                walk(st.orelse)
            elif isinstance(st, (ast.For, ast.AsyncFor)):
                add(f"for {seg(st.target)} in {seg(st.iter)}", False, header=True)
                walk(st.body)
                walk(st.orelse)
            elif isinstance(st, ast.While):
                add("while " + seg(st.test), False)
                walk(st.body)
            elif isinstance(st, (ast.With, ast.Try)):
                walk(st.body)
            else:
                others = []
                value = getattr(st, "value", None)
                if isinstance(st, (ast.Assign, ast.AugAssign)) and isinstance(value, ast.IfExp):
                    # `buf[tx + 1] = x[i] if i < n else 0.0` is also spelled `buf[tx + 1] = x[i] (0 past the end)`
                    head = seg(st)[: value.col_offset - st.col_offset]
                    others.append(head + seg(value.body))
                add(seg(st), _is_index_setup(st) or isinstance(st, (ast.Pass, ast.Break, ast.Continue)), *others)
                if not _is_index_setup(st):
                    formula(st)
                if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                    simple = _is_index_setup(st) or not any(isinstance(n, ast.Call) for n in ast.walk(st.value))
                    if st.targets[0].id in once and simple:  # `start = cuda.grid(1)`, `c = tx + a * BK`: later
                        aliases[st.targets[0].id] = (_raw(seg(st.value)), _is_index_setup(st))  # lines are also
                        # spelled with it inlined

    walk(body)
    loops = any(
        isinstance(n, (ast.For, ast.AsyncFor, ast.While)) for n in ast.walk(ast.Module(body=body, type_ignores=[]))
    )
    if not loops and len(formulas) == 1 and formulas[0].parts:
        sol.formula = formulas[0]
    return sol


def _contains(hay: list[str], needle: list[str]) -> bool:
    n = len(needle)
    return n > 0 and any(hay[k : k + n] == needle for k in range(len(hay) - n + 1))


@dataclass
class Measure:
    """What a hint spells out of one solution."""

    shown: list[int]  # indices (into the solution's counted lines) of the lines the hint contains
    strong: list[bool]  # for each counted line of the solution: is it strong
    lines: list[str]  # the texts of the shown lines
    covered: float = 0.0  # the fraction of the counted lines' tokens the hint holds in runs of RUN tokens or more
    formula: str = ""  # a short solution's formula, when the hint spells it out (module docstring)

    @property
    def strong_shown(self) -> int:
        return sum(self.strong[k] for k in self.shown)

    @property
    def give_away(self) -> bool:
        """A complete sequence of the solution: two of its counted lines that follow each other, one of them
        strong; or, for a solution with only one or two strong lines, all of them (a one-line kernel's line is its
        whole answer); or, however the lines are cut, :data:`COVERED` of the solution's tokens."""
        pairs = zip(self.shown, self.shown[1:])
        consecutive = any(b == a + 1 and (self.strong[a] or self.strong[b]) for a, b in pairs)
        whole = 0 < sum(self.strong) <= 2 and self.strong_shown == sum(self.strong)
        return consecutive or whole or self.covered >= COVERED

    @property
    def outline_gives_away(self) -> bool:
        """For a hint a learner asks for before writing (``lessons.hint``'s tiers): :attr:`give_away`, or a short
        solution's one formula (module docstring)."""
        return self.give_away or bool(self.formula)


def measure(hint: str, sol: Solution) -> Measure:
    """How much of ``sol`` the text ``hint`` spells out."""
    hay = tokens(hint, sol.kept)
    lines = sol.counted
    shown = [k for k, ln in enumerate(lines) if any(_contains(hay, f) for f in (ln.tokens, *ln.forms))]
    total = sum(len(ln.tokens) for ln in lines)
    held = sum(max(_held(hay, f) * len(ln.tokens) / len(f) for f in (ln.tokens, *ln.cover)) for ln in lines)
    formula = sol.formula.text if sol.formula is not None and sol.formula.spelled_out(hay) else ""
    return Measure(
        shown, [ln.kind == "strong" for ln in lines], [lines[k].text for k in shown], held / max(total, 1), formula
    )


def _held(hay: list[str], line: list[str]) -> int:
    """How many of ``line``'s tokens lie in runs of :data:`RUN` tokens or more that ``hay`` holds."""
    grams = {tuple(hay[k : k + RUN]) for k in range(len(hay) - RUN + 1)}
    marked = [False] * len(line)
    for k in range(len(line) - RUN + 1):
        if tuple(line[k : k + RUN]) in grams:
            marked[k : k + RUN] = [True] * RUN
    return sum(marked)
