"""How memory is asked of the kernel while one stage holds a whole trace in memory (the in-memory ingest).

Why: an in-memory ingest of 1 M launches makes and drops hundreds of 8 MB columns, each living milliseconds. With
the defaults, on this project's 2-core VM (transparent huge pages on madvise, with direct compaction), a third of
the ingest's CPU time went to the kernel, not to the ingest: 1.2-1.6 s of system time per ingest of 1 M kernels
and 0.5 M copies (2.6-3.4 s of user time). Two settings, each only for the duration of the block:

  * numpy does not ask for transparent huge pages (it madvises every array of 4 MB and more): each such array was
    backed by freshly zeroed, often compacted, 2 MB pages (1 s of system time inside schema.finalize_kernels alone,
    for 243 page faults); with 4 KB pages the columns are faulted in as far as they are written;
  * glibc keeps freed memory for the next allocation (no trimming, no mmap below 32 MiB, the heap grown in 256 MiB
    steps) instead of handing each freed column back and faulting the next one in again.

Measured (1 M kernels, 3 ingests in one process, the other core busy): system time 1.2-1.6 s -> 0.7-0.8 s. Only
the operating system's bookkeeping changes, never a value. Afterwards numpy's setting is put back, glibc's are set
to what its own dynamic threshold reaches after its first freed big block (mmap from 32 MiB, trim above 64 MiB)
and the free memory is returned (malloc_trim), so the stages after it, and the bounded-memory ingest in pieces,
hold no more than they did. Elsewhere than glibc (musl, macOS, Windows) only numpy's setting applies."""

from __future__ import annotations

import ctypes
from contextlib import contextmanager

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3  # glibc malloc.h
_MIB = 1 << 20
DURING = {M_MMAP_THRESHOLD: 32 * _MIB, M_TRIM_THRESHOLD: 2**31 - 1, M_TOP_PAD: 256 * _MIB}  # (mallopt takes an int)
AFTER = {M_MMAP_THRESHOLD: 32 * _MIB, M_TRIM_THRESHOLD: 64 * _MIB, M_TOP_PAD: 0}


def _libc():
    """glibc's malloc controls, None where the C library is another."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


def _set_malloc(libc, settings: dict) -> None:
    if libc is not None:
        for option, value in settings.items():
            libc.mallopt(option, value)


def _numpy_hugepages(enabled: bool) -> bool | None:
    """Set whether numpy madvises huge pages; the setting before (None where this numpy has no such switch)."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        return None
    return bool(_set_madvise_hugepage(enabled))


@contextmanager
def whole_trace_memory():
    """Within the block: numpy without transparent huge pages, glibc keeping freed memory (module docstring)."""
    libc = _libc()
    before = _numpy_hugepages(False)
    _set_malloc(libc, DURING)
    try:
        yield
    finally:
        if before is not None:
            _numpy_hugepages(before)
        _set_malloc(libc, AFTER)
        give_back(libc)


def give_back(libc=None) -> None:
    """Return freed memory to the system: what a stage of many small objects leaves resident (glibc keeps freed
    blocks in its arenas: 0.43 GB after the launch sweep of 20 M launches, gpuvar.ingest.nsys_host_facts) would
    otherwise sit under the next stage's peak. gc first, then malloc_trim where the C library is glibc, then Arrow's
    own allocator (mimalloc here: it keeps the pages of freed record batches, such as the findings' rounds read back
    from their spill files), where Arrow is loaded."""
    import gc
    import sys

    gc.collect()
    libc = libc if libc is not None else _libc()
    if libc is not None:
        libc.malloc_trim(0)
    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
