"""Check a run's findings on a re-run with their causes removed: ingest the re-run (trace files; several = the ranks
of one job, merged) or read its ingest folder, match its call sites to the findings' (by launching op and
occurrence), tell whether each finding's intervention was applied (its size held constant, its concurrent copy
or co-running process gone), and score each finding confirmed, refuted or not tested. Writes OUTPUT/verify.md and
OUTPUT/verify.json (and OUTPUT/ingest when traces are given); exits 0 (nothing refuted), 1 (a finding refuted)
or 2 (an error)."""

from __future__ import annotations

from pathlib import Path

from gpuvar.layout import EXPLAIN_INGEST, EXPLAIN_RANK_INGEST, KERNELS_TABLE


def configure(p):
    from gpuvar.findings.verify import CV_TOLERANCE, TOLERANCE

    p.add_argument("findings", type=Path, help="a findings folder (findings.json), or an explain output folder")
    p.add_argument("rerun", nargs="+", type=Path, help="the re-run: profiler file(s), or one ingest folder")
    p.add_argument("--output", "-o", type=Path, required=True, help="output folder")
    p.add_argument("--format", default="auto", help="the re-run's format or 'auto' (default: %(default)s)")
    p.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        help="relative widening of the time-per-launch interval: two recordings of one program differ by this much "
        "(default: %(default)s, compare's minimum effect)",
    )
    p.add_argument(
        "--exit-zero",
        action="store_true",
        help="exit 0 even when a finding is refuted (the workflow: a refuted finding is a result, not a failure)",
    )
    p.add_argument(
        "--cv-tolerance",
        type=float,
        default=CV_TOLERANCE,
        help="absolute points the CV within call sites may exceed its predicted upper end (default: %(default)s)",
    )


def run(args) -> int:
    import contextlib
    import io

    import pandas as pd

    from gpuvar.atomic import staged_folder
    from gpuvar.errors import GpuvarError, InputError
    from gpuvar.findings.verify import REFUTED, VERIFY_PAGE, VERIFY_RECORD, load_findings, render, verify_dataset
    from gpuvar.output import write_json

    if not 0 <= args.tolerance < 1 or not 0 <= args.cv_tolerance < 1:
        raise GpuvarError("--tolerance and --cv-tolerance must be in [0, 1)")
    findings = load_findings(args.findings)
    rerun = args.rerun
    with staged_folder(args.output) as tmp:
        if len(rerun) == 1 and (rerun[0] / KERNELS_TABLE).is_file():
            ingest_dir = rerun[0]
        else:
            from gpuvar.ingest import ingest
            from gpuvar.ingest.merge import merge

            for path in rerun:
                if not path.is_file():
                    raise InputError(path, "not a file (give trace files, or one ingest folder)")
            ingest_dir = tmp / EXPLAIN_INGEST
            with contextlib.redirect_stdout(io.StringIO()):
                if len(rerun) == 1:
                    ingest(rerun[0], ingest_dir, args.format)
                else:
                    parts = []
                    for k, path in enumerate(rerun):
                        part = tmp / EXPLAIN_INGEST / EXPLAIN_RANK_INGEST / str(k)
                        ingest(path, part, args.format)
                        parts.append(part)
                    merge(parts, ingest_dir)
        kernels = pd.read_parquet(Path(ingest_dir) / KERNELS_TABLE)
        record = verify_dataset(findings, kernels, args.tolerance, args.cv_tolerance)
        record["rerun"] = [str(p) for p in rerun]
        write_json(record, tmp / VERIFY_RECORD)
        (tmp / VERIFY_PAGE).write_text(render(record, ", ".join(map(str, rerun))), encoding="utf-8")
    c = record["counts"]
    print(f"{findings['dataset']}: {c['confirmed']} confirmed, {c['refuted']} refuted, {c['not tested']} not tested")
    for r in record["findings"]:
        print(f"  {r['rank']}. {r['group']}: {r['verdict']} — {r['reason']}")
    print(f"verify page: {args.output / VERIFY_PAGE}")
    return 1 if c[REFUTED] and not args.exit_zero else 0
