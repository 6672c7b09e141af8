"""Ingest throughput: `gpuvar ingest` on a demo Nsight Systems SQLite of N kernel launches, against the floor.

The floor is SQLite itself: the `sqlite3` module fetching the columns the canonical schema is derived from
(19 kernel + 8 copy columns of the 2024.6 layout), fully, as Python rows (the faster of fetchall and a cursor
loop). Measured in the same run, beside it: SQLite's own decode of those cells without making Python objects
(max() of every column: what one core can do at best), and connectorx on the same query (1 and 2 rowid
partitions), which is what gpuvar uses. gpuvar is timed twice: default (every vendor column kept) and
--no-keep-vendor-columns (the floor's columns only). The demo file is cached by (rows, seed) in --data-dir.
Prints one JSON object; ratio_vs_floor = gpuvar wall / floor; ratio_vs_floor_all_columns compares the
default with sqlite3 fetching every column of the two tables, which is what the default reads.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")

# run in a fresh interpreter so that its Python rows do not count in gpuvar's peak memory
_FLOOR = r"""
import json, sqlite3, sys, time
path, spec = sys.argv[1], json.loads(sys.argv[2])
con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
out = {"fetchall_s": 0.0, "cursor_loop_s": 0.0, "sqlite_engine_s": 0.0}
for table, cols in spec.items():
    sql = "SELECT " + ", ".join(f'"{c}"' for c in cols) + f' FROM "{table}"'
    t = time.perf_counter(); rows = con.execute(sql).fetchall(); out["fetchall_s"] += time.perf_counter() - t
    del rows
    t = time.perf_counter()
    for row in con.execute(sql):
        pass
    out["cursor_loop_s"] += time.perf_counter() - t
    agg = "SELECT " + ", ".join(f'max("{c}")' for c in cols) + f' FROM "{table}"'
    t = time.perf_counter(); con.execute(agg).fetchall(); out["sqlite_engine_s"] += time.perf_counter() - t
print(json.dumps(out))
"""


def configure_ingest(p):
    p.add_argument(
        "--rows", type=int, default=1_000_000, help="kernel launches in the demo trace (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=0, help="demo trace seed (default: %(default)s)")
    p.add_argument(
        "--data-dir",
        default=str(Path(tempfile.gettempdir()) / "gpuvar-bench-ingest"),
        help="cache of generated traces (default: %(default)s)",
    )


def floor_columns(source: Path, everything: bool = False) -> dict[str, list[str]]:
    """Per table, the columns gpuvar needs (those --no-keep-vendor-columns reads), in table order; or every
    column (what the default, --keep-vendor-columns, reads)."""
    from gpuvar.ingest import nsys

    con = nsys._connect(source)
    try:
        catalog = nsys._catalog(con)
    finally:
        con.close()
    needed = {nsys.KERNEL_TABLE: nsys.KERNEL_NEEDED, nsys.MEMCPY_TABLE: nsys.MEMCPY_NEEDED}
    return {t: [c for c in catalog[t] if everything or c in needed[t]] for t in TABLES if t in catalog}


def time_floor(source: Path, spec: dict[str, list[str]]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _FLOOR, str(source), json.dumps(spec)], capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout)


def time_connectorx(source: Path, spec: dict[str, list[str]], partitions: int) -> float:
    import connectorx as cx

    total = 0.0
    for table, cols in spec.items():
        select = ", ".join(f'"{c}"' for c in cols)
        t = time.perf_counter()
        if partitions > 1:
            sql = f'SELECT rowid AS "__rowid", {select} FROM "{table}"'
            cx.read_sql(
                f"sqlite://{source}", sql, return_type="arrow", partition_on="__rowid", partition_num=partitions
            )
        else:
            cx.read_sql(f"sqlite://{source}", f'SELECT {select} FROM "{table}"', return_type="arrow")
        total += time.perf_counter() - t
    return total


def time_gpuvar(source: Path, out: Path, keep: bool) -> tuple[float, float, dict]:
    from gpuvar.ingest import ingest

    cpu0, wall0 = time.process_time(), time.perf_counter()
    report = ingest(source, out, keep_vendor_columns=keep)
    return time.perf_counter() - wall0, time.process_time() - cpu0, report


def run_ingest(args) -> int:
    from gpuvar.demo.nsys_writer import write_nsys_demo

    data = Path(args.data_dir)
    source = data / f"demo-{args.rows}-{args.seed}.sqlite"
    if not source.exists():
        data.mkdir(parents=True, exist_ok=True)
        write_nsys_demo(source, args.rows, args.seed)
    source = source.resolve()
    with open(source, "rb") as fh:  # page cache warm for every contender
        while fh.read(1 << 24):
            pass
    spec = floor_columns(source)
    floor = time_floor(source, spec)
    floor_s = min(floor["fetchall_s"], floor["cursor_loop_s"])
    every = time_floor(source, floor_columns(source, everything=True))
    floor_all_s = min(every["fetchall_s"], every["cursor_loop_s"])
    cx1, cx2 = time_connectorx(source, spec, 1), time_connectorx(source, spec, 2)
    wall, cpu, report = time_gpuvar(source, data / f"out-{args.rows}-{args.seed}", keep=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    wall_n, cpu_n, report_n = time_gpuvar(source, data / f"out-{args.rows}-{args.seed}-needed", keep=False)
    kernels = report["tables"]["kernels"]["rows_written"]
    memcpy = report["tables"].get("memcpy", {}).get("rows_written", 0)
    print(
        json.dumps(
            {
                "bench": "ingest",
                "format": report["format"],
                "kernel_rows": kernels,
                "memcpy_rows": memcpy,
                "floor_columns": {t: len(c) for t, c in spec.items()},
                "floor_s": round(floor_s, 3),
                "floor_fetchall_s": round(floor["fetchall_s"], 3),
                "floor_cursor_loop_s": round(floor["cursor_loop_s"], 3),
                "sqlite_engine_s": round(floor["sqlite_engine_s"], 3),
                "connectorx_s": round(cx1, 3),
                "connectorx_2_partitions_s": round(cx2, 3),
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "read_s": report["seconds"]["read"],
                "ratio_vs_floor": round(wall / floor_s, 2),
                "floor_all_columns_s": round(floor_all_s, 3),
                "ratio_vs_floor_all_columns": round(wall / floor_all_s, 2),
                "wall_s_no_vendor_columns": round(wall_n, 3),
                "read_s_no_vendor_columns": report_n["seconds"]["read"],
                "ratio_vs_floor_no_vendor_columns": round(wall_n / floor_s, 2),
                "kernel_columns_written": report["tables"]["kernels"]["columns"],
                "kernel_columns_written_no_vendor_columns": report_n["tables"]["kernels"]["columns"],
                "kernel_rows_per_s": round(kernels / wall),
                "all_rows_per_s": round((kernels + memcpy) / wall),
                "peak_rss_mb": round(rss),
            },
            sort_keys=True,
        )
    )
    return 0
