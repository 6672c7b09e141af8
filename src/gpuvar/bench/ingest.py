"""Ingest throughput: `gpuvar ingest` on a demo Nsight Systems SQLite of N kernel launches (or, with --api-calls, a
capture with CUDA API calls and NVTX ranges), against the readers that turn the same SQLite tables into Arrow,
measured in the same process and minute.

References (each reads the columns gpuvar reads: every column of the kernel and memcpy tables by default, only
the canonical ones with --no-keep-vendor-columns):
  * Arrow-native readers: connectorx (one query per table, and 2 rowid partitions, its parallel mode) and, where
    installed, the ADBC SQLite driver (`adbc-driver-sqlite`, fetch_arrow_table). arrow_native_s is the fastest.
  * SQLite's own engine: `SELECT count(*), max(c1), max(c2), ...` over the same columns through sqlite3, which
    decodes every cell inside SQLite without building any value outside it: what one core can do at best.
gpuvar is timed through `gpuvar.ingest.ingest` with its modules already imported (import_s: their first import,
once): scan_s is its read of the source tables into Arrow (seconds.scan of ingest.json), read_s adds the
canonical columns, call sites and context columns, wall_s adds the checks and the Parquet encoding.
Every contender runs --repeat times, interleaved; each figure is the fastest run (the machine is shared).
Ratios: ratio_scan_vs_arrow_native = scan_s / arrow_native_s, ratio_vs_arrow_native = wall_s / arrow_native_s,
*_vs_sqlite_engine likewise; the _no_vendor_columns figures compare with the references on the needed columns.
The demo file is cached by (rows, seed) in --data-dir. Prints one JSON object.
"""

from __future__ import annotations

import importlib.util
import json
import resource
import sqlite3
import tempfile
import time
from pathlib import Path

TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")


def configure_ingest(p):
    p.add_argument(
        "--rows", type=int, default=1_000_000, help="kernel launches in the demo trace (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=0, help="demo trace seed (default: %(default)s)")
    p.add_argument(
        "--repeat", type=int, default=2, help="runs of every contender (the fastest is reported) (default: %(default)s)"
    )
    p.add_argument(
        "--pieces",
        choices=("auto", "never", "always"),
        default="auto",
        help="ingest in pieces (gpuvar.ingest.nsys_pieces): as `gpuvar ingest` decides (above 2 M kernel rows), "
        "never, or always; in pieces there is no separate scan, so the scan figures are null (default: %(default)s)",
    )
    p.add_argument(
        "--api-calls",
        action="store_true",
        help="a capture with CUDA API calls and emit_nvtx ranges (gpuvar.demo.planted_host_pieces."
        "gpuvar.demo.planted_host_scaled.write_scaled_host_export: 1.5 calls and 1.2 NVTX ranges per kernel, half as many copies) instead of the "
        "demo export; the references then read its host tables' columns too",
    )
    p.add_argument(
        "--data-dir",
        default=str(Path(tempfile.gettempdir()) / "gpuvar-bench-ingest"),
        help="cache of generated traces (default: %(default)s)",
    )


def read_columns(source: Path, everything: bool = True) -> dict[str, list[str]]:
    """Per table, the columns gpuvar reads: every column (the default, vendor columns kept), or only those the
    canonical schema is derived from (--no-keep-vendor-columns), in table order."""
    from gpuvar.ingest import nsys
    from gpuvar.ingest.nsys_sqlite import catalog as table_catalog
    from gpuvar.ingest.nsys_sqlite import connect

    con = connect(source)
    try:
        catalog = table_catalog(con)
    finally:
        con.close()
    needed = {nsys.KERNEL_TABLE: nsys.KERNEL_NEEDED, nsys.MEMCPY_TABLE: nsys.MEMCPY_NEEDED}
    spec = {t: [c for c in catalog[t] if everything or c in needed[t]] for t in TABLES if t in catalog}
    for table, (wanted, required) in nsys.HOST_COLUMNS.items():  # the host tables gpuvar reads, where present
        if required <= set(catalog.get(table, ())):
            spec[table] = [c for c in wanted if c in catalog[table]]
    return spec


def _select(cols: list[str]) -> str:
    return ", ".join(f'"{c}"' for c in cols)


def time_sqlite_engine(source: Path, spec: dict[str, list[str]]) -> float:
    """SQLite decoding every cell of the columns (max() of each) without making a value outside the engine."""
    con = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    try:
        t = time.perf_counter()
        for table, cols in spec.items():
            con.execute("SELECT count(*), " + ", ".join(f'max("{c}")' for c in cols) + f' FROM "{table}"').fetchall()
        return time.perf_counter() - t
    finally:
        con.close()


def time_connectorx(source: Path, spec: dict[str, list[str]], partitions: int) -> float:
    import connectorx as cx

    t = time.perf_counter()
    for table, cols in spec.items():
        if partitions > 1:
            sql = f'SELECT rowid AS "__rowid", {_select(cols)} FROM "{table}"'
            cx.read_sql(
                f"sqlite://{source}", sql, return_type="arrow", partition_on="__rowid", partition_num=partitions
            )
        else:
            cx.read_sql(f"sqlite://{source}", f'SELECT {_select(cols)} FROM "{table}"', return_type="arrow")
    return time.perf_counter() - t


def time_adbc(source: Path, spec: dict[str, list[str]]) -> float:
    import adbc_driver_sqlite.dbapi as adbc

    t = time.perf_counter()
    with adbc.connect(f"file:{source}?mode=ro") as con, con.cursor() as cur:
        for table, cols in spec.items():
            cur.execute(f'SELECT {_select(cols)} FROM "{table}"')
            cur.fetch_arrow_table()
    return time.perf_counter() - t


def time_gpuvar(source: Path, out: Path, keep: bool, pieces: str = "auto") -> dict:
    from gpuvar.ingest import ingest
    from gpuvar.ingest.nsys_pieces import PieceSettings

    settings = {"auto": PieceSettings(), "never": PieceSettings(above=None), "always": PieceSettings(above=0)}[pieces]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    report = ingest(source, out, keep_vendor_columns=keep, pieces=settings)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    scan = report["seconds"].get("scan")  # (none in pieces: each piece is read and written in turn)
    return {"wall": wall, "cpu": cpu, "scan": scan, "read": report["seconds"]["read"], **report}


def _ratio(a: float | None, b: float) -> float | None:
    return round(a / b, 2) if a is not None else None


def _round(a: float | None) -> float | None:
    return round(a, 3) if a is not None else None


def _import_gpuvar() -> float:
    """Import what an ingest of an nsys export uses (readers, Arrow, pandas, connectorx), so that no contender's
    first run pays for it; returns the seconds it took."""
    t = time.perf_counter()
    import connectorx  # noqa: F401

    from gpuvar.ingest import call_sites, context, detect, nsys, sanity  # noqa: F401
    from gpuvar.schema import canonical_columns

    detect.formats()
    canonical_columns("kernels")
    return time.perf_counter() - t


def _fastest(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["wall"])


def run_ingest(args) -> int:
    from gpuvar.demo.nsys_writer import write_nsys_demo

    data = Path(args.data_dir)
    kind = "host" if getattr(args, "api_calls", False) else "demo"
    source = data / f"{kind}-{args.rows}-{args.seed}.sqlite"
    if not source.exists():
        data.mkdir(parents=True, exist_ok=True)
        if kind == "host":
            from gpuvar.demo.planted_host_scaled import write_scaled_host_export

            write_scaled_host_export(source, args.rows, args.seed)
        else:
            write_nsys_demo(source, args.rows, args.seed)
    source = source.resolve()
    with open(source, "rb") as fh:  # page cache warm for every contender
        while fh.read(1 << 24):
            pass
    import_s = _import_gpuvar()
    specs = {"all": read_columns(source, everything=True), "needed": read_columns(source, everything=False)}
    readers = {
        "connectorx": lambda spec: time_connectorx(source, spec, 1),
        "connectorx_2_partitions": lambda spec: time_connectorx(source, spec, 2),
    }
    if importlib.util.find_spec("adbc_driver_sqlite") is not None:
        readers["adbc"] = lambda spec: time_adbc(source, spec)
    ref: dict[str, dict[str, float]] = {k: {} for k in specs}
    engine: dict[str, float] = {}
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for _ in range(max(1, args.repeat)):
        for which, spec in specs.items():
            engine[which] = min(engine.get(which, float("inf")), time_sqlite_engine(source, spec))
            for name, reader in readers.items():
                ref[which][name] = min(ref[which].get(name, float("inf")), reader(spec))
        for keep in (True, False):
            out = data / (f"out-{kind}-{args.rows}-{args.seed}" + ("" if keep else "-needed"))
            runs[keep].append(time_gpuvar(source, out, keep, args.pieces))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    full, lean = _fastest(runs[True]), _fastest(runs[False])
    arrow = {k: min(v.values()) for k, v in ref.items()}
    fastest = {k: min(v, key=v.get) for k, v in ref.items()}
    kernels = full["tables"]["kernels"]["rows_written"]
    memcpy = full["tables"].get("memcpy", {}).get("rows_written", 0)
    result = {
        "bench": "ingest",
        "trace": "capture with API calls" if kind == "host" else "demo",
        "format": full["format"],
        "kernel_rows": kernels,
        "memcpy_rows": memcpy,
        "repeat": max(1, args.repeat),
        "columns_read": {t: len(c) for t, c in specs["all"].items()},
        "columns_read_no_vendor_columns": {t: len(c) for t, c in specs["needed"].items()},
        "import_s": round(import_s, 3),
        "wall_s": round(full["wall"], 3),
        "cpu_s": round(full["cpu"], 3),
        "scan_s": _round(full["scan"]),
        "read_s": round(full["read"], 3),
        "arrow_native_s": round(arrow["all"], 3),
        "arrow_native_fastest": fastest["all"],
        "sqlite_engine_s": round(engine["all"], 3),
        "ratio_scan_vs_arrow_native": _ratio(full["scan"], arrow["all"]),
        "ratio_vs_arrow_native": round(full["wall"] / arrow["all"], 2),
        "ratio_scan_vs_sqlite_engine": _ratio(full["scan"], engine["all"]),
        "ratio_vs_sqlite_engine": round(full["wall"] / engine["all"], 2),
        "wall_s_no_vendor_columns": round(lean["wall"], 3),
        "scan_s_no_vendor_columns": _round(lean["scan"]),
        "read_s_no_vendor_columns": round(lean["read"], 3),
        "arrow_native_s_no_vendor_columns": round(arrow["needed"], 3),
        "arrow_native_fastest_no_vendor_columns": fastest["needed"],
        "sqlite_engine_s_no_vendor_columns": round(engine["needed"], 3),
        "ratio_scan_vs_arrow_native_no_vendor_columns": _ratio(lean["scan"], arrow["needed"]),
        "ratio_vs_arrow_native_no_vendor_columns": round(lean["wall"] / arrow["needed"], 2),
        "vendor_columns_extra_wall_s": round(full["wall"] - lean["wall"], 3),
        "kernel_columns_written": full["tables"]["kernels"]["columns"],
        "kernel_columns_written_no_vendor_columns": lean["tables"]["kernels"]["columns"],
        "kernel_rows_per_s": round(kernels / full["wall"]),
        "all_rows_per_s": round((kernels + memcpy) / full["wall"]),
        "peak_rss_mb": round(rss),
        "pieces": full.get("pieces"),
    }
    for which, suffix in (("all", ""), ("needed", "_no_vendor_columns")):
        for name, seconds in ref[which].items():
            result[f"{name}_s{suffix}"] = round(seconds, 3)
    print(json.dumps(result, sort_keys=True))
    return 0
