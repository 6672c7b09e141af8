"""Path helpers for workflow/rules/compare.smk (kept in a module: `snakemake --lint` wants functions there, and
they can be unit-tested without Snakemake). A comparison reads both datasets' ingest output and, for every
target both datasets analyse, their binning and causal outputs."""

from __future__ import annotations

FIGURES = ("forest", "delta_time", "distributions", "causal_diff")


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
        inputs[f"{side}_kernels"] = f"results/ingest/{name}/kernels.parquet"
        inputs[f"{side}_copies"] = f"results/ingest/{name}/memcpy.parquet"
        inputs[f"{side}_report"] = f"results/ingest/{name}/ingest.json"
        inputs[f"{side}_bins"] = [f"results/bin/{name}/{t}/bin.json" for t in targets]
        inputs[f"{side}_causal"] = [f"results/causal/{name}/{t}" for t in targets]
    return inputs


def side_arguments(comparison, datasets: dict) -> list[str]:
    """`--baseline-bin DIR --baseline-causal DIR ...` for every common target (one list element per word)."""
    args = []
    for side in ("baseline", "candidate"):
        name = getattr(comparison, side)
        for t in common_targets(comparison, datasets):
            args += [f"--{side}-bin", f"results/bin/{name}/{t}", f"--{side}-causal", f"results/causal/{name}/{t}"]
    return args


def comparison_outputs(cfg) -> list[str]:
    """Everything the comparisons add to `all`."""
    formats = list(cfg.plots.formats)
    outputs = []
    for c in cfg.comparisons:
        base = f"results/compare/{c.name}"
        outputs += [f"{base}/compare.json", f"{base}/kernels.csv", f"{base}/causal_diff.csv"]
        outputs += [f"{base}/{fig}.{fmt}" for fig in FIGURES for fmt in formats]
    return outputs
