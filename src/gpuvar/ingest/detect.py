"""Format detection by content (never by file name alone).

Each reader module exposes FORMAT (its name), `sniff(path, head) -> bool` and `read(path) -> ReaderOutput`.
Sniffers are tried in order; the first that claims the file wins. Directories are offered to every sniffer
too (rocprofv3 and Omniperf write folders).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from gpuvar.errors import InputError, path_problem
from gpuvar.ingest.compression import check_not_compressed_sqlite, read_head

# module names under gpuvar.ingest, in sniffing order (most specific first)
READER_MODULES = (
    "nsys",
    "rocpd",
    "rocprof_db",
    "ncu",
    "ncu_rep",
    "rocprofv3",
    "omniperf",
    "rocprof",
    "kineto",
    "nsys_rep",
)


def reader_modules():
    """Import the reader modules lazily (each pulls in only what it needs). Every listed reader ships with the
    package: a missing one is a broken install and fails loudly, never a format silently not offered."""
    return [importlib.import_module(f"gpuvar.ingest.{name}") for name in READER_MODULES]


def formats() -> dict[str, object]:
    """Format name -> reader module."""
    return {m.FORMAT: m for m in reader_modules()}


def detect(path: str | Path):
    """The reader module for `path`, chosen by content; InputError if none claims it."""
    path = Path(path)
    problem = path_problem(path)
    if problem:
        raise InputError(path, problem)
    head = b"" if path.is_dir() else read_head(path)
    if not path.is_dir() and not head:
        raise InputError(path, "empty file")
    if not path.is_dir():
        check_not_compressed_sqlite(path, head)
    for module in reader_modules():
        if module.sniff(path, head):
            return module
    names = ", ".join(formats())
    raise InputError(path, f"unrecognised format (supported: {names})")
