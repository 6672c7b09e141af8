"""Step 1 of ingest: a profiler file's tables as read, with the vendor's column names, into OUTPUT
(<table>.parquet per table and raw.json, written last). `gpuvar normalize` maps them onto the canonical schema;
`gpuvar ingest` does both at once."""

from __future__ import annotations

import json
import logging


def configure(p):
    from gpuvar.ingest.cli import add_source_arguments

    add_source_arguments(p, "output folder of the raw tables")


def run(args) -> int:
    from pathlib import Path

    from gpuvar.atomic import staged_folder
    from gpuvar.ingest import read_source, reader_for
    from gpuvar.ingest.cli import one_or_all, sources_of
    from gpuvar.ingest.nsys_pieces import PieceSettings, plan_reason
    from gpuvar.ingest.raw import RAW_MANIFEST, ReadOptions, write_raw

    output = Path(args.output)
    fmt = args.format
    args.source = sources_of(args.source, fmt)
    if len(args.source) == 1:
        source = Path(args.source[0])
        fmt = reader_for(source, fmt).FORMAT  # detected once: read_source takes the format by name
        # a big Nsight Systems export that `gpuvar normalize` will take in pieces: copied range by range, never
        # held whole (gpuvar.ingest.nsys_sources)
        if fmt == "nsys-sqlite" and plan_reason(source, PieceSettings()) is None:
            from gpuvar.ingest.nsys_plan import NotInPieces
            from gpuvar.ingest.nsys_sources import write_raw_in_ranges

            try:
                with staged_folder(output, replace=True) as tmp:
                    tables = write_raw_in_ranges(source, tmp, args.keep_vendor_columns, PieceSettings().rows)
            except NotInPieces as exc:  # read whole, as any other export
                logging.getLogger("gpuvar.ingest").info("%s: read whole: %s", source, exc)
            else:
                print(json.dumps({"format": fmt, "raw_tables": tables, "manifest": str(output / RAW_MANIFEST)}))
                return 0
    from gpuvar.ingest.footprint import peak_bytes, warn_if_short

    warn_if_short("read", args.source[0], peak_bytes(args.source, fmt))
    raw = read_source(one_or_all(args.source), fmt, ReadOptions(args.keep_vendor_columns, output.parent))
    with staged_folder(output, replace=True) as tmp:  # the folder appears complete or not at all
        write_raw(raw, tmp)
    tables = {name: table.num_rows for name, table in raw.tables.items()}
    print(json.dumps({"format": raw.format, "raw_tables": tables, "manifest": str(output / RAW_MANIFEST)}))
    return 0
