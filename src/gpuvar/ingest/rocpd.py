"""rocpd SQLite databases: rocprofv3 `--output-format rocpd` (the ROCm 7 default) and rocprof-sys rocpd output.

Tables are named `rocpd_<what>_<uuid>` per process; the unsuffixed views of the same name (a UNION of every
process in a merged database) are what is read, and rows are matched on (id, guid) where the database
holds several processes, so merged processes never mix. Each dispatch is rebuilt as the row rocprofv3 writes
in kernel_trace.csv (the rocpd tools' own CSV export does the same), then mapped by the rocprofv3 CSV
reader's own functions, so both give the same canonical columns:
  * rocpd_kernel_dispatch: Dispatch_Id, Kernel_Id, Queue_Id, Stream_Id, Start/End_Timestamp (ns),
    Private_Segment_Size (scratch), Group_Segment_Size (LDS), Workgroup_Size_X/Y/Z, Grid_Size_X/Y/Z in
    work-items (grid_x = ceil(Grid_Size_X / Workgroup_Size_X), as every AMD reader).
  * kernel name: rocpd_info_kernel_symbol.display_name, else its mangled kernel_name (' [clone .kd]' / '.kd'
    removed as for the CSVs); registers from the symbol: Arch_VGPR_Count, Accum_VGPR_Count, SGPR_Count.
  * Agent_Id = rocpd_info_agent.absolute_index (rocprofv3's default `--agent-index absolute`); Wave_Size from
    the agent's HSA properties (extdata wave_front_size) where the writer recorded them (rocprofv3 does,
    rocprof-sys leaves '{}': null); Process_Id / Thread_Id from rocpd_info_process / _thread;
    Correlation_Id = rocpd_event.stack_id (the internal correlation id the rocpd CSV export writes).
  * rocpd_memory_copy: Direction = rocpd_string of name_id (MEMORY_COPY_HOST_TO_DEVICE, ...) -> copy_kind
    codes as rocprofv3; Bytes = size; Source/Destination_Agent_Id as Agent_Id.
  * ingest.json `devices` (the GPU agents) and `host` (rocpd_info_node machine_id, else hostname), for
    gpuvar.ingest.gpu_identity.
A dispatch whose kernel_id has no symbol keeps its row, named '<unknown kernel_id N>' (counted in the notes).
A database with no dispatch is an error: rocprofv3 writes an empty table when only APIs were traced.
Two steps (gpuvar.ingest.raw): read_raw fetches each relation used, with its own column names and rows as
stored (raw tables named after the relations: rocpd_kernel_dispatch, rocpd_memory_copy, rocpd_event (id, guid,
stack_id), rocpd_info_kernel_symbol / _agent / _process / _thread and rocpd_string (id, guid and the columns
used)); normalize does the joins above (in pandas, on id) and the mapping. raw.info["by_guid"]: the database
holds several processes: the dispatch, copy and event guid is then read too, and rows are matched on (id, guid).
Speed: the dispatch, copy and event relations are fetched with connectorx as Arrow, the small info relations
with sqlite3; rows keep the relation's order. sqlite3 is the fallback where connectorx cannot read a file (a
column mixing types there is kept as text). About 2.5 s for a million dispatches on 2 cores.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from gpuvar.errors import InputError
from gpuvar.ingest import amd_common, rocprofv3
from gpuvar.ingest.base import ReaderOutput, connect_sqlite_readonly, select_arrow
from gpuvar.ingest.raw import RawTrace, ReadOptions

FORMAT = "rocpd-sqlite"
log = logging.getLogger(__name__)
SQLITE_MAGIC = b"SQLite format 3\x00"
DISPATCH = "rocpd_kernel_dispatch"
# relations of the rocprofiler-sdk rocpd schema (the older rocTracer RPD format has rocpd_op / rocpd_api instead)
MARKERS = (
    DISPATCH,
    "rocpd_info_kernel_symbol",
    "rocpd_info_agent",
    "rocpd_memory_copy",
    "rocpd_region",
    "rocpd_event",
    "rocpd_info_queue",
    "rocpd_info_stream",
)
REQUIRED = ("kernel_id", "start", "end")
DISPATCH_COLUMNS = {  # rocpd_kernel_dispatch column -> rocprofv3 kernel_trace.csv column
    "dispatch_id": "Dispatch_Id",
    "kernel_id": "Kernel_Id",
    "queue_id": "Queue_Id",
    "stream_id": "Stream_Id",
    "start": "Start_Timestamp",
    "end": "End_Timestamp",
    "private_segment_size": "Private_Segment_Size",
    "group_segment_size": "Group_Segment_Size",
    "workgroup_size_x": "Workgroup_Size_X",
    "workgroup_size_y": "Workgroup_Size_Y",
    "workgroup_size_z": "Workgroup_Size_Z",
    "grid_size_x": "Grid_Size_X",
    "grid_size_y": "Grid_Size_Y",
    "grid_size_z": "Grid_Size_Z",
}
SYMBOL_COLUMNS = {
    "arch_vgpr_count": "Arch_VGPR_Count",
    "accum_vgpr_count": "Accum_VGPR_Count",
    "sgpr_count": "SGPR_Count",
}
COPY_COLUMNS = {
    "stream_id": "Stream_Id",
    "queue_id": "Queue_Id",
    "start": "Start_Timestamp",
    "end": "End_Timestamp",
    "size": "Bytes",
}
COPY, EVENT = "rocpd_memory_copy", "rocpd_event"
DEFAULT_OPTIONS = ReadOptions()  # (no read option applies to rocpd)
_KEYS = ("agent_id", "pid", "tid", "event_id")  # dispatch / copy columns that point into another relation
# raw tables: the columns read of each relation (those it has), with the relation's own names
DISPATCH_READ = [*DISPATCH_COLUMNS, *_KEYS]  # (these three + guid in a merged database)
COPY_READ = [*COPY_COLUMNS, "name_id", "src_agent_id", "dst_agent_id", *_KEYS]
EVENT_READ = ["id", "stack_id"]
LOOKUPS = {  # small info relations: read whole (these columns), looked up in pandas by id (and guid)
    "rocpd_info_kernel_symbol": ["id", "guid", "display_name", "kernel_name", *SYMBOL_COLUMNS],
    "rocpd_info_agent": ["id", "guid", "absolute_index", "type", "extdata", "product_name"],
    "rocpd_info_node": ["id", "guid", "machine_id", "hostname"],
    "rocpd_info_process": ["id", "guid", "pid"],
    "rocpd_info_thread": ["id", "guid", "tid"],
    "rocpd_string": ["id", "guid", "string"],
}


# ------------------------------------------------------------------------------------------------- catalog
def _relations(con: sqlite3.Connection) -> dict[str, list[str]]:
    """Tables and views -> their column names (a view whose table is gone has no readable columns: [])."""
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
    out = {}
    for name in names:
        quoted = '"' + name.replace('"', '""') + '"'
        try:
            out[name] = [r[1] for r in con.execute(f"PRAGMA table_info({quoted})")]
        except sqlite3.OperationalError:
            out[name] = []
    return out


def _is_rocpd(names) -> bool:
    return any(n == m or n.startswith(m + "_") for n in names for m in MARKERS)


def sniff(path: Path, head: bytes) -> bool:
    """SQLite magic and rocprofiler-sdk rocpd tables or views (rocprof v1 results.db has KERN; nsys CUPTI_*)."""
    if not head.startswith(SQLITE_MAGIC) or Path(path).is_dir():
        return False
    try:
        con = connect_sqlite_readonly(path)
        try:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        finally:
            con.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError):  # unreadable schema: the nsys sniffer reports it
        return False
    return _is_rocpd(names)


# ------------------------------------------------------------------------------------------------- read
def _arrow(frame: pd.DataFrame) -> pa.Table:
    """sqlite3 rows as Arrow; a column mixing types (text in an integer column of a damaged file) becomes text,
    which the mapping parses as the CSV readers do."""
    columns = {}
    for name in frame.columns:
        try:
            columns[name] = pa.array(frame[name], from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            columns[name] = pa.array([None if v is None else str(v) for v in frame[name]], type=pa.string())
    return pa.table(columns) if columns else pa.table({})


def _select(path: Path, con: sqlite3.Connection, sql: str) -> pa.Table:
    """Query result as Arrow: connectorx where it reads the file, sqlite3 otherwise (damaged files, values of
    another type than the column declares)."""
    try:
        return select_arrow(path, sql)
    except BaseException as exc:  # noqa: BLE001 - any connectorx failure falls back to the reference reader
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise  # (a Rust panic on a damaged file is a BaseException too: pyo3's PanicException)
        log.debug("%s: connectorx could not run the query (%s); using sqlite3", path, exc)
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return _arrow(pd.DataFrame.from_records(cur.fetchall(), columns=names))


def _has(catalog: dict, relation: str, column: str) -> bool:
    return column in catalog.get(relation, [])


def _columns_sql(relation: str, columns: list[str], catalog: dict) -> str:
    present = [c for c in columns if _has(catalog, relation, c)]
    return f'SELECT {", ".join(chr(34) + c + chr(34) for c in present)} FROM "{relation}"'


def _small(con: sqlite3.Connection, catalog: dict, relation: str) -> pa.Table | None:
    """An info relation's id (and guid) plus the columns normalize uses; None if it is absent or has no id."""
    if not _has(catalog, relation, "id"):
        return None
    cur = con.execute(_columns_sql(relation, LOOKUPS[relation], catalog))
    return _arrow(pd.DataFrame.from_records(cur.fetchall(), columns=[d[0] for d in cur.description]))


def _guid_count(con: sqlite3.Connection, catalog: dict) -> int | None:
    """Processes in the database (a merged database holds several, told apart by guid); None if unknown."""
    if not _has(catalog, "rocpd_info_process", "guid"):
        return None
    return con.execute('SELECT COUNT(DISTINCT guid) FROM "rocpd_info_process"').fetchone()[0]


def _metadata_note(con: sqlite3.Connection, catalog: dict) -> str | None:
    if not {"tag", "value"} <= set(catalog.get("rocpd_metadata", [])):
        return None
    versions = [r[0] for r in con.execute("SELECT value FROM \"rocpd_metadata\" WHERE tag = 'schema_version'")]
    return f"rocpd schema_version {', '.join(map(str, dict.fromkeys(versions)))}" if versions else None


def _count(con: sqlite3.Connection, relation: str, catalog: dict) -> int:
    return con.execute(f'SELECT COUNT(*) FROM "{relation}"').fetchone()[0] if relation in catalog else 0


def _read_raw(path: Path, con: sqlite3.Connection) -> RawTrace:
    catalog = _relations(con)
    if not _is_rocpd(catalog):
        raise InputError(
            path,
            "SQLite database is not a rocpd database (no rocpd_kernel_dispatch, "
            "rocpd_info_* or rocpd_memory_copy table or view)",
        )
    if DISPATCH not in catalog:
        raise InputError(path, f"rocpd database has no {DISPATCH} table or view (damaged, or not rocprofv3 output)")
    n = _count(con, DISPATCH, catalog)
    if n == 0:
        apis, copies = _count(con, "rocpd_region", catalog), _count(con, COPY, catalog)
        what = f"{apis} traced API call(s)" + (f" and {copies} memory cop(ies)" if copies else "")
        raise InputError(
            path,
            f"rocpd database has no kernel dispatches ({DISPATCH} is empty; {what} only? "
            "profile with rocprofv3 --kernel-trace)",
        )
    missing = [c for c in REQUIRED if not _has(catalog, DISPATCH, c)]
    if missing:
        raise InputError(path, f"{DISPATCH} lacks required column(s) {', '.join(missing)}")
    raw = RawTrace(FORMAT, str(path), {})
    note = _metadata_note(con, catalog)
    if note:
        raw.notes.append(note)
    # a merged database holds several processes: rows are then matched on (id, guid)
    raw.info["by_guid"] = _has(catalog, DISPATCH, "guid") and _guid_count(con, catalog) != 1
    guid = ["guid"] if raw.info["by_guid"] else []
    # rows come in the relation's scan order (its rowid order), no ORDER BY needed
    raw.tables[DISPATCH] = dispatches = _select(path, con, _columns_sql(DISPATCH, DISPATCH_READ + guid, catalog))
    raw.rows_read["kernels"] = dispatches.num_rows
    if dispatches.num_rows != n:
        raise InputError(path, f"{DISPATCH} has {n} rows but reading it gave {dispatches.num_rows} (damaged database)")
    if COPY in catalog:
        raw.tables[COPY] = _select(path, con, _columns_sql(COPY, COPY_READ + guid, catalog))
        raw.rows_read["memcpy"] = raw.tables[COPY].num_rows
    if {"id", "stack_id"} <= set(catalog.get(EVENT, [])):  # as big as the dispatch table: fetched as Arrow
        raw.tables[EVENT] = _select(path, con, _columns_sql(EVENT, EVENT_READ + guid, catalog))
    for relation in LOOKUPS:
        table = _small(con, catalog, relation)
        if table is not None:
            raw.tables[relation] = table
    return raw


def read_raw(path: Path, options: ReadOptions = DEFAULT_OPTIONS) -> RawTrace:
    """The rocpd relations the mapping uses, with their own column names (see the module docstring)."""
    path = Path(path)
    try:
        con = connect_sqlite_readonly(path)
        try:
            return _read_raw(path, con)
        finally:
            con.close()
    except sqlite3.OperationalError as exc:
        detail = " ".join(str(exc).split())
        if "no such table" in detail or "no such column" in detail:
            raise InputError(path, f"damaged rocpd database: a view refers to a missing table ({detail})") from None
        raise InputError(path, f"cannot read rocpd database ({detail})") from None
    except sqlite3.DatabaseError as exc:
        raise InputError(path, f"not a readable SQLite database ({' '.join(str(exc).split())})") from None
    except UnicodeDecodeError:
        raise InputError(path, "not a readable SQLite database (invalid UTF-8 in the schema)") from None


# ------------------------------------------------------------------------------------------------- joins
def _positions(left: list[pd.Series], right: list[pd.Series]) -> np.ndarray:
    """Row of `right` matching each row of `left` on all key columns (first match; -1 where none)."""

    def index(keys):
        ids = pd.to_numeric(keys[0], errors="coerce").astype("float64")
        if len(keys) == 1:
            return pd.Index(ids)
        return pd.MultiIndex.from_arrays([ids, keys[1].astype(object).where(keys[1].notna(), None)])

    table, keys = index(right), index(left)
    if table.is_unique:  # (ids are: a repeated one is a damaged database)
        found = table.get_indexer(keys)
        found[pd.isna(pd.to_numeric(left[0], errors="coerce")).to_numpy()] = -1
        return found
    first = np.flatnonzero(~table.duplicated())
    found = table[first].get_indexer(keys) if len(first) else np.full(len(keys), -1)
    found[pd.isna(pd.to_numeric(left[0], errors="coerce")).to_numpy()] = -1  # a NULL id matches nothing
    return np.where(found >= 0, first[np.maximum(found, 0)] if len(first) else -1, -1)


def _attach(raw: pd.DataFrame, small: pd.DataFrame | None, key: str, names: dict[str, str], by_guid: bool) -> None:
    """Columns of a small info table onto the rows whose `key` is its id (and guid), renamed by `names`;
    null where no row matches. Looked up in pandas: joining in SQLite cost seconds per million dispatches."""
    if small is None or key not in raw.columns:
        return
    by_guid = by_guid and "guid" in small.columns and "_guid" in raw.columns
    pos = _positions(
        [raw[key], raw["_guid"]] if by_guid else [raw[key]], [small["id"], small["guid"]] if by_guid else [small["id"]]
    )
    hit = pos >= 0
    for source, target in names.items():
        if source in small.columns:  # the table's dtype is kept (numbers stay numeric: no per-row parsing later)
            column = (
                small[source].iloc[np.maximum(pos, 0)].reset_index(drop=True)
                if len(small)
                else pd.Series(np.nan, index=range(len(raw)))
            )
            raw[target] = column.where(pd.Series(hit)).to_numpy() if not hit.all() else column.to_numpy()


def _frame(raw: RawTrace, relation: str) -> pd.DataFrame | None:
    table = raw.tables.get(relation)
    return None if table is None else table.to_pandas()


def _symbols(raw: RawTrace) -> pd.DataFrame | None:
    """Kernel symbols with their kernel name: display_name where not empty, else the mangled kernel_name."""
    symbols = _frame(raw, "rocpd_info_kernel_symbol")
    if symbols is None:
        return None
    name = pd.Series(None, index=symbols.index, dtype=object)
    for source in ("kernel_name", "display_name"):  # the display name wins where it is not empty
        if source in symbols.columns:
            text = symbols[source].where(symbols[source].astype(str).str.strip() != "")
            name = text.where(text.notna(), name)
    symbols["name"] = name
    return symbols


def _agents(raw: RawTrace) -> pd.DataFrame | None:
    """Agents with their wave size, from the HSA properties JSON (extdata) where the writer recorded them."""
    agents = _frame(raw, "rocpd_info_agent")
    if agents is not None and "extdata" in agents.columns:
        agents["wave_size"] = [_wave_size(e) for e in agents["extdata"]]
    return agents


def _wave_size(extdata) -> int | None:
    try:
        value = json.loads(extdata).get("wave_front_size") if isinstance(extdata, str) else None
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _stack_ids(raw: RawTrace) -> pd.DataFrame | None:
    events = _frame(raw, EVENT)
    return events if events is not None and "stack_id" in events.columns else None


def _dispatches(raw: RawTrace) -> pd.DataFrame:
    """Every dispatch, in source order, as a rocprofv3 kernel_trace row (plus _symbol_id)."""
    by_guid = bool(raw.info.get("by_guid"))
    frame = (
        raw.tables[DISPATCH].to_pandas().rename(columns={**DISPATCH_COLUMNS, **{c: f"_{c}" for c in (*_KEYS, "guid")}})
    )
    _attach(frame, _stack_ids(raw), "_event_id", {"stack_id": "Correlation_Id"}, by_guid)
    _attach(frame, _symbols(raw), "Kernel_Id", {"name": "Kernel_Name", "id": "_symbol_id", **SYMBOL_COLUMNS}, by_guid)
    _attach(frame, _agents(raw), "_agent_id", {"absolute_index": "Agent_Id", "wave_size": "Wave_Size"}, by_guid)
    _attach(frame, _frame(raw, "rocpd_info_process"), "_pid", {"pid": "Process_Id"}, by_guid)
    _attach(frame, _frame(raw, "rocpd_info_thread"), "_tid", {"tid": "Thread_Id"}, by_guid)
    return frame


def _copies(raw: RawTrace) -> pd.DataFrame:
    """Every memory copy as a rocprofv3 memory_copy_trace row, with Bytes."""
    by_guid = bool(raw.info.get("by_guid"))
    source = raw.tables[COPY].to_pandas()
    frame = source[[c for c in COPY_COLUMNS if c in source.columns]].rename(columns=COPY_COLUMNS)
    for key in ("name_id", "src_agent_id", "dst_agent_id", *_KEYS, "guid"):
        if key in source.columns:
            frame[f"_{key}"] = source[key]
    strings = _frame(raw, "rocpd_string")
    _attach(frame, strings, "_name_id", {"string": "Direction"}, by_guid)
    agents = _frame(raw, "rocpd_info_agent")
    for key, name in (("_src_agent_id", "Source_Agent_Id"), ("_dst_agent_id", "Destination_Agent_Id")):
        if agents is not None and "absolute_index" in agents.columns:
            _attach(frame, agents, key, {"absolute_index": name, "type": f"_{name}_type"}, by_guid)
    _attach(frame, _frame(raw, "rocpd_info_process"), "_pid", {"pid": "Process_Id"}, by_guid)
    _attach(frame, _frame(raw, "rocpd_info_thread"), "_tid", {"tid": "Thread_Id"}, by_guid)
    _attach(frame, _stack_ids(raw), "_event_id", {"stack_id": "Correlation_Id"}, by_guid)
    if "Direction" not in frame.columns:
        frame["Direction"] = None
    return frame


# ------------------------------------------------------------------------------------------------- mapping
def _kernel_frame(raw: pd.DataFrame, path: Path, out: ReaderOutput) -> pd.DataFrame:
    """rocprofv3 kernel_trace rows -> canonical kernels, through the rocprofv3 reader's mapping."""
    if "Kernel_Name" not in raw.columns:
        raw["Kernel_Name"] = None
    found = raw["_symbol_id"].notna() if "_symbol_id" in raw.columns else pd.Series(False, index=raw.index)
    unknown = (~found & raw["Kernel_Id"].notna()).to_numpy()
    if unknown.any():
        raw["Kernel_Name"] = raw["Kernel_Name"].astype(object)
        raw.loc[unknown, "Kernel_Name"] = [f"<unknown kernel_id {k}>" for k in raw.loc[unknown, "Kernel_Id"]]
        out.notes.append(
            f"{int(unknown.sum())} dispatch(es) name a kernel_id missing from "
            "rocpd_info_kernel_symbol (kept, named '<unknown kernel_id N>')"
        )
    if "Wave_Size" in raw.columns and raw["Wave_Size"].isna().all():
        del raw["Wave_Size"]
    raw = raw.drop(columns=[c for c in raw.columns if c.startswith("_")])
    raw.insert(0, "Kind", "KERNEL_DISPATCH")
    return rocprofv3.map_dispatches(raw, path, out)


def _gpu_end(raw: pd.DataFrame, memcpy: pd.DataFrame, out: ReaderOutput) -> None:
    """device_id = the end of the copy that is a GPU agent (rocprofv3's rule picks by direction alone)."""
    types = {end: raw.get(f"_{end}_Agent_Id_type") for end in ("Source", "Destination")}
    if any(t is None for t in types.values()):
        return
    src_gpu, dst_gpu = (types[end].astype(str).str.upper().eq("GPU").to_numpy() for end in ("Source", "Destination"))
    dtoh = memcpy["copy_kind"].eq(2).fillna(False).to_numpy(dtype=bool)
    use_src = src_gpu & (dtoh | ~dst_gpu)
    use_dst = dst_gpu & ~use_src
    device = memcpy["device_id"].to_numpy(dtype=object, copy=True)
    device[use_src] = raw["Source_Agent_Id"].to_numpy(dtype=object)[use_src]
    device[use_dst] = raw["Destination_Agent_Id"].to_numpy(dtype=object)[use_dst]
    memcpy["device_id"] = device
    neither = int((~src_gpu & ~dst_gpu).sum())
    if neither:
        out.notes.append(
            f"{neither} memory cop(ies) name no GPU agent at either end (a writer quirk): device_id "
            "is taken by direction (source agent for DtoH, else destination) as rocprofv3's CSV"
        )


def _copy_frame(raw: pd.DataFrame, path: Path, out: ReaderOutput) -> pd.DataFrame:
    raw.insert(0, "Kind", "MEMORY_COPY")
    unnamed = int(raw["Direction"].isna().sum())
    if unnamed:
        out.notes.append(f"{unnamed} memory cop(ies) whose name_id is missing from rocpd_string: copy kind null")
    memcpy = rocprofv3.memcpy_frame(raw.drop(columns=[c for c in raw.columns if c.startswith("_")]), path)
    _gpu_end(raw, memcpy, out)
    memcpy = amd_common.drop_bad_timestamps(memcpy, out, "memcpy")[0]
    memcpy["launch_id"] = np.arange(len(memcpy), dtype=np.int64)
    return memcpy


def normalize(raw: RawTrace) -> ReaderOutput:
    """The rocpd relations joined into rocprofv3 kernel_trace / memory_copy_trace rows, then the rocprofv3
    reader's mapping (Table 1, grid in workgroups, copy kinds); documented drops counted."""
    path = Path(raw.source)
    out = raw.start_output(None)
    kernels = _kernel_frame(_dispatches(raw), path, out)
    kernels = amd_common.check_timestamps(kernels, out, path.name)
    out.kernels = amd_common.drop_nameless(kernels, out)
    if COPY in raw.tables:
        if raw.tables[COPY].num_rows:
            out.memcpy = _copy_frame(_copies(raw), path, out)
        else:
            out.notes.append(f"{COPY} is empty: no memory copies were traced")
    _identity(raw, out)
    return out


def _identity(raw: RawTrace, out: ReaderOutput) -> None:
    """The GPU agents (devices: absolute_index, product name) and the machine (host: rocpd_info_node machine_id,
    else hostname; only when the database holds one machine), for gpuvar.ingest.gpu_identity. absolute_index
    numbers the node's agents whatever the process could see, so (host, absolute_index) names a GPU.
    rocpd_info_agent.uuid is not used: the databases here hold a small number there (29790 for a W7800), not a
    documented GPU UUID."""
    agents = _frame(raw, "rocpd_info_agent")
    if agents is not None and {"absolute_index", "type"} <= set(agents.columns):
        gpus = agents[agents["type"].astype(str).str.upper().eq("GPU")]
        seen = set()
        for index, name in zip(gpus["absolute_index"], gpus.get("product_name", pd.Series([None] * len(gpus)))):
            index = pd.to_numeric(index, errors="coerce")
            if pd.notna(index) and int(index) not in seen:
                seen.add(int(index))
                out.devices.append({"id": int(index), "name": str(name) if isinstance(name, str) and name else "?"})
    nodes = _frame(raw, "rocpd_info_node")
    if nodes is not None and len(nodes):
        for column in ("machine_id", "hostname"):
            if column in nodes.columns:
                values = {str(v) for v in nodes[column] if isinstance(v, str) and v.strip()}
                if len(values) == 1:
                    out.host = values.pop()
                    out.notes.append(f"host: {out.host} (rocpd_info_node.{column})")
                    break


def read(path: Path) -> ReaderOutput:
    """Kernel dispatches (symbol names, registers, agents) and memory copies of a rocpd database."""
    return normalize(read_raw(path))
