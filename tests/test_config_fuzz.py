"""Config fuzzer: random values of the wrong type, size and sign for every field. Each is rejected at start-up on
one line naming the key, or accepted -- and then every CLI the workflow hands it to accepts it too (no value that
validates and then fails later), with no shell-unsafe text. Bounded time per example."""

from __future__ import annotations

import copy
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuvar.binning.cli import workflow_arguments
from gpuvar.config import Config, validate_config
from gpuvar.errors import ConfigError, GpuvarError

EXAMPLES = int(os.environ.get("GPUVAR_FUZZ_EXAMPLES", "40")) * 10
BASE = {"datasets": [{"name": "a", "source": "trace.sqlite"}]}
# every leaf of the config (list items as [0])
FIELDS = [
    "demo.enabled",
    "demo.seed",
    "demo.rows",
    "datasets[0].name",
    "datasets[0].source",
    "datasets[0].format",
    "datasets[0].targets",
    "datasets[0].targets[0]",
    "datasets[0].group_by",
    "datasets[0].features",
    "datasets[0].features[0]",
    "targets.variability_group",
    "targets.memcpy_link",
    "binning.bin_width",
    "binning.launch_bin_width",
    "binning.top_k",
    "binning.ranks",
    "binning.workers_per_rank",
    "binning.features",
    "binning.features[0]",
    "causal.seed",
    "causal.bootstrap",
    "causal.min_rows",
    "causal.engine",
    "causal.workers",
    "causal.per_group",
    "causal.rows",
    "causal.prior_knowledge",
    "causal.collinear_threshold",
    "plots.formats",
    "plots.formats[0]",
    "plots.min_variance_share",
    "plots.min_probability",
    "plots.parallel_features",
    "plots.parallel_features[0]",
    "plots.dpi",
    "scaling.dataset",
    "scaling.target",
    "scaling.ranks",
    "scaling.ranks[0]",
    "scaling.rows",
]
LIST_FIELDS = {
    "datasets[0].targets": ["kernel_variability"],
    "datasets[0].features": ["grid_x"],
    "binning.features": ["duration"],
    "plots.formats": ["svg"],
    "plots.parallel_features": ["grid_x"],
    "scaling.ranks": [1],
}

_numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**32, 2**63, 10**12, 4096, 65]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, -0.0, 1e20, 1e-30, float("nan")]),
)
_texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            " ",
            "10 ms",
            "0.5",
            "0.001ns",
            "1e30s",
            "-5ms",
            "10ms\n",
            "evil\n",
            "a b",
            "x$(touch /tmp/p)",
            "`id`",
            "a;b",
            "a,b",
            "'",
            '"',
            "\\",
            "auto",
            "none",
            "svg",
            "10ms",
            "99999999999999999999s",
            "1" * 400,
        ]
    ),
)
_scalars = st.one_of(st.none(), st.booleans(), _numbers, _texts)
VALUES = st.one_of(_scalars, st.lists(_scalars, max_size=4), st.dictionaries(_texts, _scalars, max_size=2))


def with_(path: str, value) -> dict:
    """A full config (every section present, lists one item long) with one leaf set to value."""
    cfg = copy.deepcopy(BASE)
    for key, default in LIST_FIELDS.items():
        if f"{key}[0]" == path:
            _set(cfg, key, list(default))
    _set(cfg, path, value)
    return cfg


def _set(cfg: dict, path: str, value) -> None:
    parts = path.replace("[0]", ".0").split(".")
    node = cfg
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
    last = parts[-1]
    node[int(last) if last.isdigit() else last] = value


def _accepted_by_the_clis(cfg: Config) -> None:
    """The values the workflow's rules pass from this config (each rule names them in `params:`; the same
    ConfigOption tables list them, tests/test_rules.py checks the two agree) parse with every command's own
    parser: a config that validates never fails at the command line."""
    from gpuvar.causal.cli import CONFIG_OPTIONS as CAUSAL
    from gpuvar.cli import build_parser
    from gpuvar.options import arguments, comma_list
    from gpuvar.plots.cli import EDGE_FILTERS, FIGURE_OPTIONS, PARALLEL_FEATURES
    from gpuvar.units import parse_bin_width
    from gpuvar.workflow.figures import report_format
    from gpuvar.workflow.registry import Registry

    parser = build_parser()
    reg = Registry(cfg, {d.name: d for d in cfg.datasets})
    for target in ("kernel_variability", "memory_stall"):
        parser.parse_args(["bin", "k.parquet", *workflow_arguments(reg.cfg, target), "-o", "out"])
    parse_bin_width(cfg.binning.bin_width)
    assert shlex.split(cfg.binning.bin_width) == [cfg.binning.bin_width]  # one shell token
    for d in cfg.datasets:
        dataset = ["--group-by", reg.group_by(d.name), "--features", comma_list(d.features)]
        parser.parse_args(
            ["causal", "r.parquet", "--target", d.targets[0], *dataset, *arguments(cfg, CAUSAL), "-o", "o"]
        )
        assert d.name == shlex.quote(d.name)  # used unquoted in paths and wildcards
    report_format(list(cfg.plots.formats))
    figure = arguments(cfg, FIGURE_OPTIONS)
    parser.parse_args(
        ["plot", "parallel", "r", "-o", "s", "--target", "t", *figure, *arguments(cfg, PARALLEL_FEATURES)]
    )
    parser.parse_args(["plot", "causal", "c", "-o", "o", "--which", "all", *figure, *arguments(cfg, EDGE_FILTERS)])
    names_lists = (cfg.binning.features, cfg.plots.parallel_features, *(d.features for d in cfg.datasets))
    for names in names_lists:
        if names != "auto":
            assert all("," not in n and n == n.strip() and n for n in names), names


@pytest.mark.timeout(300)
@settings(max_examples=EXAMPLES, deadline=2000, derandomize=True, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(FIELDS), value=VALUES)
def test_every_field_rejects_in_one_line_or_runs(field, value):
    raw = with_(field, value)
    try:
        cfg = validate_config(raw)
    except ConfigError as exc:
        msg = str(exc)
        assert "\n" not in msg and msg.startswith("invalid config: "), msg
        top = field.split(".")[0].split("[")[0]
        assert top in msg, (field, msg)  # names the key
        return
    except GpuvarError as exc:  # any other project error is a bug here
        raise AssertionError(f"{field}={value!r}: {type(exc).__name__}: {exc}") from None
    try:
        _accepted_by_the_clis(cfg)
    except (GpuvarError, SystemExit, AssertionError) as exc:
        raise AssertionError(f"{field}={value!r} validates, then fails at run time: {exc}") from None


@pytest.mark.snakemake  # starts Snakemake: in `make test`, not `make test-fast`
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "section, value, expected",
    [
        ("causal", {"seed": -1}, "causal.seed: Input should be greater than or equal to 0 (got -1)"),
        ("plots", {"formats": []}, "plots.formats: List should have at least 1 item"),
        ("binning", {"ranks": 4096}, "binning.ranks: Input should be less than or equal to 64 (got 4096)"),
        ("binning", {"bin_width": "1e30s"}, "binning.bin_width: bin width '1e30s' is not a positive number"),
        ("binning", {"workers_per_rank": 10**9}, "binning.workers_per_rank: Input should be less than or equal to 64"),
        ("causal", {"bootstrap": 10**12}, "causal.bootstrap: Input should be less than or equal to 10000"),
    ],
)
def test_snakemake_start_up_refuses_in_one_line(tmp_path, section, value, expected):
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    cfg[section].update(value)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    proc = subprocess.run(
        [snakemake, "-n", "--configfile", str(path)], cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode != 0
    assert f"gpuvar: invalid config: {expected}" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


@pytest.mark.snakemake  # starts Snakemake: in `make test`, not `make test-fast`
@pytest.mark.parametrize(
    "text, expected",
    [
        ("", "config/config.yaml: empty; expected a mapping"),
        ("- a\n- b\n", "config/config.yaml: expected a mapping of keys (demo, datasets, binning, ...), got a list"),
        ("datasets: [\n", "config/config.yaml: not valid YAML"),
    ],
)
def test_empty_or_non_mapping_config_names_the_file(tmp_path, text, expected):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(text)
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    proc = subprocess.run(
        [snakemake, "-n", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode != 0 and f"gpuvar: {expected}" in proc.stderr, proc.stderr[-2000:]


def test_missing_source_names_the_key_and_path(tmp_path):
    from gpuvar.config import check_sources

    cfg = validate_config({"datasets": [{"name": "x", "source": "traces/nope.sqlite"}]}, tmp_path)
    with pytest.raises(ConfigError, match=r"datasets\[0\]\.source: 'traces/nope.sqlite' of dataset 'x': no such file"):
        check_sources(cfg, tmp_path)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    cfg = validate_config({"datasets": [{"name": "x", "source": "loop"}]}, tmp_path)
    with pytest.raises(ConfigError, match="symlink loop"):
        check_sources(cfg, tmp_path)
    check_sources(validate_config({"datasets": [{"name": "d", "source": "resources/demo/rank0.sqlite"}]}), tmp_path)


@pytest.mark.parametrize(
    "path, value, expected",
    [  # issue #15 item 3, each value as reported
        ("binning.bin_width", "0.5", "binning.bin_width: bin width '0.5' without a unit is launches: a whole number"),
        (
            "binning.bin_width",
            "0.001ns",
            "binning.bin_width: bin width '0.001ns' must be a whole number of ns from 1ns",
        ),
        ("binning.bin_width", "2days", "binning.bin_width: bin width '2days' is not a positive number"),
        (
            "binning.bin_width",
            "100000s",
            "binning.bin_width: bin width '100000s' must be a whole number of ns from 1ns",
        ),
        ("binning.launch_bin_width", 1e20, "binning.launch_bin_width:"),
        (
            "binning.launch_bin_width",
            2 * 10**9,
            "binning.launch_bin_width: Input should be less than or equal to 1000000000",
        ),
        ("demo.seed", 2**32, "demo.seed: Input should be less than or equal to 4294967295"),
        ("binning.ranks", True, "binning.ranks: must be a number, not true/false"),
        ("plots.min_probability", float("nan"), "plots.min_probability:"),
        ("scaling.ranks", [1, 128], "scaling.ranks: must be a non-empty list of rank counts from 1 to 64"),
        ("datasets[0].name", "evil\n", "datasets[0].name: must start with a letter or digit"),
        ("datasets[0].source", "a\nb", "datasets[0].source: must be a path without newline"),
        ("binning.features", [], "binning.features: must list at least one column (or be 'auto')"),
        (
            "binning.features",
            ["duration$(touch /tmp/pwned)"],
            "binning.features: feature 'duration$(touch /tmp/pwned)'",
        ),
        ("plots.parallel_features", ["grid_x,grid_y"], "plots.parallel_features: feature 'grid_x,grid_y' is not"),
    ],
)
def test_reported_values_are_refused_with_key_value_and_allowed(path, value, expected):
    with pytest.raises(ConfigError) as err:
        validate_config(with_(path, value))
    assert expected in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_real_column_names_stay_valid():
    """Canonical names, raw ncu metrics, Omniperf counters and ncu details-page names pass the feature pattern."""
    from gpuvar.schema import canonical_columns

    names = [c.column for table in ("kernels", "memcpy") for c in canonical_columns(table)]
    names += [
        "dram__bytes.sum.per_second",
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "launch__registers_per_thread",
        "TCC_EA0_RDREQ[0]",
        "SQ_INSTS_VALU_ADD_F16",
        "TCC_HIT_sum",
        "Memory Throughput",
        "L1/TEX Hit Rate",
        "Duration",
        "linked_copy_kind",
    ]
    cfg = validate_config({**BASE, "binning": {"features": names}, "plots": {"parallel_features": names}})
    assert cfg.binning.features == names
    assert validate_config(with_("binning.bin_width", "10 ms")).binning.bin_width == "10ms"  # one shell token
