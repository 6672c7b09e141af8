"""Read a profiler file (format detected by content) into canonical Parquet: kernels.parquet, memcpy.parquet
(no rows when the source has no copies) and ingest.json with rows read/written and dropped rows by reason.
Both ingest steps at once: `gpuvar read` + `gpuvar normalize`, as the workflow runs them."""

from __future__ import annotations

import json

SOURCE_HELP = (
    "profiler file or folder (nsys .sqlite/.nsys-rep, ncu .csv/.ncu-rep, rocprof/omniperf/rocprofv3 CSV, "
    "rocpd .db, Kineto .json; gzip/bzip2/xz compressed or not); several files: a rocprof / rocprofv3 kernel "
    "trace with its counter passes (results.csv pmc_1.csv ..., kernel_trace.csv counter_collection.csv); a folder "
    "that is not one trace (an Omniperf workload, a rocprof run): the one trace directly in it, other files "
    "left out and named"
)


def add_source_arguments(p, output_help: str) -> None:
    """The arguments of every command that reads a profiler file (`gpuvar ingest`, `gpuvar read`)."""
    from gpuvar.options import ConfigOption, add_options

    p.add_argument("source", nargs="+", help=SOURCE_HELP)
    p.add_argument("--output", "-o", required=True, help=output_help)
    p.add_argument("--format", default="auto", help="format name or 'auto' (default: detect by content)")
    add_options(p, (ConfigOption("--keep-vendor-columns", "ingest", "keep_vendor_columns"),))


def sources_of(sources: list[str], fmt: str) -> list[str]:
    """The files of the one trace a command reads: a folder that no reader claims whole is the trace in it
    (gpuvar.ingest.folders), said in one line on stderr."""
    import sys

    from gpuvar.ingest.folders import one_trace
    from gpuvar.text_safety import plain

    paths, opened = one_trace(sources, fmt)
    for folder in opened:
        print(f"gpuvar: {plain(folder.note())}", file=sys.stderr)
    return paths


def one_or_all(sources: list[str]):
    """The source as read_source takes it: one path, or the list of one trace's files."""
    return sources[0] if len(sources) == 1 else sources


WORKERS = "--workers", "ingest", "workers"


def configure(p):
    from gpuvar.options import ConfigOption, add_options

    add_source_arguments(p, "output folder")
    add_options(p, (ConfigOption(*WORKERS),))


def run(args) -> int:
    from gpuvar.ingest import ingest
    from gpuvar.ingest.footprint import peak_bytes, warn_if_short
    from gpuvar.ingest.nsys_plan import PieceSettings

    args.source = sources_of(args.source, args.format)
    warn_if_short("ingest", args.source[0], peak_bytes(args.source, args.format))
    pieces = PieceSettings(workers=args.workers)
    report = ingest(one_or_all(args.source), args.output, args.format, args.keep_vendor_columns, pieces)
    print(json.dumps({"format": report["format"], "tables": report["tables"]}, sort_keys=True))
    return 0
