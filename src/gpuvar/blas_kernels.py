"""One BLAS code path on every x86-64 machine, so that a rerun on another machine writes the same bytes.

Why: the OpenBLAS in numpy's and scipy's wheels (DYNAMIC_ARCH) picks its kernels by CPU: SkylakeX kernels on an
AVX-512 Intel Xeon, Zen kernels on an AMD EPYC. Their results differ in the last bits, and the causal bootstrap's
statistics carry that into the 12 digits they are written at: the same small-config workflow gave 4 of its ~900
data files other bytes on an AMD EPYC than on the Intel machine that recorded tests/data/golden (the std of
resampled coefficients that agree to 12 digits: 9e-17 on one, 6e-17 on the other). Haswell's kernels (AVX2 and
FMA) run on every x86-64 server and laptop CPU of the last decade, at the same speed for the small matrices gpuvar
fits. A user's own OPENBLAS_CORETYPE is kept; other CPUs (ARM, no AVX2) and systems keep OpenBLAS's own choice.

It must run before numpy is first imported in the process (OpenBLAS reads the variable once, when it loads):
gpuvar/__init__.py calls it, so every `gpuvar` command, the Snakefile (which imports gpuvar) and the processes
they start, which inherit the environment, use one path.
"""

from __future__ import annotations

import os
import platform

CORE_TYPE = "Haswell"
NEEDS = {"avx2", "fma"}  # the instructions Haswell's kernels use


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The first processor's flags on Linux, empty where they cannot be read."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def pin_blas_kernels(environ=os.environ, machine: str | None = None, flags: set[str] | None = None) -> str | None:
    """Set OPENBLAS_CORETYPE to CORE_TYPE where it is unset and the CPU runs those kernels; returns the value set,
    None where nothing was set."""
    if "OPENBLAS_CORETYPE" in environ:
        return None
    if (machine or platform.machine()).lower() not in ("x86_64", "amd64"):
        return None
    if not NEEDS <= (cpu_flags() if flags is None else flags):
        return None
    environ["OPENBLAS_CORETYPE"] = CORE_TYPE
    return CORE_TYPE


_CONTROLLERS: dict[bool, object] = {}  # threadpoolctl's view of this process's pools, by whether OpenMP is in it


def one_blas_thread(openmp: bool = False):
    """threadpoolctl's limit of one thread over OpenBLAS's pools (numpy's and scipy's), and with openmp=True over
    sklearn's OpenMP runtime too; use it as a context manager, or keep it.

    Why: gpuvar's BLAS calls are small (a call site's normal equations, a fit of a few columns), where OpenBLAS's
    threads only wait on each other: a job's 130 per-call-site QRs took 2.2 s with a thread per core against 0.17 s
    with one, and the bootstrap workers' 2 x 2 threads on 2 cores took 41 CPU-s against 14 for the same fits.
    threadpoolctl limits only the libraries loaded when its controller is made, and scipy's OpenBLAS and sklearn's
    OpenMP load at their first import: they are imported first, once per process."""
    if openmp not in _CONTROLLERS:
        import scipy.linalg  # noqa: F401 - loads scipy's OpenBLAS

        if openmp:
            import sklearn.linear_model  # noqa: F401 - loads sklearn's OpenMP runtime
        from threadpoolctl import ThreadpoolController

        _CONTROLLERS[openmp] = ThreadpoolController()
    return _CONTROLLERS[openmp].limit(limits=1)
