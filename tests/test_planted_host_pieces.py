"""The planted export with host tables (gpuvar.demo.planted_host_pieces) holds the traps its docstring lists, in the
row orders nsys writes, and the in-memory ingest places its launches as planted: op, occurrence, call index, '@t'
thread labels and steps from NVTX ranges, from cudaDeviceSynchronize and from the repeating launch pattern."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from gpuvar.demo import planted_host_pieces as planted
from gpuvar.demo.planted_host_pieces import (
    KERNEL_OPS,
    MIN_LOOPS,
    PID_A,
    PID_B,
    write_planted_host_export,
)
from gpuvar.demo.planted_host_scaled import write_scaled_host_export
from gpuvar.ingest import ingest
from gpuvar.ingest.nsys_pieces import PieceSettings

LOOPS = 24
IN_MEMORY = PieceSettings(above=None)


@pytest.fixture(scope="module", params=planted.STEP_MODES)
def export(request, tmp_path_factory) -> tuple[str, Path]:
    path = tmp_path_factory.mktemp(f"host-{request.param}") / "host.sqlite"
    return request.param, write_planted_host_export(path, loops=LOOPS, seed=5, steps=request.param)


@pytest.fixture(scope="module")
def ingested(export, tmp_path_factory) -> tuple[str, dict, pd.DataFrame, pd.DataFrame]:
    steps, path = export
    out = tmp_path_factory.mktemp(f"out-{steps}")
    report = ingest(path, out, pieces=IN_MEMORY)
    return steps, report, pd.read_parquet(out / "kernels.parquet"), pd.read_parquet(out / "memcpy.parquet")


def _query(path: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(path)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_same_seed_same_bytes(tmp_path):
    name = "host.sqlite"  # (the export records its file name)
    a = write_planted_host_export(tmp_path / "a" / name, loops=MIN_LOOPS, seed=2, steps="sync")
    b = write_planted_host_export(tmp_path / "b" / name, loops=MIN_LOOPS, seed=2, steps="sync")
    c = write_planted_host_export(tmp_path / "c" / name, loops=MIN_LOOPS, seed=3, steps="sync")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()
    s1 = write_scaled_host_export(tmp_path / "a" / "scaled.sqlite", 3_001, seed=1)
    s2 = write_scaled_host_export(tmp_path / "b" / "scaled.sqlite", 3_001, seed=1)
    assert s1.read_bytes() == s2.read_bytes()


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="steps"):
        write_planted_host_export(tmp_path / "x.sqlite", steps="ranges")
    with pytest.raises(ValueError, match="loops"):
        write_planted_host_export(tmp_path / "x.sqlite", loops=MIN_LOOPS - 1)
    assert not (tmp_path / "x.sqlite").exists()


def test_rows_are_stored_as_nsys_stores_them(export):
    _, path = export
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "NVTX_EVENTS"):
        starts = [r[0] for r in _query(path, f"SELECT start FROM {table} ORDER BY rowid")]
        assert starts == sorted(starts), table
    calls = _query(path, "SELECT globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY rowid")
    starts = [s for _, s in calls]
    assert starts != sorted(starts)  # per-thread buffers: not in start order as a whole...
    threads = {t for t, _ in calls}
    assert len(threads) == 3 and len({(t >> 24) & 0xFFFFFF for t in threads}) == 2
    for thread in threads:  # ...but each thread's calls are
        mine = [s for t, s in calls if t == thread]
        assert mine == sorted(mine)
    # at an equal start the shorter range is stored first (a child before its parent)
    pairs = _query(
        path,
        "SELECT a.rowid < b.rowid FROM NVTX_EVENTS a JOIN NVTX_EVENTS b ON a.start = b.start AND a.globalTid = "
        "b.globalTid AND a.end < b.end WHERE a.eventType = 59 AND b.eventType = 59",
    )
    assert pairs and all(p for (p,) in pairs)


def test_the_traps_are_in_the_file(export):
    steps, path = export
    q = lambda sql: _query(path, sql)  # noqa: E731
    has_call = (
        "EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId "
        "AND ((r.globalTid >> 24) & 16777215) = ((k.globalPid >> 24) & 16777215))"
    )
    assert q(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE k.correlationId IS NOT NULL AND NOT {has_call}")
    assert q(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE k.correlationId IS NOT NULL AND NOT {has_call}")[
        0
    ] == (1,)
    assert q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId IS NULL")[0] == (1,)
    assert q(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY k WHERE NOT {has_call}")[0] == (1,)
    assert q('SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE "end" < start')[0] == (2,)
    assert q('SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE "end" IS NULL')[0] == (1,)
    dup = "SELECT count(*) - count(DISTINCT start || '/' || correlationId || '/' || globalPid) FROM "
    assert q(dup + "CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId IS NOT NULL")[0] == (1,)
    # the same correlation ids in both processes
    of_b = f"SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE (globalTid >> 24) & 16777215 = {PID_B}"
    shared = q(
        "SELECT count(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE (globalTid >> 24) & 16777215 "
        f"= {PID_A} AND correlationId IN ({of_b})"
    )
    assert shared == q(f"SELECT count(DISTINCT correlationId) FROM ({of_b})") and shared[0][0] == 4 * LOOPS
    # one cudaGraphLaunch per iteration, three kernels sharing its correlation id
    graph = q(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId JOIN "
        "CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId AND (k.globalPid >> 24) = "
        "(r.globalTid >> 24) WHERE s.value = 'cudaGraphLaunch_v10000' GROUP BY r.rowid"
    )
    assert len(graph) == LOOPS and {n for (n,) in graph} == {3}
    # ties in call start between the main and the backward thread of process A, once per iteration
    ties = q(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME a JOIN CUPTI_ACTIVITY_KIND_RUNTIME b ON a.start = b.start "
        "AND a.globalTid < b.globalTid"
    )
    assert ties == [(LOOPS,)]
    # a range ending at the ns a call starts; a parent and a child starting at the same ns
    ends_at_call = q(
        "SELECT count(*) FROM NVTX_EVENTS n JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON n.end = r.start AND "
        "n.globalTid = r.globalTid WHERE n.eventType = 59"
    )
    assert ends_at_call[0][0] >= 2 * LOOPS
    kinds = {k for (k,) in q("SELECT DISTINCT eventType FROM NVTX_EVENTS")}
    assert kinds == {34, 59, 60, 75}
    assert q("SELECT count(*) FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE n.text IS NULL") == [
        (LOOPS,)
    ]
    step_ranges = q("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND text LIKE 'step %'")[0][0]
    syncs = q(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
        "WHERE s.value = 'cudaDeviceSynchronize_v3020'"
    )[0][0]
    assert (step_ranges, syncs) == {"nvtx": (LOOPS, 0), "sync": (0, LOOPS), "none": (0, 0)}[steps]


def test_deep_queue_puts_gpu_order_out_of_call_order(tmp_path):
    path = write_planted_host_export(tmp_path / "deep.sqlite", loops=40, seed=1, steps="none")
    lag = _query(
        path,
        "SELECT max(k.start - r.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON "
        "r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24) WHERE k.streamId = 7",
    )[0][0]
    iteration = _query(path, "SELECT (max(start) - min(start)) / 40 FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
    assert lag > 8 * iteration  # stream 7 runs many iterations behind its calls
    # rows in GPU start order: a graph kernel (stream 13) stored before a stream-7 kernel called earlier
    inverted = _query(
        path,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL a JOIN CUPTI_ACTIVITY_KIND_KERNEL b ON a.rowid < b.rowid "
        "AND a.globalPid = b.globalPid AND a.correlationId > b.correlationId + 200 "
        "WHERE a.streamId = 13 AND b.streamId = 7",
    )
    assert inverted[0][0] > 0


def test_in_memory_ingest_places_the_planted_launches(ingested):
    steps, report, k, m = ingested
    assert report["tables"]["kernels"]["dropped"] == {"end before start": 2, "null start/end timestamp": 1}
    assert report["tables"]["kernels"]["duplicate_rows"] == 1
    with_call = k["correlation_id"].notna()
    # every launch's op is the one planted for its kernel name, but the traps
    expected = k["kernel_name"].map(KERNEL_OPS)
    layer2_bias = (k["kernel_name"] == "bias_act_kernel") & (k["launch_op"] == "aten::addmm") & k["step"].notna()
    no_call = ~with_call | ((k["kernel_name"] == "relu_kernel") & k["launch_op"].isna())
    assert layer2_bias.sum() >= LOOPS - 3 and no_call.sum() == 2
    ok = k["launch_op"].fillna("-") == expected.fillna("-")
    ok |= (k["kernel_name"] == "bias_act_kernel") & (k["launch_op"] == "aten::addmm")
    assert ok[~no_call].all()
    assert k["launch_op"][no_call].isna().all()
    assert set(k.loc[layer2_bias, "call_site"]) == {"aten::addmm#2.1"}  # the range ends at the call's start: closed
    # threads numbered by first launch in a step: A's main thread, B's main thread, A's backward thread (without
    # markers A's first iteration starts after B's, past the launches before A's first anchor)
    main_a, main_b = ("t1", "t0") if steps == "none" else ("t0", "t1")
    sites = set(k["call_site"])
    threads = {f"aten::mm#0.0@{main_a}", f"aten::mm#0.0@{main_b}", "aten::mm#5.0@t2", f"aten::add_#0.0@{main_a}"}
    assert threads | {"aten::add_#2.0@t2"} <= sites
    for site in ("aten::relu#2.0", "aten::addmm#2.0", "aten::linear#1.0", "aten::nll_loss_nd#0.2"):
        assert site in sites
    assert {"CUDAGraph::replay#0.0", "CUDAGraph::replay#0.1", "CUDAGraph::replay#0.2"} <= sites
    assert "aten::linear#2.0" not in sites  # layer 2's bias launch went to aten::addmm
    notes = " | ".join(report["notes"])
    if steps == "none":
        count = int(notes.split(" iterations from the repeating launch pattern")[0].rsplit("| ", 1)[-1])
        per_process = k.groupby("process_id")["step"].nunique()
        # B's loop is found whole; A's with its prologue, the launches misplaced by GPU start (no call) and the
        # dropped rows around its anchor outside some iterations (the pattern search is a heuristic)
        assert per_process[PID_B] == LOOPS and per_process[PID_A] >= LOOPS - 3
        assert count == per_process.sum()
        return
    source = "NVTX step ranges" if steps == "nvtx" else f"cudaDeviceSynchronize ({LOOPS} calls)"
    assert f"{LOOPS} steps from {source}" in notes
    assert layer2_bias.sum() == LOOPS
    placed = k[k["step"].notna() & k["launch_op"].notna()]
    assert sorted(placed["step"].unique()) == list(range(LOOPS))
    per_step = placed.groupby("step")
    assert (per_step["kernel_name"].apply(lambda s: (s == "gemm_b_kernel").sum()) == 2).all()  # B's, by call time
    at = lambda step, name: set(placed.loc[(placed["step"] == step) & (placed["kernel_name"] == name), "call_site"])  # noqa: E731
    assert at(planted.KERNEL_WITHOUT_CALL_ITERATION, "relu_kernel") == {"aten::relu#0.0", "aten::relu#1.0"}
    assert at(planted.NULL_CORRELATION_ITERATION, "nll_loss_scale_kernel") == {"aten::nll_loss_nd#0.1"}
    assert at(planted.DUPLICATE_ITERATION, "bias_act_kernel") == {
        "aten::linear#0.0",
        "aten::linear#0.1",
        "aten::linear#1.0",
        "aten::addmm#2.1",
    }
    outside = k[k["step"].notna() & k["launch_op"].isna()]
    # elementwise_kernel, b_scale_kernel (and, placed by the syncs, the two launches without a call)
    assert set(outside["call_site"]) == {"step#0"}
    assert len(outside) == 2 * LOOPS + (0 if steps == "nvtx" else 2)
    # copies: their op and step through their call; the copy without a call has neither in nvtx mode
    assert (m["launch_op"].dropna() == "aten::copy_").all() and m["launch_op"].isna().sum() == 1
    assert m["step"].isna().sum() == (1 if steps == "nvtx" else 0)
    if steps == "nvtx":  # launches without a call have no step (steps are judged by the call's time)
        assert k["step"].isna().sum() == 2
    else:  # ...the segments between syncs place them by GPU start
        assert k["step"].notna().all()


def test_scaled_export_has_the_planted_shape(tmp_path):
    path = write_scaled_host_export(tmp_path / "scaled.sqlite", 2_005, seed=4)
    counts = {
        table: _query(path, f"SELECT count(*) FROM {table}")[0][0]
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME")
    }
    iterations = -(-2_005 // 10)
    assert counts == {
        "CUPTI_ACTIVITY_KIND_KERNEL": 2_005,
        "CUPTI_ACTIVITY_KIND_MEMCPY": 5 * iterations,
        "CUPTI_ACTIVITY_KIND_RUNTIME": 15 * iterations,
    }
    starts = [s for (s,) in _query(path, "SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid")]
    assert starts == sorted(starts)
    report = ingest(path, tmp_path / "out", pieces=IN_MEMORY)
    k = pd.read_parquet(tmp_path / "out" / "kernels.parquet")
    assert report["tables"]["kernels"]["rows_written"] == 2_005
    placed = k["kernel_name"].map(KERNEL_OPS)
    assert (k["launch_op"].fillna("-") == placed.fillna("-")).all()
    assert "iterations from the repeating launch pattern" in report["notes"][-1]
    assert json.loads((tmp_path / "out" / "ingest.json").read_text())["tables"]["memcpy"]["rows_written"] == 1_005
