"""Rules find_actionable_kernels / summarise_findings: `gpuvar findings` -- per dataset, then one page."""

from gpuvar.workflow.script import run_gpuvar

# guarded: worker processes (spawn) re-import this file as __mp_main__
if __name__ == "__main__":
    run_gpuvar(snakemake, "findings", *snakemake.params.args)  # noqa: F821 (snakemake is set by the script directive)
