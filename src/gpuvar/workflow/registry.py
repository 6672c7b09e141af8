"""The workflow's datasets, built once from config/config.yaml and config/paper.yaml.

common.smk builds one Registry before any rule is defined, so every rule file sees the same datasets and the
`{dataset}` wildcard allows all of them, whatever order the Snakefile includes the rule files in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gpuvar.config import Config, Dataset, check_sources, validate_config
from gpuvar.layout import (
    BIN_REPORT,
    CAUSAL_DIR,
    CHECKS_TABLE,
    FINDINGS_DIR,
    FINDINGS_HTML,
    FINDINGS_PAGE,
    FINDINGS_RECORD,
    INGEST_REPORT,
    KERNELS_TABLE,
    RANK_INGEST_DIR,
    RANKS_DIR,
    RANKS_PAGE,
    RANKS_RECORD,
    bin_file,
    ingest_file,
)


@dataclass(frozen=True)
class Registry:
    cfg: Config
    datasets: dict[str, Dataset]  # config.yaml's, then the paper's that differ or are new
    paper: object | None = None  # gpuvar.plots.paper.PaperConfig when config/paper.yaml exists
    paper_names: dict[str, str] = field(default_factory=dict)  # paper dataset name -> workflow dataset name

    @property
    def analyses(self) -> list[tuple[str, str]]:
        """(dataset, target) of config.yaml's datasets: what `snakemake` (rule all) analyses."""
        return [(d.name, target) for d in self.cfg.datasets for target in d.targets]

    # input functions of the rules (Snakemake calls them with the job's wildcards)
    def source(self, wildcards) -> str | list[str]:
        """The profiler file or folder of a dataset (an output of make_demo_data for the demo), or the files of
        one trace (a kernel trace and its counter passes)."""
        return self.datasets[wildcards.dataset].source

    def rank_source(self, wildcards) -> str:
        """The file of one rank of a merged dataset (ranks are the positions in its source list)."""
        return self.datasets[wildcards.dataset].sources[int(wildcards.rank)]

    def ingest_mb(self, wildcards, attempt: int) -> int:
        """mem_mb of a dataset's ingest jobs (read and normalize): what its trace holds in memory
        (gpuvar.workflow.memory.ingest_mb), twice that on the retry after a failure."""
        from gpuvar.workflow.memory import ingest_mb

        dataset = self.datasets[wildcards.dataset]
        return ingest_mb(dataset.source, dataset.format, attempt)

    def rank_ingest_mb(self, wildcards, attempt: int) -> int:
        """ingest_mb of one rank file of a merged dataset."""
        from gpuvar.workflow.memory import ingest_mb

        return ingest_mb(self.rank_source(wildcards), self.datasets[wildcards.dataset].format, attempt)

    def rank_reports(self, wildcards) -> list[str]:
        """The per-rank ingest reports a merged dataset combines, in rank order."""
        marker = ingest_file(INGEST_REPORT, RANK_INGEST_DIR)
        ranks = range(len(self.datasets[wildcards.dataset].sources))
        return [marker.format(dataset=wildcards.dataset, rank=rank) for rank in ranks]

    @property
    def findings_datasets(self) -> list[str]:
        """config.yaml's datasets: each gets a findings folder (results/findings/{dataset})."""
        return [d.name for d in self.cfg.datasets]

    def findings_inputs(self, wildcards) -> dict[str, str]:
        """A dataset's kernels table, and its kernel_variability causal folder when that target is analysed."""
        inputs = {"kernels": ingest_file(KERNELS_TABLE).format(dataset=wildcards.dataset)}
        if (wildcards.dataset, "kernel_variability") in self.analyses:
            inputs["causal"] = CAUSAL_DIR.format(dataset=wildcards.dataset, target="kernel_variability")
        return inputs

    @property
    def ranks_datasets(self) -> list[str]:
        """config.yaml's datasets combined from rank files (`merge: true`): each gets a per-rank analysis."""
        return [d.name for d in self.cfg.datasets if d.merge]

    def ranks_inputs(self, wildcards) -> dict[str, list[str]]:
        """Each rank's ingest report (its folder is read; waits from NCCL kernels, else copies; docs/ranks.md),
        and the rank files when they are Kineto traces: their host collective ops give exact waits, and each
        rank's ingest folder keeps them, so the traces name the ranks and are not read again (`--ingested`).
        Never the merged table, so each process of the MPI job reads only its share of the ranks."""
        sources = [str(s) for s in self.datasets[wildcards.dataset].sources]
        if all(s.endswith((".json", ".json.gz")) for s in sources):
            return {"traces": sources, "reports": self.rank_reports(wildcards)}
        return {"reports": self.rank_reports(wildcards)}

    def ranks_processes(self, wildcards) -> int:
        """MPI processes of a dataset's rank analysis: binning.ranks, at most one per rank file."""
        return max(1, min(self.cfg.binning.ranks, len(self.datasets[wildcards.dataset].sources)))

    def analysis_outputs(self) -> list[str]:
        """Everything `all` analyses: per dataset and target the binning and causal results, and the checks."""
        outputs = []
        for dataset, target in self.analyses:
            outputs.append(bin_file(BIN_REPORT).format(dataset=dataset, target=target))
            outputs.append(CAUSAL_DIR.format(dataset=dataset, target=target))
        ranks = [RANKS_DIR.format(dataset=name) for name in self.ranks_datasets]
        return outputs + [CHECKS_TABLE, f"{FINDINGS_DIR}/{FINDINGS_RECORD}", *ranks]

    def group_by(self, dataset: str) -> str:
        """The column a dataset's causal analysis groups by: its group_by, or 'none' (one whole-dataset graph)
        when causal.per_group is off."""
        return self.datasets[dataset].group_by if self.cfg.causal.per_group else "none"

    def causal_rows(self, input) -> str:
        """The rows `gpuvar causal` fits (causal.rows): the top-k bins' rows, or the random bins' rows."""
        return input.rows if self.cfg.causal.rows == "top_k" else input.sample

    def random_rows(self, input) -> str | None:
        """The random bins' rows the top-k fit is compared with (--random-rows); None when those are the fit."""
        return input.sample if self.cfg.causal.rows == "top_k" else None

    def names(self, merged: bool | None = None) -> list[str]:
        """Dataset names; merged=True/False: only datasets combined from rank files, or only single files."""
        return [n for n, d in self.datasets.items() if merged is None or d.merge == merged]


def names_regex(names) -> str:
    """Alternation of the names for a wildcard constraint; a pattern matching nothing when there are none."""
    return "|".join(re.escape(name) for name in sorted(names)) or "(?!)"


def build_registry(config: dict, basedir: str | Path, paper_yaml: str | Path | None = None) -> Registry:
    """Validate the workflow config (ConfigError: one line naming the key), check its sources exist, and add
    the paper's datasets when `paper_yaml` is a file."""
    from gpuvar.plots.paper import load_paper_config, merge_datasets

    basedir = Path(basedir)
    cfg = validate_config(config, basedir)
    check_sources(cfg, basedir)
    cfg = with_folder_sources(cfg, basedir)
    datasets = {d.name: d for d in cfg.datasets}
    if paper_yaml is None or not Path(paper_yaml).is_file():
        return Registry(cfg, datasets)
    paper = load_paper_config(paper_yaml, basedir)
    merged, names = merge_datasets(paper, datasets)
    return Registry(cfg, merged, paper, names)


def with_folder_sources(cfg: Config, basedir: Path) -> Config:
    """A dataset whose source is one folder that no reader claims whole gets the trace files directly in it, found
    by content (gpuvar.ingest.folders), as its source: with merge: true, its ranks (in natural name order); else its
    one trace (or a kernel trace with its counter passes). Why here: the rules' inputs are then the traces, not a
    folder whose notes would rerun the ingest, and a folder of several traces given as one trace is a ConfigError
    before any job, not a failed read job."""
    from gpuvar.config import WORKFLOW_SOURCES
    from gpuvar.errors import ConfigError, InputError
    from gpuvar.ingest.counter_passes import group_files
    from gpuvar.ingest.folders import claimed_whole, listed, open_folder

    datasets = []
    for i, d in enumerate(cfg.datasets):
        given = d.sources[0] if len(d.sources) == 1 else None
        path = None if given is None else Path(given) if Path(given).is_absolute() else basedir / given
        if path is None or Path(given).as_posix().startswith(WORKFLOW_SOURCES) or claimed_whole(path, d.format):
            datasets.append(d)
            continue
        try:
            traces = open_folder(path, d.format).traces
        except InputError as exc:
            raise ConfigError(f"datasets[{i}].source: {given!r} of dataset {d.name!r}: {exc.reason}") from None
        files = [str(Path(given) / t.name) for t in traces]
        if not d.merge and len(group_files(traces)) > 1:
            names = listed([t.name for t in traces])
            raise ConfigError(
                f"datasets[{i}].source: {given!r} of dataset {d.name!r} holds {len(traces)} traces ({names}): "
                "name one of them, or set merge: true to analyse them as the ranks of one job"
            )
        datasets.append(d.model_copy(update={"source": files if d.merge or len(files) > 1 else files[0]}))
    return cfg.model_copy(update={"datasets": datasets})


def print_run_summary(
    ranks: list[str] = (),
    findings: str | Path = f"{FINDINGS_DIR}/{FINDINGS_RECORD}",
    checks: str | Path = CHECKS_TABLE,
) -> None:
    """After a run: the top findings of every dataset, the rank findings of every multi-rank dataset (as
    `gpuvar explain` prints them; `ranks`: those datasets' names), then (secondary) how many causal graphs failed an assumption check, and last
    where the findings page is, as a full path: `make run` works in runs/NAME/, so a path relative to the run
    would name the demo's page from where the user stands."""
    import json

    from gpuvar.findings.run import console_summary
    from gpuvar.text_safety import plain

    path = Path(findings)
    if not path.is_file():
        return
    records = json.loads(path.read_text()).get("datasets", [])
    print("gpuvar: what was found (top 3 per dataset):")
    print(console_summary(records, top=3))
    for dataset in ranks:
        record = Path(RANKS_DIR.format(dataset=dataset)) / RANKS_RECORD
        if not record.is_file():
            continue
        print(f"gpuvar: ranks of {plain(dataset)} ({record.with_name(RANKS_PAGE).resolve()}):")
        for line in json.loads(record.read_text()).get("findings", []):
            print(f"  ranks: {plain(line)}")
    flagged = flagged_graphs(checks)
    if flagged:
        print(
            f"gpuvar: {flagged[0]} of {flagged[1]} causal graphs failed an assumption check: read those graphs as "
            f"hypotheses ({Path(checks).resolve()}, docs/causal.md)"
        )
    print(f"gpuvar: every kernel, its verdict and what to do: {path.with_name(FINDINGS_PAGE).resolve()}")
    print(f"gpuvar: the same page in a browser, figures embedded: {path.with_name(FINDINGS_HTML).resolve()}")


def flagged_graphs(checks: str | Path = CHECKS_TABLE) -> tuple[int, int] | None:
    """(graphs that failed an assumption check, graphs fitted) from checks.tsv; None when it is absent or none
    failed."""
    import csv

    path = Path(checks)
    if not path.is_file():
        return None
    with path.open(newline="") as handle:
        trusted = [row.get("trusted") for row in csv.DictReader(handle, delimiter="\t")]
    failed = trusted.count("no")
    return (failed, failed + trusted.count("yes")) if failed else None
