"""Combine per-rank ingest folders (each written by `gpuvar ingest`) into one dataset with a rank column,
rows sorted by start time, ingest.json accounting per file and in total."""

from __future__ import annotations

import json


def configure(p):
    p.add_argument("parts", nargs="+", help="ingest output folders, in rank (file) order")
    p.add_argument("--output", "-o", required=True, help="output folder of the merged dataset")


def run(args) -> int:
    from gpuvar.ingest.merge import merge

    report = merge(args.parts, args.output)
    print(
        json.dumps(
            {"format": report["format"], "parts": len(report["parts"]), "tables": report["tables"]}, sort_keys=True
        )
    )
    return 0
