"""How much memory ingesting a trace takes, estimated from the file before it is read.

Why: every format but a big Nsight Systems export is ingested whole, so an ingest's peak follows its trace, and
what must know it before one starts reads it here:
  * the workflow's ingest jobs ask Slurm for it, and are killed past what they asked (gpuvar.workflow.memory);
  * `gpuvar explain` ingests a job's rank files side by side, no more at once than the memory available holds
    (gpuvar.explain.rank_jobs);
  * `gpuvar ingest`, `read` and `explain` say in one line before they start that it exceeds the memory available
    (warn_if_short): else the kernel may stop the process with no message;
  * an Nsight Systems export below the pieces threshold is taken in pieces where held whole it would not fit
    (gpuvar.ingest.nsys_pieces, PieceSettings.when_short).
The memory available is the kernel's MemAvailable, or less inside a cgroup with a limit (a Slurm job, a container).

Measured peaks (`gpuvar read` and `gpuvar normalize` each, and `gpuvar ingest`; /usr/bin/time, 2026-11-27), beyond
BASE_BYTES (the interpreter, pandas and pyarrow): Kineto 0.59 GB for 338 MB of JSON (300 k kernels), 1.34 GB for
1.13 GB (1 M); rocpd 0.33 GB for 15.7 MB (180 k dispatches); rocprof v1 with 15 counters 1.64 GB for 292 MB
(1 M); Nsight Systems 1.46 GB for 1 M kernels and 0.5 M copies, 1.81 GB with CUDA API calls, and about 1 GB in
pieces (above 2 M kernel rows) whatever the size. The factors below round those up.
"""

from __future__ import annotations

from pathlib import Path

from gpuvar.errors import GpuvarError

BASE_BYTES = 300 << 20
PIECES_BYTES = 1 << 30  # an Nsight Systems export taken in pieces (gpuvar.ingest.nsys_pieces)
BYTES_PER_FILE_BYTE = {"pytorch-kineto": 1.5, "rocpd-sqlite": 12.0, "rocprof-csv": 6.0, "rocprofv3-csv": 6.0,
                       "ncu-csv": 6.0, "omniperf": 6.0}  # fmt: skip
NSYS_BYTES_PER_KERNEL, NSYS_BYTES_PER_COPY = 1600, 600
GZIP_RATIO_AT_LEAST = 5  # a JSON or CSV trace shrinks 8-15x; gzip records the size modulo 4 GiB only
OTHER_RATIO = 10  # bzip2, xz, zstd: their size is not read, the ratio assumed


def peak_bytes(files, fmt: str = "auto") -> int:
    """The estimated peak of one ingest of `files` (the files of one trace, or a folder): BASE_BYTES and what the
    trace holds (trace_bytes)."""
    files = [files] if isinstance(files, str | Path) else list(files)
    return BASE_BYTES + sum(trace_bytes(Path(f), fmt) for f in _traces(files, fmt))


def _traces(files: list, fmt: str) -> list:
    """The files an ingest reads: a folder that no reader claims whole is its traces (gpuvar.ingest.folders), not
    the notes beside them; as given where that cannot be said (the ingest says why)."""
    from gpuvar.ingest.folders import resolve_sources

    try:
        return resolve_sources(files, fmt)[0]
    except (OSError, GpuvarError, ValueError):
        return files


def trace_bytes(path: Path, fmt: str = "auto") -> int:
    """What ingesting `path` holds beyond BASE_BYTES; 0 for a format whose footprint is not measured (Nsight
    Compute reports, Omniperf workloads are small) or a path that cannot be read (the ingest says why)."""
    from gpuvar.ingest import reader_for

    try:
        fmt = reader_for(path, fmt).FORMAT
        if fmt == "nsys-sqlite":
            return _nsys_bytes(path)
        factor = BYTES_PER_FILE_BYTE.get(fmt)
        if factor is None:
            return 0
        files = [f for f in sorted(path.rglob("*")) if f.is_file()] if path.is_dir() else [path]
        return int(factor * sum(uncompressed_size(f) for f in files))
    except (OSError, GpuvarError, ValueError):
        return 0


def _nsys_bytes(path: Path) -> int:
    """An export held whole: its kernel and copy rows (nsys_whole_bytes less the base); one taken in pieces (above
    the threshold, or where it would not fit: gpuvar.ingest.nsys_pieces.plan_reason) PIECES_BYTES, whatever its
    size."""
    from gpuvar.ingest.nsys_pieces import PieceSettings, export_rows, plan_reason
    from gpuvar.ingest.nsys_sqlite import connect

    if plan_reason(path, PieceSettings()) is None:
        return PIECES_BYTES
    con = connect(path)
    try:
        return nsys_whole_bytes(*export_rows(con)) - BASE_BYTES
    finally:
        con.close()


def nsys_whole_bytes(kernels: int, copies: int) -> int:
    """The estimated peak of ingesting an Nsight Systems export of these rows whole."""
    return BASE_BYTES + kernels * NSYS_BYTES_PER_KERNEL + copies * NSYS_BYTES_PER_COPY


def uncompressed_size(path: Path) -> int:
    """A file's size as read: a gzip file's recorded size (ISIZE, modulo 4 GiB: the wrap taken that makes it at
    least GZIP_RATIO_AT_LEAST times the compressed size), another compression's at OTHER_RATIO."""
    from gpuvar.ingest.compression import compression_of, read_raw_head

    size = path.stat().st_size
    kind = compression_of(read_raw_head(path))
    if kind is None:
        return size
    if kind != "gzip" or size < 18:
        return size * OTHER_RATIO
    with open(path, "rb") as fh:
        fh.seek(-4, 2)
        recorded = int.from_bytes(fh.read(4), "little")
    while recorded < GZIP_RATIO_AT_LEAST * size:
        recorded += 2**32
    return recorded


def usable_cores() -> int:
    """The cores this process may use (its affinity: a Slurm job's or taskset's share), which, with the memory
    available, decides how many processes an ingest starts."""
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def available_bytes() -> int | None:
    """The memory this process can still take: the kernel's MemAvailable, or less where a cgroup limits the process
    (a Slurm job's --mem, a container's limit); None where neither is known."""
    found = []
    try:
        with open("/proc/meminfo") as fh:
            found += [int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    left = _cgroup_left()
    if left is not None:
        found.append(left)
    return max(0, min(found)) if found else None


_CGROUP_FILES = {  # (limit, usage) of cgroup v2's unified hierarchy and of v1's memory controller
    "v2": ("/sys/fs/cgroup", "memory.max", "memory.current"),
    "v1": ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"),
}


def _cgroup_left(listing: Path = Path("/proc/self/cgroup"), files: dict = _CGROUP_FILES) -> int | None:
    """The process's cgroup memory limit less its usage (v2, else v1's memory controller), None without a limit.
    The cgroup's own folder where it is mounted, else the mount's root (inside a cgroup namespace)."""
    try:
        lines = listing.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        kind = "v2" if parts[0] == "0" and parts[1] == "" else "v1" if "memory" in parts[1].split(",") else None
        if kind is None:
            continue
        root, limit_file, usage_file = files[kind]
        for folder in (Path(root) / parts[2].lstrip("/"), Path(root)):
            try:
                limit = (folder / limit_file).read_text().strip()
                usage = int((folder / usage_file).read_text())
            except (OSError, ValueError):
                continue
            if limit == "max" or int(limit) >= 2**60:  # (v1 writes a huge number for no limit)
                return None
            return int(limit) - usage
    return None


def shortage(path, need: int) -> str | None:
    """One line when ingesting `path` (the trace's first file) likely takes more memory (`need`, its peak_bytes)
    than is available (available_bytes): said before it starts, since the kernel may otherwise stop the process with
    no message. None when it fits or nothing is known."""
    free = available_bytes()
    if free is None or need <= free:
        return None
    return (
        f"{path}: ingesting it takes about {need / 2**30:.1f} GB of memory (this format is read whole), and "
        f"{free / 2**30:.1f} GB is available: it may be stopped for want of memory; a machine or Slurm job with more "
        "memory, or a shorter recording, avoids that"
    )


def warn_if_short(command: str, path, need: int) -> None:
    """Print shortage's line on stderr, as `gpuvar COMMAND: warning: ...`, before the ingest starts."""
    import sys

    from gpuvar.text_safety import plain

    line = shortage(path, need)
    if line is not None:
        print(f"gpuvar {command}: warning: {plain(line)}", file=sys.stderr, flush=True)
