"""Step 2 of ingest: Table 1 and the canonical schema over the raw tables of `gpuvar read`: OUTPUT/kernels.parquet,
memcpy.parquet (no rows when the trace has no copies) and ingest.json (rows read, written and dropped)."""

from __future__ import annotations

import json


def configure(p):
    from gpuvar.ingest.cli import WORKERS
    from gpuvar.options import ConfigOption, add_options

    p.add_argument("raw", help="output folder of `gpuvar read`")
    p.add_argument("--output", "-o", required=True, help="output folder of the canonical tables")
    add_options(p, (ConfigOption(*WORKERS),))


def run(args) -> int:
    from gpuvar.ingest import normalize_folder
    from gpuvar.ingest.nsys_plan import PieceSettings

    report = normalize_folder(args.raw, args.output, PieceSettings(workers=args.workers))
    print(json.dumps({"format": report["format"], "tables": report["tables"]}, sort_keys=True))
    return 0
