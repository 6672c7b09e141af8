"""gpuvar: explain run-to-run performance variability of GPU programs."""

from gpuvar.blas_kernels import pin_blas_kernels

pin_blas_kernels()  # before any numpy import: the same BLAS kernels, the same bytes, on any x86-64 machine

__version__ = "0.1.0"
