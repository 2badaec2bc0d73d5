"""``python -m gpulab notebooks execute [PATHS]``: run notebooks again in place, the way the course commits them.

Lessons and lab solutions are committed with the outputs of a simulator-mode run (CONTRIBUTING.md). This runs
each given notebook top to bottom in a fresh kernel of this Python, one after the other:

- in simulator mode (``GPULAB_DEVICE=simulator`` for the kernel, whatever this process's mode);
- over unix sockets, polled in one-second slices (:class:`gpulab.grading.sliced.SlicedKernelManager`: no kernel
  loses a TCP port race to another one started beside it, and no cell comes back only at its timeout);
- with the widgets' state stored in the notebook, so the explorers show their last figure where the notebook is
  only read (GitHub, nbviewer);
- keeping the notebook's ``language_info`` as it was: the learner versions generated from it (``lessons release``,
  ``labs release``) then change only where its cells did.

Without paths it runs the notebooks committed with outputs (:func:`sources`); the learner and student versions are
generated from them without outputs and are refused. A notebook is written back only when every cell ran. One that
fails stays on disk as it was; its failing cell and error are printed, and the exit status is 1.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["CELL_TIMEOUT", "GENERATED", "execute_in_place", "refuse_generated", "run_all", "sources"]

CELL_TIMEOUT = 600  # seconds a cell may take (lab 09's training cell takes about a minute on 2 cores)
GENERATED = {"notebooks/learner": "lessons", "labs/student": "labs"}  # folder -> the command that makes it


@contextlib.contextmanager
def _simulator_env() -> Iterator[None]:
    """The kernels started inside inherit ``GPULAB_DEVICE=simulator``; this process's environment is put back."""
    before = os.environ.get("GPULAB_DEVICE")
    os.environ["GPULAB_DEVICE"] = "simulator"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("GPULAB_DEVICE", None)
        else:
            os.environ["GPULAB_DEVICE"] = before


def _failure(exc: BaseException, cell: int | None) -> str:
    from .nbexec import _error_text

    where = f"cell {cell}" if cell is not None else "before the first cell"
    return f"{where}: {_error_text(exc)}"


def execute_in_place(path: Path, cell_timeout: int = CELL_TIMEOUT) -> tuple[bool, str]:
    """Run the notebook at ``path`` (see the module's text); ``(True, "")`` when it ran and was written back, else
    ``(False, what failed)`` with the file untouched."""
    import nbformat
    from nbclient import NotebookClient

    from .nbexec import stop_kernel, this_python_kernel_manager

    path = path.resolve()  # a link's target is the notebook written back
    original = path.read_bytes()
    nb = nbformat.reads(original.decode("utf-8"), as_version=4)
    language_info = copy.deepcopy(nb.metadata.get("language_info"))
    at: list[int | None] = [None]

    def started(cell: Any, cell_index: int, **_: Any) -> None:
        at[0] = cell_index

    km = this_python_kernel_manager()
    client = NotebookClient(
        nb,
        km=km,
        timeout=cell_timeout,
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=True,
        on_cell_execute=started,
    )
    with _simulator_env():
        try:
            client.execute()
        except Exception as exc:  # a cell's error, a timeout, a kernel that died or never started
            return False, _failure(exc, at[0])
        finally:  # nbclient leaves a kernel it did not start running: stop it before the next notebook's
            stop_kernel(km)
    if language_info is not None:
        nb.metadata["language_info"] = language_info
    if path.read_bytes() != original:  # changed on disk while it ran (an editor saved it): keep that work
        return False, "the file changed on disk while it ran; it was left as it is now. Run it again."
    tmp = path.with_name(f".{path.name}.executing")
    try:
        nbformat.write(nb, str(tmp))
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        return False, f"it ran, but could not be written back ({exc}); the file is as it was."
    finally:
        tmp.unlink(missing_ok=True)
    return True, ""


def sources(root: Path) -> list[Path]:
    """The notebooks committed with outputs: the lessons (``notebooks/*.ipynb``) and the lab solutions."""
    return sorted((root / "notebooks").glob("*.ipynb")) + sorted((root / "labs" / "solutions").glob("*.ipynb"))


def refuse_generated(paths: list[Path], root: Path) -> None:
    """:class:`UsageError` for a learner or student version: generated from a source notebook, without outputs."""
    from .errors import UsageError

    for path in paths:
        for folder, command in GENERATED.items():
            if path.resolve().is_relative_to((root / folder).resolve()):
                raise UsageError(
                    f"{path} is generated by `python -m gpulab {command} release` and committed without outputs; "
                    f"execute its source instead ({sources_hint(folder)}), then run that release."
                )


def sources_hint(folder: str) -> str:
    return "notebooks/NN_name.ipynb" if folder.startswith("notebooks") else "labs/solutions/labNN_name.ipynb"


def run_all(paths: list[Path], root: Path, cell_timeout: int = CELL_TIMEOUT) -> int:
    """Execute every notebook in ``paths`` in turn, printing one line each; 0 when all ran, else 1."""
    failed = 0
    kinds = set()
    for path in paths:
        t0 = time.monotonic()
        ok, why = execute_in_place(path, cell_timeout)
        name = path.relative_to(root) if path.is_relative_to(root) else path
        if ok:
            print(f"executed {name} ({time.monotonic() - t0:.0f} s)", flush=True)
            kinds.add("labs" if "solutions" in path.parts else "lessons" if path.parent.name == "notebooks" else "")
        else:
            failed += 1
            print(f"FAILED {name}, left as it was: {why}", flush=True)
    then = [f"python -m gpulab {k} release" for k in ("lessons", "labs") if k in kinds]
    if then:
        print(f"Then regenerate the learner versions: {' and '.join(then)}.")
    if failed:
        print(f"{failed} of {len(paths)} notebooks failed: fix them and run those again.")
        return 1
    return 0
