"""The tables of the planted Nsight Systems exports with CUDA API calls, as nsys writes them: the processes and
threads, the schema (kernel, memcpy, runtime and NVTX tables, StringIds, enums, metadata, devices), and the order
in which nsys flushes API calls. Shared by gpuvar.demo.planted_host_pieces (the traps) and
gpuvar.demo.planted_host_scaled (the big regular export), so that both are the same kind of file.

Rows are stored as nsys writes them: kernels and copies in GPU start order; CUDA API calls in per-thread buffers
flushed in blocks (flushed_in_blocks: each thread's rows in start order, the table as a whole not); NVTX events in
start order (at an equal start the shorter range first, so a child precedes its parent). The kernel and memcpy
tables are declared without NOT NULL, so that the dropped rows can be written.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from gpuvar.demo.nsys_writer import (
    COPY_MEM_KINDS,
    GLOBAL_PID_HW,
    KERNEL_COLUMNS,
    MEM_KIND,
    MEMCPY_COLUMNS,
    MEMCPY_OPER,
    PRODUCT_VERSION,
    SCHEMA_VERSION,
)

PID_A, PID_B = 1001, 2002
TID_MAIN_A, TID_BACKWARD_A, TID_MAIN_B = 1001, 1013, 2002
DEVICE_A, DEVICE_B = 0, 1
COMPUTE_STREAM, GRAPH_STREAM, COPY_STREAM, STREAM_B = 7, 13, 51, 21
NVTX_PUSHPOP, NVTX_STARTEND, NVTX_MARK, NVTX_DOMAIN_CREATE = 59, 60, 34, 75
# CUDA API names as the runtime table names them (StringIds)
LAUNCH, MEMCPY_ASYNC, GRAPH_LAUNCH = "cudaLaunchKernel_v7000", "cudaMemcpyAsync_v3020", "cudaGraphLaunch_v10000"
DEVICE_SYNC, IS_CAPTURING, EVENT_RECORD = (
    "cudaDeviceSynchronize_v3020",
    "cudaStreamIsCapturing_v10000",
    "cudaEventRecord_v3020",
)
API_NAMES = (LAUNCH, MEMCPY_ASYNC, GRAPH_LAUNCH, DEVICE_SYNC, IS_CAPTURING, EVENT_RECORD)
THREAD_NAMES = {
    (PID_A, TID_MAIN_A): "python3",
    (PID_A, TID_BACKWARD_A): "pt_autograd_0",
    (PID_B, TID_MAIN_B): "python3",
}
EVENT_TYPES = [
    (NVTX_MARK, "NvtxMark", "NvtxMark"),
    (NVTX_PUSHPOP, "NvtxPushPopRange", "NvtxPushPopRange"),
    (NVTX_STARTEND, "NvtxStartEndRange", "NvtxStartEndRange"),
    (NVTX_DOMAIN_CREATE, "NvtxDomainCreate", "NvtxDomainCreate"),
]
EVENT_CLASSES = [(0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime")]
RUNTIME_COLUMNS = ("start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue", "callchainId")
NVTX_COLUMNS = (
    "start",
    "end",
    "eventType",
    "rangeId",
    "category",
    "color",
    "text",
    "globalTid",
    "endGlobalTid",
    "textId",
    "domainId",
    "uint64Value",
    "int64Value",
    "doubleValue",
    "uint32Value",
    "int32Value",
    "floatValue",
    "jsonTextId",
    "jsonText",
    "binaryData",
)
NVTX_TYPES = {"text": "TEXT", "jsonText": "TEXT", "binaryData": "TEXT", "doubleValue": "REAL", "floatValue": "REAL"}
SCHEMA = [
    "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)",
    "CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)",
    "CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)",
    "CREATE TABLE ENUM_NSYS_EVENT_CLASS (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)",
    "CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT)",
    "CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER, name TEXT)",
    "CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT)",
    "CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER)",
    "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (\n" + ",\n".join(f"    {c} INTEGER" for c in KERNEL_COLUMNS) + "\n)",
    "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (\n" + ",\n".join(f"    {c} INTEGER" for c in MEMCPY_COLUMNS) + "\n)",
    "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (\n"
    + ",\n".join(
        f"    {c} INTEGER{' NOT NULL' if c in ('start', 'end', 'eventClass', 'nameId', 'returnValue') else ''}"
        for c in RUNTIME_COLUMNS
    )
    + "\n)",
    "CREATE TABLE NVTX_EVENTS (\n"
    + ",\n".join(
        f"    {c} {NVTX_TYPES.get(c, 'INTEGER')}{' NOT NULL' if c in ('start', 'eventType') else ''}"
        for c in NVTX_COLUMNS
    )
    + "\n)",
]


def global_id(pid: int, tid: int = 0) -> int:
    """nsys' serialised GlobalId: hardware/VM id above bit 48, pid in bits 24..47, tid below."""
    return GLOBAL_PID_HW | (pid << 24) | tid


def flushed_in_blocks(thread: np.ndarray, start: np.ndarray, end: np.ndarray, block: int) -> np.ndarray:
    """Row order of API calls as nsys stores them: each thread's calls in start order, cut into buffers of `block`
    calls, the buffers in the order they filled (their last call's end, then thread)."""
    n = len(thread)
    if n == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((start, thread))
    thread_sorted = thread[order]
    first = np.ones(n, dtype=bool)
    first[1:] = thread_sorted[1:] != thread_sorted[:-1]
    position = np.arange(n)
    in_thread = position - np.maximum.accumulate(np.where(first, position, 0))
    new = first | (in_thread % block == 0)  # a buffer's first call
    buffer = np.cumsum(new) - 1
    last = np.append(np.flatnonzero(new)[1:] - 1, n - 1)  # each buffer's last call (its end is the latest)
    flush = end[order][last][buffer]
    return order[np.lexsort((position, thread_sorted, flush))]


def insert_rows(con: sqlite3.Connection, table: str, columns, rows) -> None:
    con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(columns))})", rows)


def write_common(con: sqlite3.Connection, ids: dict[str, int], path: Path, params: str) -> None:
    """Schema, StringIds, the enums, metadata, devices, processes and thread names."""
    for ddl in SCHEMA:
        con.execute(ddl)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, v) for v, i in ids.items()])
    con.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", MEMCPY_OPER)
    con.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)", MEM_KIND)
    con.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)", EVENT_TYPES)
    con.executemany("INSERT INTO ENUM_NSYS_EVENT_CLASS VALUES (?, ?, ?)", EVENT_CLASSES)
    meta = [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
        ("EXPORT_PRODUCT_VERSION", PRODUCT_VERSION),
        ("EXPORT_SCHEMA_VERSION", SCHEMA_VERSION),
        ("EXPORT_PARAM_OUTPUT_FILE", path.name),
        ("GPUVAR_DEMO", params),
    ]
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", meta)
    devices = [(DEVICE_A, DEVICE_A, PID_A, "H100"), (DEVICE_B, DEVICE_B, PID_B, "H100")]
    con.executemany("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?, ?, ?, ?)", devices)
    processes = [(global_id(pid), pid, "python3") for pid in (PID_A, PID_B)]
    con.executemany("INSERT INTO PROCESSES VALUES (?, ?, ?)", processes)
    threads = [(ids[name], 20, global_id(pid, tid)) for (pid, tid), name in THREAD_NAMES.items()]
    con.executemany("INSERT INTO ThreadNames VALUES (?, ?, ?)", threads)


def memcpy_rows(launches: list) -> list[tuple]:
    """The memcpy table's rows of the simulated copies (kind 'copy'), in GPU start order."""
    copies = sorted((x for x in launches if x.kind == "copy"), key=lambda x: (x.start, x.call.corr))
    rows = []
    for x in copies:
        src, dst = COPY_MEM_KINDS[x.copy_kind]
        values = {
            "start": x.start,
            "end": x.end,
            "deviceId": x.device,
            "contextId": 1,
            "greenContextId": 0,
            "streamId": x.stream,
            "correlationId": x.call.corr,
            "globalPid": global_id(x.call.pid),
            "bytes": x.bytes,
            "copyKind": x.copy_kind,
            "srcKind": src,
            "dstKind": dst,
        }
        rows.append(tuple(values.get(c) for c in MEMCPY_COLUMNS))
    return rows
