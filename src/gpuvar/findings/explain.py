"""One command for a first answer: ingest TRACE (several files = the ranks of one job, merged with a rank
column), bin its timeline, run causal discovery on the most variable windows (kernel_variability, the config's
defaults) and write the findings; prints progress, then the top findings and where the page is.

OUTPUT/ingest (kernels.parquet, ...), OUTPUT/bin, OUTPUT/causal, OUTPUT/findings/{findings.md,findings.json,
decomposition.csv, figures/}, and with several files OUTPUT/ranks (gpuvar ranks: stragglers, waits): the same files the workflow writes for one dataset, so `gpuvar plot`, `gpuvar compare`
and `gpuvar causal-checks` read them as they read the workflow's."""

from __future__ import annotations

import sys
import time
from pathlib import Path


def configure(p):
    p.add_argument(
        "traces",
        nargs="+",
        type=Path,
        help="profiler file(s); several = ranks of one job, or a rocprof / rocprofv3 kernel trace with its counter "
        "passes (results.csv pmc_1.csv ..., kernel_trace.csv counter_collection.csv)",
    )
    p.add_argument("--output", "-o", type=Path, required=True, help="output folder")
    p.add_argument("--name", default=None, help="dataset name on the findings page (default: the first file's stem)")
    p.add_argument("--format", default="auto", help="format name or 'auto': detect by content (default: %(default)s)")
    p.add_argument("--no-causal", action="store_true", help="skip binning and causal graphs: findings only (fastest)")
    p.add_argument("--top", type=int, default=5, help="findings printed (default: %(default)s; all are in findings.md)")


def _progress(message: str, t0: float) -> None:
    print(f"[{time.perf_counter() - t0:6.1f} s] {message}", file=sys.stderr, flush=True)


def _stage(argv: list[str]) -> None:
    """Run one gpuvar stage in this process; a failure is the stage's one-line error."""
    from gpuvar.cli import build_parser
    from gpuvar.errors import GpuvarError

    args = build_parser().parse_args(argv)
    code = int(args._module.run(args) or 0)
    if code:
        raise GpuvarError(f"stage `gpuvar {argv[0]}` failed (exit {code})")


def _quiet(fn, *a):
    """Run fn with stdout swallowed: stage commands print JSON meant for scripts, not for this summary."""
    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*a)


def _ranks(traces, parts: list[str], folder: Path) -> list[str]:
    """The rank section (gpuvar.ranks.section): host collective ops where the format has them (Kineto), else
    what the ranks' ingest folders show, else one line why it is empty; its lines."""
    from gpuvar.ranks.section import rank_section

    return rank_section(traces, parts, folder)


def run(args) -> int:
    import logging
    from types import SimpleNamespace

    from gpuvar.config import Binning, Causal, Targets
    from gpuvar.findings.run import analyse_dataset, console_summary, write_dataset

    t0 = time.perf_counter()
    if not getattr(args, "verbose", False):  # the stages' INFO lines are for the workflow's logs, not this summary
        logging.getLogger("gpuvar").setLevel(logging.WARNING)
        logging.getLogger("gpuvar.causal").setLevel(logging.ERROR)  # graph verdicts are on the findings page
    out = args.output
    name = args.name or args.traces[0].name.split(".")[0]
    ingest = out / "ingest"
    from gpuvar.ingest.counter_passes import group_files

    ranks = group_files(args.traces)  # one group: one trace (a kernel trace may come with its counter passes)
    parts = []
    if len(ranks) == 1:
        _progress(f"ingest {', '.join(map(str, ranks[0]))}", t0)
        _quiet(_stage, ["ingest", *map(str, ranks[0]), "-o", str(ingest), "--format", args.format])
    else:
        for k, files in enumerate(ranks):
            _progress(f"ingest rank file {k}: {', '.join(map(str, files))}", t0)
            part = out / "ranks" / str(k)
            _quiet(_stage, ["ingest", *map(str, files), "-o", str(part), "--format", args.format])
            parts.append(str(part))
        _progress(f"merge {len(parts)} ranks", t0)
        _quiet(_stage, ["ingest-merge", *parts, "-o", str(ingest)])
    causal = plots = None
    if not args.no_causal:
        cfg = SimpleNamespace(binning=Binning(), causal=Causal(), targets=Targets())  # the config's defaults
        target = "kernel_variability"
        _progress(f"bin the timeline ({cfg.binning.bin_width} windows, top {cfg.binning.top_k})", t0)
        from gpuvar.binning.cli import workflow_arguments

        bins = out / "bin"
        _quiet(
            _stage,
            ["bin", str(ingest / "kernels.parquet"), "--memcpy", str(ingest / "memcpy.parquet"), "-o", str(bins)]
            + workflow_arguments(cfg, target),
        )
        _progress("causal graphs of the most variable windows", t0)
        causal = out / "causal"
        from gpuvar.causal.cli import CONFIG_OPTIONS
        from gpuvar.options import arguments

        _quiet(
            _stage,
            ["causal", str(bins / "topk_rows.parquet"), "--random-rows", str(bins / "sample_rows.parquet")]
            + ["--target", target, *arguments(cfg, CONFIG_OPTIONS), "-o", str(causal)],
        )
    rank_lines = []
    if len(ranks) > 1:
        _progress(f"ranks: stragglers and waits across {len(ranks)} ranks", t0)
        rank_lines = _ranks([files[0] for files in ranks], parts, out / "ranks")
    _progress("findings: variance decomposition and verdicts per kernel", t0)
    record, table, kernels = analyse_dataset(name, ingest, causal, plots)
    write_dataset(record, table, out / "findings", kernels)
    _progress("done", t0)
    print(console_summary([record], args.top))
    for line in rank_lines:
        print(f"  ranks: {line}")
    if rank_lines:
        print(f"ranks page: {out / 'ranks' / 'ranks.md'}")
    print(f"findings page: {out / 'findings' / 'findings.md'}")
    return 0
