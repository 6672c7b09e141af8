"""A planted Nsight Systems export with every case where a piece boundary could change what ingest writes.

Why: gpuvar.ingest.nsys_pieces ingests a big export piece by piece and must write the bytes the in-memory ingest
writes. Each trap below is a value computed from a launch's neighbours, or a count over the whole trace, that a
piece alone would get wrong; tests/test_nsys_pieces.py ingests this file both ways with pieces of a few hundred
rows and compares the files and reports:

  * iterations: process A's loop on device 0 (five kernels, the GEMM's name drifts with its size) and on device 1
    (two kernels), found from the repeating pattern over the whole trace; a step spans piece boundaries, so the
    step offsets and step threads need each step's first start and total;
  * co-running: process C's kernels on device 0 beside A's (ctx_other_process_*), one in 97 of them lasting 20
    iterations, so it overlaps many pieces; process B on device 0 whose CUDA device ids were renumbered
    (TARGET_INFO_CUDA_DEVICE gpuId != cudaId: its GPU is unknown, a note counts its launches);
  * two streams per device that overlap (ctx_kernels_concurrent, ctx_gap_ns across a boundary), a few kernels
    with no stream;
  * ties: kernels sharing a start time with their correlation ids in reverse order (launch ids and the launch
    order sort them), and exact duplicate rows (counted, kept);
  * dropped rows: an end before the start, a NULL end; kernel name ids StringIds lacks (a note counts them);
  * copies stored out of time order, some lasting many iterations, before the first kernel and after the last,
    a zero-length copy at the start of a zero-length kernel.
Kernel rows are stored in start order, as nsys writes them.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from gpuvar.demo.nsys_writer import (
    KERNEL_COLUMNS,
    MEM_KIND,
    MEMCPY_COLUMNS,
    MEMCPY_OPER,
    PRODUCT_VERSION,
    SCHEMA_VERSION,
)
from gpuvar.output import replacing

PIDS = {"A": 1001, "B": 2002, "C": 3003}
LOOP_A0 = ("fill_kernel", "gemm_tile{t}_kernel", "relu_kernel", "add_kernel", "reduce_kernel")
LOOP_A1 = ("copyish_kernel", "scale_kernel")
OTHER = ("noise_kernel", "long_noise_kernel", "b_kernel_one", "b_kernel_two", "b_kernel_three")
UNKNOWN_ID = 99_999
ITERATION_NS = 100_000


def _names() -> list[str]:
    names = [n for n in LOOP_A0 if "{" not in n] + [LOOP_A0[1].format(t=t) for t in (64, 128)]
    return names + list(LOOP_A1) + list(OTHER)


def _ddl(table: str, columns) -> str:
    return f"CREATE TABLE {table} (\n" + ",\n".join(f"    {c} INTEGER" for c in columns) + "\n)"


def _kernels(loops: int, rng: np.random.Generator, ids: dict[str, int]) -> list[dict]:
    rows = []
    corr = iter(range(1, 10**9))

    def add(pid, device, stream, name, start, duration, grid):
        rows.append(
            {
                "start": int(start),
                "end": int(start + duration),
                "deviceId": device,
                "streamId": stream,
                "correlationId": next(corr),
                "globalPid": (1 << 48) | (PIDS[pid] << 24),
                "name": ids[name] if name in ids else name,
                "gridX": int(grid),
                "blockX": 256,
            }
        )

    for i in range(loops):
        t = 1_000_000 + i * ITERATION_NS
        size = int(rng.integers(1, 9))
        at = t
        for name in LOOP_A0:
            name = name.format(t=64 if size < 5 else 128)
            duration = int(rng.integers(2_000, 6_000)) * (size if "gemm" in name else 1)
            stream = 13 if name == "add_kernel" else 7
            if name == "add_kernel" and i % 3 == 0:  # the same start as relu, launched after it
                add("A", 0, stream, name, rows[-1]["start"], duration, 128 * size)
                rows[-1]["correlationId"], rows[-2]["correlationId"] = (
                    rows[-2]["correlationId"],
                    rows[-1]["correlationId"],
                )
            else:
                add("A", 0, stream, name, at, duration, 128 * size)
            at += duration // 2 if stream == 13 else duration
        for k, name in enumerate(LOOP_A1):
            add("A", 1, 21 + k, name, t + 5_000 * k, int(rng.integers(10_000, 40_000)), 64)
        long = i % 97 == 5
        add(
            "C",
            0,
            31,
            "long_noise_kernel" if long else "noise_kernel",
            t + 40_000,
            20 * ITERATION_NS if long else 9_000,
            32,
        )
        if rng.random() < 0.5:
            add("B", 0, 41, OTHER[2 + int(rng.integers(0, 3))], t + int(rng.integers(0, ITERATION_NS)), 3_000, 16)
    rows.sort(key=lambda r: r["start"])  # stable: tied launches keep their order
    return rows


def _traps(rows: list[dict], rng: np.random.Generator) -> None:
    """Dropped rows, unknown names, missing streams, exact duplicates and a zero-length kernel, in place."""
    n = len(rows)
    picks = rng.choice(np.arange(10, n - 10), size=17, replace=False).tolist()
    for j in picks[:5]:
        rows[j]["end"] = rows[j]["start"] - 1_000  # end before start
    for j in picks[5:8]:
        rows[j]["end"] = None
    for j in picks[8:12]:
        rows[j]["name"] = UNKNOWN_ID
    for j in picks[12:15]:
        rows[j]["streamId"] = None
    zero = picks[15]
    rows[zero]["end"] = rows[zero]["start"]
    for j in sorted(picks[16:], reverse=True):
        rows.insert(j + 1, dict(rows[j]))  # an exact repeat of the row before


def _copies(loops: int, rng: np.random.Generator, zero_at: int) -> list[dict]:
    copies = []
    span = loops * ITERATION_NS
    for k in range(loops // 2):
        start = 1_000_000 + int(rng.integers(-ITERATION_NS, span + ITERATION_NS))
        long = k % 41 == 3
        copies.append(
            {
                "start": start,
                "end": start + (15 * ITERATION_NS if long else int(rng.integers(1_000, 30_000))),
                "deviceId": int(rng.integers(0, 2)),
                "streamId": 51,
                "correlationId": 10**8 + k,
                "globalPid": (1 << 48) | (PIDS["A"] << 24),
                "bytes": int(rng.integers(1, 1 << 24)),
                "copyKind": int(rng.choice([1, 2, 8])),
            }
        )
    copies.append(dict(copies[0], start=zero_at, end=zero_at, deviceId=0, correlationId=10**8 + loops))
    order = rng.permutation(len(copies))
    return [copies[j] for j in order]


def write_pieces_trap(path, loops: int = 400, seed: int = 0) -> dict:
    """Write the export (module docstring) to `path`; returns its counts."""
    rng = np.random.default_rng(seed)
    names = _names()
    ids = {name: 1 + j for j, name in enumerate(names)}
    rows = _kernels(loops, rng, ids)
    _traps(rows, rng)
    zero = next(r for r in rows if r["end"] is not None and r["end"] == r["start"])
    copies = _copies(loops, rng, zero["start"])
    path = Path(path)
    with replacing(path) as tmp:
        con = sqlite3.connect(tmp)
        try:
            con.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
            con.execute("CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)")
            con.execute("CREATE TABLE ENUM_CUDA_MEM_KIND (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT)")
            con.execute("CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT)")
            con.execute("CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER, name TEXT)")
            con.execute(_ddl("CUPTI_ACTIVITY_KIND_KERNEL", KERNEL_COLUMNS))
            con.execute(_ddl("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY_COLUMNS))
            con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, n) for n, i in ids.items()])
            con.executemany("INSERT INTO ENUM_CUDA_MEMCPY_OPER VALUES (?, ?, ?)", MEMCPY_OPER)
            con.executemany("INSERT INTO ENUM_CUDA_MEM_KIND VALUES (?, ?, ?)", MEM_KIND)
            meta = [("EXPORT_PRODUCT_VERSION", PRODUCT_VERSION), ("EXPORT_SCHEMA_VERSION", SCHEMA_VERSION)]
            con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", meta)
            devices = [(0, 0, PIDS["A"], "H100"), (1, 1, PIDS["A"], "H100"), (0, 1, PIDS["B"], "H100")]
            devices.append((0, 0, PIDS["C"], "H100"))
            con.executemany("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?, ?, ?, ?)", devices)
            k_sql = f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(KERNEL_COLUMNS))})"
            con.executemany(k_sql, [_kernel_row(r) for r in rows])
            m_sql = f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES ({', '.join('?' * len(MEMCPY_COLUMNS))})"
            con.executemany(m_sql, [tuple(c.get(col) for col in MEMCPY_COLUMNS) for c in copies])
            con.commit()
        finally:
            con.close()
    return {"path": str(path), "kernels": len(rows), "memcpy": len(copies)}


def _kernel_row(r: dict) -> tuple:
    values = {
        **r,
        "contextId": 1,
        "demangledName": r["name"],
        "shortName": r["name"],
        "mangledName": r["name"],
        "gridY": 1,
        "gridZ": 1,
        "blockY": 1,
        "blockZ": 1,
        "registersPerThread": 32,
        "staticSharedMemory": 0,
        "dynamicSharedMemory": 0,
    }
    return tuple(values.get(c) for c in KERNEL_COLUMNS)
