"""Benchmarks printing one JSON object each: `binning` (gpuvar vs DuckDB vs pandas), `causal` (fast
pwling vs lingam), `ingest` (nsys SQLite rows/s), `ingest-kineto` (Kineto JSON events/s), `demo` (the whole
demo workflow, timed), `context` (context columns of 1 M kernels + 0.5 M copies), `explain` (one trace to
its first findings)."""

from __future__ import annotations

import importlib

BENCHES = {
    "binning": ("gpuvar.bench.binning", "configure_binning", "run_binning"),
    "causal": ("gpuvar.bench.causal", "configure_causal", "run_causal"),
    "ingest": ("gpuvar.bench.ingest", "configure_ingest", "run_ingest"),
    "demo": ("gpuvar.bench.demo", "configure_demo", "run_demo"),
    "ingest-kineto": ("gpuvar.bench.kineto", "configure_kineto", "run_kineto"),
    "context": ("gpuvar.bench.context", "configure_context", "run_context"),
    "explain": ("gpuvar.bench.explain", "configure_explain", "run_explain"),
}


def configure(p):
    sub = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    for name, (module_name, configure_name, run_name) in BENCHES.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        bp = sub.add_parser(name, help=(module.__doc__ or name).strip().splitlines()[0])
        getattr(module, configure_name)(bp)
        bp.set_defaults(_bench_run=getattr(module, run_name))


def run(args) -> int:
    return int(args._bench_run(args) or 0)
