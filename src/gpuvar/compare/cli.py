"""Compare two runs (baseline, candidate): which kernels got slower beyond run-to-run noise (ratio of medians with
a bootstrap interval, Mann-Whitney U with Benjamini-Hochberg, ordered by the time the change costs), whether the
most variable windows moved, and which causes of variability changed (causal-graph diff). Writes
OUTDIR/{compare.json,kernels.csv,causal_diff.csv} and the figures forest, distributions and causal_diff.

BASELINE and CANDIDATE are ingest folders (or their kernels.parquet), or profiler files of any supported format,
which are ingested first into OUTDIR/ingest/{baseline,candidate} (as `gpuvar explain` does); add each run's
`gpuvar bin` and `gpuvar causal` output folders (one per target) for the window and cause comparisons. With
--results ROOT they are dataset names of a workflow's results folder and every target found for both is used.
Prints a short summary (the time books, the verdict counts, the rows that moved most); --json prints the
summary record as JSON instead."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpuvar.artifacts import BIN_REPORT, CAUSAL_SUMMARY, KERNELS_TABLE


def folder_list(text: str) -> list[str]:
    """DIR or DIR,DIR,...: one folder per target (the workflow passes them comma-separated)."""
    return [part for part in text.split(",") if part]


def _settings_options():
    """Every option of CompareSettings (gpuvar.compare.settings), made from the field it sets."""
    from gpuvar.config import CompareStatistics
    from gpuvar.options import ConfigOption
    from gpuvar.plots.cli import FIGURE_OPTIONS

    return (
        *(ConfigOption("--" + name.replace("_", "-"), "compare", name) for name in CompareStatistics.model_fields),
        ConfigOption("--seed", "causal", "seed"),
        ConfigOption("--min-probability", "plots", "min_probability"),
        *FIGURE_OPTIONS,
    )


def configure(p):
    from gpuvar.options import add_options

    p.add_argument(
        "baseline",
        help="baseline: ingest folder, kernels.parquet or a profiler file (ingested first); a dataset name with --results",
    )
    p.add_argument(
        "candidate",
        help="candidate: ingest folder, kernels.parquet or a profiler file (ingested first); a dataset name with "
        "--results",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON (default: a short readable summary)")
    p.add_argument(
        "--fail-on",
        choices=("slower", "changed"),
        default=None,
        help="a CI gate: exit 1 when a kernel, copy or the total GPU time per step is slower (or, with 'changed', "
        "slower or faster) beyond noise and --min-effect (default: always exit 0)",
    )
    p.add_argument("--output", "-o", required=True, help="output folder")
    p.add_argument("--results", help="workflow results folder: read ROOT/{ingest,bin,causal}/<dataset>")
    for side in ("baseline", "candidate"):
        p.add_argument(
            f"--{side}-bin",
            action="extend",
            type=folder_list,
            default=[],
            metavar="DIR[,DIR]",
            help=f"{side} `gpuvar bin` output folder, one per target (comma-separated or repeated; default: none)",
        )
        p.add_argument(
            f"--{side}-causal",
            action="extend",
            type=folder_list,
            default=[],
            metavar="DIR[,DIR]",
            help=f"{side} `gpuvar causal` output folder, one per target (comma-separated or repeated; default: none)",
        )
    p.add_argument("--names", help="labels of the two runs, 'A,B' (default: the folder or dataset names)")
    add_options(p, _settings_options())


def _label(path: Path) -> str:
    path = Path(path)
    if is_profiler_file(path):
        return path.name.split(".")[0] or path.name  # run.pt.trace.json.gz -> run, as explain names a dataset
    return (path.parent if path.suffix == ".parquet" else path).name or str(path)


def is_profiler_file(path: Path) -> bool:
    """Whether a side is a profiler file (or a profiler's output folder) to ingest first, not an ingest folder or
    its kernels.parquet."""
    path = Path(path)
    if path.is_dir():
        return not (path / KERNELS_TABLE).is_file()
    return path.is_file() and path.suffix != ".parquet"  # a missing path: read_kernels says so


def ingest_sides(runs, tmp: Path, output: Path) -> None:
    """Ingest each side given as a profiler file into tmp/ingest/<side> (OUTPUT/ingest/<side> once in place) and
    point the run at it; its stage output goes nowhere, its errors are the ingest's one-line errors."""
    import contextlib
    import io

    from gpuvar.ingest import ingest

    for run, side in zip(runs, ("baseline", "candidate")):
        if not is_profiler_file(run.ingest):
            continue
        folder = tmp / "ingest" / side
        print(f"gpuvar compare: ingest {side} {run.ingest}", file=sys.stderr, flush=True)
        with contextlib.redirect_stdout(io.StringIO()):
            ingest(run.ingest, folder)
        run.source, run.ingest, run.kept = run.ingest, folder, output / "ingest" / side


def runs_from_results(root: Path, baseline: str, candidate: str):
    """Both runs' folders in a workflow's results tree; targets present for one dataset only are left out."""
    from gpuvar.compare.run import Run
    from gpuvar.errors import InputError

    runs = []
    for name in (baseline, candidate):
        ingest = root / "ingest" / name
        if not ingest.is_dir():
            raise InputError(ingest, f"no ingest output for dataset {name!r} under {root}")
        runs.append(Run(name, ingest))
    for kind, attr, marker in (("bin", "bins", BIN_REPORT), ("causal", "causal", CAUSAL_SUMMARY)):
        found = [{p.parent.name for p in (root / kind / r.name).glob(f"*/{marker}")} for r in runs]
        for run in runs:
            setattr(run, attr, [root / kind / run.name / t for t in sorted(found[0] & found[1])])
    return runs


def run(args) -> int:
    from gpuvar.atomic import staged_folder
    from gpuvar.compare.run import Run, compare_runs
    from gpuvar.compare.settings import compare_settings
    from gpuvar.errors import GpuvarError

    if args.results:
        if any((args.baseline_bin, args.candidate_bin, args.baseline_causal, args.candidate_causal)):
            raise GpuvarError("--results finds the bin and causal folders itself; drop the --*-bin/--*-causal options")
        base, cand = runs_from_results(Path(args.results), args.baseline, args.candidate)
    else:
        base = Run(
            _label(args.baseline),
            Path(args.baseline),
            [Path(p) for p in args.baseline_bin],
            [Path(p) for p in args.baseline_causal],
        )
        cand = Run(
            _label(args.candidate),
            Path(args.candidate),
            [Path(p) for p in args.candidate_bin],
            [Path(p) for p in args.candidate_causal],
        )
    if args.names:
        names = [n.strip() for n in args.names.split(",")]
        if len(names) != 2 or not all(names) or names[0] == names[1]:
            raise GpuvarError(f"--names must be two different labels 'A,B', got {args.names!r}")
        base.name, cand.name = names
    elif base.name == cand.name:
        base.name, cand.name = f"{base.name} (baseline)", f"{cand.name} (candidate)"
    options = compare_settings(
        **{o.name: getattr(args, o.flag.lstrip("-").replace("-", "_")) for o in _settings_options()}
    )
    with staged_folder(args.output, replace=True) as tmp:  # the folder appears complete or not at all
        if not args.results:
            ingest_sides((base, cand), tmp, Path(args.output))
        record = compare_runs(base, cand, tmp, options)
    from gpuvar.text_safety import plain

    for warning in record["warnings"]:
        print(f"gpuvar compare: warning: {plain(warning)}", file=sys.stderr)
    if args.json:
        print(json.dumps({"output": str(args.output), **record["summary"]}, sort_keys=True))
    else:
        from gpuvar.compare.page import console

        print(console(record, Path(args.output)))
    if args.fail_on:
        from gpuvar.compare.run import gate

        failing = gate(record, args.fail_on)
        for line in failing:
            print(f"gpuvar compare: --fail-on {args.fail_on}: {plain(line)}", file=sys.stderr)
        return 1 if failing else 0
    return 0
