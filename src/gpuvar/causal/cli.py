"""DirectLiNGAM causal discovery on the top-k rows: one graph per kernel group and one for all rows, the
target as a sink; writes OUTDIR/<group>/{order.json,adjacency.csv,edges.csv,contributions.csv,graph.graphml,
bootstrap_edges.csv,causal.json} and OUTDIR/summary.json."""

from __future__ import annotations

import json

from gpuvar.layout import BIN_REPORT, CAUSAL_RECORD, CAUSAL_SUMMARY
from gpuvar.options import ConfigOption, add_options

CONFIG_OPTIONS = (
    ConfigOption("--min-rows", "causal", "min_rows"),
    ConfigOption("--bootstrap", "causal", "bootstrap"),
    ConfigOption("--workers", "causal", "workers"),
    ConfigOption("--seed", "causal", "seed"),
    ConfigOption("--engine", "causal", "engine"),
    ConfigOption("--prior", "causal", "prior_knowledge"),
    ConfigOption("--collinear-threshold", "causal", "collinear_threshold"),
)


def configure(p):
    p.add_argument("rows", help="top-k rows (Parquet or CSV) with feature columns and the target column")
    p.add_argument("--target", required=True, help="target column, e.g. kernel_variability, memory_stall")
    p.add_argument(
        "--group-by",
        default="kernel_name",
        help="group column, one graph per group besides all rows ('' or 'none': only all rows; default: "
        "%(default)s; config: datasets[].group_by)",
    )
    p.add_argument(
        "--features",
        default="auto",
        help="'auto' (numeric, non-id columns) or a,b,c (default: %(default)s; config: datasets[].features)",
    )
    add_options(p, CONFIG_OPTIONS)
    p.add_argument(
        "--random-rows",
        default=None,
        help="rows of randomly chosen bins (gpuvar bin's sample_rows.parquet): edges found only in the "
        "selected bins are flagged as possibly selection-induced",
    )
    p.add_argument("--output", "-o", required=True, help="output folder")


def read_rows(path, columns: list[str] | None = None):
    """Rows table from Parquet or CSV (only `columns`, those of them it has, when given); InputError names the
    file when it cannot be read."""
    from pathlib import Path

    import pandas as pd

    from gpuvar.errors import InputError, path_problem

    path = Path(path)
    problem = path_problem(path)
    if problem:
        raise InputError(path, "file not found" if problem == "no such file or directory" else problem)
    try:
        if path.suffix.lower() in (".csv", ".tsv"):
            usecols = None if columns is None else (lambda name: name in columns)
            return pd.read_csv(path, sep="\t" if path.suffix.lower() == ".tsv" else ",", usecols=usecols)
        if columns is None:
            return pd.read_parquet(path)
        import pyarrow.parquet as pq

        present = set(pq.read_schema(path).names)
        return pd.read_parquet(path, columns=[c for c in columns if c in present])
    except Exception as exc:  # noqa: BLE001 - any reader failure is a bad input file
        raise InputError(path, f"cannot read rows: {type(exc).__name__}: {exc}".splitlines()[0]) from exc


def empty_selection_reason(rows_path, df) -> str | None:
    """Why there is nothing to analyse (no row), citing bin.json's reason when present; None when there are rows."""
    from pathlib import Path

    if len(df):
        return None
    report = Path(rows_path).with_name(BIN_REPORT)
    try:
        why = json.loads(report.read_text()).get("empty_selection")
    except (OSError, ValueError, AttributeError):
        why = None
    return f"no rows: {why}" if why else "no rows"


def write_skip(outdir, target: str, group_by, reason: str) -> dict:
    """The whole-dataset group recorded as skipped, and a summary saying so: 'no rows' is a result, not a failure."""
    from pathlib import Path

    from gpuvar.causal.prepare import group_slug
    from gpuvar.layout import ALL_GROUP
    from gpuvar.output import write_json

    outdir = Path(outdir)
    record = {
        "group": ALL_GROUP,
        "target": target,
        "status": "skipped",
        "skip_reason": reason,
        "rows_in": 0,
        "rows_used": 0,
        "rows_dropped": {},
        "non_finite_by_column": {},
        "features": [],
        "dropped_columns": {},
        "scale": None,
        "slug": group_slug(ALL_GROUP),
    }
    (outdir / record["slug"]).mkdir(parents=True)
    write_json(record, outdir / record["slug"] / CAUSAL_RECORD)
    summary = {
        "target": target,
        "group_by": group_by,
        "engine": None,
        "rejected_features": {},
        "n_ok": 0,
        "n_skipped": 1,
        "flagged": [],
        "elapsed_s": 0.0,
        "skip_reason": reason,
        "groups": [{k: record[k] for k in ("group", "slug", "status", "skip_reason", "rows_used", "features")}],
    }
    write_json(summary, outdir / CAUSAL_SUMMARY)
    return summary


def _group_by(args) -> str | None:
    return None if args.group_by.strip().lower() in ("", "none") else args.group_by


def options(args):
    """CausalOptions from the command line: the options of CONFIG_OPTIONS were checked by the config's fields."""
    from gpuvar.causal.options import causal_options

    settings = {o.name: getattr(args, o.flag.removeprefix("--").replace("-", "_")) for o in CONFIG_OPTIONS}
    return causal_options(target=args.target, group_by=_group_by(args), features=args.features, **settings)


def run(args) -> int:
    """argv -> settings -> execute; prints the summary's headline keys as JSON."""
    summary = execute(options(args), args.rows, args.random_rows, args.output)
    keys = ("target", "engine", "n_ok", "n_skipped", "flagged", "elapsed_s")
    keys += ("skip_reason",) if "skip_reason" in summary else ()
    print(json.dumps({k: summary.get(k) for k in keys}, sort_keys=True))
    return 0


def execute(settings, rows, random_rows, output) -> dict:
    """Causal discovery with `settings` (CausalOptions) on the rows file `rows` (and the random bins' rows
    `random_rows`, or None), written to the folder `output`: what `gpuvar causal` and `gpuvar explain` run.
    Returns the summary (summary.json)."""
    from gpuvar.atomic import staged_folder
    from gpuvar.causal.discover import discover_all
    from gpuvar.errors import InputError, RowsError

    df = read_rows(rows)
    sample = (lambda columns: read_rows(random_rows, columns)) if random_rows else None  # (read once prepared)
    skip = empty_selection_reason(rows, df)
    # every file goes into a temporary folder that replaces OUTPUT only once complete
    with staged_folder(output, replace=True) as tmp:
        if skip:
            return write_skip(tmp, settings.target, settings.group_by, skip)
        try:
            return discover_all(df, settings, tmp, sample)
        except RowsError as exc:  # the rows lack a column the options name: the file is the problem
            raise InputError(rows, str(exc)) from exc
