"""Nsight Compute output this project recorded on an H100 (tests/data/recorded/h100-torch-ncu, see PROVENANCE.md).

One profiling run exported in both CSV layouts, so the two readers must agree launch by launch; the workload
varies one kernel's grid size on purpose, so the whole chain (ingest -> bin -> causal) must name grid_size as
what drives that kernel's duration variability.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import REPO

from gpuvar.ingest import ingest

RECORDED = REPO / "tests" / "data" / "recorded" / "h100-torch-ncu"
LAUNCHES = 394


@pytest.fixture(scope="module")
def both_layouts(tmp_path_factory):
    out = {}
    for layout in ("details", "raw"):
        folder = tmp_path_factory.mktemp(layout)
        report = ingest(RECORDED / f"{layout}.csv", folder)
        out[layout] = (report, pd.read_parquet(folder / "kernels.parquet"))
    return out


@pytest.mark.parametrize("layout", ["details", "raw"])
def test_every_launch_is_ingested(both_layouts, layout):
    report, kernels = both_layouts[layout]
    assert report["format"] == "ncu-csv"
    table = report["tables"]["kernels"]
    assert table["rows_read"] == table["rows_written"] == LAUNCHES and not table["dropped"]
    assert kernels["launch_id"].tolist() == list(range(LAUNCHES))
    assert kernels["duration"].notna().all() and (kernels["duration"] > 0).all()


def test_long_and_wide_layouts_agree_launch_by_launch(both_layouts):
    details, raw = both_layouts["details"][1], both_layouts["raw"][1]
    for column in ("kernel_name", "kernel_short_name", "grid_x", "block_x", "registers_per_thread"):
        assert details[column].tolist() == raw[column].tolist(), column
    # the details page prints values auto-scaled and rounded ('3.58 us', '2.07 Kbyte'); the raw page is exact
    for column in ("duration", "lds_per_workgroup"):
        gap = np.abs(details[column] - raw[column]) / raw[column].where(raw[column] > 0, 1)
        assert gap.max() < 3e-3, column


def test_pytorch_kernel_names_are_shortened_to_the_kernel_identifier(both_layouts):
    counts = both_layouts["raw"][1]["kernel_short_name"].value_counts()
    assert counts["vectorized_elementwise_kernel"] == 120
    assert counts["reduce_kernel"] == 120
    assert counts["softmax_warp_forward"] == 40
    assert counts["distribution_elementwise_grid_stride_kernel"] == 7
    assert not any(name in ("", "void") for name in counts.index)


def test_grid_size_drives_the_variable_elementwise_kernel(run_cli, tmp_path):
    """The workload runs vectorized_elementwise_kernel over 64..4096 blocks: a real cause the graph must find."""
    ingested, binned, causal = tmp_path / "ingest", tmp_path / "bin", tmp_path / "causal"
    assert run_cli("ingest", RECORDED / "raw.csv", "-o", ingested).returncode == 0
    proc = run_cli("bin", ingested / "kernels.parquet", "--bin-width", "1000", "--top-k", "1", "-o", binned)
    assert proc.returncode == 0, proc.stderr
    proc = run_cli(
        "causal",
        binned / "topk_rows.parquet",
        "--target",
        "kernel_variability",
        "--group-by",
        "kernel_short_name",
        "--features",
        "grid_size,registers_per_thread,dram__bytes_read.sum,lts__t_sector_hit_rate.pct",
        "--bootstrap",
        "0",
        "-o",
        causal,
    )
    assert proc.returncode == 0, proc.stderr
    groups = {g["group"]: g for g in json.loads((causal / "summary.json").read_text())["groups"]}
    top = groups["vectorized_elementwise_kernel"]["top_contributors"][0]
    assert (top["feature"], top["sign"]) == ("grid_size", 1)
    assert top["variance_share"] > 0.9
    assert groups["distribution_elementwise_grid_stride_kernel"]["status"] == "skipped"  # 7 rows < min_rows
