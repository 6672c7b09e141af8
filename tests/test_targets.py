"""Targets: kernel_variability against the whole-trace group mean, the documented memcpy link rule, and that a
target is one entry of gpuvar.targets.TARGETS (a planted target added there is computed, accepted and analysed
under its own name)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpuvar import targets as T
from gpuvar.errors import GpuvarError


def test_kernel_variability_is_duration_minus_group_mean():
    durations = np.array([10, 20, 30, 100, 300], dtype=np.float64)
    codes = np.array([0, 0, 0, 1, 1])
    means = T.group_means({"a": 60, "b": 400}, {"a": 3, "b": 2})
    rows = T.Rows(durations, codes, np.array([means["a"], means["b"]]))
    out = T.TARGETS["kernel_variability"].compute(rows, None)
    np.testing.assert_array_equal(out, [-10, 0, 10, -100, 100])
    np.testing.assert_array_equal(durations, [10, 20, 30, 100, 300])  # out=None: a new array


def test_group_sums_are_exact_beyond_float_precision():
    """The binning job's per-group duration sums (the means' numerators) stay exact where float64 would round."""
    from gpuvar.binning.read import _add_group_sums

    big = np.array([2**62 // 4, 2**62 // 4, 3], dtype=np.int64)  # float64 bincount would round these
    empty = np.zeros(0, np.int64)
    sums, counts = _add_group_sums(empty, empty, np.zeros(3, np.int32), big, big.astype(np.float64), 1)
    assert sums.tolist() == [2**62 // 2 + 3] and counts.tolist() == [3]


def test_launch_config_group_key_separates_configurations():
    assert T.group_key("k", "g1 b1", "kernel") == "k"
    assert T.group_key("k", "g1 b1", "launch_config") != T.group_key("k", "g2 b1", "launch_config")


def _keys(dev, stream, link="stream"):
    return T.link_key(np.array(dev, float), np.array(stream, float), link)


def test_link_latest_copy_on_same_stream_started_at_or_before_kernel():
    # copies: stream 7 at t=0 and t=50, stream 8 at t=40; two copies share t=50 on stream 7 (last one wins)
    m_key = _keys([0, 0, 0, 0], [7, 8, 7, 7])
    m_start = np.array([0, 40, 50, 50])
    # kernels: s7@10 -> copy 0; s7@50 -> copy 3 (ties: last in file order); s8@30 -> none; s8@40 -> copy 1;
    # s9@100 -> none (no copy on that stream); unknown stream -> none
    k_key = _keys([0, 0, 0, 0, 0, 0], [7, 7, 8, 8, 9, np.nan])
    k_start = np.array([10, 50, 30, 40, 100, 100])
    link = T.link_latest(k_key, k_start, m_key, m_start)
    np.testing.assert_array_equal(link, [0, 3, -1, 1, -1, -1])
    copy_duration = np.array([30.0, 1, 2, 90])
    linked = {"linked_copy_duration": np.where(link >= 0, copy_duration[link], np.nan)}  # as binning.link does
    rows = T.Rows(np.array([100.0, 100, 5, 5, 5, 5]), linked=linked)
    stall = T.TARGETS["memory_stall"].compute(rows, None)
    np.testing.assert_array_equal(stall[[0, 1, 3]], [70, 10, 4])
    assert np.isnan(stall[[2, 4, 5]]).all()


def test_device_link_ignores_the_stream():
    m_key = _keys([0, 1], [7, 7], "device")
    k_key = _keys([0, 0, 1], [9, 9, 3], "device")
    link = T.link_latest(k_key, np.array([5, 100, 100]), m_key, np.array([10, 50]))
    np.testing.assert_array_equal(link, [-1, 0, 1])


def test_unknown_choice_is_a_one_line_error():
    with pytest.raises(GpuvarError, match="unknown link 'correlation'"):
        T.check_choice("correlation", T.LINKS, "link")


def test_every_target_the_config_accepts_is_described_once():
    """The config's target names are the Target objects; only memory_stall needs a copy link, and a column target
    of a paper dataset is a plain column that `gpuvar bin` does not compute."""
    from gpuvar.config import Dataset
    from gpuvar.targets import LINKED_COPY_COLUMNS, target

    assert Dataset(name="d", source="x", targets=list(T.TARGETS)).targets == ["kernel_variability", "memory_stall"]
    assert {t: target(t).links_copies for t in T.TARGETS} == {"kernel_variability": False, "memory_stall": True}
    assert [column for column, _ in target("memory_stall").excluded_features] == ["linked_copy_duration"]
    assert set(dict(target("kernel_variability").excluded_features)) == set(LINKED_COPY_COLUMNS)
    assert target("perf_variability").links_copies is False and target("perf_variability").compute is None
    assert {t.unit for t in T.TARGETS.values()} == {"ns"}


@pytest.mark.parametrize("name", ["kernel_variability", "memory_stall"])
def test_a_target_can_be_written_over_the_durations(name):
    """The binning job writes the target over the duration array it read (out=rows.duration): same values as into
    a fresh array, in slices as the job computes them."""
    rng = np.random.default_rng(2)
    duration = rng.integers(1, 10_000, size=1000).astype(np.float64)
    codes = rng.integers(0, 4, size=1000)
    means = rng.uniform(1, 10_000, size=4)
    copy = np.where(rng.random(1000) < 0.2, np.nan, rng.uniform(1, 10_000, size=1000))
    fresh = T.TARGETS[name].compute(T.Rows(duration, codes, means, {"linked_copy_duration": copy}), None)
    buffer = np.empty(300)
    for a in range(0, 1000, 300):
        sl = slice(a, a + 300)
        rows = T.Rows(duration[sl], codes[sl], means, {"linked_copy_duration": copy[sl]}, buffer)
        T.TARGETS[name].compute(rows, duration[sl])
    np.testing.assert_array_equal(duration, fresh)


# ---------------------------------------------------------------- adding a target is one entry


def duration_ratio(rows: T.Rows, out: np.ndarray | None = None) -> np.ndarray:
    """Planted target: duration / the mean duration of the row's group (unitless, 1 on average per group)."""
    return np.divide(rows.duration, rows.group_mean(), out=out)


PLANTED = T.Target(
    "duration_ratio", "", False, (("grid_x", "planted: left out of duration_ratio's graphs"),), duration_ratio
)


@pytest.fixture
def planted_target(monkeypatch) -> T.Target:
    """duration_ratio added as the one entry a new target is."""
    monkeypatch.setitem(T.TARGETS, PLANTED.name, PLANTED)
    return PLANTED


def test_binning_computes_a_new_target_under_its_name(planted_target, tmp_path):
    """`gpuvar bin --target duration_ratio` (one rank, in this process) writes duration / the kernel's whole-trace
    mean duration as the column duration_ratio, and its per-bin statistics, not kernel_variability's."""
    import json

    import pyarrow.parquet as pq

    from gpuvar.cli import main
    from gpuvar.demo.canonical_writer import write_canonical_demo

    write_canonical_demo(tmp_path / "in", 4000, seed=3, workers=1, chunk_rows=1024)
    kernels = tmp_path / "in" / "kernels.parquet"
    out = tmp_path / "out"
    args = ["bin", str(kernels), "--target", "duration_ratio", "--bin-width", "2ms", "--top-k", "3", "-o", str(out)]
    assert main(args) == 0
    k = pq.read_table(kernels, columns=["kernel_name", "launch_id", "start", "duration"]).to_pandas()
    k["ratio"] = k["duration"] / k.groupby("kernel_name")["duration"].transform("mean")
    assert json.loads((out / "bin.json").read_text())["target"] == "duration_ratio"
    rows = pq.read_table(out / "topk_rows.parquet").to_pandas()
    assert "duration_ratio" in rows and "kernel_variability" not in rows and len(rows) > 0
    expected = rows[["launch_id"]].merge(k, on="launch_id", how="left")["ratio"]
    np.testing.assert_allclose(rows["duration_ratio"], expected, rtol=1e-12)
    bins = pq.read_table(out / "bins.parquet").to_pandas().set_index("bin")
    k["bin"] = (k["start"] - k["start"].min()) // 2_000_000
    np.testing.assert_allclose(bins["mean"], k.groupby("bin")["ratio"].mean().loc[bins.index], rtol=1e-12)


def test_the_config_accepts_a_new_target_once_it_is_an_entry(monkeypatch, tmp_path):
    """A config naming duration_ratio is refused until it is an entry of TARGETS, then accepted (datasets' targets
    and scaling.target), and the configuration reference lists it."""
    from gpuvar.config import validate_config
    from gpuvar.config_reference import markdown
    from gpuvar.errors import ConfigError

    raw = {
        "datasets": [{"name": "d", "source": "x", "targets": ["kernel_variability", "duration_ratio"]}],
        "scaling": {"target": "duration_ratio"},
    }
    refused = "datasets[0].targets[1]: 'duration_ratio' is not allowed; allowed: 'kernel_variability' or 'memory_stall'"
    with pytest.raises(ConfigError, match=re.escape(refused)):
        validate_config(raw, tmp_path)
    monkeypatch.setitem(T.TARGETS, PLANTED.name, PLANTED)
    cfg = validate_config(raw, tmp_path)
    assert (
        cfg.datasets[0].targets == ["kernel_variability", "duration_ratio"] and cfg.scaling.target == "duration_ratio"
    )
    assert "'kernel_variability' \\| 'memory_stall' \\| 'duration_ratio'" in markdown("scaling")


def test_the_causal_step_leaves_out_a_new_targets_excluded_features(planted_target):
    """features: auto leaves grid_x out of duration_ratio's graphs (its excluded feature, with the reason) and
    duration_ratio out of every other target's (a target column)."""
    import pandas as pd

    from gpuvar.causal.prepare import select_features
    from gpuvar.plots.style import with_unit

    rng = np.random.default_rng(1)
    df = pd.DataFrame({c: rng.normal(size=50) for c in ("grid_x", "block_x", "duration_ratio", "kernel_variability")})
    chosen, rejected = select_features(df, "duration_ratio", None, "auto")
    assert chosen == ["block_x"] and rejected == {"grid_x": "planted: left out of duration_ratio's graphs"}
    chosen, rejected = select_features(df, "kernel_variability", None, "auto")
    assert chosen == ["grid_x", "block_x"] and rejected == {}
    assert (
        with_unit("duration_ratio") == "duration_ratio" and with_unit("kernel_variability") == "kernel_variability (ns)"
    )
