"""Draw gpuvar figures from pipeline outputs: `gpuvar plot causal|parallel|timeline|scaling ...`.

Each writes SVG and/or PNG (byte-identical on rerun) plus the plotted data as CSV, and prints a JSON summary
(files written, edges hidden, features skipped) on stdout.
"""

from __future__ import annotations

import json

from gpuvar.options import ConfigOption, add_options

FIGURE_OPTIONS = (
    ConfigOption("--formats", "plots", "formats", split_commas=True),
    ConfigOption("--dpi", "plots", "dpi"),
)
EDGE_FILTERS = (
    ConfigOption("--min-variance-share", "plots", "min_variance_share"),
    ConfigOption("--min-probability", "plots", "min_probability"),
)
PARALLEL_FEATURES = (ConfigOption("--features", "plots", "parallel_features", split_commas=True),)


def _common(p, stem_help: str) -> None:
    p.add_argument("--output", "-o", required=True, help=stem_help)
    add_options(p, FIGURE_OPTIONS)


def configure(p) -> None:
    sub = p.add_subparsers(dest="figure", required=True, metavar="FIGURE")
    c = sub.add_parser("causal", help="one causal graph per analysis group of a `gpuvar causal` folder")
    c.add_argument("causal_dir", help="output folder of `gpuvar causal`")
    _common(c, "output folder: <group slug>.<fmt>, <slug>.edges.csv, index.csv")
    c.add_argument(
        "--which",
        choices=("all", "per_kernel", "whole"),
        default="all",
        help="groups to draw: all, per_kernel (not the whole dataset), whole (default all)",
    )
    add_options(c, EDGE_FILTERS)

    par = sub.add_parser("parallel", help="parallel coordinates of the top-k rows")
    par.add_argument("rows", help="topk_rows.parquet of `gpuvar bin`")
    _common(par, "output stem: STEM.<fmt> and STEM.csv")
    par.add_argument("--target", required=True, help="target column (kernel_variability, memory_stall, ...)")
    add_options(par, PARALLEL_FEATURES)

    t = sub.add_parser("timeline", help="per-bin variance over the trace, top-k bins marked")
    t.add_argument("bins", help="bins.parquet of `gpuvar bin`")
    _common(t, "output stem: STEM.<fmt> and STEM.csv")
    t.add_argument("--target", required=True, help="target name for the labels")
    t.add_argument("--bin-json", default=None, help="bin.json of the same run (top-k and bin unit)")
    t.add_argument("--top-k", type=int, default=None, help="bins to mark when bins.parquet has no top-k flag")

    s = sub.add_parser("scaling", help="binning time against MPI ranks with the ideal line")
    s.add_argument("reports", nargs="+", help="bin.json of each run")
    _common(s, "output stem: STEM.<fmt> and STEM.csv")


def run(args) -> int:
    from pathlib import Path

    from gpuvar.atomic import rewrite_paths, staged_folder, staged_stem

    formats = list(dict.fromkeys(args.formats))
    # written into a temporary folder, moved into place only when every file of the figure is complete
    # (each figure imports its own module only: networkx, for the causal graphs, took ~0.12 s of every plot job)
    if args.figure == "causal":
        from gpuvar.plots.causal_graph.folder import plot_causal_dir

        with staged_folder(args.output, replace=True) as tmp:
            index = plot_causal_dir(
                args.causal_dir, tmp, formats, args.dpi, args.min_variance_share, args.min_probability, args.which
            )
        result = {
            "groups": len(index),
            "drawn": int(index["status"].str.startswith("drawn").sum()),
            "flagged": int((index["status"] == "drawn, flagged").sum()),
            "hidden_edges": int(index["hidden"].sum()),
            "output": args.output,
        }
    else:
        with staged_stem(args.output) as stem:
            if args.figure == "parallel":
                from gpuvar.plots import parallel

                result = parallel.plot_parallel(args.rows, stem, args.target, args.features, formats, args.dpi)
            elif args.figure == "timeline":
                from gpuvar.plots import timeline

                result = timeline.plot_timeline(
                    args.bins, stem, args.target, args.bin_json, formats, args.dpi, args.top_k
                )
            else:
                from gpuvar.plots import scaling

                result = scaling.plot_scaling(args.reports, stem, formats, args.dpi)
        result = rewrite_paths(result, stem.parent, Path(args.output).parent)
    print(json.dumps(result, sort_keys=True, default=str))
    return 0
