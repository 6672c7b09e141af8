"""Project exceptions. A GpuvarError is a user-facing problem: the CLI prints it on one line, no traceback."""

from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from pathlib import Path


class GpuvarError(Exception):
    """Base class for errors caused by user input or environment, reported as one line."""


class InputError(GpuvarError):
    """A profiler file that cannot be read: names the file and what is wrong with it."""

    MAX_REASON = 400

    def __init__(self, path: str | Path, reason: str):
        self.path = str(path)
        # one line, whatever a library put in its message (SQLite quotes whole multi-line schema statements)
        reason = " ".join(str(reason).split())
        if len(reason) > self.MAX_REASON:
            reason = reason[: self.MAX_REASON - 3] + "..."
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self):
        """Pickled as (path, reason), what the constructor takes: the error crosses from a worker process whole."""
        return type(self), (self.path, self.reason)


class AccountingError(InputError):
    """Rows read != rows written + rows dropped: a reader bug, not bad input (tests treat it as a failure)."""


class ConfigError(GpuvarError):
    """An invalid configuration value: names the key path, the bad value and what is allowed."""


class RowsError(GpuvarError):
    """A rows table that lacks what an analysis needs (a column, a numeric type); the command names the file."""


class StageError(GpuvarError):
    """A pipeline stage that cannot proceed (e.g. an MPI rank failed, an output is unwritable)."""


@contextmanager
def worker_death(what: str):
    """A worker process of a pool killed (the kernel's out-of-memory killer, a signal) as one StageError line
    naming `what` ran there, not the executor's BrokenProcessPool traceback."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        yield
    except BrokenProcessPool:
        raise StageError(f"{what} ended abruptly: its process was killed (out of memory?)") from None


def describe(exc: BaseException) -> str:
    """An exception as the one line the CLI prints: 'PATH: reason' for an OSError (no '[Errno N]'), the message
    of a project error, else 'Type: message' with its whitespace folded (a library's multi-line text)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    if isinstance(exc, GpuvarError | OSError):
        return " ".join(str(exc).split())
    return " ".join(f"{type(exc).__name__}: {exc}".split())


_SPECIAL = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def path_problem(path: str | Path) -> str | None:
    """Why an input path cannot be read, in words ('symlink loop', 'broken symlink', 'not a regular file (a
    FIFO)', ...); None for a regular file or a folder. A FIFO or device is refused because opening or reading
    it can block forever (nobody writes the FIFO) and a reader reads its input more than once."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symlink loop"
        if exc.errno == errno.ENOENT and os.path.islink(path):
            return f"broken symlink (to {os.readlink(path)})"
        if exc.errno == errno.ENOENT:
            return "no such file or directory"
        return exc.strerror or str(exc)
    kind = next((what for test, what in _SPECIAL if test(mode)), None)
    return f"not a regular file ({kind})" if kind else None
