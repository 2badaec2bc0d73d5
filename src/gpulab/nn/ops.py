"""The op contract of the CNN engine: every heavy operation, once, and who implements it.

:class:`Ops` lists every operation the layers and optimizers call (MiniTorch's ``TensorOps`` is the
model). Each is abstract, with a docstring giving the loop it stands for. An implementation gives
*every* op explicitly, so none can silently inherit another's code or drift from it. There are two:
the array code, written once over ``xp``, and the kernels:

* ``numpy``   - :class:`gpulab.nn.array_ops.NumpyOps`: :class:`~gpulab.nn.array_ops.ArrayOps` on NumPy
  arrays on the CPU (BLAS GEMMs, strided views).
* ``cupy``    - :class:`gpulab.nn.array_ops.CupyOps`: the same :class:`~gpulab.nn.array_ops.ArrayOps`
  on CuPy arrays (cuBLAS).
* ``kernels`` - :class:`gpulab.nn.kernel_ops.KernelOps`: the course's Numba CUDA kernels
  (:mod:`gpulab.kernels.nn_ops`), on the GPU or in the simulator; :mod:`gpulab.capstone` swaps in a
  learner's kernels op by op.

Where arrays live is one rule, :func:`device_for` / :func:`to_backend`: ``cupy``, and ``kernels``
in gpu mode, compute on CuPy arrays on the GPU; everything else on NumPy arrays on the host.

Dropout: the ops take the layer's generator states (uint64 words, :mod:`gpulab.nn.dropout`) and regenerate the
mask in the backward from a copy of them made before the forward, as lab 08 teaches (16 bytes per stream instead
of a mask, what a GPU does best); every backend draws the same mask from the same states.

The max-pool cache: every backend's ``maxpool_backward`` also accepts ``(arg,)``, with ``arg`` the
int32 position ``a*k + b`` of each window's first maximum (what the kernels compute).
"""

from __future__ import annotations

import abc
import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import runtime
from ..errors import UsageError
from ..runtime import array_module

__all__ = [
    "BACKENDS",
    "OP_NAMES",
    "Ops",
    "check_float_array",
    "check_labels",
    "check_where",
    "conv_out_hw",
    "device_for",
    "get",
    "label_range",
    "labels_within",
    "to_backend",
    "windows",
]

BACKENDS = ("numpy", "cupy", "kernels")


def windows(x: Any, kh: int, kw: int, stride: int, ho: int, wo: int) -> Any:
    """A read-only strided view (N, C, Ho, Wo, kh, kw) of every kh x kw window of ``x`` (N, C, H, W)."""
    xp = array_module(x)
    sn, sc, sh, sw = x.strides
    return xp.lib.stride_tricks.as_strided(
        x, shape=(x.shape[0], x.shape[1], ho, wo, kh, kw), strides=(sn, sc, sh * stride, sw * stride, sh, sw)
    )


class Ops(abc.ABC):
    """Every operation of the CNN engine. Shapes: N batch, C/F in/out channels, k kernel, Ho/Wo output."""

    name = "abstract"

    @abc.abstractmethod
    def matmul(self, a: Any, b: Any) -> Any:
        """``c = a @ b`` for a (M, K), b (K, N) float32, possibly transposed views. The GEMM behind
        Linear forward (``x @ W.T``), both backward GEMMs (``dout.T @ x``, ``dout @ W``) and Conv2d::

            for i, j: c[i, j] = sum_k a[i, k] * b[k, j]
        """

    @abc.abstractmethod
    def im2col(self, x: Any, kh: int, kw: int, stride: int, pad: int) -> tuple[Any, int, int]:
        """x (N, C, H, W) -> (cols (N*Ho*Wo, kh*kw*C), Ho, Wo)::

        for n, i, j, a, b, c: cols[(n, i, j), (a, b, c)] = xpad[n, c, i*stride + a, j*stride + b]
        """

    @abc.abstractmethod
    def col2im(self, dcols: Any, x_shape: tuple[int, ...], kh: int, kw: int, stride: int, pad: int) -> Any:
        """The adjoint of :meth:`im2col`: dcols (N*Ho*Wo, kh*kw*C) -> dx (N, C, H, W)::

        dx = 0; for n, i, j, a, b, c: dxpad[n, c, i*stride + a, j*stride + b] += dcols[(n, i, j), (a, b, c)]
        """

    @abc.abstractmethod
    def conv_input_grad(self, d: Any, w: Any, x_shape: tuple[int, ...], stride: int, pad: int) -> Any:
        """dL/dx of a convolution from d = dL/dy (N*Ho*Wo, F) and w (F, C, k, k)::

        dcols = d @ w.transpose(0, 2, 3, 1).reshape(F, k*k*C);  dx = col2im(dcols)
        """

    @abc.abstractmethod
    def conv_weight_grad(self, d: Any, cols: Any) -> Any:
        """dL/dW of a convolution as (F, k*k*C) from d (N*Ho*Wo, F) and the forward's cols::

        for f, q: dw[f, q] = sum_r d[r, f] * cols[r, q]
        """

    @abc.abstractmethod
    def add_bias(self, y: Any, b: Any) -> Any:
        """``y[r, f] += b[f]`` for y (M, F) (in place where possible); returns y."""

    @abc.abstractmethod
    def sum_rows(self, d: Any) -> Any:
        """The gradient of a bias: ``for f: out[f] = sum_r d[r, f]`` for d (M, F)."""

    @abc.abstractmethod
    def relu(self, x: Any) -> Any:
        """``for i: y[i] = max(x[i], 0)`` (any shape)."""

    @abc.abstractmethod
    def relu_backward(self, dout: Any, y: Any) -> Any:
        """``for i: dx[i] = dout[i] if y[i] > 0 else 0``, y being ReLU's output."""

    @abc.abstractmethod
    def maxpool(self, x: Any, k: int, stride: int) -> tuple[Any, Any]:
        """x (N, C, H, W) -> (out (N, C, Ho, Wo), cache), Ho = (H - k) // stride + 1::

        for n, c, i, j: out[n, c, i, j] = max_{a, b < k} x[n, c, i*stride + a, j*stride + b]
        """

    @abc.abstractmethod
    def maxpool_backward(self, dout: Any, cache: Any, x_shape: tuple[int, ...], k: int, stride: int) -> Any:
        """dout (N, C, Ho, Wo) -> dx (x_shape): each window's gradient to its first maximum::

        dx = 0; for n, c, i, j: dx[n, c, i*stride + a*, j*stride + b*] += dout[n, c, i, j]
        """

    @abc.abstractmethod
    def softmax_xent(self, logits: Any, labels: Any) -> tuple[Any, Any]:
        """Mean cross-entropy of softmax(logits (N, K)) and labels (N,) in [0, K), and d loss / d logits::

        for r: p = softmax(logits[r]); loss += -log p[labels[r]] / N; grad[r] = (p - onehot(labels[r])) / N

        The loss comes back as a 0-d value where the logits are, not read: a NumPy float32 on the host, a 0-d CuPy
        array on the GPU (``float(loss)`` reads it, and on a GPU a read waits for all the work queued before it).
        """

    @abc.abstractmethod
    def adam_update(self, p: Any, g: Any, m: Any, v: Any, lr_t: float, b1: float, b2: float, eps_t: float) -> None:
        """Adam, in place, with the bias corrections folded into lr_t and eps_t::

        for i: m[i] = b1 m[i] + (1 - b1) g[i]; v[i] = b2 v[i] + (1 - b2) g[i]^2
               p[i] -= lr_t * m[i] / (sqrt(v[i]) + eps_t)
        """

    @abc.abstractmethod
    def sgd_update(self, p: Any, g: Any, v: Any, lr: float, momentum: float, weight_decay: float) -> None:
        """SGD with momentum, in place (PyTorch's convention; v starts at 0)::

        for i: v[i] = momentum v[i] + g[i] + weight_decay p[i]; p[i] -= lr v[i]
        """

    @abc.abstractmethod
    def dropout_forward(self, x: Any, p: float, states: Any) -> Any:
        """Inverted dropout of x (any shape) with the mask drawn from ``states`` (``2 T`` uint64 words: ``T``
        xoroshiro128+ generators, one per thread), which the draws advance in place::

            for i (C order): u = draw number i // T of stream i % T;  y[i] = x[i] / (1 - p) if u >= p else 0
        """

    @abc.abstractmethod
    def dropout_backward(self, dout: Any, p: float, states: Any) -> Any:
        """dL/dx of dropout, the mask regenerated from ``states`` as they were *before* the forward (a copy: the
        forward advanced its own), which these draws advance in turn::

            for i: u = the forward's draw for element i;  dx[i] = dout[i] / (1 - p) if u >= p else 0
        """

    def finish(self) -> None:
        """Raise what checks this backend holds back found: the training loop calls it after each epoch and
        ``predict`` after its batches. The backends here check at once (nothing held); the capstone's
        :class:`gpulab.capstone_ops.LearnerOps` holds its checks on a GPU and reads them here too."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


OP_NAMES: tuple[str, ...] = tuple(sorted(Ops.__abstractmethods__))


def get(backend: str) -> Ops:
    """The ops object of a backend name: ``numpy``, ``cupy`` or ``kernels``."""
    if backend == "numpy":
        from .array_ops import NumpyOps

        return NumpyOps()
    if backend == "cupy":
        from .array_ops import CupyOps

        return CupyOps()
    if backend == "kernels":
        from .kernel_ops import KernelOps

        return KernelOps()
    raise ValueError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}.")


def device_for(backend: str) -> str:
    """Where a backend's arrays live: ``"gpu"`` (CuPy) or ``"host"`` (NumPy). The one rule."""
    return "gpu" if backend == "cupy" or (backend == "kernels" and runtime.is_gpu()) else "host"


def to_backend(x: Any, backend: str) -> Any:
    """``x`` moved to where ``backend`` computes (:func:`device_for`); no copy if already there."""
    return runtime.to_device(x) if device_for(backend) == "gpu" else runtime.to_host(x)


def check_where(name: str, x: Any, backend: str) -> None:
    """Refuse an array that lives elsewhere than ``backend`` computes (a NumPy batch for a model on the GPU, a CuPy
    one for a model on the host), naming the move; CuPy's own error comes from deep inside an op."""
    gpu = device_for(backend) == "gpu"
    if gpu and isinstance(x, np.ndarray):
        raise UsageError(
            f"{name} is a NumPy array (host memory), but the model computes on the GPU (backend {backend!r}). Move "
            f"it first: {name} = gpulab.to_device({name}) (train.fit, evaluate and predict move batches themselves)."
        )
    if not gpu and runtime.array_module(x).__name__ == "cupy":
        raise UsageError(
            f"{name} is a CuPy array (GPU memory), but the model computes on the host (backend {backend!r}). Bring it "
            f"back first: {name} = gpulab.to_host({name}), or move the model with model.to('cupy')."
        )


def check_float_array(name: str, x: Any, ndim: int, what: str) -> None:
    """A learner-friendly check of a layer input: an array, ``ndim``-D, floating point."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"{name} expects an array {what}, but got {type(x).__name__}. Use numpy.asarray(x).")
    if x.ndim != ndim:
        raise ValueError(f"{name} expects a {ndim}-D array {what}, but got shape {tuple(x.shape)}.")
    if not np.issubdtype(np.dtype(x.dtype), np.floating):
        raise TypeError(
            f"{name} expects floating-point input, but got dtype {np.dtype(x.dtype).name}. "
            "Convert with x.astype(numpy.float32) (and scale images to [0, 1])."
        )


def _positive(name: str, value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise UsageError(f"{name} must be a whole number >= 1 ({what}), got {value!r}.")
    return int(value)


def conv_out_hw(h: int, w: int, kh: int, kw: int, stride: int, pad: int) -> tuple[int, int]:
    """(Ho, Wo) of a kh x kw window moved by ``stride`` over h x w with ``pad``; checks the arguments."""
    kh, kw = _positive("kh", kh, "the kernel height"), _positive("kw", kw, "the kernel width")
    stride = _positive("stride", stride, "how far the window moves")
    if isinstance(pad, bool) or not isinstance(pad, (int, np.integer)) or pad < 0:
        raise UsageError(f"pad must be a whole number >= 0, got {pad!r}.")
    if h + 2 * pad < kh or w + 2 * pad < kw:
        raise UsageError(
            f"a {kh}x{kw} window does not fit a {h}x{w} image with padding {pad}; use a smaller kernel or more padding."
        )
    from ..kernels._launch import conv_out_size as out_len  # the one formula (here: kernels imports this module)

    return out_len(h, kh, stride, pad), out_len(w, kw, stride, pad)


# The range [lo, hi] every labels array in a training loop lies in, read once from the labels the loop draws its
# batches from (labels_within); None: check_labels reads each array's own range.
_LABEL_RANGE: contextvars.ContextVar[tuple[int, int, str] | None] = contextvars.ContextVar("label_range", default=None)


def label_range(labels: Any) -> tuple[int, int]:
    """The least and the greatest of ``labels`` (a non-empty integer array), read in one transfer: on a GPU each read
    of a device value waits for the GPU."""
    xp = array_module(labels)
    lo, hi = (int(v) for v in np.asarray(runtime.to_host(xp.stack((labels.min(), labels.max())))))
    return lo, hi


@contextlib.contextmanager
def labels_within(lo: int, hi: int, source: str) -> Iterator[None]:
    """Within the block, every labels array :func:`check_labels` sees is taken to lie in [lo, hi] (``source`` names
    where that range was read, for its message), so it compares that range with the logits' classes without reading
    the labels. ``train.fit`` and ``bench cnn`` read their training labels' range once (:func:`label_range`) and
    train inside this block, since every batch's labels are drawn from them: on a GPU, reading each batch's range
    would make every step wait for the GPU. The promise holds for the calling thread only (a context variable:
    :class:`gpulab.nn.DataParallel`'s worker threads read their shares' labels, on the host, where that is free)."""
    token = _LABEL_RANGE.set((int(lo), int(hi), source))
    try:
        yield
    finally:
        _LABEL_RANGE.reset(token)


def check_labels(labels: Any, n: int, classes: int) -> None:
    """Labels must be n integers in [0, classes): their range is read from them, or taken from the enclosing
    :func:`labels_within` (nothing read)."""
    if tuple(labels.shape) != (n,):
        raise UsageError(f"labels must have shape ({n},) to match the logits, got {tuple(labels.shape)}.")
    if not np.issubdtype(np.dtype(labels.dtype), np.integer):
        raise UsageError(f"labels must be integers (class indices), got dtype {np.dtype(labels.dtype).name}.")
    if not n:
        return
    known = _LABEL_RANGE.get()
    lo, hi, where = known if known is not None else (*label_range(labels), "")
    if lo < 0 or hi >= classes:
        raise UsageError(
            f"labels must be in [0, {classes}) (class indices, {classes} logits per row), got values from {lo} to "
            f"{hi}{f' in {where}' if where else ''}. Check the dataset's labels."
        )
