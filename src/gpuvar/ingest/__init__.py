"""Ingest: read a profiler file of any supported format (read_source: its tables as read) and map it onto the
canonical schema (normalize_trace: Table 1, canonical names), then write canonical Parquet + ingest.json.

The readers (pandas, pyarrow) are imported when a file is read, not with the package: every `gpuvar`
command imports gpuvar.ingest.cli to build its parser, and pandas alone costs 0.1-0.3 s of start-up."""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpuvar import __version__
from gpuvar.errors import AccountingError, InputError, path_problem
from gpuvar.heap import whole_trace_memory
from gpuvar.layout import INGEST_REPORT, KERNELS_TABLE, MEMCPY_TABLE
from gpuvar.options import default

log = logging.getLogger("gpuvar.ingest")


def reader_for(source: Path, fmt: str = "auto"):
    """The reader module for `source`: detected by content, or the named format (InputError when unknown)."""
    from gpuvar.ingest.detect import detect, formats

    if fmt == "auto":
        return detect(source)
    known = formats()
    if fmt not in known:
        raise InputError(source, f"unknown format {fmt!r} (allowed: auto, {', '.join(known)})")
    problem = path_problem(source)
    if problem:
        raise InputError(source, problem)
    return known[fmt]


def read_source(source, fmt: str = "auto", options=None):
    """Step 1 of ingest: the profiler file's tables as read, vendor column names (a RawTrace, see raw.py).

    `source` is one file or folder, or a list of the files of one trace: a kernel trace and its counter passes
    (rocprof v1, rocprofv3; gpuvar.ingest.counter_passes), read together by their reader's read_raw_files."""
    from gpuvar.ingest.raw import ReadOptions

    options = options or ReadOptions()
    paths = [Path(p) for p in source] if isinstance(source, list | tuple) else [Path(source)]
    if not paths:
        raise InputError(".", "no source file given")
    if len(paths) == 1:
        return reader_for(paths[0], fmt).read_raw(paths[0], options)
    modules = [reader_for(p, fmt) for p in paths]
    names = sorted({m.FORMAT for m in modules})
    if len(names) > 1 or not hasattr(modules[0], "read_raw_files"):
        raise InputError(
            paths[0],
            f"{len(paths)} files given as one trace ({', '.join(names)}): only a rocprof or rocprofv3 kernel trace "
            "with its counter passes is read as one; the ranks of a job are a dataset with merge: true "
            "(or `gpuvar explain` with one file per rank)",
        )
    return modules[0].read_raw_files(paths, options)


def normalize_trace(raw, release: bool = False):
    """Step 2 of ingest: Table 1 and the canonical schema over a RawTrace.

    Returns (ReaderOutput with the accounting, canonical kernels Arrow table, memcpy table or None); the
    ReaderOutput's frames are released (None) once they are canonical tables. release=True (a caller that reads
    nothing of `raw` afterwards): raw's tables are dropped as soon as the reader and the host timeline have read
    them, before the call sites and context columns are built (at 1 M Kineto kernels, ~0.3 GB fewer at the peak)."""
    from gpuvar.heap import give_back
    from gpuvar.ingest.call_sites import add_call_sites, host_timeline
    from gpuvar.ingest.context import append_context, context_arrays, step_offset_arrays
    from gpuvar.ingest.corun import set_columns
    from gpuvar.ingest.detect import formats
    from gpuvar.ingest.host_collectives import collective_ops
    from gpuvar.ingest.sanity import drop_negative_durations, null_fractional_counts, require_int64_times
    from gpuvar.ingest.step_size import with_step_threads
    from gpuvar.schema import finalize_kernels, finalize_memcpy

    module = formats().get(raw.format)
    if module is None:
        raise InputError(raw.source, f"raw read of unknown format {raw.format!r}")
    # Two steps run in a thread beside others (numpy and Arrow release the GIL; at 1 M Kineto kernels each
    # took 0.3-0.9 s): the host timeline, which reads only the raw tables, beside the reader's normalize; and
    # the context columns but the step offset (ctx_*: what ran beside each launch on its GPU) beside call sites.
    with ThreadPoolExecutor(max_workers=1) as pool:
        host = pool.submit(host_timeline, raw)
        out = module.normalize(raw)
        if "cpu_ops" in raw.tables:  # kept for the rank analysis before the host ops are released
            out.host_collectives, untimed = collective_ops(raw.tables["cpu_ops"])
            if untimed:
                out.notes.append(f"{untimed} host collective ops without a time (ts or dur) left out of the rank "
                                 "analysis's collectives")  # fmt: skip
        null_fractional_counts(out.kernels, out)
        kernels = drop_negative_durations(finalize_kernels(out.kernels), out, "kernels")
        memcpy = finalize_memcpy(out.memcpy) if out.memcpy is not None else None
        if memcpy is not None:
            memcpy = drop_negative_durations(memcpy, out, "memcpy")
        require_int64_times(raw.format, kernels=kernels, memcpy=memcpy)
        out.kernels = out.memcpy = None  # (in the canonical tables now)
        host = host.result()
        if release:  # and their memory back to the system (gpuvar.heap keeps freed memory within the ingest)
            raw.tables.clear()
            give_back()
        context = pool.submit(context_arrays, kernels, memcpy)
        corun = _corun_arrays(out, kernels)  # rows stay aligned: add_call_sites adds columns, never moves rows
        kernels, memcpy = add_call_sites(raw, out, kernels, memcpy, host)  # launch_op, step, call_index, call_site
        context = context.result()
    kernels = with_step_threads(append_context(kernels, context | step_offset_arrays(kernels)))
    return out, set_columns(kernels, corun), memcpy


def _corun_arrays(out, kernels) -> dict:
    """The co-running columns of a trace holding several processes (gpuvar.ingest.corun), {} otherwise; the
    notes that say how its GPUs were named go to out.notes."""
    from gpuvar.ingest.corun import single_trace_arrays
    from gpuvar.ingest.gpu_identity import Recorded

    recorded = Recorded.from_report(
        {"devices": out.devices, "host": out.host, "gpu_renumbered_processes": out.gpu_renumbered}
    )
    arrays, notes = single_trace_arrays(kernels, recorded)
    out.notes.extend(notes)
    return arrays


def load(source: str | Path, fmt: str = "auto", keep_vendor_columns: bool = True, cache_dir: str | Path | None = None):
    """Both ingest steps in memory: (ReaderOutput, kernels Arrow table, memcpy table or None).

    keep_vendor_columns=False skips the source columns the canonical schema does not use, where a reader can
    (Nsight Systems SQLite); the other formats' extra columns are their hardware counters and always kept.
    cache_dir: where a reader that converts its input first (nsys-rep: `nsys export`) keeps the conversion."""
    return normalize_trace(read_source(source, fmt, _options(keep_vendor_columns, cache_dir)))


def _options(keep_vendor_columns: bool, cache_dir):
    from gpuvar.ingest.raw import ReadOptions

    return ReadOptions(keep_vendor_columns, Path(cache_dir) if cache_dir is not None else None)


def normalize_folder(raw_folder: str | Path, output: str | Path, pieces=None) -> dict:
    """`gpuvar normalize`: a raw folder (from `gpuvar read`) into canonical Parquet + ingest.json; the raw tables
    of a big Nsight Systems export in pieces (pieces: see ingest)."""
    from gpuvar.ingest.nsys_pieces import PieceSettings, normalize_in_pieces
    from gpuvar.ingest.raw import load_raw

    t0 = time.perf_counter()
    output = Path(output)
    (output / INGEST_REPORT).unlink(missing_ok=True)
    report = normalize_in_pieces(Path(raw_folder), output, pieces or PieceSettings())
    if report is not None:  # the raw tables of a big Nsight Systems export, taken in pieces
        return report
    with whole_trace_memory():
        raw = load_raw(raw_folder)
        loaded = normalize_trace(raw, release=True)
        return write_ingest(raw.source, output, *loaded, t_read=time.perf_counter() - t0, t0=t0)


def ingest(
    source,
    output: str | Path,
    fmt: str = "auto",
    keep_vendor_columns: bool = default("ingest", "keep_vendor_columns"),
    pieces=None,
) -> dict:
    """Ingest `source` (a file or folder, or the files of one trace: see read_source) into
    `output`/kernels.parquet, memcpy.parquet and ingest.json; returns the report.

    pieces: a gpuvar.ingest.nsys_pieces.PieceSettings (None: its defaults): when a big Nsight Systems export is
    ingested in pieces, in bounded memory, with the same files as a result."""
    t0 = time.perf_counter()
    output = Path(output)
    (output / INGEST_REPORT).unlink(missing_ok=True)
    if not isinstance(source, list | tuple):
        fmt = reader_for(Path(source), fmt).FORMAT  # detected once: read_source takes the format by name
        if fmt == "nsys-sqlite":
            from gpuvar.ingest.nsys_pieces import PieceSettings, ingest_in_pieces

            report = ingest_in_pieces(Path(source), output, keep_vendor_columns, pieces or PieceSettings())
            if report is not None:
                return report
    from gpuvar import progress

    with whole_trace_memory():  # the whole trace in memory: fewer of its columns faulted in (gpuvar.heap)
        progress.start("reading the trace")  # (a reader that streams says how far it has come)
        raw = read_source(source, fmt, _options(keep_vendor_columns, output))
        # several files of one trace: the kernel trace's path (the passes are listed under counter_passes)
        label = raw.source if isinstance(source, list | tuple) else str(Path(source))
        t_scan = time.perf_counter() - t0
        progress.start("canonical columns, call sites and context")
        loaded = normalize_trace(raw, release=True)  # the source's tables: freed before call sites and Parquet
        progress.start("writing the canonical tables")
        return write_ingest(label, output, *loaded, t_read=time.perf_counter() - t0, t0=t0, t_scan=t_scan)


def write_ingest(
    source: str, output: Path, out, kernels, memcpy, t_read: float, t0: float, t_scan: float | None = None
) -> dict:
    """Check the books, then write kernels.parquet, memcpy.parquet (empty when the source has no copies: the
    binning rule always declares it) and ingest.json, each atomically, ingest.json last: it marks a complete
    ingest, so an interrupted run never leaves new tables beside an old report."""
    from gpuvar.canonical_io import write_canonical
    from gpuvar.ingest.host_collectives import REPORT_KEY as HOST_COLLECTIVES_KEY
    from gpuvar.ingest.host_collectives import write as write_host_collectives
    from gpuvar.ingest.sanity import require_kernels, require_timing
    from gpuvar.schema import empty_memcpy

    meta = {"source": source, "format": out.format}
    tables = {"kernels": kernels} if memcpy is None else {"kernels": kernels, "memcpy": memcpy}
    report = report_head(source, out)
    for name, table in tables.items():  # the books are checked before anything is written
        if name == "kernels":
            dropped = out.dropped.get(name, {})
            require_kernels(source, table, out.rows_read.get(name, table.num_rows + sum(dropped.values())), dropped)
            require_timing(source, out.format, table)
        report["tables"][name] = books(source, out, name, table.num_rows, table.num_columns, recorded_duplicates(table))
    copies = memcpy if memcpy is not None else empty_memcpy()
    if out.host_collectives is not None:
        report[HOST_COLLECTIVES_KEY] = write_host_collectives(out.host_collectives, output)
    with ThreadPoolExecutor(max_workers=1) as pool:  # Parquet encoding releases the GIL: write both at once
        pending = pool.submit(write_canonical, copies, output / MEMCPY_TABLE, meta)
        write_canonical(kernels, output / KERNELS_TABLE, meta)
        pending.result()
    finish_report(report, output, t_read, t0, t_scan)
    return report


def finish_report(report: dict, output: Path, t_read: float, t0: float, t_scan: float | None) -> None:
    """The timings, then ingest.json (last: it marks a complete ingest)."""
    from gpuvar.output import write_json

    # scan: the source's tables read as stored (read_source); read: scan + canonical columns, call sites, context
    report["seconds"] = {"read": round(t_read, 6), "total": round(time.perf_counter() - t0, 6)}
    if t_scan is not None:
        report["seconds"]["scan"] = round(t_scan, 6)
    write_json(report, output / INGEST_REPORT)


def report_head(source: str, out) -> dict:
    """ingest.json before its tables' books: the source, its format, the notes and the recorded GPUs and host."""
    report = {"gpuvar_version": __version__, "source": source, "format": out.format, "tables": {}, "notes": out.notes}
    if out.devices:
        report["devices"] = out.devices
    if out.host:
        report["host"] = out.host
    if out.gpu_renumbered:
        report["gpu_renumbered_processes"] = sorted(out.gpu_renumbered)
    if out.counter_passes:
        report["counter_passes"] = out.counter_passes
    return report


def recorded_duplicates(table) -> int:
    """Rows that exactly repeat an earlier row in the recorded columns. Columns computed from a launch's
    neighbours (call index, context, and the step and its size where the steps are the iterations of the launch
    pattern: a repeated record shifts the pattern) differ between two records of one launch (the second's gap,
    call index, iteration), so they are left out."""
    from gpuvar.ingest.call_sites import DERIVED as CALL_SITE_DERIVED
    from gpuvar.ingest.context import COLUMNS as CONTEXT_COLUMNS
    from gpuvar.ingest.corun import COLUMNS as CORUN_COLUMNS
    from gpuvar.ingest.sanity import duplicate_rows
    from gpuvar.ingest.step_size import COLUMN as STEP_THREADS

    neighbours = (*CALL_SITE_DERIVED, *CONTEXT_COLUMNS, *CORUN_COLUMNS, "step", STEP_THREADS)
    derived = [c for c in neighbours if c in table.column_names]
    return duplicate_rows(table.drop_columns(derived))


def books(source: str, out, name: str, rows_written: int, columns: int, duplicates: int) -> dict:
    """One table's entry in ingest.json: rows read = written + dropped (else AccountingError), the drops by
    reason and the duplicates (kept: counted and reported, docs/robustness.md), each also a warning."""
    dropped = dict(sorted(out.dropped.get(name, {}).items()))
    rows_read = out.rows_read.get(name, rows_written + sum(dropped.values()))
    balanced = rows_read == rows_written + sum(dropped.values())
    if not balanced:
        raise AccountingError(
            source,
            f"internal accounting error on {name}: rows read {rows_read} != "
            f"written {rows_written} + dropped {sum(dropped.values())}",
        )
    for reason, count in dropped.items():
        log.warning("%s: dropped %d %s row(s): %s", source, count, name, reason)
    if duplicates:
        log.warning("%s: %d %s row(s) exactly repeat an earlier row (kept)", source, duplicates, name)
    return {
        "rows_read": rows_read,
        "rows_written": rows_written,
        "dropped": dropped,
        "balanced": balanced,
        "columns": columns,
        "duplicate_rows": duplicates,
    }
