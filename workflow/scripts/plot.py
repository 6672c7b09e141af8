"""Rules plot_* (causal graphs, parallel coordinates, timeline, scaling, and the paper's): `gpuvar plot`."""

from gpuvar.workflow.script import run_gpuvar

# guarded: worker processes (spawn) re-import this file as __mp_main__
if __name__ == "__main__":
    run_gpuvar(snakemake, "plot", *snakemake.params.args)  # noqa: F821 (snakemake is set by the script directive)
