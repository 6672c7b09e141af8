"""Omniperf / rocprofiler-compute `pmc_perf.csv` (all counter passes merged per dispatch), every generation.

Source: the workload folder (pmc_perf.csv + timestamps.csv + sysinfo.csv) or the CSV itself. Header
generations: 2022 legacy (rocprof v1 names `Index,KernelName,...,vgpr,sgpr,fbar,...,BeginNs,EndNs`), 2024
(`Dispatch_ID,Kernel_Name,GPU_ID,Grid_Size,...,Start_Timestamp,End_Timestamp`) and MI300X (CRLF,
`Correlation_ID`, `XCC_Index`); Grid_Size is in work-items like rocprof's grd (see amd_common).

Per-pass duplicates: Omniperf repeats each pass's metadata with a suffix (`wave_size_3, obj_3`) and
sometimes a counter collected again (`GRBM_COUNT_12`). A column `X_n` is such a duplicate when `X` is a
column too and either X is a dispatch identity column, or `n` is the number of the pass block it sits in
(the block opened by the `wave_size_n` / `Wave_Size_n` marker). That keeps genuine counters named like
`SQC_DCACHE_REQ_READ_8` (in pass 0) intact. A duplicate equal to its base is dropped (counted in the
notes); one that differs is kept as `<name>_pass<n>`.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gpuvar.errors import InputError
from gpuvar.ingest import amd_common
from gpuvar.ingest.base import ReaderOutput
from gpuvar.ingest.raw import RawTrace, ReadOptions
from gpuvar.ingest.rocprof import MAX_PASS_COLUMNS
from gpuvar.schema import table1_rename

FORMAT = "omniperf-pmc-perf"
PMC_FILE = "pmc_perf.csv"
SYSINFO_FILE = "sysinfo.csv"
RAW_TABLE = "pmc_perf"
SYSINFO_TABLE = "sysinfo"
_SUFFIXED = re.compile(r"^(.+)_(\d+)$")
_PASS_MARKERS = ("wave_size", "Wave_Size", "obj")


def _pmc_path(path: Path) -> Path:
    return path / PMC_FILE if path.is_dir() else path


def sniff(path: Path, head: bytes) -> bool:
    """A folder with pmc_perf.csv, or a CSV headed Dispatch_ID + Kernel_Name, or a merged legacy file
    (rocprof v1 names, more columns than one rocprof pass can have)."""
    if path.is_dir():
        return (path / PMC_FILE).is_file()
    header = amd_common.csv_header(head)
    if {"Dispatch_ID", "Kernel_Name"} <= set(header):
        return True
    return {"KernelName", "grd", "wgr"} <= set(header) and len(header) > MAX_PASS_COLUMNS


# ------------------------------------------------------------------------------------- per-pass duplicates
def duplicate_columns(columns: list[str]) -> dict[str, tuple[str, int]]:
    """Per-pass duplicate column -> (base column, pass number), by the rule in the module docstring."""
    present = set(columns)
    has_markers = any(
        (m := _SUFFIXED.match(c)) and m.group(1) in _PASS_MARKERS and m.group(1) in present for c in columns
    )
    current_pass, found = 0, {}
    for col in columns:
        m = _SUFFIXED.match(col)
        if not m or m.group(1) not in present:
            continue
        base, n = m.group(1), int(m.group(2))
        if base in _PASS_MARKERS:
            current_pass = n
        if base in amd_common.IDENTITY_COLUMNS or (has_markers and n == current_pass) or not has_markers:
            found[col] = (base, n)
    return found


def _same_values(a: pd.Series, b: pd.Series) -> bool:
    """Equal element-wise, nulls equal to nulls (numbers compared as numbers)."""
    if a.dtype.kind in "iufb" and b.dtype.kind in "iufb":
        x, y = a.to_numpy(dtype=np.float64), b.to_numpy(dtype=np.float64)
        return bool(np.all((x == y) | (np.isnan(x) & np.isnan(y))))
    return bool(a.astype(object).where(a.notna(), None).equals(b.astype(object).where(b.notna(), None)))


def resolve_duplicates(df: pd.DataFrame, out: ReaderOutput, source: str) -> pd.DataFrame:
    """Drop per-pass duplicates identical to their base; rename the differing ones `<name>_pass<n>`."""
    dups = duplicate_columns(list(df.columns))
    simplified = table1_rename([base for base, _ in dups.values()])
    drop, rename = [], {}
    for col, (base, n) in dups.items():
        if _same_values(df[col], df[base]):
            drop.append(col)
        else:
            rename[col] = f"{simplified.get(base, base)}_pass{n}"
    if drop:
        out.notes.append(f"{source}: {len(drop)} per-pass duplicate column(s) identical to their base, dropped")
    if rename:
        out.notes.append(
            f"{source}: {len(rename)} per-pass duplicate column(s) differ from their base, kept as <name>_pass<n>"
        )
    return amd_common.rename_columns(df.drop(columns=drop), rename)  # one drop: deletes would fragment


# ------------------------------------------------------------------------------------------------- reading
def _wave_size_from_sysinfo(info: dict[str, str]) -> int | None:
    for key in ("wave_size", "waveSize"):
        value = info.get(key, "")
        if value.isdigit():
            return int(value)
    return None


def _sysinfo_note(info: dict[str, str]) -> str | None:
    """'GPU mi100 (gfx908), ROCm 4.2.0-21' from whichever sysinfo.csv generation is present."""
    gpu = info.get("gpu_model") or info.get("name") or ""
    arch = info.get("gpu_arch") or info.get("gpu_soc") or ""
    rocm = info.get("rocm_version") or info.get("host_rocmver") or ""
    if not (gpu or arch):
        return None
    text = f"GPU {gpu}" + (f" ({arch})" if arch else "")
    return text + (f", ROCm {rocm}" if rocm else "")


def read_raw(path: Path, options: ReadOptions = ReadOptions()) -> RawTrace:
    """pmc_perf.csv as parsed (raw table `pmc_perf`, per-pass duplicate columns included) and the row of
    sysinfo.csv beside it (raw table `sysinfo`, text, when present)."""
    path = Path(path)
    csv_path = _pmc_path(path)
    if path.is_dir() and not csv_path.is_file():
        raise InputError(path, f"folder has no {PMC_FILE} (not an Omniperf workload folder)")
    raw = RawTrace(FORMAT, str(path), {}, info={"file": csv_path.name})
    sysinfo = amd_common.read_sysinfo(csv_path.parent / SYSINFO_FILE)
    table = amd_common.read_amd_csv(csv_path, raw)
    amd_common.require_kernel_name(csv_path, table.column_names)
    raw.rows_read["kernels"] = table.num_rows + sum(raw.dropped.get("kernels", {}).values())
    amd_common.add_raw_table(raw, RAW_TABLE, table)
    if sysinfo:
        raw.tables[SYSINFO_TABLE] = pa.table({k: pa.array([v], pa.string()) for k, v in sysinfo.items()})
    return raw


def normalize(raw: RawTrace) -> ReaderOutput:
    """Kernel rows with Table 1 simplified names, per-pass duplicates resolved; GPU name from sysinfo in the notes."""
    source = raw.info["file"]
    out = raw.start_output(None)
    info = {}
    if SYSINFO_TABLE in raw.tables:
        info = {k: v[0] for k, v in raw.tables[SYSINFO_TABLE].to_pydict().items()}
    note = _sysinfo_note(info)
    if note:
        out.notes.insert(0, f"{SYSINFO_FILE}: {note}")  # before the read's notes, as sysinfo.csv is read first
    df = resolve_duplicates(amd_common.raw_frame(raw, RAW_TABLE), out, source)
    wave = _wave_size_from_sysinfo(info)
    if wave is None:
        df = amd_common.map_amd_dispatch_columns(df, out, source)
    else:
        df = amd_common.map_amd_dispatch_columns(df, out, source, wave, f"from {SYSINFO_FILE}")
    df = amd_common.check_timestamps(df, out, source)
    out.kernels = amd_common.drop_nameless(df, out)
    return out


def read(path: Path) -> ReaderOutput:
    """Kernel rows of pmc_perf.csv with Table 1 simplified names; GPU name from sysinfo.csv in the notes."""
    return normalize(read_raw(path))
