"""Emulated ``cupy.cuda.nccl`` as on a CuPy wheel without the NCCL library (cupy/cuda/nccl.py: ``available = False``
when ``cupy_backends.cuda.libs.nccl`` cannot be imported)."""

available = False
