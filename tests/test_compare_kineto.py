"""`gpuvar compare` on real Kineto structure (H100 traces recorded for this project; skipped when absent).

Two runs of one program are the two halves of one recording's steps (demo/kineto_split.py): same binary, same
input distribution, real step-to-step contention. The acceptance of the compare issue: nothing flagged on such a
pair at the default 2 % floor; a planted 3 % slowdown of one kernel flagged, and only it; Δ total time equal to
the difference of the runs' kernel + copy time, computed here from the tables."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import real_file

from gpuvar.compare.run import Run, compare_runs
from gpuvar.compare.settings import CompareSettings
from gpuvar.demo.kineto_split import split
from gpuvar.ingest import ingest

FIXED = "pytorch-kineto-trace/h100-fixed-shape-copy-contention/fixedcontend.pt.trace.json.gz"
VARLEN = "pytorch-kineto-trace/h100-varlen-transformer-block/varlen.pt.trace.json.gz"
GELU = "GeluCUDAKernelImpl"


def _pair(folder, trace: str, **slow):
    folder.mkdir(parents=True)
    plan = split(real_file(trace), folder / "a.json.gz", folder / "b.json.gz", **slow)
    for side in "ab":
        ingest(folder / f"{side}.json.gz", folder / side)
    return plan, Run("first_half", folder / "a"), Run("second_half", folder / "b")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("kineto_pairs")
    return {
        "noise": _pair(root / "noise", FIXED),
        "gelu": _pair(root / "gelu", FIXED, slow_kernel=GELU, factor=1.03),
        "varlen": _pair(root / "varlen", VARLEN),
    }


def _gpu_time(run: Run) -> float:
    return float(sum(pd.read_parquet(run.ingest / t, columns=["duration"])["duration"].sum() for t in TABLES))


TABLES = ("kernels.parquet", "memcpy.parquet")


def test_two_halves_of_one_recording_flag_nothing_and_the_books_add_up(pairs, tmp_path):
    plan, base, cand = pairs["noise"]
    assert plan["baseline_steps"] == 150 and plan["candidate_steps"] == 151  # 301 synchronize calls
    record = compare_runs(base, cand, tmp_path / "out", CompareSettings(bootstrap=1000, formats=("png",)))
    s = record["summary"]
    assert s["slower"] == s["faster"] == 0, [(k["label"], k["ratio"]) for k in record["kernels"] if k["q_value"]]
    assert s["added"] == s["removed"] == 0 and s["tested"] == s["in_both"] == s["rows"]
    assert record["baseline"]["environment"]["resampling"]["unit"] == "step"
    assert record["warnings"] == []
    # Δ total = candidate − baseline kernel + copy + memset time, and the rows sum to it
    assert s["delta_total_ns"] == pytest.approx(_gpu_time(cand) - _gpu_time(base))
    kinds = {k["kind"] for k in record["kernels"]}
    assert kinds == {"kernel", "copy", "memset"}
    # the contention copies are compared like kernels: their count differs by chance between the halves, so
    # their Δ time is a launch-count change, not a per-launch one
    copy = next(k for k in record["kernels"] if k["key"] == "[memcpy DtoD]")
    assert abs(copy["delta_count_ns"]) > abs(copy["delta_rate_ns"])


def test_a_planted_three_percent_slowdown_of_one_kernel_is_found_and_only_it(pairs, tmp_path):
    plan, base, cand = pairs["gelu"]
    assert plan["launches_slowed"] == 150
    record = compare_runs(base, cand, tmp_path / "out", CompareSettings(bootstrap=1000, formats=("png",)))
    flagged = [k for k in record["kernels"] if k["verdict"] in ("slower", "faster")]
    assert [k["verdict"] for k in flagged] == ["slower"], [(k["label"], k["verdict"]) for k in flagged]
    gelu = flagged[0]
    assert GELU in gelu["key"] and 1.025 < gelu["ci_low"] <= gelu["ratio"] <= gelu["ci_high"] < 1.035
    # named by its launching op, the distinguishing part of the kernel name kept
    assert gelu["label"].startswith("aten::gelu → ") and GELU in gelu["label"]
    assert gelu["hint"] == ""  # same launch configurations: the same work got slower
    assert record["summary"]["delta_slower_ns"] == pytest.approx(gelu["delta_total_ns"]) and gelu["delta_total_ns"] > 0


def test_the_launch_op_key_keeps_gelu_apart_from_other_elementwise_kernels(pairs, tmp_path):
    _, base, cand = pairs["gelu"]
    options = dict(bootstrap=500, formats=("png",))
    short = compare_runs(base, cand, tmp_path / "short", CompareSettings(key="kernel_short_name", **options))
    pooled = next(k for k in short["kernels"] if k["key"] == "vectorized_elementwise_kernel")
    assert pooled["verdict"] != "slower"  # GELU's 3 % drowns among add and mul launches of the same template
    by_op = compare_runs(base, cand, tmp_path / "op", CompareSettings(key="launch_op", **options))
    slower = [k["key"] for k in by_op["kernels"] if k["verdict"] == "slower"]
    assert len(slower) == 1 and slower[0].startswith("aten::gelu → ") and GELU in slower[0]


def test_kernels_flagged_between_halves_of_a_variable_length_run_say_their_inputs_changed(pairs, tmp_path):
    """Sequence lengths are drawn per step: a kernel's median differs between the halves when it ran on other
    shapes. Any kernel called slower or faster must say so (hint), never read as the same work at another speed."""
    _, base, cand = pairs["varlen"]
    record = compare_runs(base, cand, tmp_path / "out", CompareSettings(bootstrap=1000, formats=("png",)))
    flagged = [k for k in record["kernels"] if k["verdict"] in ("slower", "faster")]
    assert all(k["hint"] for k in flagged), [(k["label"], k["ratio"], k["hint"]) for k in flagged]
    assert any(k["hint"] for k in record["kernels"])
