"""rocprof v1 CSV: the kernel trace `results.csv` and counter-pass CSVs (`rocprof -i input.txt`), alone or joined.

Both layouts are read by column name: the current one (`...,arch_vgpr,accum_vgpr,sgpr,wave_size,sig,obj,
<counters>`, timestamps present only with --timestamp on / --stats) and the ROCm 4 one (`vgpr,sgpr,fbar`,
timestamps after the counters). Header quoted or not; KernelName quoted with commas inside. Column mapping and
conventions (grid in blocks = grd / wgr, '.kd' suffix removed, wave64 default for the old layout) are in
amd_common.

Source: one CSV, several CSVs of one program (`read_raw_files`: the kernel trace and its counter passes), or a
folder holding them (every CSV whose header is rocprof's). Of several files the kernel trace is the first timed
file without counters (`results.csv`), else the first timed one (the ROCm 4 passes carry timestamps), else the
first; every other file is a counter pass joined onto it by Index with the kernel name as a check
(gpuvar.ingest.counter_passes). A pass's own timestamps are not used: it is another run of the program. A counter
pass alone is still read (start/end null; `gpuvar ingest` then asks for its kernel trace).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from gpuvar.errors import InputError
from gpuvar.ingest import amd_common, counter_passes
from gpuvar.ingest.base import ReaderOutput
from gpuvar.ingest.compression import read_head
from gpuvar.ingest.raw import RawTrace, ReadOptions

FORMAT = "rocprof-csv"
# Omniperf merges ~20 passes into one file with hundreds of columns; a single rocprof pass cannot (the
# hardware limits a pass to a handful of counters per block), so wider files belong to the omniperf reader.
MAX_PASS_COLUMNS = 100
RAW_TABLE = "dispatches"
PASS_TABLE = "pass_{n}"
TIMESTAMPS = {"BeginNs", "EndNs"}
TRACE_FILE = "results.csv"


def is_rocprof_header(header: list[str]) -> bool:
    """A rocprof v1 header: KernelName, grd and wgr, and no wider than one pass can be."""
    return {"KernelName", "grd", "wgr"} <= set(header) and len(header) <= MAX_PASS_COLUMNS


def _header(path: Path) -> list[str]:
    try:
        return amd_common.csv_header(read_head(path))
    except (OSError, InputError):
        return []


def folder_files(path: Path) -> list[Path]:
    """The rocprof v1 CSVs of a folder, `results.csv` first, then by name."""
    files = [f for f in sorted(Path(path).glob("*.csv")) if f.is_file() and is_rocprof_header(_header(f))]
    return sorted(files, key=lambda f: f.name != TRACE_FILE)


def sniff(path: Path, head: bytes) -> bool:
    """A CSV whose header names KernelName, grd and wgr, and is not an Omniperf merged pmc_perf.csv; or a folder
    of such CSVs (a kernel trace and its counter passes)."""
    if path.is_dir():
        return bool(folder_files(path))
    if not head:
        return False
    return is_rocprof_header(amd_common.csv_header(head))


def has_counters(header: list[str]) -> bool:
    """Whether a rocprof v1 header has columns beyond the dispatch's identity and times: a counter pass."""
    return any(c not in amd_common.IDENTITY_COLUMNS for c in header)


def _trace_position(headers: list[list[str]]) -> int:
    """Which file is the kernel trace: timed without counters, else timed, else the first."""
    timed = [i for i, h in enumerate(headers) if TIMESTAMPS <= set(h)]
    pure = [i for i in timed if not has_counters(headers[i])]
    return (pure or timed or [0])[0]


def read_raw(path: Path, options: ReadOptions = ReadOptions()) -> RawTrace:
    """The CSV as parsed (raw table `dispatches`, rocprof's column names); rows of a malformed shape counted.
    A folder is read as its files (read_raw_files), with the folder as the source."""
    path = Path(path)
    if path.is_dir():
        files = folder_files(path)
        if not files:
            raise InputError(path, "folder has no rocprof CSV (a header with KernelName, grd and wgr)")
        return read_raw_files(files, options, source=path)
    raw = RawTrace(FORMAT, str(path), {})
    table = amd_common.read_amd_csv(path, raw)
    amd_common.require_kernel_name(path, table.column_names)
    raw.rows_read["kernels"] = table.num_rows + sum(raw.dropped.get("kernels", {}).values())
    amd_common.add_raw_table(raw, RAW_TABLE, table)
    return raw


def read_raw_files(paths: list[Path], options: ReadOptions = ReadOptions(), source: Path | None = None) -> RawTrace:
    """A kernel trace and its counter passes as parsed: the trace as `dispatches`, the passes as `pass_1`, ...
    (raw.info['files']: table -> file). One file is read_raw of it."""
    paths = [Path(p) for p in paths]
    if len(paths) == 1:
        raw = read_raw(paths[0], options)
        raw.source = str(source or paths[0])
        return raw
    headers = [_header(p) for p in paths]
    trace = _trace_position(headers)
    order = [trace] + [i for i in range(len(paths)) if i != trace]
    raw = read_raw(paths[trace], options)
    raw.source = str(source or paths[trace])
    files = {RAW_TABLE: str(paths[trace])}
    for n, i in enumerate(order[1:], 1):
        scratch = RawTrace(FORMAT, str(paths[i]), {})
        table = amd_common.read_amd_csv(paths[i], scratch)
        amd_common.require_kernel_name(paths[i], table.column_names)
        for reason, count in scratch.dropped.get("kernels", {}).items():
            raw.notes.append(f"{paths[i].name}: {count} counter-pass row(s) skipped: {reason}")
        raw.notes.extend(scratch.notes)
        name = PASS_TABLE.format(n=n)
        amd_common.add_raw_table(raw, name, table)
        files[name] = str(paths[i])
    raw.info["files"] = files
    return raw


def _counter_columns(raw_columns: list[str], mapped: pd.DataFrame) -> list[str]:
    """The counter columns of a mapped pass: what its non-identity columns became (Table 1 names)."""
    identity = [c for c in raw_columns if c in amd_common.IDENTITY_COLUMNS]
    scratch = ReaderOutput(FORMAT, None)
    mapped_identity = amd_common.map_amd_dispatch_columns(pd.DataFrame(columns=identity), scratch, "")
    return [c for c in mapped.columns if c not in set(mapped_identity.columns)]


def _join_passes(raw: RawTrace, kernels: pd.DataFrame, out: ReaderOutput) -> pd.DataFrame:
    files = raw.info.get("files", {})
    trace_file = files.get(RAW_TABLE, raw.source)
    n = 1
    while PASS_TABLE.format(n=n) in raw.tables:
        name = PASS_TABLE.format(n=n)
        frame = amd_common.raw_frame(raw, name)
        columns = list(frame.columns)
        if TIMESTAMPS & set(columns):
            out.notes.append(f"{Path(files[name]).name}: its timestamps are not used (another run of the program)")
        scratch = ReaderOutput(FORMAT, None)
        mapped = amd_common.map_amd_dispatch_columns(frame, scratch, Path(files[name]).name)
        kernels, record = counter_passes.join_pass(
            kernels,
            mapped,
            _counter_columns(columns, mapped),
            key="launch_id",
            key_label="Index",
            pass_file=files[name],
            trace_file=trace_file,
            number=n,
        )
        out.counter_passes.append(record)
        out.notes.append(counter_passes.note(record, len(kernels)))
        n += 1
    return kernels


def normalize(raw: RawTrace) -> ReaderOutput:
    """Kernel rows with canonical names where known (amd_common's mapping), every other column kept; the
    counter passes' counters joined by Index."""
    source = Path(raw.info.get("files", {}).get(RAW_TABLE, raw.source)).name
    out = raw.start_output(None)
    df = amd_common.map_amd_dispatch_columns(amd_common.raw_frame(raw, RAW_TABLE), out, source)
    df = _join_passes(raw, df, out)
    df = amd_common.check_timestamps(df, out, source)
    out.kernels = amd_common.drop_nameless(df, out)
    return out


def read(path: Path) -> ReaderOutput:
    """Kernel rows of a rocprof v1 CSV (or folder), canonical names where known, every other column kept."""
    return normalize(read_raw(path))
