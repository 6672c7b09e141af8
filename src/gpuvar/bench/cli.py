"""Benchmarks printing one JSON object each: `binning` (gpuvar vs DuckDB vs pandas), `causal` (fast
pwling vs lingam), `ingest` (nsys SQLite rows/s), `ingest-kineto` (Kineto JSON events/s), `demo` (the whole
demo workflow, timed), `context` (context columns of 1 M kernels + 0.5 M copies), `explain` (one trace to
its first findings), `findings` (the findings stage's time, peak memory and rows held), `paper-scale` (the paper's four 93 M-row traces binned at once), `scale` (a synthetic
multi-rank job through ingest, binning, the rank analysis and findings, rank by rank)."""

from __future__ import annotations

import importlib
import re

BENCHES = {
    "binning": ("gpuvar.bench.binning", "configure_binning", "run_binning"),
    "causal": ("gpuvar.bench.causal", "configure_causal", "run_causal"),
    "ingest": ("gpuvar.bench.ingest", "configure_ingest", "run_ingest"),
    "demo": ("gpuvar.bench.demo", "configure_demo", "run_demo"),
    "ingest-kineto": ("gpuvar.bench.kineto", "configure_kineto", "run_kineto"),
    "context": ("gpuvar.bench.context", "configure_context", "run_context"),
    "explain": ("gpuvar.bench.explain", "configure_explain", "run_explain"),
    "findings": ("gpuvar.bench.findings", "configure_findings", "run_findings"),
    "paper-scale": ("gpuvar.bench.paper_scale", "configure_paper_scale", "run_paper_scale"),
    "scale": ("gpuvar.bench.scale", "configure_scale", "run_scale"),
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
        doc = (module.__doc__ or name).strip()
        bp = sub.add_parser(name, help=first_sentence(doc), description=doc)
        getattr(module, configure_name)(bp)
        bp.set_defaults(_bench_run=getattr(module, run_name))


def first_sentence(doc: str) -> str:
    """The docstring's first sentence on one line: the subcommand's line in `gpuvar bench --help` (a docstring's
    first line may stop mid-sentence)."""
    text = " ".join(doc.split("\n\n")[0].split())
    match = re.search(r"[.;](\s|$)", text)
    return text[: match.start()] + "." if match else text


def run(args) -> int:
    return int(args._bench_run(args) or 0)
