"""Rule compare_runs: `gpuvar compare` -- slower kernels, moved windows and changed causes between two runs."""

from gpuvar.workflow.script import run_gpuvar

# guarded: worker processes (spawn) re-import this file as __mp_main__
if __name__ == "__main__":
    run_gpuvar(snakemake, "compare", *snakemake.params.args)  # noqa: F821 (snakemake is set by the script directive)
