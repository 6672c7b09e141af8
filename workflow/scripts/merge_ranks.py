"""Rule merge_ranks: `gpuvar ingest-merge` -- the per-rank ingests of a merged dataset, with a rank column."""

from gpuvar.workflow.arguments import folder
from gpuvar.workflow.script import run_gpuvar

# guarded: worker processes (spawn) re-import this file as __mp_main__
if __name__ == "__main__":
    parts = [folder(report) for report in snakemake.input]  # noqa: F821
    run_gpuvar(snakemake, "ingest-merge", *parts, "--output", folder(snakemake.output.report))  # noqa: F821
