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
# beside the raw tables of a big export with CUDA API calls: each launch's op, step and numbering, and each step's
# threads, found by `gpuvar read` (gpuvar.ingest.nsys_host_parquet) for `gpuvar normalize` in pieces
HOST_KERNEL_FACTS = "host_kernel_facts.parquet"
HOST_COPY_FACTS = "host_copy_facts.parquet"
HOST_STEP_THREADS = "host_step_threads.parquet"
KERNELS_TABLE = "kernels.parquet"  # canonical kernel launches (docs/schema.md)
MEMCPY_TABLE = "memcpy.parquet"  # canonical copies; written always, with no rows when the source has none
# a trace's host collective ops (Kineto gloo:/nccl: ranges) for the rank analysis (gpuvar.ingest.host_collectives)
HOST_COLLECTIVES_TABLE = "host_collectives.parquet"
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
PLOTS_CAUSAL = "causal"  # the causal graphs' folder in a plots folder (`gpuvar plot causal`)
PARALLEL_FIGURE = "parallel"  # the parallel-coordinates figure's stem in a plots folder (+ its .csv)
TIMELINE_FIGURE = "timeline"  # the variability timeline's stem in a plots folder (+ its .csv)
SCALING_STEM = "scaling"  # the paper's scaling figure's stem in its figure folder (+ its .csv)
FINDINGS_FIGURES = "figures"  # the findings folder's figures: one PNG per finding on the page
CAUSAL_EDGES = "edges.csv"  # a causal group's edges (from, to, coefficient, sign)
CAUSAL_BOOTSTRAP_EDGES = "bootstrap_edges.csv"  # every edge's probability over the bin-bootstrap resamples
CAUSAL_CONTRIBUTIONS = "contributions.csv"  # each feature's share of the target's variance
CAUSAL_ADJACENCY = "adjacency.csv"  # the fitted adjacency matrix
CAUSAL_ORDER = "order.json"  # the causal order found
CAUSAL_GRAPH = "graph.graphml"  # the graph with its labels (networkx GraphML)
FIGURE_INDEX = "index.csv"  # `gpuvar plot causal`: one row per drawn group and its files
RANKS_PAGE_HTML = "ranks.html"  # ranks.md rendered, figures embedded
RANKS_STEPS = "steps.csv"  # the rank analysis per rank and step
RANKS_SITES = "call_sites.csv"  # every call site run by two ranks or more: its variance between ranks
COMPARE_PAGE = "compare.md"  # the comparison as a page

# --- sub-folders of `gpuvar explain`'s output (the workflow's stages, one folder each) -----------------------
EXPLAIN_INGEST = "ingest"
EXPLAIN_RANK_INGEST = "ranks"  # inside EXPLAIN_INGEST: one ingest folder per rank file, named by its position
EXPLAIN_BINS = "bin"
EXPLAIN_CAUSAL = "causal"
EXPLAIN_RANKS = "ranks"
EXPLAIN_FINDINGS = "findings"

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
SCALING_FIGURE = (
    f"results/scaling/{{trace}}/{{target}}/ranks_{{ranklist}}/{SCALING_STEM}"  # stem; the rank list in the path
)
PAPER_FIGURE_DIR = "results/paper/{fig}"  # one figure of `snakemake paper` (config/paper.yaml)
PAPER_DEMO_TRACE = "resources/paper/{name}_ncu.csv"  # the stand-in for a PerfCounter dataset of the paper
DEMO_DIR = "resources/demo"  # the embedded demo set (`gpuvar demo-data`)
DEMO_RANK_TRACES = tuple(f"rank{rank}.sqlite" for rank in range(4))  # four Nsight Systems ranks
DEMO_PERFCOUNTER = "perfcounter_ncu.csv"  # an Nsight Compute counter dataset
DEMO_AMD = "amd_rocprof.csv"  # a rocprof kernel trace
DEMO_PAIR = ("pair_baseline.sqlite", "pair_candidate.sqlite")  # a before/after pair with a planted change
DEMO_KINETO_RANKS = ("kineto_rank0.json.gz", "kineto_rank1.json.gz")  # a 2-rank PyTorch profiler job
DEMO_MANIFEST = "demo.json"  # the seed, the counts and the planted truth
DEMO_FILES = (*DEMO_RANK_TRACES, DEMO_PERFCOUNTER, DEMO_AMD, *DEMO_PAIR, *DEMO_KINETO_RANKS, DEMO_MANIFEST)


def table_file(table: str) -> str:
    """The Parquet file of one table in a raw or canonical folder: table_file("kernels") -> kernels.parquet."""
    return f"{table}.parquet"


def figure_data(stem) -> str:
    """The CSV a figure is drawn from, beside it: figure_data("out/parallel") -> out/parallel.csv."""
    return f"{stem}.csv"


def figure_file(stem, fmt: str) -> str:
    """One format of a figure: figure_file("out/forest", "png") -> out/forest.png."""
    return f"{stem}.{fmt}"


def group_edges_file(group: str) -> str:
    """The edges a drawn causal graph shows, beside its figure: group_edges_file("rank0__all__") -> ....edges.csv."""
    return f"{group}.edges.csv"


def group_graph_file(group: str) -> str:
    """The full graph copied beside a drawn causal graph."""
    return f"{group}.graphml"


def lock_file(folder_name: str) -> str:
    """The lock beside an output folder while a command writes it (gpuvar.atomic)."""
    return f".{folder_name}.lock"


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
