"""Per-rank analysis: which rank reaches each collective last, how long the others wait, and why (docs/ranks.md).
Runs as an MPI job (`mpiexec -n P gpuvar ranks ...`): each process reads its share of the ranks.

Give one merged ingest (`gpuvar ingest-merge`), several single-rank ingest folders, or the original traces
with --traces (host collective ops give the exact wait; ingest folders of other formats only show it through
copies). A Kineto trace's ingest keeps its host collectives: its folder is read as the trace would be, and
`--traces T... --ingested F...` reads each trace's folder instead of the trace (the traces still name the ranks)."""

from __future__ import annotations

import json


def configure(parser) -> None:
    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="a merged ingest or one ingest per rank; with --traces: the traces"
    )
    parser.add_argument(
        "--traces", action="store_true", help="the inputs are the original traces, one per rank (default: ingests)"
    )
    parser.add_argument(
        "--ingested",
        nargs="+",
        metavar="FOLDER",
        help="with --traces: each trace's ingest folder, in the same order; a folder that keeps its trace's host "
        "collectives (a Kineto ingest) is read instead of the trace",
    )
    parser.add_argument("-o", "--output", required=True, help="output folder")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the cross-validation and permutations (default: %(default)s; config: causal.seed)",
    )


def run(args) -> int:
    """The MPI job of gpuvar.ranks.job (one process when started without mpiexec/srun): rank 0 prints the
    findings and, per process, the launches it held, its phases' seconds and its peak RSS."""
    from gpuvar.errors import InputError
    from gpuvar.ranks.job import run as run_job

    if args.ingested and not args.traces:
        raise InputError(args.ingested[0], "--ingested names the ingest folders of --traces: give --traces too")
    record = run_job(args.inputs, args.traces, args.output, seed=args.seed, folders=args.ingested)
    if record is not None:
        print(json.dumps(record))
    return 0
