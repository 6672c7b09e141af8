"""Rules normalize_columns / normalize_rank: `gpuvar normalize` -- Table 1 and the canonical schema over a raw
read: kernels.parquet, memcpy.parquet (empty when the trace has no copies), ingest.json."""

from gpuvar.workflow.arguments import folder
from gpuvar.workflow.script import run_gpuvar

# guarded: worker processes (spawn) re-import this file as __mp_main__
if __name__ == "__main__":
    run_gpuvar(snakemake, "normalize", snakemake.input.raw, "--output", folder(snakemake.output.report))  # noqa: F821
