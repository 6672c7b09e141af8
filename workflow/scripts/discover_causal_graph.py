"""Rule discover_causal_graph: `gpuvar causal` -- DirectLiNGAM per kernel group and for the whole dataset."""

from gpuvar.workflow.script import run_gpuvar

run_gpuvar(snakemake, "causal", *snakemake.params.args)  # noqa: F821 (snakemake is set by the script directive)
