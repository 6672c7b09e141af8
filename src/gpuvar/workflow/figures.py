"""Figure paths and report labels for workflow/rules/plots.smk and paper.smk (kept out of the .smk files:
`snakemake --lint` wants functions in modules, and these can be unit-tested without Snakemake running a workflow)."""

from __future__ import annotations

import csv
import functools
import re
from pathlib import Path

from gpuvar.layout import (
    BIN_REPORT,
    DEMO_DIR,
    FIGURE_INDEX,
    KERNELS_TABLE,
    PAPER_FIGURE_DIR,
    PARALLEL_FIGURE,
    PLOT_DIR,
    PLOTS_CAUSAL,
    SCALING_FIGURE,
    SCALING_RUN,
    SCALING_STEM,
    SCALING_TRACE_DIR,
    TIMELINE_FIGURE,
    figure_data,
    figure_file,
    ingest_file,
)

DEMO_TRACE = re.compile(r"demo-(\d+)")
SCALING_TRACE = r"[A-Za-z0-9][A-Za-z0-9_.-]*"  # a dataset name or demo-<rows>


def figure_files(stem: str, formats: list[str], report_format: str, **report_args) -> list:
    """stem.<fmt> for every format; the one in report_format is marked for `snakemake --report`."""
    from snakemake.io import report

    return [
        report(figure_file(stem, fmt), **report_args) if fmt == report_format else figure_file(stem, fmt)
        for fmt in formats
    ]


# How to read a graph of each `checks` value (index.csv), a second label that changes exactly when `checks`
# does: the report turns a label with two values, each on half the figures, into an on/off toggle between
# them, which breaks (a row with nothing to show) unless another label does the same, which this one does.
READ_AS = {
    "trusted": "a finding",
    "flagged": "a hypothesis",
    "not explained": "nothing to act on",
    "skipped": "no graph",
}


@functools.lru_cache(maxsize=256)
def _index(folder: str, stamp: int) -> dict[str, dict[str, str]]:
    """slug -> row of a causal figure folder's index.csv (gpuvar.plots.causal_graph.folder.plot_causal_dir)."""
    with open(Path(folder) / FIGURE_INDEX, newline="", encoding="utf-8") as handle:
        return {row["slug"]: row for row in csv.DictReader(handle)}


def causal_index_row(folder, slug: str) -> dict[str, str]:
    """The index.csv row of one figure of a causal figure folder ({} when absent)."""
    path = Path(str(folder)) / FIGURE_INDEX
    if not path.is_file():
        return {}
    return _index(str(path.parent), path.stat().st_mtime_ns).get(str(slug), {})


def report_text(text: str) -> str:
    """A label value as Snakemake's report shows it: it applies wildcards to the text, so a '{' of a kernel
    name ('{anonymous}') is followed by a zero-width space that keeps it from reading as a wildcard."""
    return str(text).replace("{", "{\u200b")


def causal_labels(**fixed: str):
    """report() labels of the causal graph figures: the graph by its readable name (not the folder's slug
    '...-ca17dbcd'), whether its checks passed and how to read it, then `fixed` (dataset, target, figure).
    A function of the figure: Snakemake calls it with the `{group}` wildcard of the pattern and the rule's
    output folder, whose index.csv has the name and checks of every figure."""

    def labels(wildcards, output) -> dict[str, str]:
        row = causal_index_row(output[0], wildcards.group)
        checks = row.get("checks") or "unknown"
        name = report_text(row.get("name") or wildcards.group)
        return {"graph": name, "checks": checks, "read as": READ_AS.get(checks, "unknown"), **fixed}

    return labels


def report_format(formats: list[str]) -> str:
    """PNG goes into the HTML report when produced (thumbnails, small), else the first format."""
    return "png" if "png" in formats else formats[0]


def with_data(stem: str, formats: list[str]) -> list[str]:
    """A figure's files: stem.<fmt> for each format plus stem.csv."""
    return [*(figure_file(stem, fmt) for fmt in formats), figure_data(stem)]


def scaling_trace(dataset, rows: int, demo_enabled: bool) -> str:
    """What the scaling study bins: a canonical demo trace of `rows` launches ('demo-<rows>') when the dataset
    is one of the embedded demo files (20k launches are too few to time), else the dataset's ingested trace."""
    demo = demo_enabled and str(dataset.sources[0]).startswith(f"{DEMO_DIR}/")
    return f"demo-{rows}" if demo else dataset.name


def scaling_kernels(trace: str, table: str = KERNELS_TABLE) -> str:
    """The table (kernels.parquet, memcpy.parquet) a scaling run reads: the canonical demo trace's, or the
    dataset's ingest output."""
    demo = DEMO_TRACE.fullmatch(trace)
    if demo:
        return f"{SCALING_TRACE_DIR.format(rows=demo[1])}/{table}"
    return ingest_file(table).format(dataset=trace)


def scaling_reports(trace: str, target: str, ranks) -> list[str]:
    """bin.json of each scaling run, one per rank count."""
    return [f"{SCALING_RUN.format(trace=trace, target=target, ranks=int(r))}/{BIN_REPORT}" for r in ranks]


def scaling_stem(trace: str, target: str, ranks) -> str:
    """Where the scaling figure of these runs goes; the rank list is in the path so changing it replots."""
    return SCALING_FIGURE.format(trace=trace, target=target, ranklist="_".join(str(r) for r in sorted(ranks)))


def plot_outputs(analyses, cfg) -> list[str]:
    """Everything the plot rules add to `all`: per (dataset, target) causal graphs, parallel coordinates and
    the variability timeline. Deterministic outputs only: the scaling study measures time, so it has its own
    target (scaling_outputs) and `all` stays byte-identical on rerun."""
    formats = list(cfg.plots.formats)
    outputs = []
    for dataset, target in analyses:
        base = PLOT_DIR.format(dataset=dataset, target=target)
        outputs.append(f"{base}/{PLOTS_CAUSAL}")
        outputs += with_data(f"{base}/{PARALLEL_FIGURE}", formats) + with_data(f"{base}/{TIMELINE_FIGURE}", formats)
    return outputs


def scaling_outputs(cfg, datasets) -> list[str]:
    """The strong-scaling figure + CSV of `snakemake scaling` (empty when scaling.dataset is not set)."""
    if cfg.scaling.dataset is None:
        return []
    trace = scaling_trace(datasets[cfg.scaling.dataset], cfg.scaling.rows, cfg.demo.enabled)
    return with_data(scaling_stem(trace, cfg.scaling.target, cfg.scaling.ranks), list(cfg.plots.formats))


def paper_outputs(paper, formats: list[str], names: dict[str, str] | None = None) -> list[str]:
    """Every file of `snakemake paper`: results/paper/<figure>/...; names maps paper dataset names to the
    workflow's (see gpuvar.plots.paper.merge_datasets)."""
    names = names or {}
    outputs = []
    for fig in paper.figures.values():
        pairs = [(names.get(d, d), t) for d in fig.datasets for t in fig.targets]
        if fig.kind == "causal":
            outputs += [f"{PAPER_FIGURE_DIR.format(fig=fig.name)}/{d}_{t}" for d, t in pairs]
        elif fig.kind == "parallel":
            for d, t in pairs:
                outputs += with_data(f"{PAPER_FIGURE_DIR.format(fig=fig.name)}/{d}_{t}", formats)
        else:
            outputs += with_data(f"{PAPER_FIGURE_DIR.format(fig=fig.name)}/{SCALING_STEM}", formats)
    return outputs


def figure_names(paper, kind: str) -> str:
    """Regex of the paper's figure names of one kind (never matches when there are none)."""
    return "|".join(re.escape(f.name) for f in paper.figures.values() if f.kind == kind) or "(?!)"
