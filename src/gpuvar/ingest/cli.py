"""Read a profiler file (format detected by content) into canonical Parquet: kernels.parquet, memcpy.parquet
when the source has copies, and ingest.json with rows read/written and dropped rows by reason."""

from __future__ import annotations

import argparse
import json


def configure(p):
    p.add_argument("source", help="profiler file or folder (nsys .sqlite, ncu .csv, rocprof/omniperf/rocprofv3 CSV, "
                   "Kineto .json; gzip/bzip2/xz compressed or not)")
    p.add_argument("--output", "-o", required=True, help="output folder")
    p.add_argument("--format", default="auto", help="format name or 'auto' (default: detect by content)")
    p.add_argument("--keep-vendor-columns", action=argparse.BooleanOptionalAction, default=True,
                   help="Nsight Systems: also read the columns the canonical schema does not use (contextId, "
                        "cacheConfig, sharedMemoryExecuted, ...; default: yes)")


def run(args) -> int:
    from gpuvar.ingest import ingest

    report = ingest(args.source, args.output, args.format, keep_vendor_columns=args.keep_vendor_columns)
    print(json.dumps({"format": report["format"], "tables": report["tables"]}, sort_keys=True))
    return 0
