"""rocpd SQLite databases: rocprofv3 `--output-format rocpd` (the ROCm 7 default) and rocprof-sys rocpd output.

Tables are named `rocpd_<what>_<uuid>` per process; the unsuffixed views of the same name (a UNION of every
process in a merged database) are what is read, and rows are matched on (id, guid) so merged processes never
mix. Each dispatch is rebuilt as the row rocprofv3 writes in kernel_trace.csv (the rocpd tools' own CSV
export does the same), then mapped by the rocprofv3 CSV reader's own functions, so both give the same
canonical columns:
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
A dispatch whose kernel_id has no symbol keeps its row, named '<unknown kernel_id N>' (counted in the notes).
A database with no dispatch is an error: rocprofv3 writes an empty table when only APIs were traced.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from gpuvar.errors import InputError
from gpuvar.ingest import amd_common, rocprofv3
from gpuvar.ingest.base import ReaderOutput, connect_sqlite_readonly

FORMAT = "rocpd-sqlite"
SQLITE_MAGIC = b"SQLite format 3\x00"
DISPATCH = "rocpd_kernel_dispatch"
# relations of the rocprofiler-sdk rocpd schema (the older rocTracer RPD format has rocpd_op / rocpd_api instead)
MARKERS = (DISPATCH, "rocpd_info_kernel_symbol", "rocpd_info_agent", "rocpd_memory_copy", "rocpd_region",
           "rocpd_event", "rocpd_info_queue", "rocpd_info_stream")
REQUIRED = ("kernel_id", "start", "end")
DISPATCH_COLUMNS = {  # rocpd_kernel_dispatch column -> rocprofv3 kernel_trace.csv column
    "dispatch_id": "Dispatch_Id", "kernel_id": "Kernel_Id", "queue_id": "Queue_Id", "stream_id": "Stream_Id",
    "start": "Start_Timestamp", "end": "End_Timestamp", "private_segment_size": "Private_Segment_Size",
    "group_segment_size": "Group_Segment_Size", "workgroup_size_x": "Workgroup_Size_X",
    "workgroup_size_y": "Workgroup_Size_Y", "workgroup_size_z": "Workgroup_Size_Z", "grid_size_x": "Grid_Size_X",
    "grid_size_y": "Grid_Size_Y", "grid_size_z": "Grid_Size_Z",
}
SYMBOL_COLUMNS = {"arch_vgpr_count": "Arch_VGPR_Count", "accum_vgpr_count": "Accum_VGPR_Count",
                  "sgpr_count": "SGPR_Count"}
COPY_COLUMNS = {"stream_id": "Stream_Id", "queue_id": "Queue_Id", "start": "Start_Timestamp",
                "end": "End_Timestamp", "size": "Bytes"}


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


# ------------------------------------------------------------------------------------------------- queries
def _join(alias: str, relation: str, key: str, catalog: dict, base: str, base_cols: list[str]) -> str:
    """LEFT JOIN of an info relation on its id (and guid, when both sides have one); '' if it is absent."""
    cols = catalog.get(relation)
    if not cols or "id" not in cols or key not in base_cols:
        return ""
    guid = f' AND {alias}.guid = {base}.guid' if "guid" in cols and "guid" in base_cols else ""
    return f' LEFT JOIN "{relation}" {alias} ON {alias}.id = {base}."{key}"{guid}'


def _order(alias: str, cols: list[str]) -> str:
    """Source order (process, then row id): the join plan must not decide the row order."""
    keys = [f'{alias}."{c}"' for c in ("guid", "id") if c in cols]
    return f" ORDER BY {', '.join(keys)}" if keys else ""


def _select(con: sqlite3.Connection, sql: str) -> pd.DataFrame:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return pd.DataFrame.from_records(cur.fetchall(), columns=names)


def _has(catalog: dict, relation: str, column: str) -> bool:
    return column in catalog.get(relation, [])


def _common_parts(catalog: dict, base: str, table: str, cols: list[str]) -> tuple[list[str], str]:
    """Process, thread and correlation columns shared by dispatches and copies: (select items, joins)."""
    items, joins = [], ""
    for alias, relation, key, column, name in (("P", "rocpd_info_process", "pid", "pid", "Process_Id"),
                                               ("T", "rocpd_info_thread", "tid", "tid", "Thread_Id"),
                                               ("E", "rocpd_event", "event_id", "stack_id", "Correlation_Id")):
        join = _join(alias, relation, key, catalog, base, cols)
        if join and _has(catalog, relation, column):
            joins += join
            items.append(f'{alias}."{column}" AS {name}')
    return items, joins


def _dispatches(con: sqlite3.Connection, catalog: dict, path: Path) -> pd.DataFrame:
    """Every dispatch row as a rocprofv3 kernel_trace row (plus _symbol_found, _agent_key)."""
    cols = catalog[DISPATCH]
    missing = [c for c in REQUIRED if c not in cols]
    if missing:
        raise InputError(path, f"{DISPATCH} lacks required column(s) {', '.join(missing)}")
    items = [f'K."{c}" AS {name}' for c, name in DISPATCH_COLUMNS.items() if c in cols]
    sym = _join("S", "rocpd_info_kernel_symbol", "kernel_id", catalog, "K", cols)
    if sym:
        s_cols = catalog["rocpd_info_kernel_symbol"]
        names = [f'NULLIF(S."{c}", \'\')' for c in ("display_name", "kernel_name") if c in s_cols]
        items.append(f"COALESCE({', '.join(names)}) AS Kernel_Name" if names else "NULL AS Kernel_Name")
        items += [f'S."{c}" AS {name}' for c, name in SYMBOL_COLUMNS.items() if c in s_cols]
        items.append("S.id IS NOT NULL AS _symbol_found")
    agent = _join("A", "rocpd_info_agent", "agent_id", catalog, "K", cols)
    if agent and _has(catalog, "rocpd_info_agent", "absolute_index"):
        items += ["A.absolute_index AS Agent_Id", "A.id AS _agent_id"]
        if "guid" in catalog["rocpd_info_agent"]:
            items.append("A.guid AS _agent_guid")
    common, joins = _common_parts(catalog, "K", DISPATCH, cols)
    sql = f'SELECT {", ".join(items + common)} FROM "{DISPATCH}" K{sym}{agent}{joins}{_order("K", cols)}'
    return _select(con, sql)


def _copies(con: sqlite3.Connection, catalog: dict) -> pd.DataFrame:
    """Every memory copy as a rocprofv3 memory_copy_trace row, with Bytes."""
    cols = catalog["rocpd_memory_copy"]
    items = [f'M."{c}" AS {name}' for c, name in COPY_COLUMNS.items() if c in cols]
    joins = ""
    string = _join("N", "rocpd_string", "name_id", catalog, "M", cols)
    if string and _has(catalog, "rocpd_string", "string"):
        joins += string
        items.append("N.string AS Direction")
    else:
        items.append("NULL AS Direction")
    for alias, key, name in (("SA", "src_agent_id", "Source_Agent_Id"), ("DA", "dst_agent_id", "Destination_Agent_Id")):
        join = _join(alias, "rocpd_info_agent", key, catalog, "M", cols)
        if join and _has(catalog, "rocpd_info_agent", "absolute_index"):
            joins += join
            items.append(f"{alias}.absolute_index AS {name}")
            if _has(catalog, "rocpd_info_agent", "type"):
                items.append(f"{alias}.type AS _{name}_type")
    common, more = _common_parts(catalog, "M", "rocpd_memory_copy", cols)
    return _select(con, f'SELECT {", ".join(items + common)} FROM "rocpd_memory_copy" M{joins}{more}'
                        f'{_order("M", cols)}')


def _wave_sizes(con: sqlite3.Connection, catalog: dict) -> dict[tuple, int]:
    """(agent id, guid) -> wave_front_size from the agent's HSA properties JSON, where recorded."""
    cols = catalog.get("rocpd_info_agent", [])
    if "extdata" not in cols or "id" not in cols:
        return {}
    guid = "guid" if "guid" in cols else "NULL"
    sizes = {}
    for agent_id, agent_guid, extdata in con.execute(f'SELECT id, {guid}, extdata FROM "rocpd_info_agent"'):
        try:
            value = json.loads(extdata).get("wave_front_size") if isinstance(extdata, str) else None
        except (ValueError, AttributeError):
            value = None
        if isinstance(value, int) and value > 0:
            sizes[(agent_id, agent_guid)] = value
    return sizes


def _metadata_note(con: sqlite3.Connection, catalog: dict) -> str | None:
    if not {"tag", "value"} <= set(catalog.get("rocpd_metadata", [])):
        return None
    versions = [r[0] for r in con.execute('SELECT value FROM "rocpd_metadata" WHERE tag = \'schema_version\'')]
    return f"rocpd schema_version {', '.join(map(str, dict.fromkeys(versions)))}" if versions else None


def _count(con: sqlite3.Connection, relation: str, catalog: dict) -> int:
    return con.execute(f'SELECT COUNT(*) FROM "{relation}"').fetchone()[0] if relation in catalog else 0


# ------------------------------------------------------------------------------------------------- mapping
def _kernel_frame(raw: pd.DataFrame, waves: dict, path: Path, out: ReaderOutput) -> pd.DataFrame:
    """rocprofv3 kernel_trace rows -> canonical kernels, through the rocprofv3 reader's mapping."""
    found = raw["_symbol_found"].fillna(0).astype(bool) if "_symbol_found" in raw.columns else False
    if "Kernel_Name" not in raw.columns:
        raw["Kernel_Name"] = None
    unknown = (~pd.Series(found, index=raw.index, dtype=bool) & raw["Kernel_Id"].notna()).to_numpy()
    if unknown.any():
        raw["Kernel_Name"] = raw["Kernel_Name"].astype(object)
        raw.loc[unknown, "Kernel_Name"] = [f"<unknown kernel_id {k}>" for k in raw.loc[unknown, "Kernel_Id"]]
        out.notes.append(f"{int(unknown.sum())} dispatch(es) name a kernel_id missing from "
                         "rocpd_info_kernel_symbol (kept, named '<unknown kernel_id N>')")
    if "_agent_id" in raw.columns and waves:
        guids = raw["_agent_guid"] if "_agent_guid" in raw.columns else pd.Series(None, index=raw.index)
        raw["Wave_Size"] = [waves.get((a, g)) for a, g in zip(raw["_agent_id"], guids)]
    raw = raw.drop(columns=[c for c in raw.columns if c.startswith("_")])
    raw.insert(0, "Kind", "KERNEL_DISPATCH")
    kernels = rocprofv3.map_dispatches(raw, path, out)
    return kernels


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
        out.notes.append(f"{neither} memory cop(ies) name no GPU agent at either end (a writer quirk): device_id "
                         "is taken by direction (source agent for DtoH, else destination) as rocprofv3's CSV")


def _copy_frame(raw: pd.DataFrame, path: Path, out: ReaderOutput) -> pd.DataFrame:
    raw.insert(0, "Kind", "MEMORY_COPY")
    unnamed = int(raw["Direction"].isna().sum())
    if unnamed:
        out.notes.append(f"{unnamed} memory cop(ies) whose name_id is missing from rocpd_string: copy kind null")
    memcpy = rocprofv3.memcpy_frame(raw.drop(columns=[c for c in raw.columns if c.startswith("_")]), path)
    _gpu_end(raw, memcpy, out)
    memcpy["launch_id"] = np.arange(len(memcpy), dtype=np.int64)
    return memcpy


def _read(path: Path, con: sqlite3.Connection) -> ReaderOutput:
    catalog = _relations(con)
    if not _is_rocpd(catalog):
        raise InputError(path, "SQLite database is not a rocpd database (no rocpd_kernel_dispatch, "
                               "rocpd_info_* or rocpd_memory_copy table or view)")
    if DISPATCH not in catalog:
        raise InputError(path, f"rocpd database has no {DISPATCH} table or view (damaged, or not rocprofv3 output)")
    out = ReaderOutput(format=FORMAT, kernels=None)
    n = _count(con, DISPATCH, catalog)
    if n == 0:
        apis, copies = _count(con, "rocpd_region", catalog), _count(con, "rocpd_memory_copy", catalog)
        what = f"{apis} traced API call(s)" + (f" and {copies} memory cop(ies)" if copies else "")
        raise InputError(path, f"rocpd database has no kernel dispatches ({DISPATCH} is empty; {what} only? "
                               "profile with rocprofv3 --kernel-trace)")
    note = _metadata_note(con, catalog)
    if note:
        out.notes.append(note)
    raw = _dispatches(con, catalog, path)
    out.rows_read["kernels"] = len(raw)
    if len(raw) != n:
        raise InputError(path, f"{DISPATCH} has {n} rows but joining its info tables gave {len(raw)} "
                               "(repeated ids in a rocpd_info table: damaged database)")
    kernels = _kernel_frame(raw, _wave_sizes(con, catalog), path, out)
    kernels = amd_common.check_timestamps(kernels, out, path.name)
    out.kernels = amd_common.drop_nameless(kernels, out)
    if "rocpd_memory_copy" in catalog:
        copies = _copies(con, catalog)
        out.rows_read["memcpy"] = len(copies)
        if len(copies):
            out.memcpy = _copy_frame(copies, path, out)
        else:
            out.notes.append("rocpd_memory_copy is empty: no memory copies were traced")
    return out


def read(path: Path) -> ReaderOutput:
    """Kernel dispatches (symbol names, registers, agents) and memory copies of a rocpd database."""
    path = Path(path)
    try:
        con = connect_sqlite_readonly(path)
        try:
            return _read(path, con)
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
