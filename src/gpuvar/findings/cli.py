"""Findings of one dataset from its ingest folder: every kernel name's variance decomposition (call sites,
problem size, context, unexplained), a verdict on what explains its run-to-run variability, and the kernels
worth acting on, ranked by the time spent above their call site's median. Writes OUTPUT/findings.json,
findings.md and decomposition.csv; with --combine, one page over several datasets' findings.json."""

from __future__ import annotations

from pathlib import Path


def configure(p):
    p.add_argument(
        "inputs",
        nargs="+",
        type=Path,
        help="an ingest folder (kernels.parquet from gpuvar ingest); with --combine: findings.json files",
    )
    p.add_argument("--output", "-o", type=Path, required=True, help="output folder")
    p.add_argument("--name", default=None, help="dataset name shown on the page (default: the folder's name)")
    p.add_argument("--causal", type=Path, default=None, help="the dataset's kernel_variability causal folder")
    p.add_argument("--plots", type=Path, default=None, help="the dataset's kernel_variability plot folder")
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the cross-validation folds, permutations, bootstrap (default: %(default)s; config: causal.seed)",
    )
    p.add_argument("--combine", action="store_true", help="combine datasets' findings.json into one page")


def run(args) -> int:
    from gpuvar.errors import GpuvarError
    from gpuvar.findings.run import (
        analyse_dataset,
        console_summary,
        load_dataset_record,
        rebase_figures,
        write_dataset,
        write_index,
    )

    if args.combine:
        records = [rebase_figures(load_dataset_record(p), p.parent, args.output) for p in args.inputs]
        write_index(records, args.output)
        return 0
    if len(args.inputs) != 1:
        raise GpuvarError("give one ingest folder (or --combine with findings.json files)")
    folder = args.inputs[0]
    name = args.name or folder.name
    record, table, kernels = analyse_dataset(name, folder, args.causal, args.plots, args.seed)
    write_dataset(record, table, args.output, kernels)
    print(console_summary([record]))
    return 0
