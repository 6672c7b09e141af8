"""Context columns (gpuvar.ingest.context): exact on tiny timelines, find a planted copy, and the real one."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import real_file

from gpuvar.causal.collinear import merge_near_duplicates
from gpuvar.causal.prior import prior_knowledge
from gpuvar.causal.roles import role_of
from gpuvar.demo.planted_context import planted
from gpuvar.ingest import load
from gpuvar.ingest.context import context_columns

CONTENTION = "pytorch-kineto-trace/h100-fixed-shape-copy-contention"


def kernels(rows, **extra) -> pd.DataFrame:
    """rows: (device, stream, start, end); extra columns by keyword."""
    frame = pd.DataFrame(rows, columns=["device_id", "stream_id", "start", "end"]).astype("int64")
    return frame.assign(duration=frame["end"] - frame["start"], **extra)


def copies(rows, **extra) -> pd.DataFrame:
    """rows: (device, stream, start, end, bytes, kind)."""
    frame = pd.DataFrame(rows, columns=["device_id", "stream_id", "start", "end", "bytes", "copy_kind_name"])
    return frame.assign(**extra)


def r2(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    return 0.0 if x.std() == 0 or y.std() == 0 else float(np.corrcoef(x, y)[0, 1] ** 2)


def test_copy_overlap_is_half_open_whole_bytes_any_stream_same_device():
    k = kernels([(0, 7, 100, 200), (0, 7, 300, 400), (1, 7, 100, 200)])
    m = copies(
        [
            (0, 17, 50, 100, 1, "DtoD"),  # ends as kernel 0 starts: no
            (0, 17, 200, 300, 2, "DtoD"),  # from kernel 0's end to kernel 1's start: neither
            (0, 7, 199, 301, 40, "HtoD"),  # same stream as the kernels, overlaps both by 1 ns: both, whole bytes
            (0, 9, 350, 360, 500, "DtoH"),  # inside kernel 1
            (1, 17, 0, 1000, 7000, "DtoD"),  # device 1 only
            (0, 9, 150, 160, 4, "Memset"),  # a memset: not a copy
        ]
    )
    c = context_columns(k, m)
    assert c["ctx_copy_active"].tolist() == [1.0, 1.0, 1.0]
    assert c["ctx_copy_bytes"].tolist() == [40.0, 540.0, 7000.0]
    assert c["ctx_memset_active"].tolist() == [1.0, 0.0, 0.0]


def test_no_copy_and_memset_kept_apart():
    k = kernels([(0, 7, 100, 200), (0, 7, 300, 400)])
    m = copies([(0, 7, 200, 300, 4, "Memset"), (0, 8, 390, 395, 4, "Memset")])
    c = context_columns(k, m)
    assert c["ctx_copy_active"].tolist() == [0.0, 0.0]
    assert c["ctx_copy_bytes"].tolist() == [0.0, 0.0]
    assert c["ctx_memset_active"].tolist() == [0.0, 1.0]


def test_rank_separates_timelines_and_a_null_rank_is_one_timeline():
    k = kernels([(0, 7, 100, 200), (0, 7, 100, 200), (0, 7, 100, 200)], rank=[0.0, 1.0, np.nan])
    m = copies([(0, 17, 150, 160, 8, "DtoD"), (0, 17, 150, 160, 16, "DtoD")], rank=[1.0, np.nan])
    c = context_columns(k, m)
    assert c["ctx_copy_bytes"].tolist() == [0.0, 8.0, 16.0]
    other = kernels([(0, 8, 150, 160), (0, 9, 150, 160)], rank=[0.0, 1.0])
    both = pd.concat([k, other], ignore_index=True)
    assert context_columns(both, m)["ctx_kernels_concurrent"].tolist() == [1.0, 1.0, 0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="rank"):
        context_columns(k, m.drop(columns="rank"))


def test_kernels_concurrent_counts_other_streams_of_the_device():
    k = kernels(
        [
            (0, 7, 100, 200),
            (0, 8, 150, 250),  # overlaps 0 and 2
            (0, 9, 199, 210),  # overlaps 0 and 1
            (0, 7, 200, 300),  # same stream as 0, touches it; overlaps 1 and 2 (other streams)
            (0, 8, 300, 400),  # touches 3 only: none
            (1, 9, 100, 400),  # other device: none
        ]
    )
    c = context_columns(k, None)
    assert c["ctx_kernels_concurrent"].tolist() == [2.0, 3.0, 3.0, 2.0, 0.0, 0.0]
    assert "ctx_copy_active" not in c and "ctx_step_offset_ns" not in c  # None: copies not recorded


def test_gap_is_to_the_previous_kernel_of_the_same_stream_and_device():
    k = kernels([(0, 7, 100, 200), (0, 8, 120, 130), (0, 7, 250, 300), (0, 7, 290, 310), (1, 7, 260, 270)])
    c = context_columns(k, pd.DataFrame(columns=["device_id", "stream_id", "start", "end", "bytes"]))
    np.testing.assert_array_equal(c["ctx_gap_ns"], [np.nan, np.nan, 50.0, -10.0, np.nan])
    assert c["ctx_copy_active"].tolist() == [0.0] * 5  # an empty copy table: no copy ran


def test_step_offset_from_the_first_kernel_of_the_step_per_device():
    k = kernels(
        [(0, 7, 500, 600), (0, 7, 100, 200), (0, 8, 300, 400), (1, 7, 1000, 1100), (0, 7, 900, 950), (0, 7, 5, 6)],
        step=[0.0, 0.0, 0.0, 0.0, 1.0, np.nan],
    )
    c = context_columns(k, None)
    np.testing.assert_array_equal(c["ctx_step_offset_ns"], [400.0, 0.0, 200.0, 0.0, 0.0, np.nan])


def test_null_timings_give_nan_and_count_for_no_one():
    k = pd.DataFrame(
        {
            "device_id": pd.array([0, 0, None], dtype="Int64"),
            "stream_id": [7, 8, 9],
            "start": pd.array([100, None, 100], dtype="Int64"),
            "end": pd.array([200, 300, 200], dtype="Int64"),
        }
    )
    m = copies([(0, 17, 120, 130, 8, "DtoD")])
    c = context_columns(k, m)
    for name, values in c.items():
        assert np.isnan(values[1:]).all(), name
        assert name == "ctx_gap_ns" or not np.isnan(values[0]), name  # row 0 is the first of its stream
    assert c["ctx_kernels_concurrent"][0] == 0.0
    # Nsight Compute: no timeline at all
    ncu = k.assign(start=pd.array([None] * 3, dtype="Int64"), end=pd.array([None] * 3, dtype="Int64"))
    assert context_columns(ncu, m) == {}
    assert context_columns(k.drop(columns=["start", "end"]), m) == {}
    empty = context_columns(k.iloc[:0], m)
    assert sorted(empty) == sorted(c) and all(len(v) == 0 for v in empty.values())


def test_zero_length_intervals():
    # a zero-length kernel inside a copy overlaps it; a zero-length copy at its instant does not
    k = kernels([(0, 7, 150, 150), (0, 7, 400, 500)])
    m = copies([(0, 17, 100, 200, 8, "DtoD"), (0, 17, 150, 150, 1, "DtoD"), (0, 17, 400, 400, 2, "DtoD")])
    c = context_columns(k, m)
    assert c["ctx_copy_bytes"].tolist() == [8.0, 0.0]  # [400, 400) starts the kernel but holds no time
    assert c["ctx_copy_active"].tolist() == [1.0, 0.0]


def test_a_kernel_on_an_unknown_stream_has_no_stream_columns_and_counts_for_no_one():
    k = kernels([(0, 7, 100, 200), (0, 7, 150, 250), (0, 8, 300, 400)])
    k["stream_id"] = pd.array([7, None, 8], dtype="Int64")
    c = context_columns(k, None)
    np.testing.assert_array_equal(c["ctx_kernels_concurrent"], [0.0, np.nan, 0.0])
    np.testing.assert_array_equal(c["ctx_gap_ns"], [np.nan, np.nan, np.nan])


def test_rows_keep_their_order_and_huge_time_ranges_agree():
    rng = np.random.default_rng(3)
    n = 400
    start = rng.choice(100_000, n, replace=False)  # unique: no ties for the gap's order
    k = kernels(np.column_stack([rng.integers(0, 2, n), rng.integers(0, 3, n), start, start + rng.integers(0, 900, n)]))
    k["step"] = k["start"] // 10_000
    cs = rng.integers(0, 100_000, 60)
    m = copies(
        list(
            zip(
                rng.integers(0, 2, 60),
                rng.integers(0, 3, 60),
                cs,
                cs + rng.integers(0, 3000, 60),
                rng.integers(1, 10**9, 60),
                rng.choice(["DtoD", "Memset", "HtoD"], 60),
            )
        )
    )
    base = context_columns(k, m)
    # brute force, row by row (the definition)
    for i in range(0, n, 37):
        s, e, d, st = k.loc[i, ["start", "end", "device_id", "stream_id"]]
        mm = m[(m.device_id == d) & (m.start < e) & (m.end > s)]
        assert base["ctx_copy_bytes"][i] == mm.loc[mm.copy_kind_name != "Memset", "bytes"].sum()
        assert base["ctx_memset_active"][i] == float((mm.copy_kind_name == "Memset").any())
        kk = k[(k.device_id == d) & (k.stream_id != st) & (k.start < e) & (k.end > s)]
        assert base["ctx_kernels_concurrent"][i] == len(kk)
    perm = rng.permutation(n)
    shuffled = context_columns(k.iloc[perm].reset_index(drop=True), m.sample(frac=1, random_state=1))
    for name in base:
        np.testing.assert_array_equal(shuffled[name], base[name][perm], err_msg=name)
    # device 1 moved 4e18 ns later: the keys fall back to ranks of times, same answers
    far = k.assign(start=k.start + 4 * 10**18 * k.device_id, end=k.end + 4 * 10**18 * k.device_id)
    mfar = m.assign(start=m.start + 4 * 10**18 * m.device_id, end=m.end + 4 * 10**18 * m.device_id)
    lone = copies([(7, 1, 9 * 10**18, 9 * 10**18 + 5, 1, "DtoD")])  # a device without kernels, far away
    moved = context_columns(far, pd.concat([mfar, lone], ignore_index=True))
    for name in base:
        np.testing.assert_array_equal(moved[name], base[name], err_msg=name)


def test_planted_copy_is_found_on_the_first_kernel_only():
    k, m, truth = planted(steps=300, seed=5)
    c = pd.DataFrame(context_columns(k, m))
    first = (k.kernel_name == "planted_first_rng").to_numpy()
    flag = c.loc[first, "ctx_copy_active"].to_numpy()
    np.testing.assert_array_equal(flag, truth["copy"].to_numpy())
    assert 0.2 < flag.mean() < 0.4
    assert r2(flag, k.loc[first, "duration"]) > 0.95
    for name in ("planted_gemm", "planted_add", "planted_norm"):
        rows = (k.kernel_name == name).to_numpy()
        assert (c.loc[rows, "ctx_copy_active"] == 0).all(), name  # the copy does not leak onto neighbours
        assert r2(truth["copy"], k.loc[rows, "duration"]) < 0.05, name  # and does not slow them
    # add and norm run together on two streams; the step offset places each kernel in its step
    assert c.loc[(k.kernel_name == "planted_norm").to_numpy(), "ctx_kernels_concurrent"].eq(1).all()
    assert c.loc[first, "ctx_step_offset_ns"].eq(0).all()
    assert c["ctx_memset_active"].eq(0).all()  # memsets follow the step's last kernel


def test_real_h100_contention_copy_explains_the_first_kernel():
    _, kt, mt = load(real_file(f"{CONTENTION}/fixedcontend.pt.trace.json.gz"))
    k, m = kt.to_pandas(), mt.to_pandas()
    truth = pd.read_csv(real_file(f"{CONTENTION}/truth.csv"))
    c = pd.DataFrame(context_columns(k, m))
    first = k.kernel_name.str.contains("distribution_elementwise|normal").to_numpy()
    rows = k.loc[first].sort_values("start").index  # one per step, in step order
    assert len(rows) == len(truth)
    flag = c.loc[rows, "ctx_copy_active"].to_numpy()
    assert r2(flag, k.loc[rows, "duration"]) >= 0.8
    assert abs(int(flag.sum()) - int(truth["contention_copy"].sum())) <= 3
    assert (flag == truth["contention_copy"].to_numpy()).mean() >= 0.97


def test_context_is_a_cause_tier_never_caused_by_counters_or_the_target():
    k, m, _ = planted(steps=40, seed=1)
    columns = list(context_columns(k, m))
    proxies = ("ctx_step_offset_ns", "ctx_gap_ns")  # carry the earlier kernels' durations: not causes
    assert {role_of(c).role for c in proxies} == {"leak"}
    causes = [c for c in columns if c not in proxies]
    names = [*causes, "grid_x", "dram__bytes_read.sum", "duration"]
    assert {role_of(n).role for n in causes} == {"context"} and len(causes) == 4
    pk = prior_knowledge(names, target=len(names) - 1)
    ctx, grid, counter, target = range(4), 4, 5, 6
    for c in ctx:
        assert pk[c, counter] == 0 and pk[c, target] == 0  # no path counter -> ctx, duration -> ctx
        assert pk[counter, c] == -1 and pk[target, c] == -1  # ctx may cause both
        assert pk[c, grid] == -1 and pk[grid, c] == -1  # same tier as the launch configuration
    # a counter that duplicates a context column is merged into the context column, which names the cause
    rng = np.random.default_rng(0)
    flag = rng.integers(0, 2, 200).astype(float)
    values = np.column_stack([flag + rng.normal(0, 0.01, 200), flag, rng.normal(size=200)])
    kept, merged, _ = merge_near_duplicates(values, ["lts__t_bytes.sum", "ctx_copy_active", "grid_x"], 0.95)
    assert kept == ["ctx_copy_active", "grid_x"] and "ctx_copy_active" in merged


def test_a_long_time_range_with_copies_on_a_device_without_kernels():
    # 2**60 ns on device 0 alone fits the key space, but not once device 1's copies count as a timeline
    k = kernels([(0, 7, 0, 100), (0, 7, 2**60, 2**60 + 100)])
    m = copies([(0, 17, 50, 60, 8, "DtoD")] + [(d, 17, 0, 2**60 + 100, 16, "DtoD") for d in range(1, 6)])
    assert context_columns(k, m)["ctx_copy_bytes"].tolist() == [8.0, 0.0]


def test_bench_context_runs(run_cli):
    result = run_cli("bench", "context", "--rows", "2000", "--repeat", "1")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["kernel_rows"] == 2000 and out["memcpy_rows"] == 1000 and len(out["columns"]) == 6
    assert 0 < out["kernels_with_copy_active"] < 2000 and out["best_s"] > 0
