"""Rules make_demo_data, make_scaling_trace, make_paper_perfcounter_demo: `gpuvar demo-data`."""

from gpuvar.workflow.script import run_gpuvar

# guarded: worker processes (spawn) re-import this file as __mp_main__
if __name__ == "__main__":
    run_gpuvar(snakemake, "demo-data", *snakemake.params.args)  # noqa: F821 (snakemake is set by the script directive)
