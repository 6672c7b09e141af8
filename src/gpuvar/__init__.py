"""gpuvar: explain run-to-run performance variability of GPU programs."""

__version__ = "0.1.0"
