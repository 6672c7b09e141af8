"""The causal stage on real traces: every graph carries its assumption checks, and no confident claim is
made that the checks contradict (no |total effect| > 3 SD per SD in a trusted graph, no product analysed
next to its factors, copy-link gaps never cost kernel_variability rows)."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from conftest import real_file

from gpuvar.causal.discover import discover_all
from gpuvar.causal.options import causal_options as opts
from gpuvar.ingest import ingest

CASES = [
    ("nsys-sqlite/nsys-ai-mfu-2gpu-before-after/mfu_2gpu_before.sqlite", "kernel_variability"),
    ("nsys-sqlite/nsys-ai-mfu-2gpu-before-after/mfu_2gpu_before.sqlite", "memory_stall"),
    ("nsys-sqlite/nsys-ai-mfu-2gpu-before-after/mfu_2gpu_after.sqlite", "kernel_variability"),
    ("rocprof-v1-csv/llamacpp-rdna4-r9700/results.csv", "kernel_variability"),
]


@pytest.mark.parametrize("relative,target", CASES)
def test_real_graphs_carry_checks_and_no_unflagged_blow_up(tmp_path, relative, target):
    source = real_file(relative)
    ingest(source, tmp_path / "ingest")
    cmd = [
        sys.executable,
        "-m",
        "gpuvar.cli",
        "bin",
        str(tmp_path / "ingest" / "kernels.parquet"),
        "--target",
        target,
        "--top-k",
        "20",
        "-o",
        str(tmp_path / "bin"),
    ]
    if (tmp_path / "ingest" / "memcpy.parquet").exists():
        cmd[5:5] = ["--memcpy", str(tmp_path / "ingest" / "memcpy.parquet")]
    subprocess.run(cmd, check=True, capture_output=True)
    rows = pd.read_parquet(tmp_path / "bin" / "topk_rows.parquet")
    sample = pd.read_parquet(tmp_path / "bin" / "sample_rows.parquet")
    summary = discover_all(rows, opts(target=target, bootstrap=0), tmp_path / "causal", random_rows=sample)
    ok = [g for g in summary["groups"] if g["status"] == "ok"]
    assert ok, "the real trace should give at least one graph"
    assert set(summary["flagged"]) == {g["group"] for g in ok if not g["trusted"]}
    for g in ok:
        rec = json.loads((tmp_path / "causal" / g["slug"] / "causal.json").read_text())
        assert {"r2_parents", "sink", "independence", "non_gaussianity", "total_effects", "conditioning"} <= set(
            rec["checks"]
        )
        if rec["checks"]["total_effects"]["max_abs"] > 3:
            assert rec["trusted"] is False and rec["warnings"]
        feats = set(rec["features"])
        assert not ({"grid_size", "grid_x"} <= feats or {"workgroup_size", "block_x"} <= feats)
        if target == "kernel_variability":
            # only launches outside every step lose a feature: their step's size (step_threads) is unknown
            assert set(rec["non_finite_by_column"]) <= {"step_threads"}
            assert rec["rows_dropped"].get("non_finite", 0) == rec["non_finite_by_column"].get("step_threads", 0)
            assert not any(f.startswith("linked_copy") for f in feats)
