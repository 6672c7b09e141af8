"""Names of what one stage writes and another reads: files, workflow paths, shared keys.

Both sides import them from here (the writer of bin.json and the plot that reads it, the rule that declares
results/ingest/{dataset}/kernels.parquet and the script that writes it), so a name changes in one place.
docs/architecture.md lists these contracts; tests/test_architecture.py checks the two agree.
"""

from __future__ import annotations

from pathlib import PurePath

# --- files inside a stage's output folder --------------------------------------------------------------
OUTPUT_MARKER = ".gpuvar-output.json"  # in every output folder: the command that wrote it (gpuvar.atomic)
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
FINDINGS_HTML = "findings.html"  # the page rendered, figures embedded, to open in a browser
FINDINGS_FRAGMENT = "findings.fragment.html"  # the same as an HTML fragment: the report's landing content
DECOMPOSITION_TABLE = "decomposition.csv"  # per kernel name: the variance shares and the verdict

# --- shared values ------------------------------------------------------------------------------------
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
RANKS_RECORD = "ranks.json"  # every number of the rank analysis and its findings
RANKS_PAGE = "ranks.md"  # the rank page (ranks.html: the same, figures embedded)
DATASET_FINDINGS_DIR = "results/findings/{dataset}"
VERIFY_DIR = "results/verify/{verification}"  # gpuvar verify of one configured re-run (docs/causal.md#verify)
VERIFY_RECORD = "verify.json"  # every finding's verdict, predicted and measured numbers
VERIFY_PAGE = "verify.md"  # the same as a page
COMPARE_DIR = "results/compare/{comparison}"  # gpuvar compare of one configured pair (docs/compare.md)
COMPARE_RECORD = "compare.json"  # every number of a comparison; written last
COMPARE_KERNELS = "kernels.csv"  # per kernel name: both runs' times and the ratio's interval
COMPARE_PAGE_HTML = "compare.html"  # compare.md rendered, figures embedded: the report's comparison page
COMPARE_CAUSAL_DIFF = "causal_diff.csv"  # edges found in one run's graph and not the other's
COMPARE_FIGURES = ("forest", "delta_time", "distributions", "causal_diff")  # stems, one file per plots.formats
SCALING_TRACE_DIR = "resources/scaling/demo-{rows}"  # the canonical demo trace a scaling study of the demo bins
SCALING_RUN = "results/scaling/{trace}/{target}/ranks{ranks}"  # one binning run of the scaling study
SCALING_FIGURE = "results/scaling/{trace}/{target}/ranks_{ranklist}/scaling"  # stem; the rank list in the path
PAPER_FIGURE_DIR = "results/paper/{fig}"  # one figure of `snakemake paper` (config/paper.yaml)
PAPER_DEMO_TRACE = "resources/paper/{name}_ncu.csv"  # the stand-in for a PerfCounter dataset of the paper
DEMO_DIR = "resources/demo"  # the embedded demo set (`gpuvar demo-data`)
DEMO_FILES = (  # what `gpuvar demo-data` writes into DEMO_DIR (config/config.yaml's datasets read them)
    *(f"rank{rank}.sqlite" for rank in range(4)),
    "perfcounter_ncu.csv",
    "amd_rocprof.csv",
    "pair_baseline.sqlite",
    "pair_candidate.sqlite",
    "kineto_rank0.json.gz",
    "kineto_rank1.json.gz",
    "demo.json",
)


def ingest_file(name: str, folder: str = INGEST_DIR) -> str:
    """A file of an ingest folder, e.g. ingest_file(KERNELS_TABLE) -> results/ingest/{dataset}/kernels.parquet."""
    return f"{folder}/{name}"


def mapping_files() -> list[str]:
    """The files normalize_columns applies (Table 1, the canonical schema): its inputs, so that editing one
    reruns normalization (and what follows) but never the read of the profiler file."""
    from importlib import resources

    data = resources.files("gpuvar.data")
    return [str(data.joinpath(name)) for name in ("table1.csv", "canonical_schema.csv")]


def folder(path) -> str:
    """The folder a declared output file lives in (the commands take output folders)."""
    return str(PurePath(str(path)).parent)


def stem(data_file) -> str:
    """A figure's output stem: its CSV's path without .csv (the figures are stem.<format>)."""
    return str(data_file).removesuffix(".csv")


def bin_file(name: str, folder: str = BIN_DIR) -> str:
    """A file of a binning output folder, e.g. bin_file(BIN_REPORT) -> results/bin/{dataset}/{target}/bin.json."""
    return f"{folder}/{name}"
