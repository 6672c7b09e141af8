"""Preparation: feature selection, dropped rows/columns with reasons, skip records for degenerate groups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuvar.causal.prepare import ALL_GROUP, group_slug, prepare_all, prepare_group, select_features
from gpuvar.errors import GpuvarError


def frame(n=60, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "kernel_name": np.where(np.arange(n) % 2 == 0, "k<a>(int)", "k_b"),
        "start": np.arange(n) * 10, "end": np.arange(n) * 10 + 5, "duration": np.full(n, 5),
        "correlation_id": np.arange(n), "grid_x": rng.integers(1, 64, n).astype(float),
        "grid_y": rng.uniform(0, 1, n), "block_x": rng.uniform(0, 1, n), "memory_stall": rng.uniform(0, 1, n),
    })  # fmt: skip
    df["kernel_variability"] = df["grid_x"] - df["grid_y"] + rng.uniform(0, 1, n)
    return df


def test_auto_features_exclude_ids_times_targets():
    feats, rejected = select_features(frame(), "kernel_variability", "kernel_name", "auto")
    assert feats == ["grid_x", "grid_y", "block_x"] and rejected == {}


def test_auto_features_leave_out_vendor_ids_times_and_duration_proxies():
    """Raw vendor columns kept by ingest must not become causes: they would explain the target by themselves."""
    df = frame()
    extra = ["gridId", "contextId", "globalPid", "DispatchNs", "CompleteNs", "queue-index", "tid", "Dispatch_ID",
             "gpu__time_duration.sum", "sm__cycles_elapsed.avg", "sq_cycles", "sq_busy_cycles"]
    for name in extra:
        df[name] = df["kernel_variability"] * 3.0 + 1.0
    df["sig"] = "0x1"  # text: neither a feature nor worth reporting
    df["tcp_pending_stall"] = df["grid_x"] * 2.0
    df["dram__bytes_read.sum"] = df["grid_y"] * 5.0
    feats, rejected = select_features(df, "kernel_variability", "kernel_name", "auto")
    assert feats == ["grid_x", "grid_y", "block_x", "tcp_pending_stall", "dram__bytes_read.sum"]
    assert sorted(rejected) == sorted(extra)
    assert "duration in another unit" in rejected["sq_cycles"] and "identifier" in rejected["gridId"]
    explicit, _ = select_features(df, "kernel_variability", None, "grid_x,sq_cycles")
    assert explicit == ["grid_x", "sq_cycles"]  # listing a proxy keeps it


def test_explicit_features_keep_order_and_reject_non_numeric():
    feats, rejected = select_features(frame(), "kernel_variability", None, "block_x, grid_x,kernel_name")
    assert feats == ["block_x", "grid_x"] and "kernel_name" in rejected
    with pytest.raises(GpuvarError, match="nope"):
        select_features(frame(), "kernel_variability", None, "grid_x,nope")


def test_groups_and_all():
    preps, _ = prepare_all(frame(120), "kernel_variability", "kernel_name", "auto", min_rows=30)
    assert [p.group for p in preps] == ["k<a>(int)", "k_b", ALL_GROUP]
    assert all(p.data is not None and list(p.data.columns)[-1] == "kernel_variability" for p in preps)
    z = preps[-1].data.to_numpy()
    assert np.allclose(z.mean(axis=0), 0) and np.allclose(z.std(axis=0), 1)


def test_missing_target_is_an_error():
    with pytest.raises(GpuvarError, match="target column 'nope'"):
        prepare_all(frame(), "nope")


def test_one_row_is_a_skip():
    p = prepare_group(frame(1), "g", "kernel_variability", ["grid_x", "grid_y"], min_rows=30)
    assert p.data is None and "min_rows" in p.skip_reason and p.record()["status"] == "skipped"


def test_constant_features_skip_with_reason():
    df = frame()
    df["grid_x"] = 3.0
    df["grid_y"] = 1.0
    p = prepare_group(df, "g", "kernel_variability", ["grid_x", "grid_y"], min_rows=30)
    assert p.data is None and "no usable feature" in p.skip_reason
    assert p.dropped_columns == {"grid_x": "constant", "grid_y": "constant"}


def test_nan_inf_rows_dropped_and_counted():
    df = frame(80)
    df.loc[[1, 2], "grid_y"] = np.nan
    df.loc[5, "kernel_variability"] = np.inf
    df["all_nan"] = np.nan
    p = prepare_group(df, "g", "kernel_variability", ["grid_x", "grid_y", "all_nan"], min_rows=30)
    assert p.rows_used == 77 and p.rows_dropped == {"non_finite": 3}  # the books balance: 80 = 77 + 3
    assert p.non_finite_by_column == {"grid_y": 2, "kernel_variability": 1}
    assert p.dropped_columns["all_nan"] == "all values missing"
    assert np.isfinite(p.data.to_numpy()).all()


def test_collinear_and_duplicate_columns_dropped_first_kept():
    df = frame(80)
    df["grid_x_copy"] = df["grid_x"]
    df["neg_grid_y"] = -2 * df["grid_y"] + 1
    df["combo"] = df["grid_x"] + df["block_x"]
    df["leak"] = 3 * df["kernel_variability"]
    feats = ["grid_x", "grid_y", "block_x", "grid_x_copy", "neg_grid_y", "combo", "leak"]
    p = prepare_group(df, "g", "kernel_variability", feats, min_rows=30)
    assert p.features == ["grid_x", "grid_y", "block_x"]
    assert p.dropped_columns["grid_x_copy"].startswith("duplicate of grid_x")
    assert p.dropped_columns["neg_grid_y"].startswith("collinear with grid_y")
    assert p.dropped_columns["combo"] == "exact linear combination of earlier columns"
    assert p.dropped_columns["leak"].startswith("collinear with the target")


def test_more_features_than_rows_is_a_skip():
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.laplace(size=(8, 12)), columns=[f"f{i}" for i in range(12)])
    df["t"] = rng.laplace(size=8)
    p = prepare_group(df, "g", "t", [f"f{i}" for i in range(12)], min_rows=2)
    assert p.data is None and "variables >=" in p.skip_reason


def test_constant_target_is_a_skip():
    df = frame()
    df["kernel_variability"] = 0.0
    p = prepare_group(df, "g", "kernel_variability", ["grid_x"], min_rows=30)
    assert p.skip_reason == "target is constant"


def test_group_slug_safe_and_deterministic():
    a = group_slug("void k<float, 3>(float*, int) / ../x")
    assert a == group_slug("void k<float, 3>(float*, int) / ../x")
    assert "/" not in a and ".." not in a and len(a) <= 49
    assert group_slug("a b") != group_slug("a_b")
