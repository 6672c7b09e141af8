"""Preparation: feature selection, dropped rows/columns with reasons, skip records for degenerate groups."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuvar.causal.options import causal_options as opts
from gpuvar.causal.prepare import group_slug, prepare_all, prepare_group, select_features
from gpuvar.errors import GpuvarError
from gpuvar.layout import ALL_GROUP


def frame(n=60, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "kernel_name": np.where(np.arange(n) % 2 == 0, "k<a>(int)", "k_b"),
            "start": np.arange(n) * 10,
            "end": np.arange(n) * 10 + 5,
            "duration": np.full(n, 5),
            "correlation_id": np.arange(n),
            "grid_x": rng.integers(1, 64, n).astype(float),
            "grid_y": rng.uniform(0, 1, n),
            "block_x": rng.uniform(0, 1, n),
            "memory_stall": rng.uniform(0, 1, n),
        }
    )
    df["kernel_variability"] = df["grid_x"] - df["grid_y"] + rng.uniform(0, 1, n)
    return df


def test_auto_features_exclude_ids_times_targets():
    feats, rejected = select_features(frame(), "kernel_variability", "kernel_name", "auto")
    assert feats == ["grid_x", "grid_y", "block_x"] and rejected == {}


def test_auto_features_leave_out_vendor_ids_times_and_duration_proxies():
    """Raw vendor columns kept by ingest must not become causes: they would explain the target by themselves."""
    df = frame()
    extra = [
        "gridId",
        "contextId",
        "globalPid",
        "DispatchNs",
        "CompleteNs",
        "queue-index",
        "tid",
        "Dispatch_ID",
        "gpu__time_duration.sum",
        "sm__cycles_elapsed.avg",
        "sq_cycles",
        "sq_busy_cycles",
    ]
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
    preps, _ = prepare_all(frame(120), opts(target="kernel_variability"))
    assert [p.group for p in preps] == ["k<a>(int)", "k_b", ALL_GROUP]
    assert all(p.data is not None and list(p.data.columns)[-1] == "kernel_variability" for p in preps)
    z = preps[-1].data.to_numpy()
    assert np.allclose(z.mean(axis=0), 0) and np.allclose(z.std(axis=0), 1)


def test_missing_target_is_an_error():
    with pytest.raises(GpuvarError, match="target column 'nope'"):
        prepare_all(frame(), opts(target="nope"))


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


def test_near_duplicates_merge_into_the_launch_parameter():
    """A counter that duplicates grid_x (corr ~0.99) is merged into grid_x, even when it comes first."""
    df = frame(200)
    rng = np.random.default_rng(1)
    df.insert(0, "dram_bytes", df["grid_x"] * 32 + rng.normal(0, 150, len(df)))
    df["neg_grid_y"] = -2 * df["grid_y"] + 1
    feats = ["dram_bytes", "grid_x", "grid_y", "block_x", "neg_grid_y"]
    p = prepare_group(df, "g", "kernel_variability", feats, min_rows=30)
    assert p.features == ["grid_x", "grid_y", "block_x"]
    assert p.dropped_columns["dram_bytes"].startswith("near-duplicate of grid_x (corr +")
    assert p.dropped_columns["neg_grid_y"].startswith("near-duplicate of grid_y (corr -1.000)")
    assert p.label("grid_x") == "grid_x (≈ dram_bytes)" and p.label("block_x") == "block_x"
    assert p.record()["merged_near_duplicates"]["grid_y"][0]["column"] == "neg_grid_y"
    assert 1 <= p.condition_number < 2  # what is left is well conditioned
    loose = prepare_group(df, "g", "kernel_variability", feats, min_rows=30, collinear_threshold=0.999)
    assert "dram_bytes" in loose.features  # below the threshold: kept


def test_exact_combinations_and_target_copies_dropped():
    df = frame(80)
    df["combo"] = df["grid_y"] + df["block_x"]  # pairwise corr ~0.7: only the exact check finds it
    df["leak"] = 3 * df["kernel_variability"]
    p = prepare_group(df, "g", "kernel_variability", ["grid_y", "block_x", "combo", "leak"], min_rows=30)
    assert p.features == ["grid_y", "block_x"]
    assert p.dropped_columns["combo"] == "exact linear combination of earlier columns"
    assert p.dropped_columns["leak"].startswith("collinear with the target")


def test_derived_product_dropped_when_components_present():
    df = frame(80)
    df["grid_z"] = np.where(np.arange(80) % 3 == 0, 2.0, 1.0)
    df["grid_size"] = df["grid_x"] * df["grid_z"]
    p = prepare_group(df, "g", "kernel_variability", ["grid_size", "grid_x", "grid_z", "grid_y"], min_rows=30)
    assert "grid_size" not in p.features and p.dropped_columns["grid_size"].startswith("derived: product grid_x")
    alone = prepare_group(df, "g", "kernel_variability", ["grid_size", "grid_z", "grid_y"], min_rows=30)
    assert alone.features == ["grid_size"]  # grid_x varies but is not listed: the product carries it
    assert alone.dropped_columns["grid_z"].startswith("a factor of grid_size")
    assert alone.dropped_columns["grid_y"].startswith("a factor of grid_size")


def test_categorical_columns_become_indicators_independent_of_codes():
    rng = np.random.default_rng(2)
    n = 300
    kind = rng.choice([1, 2, 8], size=n, p=[0.5, 0.3, 0.2])
    df = pd.DataFrame({"linked_copy_kind": kind.astype(float), "grid_x": rng.uniform(0, 1, n)})
    df["memory_stall"] = np.where(kind == 2, 1.0, 0.0) + df["grid_x"] + rng.exponential(0.3, n)
    p = prepare_group(df, "g", "memory_stall", ["linked_copy_kind", "grid_x"], min_rows=30)
    assert p.features == ["linked_copy_kind=DtoH", "linked_copy_kind=DtoD", "grid_x"]
    assert p.categories["linked_copy_kind"]["reference"] == "HtoD"
    swapped = df.assign(linked_copy_kind=df["linked_copy_kind"].map({1.0: 1.0, 2.0: 8.0, 8.0: 2.0}))
    q = prepare_group(swapped, "g", "memory_stall", ["linked_copy_kind", "grid_x"], min_rows=30)
    assert q.features == ["linked_copy_kind=DtoD", "linked_copy_kind=DtoH", "grid_x"]
    assert np.array_equal(p.data.to_numpy(), q.data.to_numpy())  # same numbers, only the names follow the codes


def test_whole_trace_group_is_centred_within_kernels():
    """An effect inside every kernel survives kernels whose feature levels differ a lot."""
    rng = np.random.default_rng(3)
    n = 400
    kernel = np.where(np.arange(n) % 2 == 0, "a", "b")
    x = rng.uniform(0, 1, n) + np.where(kernel == "a", 0.0, 50.0)
    df = pd.DataFrame(
        {"kernel_name": kernel, "dynamic_shared_memory": x, "registers_per_thread": np.where(kernel == "a", 32.0, 64.0)}
    )
    df["kernel_variability"] = (x - np.where(kernel == "a", 0.5, 50.5)) + rng.exponential(0.2, n)
    preps, _ = prepare_all(df, opts(target="kernel_variability"))
    whole = preps[-1]
    assert whole.group == ALL_GROUP and whole.centred_within == 2
    assert whole.features == ["dynamic_shared_memory"]
    assert "kernel identity" in whole.dropped_columns["registers_per_thread"]
    assert np.corrcoef(whole.data["dynamic_shared_memory"], whole.data["kernel_variability"])[0, 1] > 0.7


def test_copy_columns_left_out_of_kernel_variability():
    df = frame(80)
    df["linked_copy_bytes"] = np.where(np.arange(80) % 4 == 0, np.nan, 1024.0 * np.arange(80))
    df["linked_copy_kind"] = np.where(np.arange(80) % 4 == 0, np.nan, 1.0)
    preps, rejected = prepare_all(df, opts(target="kernel_variability", group_by=None))
    assert "memory_stall only" in rejected["linked_copy_bytes"] and preps[-1].rows_used == 80
    preps, rejected = prepare_all(
        df.rename(columns={"kernel_variability": "x"}).assign(memory_stall=df["kernel_variability"]),
        opts(target="memory_stall", group_by=None, features="linked_copy_bytes,grid_x"),
    )
    assert preps[-1].rows_dropped == {"non_finite": 20}


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


def test_auto_features_keep_the_input_size_columns_as_launch_causes():
    """op_* (gpuvar.ingest.shapes: the launching op's input sizes) are set by the program: auto features keep
    them, in the launch tier (a counter or the duration cannot cause them), not categorical."""
    from gpuvar.causal.roles import role_of
    from gpuvar.ingest.shapes import SIZE_COLUMNS

    df = frame()
    for i, name in enumerate(SIZE_COLUMNS):
        df[name] = df["grid_x"] * (i + 2.0)
    feats, rejected = select_features(df, "kernel_variability", "kernel_name", "auto")
    assert feats == ["grid_x", "grid_y", "block_x", *SIZE_COLUMNS] and rejected == {}
    roles = {c: (role_of(c).role, role_of(c).tier, role_of(c).categorical) for c in SIZE_COLUMNS}
    assert roles.pop("op_flops") == ("derived", 0, False)  # 2 M N K batch: a product of its factors
    assert set(roles.values()) == {("launch", 0, False)}
    assert role_of("op_flops").components == ("op_m", "op_n", "op_k", "op_batch")
