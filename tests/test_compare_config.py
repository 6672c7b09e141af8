"""Config key `comparisons`: entries name two datasets; a wrong entry stops the run with one line naming it."""

from __future__ import annotations

import pytest
from conftest import REPO

from gpuvar.config import read_yaml_mapping, validate_config
from gpuvar.errors import ConfigError
from gpuvar.workflow.compare import comparison_inputs, comparison_outputs, folders

DATASETS = [
    {"name": "a", "source": "a.sqlite", "targets": ["kernel_variability", "memory_stall"]},
    {"name": "b", "source": "b.sqlite"},
]


def config(*comparisons):
    return validate_config({"datasets": DATASETS, "comparisons": list(comparisons)})


def test_valid_comparisons_and_default_none():
    cfg = config({"name": "a_vs_b", "baseline": "a", "candidate": "b"})
    assert [(c.name, c.baseline, c.candidate) for c in cfg.comparisons] == [("a_vs_b", "a", "b")]
    assert validate_config({"datasets": DATASETS}).comparisons == []


@pytest.mark.parametrize(
    "entries, message",
    [
        ([{"name": "a vs b", "baseline": "a", "candidate": "b"}], "comparisons: entry 0: name 'a vs b' must start"),
        ([{"name": "x", "baseline": "a", "candidate": "b"}] * 2, "entry 1: name 'x' is repeated"),
        (
            [{"name": "x", "baseline": "a", "candidate": "zz"}],
            "entry 0 (x): candidate 'zz' is not a dataset name; datasets: a, b",
        ),
        ([{"name": "x", "baseline": "a", "candidate": "a"}], "baseline and candidate are the same dataset 'a'"),
        ([{"name": "x", "baseline": "a"}], "comparisons[0].candidate: required key is missing"),
        ([{"name": "x", "baseline": "a", "candidate": "b", "target": "t"}], "comparisons[0].target: unknown key"),
    ],
)
def test_bad_comparisons_are_one_line_errors(entries, message):
    with pytest.raises(ConfigError) as err:
        config(*entries)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_workflow_inputs_use_the_targets_both_datasets_analyse():
    cfg = config({"name": "ab", "baseline": "a", "candidate": "b"})
    datasets = {d.name: d for d in cfg.datasets}
    inputs = comparison_inputs(cfg.comparisons[0], datasets)
    assert inputs["baseline_kernels"] == "results/ingest/a/kernels.parquet"
    assert inputs["candidate_bins"] == ["results/bin/b/kernel_variability/bin.json"]  # memory_stall: a only
    assert folders(inputs["baseline_bins"]) == ["results/bin/a/kernel_variability"]  # what --baseline-bin reads
    assert "results/compare/ab/forest.png" in comparison_outputs(cfg)


def test_demo_config_compares_the_planted_pair():
    cfg = validate_config(read_yaml_mapping(REPO / "config" / "config.yaml"), REPO)
    names = {d.name for d in cfg.datasets}
    assert [(c.baseline, c.candidate) for c in cfg.comparisons] == [("pair_baseline", "pair_candidate")]
    assert {"pair_baseline", "pair_candidate"} <= names
