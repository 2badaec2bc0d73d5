"""What the grading checker relies on, and putting it back: :class:`Snapshot` and :func:`load_checker`.

:func:`load_checker` imports everything a check may use (gpulab's problems, kernels, numba.cuda) before any student
code runs; :class:`Snapshot` then records every function, class and module loaded so far, ``__code__`` of gpulab's
and NumPy's functions, warning filters, and gpulab's module-level objects (a Problem's settings, registries).
:meth:`Snapshot.restore` puts all of it back (and clears trace hooks) before a test cell; :meth:`Snapshot.changes`
names what a submission replaced. Both graders use it: ``labs grade``'s runner (:mod:`gpulab.grading.runner`) and
the guard in an nbgrader kernel (:mod:`gpulab.grading.guard`).
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["CRITICAL", "Snapshot", "load_checker"]

CRITICAL = ("gpulab", "numpy", "builtins", "math", "numba", "warnings", "json", "os", "sys")


def _keep(value: Any) -> bool:
    return isinstance(
        value, (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType, types.MethodType)
    ) or callable(value)


class Snapshot:
    """What the checker relies on, taken before any student code runs."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.modules: dict[str, tuple[types.ModuleType, dict]] = {}
        self.code: list[tuple[types.FunctionType, Any, Any, Any]] = []
        self.classes: list[tuple[type, dict]] = []
        for name, mod in list(sys.modules.items()):
            d = getattr(mod, "__dict__", None)
            if not isinstance(mod, types.ModuleType) or not isinstance(d, dict) or name == "__main__":
                continue
            kept = {k: v for k, v in d.items() if _keep(v) or k.isupper()}
            self.modules[name] = (mod, kept)
            if name.split(".")[0] not in CRITICAL:
                continue
            for v in kept.values():
                if isinstance(v, types.FunctionType):
                    self.code.append((v, v.__code__, v.__defaults__, v.__kwdefaults__))
                elif isinstance(v, type) and getattr(v, "__module__", "") == name and name.startswith("gpulab"):
                    attrs = dict(v.__dict__)
                    self.classes.append((v, attrs))
                    for a in attrs.values():
                        f = getattr(a, "fget", a)
                        if isinstance(f, types.FunctionType):
                            self.code.append((f, f.__code__, f.__defaults__, f.__kwdefaults__))
        import warnings

        self.filters = list(warnings.filters)
        # gpulab's module-level objects (Problems, registries): their state, one level of containers deep
        self.objects: list[tuple[Any, dict]] = []
        self.labels: dict[int, str] = {}  # id(state) -> the object's name, its most specific module's
        seen: set[int] = set()
        for name, (mod, _) in self.modules.items():
            if not name.startswith("gpulab"):
                continue
            for attr, v in list(vars(mod).items()):
                if isinstance(v, (types.ModuleType, types.FunctionType, type)):
                    continue
                state = getattr(v, "__dict__", None)
                key = id(state) if isinstance(state, dict) else id(v)
                if key not in self.labels or len(name) > len(self.labels[key]):  # lab01.AFFINE, not problems.AFFINE
                    self.labels[key] = f"{name}.{attr}"
                if id(v) in seen:
                    continue
                seen.add(id(v))
                # only gpulab's own objects (a Problem): a numba kernel's launch state changes legitimately
                if isinstance(state, dict) and type(v).__module__.startswith("gpulab"):
                    self.objects.append((state, {k: _copy(x) for k, x in state.items()}))
                elif isinstance(v, (list, dict, set)):
                    self.objects.append((v, _copy(v)))

    def restore(self) -> None:
        """Put everything back (before a test cell)."""
        import threading
        import warnings

        sys.settrace(None)
        sys.setprofile(None)
        threading.settrace(None)
        threading.setprofile(None)
        for name, (mod, kept) in self.modules.items():
            sys.modules[name] = mod
            d = mod.__dict__
            for k, v in kept.items():
                if d.get(k, _MISSING) is not v:
                    d[k] = v
        for name in [n for n in sys.modules if n.startswith("gpulab") and n not in self.modules]:
            if not str(getattr(sys.modules[name], "__file__", "") or "").startswith(self.package):
                del sys.modules[name]  # planted by the submission: a later import reads the read-only package
        for fn, code, defaults, kwdefaults in self.code:
            if fn.__code__ is not code:
                fn.__code__ = code
            fn.__defaults__, fn.__kwdefaults__ = defaults, kwdefaults
        for cls, attrs in self.classes:
            for k in [k for k in list(cls.__dict__) if k not in attrs]:
                try:
                    delattr(cls, k)
                except (AttributeError, TypeError):
                    pass
            for k, v in attrs.items():
                if cls.__dict__.get(k, _MISSING) is not v and k not in ("__dict__", "__weakref__", "__doc__"):
                    try:
                        setattr(cls, k, v)
                    except (AttributeError, TypeError):
                        pass
        warnings.filters[:] = self.filters  # type: ignore[index]
        warnings._filters_mutated()  # type: ignore[attr-defined]
        for target, saved in self.objects:
            _put_back(target, saved)

    def changed(self) -> str:
        """What of the checker changed since :meth:`restore` (empty: nothing): the first of :meth:`changes`."""
        return next(self._changes(), "")

    def changes(self, limit: int = 40) -> list[str]:
        """Up to ``limit`` things of the checker that changed since :meth:`restore`, each "X was replaced",
        gpulab's first (a Problem's check, report) and then the libraries' (numpy.allclose ...)."""
        found: list[str] = []
        for what in self._changes():
            if what not in found:
                found.append(what)
            if len(found) >= limit:
                break
        return sorted(found, key=lambda w: not w.removesuffix(" was replaced").split(" ")[-1].startswith("gpulab"))

    def _changes(self) -> Any:
        for name, (mod, kept) in self.modules.items():
            if name.split(".")[0] not in CRITICAL:
                continue
            if sys.modules.get(name) is not mod:
                yield f"sys.modules[{name!r}] was replaced"
                continue
            d = mod.__dict__
            for k, v in kept.items():
                if d.get(k, _MISSING) is not v:
                    yield f"{name}.{k} was replaced"
        for fn, code, _, _ in self.code:
            if fn.__code__ is not code:
                yield f"the code of {fn.__module__}.{fn.__qualname__} was replaced"
        for cls, attrs in self.classes:
            for k, v in attrs.items():
                if cls.__dict__.get(k, _MISSING) is not v and k not in ("__dict__", "__weakref__", "__doc__"):
                    yield f"{cls.__module__}.{cls.__qualname__}.{k} was replaced"
        for target, saved in self.objects:
            if not isinstance(saved, dict):
                continue
            label = self.labels.get(id(target), "a setting of the checks")
            for k, x in saved.items():  # public settings of gpulab's objects (a Problem's spec, sizes ...)
                if k.startswith("_"):
                    continue  # private caches may change legitimately
                live = x[1] if isinstance(x, tuple) and len(x) == 3 and x[0] in ("list", "dict", "set") else x
                if target.get(k, _MISSING) is not live:
                    yield f"{label}.{k} was replaced"
            for k in target:  # a method shadowed on the object (AFFINE.check = ...)
                if k not in saved and not k.startswith("_"):
                    yield f"{label}.{k} was replaced"


_MISSING = object()


def _copy(x: Any) -> Any:
    """A container's shallow copy (kept apart from the live one), anything else as is."""
    if isinstance(x, list):
        return ("list", x, list(x))
    if isinstance(x, dict):
        return ("dict", x, dict(x))
    if isinstance(x, set):
        return ("set", x, set(x))
    return x


def _put_back(target: Any, saved: Any) -> None:
    if isinstance(saved, tuple) and len(saved) == 3 and saved[0] in ("list", "dict", "set"):
        kind, live, items = saved
        if kind == "list":
            live[:] = items
        else:
            live.clear()
            live.update(items)
        return
    if isinstance(target, dict) and isinstance(saved, dict):
        for k in [k for k in target if k not in saved]:
            del target[k]
        for k, x in saved.items():
            if isinstance(x, tuple) and len(x) == 3 and x[0] in ("list", "dict", "set"):
                target[k] = x[1]
                _put_back(None, x)
            elif target.get(k, _MISSING) is not x:
                target[k] = x


def load_checker() -> None:
    """Import everything a check may use (gpulab's problems, kernels, numba.cuda), before any student code runs,
    so that :class:`Snapshot` sees all of it."""
    import importlib
    import pkgutil

    import numpy  # noqa: F401

    import gpulab.exercises  # noqa: F401
    from gpulab import runtime  # noqa: F401

    for sub in (
        "numba.cuda",
        "gpulab.errors",
        "gpulab.simulator",
        "gpulab.kernels",
        "gpulab.exercises",
        "gpulab.problems",
        "gpulab.nn",
    ):
        try:
            mod = importlib.import_module(sub)
        except ImportError:
            continue
        for info in pkgutil.walk_packages(getattr(mod, "__path__", []), sub + "."):
            try:
                importlib.import_module(info.name)
            except Exception:
                pass
