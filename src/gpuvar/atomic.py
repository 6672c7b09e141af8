"""All-or-nothing CLI outputs, and output folders that are never a user's folder.

A step writes into a temporary folder beside its target, and only a step that completed moves its files into
place. A failure (disk full, bad input, Ctrl-C) removes the temporary folder and leaves the target as it was:
never a bins.parquet without its bin.json, a 0-byte contributions.csv or a stray `*.tmp-<pid>` file. An output
has the modes any folder made by the user's umask would have (group members on a cluster read the results), not
mkdtemp's owner-only 0700.

Whose folder (`claimed`, the one rule of every command that writes a folder, issue 35): a command writes its
output folder only where it is absent, empty, or a previous output of the same command (ingest, normalize and
ingest-merge count as one: they write the same tables), which a marker file (layout.OUTPUT_MARKER, naming
the command) says; anything else is a one-line error before any work, because
replacing a folder swaps it out whole (`gpuvar compare a b -o Documents` removed Documents/). An output folder
equal to an input is refused; one containing an input is refused where the folder is replaced whole. A command
that only adds its files (ingest, normalize, ingest-merge, bin, findings --combine) may write beside its inputs
(the workflow's `normalize results/ingest/D/raw -o results/ingest/D`), and those inputs do not count as content.
While a command writes, a lock file beside the output refuses a second process writing the same folder.
"""

from __future__ import annotations

import contextvars
import errno
import fcntl
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpuvar.errors import GpuvarError, StageError
from gpuvar.layout import OUTPUT_MARKER, lock_file

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
    it is in use (writing, or moving into place), or while making it (a read-only folder), names `shown`
    instead of the temporary folder."""
    parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(parent, name)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.tmp-{_HOST}-{os.getpid()}-", dir=parent))
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(shown)) from None
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
    claim = _claim_of(target)
    with _locked(target), _staging(target.parent, target.name, target) as tmp:
        yield tmp
        if claim is not None:  # the folder says which command wrote it (a rerun of that command may replace it)
            _write_marker(tmp, claim.command)
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
    from gpuvar.errors import InputError

    if str(tmp) not in str(exc):
        return exc
    if type(exc) is InputError:  # a stage of `gpuvar explain` reading what an earlier stage wrote
        return InputError(exc.path.replace(str(tmp), str(real)), exc.reason.replace(str(tmp), str(real)))
    if type(exc) not in (GpuvarError, StageError, OutputRefused):
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


# ------------------------------------------------------------------------------- whose output folder it is


class OutputRefused(GpuvarError):
    """An output folder a command may not write: a user's folder, another command's output, or an input."""


@dataclass(frozen=True)
class Output:
    """The output folder a command is about to write.

    replaces: the folder is swapped in whole (staged_folder(replace=True)), so anything inside it is removed;
    otherwise the command adds its files to the folder and leaves other entries alone. mark_early: write the
    marker when the folder is claimed (commands that write their files straight into the folder, so that a run
    killed half-way still left a folder its rerun may take); lock: hold the lock for the whole command (not for an
    MPI job, whose ranks all run the command: rank 0's staged_folder locks while it writes)."""

    folder: Path
    command: str
    inputs: tuple[Path, ...] = ()
    replaces: bool = True
    mark_early: bool = False
    lock: bool = True


# commands that write the same output, so each may rewrite the other's (the README runs `gpuvar ingest` and then
# `gpuvar read` + `gpuvar normalize` into one folder): the canonical tables of one dataset
_KIND = {"ingest": "canonical tables", "normalize": "canonical tables", "ingest-merge": "canonical tables"}

_CLAIMS: contextvars.ContextVar[tuple[tuple[str, Output], ...]] = contextvars.ContextVar("gpuvar_claims", default=())


def _real(path: str | Path) -> str:
    return os.path.realpath(os.path.abspath(path))


def _inside(path: str, folder: str) -> bool:
    """`path` is `folder` or below it (both real paths)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _claim_of(folder: Path) -> Output | None:
    real = _real(folder)
    return next((out for key, out in reversed(_CLAIMS.get()) if key == real), None)


def read_marker(folder: str | Path) -> str | None:
    """The command named by `folder`'s marker, or None (no marker, or not one gpuvar wrote)."""
    try:
        value = json.loads((Path(folder) / OUTPUT_MARKER).read_text())
    except (OSError, ValueError):
        return None
    command = value.get("command") if isinstance(value, dict) else None
    return command if isinstance(command, str) else None


def _write_marker(folder: Path, command: str) -> None:
    from gpuvar.output import write_json

    write_json({"command": command}, folder / OUTPUT_MARKER)


def check_output(out: Output) -> None:
    """OutputRefused unless `out.command` may write `out.folder` (the module's docstring gives the rule)."""
    folder, command = Path(out.folder), out.command
    real = _real(folder)
    inputs = [_real(p) for p in out.inputs]
    for path, shown in zip(inputs, out.inputs, strict=True):
        if path == real:
            raise OutputRefused(f"{folder}: the output folder is an input of this command ({shown}); give another")
        if out.replaces and _inside(path, real):
            raise OutputRefused(
                f"{folder}: the output folder contains an input of this command ({shown}), which writing the "
                "folder would remove; give another output folder"
            )
    if not os.path.lexists(folder):
        return
    if folder.is_symlink() or not folder.is_dir():
        raise OutputRefused(f"{folder}: exists and is not a folder; give a folder as the output")
    try:
        entries = sorted(os.listdir(folder))
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(folder)) from None
    # what the command itself reads from the folder (the workflow's raw/ beside the canonical tables) is no content
    content = [
        e
        for e in entries
        if e != OUTPUT_MARKER and not _ours(e) and not any(_inside(path, _real(folder / e)) for path in inputs)
    ]
    if not content:
        return
    owner = read_marker(folder)
    if owner == command or _KIND.get(owner, owner) == _KIND.get(command, command):
        return
    if owner is not None:
        raise OutputRefused(
            f"{folder}: an output of `gpuvar {owner}`, not of `gpuvar {command}`; give a new or empty folder"
        )
    shown = ", ".join(content[:3]) + (f" and {len(content) - 3} more" if len(content) > 3 else "")
    raise OutputRefused(
        f"{folder}: not empty and not an output of `gpuvar {command}` (it holds {shown}); give a new or empty "
        "folder, or remove this one"
    )


@contextmanager
def claimed(out: Output) -> Iterator[Output]:
    """Check that `out.command` may write `out.folder` (check_output), hold its lock, and let staged_folder write
    the marker naming the command; on failure, a folder or marker this made is removed again."""
    check_output(out)
    folder = Path(out.folder)
    made: list[Path] = []
    token = _CLAIMS.set((*_CLAIMS.get(), (_real(folder), out)))
    try:
        with _locked(folder, made) if out.lock else _nothing():
            check_output(out)  # again under the lock: another process may have written it meanwhile
            if out.mark_early:
                _make_folder(folder, made)
                if read_marker(folder) != out.command:
                    _write_marker(folder, out.command)
            try:
                yield out
            except BaseException:
                if out.mark_early and _only_marker(folder):
                    (folder / OUTPUT_MARKER).unlink(missing_ok=True)  # nothing else was written: as it was
                raise
    except BaseException:
        for path in reversed(made):  # folders this made for the output, where nothing else went
            try:
                path.rmdir()
            except OSError:
                break
        raise
    finally:
        _CLAIMS.reset(token)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _only_marker(folder: Path) -> bool:
    try:
        return os.listdir(folder) == [OUTPUT_MARKER]
    except OSError:
        return False


def _ours(name: str) -> bool:
    """A lock file or a staging / swapped-out folder of an output beside it (left by a killed process)."""
    return name.startswith(".") and (name.endswith(".lock") or ".tmp-" in name or ".old-" in name)


def _make_folder(folder: Path, made: list[Path]) -> None:
    """mkdir -p, remembering each folder made (outermost first) so that a failed command removes them again."""
    missing = []
    for path in (folder, *folder.parents):
        if os.path.lexists(path):
            break
        missing.append(path)
    folder.mkdir(parents=True, exist_ok=True)
    made.extend(p for p in reversed(missing) if p not in made)


_HELD: dict[str, int] = {}  # lock files this process holds -> how many times (a command inside `explain`)


@contextmanager
def _locked(folder: Path, made: list[Path] | None = None) -> Iterator[None]:
    """Hold `.NAME.lock` beside `folder` (flock): a second process writing the same output is refused with one
    line instead of both writing it. The file is removed when released."""
    parent = folder.parent
    _make_folder(parent, made if made is not None else [])
    path = parent / lock_file(folder.name)
    key = _real(path)
    if key in _HELD:
        _HELD[key] += 1
        try:
            yield
        finally:
            _HELD[key] -= 1
        return
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:  # a read-only folder: name the output, not the lock file
            raise OSError(exc.errno, exc.strerror, str(folder)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 100, 0).decode(errors="replace").strip()
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OSError(exc.errno, exc.strerror, str(folder)) from None
            raise OutputRefused(
                f"{folder}: another gpuvar process ({holder or 'unknown'}) is writing this output; wait for it to "
                "end or give another folder"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed the file between our open and flock: lock the current one
    _HELD[key] = 1
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        yield
    finally:
        del _HELD[key]
        try:
            os.unlink(path)
        except OSError:
            pass
        os.close(fd)


TEXT_SUFFIXES = (".json", ".md", ".csv", ".tsv", ".html", ".txt")


def rewrite_files(tmp: Path, real: Path) -> None:
    """Every text output under `tmp` with the paths it records under `tmp` shown under `real` instead: stages run
    into a staging folder (gpuvar explain) record their inputs by the path they had then, which would name a folder
    that is gone once the staging folder is moved into place (and differs on every run)."""
    tmp, real = Path(tmp), Path(real)
    pairs = [(str(tmp), str(real))]
    escaped = (json.dumps(str(tmp))[1:-1], json.dumps(str(real))[1:-1])  # as a JSON string writes a path
    if escaped[0] != pairs[0][0]:
        pairs.append(escaped)
    for path in sorted(tmp.rglob("*")):
        if not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        if not any(old in text for old, _ in pairs):
            continue
        for old, new in pairs:
            text = text.replace(old, new)
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
