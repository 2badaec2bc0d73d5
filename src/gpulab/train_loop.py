"""The training loop: :func:`fit`, :func:`evaluate`, :func:`predict`, the per-epoch :class:`History`,
and the CPU settings a training run uses (BLAS threads, glibc's allocator).

Learners import these through :mod:`gpulab.train`; the command line is in :mod:`gpulab.train_cli`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any
from collections.abc import Callable

import numpy as np

from . import data as _data
from . import nn, runtime
from .kernels._launch import ceil_div
from .errors import UsageError, whole_number
from .nn.ops import label_range, labels_within, to_backend
from .train_checks import check_dataset, check_image_shape, check_model, check_optimizer, describe

__all__ = ["History", "READ_EVERY", "evaluate", "fit", "limit_threads", "predict", "tune_allocator"]

# On a GPU, fit reads the epoch's running loss and correct count (one transfer, one wait for the GPU) after the first
# step, every READ_EVERY steps and at the end of the epoch, not after each step: each read drains the GPU's queue and
# leaves it idle while Python queues the next step. That is when the progress bar's loss changes and when a NaN or
# inf loss is noticed. On the host (NumPy) reading costs nothing: every step, as ever.
READ_EVERY = 50


def tune_allocator() -> bool:
    """Let glibc keep freed memory for reuse instead of returning it to the OS (Linux only).

    Each training step allocates and frees the same large arrays (im2col buffers of tens of MB). By
    default glibc hands blocks that large straight back to the kernel, so every step pays for fresh
    zeroed pages: measured here, ~20 ms of system time per MNIST batch of 128 (about a fifth of the
    step). Raising the mmap and trim thresholds keeps those pages mapped; peak memory is unchanged.
    Returns whether the setting was applied.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        return bool(libc.mallopt(M_MMAP_THRESHOLD, 256 << 20)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 512 << 20))
    except (OSError, AttributeError):  # not glibc (e.g. musl): keep the defaults
        return False


def limit_threads(n: int | None) -> Any:
    """Cap the BLAS/OpenMP threads NumPy uses at ``n`` (needs threadpoolctl; a no-op without it).

    On a busy machine, fewer BLAS threads than cores can be much faster: a BLAS call waits for its
    slowest thread, and a thread that loses its core stalls the whole GEMM.
    """
    if not n:
        return None
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        print(
            "threadpoolctl is not installed (pip install threadpoolctl): --threads is ignored for NumPy.",
            file=sys.stderr,
        )
        return None
    return threadpool_limits(limits=int(n))


@dataclass
class History:
    """Per-epoch numbers from :func:`fit` (lists of equal length) and the run's settings."""

    epoch: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    train_accuracy: list[float] = field(default_factory=list)
    test_loss: list[float] = field(default_factory=list)
    test_accuracy: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    images_per_second: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, list]:
        return asdict(self)


def predict(model: nn.Sequential, x: Any, *, batch_size: int = 256) -> Any:
    """Logits (N, classes) in evaluation mode (dropout off), in batches.

    Each batch goes to where the model's backend computes first (``x`` may be NumPy, as a dataset holds it,
    for a model on the GPU: a CuPy-backend layer refuses NumPy input); the logits stay there."""
    check_model(model, "predict(model, x)")
    if not hasattr(x, "shape"):
        raise UsageError(
            f"predict: x must be an array of images (N, C, H, W) such as ds.x_test; it was given {describe(x)}. "
            "Convert it first: np.asarray(x, dtype=np.float32)."
        )
    batch_size = whole_number("batch_size", batch_size, example="Pass e.g. batch_size=256 (images per forward pass).")
    check_image_shape(model, x, "predict")
    return _logits(model, x, batch_size)


def _logits(model: nn.Sequential, x: Any, batch_size: int) -> Any:
    was = model.training
    model.eval()
    try:
        outs = [
            model.forward(to_backend(x[s : s + batch_size], model.backend)) for s in range(0, x.shape[0], batch_size)
        ]
        model.ops.finish()  # checks a backend held back (the capstone's, on a GPU) are read before logits are used
    finally:
        model.train(was)
    xp = runtime.array_module(*outs) if outs else np
    return xp.concatenate(outs) if outs else np.zeros((0, 0), np.float32)


def evaluate(model: nn.Sequential, x: Any, y: Any, *, batch_size: int = 256) -> dict[str, Any]:
    """``{"loss", "accuracy", "predictions"}`` on (x, y); predictions come back as NumPy."""
    check_model(model, "evaluate(model, x, y)")
    _data.check_images(x, y)
    if x.shape[0] == 0:
        raise UsageError(
            f"evaluate: there are no images to evaluate on (x has shape {tuple(x.shape)}); pass at least one, e.g. "
            "train.evaluate(model, ds.x_test, ds.y_test)."
        )
    batch_size = whole_number("batch_size", batch_size, example="Pass e.g. batch_size=256 (images per forward pass).")
    check_image_shape(model, x, "evaluate")
    logits = _logits(model, x, batch_size)
    loss = nn.SoftmaxCrossEntropy()(logits, y)
    pred = runtime.to_host(logits.argmax(axis=1))
    return {"loss": loss, "accuracy": float((pred == runtime.to_host(y)).mean()), "predictions": pred}


def fit(
    model: nn.Sequential,
    dataset: _data.Dataset,
    *,
    epochs: int = 2,
    batch_size: int = 128,
    optimizer: Any = None,
    seed: int = 0,
    progress: bool = True,
    live_plot: bool = False,
    evaluate_each_epoch: bool = True,
    workers: int = 1,
    on_epoch: Callable[[History], None] | None = None,
    step: Callable[..., Any] | None = None,
) -> History:
    """Train ``model`` on ``dataset`` for ``epochs`` more epochs with ``optimizer``, or with Adam (lr 1e-3).

    Each batch is one call of ``step(model, loss_fn, optimizer, xb, yb)``, which returns ``(loss, logits)``:
    :func:`gpulab.nn.train_step` unless you pass your own (lesson 09's exercise), with ``workers=1``.

    The data are moved once to where the model's backend computes (CuPy in gpu mode for ``cupy`` /
    ``kernels``) and indexed per batch there. ``workers > 1`` (numpy backend) splits each batch over that
    many CPU threads (:class:`gpulab.nn.DataParallel`), with one BLAS thread each.

    A call continues where the last one left off with this model (``model.fit_state``): shuffling is seeded by
    ``seed`` on the first call, and a later call with the same ``seed`` goes on with the same shuffle generator
    (another seed starts that seed's order); epochs are numbered on (``History.epoch`` of a second one-epoch call
    is ``[2]``); without ``optimizer`` the Adam the last call made goes on (a fresh one after a call with another
    optimizer). So ``fit(epochs=1)`` twice trains as ``fit(epochs=2)`` once. ``nn.save`` / ``nn.load`` carry the data
    order and epoch count in the file; pass your own optimizer to fit and to ``nn.save(..., optimizer=opt)`` /
    ``nn.load`` to carry its state too, and a resumed run trains as the uninterrupted one. An optimizer made for
    another model (the model's cell run again after the optimizer's) is refused: it would update that model's
    weights, never this one's. So are a dataset that is not a :class:`gpulab.data.Dataset`, an empty training set,
    and images of another size than the model was built for (:mod:`gpulab.train_checks`).

    Interrupted (the stop button in Jupyter: ``KeyboardInterrupt``) or failing in the middle of an epoch, fit raises
    as it stops, and that epoch counts as started: its shuffle was drawn and some of its batches updated the weights
    and the optimizer, which no call undoes. So the next call (re-running the cell) trains the next epoch number
    with a fresh shuffle from the generator as it is, never re-using a data order on weights that saw part of it;
    the exception carries a note (Python 3.11+) saying which epoch stopped after how many batches. An interrupt
    before an epoch's shuffle is drawn, or after its last batch (evaluating, in ``on_epoch``), leaves it not
    started, or done. However a call ends, ``model.fit_state.history`` holds the :class:`History` of the epochs it
    finished (the one it returns, when it returns). The worker threads of ``workers > 1`` are shut down however fit
    ends.

    On a GPU no step waits for it: the training labels' range is read once per call (``nn.ops.labels_within``), and
    each step's loss and correct count are summed on the device (:class:`gpulab.nn.StepSums`) and read after the
    first step, every :data:`READ_EVERY` steps and at the end of each epoch (one explicit synchronization there,
    which the epoch's time includes). The trade-off: a NaN or inf loss raises FloatingPointError at the next read,
    naming the steps it came from, so the updates of up to READ_EVERY steps have run with it and the weights may hold
    NaN by then (rebuild the model, or load a checkpoint). On the host (``numpy``, simulator mode) it raises in the
    step that made it, before its backward, as before. The capstone's learner ops keep their own guard, which names
    the op before any weight changes (:mod:`gpulab.capstone_ops`).
    """
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise UsageError(f"epochs must be a whole number >= 1, got {epochs!r}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch_size must be a whole number >= 1, got {batch_size!r}.")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"workers must be a whole number >= 1, got {workers!r}.")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
        raise UsageError(
            f"seed must be a whole number from 0 to 2**63 - 1 (nn.save keeps it in the checkpoint as a 64-bit "
            f"integer), got {seed!r}. Pass e.g. seed=0."
        )
    check_model(model, "fit(model, dataset)")
    check_dataset(dataset, evaluate=evaluate_each_epoch)
    check_optimizer(model, optimizer)
    if step is not None and (workers > 1 or not callable(step)):
        raise UsageError(
            f"fit: step must be a function step(model, loss_fn, optimizer, xb, yb) -> (loss, logits), run with "
            f"workers=1; it was given {describe(step)} with workers={workers}. Pass step=train_step, or no step."
        )
    # several workers: NumPy's BLAS capped at one thread per process (step is None there: refused above)
    with (limit_threads(1) or _nullcontext()) if workers > 1 else _nullcontext():
        return _fit(
            model,
            dataset,
            epochs,
            batch_size,
            optimizer,
            seed,
            progress,
            live_plot,
            evaluate_each_epoch,
            workers,
            on_epoch,
            step,
        )


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _fit(
    model: nn.Sequential,
    dataset: _data.Dataset,
    epochs: int,
    batch_size: int,
    optimizer: Any,
    seed: int,
    progress: bool,
    live_plot: bool,
    evaluate_each_epoch: bool,
    workers: int,
    on_epoch: Callable[[History], None] | None,
    step: Callable[..., Any] | None = None,
) -> History:
    _data.check_images(dataset.x_train, dataset.y_train)
    check_image_shape(model, dataset.x_train, "fit")
    if evaluate_each_epoch:
        check_image_shape(model, dataset.x_test, "fit (the dataset's test images)")
    progress_state = model.fit_state  # where the last fit with this model left off
    if optimizer is None:
        made = progress_state.optimizer
        if made is None or made.model is not model:
            made = progress_state.optimizer = nn.Adam(model, lr=1e-3)
        optimizer = made
    elif optimizer is not progress_state.optimizer:  # another optimizer moves the weights: the moments of the Adam
        progress_state.optimizer = None  # fit made no longer belong to them (a later call without one starts afresh)
    loss_fn = nn.SoftmaxCrossEntropy()
    rng = progress_state.shuffle_rng(seed)
    xtr, ytr = to_backend(dataset.x_train, model.backend), to_backend(dataset.y_train, model.backend)
    xte, yte = to_backend(dataset.x_test, model.backend), to_backend(dataset.y_test, model.backend)
    history = progress_state.history = History()  # kept there too: an interrupted call loses no finished epoch
    fig = handle = None
    if live_plot:
        from .viz.training import training_curves

        fig = training_curves(history)
        try:
            from IPython.display import display

            handle = display(fig, display_id=True)  # redrawn in place after each epoch
        except ImportError:  # pragma: no cover - plain Python: no live figure
            fig = None
    parallel = nn.DataParallel(model, workers, seed=seed) if workers > 1 else None
    # the training labels' range, read once (each batch's labels are among them); labels that are not integers are
    # refused by the loss at the first step, as ever
    integers = np.issubdtype(np.dtype(ytr.dtype), np.integer) and ytr.size
    labels = (*label_range(ytr), "the training labels (dataset.y_train)") if integers else None
    first = progress_state.epoch + 1
    try:  # the worker threads end however fit ends (an interrupt too)
        for epoch in range(first, first + epochs):
            bar = _progress(ceil_div(xtr.shape[0], batch_size), f"epoch {epoch}/{first + epochs - 1}", progress)
            try:
                with labels_within(*labels) if labels else _nullcontext():  # the steps only (not evaluate's labels)
                    total_loss, correct, seconds = _train_epoch(
                        model, xtr, ytr, batch_size, optimizer, loss_fn, parallel, rng, epoch, first, bar, step
                    )
            finally:
                if bar is not None:
                    bar.close()
            n = xtr.shape[0]
            history.epoch.append(epoch)
            history.train_loss.append(total_loss / n)
            history.train_accuracy.append(correct / n)
            history.seconds.append(seconds)
            history.images_per_second.append(n / seconds)
            if evaluate_each_epoch:
                ev = evaluate(model, xte, yte)
                history.test_loss.append(ev["loss"])
                history.test_accuracy.append(ev["accuracy"])
            if fig is not None:
                from .viz.training import update_training_curves

                update_training_curves(fig, history)
                if handle is not None:
                    handle.update(fig)
            if on_epoch is not None:
                on_epoch(history)
    finally:
        if parallel is not None:
            parallel.close()
    return history


def _train_epoch(
    model: nn.Sequential,
    xtr: Any,
    ytr: Any,
    batch_size: int,
    optimizer: Any,
    loss_fn: Any,
    parallel: Any,
    rng: np.random.Generator,
    epoch: int,
    first: int,
    bar: Any,
    step: Callable[..., Any] | None = None,
) -> tuple[float, int, float]:
    """One pass over the shuffled training data: (summed loss, correct predictions, seconds). The epoch counts as
    done with ``model.fit_state`` at its end, and as started once its shuffle is drawn: an interrupt or error after
    that (the weights and the generator have moved on) leaves it counted, with a note on the exception saying so.

    The sums stay where the model computes and are read after the first step, every :data:`READ_EVERY` steps and at
    the end (on the host: every step, where reading is free); each read updates the progress bar's loss (the last
    batch's) and raises if the loss has turned NaN or inf."""
    model.train()
    if parallel is not None:
        parallel.train()
    t0 = time.perf_counter()
    sums = nn.StepSums(runtime.array_module(xtr))
    every = 1 if sums.on_host else READ_EVERY
    where = f" of epoch {epoch}"
    done = 0
    before = rng.bit_generator.state
    try:
        for xb, yb in _data.batches(xtr, ytr, batch_size, shuffle=True, rng=rng):
            if step is None:
                loss, logits = nn.train_step(model, loss_fn, optimizer, xb, yb, parallel)  # forward, backward, update
            else:  # the learner's own step (lesson 09); its loss runs where the model computes
                loss_fn.ops = model.ops
                loss, logits = step(model, loss_fn, optimizer, xb, yb)
            sums.add(loss, logits, yb)  # on the device: nothing read
            done += 1
            if bar is not None:
                bar.update(1)
            if done == 1 or done % every == 0:
                last = sums.read(model.ops, where)[2]  # one transfer (on a GPU: a wait)
                if bar is not None:
                    bar.set_postfix(loss=f"{last:.4f}", refresh=False)
        runtime.synchronize()  # the epoch's time covers its work
        model.ops.finish()  # checks a backend held back (the capstone's, on a GPU): the epoch's last ones
        seconds = time.perf_counter() - t0
        total_loss, correct, _ = sums.read(model.ops, where)
    except BaseException as e:
        if rng.bit_generator.state != before:  # its shuffle was drawn: the epoch has started
            model.fit_state.epoch = epoch
            if hasattr(e, "add_note"):  # Python 3.11+: shown under the traceback
                e.add_note(
                    f"gpulab.train.fit stopped in epoch {epoch} after {done} of {ceil_div(xtr.shape[0], batch_size)} "
                    f"batches (epochs finished in this call: {epoch - first}). The weights and the shuffle moved on, "
                    f"so epoch {epoch} counts as started: the next fit with this model trains epoch {epoch + 1}, "
                    "with a fresh shuffle. The numbers of the epochs this call finished are in "
                    "model.fit_state.history."
                )
        raise
    model.fit_state.epoch = epoch
    return total_loss, correct, seconds


def _progress(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="batch", leave=False)
