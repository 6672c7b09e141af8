"""Rule summarise_causal_checks: `gpuvar causal-checks` -- one table of every graph and its assumption checks."""

from gpuvar.workflow.script import run_gpuvar

# guarded: worker processes (spawn) re-import this file as __mp_main__
if __name__ == "__main__":
    out = snakemake.output  # noqa: F821
    run_gpuvar(snakemake, "causal-checks", *snakemake.input, "--output", out.table, "--html", out.page)  # noqa: F821
