"""rocprof v1 CSV: the kernel trace `results.csv` and counter-pass CSVs (`rocprof -i input.txt`).

Both layouts are read by column name: the current one (`...,arch_vgpr,accum_vgpr,sgpr,wave_size,sig,obj,
<counters>`, timestamps present only with --timestamp on / --stats) and the ROCm 4 one (`vgpr,sgpr,fbar`,
timestamps after the counters). Header quoted or not; KernelName quoted with commas inside. A counter pass
without timestamps is still ingested (start/end null): its counters are what a PerfCounter analysis needs.
Column mapping and conventions (grid in blocks = grd / wgr, '.kd' suffix removed, wave64 default for the
old layout) are in amd_common.
"""

from __future__ import annotations

from pathlib import Path

from gpuvar.ingest import amd_common
from gpuvar.ingest.base import ReaderOutput
from gpuvar.ingest.raw import RawTrace, ReadOptions

FORMAT = "rocprof-csv"
# Omniperf merges ~20 passes into one file with hundreds of columns; a single rocprof pass cannot (the
# hardware limits a pass to a handful of counters per block), so wider files belong to the omniperf reader.
MAX_PASS_COLUMNS = 100
RAW_TABLE = "dispatches"


def sniff(path: Path, head: bytes) -> bool:
    """A CSV whose header names KernelName, grd and wgr, and is not an Omniperf merged pmc_perf.csv."""
    if not head:
        return False
    header = amd_common.csv_header(head)
    return {"KernelName", "grd", "wgr"} <= set(header) and len(header) <= MAX_PASS_COLUMNS


def read_raw(path: Path, options: ReadOptions = ReadOptions()) -> RawTrace:
    """The CSV as parsed (raw table `dispatches`, rocprof's column names); rows of a malformed shape counted."""
    path = Path(path)
    raw = RawTrace(FORMAT, str(path), {})
    table = amd_common.read_amd_csv(path, raw)
    amd_common.require_kernel_name(path, table.column_names)
    raw.rows_read["kernels"] = table.num_rows + sum(raw.dropped.get("kernels", {}).values())
    amd_common.add_raw_table(raw, RAW_TABLE, table)
    return raw


def normalize(raw: RawTrace) -> ReaderOutput:
    """Kernel rows with canonical names where known (amd_common's mapping), every other column kept."""
    source = Path(raw.source).name
    out = raw.start_output(None)
    df = amd_common.map_amd_dispatch_columns(amd_common.raw_frame(raw, RAW_TABLE), out, source)
    df = amd_common.check_timestamps(df, out, source)
    out.kernels = amd_common.drop_nameless(df, out)
    return out


def read(path: Path) -> ReaderOutput:
    """Kernel rows of a rocprof v1 CSV, canonical names where known, every other column kept."""
    return normalize(read_raw(path))
