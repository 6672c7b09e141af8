"""Rule discover_causal_graph: `gpuvar causal` -- DirectLiNGAM per kernel group and for the whole dataset."""

from gpuvar.workflow.script import run_gpuvar

# guarded: worker processes (spawn) re-import this file as __mp_main__
if __name__ == "__main__":
    run_gpuvar(snakemake, "causal", *snakemake.params.args)  # noqa: F821 (snakemake is set by the script directive)
