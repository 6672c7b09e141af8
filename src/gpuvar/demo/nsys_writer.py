"""Write a synthetic trace as an Nsight Systems SQLite export (the tables `nsys export --type sqlite` makes).

The tables carry the real DDL of an nsys 2024.6.2 export (schema 3.16.1, §C of the real files' README
../shared/data/real/README.md, outside the repo):
CUPTI_ACTIVITY_KIND_KERNEL (28 columns), CUPTI_ACTIVITY_KIND_MEMCPY, StringIds, ENUM_CUDA_MEMCPY_OPER and
ENUM_CUDA_MEM_KIND (rows copied from the real exports) and META_DATA_EXPORT, so the nsys reader is
exercised exactly as on a real file. Kernel names are ids into StringIds; globalPid packs the process id
the way nsys does ((1 << 48) | pid << 24). Launches and copies come from `synth.generate`, so the planted
causal structure is the same as every other demo format (nsys has no hardware counters: the stall counter
is not written). The file is written with journalling off into a temporary name and renamed at the end.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from gpuvar.demo import synth
from gpuvar.output import replacing

PRODUCT_VERSION = "2024.6.2.25"
SCHEMA_VERSION = "3.16.1"
DEMO_PID = 4242
GLOBAL_PID_HW = 1 << 48  # the hardware/VM bits real exports carry above the pid

KERNEL_COLUMNS = (
    "start",
    "end",
    "deviceId",
    "contextId",
    "greenContextId",
    "streamId",
    "correlationId",
    "globalPid",
    "demangledName",
    "shortName",
    "mangledName",
    "launchType",
    "cacheConfig",
    "registersPerThread",
    "gridX",
    "gridY",
    "gridZ",
    "blockX",
    "blockY",
    "blockZ",
    "staticSharedMemory",
    "dynamicSharedMemory",
    "localMemoryPerThread",
    "localMemoryTotal",
    "gridId",
    "sharedMemoryExecuted",
    "graphNodeId",
    "sharedMemoryLimitConfig",
)
# columns declared NOT NULL in the real DDL (the others are nullable)
KERNEL_NOT_NULL = {
    "start",
    "end",
    "deviceId",
    "contextId",
    "streamId",
    "demangledName",
    "shortName",
    "registersPerThread",
    "gridX",
    "gridY",
    "gridZ",
    "blockX",
    "blockY",
    "blockZ",
    "staticSharedMemory",
    "dynamicSharedMemory",
    "localMemoryPerThread",
    "localMemoryTotal",
    "gridId",
}
MEMCPY_COLUMNS = (
    "start",
    "end",
    "deviceId",
    "contextId",
    "greenContextId",
    "streamId",
    "correlationId",
    "globalPid",
    "bytes",
    "copyKind",
    "deprecatedSrcId",
    "srcKind",
    "dstKind",
    "srcDeviceId",
    "srcContextId",
    "dstDeviceId",
    "dstContextId",
    "migrationCause",
    "graphNodeId",
    "virtualAddress",
)
MEMCPY_NOT_NULL = {"start", "end", "deviceId", "contextId", "streamId", "bytes", "copyKind"}

# ENUM_CUDA_MEMCPY_OPER rows as found in the real 2024.6 and 2026.x exports
MEMCPY_OPER = [
    (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"),
    (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
    (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
    (3, "CUDA_MEMCPY_KIND_HTOA", "Host-to-Array"),
    (4, "CUDA_MEMCPY_KIND_ATOH", "Array-to-Host"),
    (5, "CUDA_MEMCPY_KIND_ATOA", "Array-to-Array"),
    (6, "CUDA_MEMCPY_KIND_ATOD", "Array-to-Device"),
    (7, "CUDA_MEMCPY_KIND_DTOA", "Device-to-Array"),
    (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
    (9, "CUDA_MEMCPY_KIND_HTOH", "Host-to-Host"),
    (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"),
    (11, "CUDA_MEMCPY_KIND_UVM_HTOD", "Unified Host-to-Device"),
    (12, "CUDA_MEMCPY_KIND_UVM_DTOH", "Unified Device-to-Host"),
    (13, "CUDA_MEMCPY_KIND_UVM_DTOD", "Unified Device-to-Device"),
]
# ENUM_CUDA_MEM_KIND as found in the real 2026.2 export
MEM_KIND = [
    (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
    (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
    (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
    (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"),
    (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
    (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"),
    (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"),
    (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
]
# (srcKind, dstKind) per copy kind: pinned host <-> device
COPY_MEM_KINDS = {1: (1, 2), 2: (2, 1), 8: (2, 2), 9: (1, 1), 10: (2, 2)}


def _ddl(table: str, columns, not_null) -> str:
    cols = ",\n".join(f"    {c} INTEGER{' NOT NULL' if c in not_null else ''}" for c in columns)
    return f"CREATE TABLE {table} (\n{cols}\n)"


SCHEMA = [
    "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)",
    "CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)",
    "CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT)",
    _ddl("CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_COLUMNS, KERNEL_NOT_NULL),
    _ddl("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_COLUMNS, MEMCPY_NOT_NULL),
]


def mangled_name(short: str) -> str:
    """An Itanium-style mangled name for a demo kernel (only needs to look like one)."""
    return f"_Z{len(short)}{short}Pfi"


def string_table() -> tuple[list[tuple[int, str]], np.ndarray]:
    """StringIds rows and, per synth kernel, its (demangled, short, mangled) ids (ids start at 1 like nsys)."""
    demangled, short = synth.kernel_names()
    rows, ids = [], []
    for full, brief in zip(demangled, short):
        base = len(rows) + 1
        rows += [(base, full), (base + 1, brief), (base + 2, mangled_name(brief))]
        ids.append((base, base + 1, base + 2))
    return rows, np.array(ids, dtype=np.int64)


def _kernel_rows(k: dict[str, np.ndarray], name_ids: np.ndarray, global_pid: int):
    """Row tuples of one chunk of kernels, in KERNEL_COLUMNS order."""
    n = len(k["launch_id"])
    ids = name_ids[k["kernel_index"]]
    const = {
        "contextId": 1,
        "greenContextId": 0,
        "globalPid": global_pid,
        "launchType": 0,
        "cacheConfig": 0,
        "localMemoryPerThread": 0,
        "localMemoryTotal": 0,
        "sharedMemoryExecuted": 32768,
        "graphNodeId": None,
        "sharedMemoryLimitConfig": 0,
    }
    cols = {
        "start": k["start"],
        "end": k["end"],
        "deviceId": k["device_id"],
        "streamId": k["stream_id"],
        "correlationId": k["correlation_id"],
        "demangledName": ids[:, 0],
        "shortName": ids[:, 1],
        "mangledName": ids[:, 2],
        "registersPerThread": k["registers_per_thread"],
        "gridX": k["grid_x"],
        "gridY": k["grid_y"],
        "gridZ": k["grid_z"],
        "blockX": k["block_x"],
        "blockY": k["block_y"],
        "blockZ": k["block_z"],
        "staticSharedMemory": k["static_shared_memory"],
        "dynamicSharedMemory": k["dynamic_shared_memory"],
        "gridId": k["launch_id"] + 1,
    }
    return _zip_rows(KERNEL_COLUMNS, cols, const, n)


def _memcpy_rows(m: dict[str, np.ndarray], global_pid: int):
    """Row tuples of one chunk of copies, in MEMCPY_COLUMNS order."""
    n = len(m["start"])
    kinds = m["copy_kind"]
    table = np.array([COPY_MEM_KINDS.get(x, (7, 7)) for x in range(16)], dtype=np.int64)  # 7 = unknown
    src, dst = table[kinds, 0], table[kinds, 1]
    const = {
        "contextId": 1,
        "greenContextId": 0,
        "globalPid": global_pid,
        "deprecatedSrcId": None,
        "srcDeviceId": None,
        "srcContextId": None,
        "dstDeviceId": None,
        "dstContextId": None,
        "migrationCause": None,
        "graphNodeId": None,
        "virtualAddress": None,
    }
    cols = {
        "start": m["start"],
        "end": m["end"],
        "deviceId": m["device_id"],
        "streamId": m["stream_id"],
        "correlationId": m["correlation_id"],
        "bytes": m["bytes"],
        "copyKind": kinds,
        "srcKind": src,
        "dstKind": dst,
    }
    return _zip_rows(MEMCPY_COLUMNS, cols, const, n)


def _zip_rows(columns, cols: dict, const: dict, n: int):
    """Zip per-column Python lists into row tuples (executemany's fastest input); constants are repeated."""
    lists = []
    for c in columns:
        value = cols[c] if c in cols else const[c]
        if isinstance(value, np.ndarray):
            lists.append(value.tolist())
        else:
            lists.append([value] * n)
    return zip(*lists)


def write_nsys_demo(path, rows: int, seed: int, variant: int = 0, draw: int = 0, change=None) -> dict:
    """Write `rows` synthetic kernel launches (and their copies) as an nsys SQLite export; returns counts.
    draw/change: a second run of the same trace distribution, optionally with a planted change (synth.Change)."""
    path = Path(path)
    with replacing(path) as tmp:
        strings, name_ids = string_table()
        global_pid = GLOBAL_PID_HW | ((DEMO_PID + variant) << 24)
        kernel_rows = memcpy_rows = 0
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=OFF")
            con.execute("PRAGMA synchronous=OFF")
            con.execute("BEGIN")
            for ddl in SCHEMA:
                con.execute(ddl)
            con.executemany("INSERT INTO StringIds VALUES (?, ?)", strings)
            con.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", MEMCPY_OPER)
            con.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)", MEM_KIND)
            con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", _metadata(path, rows, seed, variant))
            k_sql = f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(KERNEL_COLUMNS))})"
            m_sql = f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES ({', '.join('?' * len(MEMCPY_COLUMNS))})"
            held = None  # copies that may start after the next chunk's first (_in_start_order)
            for chunk in synth.generate(rows, seed, variant, chunk_rows=250_000, draw=draw, change=change):
                con.executemany(k_sql, _kernel_rows(chunk.kernels, name_ids, global_pid))
                ready, held = _in_start_order(held, chunk.memcpy)
                con.executemany(m_sql, _memcpy_rows(ready, global_pid))
                kernel_rows += len(chunk.kernels["start"])
                memcpy_rows += len(chunk.memcpy["start"])
            if held is not None:
                con.executemany(m_sql, _memcpy_rows(held, global_pid))
            con.execute("COMMIT")
        finally:
            con.close()
    return {
        "path": str(path),
        "format": "nsys-sqlite",
        "kernels": kernel_rows,
        "memcpy": memcpy_rows,
        "seed": seed,
        "variant": variant,
    }


def _in_start_order(held: dict | None, memcpy: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """(the copies to write now, those held back): the copies in start order, as Nsight Systems stores its activity
    tables (every real export in ../shared/data/real: kernels and copies by start), which lets the ingest in pieces
    fetch a piece's copies by rowid range (gpuvar.ingest.nsys_plan.copy_ranges). The synthetic copies come in launch
    order, a chunk at a time, and a chunk's last copies may start after the next chunk's first: those starting from
    this chunk's first are held back and sorted with the next."""
    both = memcpy if held is None else {name: np.concatenate([held[name], memcpy[name]]) for name in memcpy}
    order = np.argsort(both["start"], kind="stable")
    both = {name: np.asarray(values)[order] for name, values in both.items()}
    cut = int(np.searchsorted(both["start"], memcpy["start"].min(), side="left")) if len(memcpy["start"]) else 0
    return {n: v[:cut] for n, v in both.items()}, {n: v[cut:] for n, v in both.items()}


def _metadata(path: Path, rows: int, seed: int, variant: int) -> list[tuple[str, str]]:
    major, minor, micro = SCHEMA_VERSION.split(".")
    return [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
        ("EXPORT_PRODUCT_VERSION", PRODUCT_VERSION),
        ("EXPORT_SCHEMA_VERSION", SCHEMA_VERSION),
        ("EXPORT_SCHEMA_VERSION_MAJOR", major),
        ("EXPORT_SCHEMA_VERSION_MINOR", minor),
        ("EXPORT_SCHEMA_VERSION_MICRO", micro),
        ("EXPORT_PARAM_OUTPUT_FILE", path.name),
        ("GPUVAR_DEMO", f"rows={rows} seed={seed} variant={variant}"),
    ]
