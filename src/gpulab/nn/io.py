"""Save and load a model's state (parameters and buffers: :meth:`Sequential.state_dict`), where ``fit`` left off
with it (:class:`FitState`, keys prefixed :data:`FIT_PREFIX`), and optionally its optimizer's (:meth:`Adam.state_dict`,
or a :class:`MixedPrecision`'s with its master weights; keys prefixed :data:`OPTIMIZER_PREFIX`), as one plain ``.npz``
file (no pickle): a checkpoint that training continues from exactly as without the round trip."""

from __future__ import annotations

import errno
import os
import secrets
import shlex
import shutil
import stat
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..errors import FolderMissingError, FolderNotWritableError, UsageError
from .fit_state import FIT_PREFIX, FitState

__all__ = [
    "FIT_PREFIX",
    "OPTIMIZER_PREFIX",
    "check_writable_file",
    "checkpoint_path",
    "load",
    "prepare_output_file",
    "save",
    "write_atomically",
]

# An optimizer's key in a checkpoint: "optimizer.<its state_dict key>" (a model's keys start with a layer index or
# "buffers.", a fit state's with "fit.", so none can collide).
OPTIMIZER_PREFIX = "optimizer."


def checkpoint_path(path: str | os.PathLike) -> Path:
    """The file :func:`save` writes for ``path``: ``path`` itself if it ends in ``.npz``, else ``path`` + ``.npz``."""
    path = Path(path)
    return path if path.suffix == ".npz" else path.with_suffix(path.suffix + ".npz")


def _check_optimizer(model: Any, optimizer: Any, what: str) -> None:
    owner = getattr(getattr(optimizer, "model", None), "owner", None)  # a MixedPrecision's master weights
    if owner is not None and owner.model is model:
        raise UsageError(
            f"{what}: this {type(optimizer).__name__} updates the FP32 master weights of a MixedPrecision over this "
            "model; pass the MixedPrecision itself (optimizer=amp): its state holds the master weights, the loss "
            f"scale and this {type(optimizer).__name__}'s state."
        )
    if getattr(optimizer, "model", None) is not model:
        raise UsageError(
            f"{what}: the optimizer ({type(optimizer).__name__}) was not built over this model, so its state would "
            "not match the model's parameters. Pass the optimizer made with this model, e.g. opt = nn.Adam(model)."
        )


def _exists_error(path: Path) -> UsageError:
    return UsageError(
        f"{path} already exists; nn.save does not replace a file unless told to. Pass overwrite=True to replace "
        "it, or choose another path."
    )


def check_writable_file(path: str | os.PathLike, what: str, *, example: str = "out", shell: bool = False) -> None:
    """Refuse now, before any long work, a ``path`` that no file can be written to, naming it (not a temp file next
    to it), who asked (``what``: ``"nn.save"``, ``"--json"``) and what to do: a folder (:class:`UsageError`, with
    ``example`` as a file name in it), a missing folder (:class:`FolderMissingError`, also a FileNotFoundError; how
    to make it in a shell with ``shell``, else in Python) or one that is not writable (:class:`FolderNotWritableError`,
    also a PermissionError). Library code raises; the command line turns these into a message and exit code 2.
    A command's output file creates its missing folders instead: :func:`prepare_output_file`."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    _refuse_a_folder(p, what, example)
    if not folder.is_dir():
        make = f"mkdir -p {shlex.quote(str(folder))}" if shell else f"pathlib.Path({str(folder)!r}).mkdir(parents=True)"
        raise FolderMissingError(
            f"{what}: the folder {str(folder)!r} does not exist (given {str(p)!r}). Create it first ({make}) or "
            "choose another path."
        )
    if not os.access(folder, os.W_OK):
        raise FolderNotWritableError(
            f"{what}: the folder {str(folder)!r} is not writable (given {str(p)!r}); choose another path."
        )


def prepare_output_file(path: str | os.PathLike, what: str, *, example: str = "out.json") -> Path:
    """A command's output file (``--json``, ``--html``, ``--save``), checked before any long work: its missing
    folders are created (as ``mkdir -p``), then refused with what was given (``what``: ``"--json"``) and what to do:
    a folder (``example`` is a file name to give in it), a folder that cannot be created (a file in the way, no
    permission) or written (:class:`FolderNotWritableError`), a file there that cannot be written. Every command
    that writes a results file calls this; the command line turns the :class:`UsageError` into a message and exit
    code 2. Returns ``path`` as a :class:`Path`."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    _refuse_a_folder(p, what, example)
    above = next((f for f in (folder, *folder.parents) if f.exists()), None)
    if above is not None and not above.is_dir():
        raise UsageError(
            f"{what}: {str(above)!r} is a file, not a folder, so {str(p)!r} cannot be created in it; choose another "
            "path."
        )
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # no permission, a read-only file system, ...
        raise UsageError(
            f"{what}: cannot create the folder {str(folder)!r} for {str(p)!r} ({exc.strerror or exc}); choose "
            "another path."
        ) from None
    check_writable_file(p, what, example=example)
    if p.exists() and not os.access(p, os.W_OK):
        raise UsageError(
            f"{what}: the file {str(p)!r} exists and is not writable; choose another path, or make it writable "
            f"(chmod u+w {shlex.quote(str(p))})."
        )
    return p


def _refuse_a_folder(p: Path, what: str, example: str) -> None:
    if p.is_dir():
        raise UsageError(
            f"{what}: {str(p)!r} is a folder, not a file; give a file name, e.g. {str(p / example)!r}, or choose "
            "another path."
        )


def _publish(tmp: Path, path: Path, overwrite: bool) -> None:
    """Give the whole file ``tmp`` the name ``path``: replacing a file there only with ``overwrite``, else in one
    step that fails if ``path`` exists (a hard link; :class:`FileExistsError` naming ``path``), so no file that
    appears after the first check is replaced."""
    if overwrite:
        try:  # the replaced file's permission bits, as np.savez writing over it would keep them
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        except FileNotFoundError:  # nothing to replace: the new file's bits follow the umask
            pass
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise FileExistsError(errno.EEXIST, "a file exists at this path", str(path)) from None
    except OSError:  # no hard links here (FAT, some network file systems): create the name exclusively, copy in
        with open(path, "xb") as dst, open(tmp, "rb") as src:  # "x": FileExistsError naming path
            try:
                shutil.copyfileobj(src, dst)
                dst.flush()
                os.fsync(dst.fileno())
            except BaseException:
                dst.close()
                path.unlink(missing_ok=True)  # the file this call created: never leave half of it
                raise
    tmp.unlink()


def write_atomically(
    path: str | os.PathLike, write: Callable[[IO[Any]], object], *, overwrite: bool = False, text: bool = False
) -> Path:
    """Let ``write(f)`` fill a temp file of its own in ``path``'s folder (binary, or UTF-8 text with ``text``), put it
    on disk, then publish it under ``path`` whole: ``path`` is the old file (or none) or the whole new one, and the
    temp file is removed on any error, an interrupt (``KeyboardInterrupt``) too. An existing file is replaced only
    with ``overwrite`` (keeping its permission bits); without it a file at ``path``, even one that appeared while
    ``write`` ran, is kept and :class:`FileExistsError` (naming ``path``) is raised. Returns ``path``."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp")  # a name no other write uses
    try:
        with open(tmp, "x", encoding="utf-8") if text else open(tmp, "xb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # on disk before it gets the user's name: a crash leaves no empty file there
        _publish(tmp, path, overwrite)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def save(model: Any, path: str | os.PathLike, optimizer: Any = None, *, overwrite: bool = False) -> Path:
    """Write ``model.state_dict()`` (every parameter and buffer), where :func:`gpulab.train.fit` left off (its
    :class:`FitState`, if the model was trained with it) and, if given, ``optimizer.state_dict()`` (an optimizer,
    or a :class:`MixedPrecision` with its master weights, loss scale and optimizer) to ``path`` (``.npz``:
    :func:`checkpoint_path`), atomically: into a temp file of its own next to ``path``, then published under
    ``path`` whole, so ``path`` is the old file or the whole new one, and no temp file is left. An existing file is
    replaced only with ``overwrite=True`` (keeping its permission bits); without it a file that appears at ``path``
    while saving is kept too (the save raises :class:`UsageError`). A missing folder is not created."""
    path = checkpoint_path(path)
    check_writable_file(path, "nn.save", example="model.npz")
    if path.exists() and not overwrite:
        raise _exists_error(path)  # early, before any work; _publish checks again, in the same step as the write
    state = model.state_dict()
    fit_state = getattr(model, "fit_state", None)
    if fit_state is not None:
        state.update({FIT_PREFIX + k: v for k, v in fit_state.state_dict().items()})
    if optimizer is not None:
        _check_optimizer(model, optimizer, "nn.save")
        state.update({OPTIMIZER_PREFIX + k: v for k, v in optimizer.state_dict().items()})
    try:  # a file object: np.savez adds no ".npz" to the temp name
        write_atomically(path, lambda f: np.savez(f, **state), overwrite=overwrite)
    except FileExistsError as e:
        if e.filename != str(path):  # not the user's file (the temp file's name was taken): as it is
            raise
        raise _exists_error(path) from None  # a file that appeared at path while saving: kept
    return path


def load(model: Any, path: str | os.PathLike, optimizer: Any = None) -> Any:
    """Load a state saved by :func:`save` into ``model`` and, if given, into ``optimizer`` (built over ``model``).

    Names, shapes and dtypes must match (:meth:`Sequential.load_state_dict`, :meth:`Adam.load_state_dict`), and so
    must the optimizer's kind and settings; everything is checked before anything is copied. ``optimizer`` may be a
    :class:`MixedPrecision` over ``model`` (its master weights, loss scale and optimizer). The model's
    :class:`FitState` becomes the file's (a file without one: a fresh one, as for a model never trained with fit), so a
    later ``fit`` goes on with the saving run's data order. A file saved before
    buffers were saved loads its parameters, with a warning. A file without optimizer state loads the model, and a
    given ``optimizer`` starts fresh, with one warning. Without ``optimizer`` a checkpoint's optimizer state is
    not read (a model to evaluate needs none). ``path`` may be the one given to :func:`save` (``"model"`` loads
    ``model.npz``, the file that save wrote).
    """
    path = Path(path)
    if not path.exists() and checkpoint_path(path).exists():
        path = checkpoint_path(path)
    if not path.exists():
        raise FileNotFoundError(f"no saved model at {path}; save one with gpulab.nn.save(model, {str(path)!r}).")
    try:
        with np.load(path, allow_pickle=False) as f:
            if not hasattr(f, "files"):
                raise ValueError("a single array, not an .npz archive")
            state = {k: f[k] for k in f.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        # NumPy's own message for a file that is not an .npz suggests allow_pickle=True: never do that with a
        # file you did not write (a pickle can run any code), and it would not make this file a model anyway.
        raise UsageError(
            f"{path} is not a model saved by gpulab.nn.save (an .npz archive of arrays): {type(e).__name__}. "
            "Save one with gpulab.nn.save(model, path), or check the path."
        ) from None
    opt_state = {k[len(OPTIMIZER_PREFIX) :]: v for k, v in state.items() if k.startswith(OPTIMIZER_PREFIX)}
    fit = {k[len(FIT_PREFIX) :]: v for k, v in state.items() if k.startswith(FIT_PREFIX)}
    model_state = {k: v for k, v in state.items() if not k.startswith((OPTIMIZER_PREFIX, FIT_PREFIX))}
    checked = None
    if optimizer is not None:
        _check_optimizer(model, optimizer, "nn.load")
        if opt_state:
            checked = optimizer._check_state(opt_state)  # before the model changes: a misfit changes nothing
    fit_checked = FitState.check_state(fit)
    model.load_state_dict(model_state)  # a MixedPrecision over the model takes these weights as masters (then
    # the one given as ``optimizer`` gets its own from the file, or starts fresh from them)
    fit_state = getattr(model, "fit_state", None)
    if fit_state is not None:
        fit_state.apply(fit_checked, keep_optimizer=optimizer is not None and optimizer is fit_state.optimizer)
    if checked is not None:
        optimizer._apply_state(checked)
    elif optimizer is not None:
        optimizer.reset()
        warnings.warn(
            f"{path} holds no optimizer state (saved without optimizer=, or before gpulab saved it): the model "
            f"loaded, and {type(optimizer).__name__} starts fresh (a first step: no momentum, no step count), so "
            "training goes on differently from the saving run. Save with nn.save(model, path, optimizer=opt) to "
            "keep it.",
            UserWarning,
            stacklevel=2,
        )
    return model
