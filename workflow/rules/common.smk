import re
import sys
from pathlib import Path

from gpuvar.workflow_env import put_own_bin_first_on_path

put_own_bin_first_on_path()

from gpuvar.config import check_sources, validate_config
from gpuvar.errors import ConfigError

try:
    CFG = validate_config(config, Path.cwd())
    check_sources(CFG, Path.cwd())
except ConfigError as error:
    sys.exit(f"gpuvar: {error}")

DATASETS = {d.name: d for d in CFG.datasets}
ANALYSES = [(d.name, target) for d in CFG.datasets for target in d.targets]
ENV = "../../envs/gpuvar.yaml"


wildcard_constraints:
    dataset="|".join(re.escape(name) for name in DATASETS),
    target="kernel_variability|memory_stall",


def dataset_source(wildcards):
    """The profiler file or folder of a dataset (an output of make_demo_data for the demo)."""
    return DATASETS[wildcards.dataset].source


def rank_source(wildcards):
    """The file of one rank of a merged dataset (ranks are the positions in its source list)."""
    return DATASETS[wildcards.dataset].sources[int(wildcards.rank)]


def rank_reports(wildcards):
    """The per-rank ingest reports a merged dataset combines, in rank order."""
    n = len(DATASETS[wildcards.dataset].sources)
    return [
        f"results/ingest/{wildcards.dataset}/ranks/{rank}/ingest.json"
        for rank in range(n)
    ]


def names_regex(names):
    """Alternation of the names for a wildcard constraint; a pattern matching nothing when there are none."""
    return "|".join(re.escape(name) for name in sorted(names)) or "(?!)"


def dataset_format(wildcards):
    return DATASETS[wildcards.dataset].format


def feature_option(features):
    return "auto" if features == "auto" else ",".join(features)


def sample_bins_option(cfg):
    """Random bins whose rows gpuvar bin writes: as many as top-k (to compare with), or all bins (-1)."""
    return -1 if cfg.causal.rows == "all" else cfg.binning.top_k


def causal_rows_options(cfg, input):
    """Rows the causal step analyses and, for the top-k bins, the random bins it compares them with (a list:
    the rule quotes each item)."""
    if cfg.causal.rows == "top_k":
        return [input.rows, "--random-rows", input.sample]
    return [input.sample]


def analysis_outputs():
    """Everything `all` builds: per dataset and target, the binning and causal results."""
    outputs = []
    for dataset, target in ANALYSES:
        outputs.append(f"results/bin/{dataset}/{target}/bin.json")
        outputs.append(f"results/causal/{dataset}/{target}")
    return outputs + ["results/causal/checks.tsv"]


def print_flagged_graphs(path):
    """After a run: say how many causal graphs failed their assumption checks (results/causal/checks.tsv)."""
    if not Path(path).is_file():
        return
    rows = Path(path).read_text().splitlines()[1:]
    trusted = [r.split("\t")[4] for r in rows]
    flagged = trusted.count("no")
    if flagged:
        print(
            f"gpuvar: {flagged} of {flagged + trusted.count('yes')} causal graphs failed an assumption check;"
            f" read them as hypotheses (list: {path}, docs/causal.md)"
        )
