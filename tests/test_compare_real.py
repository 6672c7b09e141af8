"""`gpuvar compare` on real Nsight Systems pairs (skipped when the real files are absent): a before/after fix of a
2-GPU PyTorch job, and two runs of one nvFuser program on the same H200 (where nothing may be flagged)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import real_file

from gpuvar.compare.run import Run, compare_runs
from gpuvar.compare.settings import CompareSettings
from gpuvar.ingest import ingest

BEFORE_AFTER = "nsys-sqlite/nsys-ai-mfu-2gpu-before-after"
TABLES = ("kernels.parquet", "memcpy.parquet")


def _compare(tmp_path, baseline: str, candidate: str, **options):
    runs = []
    for name, rel in (("baseline", baseline), ("candidate", candidate)):
        ingest(real_file(rel), tmp_path / name)
        runs.append(Run(name, tmp_path / name))
    return compare_runs(*runs, tmp_path / "out", CompareSettings(bootstrap=1000, formats=("png",), **options))


def _gpu_time(folder) -> float:
    """Kernel + copy time of one ingest, summed straight from its tables."""
    return float(sum(pd.read_parquet(folder / t, columns=["duration"])["duration"].sum() for t in TABLES))


def test_before_after_fix_finds_the_gemms_that_got_slower_and_the_books_add_up(tmp_path):
    before, after = f"{BEFORE_AFTER}/mfu_2gpu_before.sqlite", f"{BEFORE_AFTER}/mfu_2gpu_after.sqlite"
    record = _compare(tmp_path, before, after)
    s = record["summary"]
    assert (s["rows"], s["in_both"], s["added"], s["removed"]) == (29, 29, 0, 0)  # 27 kernels, 2 copy kinds
    for side, rows in (("baseline", 4010 + 1020), ("candidate", 3587 + 904)):  # every launch and copy accounted for
        assert record[side]["rows_in"] == record[side]["rows_used"] == rows, record[side]
    # the total Δ is the difference of the two runs' kernel + copy time, computed here from the tables
    want = _gpu_time(tmp_path / "candidate") - _gpu_time(tmp_path / "baseline")
    assert s["delta_total_ns"] == pytest.approx(want) and want < 0
    kernels = {k["key"]: k for k in record["kernels"]}
    gemms = {k for k in kernels if k.startswith("nvjet_tst_192x19") or k.startswith("nvjet_tst_192x208")}
    for k in gemms:  # a 1-2 % slowdown with an interval excluding 1: real, but below the default 2 % floor
        assert 1.0 < kernels[k]["ci_low"] <= kernels[k]["ratio"] <= kernels[k]["ci_high"] < 1.03, kernels[k]
        assert kernels[k]["verdict"] == "negligible"
    assert s["slower"] == s["faster"] == 0
    deltas = [abs(k["delta_total_ns"]) for k in record["kernels"]]
    assert deltas == sorted(deltas, reverse=True)  # the list reads in order of the time that moved
    on_disk = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert on_disk["summary"] == s and (tmp_path / "out" / "forest.png").stat().st_size > 10_000
    # with a 1 % floor the two GEMMs are what got slower, and nothing else
    finer = _compare(tmp_path, before, after, min_effect=0.01)
    slower = {k["key"] for k in finer["kernels"] if k["verdict"] == "slower"}
    assert gemms and slower == gemms, slower


def test_two_runs_on_the_same_h200_show_no_significant_change(tmp_path):
    record = _compare(
        tmp_path,
        "nsys-sqlite/nvfuser-matmul-h200/report1.sqlite",
        "nsys-sqlite/nvfuser-matmul-h200-run2/report2.sqlite",
    )
    s = record["summary"]
    assert s["slower"] == s["faster"] == s["added"] == s["removed"] == 0, s
    # every kernel runs 1-3 times: too few to judge, so each is reported untested, never "unchanged"
    assert s["tested"] == 0 and s["untested"] == s["in_both"] == 16
    assert 0.95 < s["total_time_ratio"] < 1.05
    assert record["warnings"] == []  # same GPU model, clock, SM count, one rank each


def test_h200_against_h100_lists_the_gemm_cublas_swapped_as_added_and_removed(tmp_path):
    record = _compare(
        tmp_path, "nsys-sqlite/nvfuser-matmul-h200/report1.sqlite", "nsys-sqlite/nvfuser-matmul-h100/report1.sqlite"
    )
    kernels = {k["key"]: k["verdict"] for k in record["kernels"]}
    assert any("GPU models differ: baseline NVIDIA H200, candidate NVIDIA H100" in w for w in record["warnings"])
    assert kernels["nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT"] == "removed"
    assert kernels["nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN"] == "added"
