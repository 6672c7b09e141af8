"""Rule summarise_causal_checks: `gpuvar causal-checks` -- one table of every graph and its assumption checks."""

from gpuvar.workflow.script import run_gpuvar

run_gpuvar(snakemake, "causal-checks", *snakemake.input, "--output", snakemake.output[0])  # noqa: F821
