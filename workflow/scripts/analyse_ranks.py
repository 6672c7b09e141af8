"""Rule analyse_ranks: `gpuvar ranks` -- stragglers, waits and what made the late rank late (merged datasets)."""

from gpuvar.workflow.script import run_gpuvar

# guarded: worker processes (spawn) re-import this file as __mp_main__
if __name__ == "__main__":
    run_gpuvar(snakemake, "ranks", *snakemake.params.args)  # noqa: F821 (snakemake is set by the script directive)
