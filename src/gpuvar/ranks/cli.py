"""Per-rank analysis: which rank reaches each collective last, how long the others wait, and why (docs/ranks.md).

Give one merged ingest (`gpuvar ingest-merge`), several single-rank ingest folders, or the original traces
with --traces (host collective ops give the exact wait; ingest folders only show it through copies)."""

from __future__ import annotations

import json


def configure(parser) -> None:
    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="a merged ingest or one ingest per rank; with --traces: the traces"
    )
    parser.add_argument(
        "--traces", action="store_true", help="the inputs are the original traces, one per rank (default: ingests)"
    )
    parser.add_argument("-o", "--output", required=True, help="output folder")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the cross-validation and permutations (default: %(default)s; config: causal.seed)",
    )


def run(args) -> int:
    from gpuvar.ranks.analyze import analyze
    from gpuvar.ranks.load import from_ingest, from_traces
    from gpuvar.ranks.report import write_outputs

    data = from_traces(args.inputs) if args.traces else from_ingest(args.inputs)
    result = analyze(data, seed=args.seed)
    write_outputs(result, data, args.output)
    print(json.dumps({"output": str(args.output), "findings": result.findings}))
    return 0
