"""Ingest: read a profiler file of any supported format and write canonical Parquet + ingest.json."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from gpuvar import __version__
from gpuvar.canonical_io import write_canonical, write_json
from gpuvar.errors import InputError
from gpuvar.ingest.detect import detect, formats
from gpuvar.schema import finalize_kernels, finalize_memcpy

log = logging.getLogger("gpuvar.ingest")


def load(source: str | Path, fmt: str = "auto", cache_dir: str | Path | None = None):
    """Run the right reader on `source` and return (ReaderOutput, kernels Arrow table, memcpy table or None).

    cache_dir: where a reader that converts its input first (nsys-rep: `nsys export`) keeps the conversion."""
    source = Path(source)
    if fmt == "auto":
        module = detect(source)
    else:
        known = formats()
        if fmt not in known:
            raise InputError(source, f"unknown format {fmt!r} (allowed: auto, {', '.join(known)})")
        module = known[fmt]
        if not source.exists():
            raise InputError(source, "no such file or directory")
    out = module.read_cached(source, cache_dir) if hasattr(module, "read_cached") else module.read(source)
    kernels = finalize_kernels(out.kernels)
    memcpy = finalize_memcpy(out.memcpy) if out.memcpy is not None else None
    return out, kernels, memcpy


def ingest(source: str | Path, output: str | Path, fmt: str = "auto") -> dict:
    """Ingest `source` into `output`/kernels.parquet (+ memcpy.parquet) and ingest.json; returns the report.

    Every file is written atomically and ingest.json last: it marks a complete ingest, so a stale one is
    removed first and an interrupted run never leaves new tables beside an old report."""
    t0 = time.perf_counter()
    source, output = Path(source), Path(output)
    marker = output / "ingest.json"
    if marker.exists():
        marker.unlink()
    out, kernels, memcpy = load(source, fmt, cache_dir=output)
    t_read = time.perf_counter() - t0
    meta = {"source": str(source), "format": out.format}
    write_canonical(kernels, output / "kernels.parquet", meta)
    tables = {"kernels": kernels}
    if memcpy is not None:
        write_canonical(memcpy, output / "memcpy.parquet", meta)
        tables["memcpy"] = memcpy
    else:
        stale = output / "memcpy.parquet"
        if stale.exists():
            stale.unlink()
    report = {
        "gpuvar_version": __version__,
        "source": str(source),
        "format": out.format,
        "tables": {},
        "notes": out.notes,
        "seconds": {"read": round(t_read, 6), "total": round(time.perf_counter() - t0, 6)},
    }
    for name, table in tables.items():
        dropped = dict(sorted(out.dropped.get(name, {}).items()))
        rows_read = out.rows_read.get(name, table.num_rows + sum(dropped.values()))
        balanced = rows_read == table.num_rows + sum(dropped.values())
        report["tables"][name] = {
            "rows_read": rows_read,
            "rows_written": table.num_rows,
            "dropped": dropped,
            "balanced": balanced,
            "columns": table.num_columns,
        }
        for reason, count in dropped.items():
            log.warning("%s: dropped %d %s row(s): %s", source, count, name, reason)
        if not balanced:
            raise InputError(source, f"internal accounting error on {name}: rows read {rows_read} != written + dropped")
    write_json(report, marker)
    return report
