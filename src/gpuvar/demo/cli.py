"""Write deterministic synthetic GPU traces in real profiler formats (the embedded demo).

The default `--format set` writes the datasets the default config analyses: four Nsight Systems SQLite
"ranks" (as in the paper's workflow datasets), one Nsight Compute CSV (a PerfCounter dataset) and one rocprof
counter CSV, a planted comparison pair (pair_baseline/pair_candidate.sqlite: the candidate slows one kernel by
10 % and removes one of its causal drivers; gpuvar.demo.planted_pair), plus demo.json describing the planted
causal structure. `--format pair` writes only the pair. `--format shapes` writes a Kineto trace recorded with
input shapes whose GEMM kernel names drift with the size, and its truth.json (gpuvar.demo.planted_shapes; --rows:
launches, 5 per step). `--format canonical` writes canonical Parquet directly, for benchmarks of any size.
"""

from __future__ import annotations

import json

from gpuvar.layout import DEMO_AMD, DEMO_KINETO_RANKS, DEMO_MANIFEST, DEMO_PERFCOUNTER, DEMO_RANK_TRACES

SET_FORMATS = ("set", "canonical", "nsys", "rocprof", "ncu", "ncu-wide", "pair", "shapes")

PLANTED = {
    "kernel_variability": {"grid_x": "+", "grid_y": "-", "tcp_pending_stall": "+ (AMD / ncu counters)"},
    "memory_stall": {
        "linked_copy_bytes": "+ (copy duration = bytes / bandwidth; copies mostly outlast their kernel)",
        "linked_copy_kind": "- (DtoD, code 8, runs at 800 B/ns vs 22-24 B/ns for host copies: shorter copies,"
        " smaller stall on average, but a heavy exponential tail)",
    },
    "kernel_variability (ncu)": {
        "dram__bytes_read.sum": "+ (adds dram bytes / 600 ns)",
        "smsp__pcsamp_warps_issue_stalled_long_scoreboard": "+ (the stall counter)",
        "grid_x": "+",
    },
    "variable_windows": "about 15 % of 16384-launch windows have 4x kernel noise",
}


def configure(p):
    p.add_argument("--output", "-o", required=True, help="output folder (or file for single formats)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--rows", type=int, default=None, help="kernel launches per dataset (default: per format)")
    p.add_argument("--format", choices=SET_FORMATS, default="set", help="what to write (default: the demo set)")
    p.add_argument(
        "--variant",
        type=int,
        default=0,
        help="dataset variant (shifts the kernel mix), single formats (default: %(default)s)",
    )
    p.add_argument("--workers", type=int, default=None, help="processes for --format canonical (default 2)")


def write_demo_set(outdir, seed: int, rows: int | None = None) -> dict:
    """The default demo: rank0..3 nsys SQLite, one ncu CSV, one rocprof CSV, the comparison pair, a 2-rank Kineto
    pair, demo.json."""
    from pathlib import Path

    from gpuvar.demo.kineto_writer import write_kineto_demo
    from gpuvar.demo.ncu_writer import write_ncu_demo
    from gpuvar.demo.nsys_writer import write_nsys_demo
    from gpuvar.demo.planted_pair import write_pair
    from gpuvar.demo.rocprof_writer import write_rocprof_demo
    from gpuvar.output import write_json

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = rows or 20_000
    written = {}
    for rank in range(4):
        written[f"rank{rank}"] = write_nsys_demo(outdir / DEMO_RANK_TRACES[rank], rows, seed, variant=rank)
    written["perfcounter"] = write_ncu_demo(outdir / DEMO_PERFCOUNTER, max(rows // 10, 200), seed, variant=0)
    written["amd"] = write_rocprof_demo(outdir / DEMO_AMD, max(rows // 4, 500), seed, variant=1)
    pair = write_pair(outdir, max(rows // 4, 500), seed)
    written.update(pair["files"])
    for rank in range(2):  # a 2-rank PyTorch profiler job, merged into one dataset by the workflow
        written[f"kineto_rank{rank}"] = write_kineto_demo(
            outdir / DEMO_KINETO_RANKS[rank], max(rows // 10, 500), seed, rank=rank, world=2
        )
    manifest = {
        "seed": seed,
        "rows": rows,
        "datasets": written,
        "planted": PLANTED,
        "planted_comparison": pair["planted"],
    }
    write_json(manifest, outdir / DEMO_MANIFEST)
    return manifest


def run(args) -> int:
    from gpuvar.errors import GpuvarError

    if args.rows is not None and args.rows <= 0:
        raise GpuvarError(f"--rows must be a positive number of kernel launches, got {args.rows}")
    if args.format == "set":
        result = write_demo_set(args.output, args.seed, args.rows)
    elif args.format == "pair":
        from gpuvar.demo.planted_pair import write_pair

        result = write_pair(args.output, args.rows or 5_000, args.seed)
    elif args.format == "shapes":
        from gpuvar.demo.planted_shapes import LAUNCHES_PER_STEP, write_planted_shapes

        steps = max((args.rows or 300) // LAUNCHES_PER_STEP, 1)
        result = write_planted_shapes(args.output, steps, args.seed)
    elif args.format == "canonical":
        from gpuvar.demo.canonical_writer import write_canonical_demo

        result = write_canonical_demo(args.output, args.rows or 1_000_000, args.seed, args.variant, args.workers)
    elif args.format == "nsys":
        from gpuvar.demo.nsys_writer import write_nsys_demo

        result = write_nsys_demo(args.output, args.rows or 100_000, args.seed, args.variant)
    elif args.format == "rocprof":
        from gpuvar.demo.rocprof_writer import write_rocprof_demo

        result = write_rocprof_demo(args.output, args.rows or 10_000, args.seed, args.variant)
    else:
        from gpuvar.demo.ncu_writer import write_ncu_demo

        layout = "wide" if args.format == "ncu-wide" else "long"
        result = write_ncu_demo(args.output, args.rows or 1_000, args.seed, args.variant, layout=layout)
    print(json.dumps(result, sort_keys=True, default=str))
    return 0
