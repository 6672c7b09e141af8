"""`gpuvar compare` on real Nsight Systems pairs (skipped when the real files are absent): a before/after fix of a
2-GPU PyTorch job, and two runs of one nvFuser program on the same H200 (where nothing may be flagged)."""

from __future__ import annotations

import json

from conftest import real_file

from gpuvar.compare.run import Options, Run, compare_runs
from gpuvar.ingest import ingest

BEFORE_AFTER = "nsys-sqlite/nsys-ai-mfu-2gpu-before-after"


def _compare(tmp_path, baseline: str, candidate: str):
    runs = []
    for name, rel in (("baseline", baseline), ("candidate", candidate)):
        ingest(real_file(rel), tmp_path / name)
        runs.append(Run(name, tmp_path / name))
    return compare_runs(*runs, tmp_path / "out", Options(bootstrap=1000, formats=("png",)))


def test_before_after_fix_flags_the_gemms_that_got_slower(tmp_path):
    record = _compare(tmp_path, f"{BEFORE_AFTER}/mfu_2gpu_before.sqlite", f"{BEFORE_AFTER}/mfu_2gpu_after.sqlite")
    s = record["summary"]
    assert (s["kernels"], s["in_both"], s["added"], s["removed"]) == (27, 27, 0, 0)
    for side, rows in (("baseline", 4010), ("candidate", 3587)):  # every kernel of the exports is accounted for
        assert record[side]["rows_in"] == record[side]["rows_used"] == rows
    kernels = {k["key"]: k for k in record["kernels"]}
    slower = {k for k, v in kernels.items() if v["verdict"] == "slower"}
    gemms = {k for k in kernels if k.startswith("nvjet_tst_192x19") or k.startswith("nvjet_tst_192x208")}
    assert gemms and gemms <= slower, slower
    for k in gemms:  # a 1-2 % slowdown with an interval excluding 1: beyond run-to-run noise
        assert 1.0 < kernels[k]["ci_low"] <= kernels[k]["ratio"] <= kernels[k]["ci_high"] < 1.03, kernels[k]
    assert s["faster"] == 0
    impacts = [abs(k["impact_ns"]) for k in record["kernels"]]
    assert impacts == sorted(impacts, reverse=True)  # the list reads in order of what the change costs
    on_disk = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert on_disk["summary"] == s and (tmp_path / "out" / "forest.png").stat().st_size > 10_000


def test_two_runs_on_the_same_h200_show_no_significant_change(tmp_path):
    record = _compare(
        tmp_path,
        "nsys-sqlite/nvfuser-matmul-h200/report1.sqlite",
        "nsys-sqlite/nvfuser-matmul-h200-run2/report2.sqlite",
    )
    s = record["summary"]
    assert s["slower"] == s["faster"] == s["added"] == s["removed"] == 0, s
    # every kernel runs 1-3 times: too few to judge, so each is reported untested, never "unchanged"
    assert s["tested"] == 0 and s["untested"] == s["in_both"] == 15
    assert 0.95 < s["total_time_ratio"] < 1.05


def test_h200_against_h100_lists_the_gemm_cublas_swapped_as_added_and_removed(tmp_path):
    record = _compare(
        tmp_path, "nsys-sqlite/nvfuser-matmul-h200/report1.sqlite", "nsys-sqlite/nvfuser-matmul-h100/report1.sqlite"
    )
    kernels = {k["key"]: k["verdict"] for k in record["kernels"]}
    assert kernels["nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT"] == "removed"
    assert kernels["nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN"] == "added"
