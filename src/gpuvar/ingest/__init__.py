"""Ingest: read a profiler file of any supported format and write canonical Parquet + ingest.json.

The readers (pandas, pyarrow) are imported when a file is read, not with the package: every `gpuvar`
command imports gpuvar.ingest.cli to build its parser, and pandas alone costs 0.1-0.3 s of start-up."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpuvar import __version__
from gpuvar.errors import AccountingError, InputError, path_problem

log = logging.getLogger("gpuvar.ingest")


def load(source: str | Path, fmt: str = "auto", keep_vendor_columns: bool = True, cache_dir: str | Path | None = None):
    """Run the right reader on `source` and return (ReaderOutput, kernels Arrow table, memcpy table or None).

    keep_vendor_columns=False skips the source columns the canonical schema does not use, where a reader can
    (Nsight Systems SQLite); the other formats' extra columns are their hardware counters and always kept.
    cache_dir: where a reader that converts its input first (nsys-rep: `nsys export`) keeps the conversion."""
    from gpuvar.ingest.detect import detect, formats
    from gpuvar.ingest.sanity import drop_negative_durations
    from gpuvar.schema import finalize_kernels, finalize_memcpy

    source = Path(source)
    if fmt == "auto":
        module = detect(source)
    else:
        known = formats()
        if fmt not in known:
            raise InputError(source, f"unknown format {fmt!r} (allowed: auto, {', '.join(known)})")
        module = known[fmt]
        problem = path_problem(source)
        if problem:
            raise InputError(source, problem)
    if hasattr(module, "read_cached"):
        out = module.read_cached(source, cache_dir)
    elif getattr(module, "VENDOR_COLUMN_OPTION", False):
        out = module.read(source, keep_vendor_columns=keep_vendor_columns)
    else:
        out = module.read(source)
    kernels = drop_negative_durations(finalize_kernels(out.kernels), out, "kernels")
    memcpy = finalize_memcpy(out.memcpy) if out.memcpy is not None else None
    if memcpy is not None:
        memcpy = drop_negative_durations(memcpy, out, "memcpy")
    return out, kernels, memcpy


def ingest(source: str | Path, output: str | Path, fmt: str = "auto", keep_vendor_columns: bool = True) -> dict:
    """Ingest `source` into `output`/kernels.parquet (+ memcpy.parquet) and ingest.json; returns the report.

    Every file is written atomically and ingest.json last: it marks a complete ingest, so a stale one is
    removed first and an interrupted run never leaves new tables beside an old report."""
    from gpuvar.canonical_io import write_canonical, write_json
    from gpuvar.ingest.sanity import duplicate_rows, require_kernels

    t0 = time.perf_counter()
    source, output = Path(source), Path(output)
    marker = output / "ingest.json"
    if marker.exists():
        marker.unlink()
    out, kernels, memcpy = load(source, fmt, keep_vendor_columns, cache_dir=output)
    t_read = time.perf_counter() - t0
    meta = {"source": str(source), "format": out.format}
    tables = {"kernels": kernels} if memcpy is None else {"kernels": kernels, "memcpy": memcpy}
    report = {
        "gpuvar_version": __version__,
        "source": str(source),
        "format": out.format,
        "tables": {},
        "notes": out.notes,
    }
    for name, table in tables.items():  # the books are checked before anything is written
        dropped = dict(sorted(out.dropped.get(name, {}).items()))
        rows_read = out.rows_read.get(name, table.num_rows + sum(dropped.values()))
        balanced = rows_read == table.num_rows + sum(dropped.values())
        if not balanced:
            raise AccountingError(source, f"internal accounting error on {name}: rows read {rows_read} != "
                                          f"written {table.num_rows} + dropped {sum(dropped.values())}")  # fmt: skip
        if name == "kernels":
            require_kernels(source, table, rows_read, dropped)
        duplicates = duplicate_rows(table)
        report["tables"][name] = {
            "rows_read": rows_read,
            "rows_written": table.num_rows,
            "dropped": dropped,
            "balanced": balanced,
            "columns": table.num_columns,
            "duplicate_rows": duplicates,  # kept: counted and reported (docs/robustness.md)
        }
        for reason, count in dropped.items():
            log.warning("%s: dropped %d %s row(s): %s", source, count, name, reason)
        if duplicates:
            log.warning("%s: %d %s row(s) exactly repeat an earlier row (kept)", source, duplicates, name)
    if memcpy is not None:  # the two files are written concurrently (Parquet encoding releases the GIL)
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(write_canonical, memcpy, output / "memcpy.parquet", meta)
            write_canonical(kernels, output / "kernels.parquet", meta)
            pending.result()
    else:
        write_canonical(kernels, output / "kernels.parquet", meta)
        stale = output / "memcpy.parquet"
        if stale.exists():
            stale.unlink()
    report["seconds"] = {"read": round(t_read, 6), "total": round(time.perf_counter() - t0, 6)}
    write_json(report, marker)
    return report
