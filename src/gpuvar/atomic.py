"""All-or-nothing CLI outputs: a step writes into a temporary folder beside its target, and only a step that
completed moves its files into place. A failure (disk full, bad input, Ctrl-C) removes the temporary folder
and leaves the target as it was: never a bins.parquet without its bin.json, a 0-byte contributions.csv or a
stray `*.tmp-<pid>` file. An output has the modes any folder made by the user's umask would have (group
members on a cluster read the results), not mkdtemp's owner-only 0700.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuvar.errors import GpuvarError, StageError

_HOST = socket.gethostname().replace("-", "_")


def _remove_stale(parent: Path, name: str) -> None:
    """Temporary folders of this target left by a process of this host that no longer runs (an MPI abort or
    SIGKILL skips cleanup); folders of live processes or other hosts are left alone."""
    prefix = f".{name}.tmp-{_HOST}-"
    for entry in parent.glob(f".{name}.tmp-*"):
        if not entry.name.startswith(prefix):
            continue
        try:
            pid = int(entry.name[len(prefix) :].split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except (ValueError, PermissionError):
            continue


def _umask() -> int:
    """The process umask, read without changing it where Linux says it (/proc), else set and put back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def _staging(parent: Path, name: str, shown: Path) -> Iterator[Path]:
    """A fresh temporary folder in `parent` for the output `name`, removed in every case; an error raised while
    it is in use (writing, or moving into place) names `shown` instead of the temporary folder."""
    parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(parent, name)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-{_HOST}-{os.getpid()}-", dir=parent))
    try:
        tmp.chmod(0o777 & ~_umask())  # mkdtemp's 0700 would become the output's: unreadable to the group
        yield tmp
    except OSError as exc:  # disk full, quota: name the output the user asked for, not the temporary folder
        raise _renamed(exc, tmp, shown) from None
    except GpuvarError as exc:  # e.g. StageError("cannot write <tmp>/bins.parquet: No space left on device")
        raise _reworded(exc, tmp, shown) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def staged_folder(target: str | Path, replace: bool = True, last: tuple[str, ...] = ()) -> Iterator[Path]:
    """Yield an empty temporary folder beside `target`; on success its content goes into place.

    replace=True: the folder becomes `target` as a whole (a previous target is swapped out and removed, so no
    stale entry survives). replace=False: each entry is moved into `target` (created if needed) with os.replace,
    the names in `last` (completion markers) after the rest and their old copies removed first, so a reader
    never sees a new marker beside old data or an old marker beside new data.
    """
    target = Path(target)
    with _staging(target.parent, target.name, target) as tmp:
        yield tmp
        if replace:
            _swap(tmp, target)
        else:
            _merge(tmp, target, last)


@contextmanager
def staged_stem(stem: str | Path) -> Iterator[Path]:
    """For outputs named STEM.<ext> (a figure, its data): yield a stem inside a temporary folder in STEM's folder;
    on success every file written under it moves beside STEM, on failure none does."""
    stem = Path(stem)
    with _staging(stem.parent, stem.name, stem.parent) as tmp:
        yield tmp / stem.name
        _merge(tmp, stem.parent, ())


def _reworded(exc: GpuvarError, tmp: Path, real: Path) -> GpuvarError:
    """A one-line project error naming `real` where it named the temporary folder."""
    if str(tmp) not in str(exc) or type(exc) not in (GpuvarError, StageError):
        return exc
    return type(exc)(str(exc).replace(str(tmp), str(real)))


def _renamed(exc: OSError, tmp: Path, real: Path) -> OSError:
    """The same OSError naming a path under `real` instead of the temporary folder (or `real` when the library
    that failed named no file, as pandas does on a full disk)."""
    name = exc.filename
    if exc.errno is None or name is not None and not str(name).startswith(str(tmp)):
        return exc
    shown = str(real) if name is None else str(real) + str(name)[len(str(tmp)) :]
    return type(exc)(exc.errno, exc.strerror, shown)


def _swap(tmp: Path, target: Path) -> None:
    if target.is_symlink() or target.exists() and not target.is_dir():
        raise NotADirectoryError(20, "output exists and is not a folder", str(target))
    if not target.exists():
        os.rename(tmp, target)
        return
    old = target.with_name(f".{target.name}.old-{_HOST}-{os.getpid()}")
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except OSError:
        os.rename(old, target)  # put the previous result back
        raise
    shutil.rmtree(old, ignore_errors=True)


def _merge(tmp: Path, target: Path, last: tuple[str, ...]) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in last:
        (target / name).unlink(missing_ok=True)
    entries = sorted(tmp.iterdir(), key=lambda p: (p.name in last, last.index(p.name) if p.name in last else 0, p.name))
    for entry in entries:
        destination = target / entry.name
        if entry.is_dir():
            shutil.rmtree(destination, ignore_errors=True)
        os.replace(entry, destination)


def rewrite_paths(obj, tmp: Path, real: Path):
    """A result (dict/list/str) with every path under `tmp` shown under `real` instead."""
    if isinstance(obj, dict):
        return {k: rewrite_paths(v, tmp, real) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [rewrite_paths(v, tmp, real) for v in obj]
    if isinstance(obj, str | Path) and str(obj).startswith(str(tmp)):
        return str(real) + str(obj)[len(str(tmp)) :]
    return obj
