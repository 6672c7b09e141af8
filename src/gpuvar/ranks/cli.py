"""Per-rank analysis: which rank reaches each collective last, how long the others wait, and why (docs/ranks.md).

Give one merged ingest (`gpuvar ingest-merge`), several single-rank ingest folders, or the original traces
with --traces (host collective ops give the exact wait; ingest folders only show it through copies)."""

from __future__ import annotations

import json


def configure(parser) -> None:
    parser.add_argument("inputs", nargs="*", metavar="INGEST_DIR", help="a merged ingest or one ingest per rank")
    parser.add_argument("--traces", nargs="+", metavar="TRACE", help="the original traces, one per rank")
    parser.add_argument("-o", "--output", required=True, help="output folder")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the cross-validation and permutations (default: %(default)s; config: causal.seed)",
    )


def run(args) -> int:
    from gpuvar.errors import GpuvarError
    from gpuvar.ranks.analyze import analyze
    from gpuvar.ranks.load import from_ingest, from_traces
    from gpuvar.ranks.report import write_outputs

    if bool(args.inputs) == bool(args.traces):
        raise GpuvarError("give either INGEST_DIR... or --traces TRACE..., not both or neither")
    data = from_traces(args.traces) if args.traces else from_ingest(args.inputs)
    result = analyze(data, seed=args.seed)
    write_outputs(result, data, args.output)
    print(json.dumps({"output": str(args.output), "findings": result.findings}))
    return 0
