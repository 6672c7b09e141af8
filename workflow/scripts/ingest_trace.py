"""Rules ingest_trace / ingest_rank: `gpuvar read` -- the profiler file's tables as read, vendor column names."""

from gpuvar.workflow.script import run_gpuvar

# guarded: worker processes (spawn) re-import this file as __mp_main__
if __name__ == "__main__":
    run_gpuvar(snakemake, "read", *snakemake.params.args)  # noqa: F821 (snakemake is set by the script directive)
