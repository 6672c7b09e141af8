"""Config validation: every invalid value is rejected at start-up with its key path, value and what is allowed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from gpuvar.config import read_yaml_mapping, validate_config
from gpuvar.errors import ConfigError
from gpuvar.units import parse_bin_width

BASE = {"datasets": [{"name": "a", "source": "trace.sqlite"}]}


def with_(path: str, value):
    """BASE with one key (dotted path, [i] for list items) set to value."""
    import copy

    cfg = copy.deepcopy(BASE)
    node, parts = cfg, path.replace("[0]", ".0").split(".")
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    node[int(parts[-1]) if parts[-1].isdigit() else parts[-1]] = value
    return cfg


@pytest.mark.parametrize(
    "path, value, expected",
    [
        ("datasets[0].format", "nvprof", "datasets[0].format: 'nvprof' is not allowed; allowed: 'auto'"),
        ("datasets[0].targets", ["speed"], "datasets[0].targets[0]: 'speed' is not allowed"),
        ("datasets[0].targets", [], "datasets[0].targets: must list at least one"),
        ("datasets[0].group_by", "color", "datasets[0].group_by: 'color' is not allowed"),
        ("datasets[0].name", "bad name/", "datasets[0].name: must start with a letter or digit"),
        ("datasets[0].features", 3, "datasets[0].features"),
        ("datasets[0].colour", "x", "datasets[0].colour: unknown key"),
        ("demo.enabled", "maybe", "demo.enabled"),
        ("demo.seed", "x", "demo.seed"),
        ("demo.rows", 0, "demo.rows: Input should be greater than 0 (got 0)"),
        ("ingest.keep_vendor_columns", "some", "ingest.keep_vendor_columns"),
        ("ingest.drop_columns", True, "ingest.drop_columns: unknown key"),
        ("targets.variability_group", "name", "targets.variability_group: 'name' is not allowed"),
        ("targets.memcpy_link", "correlation", "targets.memcpy_link: 'correlation' is not allowed"),
        ("binning.bin_width", "10 parsecs", "binning.bin_width: bin width '10 parsecs' is not a positive number"),
        ("binning.bin_width", "-5ms", "binning.bin_width"),
        ("binning.top_k", 0, "binning.top_k: Input should be greater than 0"),
        ("binning.ranks", 0, "binning.ranks"),
        ("binning.workers_per_rank", 0, "binning.workers_per_rank"),
        ("causal.bootstrap", -1, "causal.bootstrap"),
        ("causal.min_rows", 1, "causal.min_rows"),
        ("causal.engine", "kernel", "causal.engine: 'kernel' is not allowed; allowed: 'fast' or 'lingam'"),
        ("causal.workers", 0, "causal.workers"),
        ("causal.per_group", "sometimes", "causal.per_group"),
        ("plots.formats", ["gif"], "plots.formats[0]: 'gif' is not allowed"),
        ("plots.min_variance_share", 1.2, "plots.min_variance_share"),
        ("plots.min_probability", 2, "plots.min_probability"),
        ("plots.dpi", 10, "plots.dpi"),
        ("scaling.ranks", [0], "scaling.ranks: must be a non-empty list"),
        ("scaling.dataset", "nope", "scaling.dataset 'nope' is not one of the datasets"),
        ("scaling.rows", 0, "scaling.rows"),
        ("scaling.target", "x", "scaling.target"),
        ("unknown_section", {}, "unknown_section: unknown key"),
    ],
)
def test_every_invalid_value_is_named(path, value, expected):
    with pytest.raises(ConfigError) as err:
        validate_config(with_(path, value))
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_and_duplicate_datasets():
    with pytest.raises(ConfigError, match="datasets: required key is missing"):
        validate_config({})
    with pytest.raises(ConfigError, match="repeated: a"):
        validate_config({"datasets": BASE["datasets"] * 2})
    with pytest.raises(ConfigError, match="datasets"):
        validate_config({"datasets": []})


def test_glob_source_becomes_one_dataset_per_file(tmp_path):
    for stem in ("run2", "run1"):
        (tmp_path / f"{stem}.sqlite").write_bytes(b"")
    cfg = validate_config({"datasets": [{"name": "job", "source": "*.sqlite"}]}, tmp_path)
    assert [(d.name, d.source) for d in cfg.datasets] == [("job_run1", "run1.sqlite"), ("job_run2", "run2.sqlite")]
    with pytest.raises(ConfigError, match="matches no file"):
        validate_config({"datasets": [{"name": "job", "source": "*.nothing"}]}, tmp_path)


def test_bin_width_units():
    assert parse_bin_width("10ms") == (10_000_000, "ns")
    assert parse_bin_width("2.5 us") == (2_500, "ns")
    assert parse_bin_width("50") == (50, "launches")
    with pytest.raises(ValueError):
        parse_bin_width("0ms")


def test_shipped_configs_are_valid():
    for path in sorted((REPO / "config").glob("*.yaml")):
        validate_config(read_yaml_mapping(path), REPO)


@pytest.mark.snakemake  # starts Snakemake: in `make test`, not `make test-fast`
def test_snakemake_stops_on_bad_config_with_one_line(tmp_path):
    bad = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    bad["binning"]["top_k"] = -3
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml.safe_dump(bad))
    proc = subprocess.run(
        [str(Path(REPO, ".venv/bin/snakemake")), "-n", "--configfile", str(cfg)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "binning.top_k: Input should be greater than 0 (got -3)" in proc.stderr
    assert "Traceback" not in proc.stderr
