"""Do the CuPy and numba-cuda names that gpulab's code uses exist in the installed versions?

``make test`` runs this against the newest pins (CuPy 14, numba-cuda 0.30, numba 0.68) and ``make
test-oldest`` against the oldest gpulab supports (CuPy 13, numba-cuda 0.22, numba 0.60), through
tests/test_api_versions.py. mypy cannot do it: it reads ``numba.cuda`` from numba's own (deprecated,
built-in) copy rather than numba-cuda's, and CuPy's compiled modules (cupy.cuda.runtime, nccl, ...)
are ``Any`` to it. So this reads the code instead and asks the real modules:

1. Scan: every ``import`` of cupy, cupyx, cupy_backends or numba (any alias, any scope) in
   src/gpulab/**/*.py, the lesson notebooks and the lab solutions, then every attribute chain rooted
   at such a name (``cp.cuda.runtime.getDeviceProperties``, ``cuda.threadIdx.x``) and ``xp.<name>``
   (the array module: checked against CuPy), with the keyword names of the calls made through them.
2. Resolve: import the module (numba.cuda as the device API, ``NUMBA_ENABLE_CUDASIM=0``: no GPU is
   needed to import it) and follow the chain with getattr, importing submodules where getattr does
   not find them, as long as the object is a module or a class; check each keyword against the
   callable's signature where Python can read it.

``python tests/apicheck.py [PATH ...]`` prints the versions and every missing name with where it is
used, and exits 1 when one is missing (2 when CuPy or numba-cuda is not installed).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import types
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

os.environ["NUMBA_ENABLE_CUDASIM"] = "0"  # numba.cuda's device API, the one gpu mode calls

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("cupy", "cupyx", "cupy_backends", "numba")
# Names that hold CuPy where no import binds them: xp, the array module of code written once for NumPy
# and CuPy (checked against CuPy, the one gpu mode passes), ``cupy = interop.require_cupy()`` and
# ``nccl = interop.require_nccl()``.
ARRAY_MODULE = {"xp": "cupy", "cp": "cupy", "cupy": "cupy", "nccl": "cupy.cuda.nccl"}


def default_sources() -> list[Path]:
    """gpulab's package, the lessons (not their generated learner versions) and the lab solutions."""
    return (
        sorted((ROOT / "src" / "gpulab").rglob("*.py"))
        + sorted((ROOT / "notebooks").glob("*.ipynb"))
        + sorted((ROOT / "labs" / "solutions").glob("*.ipynb"))
    )


_MAGIC = re.compile(r"^(\s*)(?=[%!])", re.MULTILINE)


def _code(path: Path) -> list[tuple[str, str]]:
    """(label, source) for a .py file, or one per code cell of a notebook (IPython magics blanked)."""
    if path.suffix != ".ipynb":
        return [(str(path), path.read_text())]
    cells = json.loads(path.read_text())["cells"]
    out = []
    for n, cell in enumerate(cells):
        if cell["cell_type"] == "code":
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            out.append((f"{path}:cell {n}", _MAGIC.sub(r"\1pass  # ", src)))
    return out


@dataclass
class Usage:
    """Where a dotted name is used, and the keyword names passed when it is called."""

    where: set[str] = field(default_factory=set)
    keywords: set[str] = field(default_factory=set)


def _chain(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _aliases(tree: ast.AST, usages: dict[str, Usage], label: str) -> dict[str, str]:
    """name -> dotted module path for every import of the roots; ``from X import Y`` is a use of X.Y."""
    alias: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ROOTS:
                    if a.asname:
                        alias[a.asname] = a.name
                        usages[a.name].where.add(f"{label}:{node.lineno}")
                    else:
                        alias[a.name.split(".")[0]] = a.name.split(".")[0]
                        usages[a.name].where.add(f"{label}:{node.lineno}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in ROOTS:
                for a in node.names:
                    if a.name == "*":
                        continue
                    full = f"{node.module}.{a.name}"
                    alias[a.asname or a.name] = full
                    usages[full].where.add(f"{label}:{node.lineno}")
    return alias


def scan_source(source: str, label: str, usages: dict[str, Usage], alias: dict[str, str] | None = None) -> None:
    """Add the dotted names that ``source`` uses through the roots (and xp) to ``usages``."""
    tree = ast.parse(source)
    alias = dict(alias or {})
    alias.update(_aliases(tree, usages, label))
    names = {**{k: v for k, v in ARRAY_MODULE.items() if k not in alias}, **alias}
    parent_attr = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    calls = {id(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and id(node) not in parent_attr
            or (isinstance(node, ast.Attribute) and id(node) in calls)
        ):
            chain = _chain(node)
            if chain is None or chain[0] not in names:
                continue
            dotted = ".".join([names[chain[0]], *chain[1:]])
            use = usages[dotted]
            use.where.add(f"{label}:{node.lineno}")
            call = calls.get(id(node))
            if call is not None:
                use.keywords.update(k.arg for k in call.keywords if k.arg)


def scan(paths: list[Path]) -> dict[str, Usage]:
    """Usages in the files (a notebook's cells share one namespace, so imports carry across cells)."""
    usages: dict[str, Usage] = defaultdict(Usage)
    for path in paths:
        alias: dict[str, str] = {}
        for label, src in _code(path):
            try:
                tree = ast.parse(src)
            except SyntaxError as e:
                raise SyntaxError(f"{label}: cannot parse ({e}); blank the magic or fix the cell") from e
            alias.update(_aliases(tree, defaultdict(Usage), label))
            scan_source(src, _short(label), usages, alias)
    return dict(usages)


def _short(label: str) -> str:
    return label.replace(str(ROOT) + os.sep, "")


# CuPy modules that wrap a library this machine may lack (NCCL: CuPy's wheels do not bundle it): without
# it the Python module is an empty stand-in, so names under it are looked up among the identifiers of
# the compiled module that defines them (its Cython string table), without loading it.
COMPILED = {"cupy.cuda.nccl": "cupy_backends.cuda.libs.nccl"}
UNLOADED: set[str] = set()  # names checked that way (reported)


def _compiled_identifiers(module: str) -> set[str]:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise ModuleNotFoundError(f"{module} is not installed: cannot check the names under it")
    return {m.decode() for m in re.findall(rb"[A-Za-z_][A-Za-z0-9_]*", Path(spec.origin).read_bytes())}


def resolve(dotted: str) -> tuple[object, str | None]:
    """(object, None) when ``dotted`` exists as far as it can be followed, else (None, the part missing).

    Follows modules (importing submodules) and classes; stops at anything else (a function, a constant,
    an instance), whose attributes depend on values at run time."""
    parts = dotted.split(".")
    obj: object = importlib.import_module(parts[0])
    path = parts[0]
    for p in parts[1:]:
        if path in COMPILED and not hasattr(obj, p) and not getattr(obj, "available", True):
            UNLOADED.add(f"{path}.{p}")
            return None, (None if p in _compiled_identifiers(COMPILED[path]) else f"{path}.{p}")
        path = f"{path}.{p}"
        if not isinstance(obj, (types.ModuleType, type)):
            return obj, None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obj = getattr(obj, p)
            continue
        except AttributeError:
            if not isinstance(obj, types.ModuleType):
                return None, path
        try:
            found = importlib.util.find_spec(path) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return None, path
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = importlib.import_module(path)
    return obj, None


def _bad_keywords(obj: object, keywords: set[str]) -> list[str]:
    if not keywords or not callable(obj):
        return []
    try:
        params = inspect.signature(obj).parameters.values()  # type: ignore[arg-type]
    except (TypeError, ValueError):  # compiled without a signature: not checkable
        return []
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return []
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return sorted(keywords - names)


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("cupy-cuda12x", "cupy-cuda13x", "cupy", "numba-cuda", "numba", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            pass
    return out


def check(usages: dict[str, Usage]) -> list[str]:
    """One line per dotted name (or keyword) the installed versions do not have."""
    problems = []
    for dotted in sorted(usages):
        use = usages[dotted]
        where = ", ".join(sorted(use.where)[:3]) + (f" (+{len(use.where) - 3})" if len(use.where) > 3 else "")
        obj, missing = resolve(dotted)
        if missing:
            problems.append(f"{dotted}: {missing} does not exist here  [{where}]")
            continue
        for kw in _bad_keywords(obj, use.keywords):
            problems.append(f"{dotted}(..., {kw}=...): no such keyword here  [{where}]")
    return problems


def main(argv: list[str]) -> int:
    for needed in ("cupy", "numba_cuda"):
        if importlib.util.find_spec(needed) is None:
            print(
                f"apicheck: {needed} is not installed; it installs without a GPU "
                "(pip install cupy-cuda12x numba-cuda[cu12]) and is needed to check gpu-mode calls"
            )
            return 2
    from numba import cuda

    if getattr(cuda, "implementation", "") != "NVIDIA":
        print(f"apicheck: numba.cuda is {cuda.__file__}, not numba-cuda's: its redirect is not active")
        return 2
    paths = [Path(a).resolve() for a in argv] or default_sources()
    usages = scan(paths)
    problems = check(usages)
    vers = ", ".join(f"{k} {v}" for k, v in versions().items())
    print(f"apicheck: {len(usages)} CuPy/numba names used in {len(paths)} files, checked against {vers}")
    if UNLOADED:
        print(
            f"  {len(UNLOADED)} names found in compiled modules not loadable here (no NCCL library): "
            + ", ".join(sorted(UNLOADED))
        )
    for line in problems:
        print("  MISSING", line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
