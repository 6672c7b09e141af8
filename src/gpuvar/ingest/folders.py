"""A folder given where a trace is expected: the trace files directly inside it, recognised by their content.

Why: traces live in folders beside files that are not traces. PyTorch's tensorboard_trace_handler writes each
rank's trace into one log folder; a dataset folder keeps its notes and truth tables beside the trace; macOS
leaves `.DS_Store` files. A folder that a reader claims as a whole (an Omniperf workload, a rocprof run with its
counter passes, a rocprofv3 output folder) is that one trace, as before. Any other folder stands for the files
directly inside it that a reader recognises, as `gpuvar ingest` recognises a file given alone; the rest (notes,
tables, subfolders, empty files) is left out and named in one line, hidden files counted: never silently dropped.

The files are taken in natural name order (rank2 before rank10). Several traces found in one folder are the ranks
of one job only where each records its own rank (Kineto's distributedInfo) and no two record the same one: a
folder of separate recordings (one file per profiling cycle, or per program) is refused with what to type
instead, rather than analysed as ranks it is not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gpuvar.errors import InputError
from gpuvar.units import counted

_DIGITS = re.compile(r"(\d+)")
_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(-?\d+)\s*[,}]')
SHOWN = 6  # names listed in a note before "and N more"
HIDDEN = "hidden"


@dataclass
class Opened:
    """A folder given as a source and what was found in it."""

    folder: Path
    traces: list[Path] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (name, why: "not a trace", "empty file", ...)

    def note(self) -> str:
        """One line: what the folder gave and what was left out, by name and why."""
        found = f"{self.folder}: {counted(len(self.traces), 'trace')} ({listed([p.name for p in self.traces])})"
        if not self.left_out:
            return found
        reasons: dict[str, list[str]] = {}
        for name, why in self.left_out:
            reasons.setdefault(why, []).append(name)
        hidden = reasons.pop(HIDDEN, [])  # (.DS_Store, gpuvar's own lock files: counted, not named)
        parts = [f"{listed(names)} ({why})" for why, names in reasons.items()]
        parts += [counted(len(hidden), "hidden file")] if hidden else []
        return f"{found}; left out {'; '.join(parts)}"


def listed(names: list[str]) -> str:
    """Names for a one-line message: the first SHOWN, then how many more."""
    shown = ", ".join(names[:SHOWN])
    return shown if len(names) <= SHOWN else f"{shown} and {len(names) - SHOWN} more"


def natural_key(name: str) -> tuple:
    """rank2 before rank10: digit runs compare as numbers, the rest as text."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in _DIGITS.split(name) if part)


def claimed_whole(path: Path, fmt: str = "auto") -> bool:
    """Whether `path` is read as it is: a file, or a folder that a reader claims as one trace."""
    from gpuvar.ingest.detect import detect, formats

    if not path.is_dir():
        return True
    if fmt != "auto":
        module = formats().get(fmt)
        return module is None or module.sniff(path, b"")  # (an unknown name: the command says so)
    try:
        detect(path)
    except InputError:
        return False
    return True


def _trace_format(path: Path, fmt: str) -> str:
    """The format that claims the file; InputError (with the reason) when it is not a trace."""
    from gpuvar.ingest.compression import read_head
    from gpuvar.ingest.detect import detect, formats

    if fmt == "auto":
        return detect(path).FORMAT
    head = read_head(path)
    if not head:
        raise InputError(path, "empty file")
    if not formats()[fmt].sniff(path, head):
        raise InputError(path, f"not a {fmt} trace")
    return fmt


def open_folder(folder: Path, fmt: str = "auto") -> Opened:
    """The trace files directly inside `folder`, in natural name order, and what was left out."""
    opened = Opened(folder)
    formats: dict[Path, str] = {}
    try:
        entries = sorted(folder.iterdir(), key=lambda p: natural_key(p.name))
    except OSError as exc:
        raise InputError(folder, exc.strerror or str(exc)) from None
    for entry in entries:
        if entry.name.startswith("."):
            opened.left_out.append((entry.name, HIDDEN))
        elif entry.is_dir():
            opened.left_out.append((entry.name, "subfolder"))
        else:
            try:
                formats[entry] = _trace_format(entry, fmt)
            except InputError as exc:  # a note or table ("not a trace"), or the reader's problem ("empty file")
                opened.left_out.append(
                    (entry.name, "not a trace" if exc.reason.startswith("unrecognised") else exc.reason)
                )
                continue
            except OSError as exc:
                opened.left_out.append((entry.name, exc.strerror or str(exc)))
                continue
            opened.traces.append(entry)
    _exported_reports(opened, formats)
    if not opened.traces:
        what = "; ".join(f"{name}: {why}" for name, why in opened.left_out[:SHOWN]) or "it is empty"
        raise InputError(folder, f"no trace directly in this folder ({what})")
    return opened


def _exported_reports(opened: Opened, formats: dict[Path, str]) -> None:
    """An Nsight Systems report beside its own export (report1.nsys-rep and report1.sqlite, as `nsys export` leaves
    them) is one recording: the export is read and the report left out, named, rather than two traces."""
    exports = {p.name.split(".")[0] for p in opened.traces if formats[p] == "nsys-sqlite"}
    for path in [p for p in opened.traces if formats[p] == "nsys-rep" and p.name.split(".")[0] in exports]:
        opened.traces.remove(path)
        opened.left_out.append((path.name, "its export is beside it"))


def resolve_sources(sources, fmt: str = "auto") -> tuple[list[Path], list[Opened]]:
    """The files a command reads: each file as given, each folder a reader claims as given, any other folder as
    the trace files inside it (open_folder). Returns (paths, the folders opened)."""
    paths: list[Path] = []
    opened: list[Opened] = []
    for source in sources:
        source = Path(source)
        if claimed_whole(source, fmt):
            paths.append(source)
            continue
        found = open_folder(source, fmt)
        opened.append(found)
        paths.extend(found.traces)
    return paths, opened


def one_trace(sources, fmt: str = "auto") -> tuple[list[str], list[Opened]]:
    """The sources of a command that reads one trace (`gpuvar ingest`, `gpuvar read`): as resolve_sources gives
    them, refused in one line when a folder held several traces that are not one kernel trace with its counter
    passes."""
    from gpuvar.ingest.counter_passes import group_files

    paths, opened = resolve_sources(sources, fmt)
    if opened and len(group_files(paths)) > 1:
        folder = opened[0]
        raise InputError(
            folder.folder,
            f"holds {counted(len(folder.traces), 'trace')} ({listed([p.name for p in folder.traces])}): give one "
            f"of them (e.g. {folder.traces[0]}); the ranks of one job: `gpuvar explain` or a dataset with merge: true",
        )
    return [str(p) for p in paths], opened


def _pattern(folder: Opened) -> str:
    """What to type for every trace of the folder: FOLDER/*SUFFIX when the traces share their suffixes (and
    nothing left out has them), else the traces' paths; shell-quoted."""
    import shlex

    suffixes = {"".join(p.suffixes) for p in folder.traces}
    suffix = suffixes.pop() if len(suffixes) == 1 else ""
    if suffix and not any(name.endswith(suffix) for name, _ in folder.left_out):
        return f"{shlex.quote(str(folder.folder))}/*{shlex.quote(suffix)}"
    return " ".join(shlex.quote(str(p)) for p in folder.traces)


def recorded_rank(path: Path) -> int | None:
    """The rank a Kineto trace records in its header (distributedInfo.rank, written before the events), None when
    its first 64 KiB do not say."""
    from gpuvar.ingest.compression import read_head

    match = _RANK.search(read_head(path))
    return int(match.group(1)) if match else None


def job_ranks(opened: list[Opened]) -> None:
    """Refuse, in one line, a folder whose several traces are not the ranks of one job: `gpuvar explain` reads
    several traces as ranks, and a folder's files are that only when each records a distinct rank."""
    from gpuvar.ingest.counter_passes import group_files

    for folder in opened:
        if len(folder.traces) < 2 or len(group_files(folder.traces)) == 1:
            continue
        ranks = [recorded_rank(p) for p in folder.traces]
        if None in ranks:
            raise InputError(
                folder.folder,
                f"holds {counted(len(ranks), 'trace')} ({listed([p.name for p in folder.traces])}) that do not each "
                "record their rank (Kineto distributedInfo), so they may be separate recordings: explain one of "
                f"them, or name them as the ranks of one job: gpuvar explain {_pattern(folder)}",
            )
        seen: dict[int, str] = {}
        for path, rank in zip(folder.traces, ranks):
            if rank in seen:
                raise InputError(
                    folder.folder,
                    f"{seen[rank]} and {path.name} both record rank {rank}: several recordings of one rank; give "
                    "one trace per rank",
                )
            seen[rank] = path.name
