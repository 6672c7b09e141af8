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

FORMAT = "rocprof-csv"
# Omniperf merges ~20 passes into one file with hundreds of columns; a single rocprof pass cannot (the
# hardware limits a pass to a handful of counters per block), so wider files belong to the omniperf reader.
MAX_PASS_COLUMNS = 100


def sniff(path: Path, head: bytes) -> bool:
    """A CSV whose header names KernelName, grd and wgr, and is not an Omniperf merged pmc_perf.csv."""
    if not head:
        return False
    header = amd_common.csv_header(head)
    return {"KernelName", "grd", "wgr"} <= set(header) and len(header) <= MAX_PASS_COLUMNS


def read(path: Path) -> ReaderOutput:
    """Kernel rows of a rocprof v1 CSV, canonical names where known, every other column kept."""
    path = Path(path)
    out = ReaderOutput(format=FORMAT, kernels=None)
    df = amd_common.read_amd_csv(path, out)
    amd_common.require_kernel_name(path, df.columns)
    out.rows_read["kernels"] = len(df) + sum(out.dropped.get("kernels", {}).values())
    df = amd_common.map_amd_dispatch_columns(df, out, path.name)
    df = amd_common.check_timestamps(df, out, path.name)
    out.kernels = amd_common.drop_nameless(df, out)
    return out
