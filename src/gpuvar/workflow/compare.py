"""Path helpers for workflow/rules/compare.smk (kept in a module: `snakemake --lint` wants functions there, and
they can be unit-tested without Snakemake). A comparison reads both datasets' ingest output and, for every
target both datasets analyse, their binning and causal outputs."""

from __future__ import annotations

from gpuvar.layout import (
    BIN_REPORT,
    CAUSAL_DIR,
    COMPARE_CAUSAL_DIFF,
    COMPARE_DIR,
    COMPARE_FIGURES,
    COMPARE_KERNELS,
    COMPARE_PAGE_HTML,
    COMPARE_RECORD,
    INGEST_REPORT,
    KERNELS_TABLE,
    MEMCPY_TABLE,
    bin_file,
    folder,
    ingest_file,
)


def common_targets(comparison, datasets: dict) -> list[str]:
    """Targets analysed for both datasets, in the baseline's order."""
    candidate = set(datasets[comparison.candidate].targets)
    return [t for t in datasets[comparison.baseline].targets if t in candidate]


def comparison_inputs(comparison, datasets: dict) -> dict[str, list[str] | str]:
    """Named inputs of one comparison: both ingest tables, and per common target bin.json and causal folder."""
    targets = common_targets(comparison, datasets)
    inputs = {}
    for side in ("baseline", "candidate"):
        name = getattr(comparison, side)
        inputs[f"{side}_kernels"] = ingest_file(KERNELS_TABLE).format(dataset=name)
        inputs[f"{side}_copies"] = ingest_file(MEMCPY_TABLE).format(dataset=name)
        inputs[f"{side}_report"] = ingest_file(INGEST_REPORT).format(dataset=name)
        inputs[f"{side}_bins"] = [bin_file(BIN_REPORT).format(dataset=name, target=t) for t in targets]
        inputs[f"{side}_causal"] = [CAUSAL_DIR.format(dataset=name, target=t) for t in targets]
    return inputs


def folders(files) -> list[str]:
    """The folders of declared files (bin.json -> its binning folder, which `gpuvar compare` reads)."""
    return [folder(f) for f in files]


def names(comparison) -> str:
    """The two runs' labels on the comparison's page: the datasets' names."""
    return f"{comparison.baseline},{comparison.candidate}"


def comparison_outputs(cfg) -> list[str]:
    """Everything the comparisons add to `all`."""
    formats = list(cfg.plots.formats)
    outputs = []
    for c in cfg.comparisons:
        base = COMPARE_DIR.format(comparison=c.name)
        outputs += [f"{base}/{n}" for n in (COMPARE_RECORD, COMPARE_PAGE_HTML, COMPARE_KERNELS, COMPARE_CAUSAL_DIFF)]
        outputs += [f"{base}/{fig}.{fmt}" for fig in COMPARE_FIGURES for fmt in formats]
    return outputs
