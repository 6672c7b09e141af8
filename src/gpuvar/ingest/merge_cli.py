"""Combine per-rank ingest folders (each written by `gpuvar ingest`) into one dataset with a rank column,
rows sorted by start time, ingest.json accounting per file and in total."""

from __future__ import annotations

import json


def configure(p):
    from gpuvar.ingest.gpu_identity import UNKNOWN_GPU_DEFAULT, UNKNOWN_GPU_MODES

    p.add_argument("parts", nargs="+", help="ingest output folders, in rank (file) order")
    p.add_argument("--output", "-o", required=True, help="output folder of the merged dataset")
    p.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=1,
        help="beyond 16 parts the parts are merged 16 at a time into scratch files first: run that many of those "
        "merges at once, in threads (each holds ~0.3 GB of Kineto rows more; the same files; default 1)",
    )
    p.add_argument(
        "--unknown-gpu",
        choices=UNKNOWN_GPU_MODES,
        default=UNKNOWN_GPU_DEFAULT,
        help="ranks recording the same device index and no GPU UUID or host: auto (shared when each process "
        "listed a single GPU, else unknown: NaN co-running columns), shared, or separate GPUs (default auto)",
    )


def run(args) -> int:
    from gpuvar.errors import GpuvarError
    from gpuvar.ingest.merge import merge

    if args.jobs < 1:
        raise GpuvarError(f"--jobs {args.jobs}: give 1 or more")
    held: dict = {}
    report = merge(args.parts, args.output, unknown_gpu=args.unknown_gpu, stats=held, jobs=args.jobs)
    # held: per table, the most rows the merge held at once (a row group and a run: it does not hold the job)
    summary = {"format": report["format"], "parts": len(report["parts"]), "tables": report["tables"], "held": held}
    print(json.dumps(summary, sort_keys=True))
    return 0
