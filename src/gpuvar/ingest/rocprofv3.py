"""rocprofv3 (rocprofiler-sdk) CSV output: kernel_trace, counter_collection and memory_copy_trace.

Source: the output folder (files found up to two levels down, as rocprofv3 writes `<host>/<pid>_*.csv`;
several processes are concatenated), a single one of those files, which is then read alone, or several of them
(read_raw_files: kernel_trace.csv and counter_collection.csv side by side, read as their folder would be).
  * kernel_trace: Grid_Size_X/Y/Z count work-items, so grid_x = ceil(Grid_Size_X / Workgroup_Size_X) (the
    source columns are kept); lds = Group_Segment_Size, scratch = Private_Segment_Size, stream = Stream_Id
    (else Queue_Id), device = Agent_Id (an integer, or the number in "Agent 1").
  * counter_collection is long (one row per dispatch x counter): it is pivoted to one column per counter
    (Table 1 names; repeated rows of one counter for one dispatch are summed, e.g. per-XCC instances) and
    joined onto the kernel_trace rows of the same process by Dispatch_Id, the kernel names checked (a
    mismatch is an error: gpuvar.ingest.counter_passes), adding the counters and what the trace lacks
    (VGPR/SGPR counts). Without a kernel_trace its dispatches are the kernel table (its Start/End_Timestamp;
    `gpuvar ingest` asks for the kernel trace when it has none). Counter dispatches with no matching kernel
    are counted in ingest.json (`counter_passes`).
  * memory_copy_trace: copy_kind from Direction in CUDA codes (HtoD 1, DtoH 2, DtoD 8, HtoH 9) and
    copy_kind_name the short form; bytes is null (the format has no size column; `Bytes`/`Size` is used if
    a newer version writes one); device_id is the GPU end of the copy: Source_Agent_Id for DtoH,
    Destination_Agent_Id otherwise.
  * process_id: Process_Id where the file has it, else the numeric `<pid>_` file-name prefix.
Raw stage: each CSV is its own raw table, as parsed (the counter table long, as in the file); the grouping by
process, in reading order, is in raw.info. Pivot, join and mapping are normalize's.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gpuvar.errors import InputError
from gpuvar.ingest import amd_common
from gpuvar.ingest.base import ReaderOutput, read_csv_bytes, require_columns, to_int, to_number
from gpuvar.ingest.raw import RawTrace, ReadOptions

FORMAT = "rocprofv3-csv"
KINDS = ("kernel_trace", "counter_collection", "memory_copy_trace")
V3_COLUMNS = {
    "launch_id": ("Dispatch_Id",),
    "kernel_name": ("Kernel_Name",),
    "device_id": ("Agent_Id",),
    "stream_id": ("Stream_Id", "Queue_Id"),
    "process_id": ("Process_Id",),
    "correlation_id": ("Correlation_Id",),
    "start": ("Start_Timestamp",),
    "end": ("End_Timestamp",),
    "lds_per_workgroup": ("Group_Segment_Size", "LDS_Block_Size"),
    "scratch_per_workitem": ("Private_Segment_Size", "Scratch_Size"),
    "arch_vgpr": ("Arch_VGPR_Count", "VGPR_Count"),
    "accum_vgpr": ("Accum_VGPR_Count",),
    "sgpr": ("SGPR_Count",),
    "wave_size": ("Wave_Size", "Wavefront_Size"),
    "block_x": ("Workgroup_Size_X",),
    "block_y": ("Workgroup_Size_Y",),
    "block_z": ("Workgroup_Size_Z",),
}
COPY_KINDS = {  # Direction without the MEMORY_COPY_ prefix -> (CUDA copyKind code, short name)
    "HOST_TO_DEVICE": (1, "HtoD"),
    "DEVICE_TO_HOST": (2, "DtoH"),
    "DEVICE_TO_DEVICE": (8, "DtoD"),
    "HOST_TO_HOST": (9, "HtoH"),
    "PEER_TO_PEER": (10, "PtoP"),
}
JOIN_KEYS = ["launch_id", "kernel_name"]
# properties of the kernel code object, the same for every dispatch of a kernel
STATIC_KERNEL_COLUMNS = (
    "arch_vgpr",
    "accum_vgpr",
    "sgpr",
    "registers_per_thread",
    "wave_size",
    "lds_per_workgroup",
    "scratch_per_workitem",
)
_PREFIX = re.compile(r"^(\d+)_")


# ------------------------------------------------------------------------------------------------ finding
def kind_of(header) -> str | None:
    """Which rocprofv3 CSV a header belongs to, by its columns."""
    h = set(header)
    if {"Counter_Name", "Counter_Value", "Dispatch_Id"} <= h:
        return "counter_collection"
    if "Direction" in h and "Start_Timestamp" in h and h & {"Source_Agent_Id", "Destination_Agent_Id"}:
        return "memory_copy_trace"
    if {"Kernel_Name", "Dispatch_Id", "Start_Timestamp"} <= h:
        return "kernel_trace"
    return None


def _folder_files(path: Path) -> list[tuple[str, Path]]:
    """(kind, file) of every rocprofv3 CSV in the folder or up to two levels below, sorted."""
    found = []
    for pattern in ("", "*/", "*/*/"):
        for kind in KINDS:
            found += [(kind, f) for f in sorted(path.glob(f"{pattern}*{kind}.csv")) if f.is_file()]
    return found


def source_files(path: Path) -> list[tuple[str, Path]]:
    """(kind, file) pairs to read: a folder's rocprofv3 CSVs, or the one file given (kind by content)."""
    if path.is_dir():
        return _folder_files(path)
    kind = kind_of(amd_common.csv_header(read_csv_bytes(path)[:65536]))
    if kind is None:
        raise InputError(path, "not a rocprofv3 kernel_trace, counter_collection or memory_copy_trace CSV")
    return [(kind, path)]


def sniff(path: Path, head: bytes) -> bool:
    """A folder holding rocprofv3 CSVs, or one such CSV recognised by its header."""
    if path.is_dir():
        return any(kind != "memory_copy_trace" for kind, _ in _folder_files(path))
    return kind_of(amd_common.csv_header(head)) is not None


def _group(path: Path) -> str:
    """Files of one process share a directory and a `<pid>_` prefix."""
    name = path.name
    for kind in KINDS:
        if name.endswith(f"{kind}.csv"):
            name = name[: -len(f"{kind}.csv")]
    return str(path.parent / name)


# -------------------------------------------------------------------------------------------- conversions
def agent_number(series: pd.Series) -> pd.Series:
    """Agent ids as integers: 2 -> 2, "Agent 1" -> 1 (null when there is no number)."""
    if series.dtype.kind in "iuf":
        return series
    return to_number(series.astype(str).str.extract(r"(-?\d+)", expand=False))


def _set_process(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    if "process_id" not in df.columns:
        m = _PREFIX.match(path.name)
        if m:
            df["process_id"] = int(m.group(1))
    return df


def map_dispatches(df: pd.DataFrame, path: Path, out: ReaderOutput) -> pd.DataFrame:
    """Canonical names for kernel_trace / counter_collection metadata; grid in blocks (work-items / block)."""
    df = amd_common.rename_columns(df, amd_common.canonical_renames(df.columns, V3_COLUMNS))
    for axis in "xyz":
        src, block = f"Grid_Size_{axis.upper()}", f"block_{axis}"
        if src in df.columns and block in df.columns:
            df[f"grid_{axis}"] = amd_common.ceil_div(df[src], df[block])
    if "Grid_Size" in df.columns and "Workgroup_Size" in df.columns and "grid_x" not in df.columns:
        df["grid_x"] = amd_common.ceil_div(df["Grid_Size"], df["Workgroup_Size"])
        df["block_x"] = to_int(df["Workgroup_Size"])
        for col in ("grid_y", "grid_z", "block_y", "block_z"):
            df[col] = pd.array(np.ones(len(df), dtype=np.int64), dtype="Int64")
        df = amd_common.rename_columns(df, {"Grid_Size": "grid_work_items"})
        del df["Workgroup_Size"]
    if "device_id" in df.columns:
        df["device_id"] = agent_number(df["device_id"])
    if "arch_vgpr" in df.columns:
        df["registers_per_thread"] = df["arch_vgpr"]
    if "kernel_name" in df.columns:
        df["kernel_name"], _ = amd_common.clean_kernel_names(df["kernel_name"])
    return _set_process(df, path)


def pivot_counters(df: pd.DataFrame, path: Path, out: ReaderOutput) -> tuple[pd.DataFrame, list[str]]:
    """Long counter rows -> one row per dispatch: its metadata (first row) + one column per counter.

    Returns the frame (canonical / Table 1 names) and the names of its counter columns.
    """
    value = to_number(df["Counter_Value"])
    keys = ["Dispatch_Id", "Counter_Name"]
    repeated = int(df.duplicated(keys).sum())
    if repeated:
        out.notes.append(f"{path.name}: {repeated} repeated (dispatch, counter) row(s) summed (counter instances)")
    wide = value.groupby([df[k] for k in keys], sort=False).sum(min_count=1).unstack("Counter_Name")
    meta = df.drop(columns=["Counter_Name", "Counter_Value"]).drop_duplicates("Dispatch_Id")
    meta = meta.set_index("Dispatch_Id")
    wide.columns = [f"{c}_counter" if str(c) in meta.columns else str(c) for c in wide.columns]
    out.notes.append(
        f"{path.name}: {len(df)} counter row(s) pivoted to {len(wide)} dispatch(es) x {wide.shape[1]} counter(s)"
    )
    counter_names = amd_common.rename_table1(pd.DataFrame(columns=list(wide.columns))).columns.tolist()
    frame = amd_common.rename_table1(map_dispatches(meta.join(wide).reset_index(), path, out))
    return frame, [c for c in counter_names if c in frame.columns]


def join_counters(
    kernels: pd.DataFrame,
    counters: pd.DataFrame,
    counter_cols: list[str],
    source: str,
    out: ReaderOutput,
    *,
    trace_file: str = "kernel_trace.csv",
    number: int = 1,
) -> pd.DataFrame:
    """Counters onto the kernel of the same Dispatch_Id, the kernel names checked (a mismatch is an InputError
    naming `source`, the counter file: gpuvar.ingest.counter_passes); static per-kernel properties the trace lacks
    (VGPR/SGPR counts...) by kernel name. Run-specific metadata of the counter run (its times, process) is not
    copied: the two files may come from different runs."""
    from gpuvar.ingest import counter_passes

    if not set(JOIN_KEYS) <= set(kernels.columns) or not set(JOIN_KEYS) <= set(counters.columns):
        out.notes.append(f"{Path(source).name}: counters not joined (no Dispatch_Id / Kernel_Name to match on)")
        return kernels
    static = [c for c in STATIC_KERNEL_COLUMNS if c in counters.columns and c not in kernels.columns]
    if static:
        per_name = counters[["kernel_name", *static]].drop_duplicates("kernel_name")
        kernels = kernels.merge(per_name, on="kernel_name", how="left", validate="many_to_one")
    cols = [c for c in counter_cols if c not in JOIN_KEYS]
    kernels, record = counter_passes.join_pass(
        kernels,
        counters,
        cols,
        key="launch_id",
        key_label="Dispatch_Id",
        pass_file=source,
        trace_file=trace_file,
        number=number,
    )
    out.counter_passes.append(record)
    out.notes.append(counter_passes.note(record, len(kernels)))
    return kernels


def _agents(df: pd.DataFrame, column: str) -> pd.Series:
    return agent_number(df[column]) if column in df.columns else pd.Series(np.nan, index=df.index)


def memcpy_frame(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """memory_copy_trace rows with canonical names and CUDA copy-kind codes; other columns kept."""
    direction = df["Direction"].astype(str).str.strip().str.removeprefix("MEMORY_COPY_")
    m = pd.DataFrame(index=df.index)
    for canonical, source in (("start", "Start_Timestamp"), ("end", "End_Timestamp")):
        m[canonical] = df[source] if source in df.columns else np.nan  # parsed by amd_common.drop_bad_timestamps
    m["copy_kind"] = direction.map({k: v[0] for k, v in COPY_KINDS.items()}).astype("Int64")
    names = direction.map({k: v[1] for k, v in COPY_KINDS.items()})
    m["copy_kind_name"] = names.fillna(direction.where(df["Direction"].notna()))  # unknown: keep the text
    gpu_is_source = direction == "DEVICE_TO_HOST"
    m["device_id"] = np.where(gpu_is_source, _agents(df, "Source_Agent_Id"), _agents(df, "Destination_Agent_Id"))
    stream = amd_common.first_present(df.columns, ("Stream_Id", "Queue_Id"))
    size = amd_common.first_present(df.columns, ("Bytes", "Size", "Copy_Bytes"))
    ids = (("stream_id", stream), ("correlation_id", "Correlation_Id"), ("process_id", "Process_Id"))
    for canonical, source in ids:
        if source in df.columns:
            m[canonical] = df[source]
    m["bytes"] = to_number(df[size]) if size else pd.array([pd.NA] * len(df), dtype="Int64")
    used = {"Start_Timestamp", "End_Timestamp", stream, size, "Correlation_Id", "Process_Id"}
    for col in df.columns:
        if col not in used and col not in m.columns:
            m[col] = df[col]
    return _set_process(m, path)


# ------------------------------------------------------------------------------------------------- reading
def _read_part(kind: str, path: Path, raw: RawTrace) -> pa.Table:
    """One CSV as parsed; malformed rows of a kernel/copy file count as drops of its table, of a counter file
    as notes (its rows are not the kernel table's)."""
    if kind == "counter_collection":
        scratch = RawTrace(FORMAT, str(path), {})
        table = amd_common.read_amd_csv(path, scratch)
        for reason, n in scratch.dropped.get("kernels", {}).items():
            raw.notes.append(f"{path.name}: {n} counter row(s) skipped: {reason}")
        amd_common.require_kernel_name(path, table.column_names)
        require_columns(path, table.column_names, ("Dispatch_Id", "Counter_Name", "Counter_Value"))
        return table
    name = "memcpy" if kind == "memory_copy_trace" else "kernels"
    before = sum(raw.dropped.get(name, {}).values())
    table = amd_common.read_amd_csv(path, raw, name)
    dropped = sum(raw.dropped.get(name, {}).values()) - before
    raw.rows_read[name] = raw.rows_read.get(name, 0) + table.num_rows + dropped
    if kind == "kernel_trace":
        amd_common.require_kernel_name(path, table.column_names)
    elif "Direction" not in table.column_names:
        raise InputError(path, "CSV lacks required column Direction")
    return table


def _dispatch_count(table: pa.Table) -> int:
    """Dispatches of a long counter table: distinct Dispatch_Id values, a missing one counting once."""
    return int(table.column("Dispatch_Id").to_pandas().nunique(dropna=False))


def read_raw(path: Path, options: ReadOptions = ReadOptions()) -> RawTrace:
    """Every rocprofv3 CSV of the folder (or the one file) as parsed, one raw table each under its kind's name
    (`kernel_trace`, `counter_collection` in its long layout, `memory_copy_trace`; `_<n>` added when a folder
    holds several of a kind). raw.info['groups'] lists them per process, in reading order."""
    path = Path(path)
    parts = source_files(path)
    if not parts:
        raise InputError(
            path, "folder has no rocprofv3 *kernel_trace.csv, *counter_collection.csv or *memory_copy_trace.csv"
        )
    return _read_parts(parts, str(path))


def read_raw_files(paths: list[Path], options: ReadOptions = ReadOptions()) -> RawTrace:
    """Several rocprofv3 CSVs (or folders) of one trace, e.g. kernel_trace.csv and counter_collection.csv given
    side by side: read as the folder holding them would be (files of one process join); the source is the
    first kernel_trace file."""
    parts = [part for p in paths for part in source_files(Path(p))]
    traces = [str(f) for kind, f in parts if kind == "kernel_trace"]
    return _read_parts(parts, traces[0] if traces else str(paths[0]))


def _read_parts(parts: list[tuple[str, Path]], source: str) -> RawTrace:
    raw = RawTrace(FORMAT, source, {})
    grouped: dict[str, dict[str, list[Path]]] = {}
    for kind, f in parts:
        grouped.setdefault(_group(f), {}).setdefault(kind, []).append(f)
    several = {kind for kind in KINDS if sum(k == kind for k, _ in parts) > 1}
    seen = dict.fromkeys(KINDS, 0)
    groups, files, paths = [], {}, {}
    for group, by_kind in sorted(grouped.items()):
        entry = {"name": Path(group).name or "kernel_trace", **{kind: [] for kind in KINDS}}
        for kind in KINDS:
            for f in by_kind.get(kind, []):
                name = f"{kind}_{seen[kind]}" if kind in several else kind
                seen[kind] += 1
                table = _read_part(kind, f, raw)
                if kind == "counter_collection" and "kernel_trace" not in by_kind:
                    raw.rows_read["kernels"] = raw.rows_read.get("kernels", 0) + _dispatch_count(table)
                amd_common.add_raw_table(raw, name, table)
                entry[kind].append(name)
                files[name] = f.name
                paths[name] = str(f)
        groups.append(entry)
    raw.rows_read.setdefault("kernels", 0)
    raw.info.update(groups=groups, files=files, paths=paths)
    return raw


def _process_kernels(raw: RawTrace, group: dict, out: ReaderOutput) -> pd.DataFrame | None:
    """Kernel table of one process: its kernel_trace rows with counters joined, or its counter dispatches."""
    files, paths = raw.info["files"], raw.info.get("paths", {})
    traces = [map_dispatches(amd_common.raw_frame(raw, t), Path(files[t]), out) for t in group["kernel_trace"]]
    counters = [
        (t, *pivot_counters(amd_common.raw_frame(raw, t), Path(files[t]), out)) for t in group["counter_collection"]
    ]
    if not traces:
        return pd.concat([c[1] for c in counters], ignore_index=True) if counters else None
    kernels = pd.concat(traces, ignore_index=True)
    trace_file = paths.get(group["kernel_trace"][0], files[group["kernel_trace"][0]])
    for number, (table, frame, cols) in enumerate(counters, 1):
        source = paths.get(table, files[table])
        kernels = join_counters(kernels, frame, cols, source, out, trace_file=trace_file, number=number)
    return kernels


def normalize(raw: RawTrace) -> ReaderOutput:
    """Kernels (counters pivoted and joined per process) and memory copies with canonical names."""
    out = raw.start_output(None)
    kernel_frames, copy_frames = [], []
    for group in raw.info["groups"]:
        k = _process_kernels(raw, group, out)
        if k is not None:
            kernel_frames.append(k)
        for t in group["memory_copy_trace"]:
            copy_frames.append(memcpy_frame(amd_common.raw_frame(raw, t), Path(raw.info["files"][t])))
    if kernel_frames:
        kernels = pd.concat(kernel_frames, ignore_index=True)
    else:  # a memory_copy_trace alone: an empty kernel table
        kernels = pd.DataFrame({"kernel_name": pd.Series([], dtype=object)})
    source = Path(raw.source).name
    kernels = amd_common.check_timestamps(kernels, out, source) if len(kernels) else kernels
    out.kernels = amd_common.drop_nameless(kernels, out)
    if copy_frames:
        memcpy = amd_common.drop_bad_timestamps(pd.concat(copy_frames, ignore_index=True), out, "memcpy")[0]
        memcpy["launch_id"] = np.arange(len(memcpy), dtype=np.int64)
        out.memcpy = memcpy
    return out


def read(path: Path) -> ReaderOutput:
    """Kernels (with joined counters) and memory copies of a rocprofv3 folder or file."""
    return normalize(read_raw(path))
