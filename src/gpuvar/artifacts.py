"""Names of what one stage writes and another reads: files, workflow paths, shared keys.

Both sides import them from here (the writer of bin.json and the plot that reads it, the rule that declares
results/ingest/{dataset}/kernels.parquet and the script that writes it), so a name changes in one place.
docs/architecture.md lists these contracts; tests/test_architecture.py checks the two agree.
"""

from __future__ import annotations

# --- files inside a stage's output folder --------------------------------------------------------------
RAW_FOLDER = "raw"  # `gpuvar read`: <table>.parquet per vendor table + raw.json (gpuvar.ingest.raw)
RAW_MANIFEST = "raw.json"  # the raw read's format, accounting and reader facts; written last
KERNELS_TABLE = "kernels.parquet"  # canonical kernel launches (docs/schema.md)
MEMCPY_TABLE = "memcpy.parquet"  # canonical copies; written always, with no rows when the source has none
INGEST_REPORT = "ingest.json"  # rows read / written / dropped per table; written last
BINS_TABLE = "bins.parquet"  # every non-empty bin with its statistics
TOPK_ROWS = "topk_rows.parquet"  # the rows of the top-k most variable bins
SAMPLE_ROWS = "sample_rows.parquet"  # the rows of as many randomly drawn bins
BIN_REPORT = "bin.json"  # row accounting, phase seconds, peak memory; written last
CAUSAL_RECORD = "causal.json"  # one per analysis group, in the group's folder
CAUSAL_SUMMARY = "summary.json"  # one per causal run: every group and why any was skipped
CAUSAL_CHECKS = "checks.tsv"  # every graph of a workflow run and its assumption checks
CHECKS_PAGE = "checks.html"  # the same as a page: the HTML report's overview of which graphs to trust
FINDINGS_RECORD = "findings.json"  # ranked findings with every number (docs/causal.md#findings); written last
FINDINGS_PAGE = "findings.md"  # the same findings as the page a user reads first
DECOMPOSITION_TABLE = "decomposition.csv"  # per kernel name: the variance shares and the verdict

# --- shared values ------------------------------------------------------------------------------------
TARGETS = ("kernel_variability", "memory_stall")
ALL_GROUP = "__all__"  # the whole-dataset analysis among `gpuvar causal`'s groups

# --- workflow layout (relative to the repository root); {dataset}/{target} are Snakemake wildcards -------
INGEST_DIR = "results/ingest/{dataset}"
RANK_INGEST_DIR = "results/ingest/{dataset}/ranks/{rank}"
BIN_DIR = "results/bin/{dataset}/{target}"
CAUSAL_DIR = "results/causal/{dataset}/{target}"
PLOT_DIR = "results/plots/{dataset}/{target}"
CHECKS_TABLE = f"results/causal/{CAUSAL_CHECKS}"
CHECKS_OVERVIEW = f"results/causal/{CHECKS_PAGE}"
FINDINGS_DIR = "results/findings"
RANKS_DIR = "results/ranks/{dataset}"  # gpuvar ranks of a merged (multi-rank) dataset: ranks.md, ranks.json, ...
DATASET_FINDINGS_DIR = "results/findings/{dataset}"


def ingest_file(name: str, folder: str = INGEST_DIR) -> str:
    """A file of an ingest folder, e.g. ingest_file(KERNELS_TABLE) -> results/ingest/{dataset}/kernels.parquet."""
    return f"{folder}/{name}"


def bin_file(name: str, folder: str = BIN_DIR) -> str:
    """A file of a binning output folder, e.g. bin_file(BIN_REPORT) -> results/bin/{dataset}/{target}/bin.json."""
    return f"{folder}/{name}"
