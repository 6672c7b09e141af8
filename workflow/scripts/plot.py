"""Rules plot_* (causal graphs, parallel coordinates, timeline, scaling, and the paper's): `gpuvar plot`."""

from gpuvar.workflow.script import run_gpuvar

run_gpuvar(snakemake, "plot", *snakemake.params.args)  # noqa: F821 (snakemake is set by the script directive)
