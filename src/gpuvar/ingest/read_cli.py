"""Step 1 of ingest: a profiler file's tables as read, with the vendor's column names, into OUTPUT
(<table>.parquet per table and raw.json, written last). `gpuvar normalize` maps them onto the canonical schema;
`gpuvar ingest` does both at once."""

from __future__ import annotations

import json


def configure(p):
    from gpuvar.ingest.cli import add_source_arguments

    add_source_arguments(p, "output folder of the raw tables")


def run(args) -> int:
    from pathlib import Path

    from gpuvar.atomic import staged_folder
    from gpuvar.ingest import read_source
    from gpuvar.ingest.cli import _one_or_all
    from gpuvar.ingest.raw import RAW_MANIFEST, ReadOptions, write_raw

    output = Path(args.output)
    in_ranges = _in_ranges(args)
    if in_ranges is not None:  # a big Nsight Systems export: copied range by range, never held whole
        from gpuvar.ingest.nsys_sources import write_raw_in_ranges

        with staged_folder(output, replace=True) as tmp:
            tables = write_raw_in_ranges(in_ranges, tmp, args.keep_vendor_columns, _settings().rows)
        print(json.dumps({"format": "nsys-sqlite", "raw_tables": tables, "manifest": str(output / RAW_MANIFEST)}))
        return 0
    raw = read_source(_one_or_all(args.source), args.format, ReadOptions(args.keep_vendor_columns, output.parent))
    with staged_folder(output, replace=True) as tmp:  # the folder appears complete or not at all
        write_raw(raw, tmp)
    tables = {name: table.num_rows for name, table in raw.tables.items()}
    print(json.dumps({"format": raw.format, "raw_tables": tables, "manifest": str(output / RAW_MANIFEST)}))
    return 0


def _settings():
    from gpuvar.ingest.nsys_pieces import PieceSettings

    return PieceSettings()


def _in_ranges(args):
    """The export to read range by range (gpuvar.ingest.nsys_sources), None to read it whole: an Nsight Systems
    export that `gpuvar normalize` will take in pieces (gpuvar.ingest.nsys_pieces.plan_reason)."""
    from pathlib import Path

    from gpuvar.ingest import reader_for
    from gpuvar.ingest.nsys_pieces import plan_reason

    if len(args.source) != 1:
        return None
    source = Path(args.source[0])
    if getattr(reader_for(source, args.format), "FORMAT", None) != "nsys-sqlite":
        return None
    return source if plan_reason(source, _settings()) is None else None
