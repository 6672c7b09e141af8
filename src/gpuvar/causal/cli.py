"""DirectLiNGAM causal discovery on the top-k rows: one graph per kernel group and one for all rows, the
target as a sink; writes OUTDIR/<group>/{order.json,adjacency.csv,edges.csv,contributions.csv,graph.graphml,
bootstrap_edges.csv,causal.json} and OUTDIR/summary.json."""

from __future__ import annotations

import json


def configure(p):
    p.add_argument("rows", help="top-k rows (Parquet or CSV) with feature columns and the target column")
    p.add_argument("--target", required=True, help="target column, e.g. kernel_variability, memory_stall")
    p.add_argument("--group-by", default="kernel_name", help="group column ('' or 'none': only all rows)")
    p.add_argument("--features", default="auto", help="'auto' (numeric, non-id columns) or a,b,c")
    p.add_argument("--min-rows", type=int, default=30, help="skip groups with fewer usable rows")
    p.add_argument("--bootstrap", type=int, default=100, help="bootstrap resamples for edge probability (0: none)")
    p.add_argument("--workers", type=int, default=1, help="bootstrap worker processes (1: in-process)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--engine", choices=("fast", "lingam"), default="fast", help="fast numpy pwling or lingam's")
    p.add_argument("--prior", choices=("tiers", "sink", "none"), default="tiers",
                   help="prior knowledge: 'tiers' (launch configuration -> counters -> target; default), "
                        "'sink' (only the target is a sink, as in the paper) or 'none'")
    p.add_argument("--collinear-threshold", type=float, default=0.95,
                   help="merge features whose |correlation| in the analysed rows is at least this (default 0.95)")
    p.add_argument("--random-rows", default=None,
                   help="rows of randomly chosen bins (gpuvar bin's sample_rows.parquet): edges found only in the "
                        "selected bins are flagged as possibly selection-induced")
    p.add_argument("--output", "-o", required=True, help="output folder")


def read_rows(path):
    """Rows table from Parquet or CSV; InputError names the file when it cannot be read."""
    from pathlib import Path

    import pandas as pd

    from gpuvar.errors import InputError

    path = Path(path)
    if not path.exists():
        raise InputError(path, "file not found")
    try:
        if path.suffix.lower() in (".csv", ".tsv"):
            return pd.read_csv(path, sep="\t" if path.suffix.lower() == ".tsv" else ",")
        return pd.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad input file
        raise InputError(path, f"cannot read rows: {type(exc).__name__}: {exc}".splitlines()[0]) from exc


def run(args) -> int:
    from gpuvar.causal.discover import discover_all
    from gpuvar.errors import GpuvarError, InputError

    df = read_rows(args.rows)
    random_rows = read_rows(args.random_rows) if args.random_rows else None
    group_by = None if args.group_by.strip().lower() in ("", "none") else args.group_by
    try:
        summary = discover_all(df, args.target, group_by, args.features, args.min_rows, args.bootstrap,
                               args.workers, args.seed, args.engine, args.output, args.prior,
                               args.collinear_threshold, random_rows)  # fmt: skip
    except GpuvarError as exc:
        if "not in the rows" in str(exc) and not isinstance(exc, InputError):
            raise InputError(args.rows, str(exc)) from exc
        raise
    print(json.dumps({k: summary[k] for k in ("target", "engine", "n_ok", "n_skipped", "flagged", "elapsed_s")},
                     sort_keys=True))  # fmt: skip
    return 0
