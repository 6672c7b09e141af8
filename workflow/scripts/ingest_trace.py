"""Rules ingest_trace / ingest_rank: `gpuvar read` -- the profiler file's tables as read, vendor column names."""

from gpuvar.workflow.script import run_gpuvar

run_gpuvar(snakemake, "read", *snakemake.params.args)  # noqa: F821 (snakemake is set by the script directive)
